"""Media batches as the adapters decode them, and what the run does with them: concatenate, select, watch, save.

Three forms (``pipelines/base.py``), batch first, on any device:

* images: a tensor ``(B, 3, H, W)`` float in [0, 1];
* video: ``{"video": (B, F, 3, H, W) in [0, 1], "fps": float}``;
* audio: ``{"audio": (B, C, N) in [-1, 1], "sample_rate": int}``;
* audio_video (LTX-2): ``{"video", "fps", "audio", "sample_rate"}`` in one mapping.

Plain tensors of video ``(B, F, 3, H, W)`` and audio ``(B, C, N)`` / ``(B, N)`` are recognised by their rank,
as the rewards accept them. Every function here is pure apart from ``save_*``, which write files.

``unflatten(media, k)`` / ``flatten(media)`` view a batch of ``B K`` samples (sample-major) as ``B`` groups of
``K`` and back; a grouped batch is for storage only (``media_kind`` does not read it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from flowrl.configkit import NamedEnum


class MediaKind(NamedEnum):
    """What a batch is: one of the three forms above, or audio_video (LTX-2's video and sound in one mapping)."""

    IMAGE = "image"
    VIDEO = "video"
    AUDIO = "audio"
    AUDIO_VIDEO = "audio_video"

    @property
    def has_video(self) -> bool:
        return self in (MediaKind.VIDEO, MediaKind.AUDIO_VIDEO)

    @property
    def has_audio(self) -> bool:
        return self in (MediaKind.AUDIO, MediaKind.AUDIO_VIDEO)


KINDS = tuple(kind.value for kind in MediaKind)
RATE_KEYS = ("fps", "sample_rate")  # scalars a mapping carries along; batches must agree on them
SHEET_FRAMES = 8  # frames a video's row of the frame sheet shows
SHEET_SIDE = 256  # the longer side of a frame in the sheet (frames are shrunk to it, never enlarged)
MONITOR_FRAMES = 4  # frames of a video the image monitors look at
CLIP_LEVEL = 0.999  # |x| at or above it counts as clipped audio
SPECTRUM_FFT, SPECTRUM_HOP = 512, 128
SPECTRUM_SIZE = (64, 32)  # (frequency, time) cells a spectrogram is area-averaged to for the audio diversity


# ---------------------------------------------------------------------------------------------- forms
def media_kind(media: Any) -> MediaKind:
    """The ``MediaKind`` of a batch (a one-line ValueError for anything else)."""
    if isinstance(media, Mapping):
        has_video, has_audio = "video" in media, "audio" in media
        if has_video and has_audio:
            return MediaKind.AUDIO_VIDEO
        if has_video:
            return MediaKind.VIDEO
        if has_audio:
            return MediaKind.AUDIO
        raise ValueError(f"media mapping holds neither 'video' nor 'audio' (keys: {sorted(map(str, media))})")
    if isinstance(media, torch.Tensor):
        kind = {4: MediaKind.IMAGE, 5: MediaKind.VIDEO, 3: MediaKind.AUDIO, 2: MediaKind.AUDIO}.get(media.ndim)
        if kind is not None:
            return kind
        raise ValueError(
            f"media tensor of shape {tuple(media.shape)} is neither images (B, 3, H, W), video "
            "(B, F, 3, H, W) nor audio (B, C, N)"
        )
    raise ValueError(f"media must be a tensor or a mapping with 'video' / 'audio', got {type(media).__name__}")


def _batched(value: Any) -> bool:
    """Whether a mapping's value is batch data (a tensor with a batch dimension) rather than a rate."""
    return isinstance(value, torch.Tensor) and value.ndim > 0


def _tensors(media: Mapping) -> dict[str, torch.Tensor]:
    return {k: v for k, v in media.items() if _batched(v)}


def num_samples(media: Any) -> int:
    """B: the batch size of a tensor or of a mapping's tensors (which must agree)."""
    if isinstance(media, Mapping):
        sizes = {k: len(v) for k, v in _tensors(media).items()}
        if not sizes:
            raise ValueError("media mapping holds no tensor")
        if len(set(sizes.values())) > 1:
            raise ValueError(f"media mapping's tensors differ in batch size: {sizes}")
        return next(iter(sizes.values()))
    return len(media)


def _map(media: Any, fn) -> Any:
    """``fn`` applied to the tensor, or to every tensor of a mapping (other values kept)."""
    if isinstance(media, Mapping):
        return {k: fn(v) if _batched(v) else v for k, v in media.items()}
    return fn(media)


def cat_media(items: Sequence[Any]) -> Any:
    """The batches of ``items`` one after another. Mappings must hold the same keys and equal rates."""
    items = list(items)
    if not items:
        raise ValueError("cat_media: no media to concatenate")
    first = items[0]
    if not isinstance(first, Mapping):
        if any(isinstance(m, Mapping) for m in items):
            raise ValueError("cat_media: cannot concatenate a tensor batch with a media mapping")
        return torch.cat(list(items)) if len(items) > 1 else first
    keys = set(first)
    for other in items[1:]:
        if not isinstance(other, Mapping) or set(other) != keys:
            got = sorted(other) if isinstance(other, Mapping) else type(other).__name__
            raise ValueError(f"cat_media: cannot concatenate media with keys {sorted(keys)} and {got}")
        for key in keys:
            a, b = first[key], other[key]
            if not _batched(a) and bool(a != b):
                raise ValueError(f"cat_media: cannot concatenate media with different {key}: {a} and {b}")
    return {k: torch.cat([m[k] for m in items]) if _batched(v) else v for k, v in first.items()}


def select_media(media: Any, index: int | slice | Sequence[int] | torch.Tensor) -> Any:
    """Samples ``index`` of a batch (an int keeps the batch dimension: a batch of one; a bool mask its rows)."""
    if isinstance(index, int):
        index = [index]
    if isinstance(index, slice):
        return _map(media, lambda t: t[index])
    index = torch.as_tensor(index)
    index = (index.nonzero().flatten() if index.dtype == torch.bool else index).long()
    return _map(media, lambda t: t.index_select(0, index.to(t.device)))


def to_cpu(media: Any) -> Any:
    """The batch with every tensor on the CPU."""
    return _map(media, lambda t: t.cpu())


def unflatten(media: Any, k: int) -> Any:
    """A batch of ``B K`` samples (sample-major) -> ``B`` groups of ``K``: every tensor ``(B K, ...)`` -> ``(B, K, ...)``."""
    total = num_samples(media)
    if k < 1 or total % k:
        raise ValueError(f"unflatten: {total} samples are not groups of {k}")
    return _map(media, lambda t: t.view(total // k, k, *t.shape[1:]))


def flatten(media: Any) -> tuple[Any, int]:
    """Inverse of ``unflatten``: ``(B, K, ...)`` -> (``(B K, ...)``, K)."""
    tensors = [media] if not isinstance(media, Mapping) else list(_tensors(media).values())
    if not tensors or any(t.ndim < 2 for t in tensors) or len({tuple(t.shape[:2]) for t in tensors}) > 1:
        raise ValueError("flatten: expected grouped media whose tensors all start with (B, K)")
    k = tensors[0].shape[1]
    return _map(media, lambda t: t.flatten(0, 1)), int(k)


def video_of(media: Any) -> tuple[torch.Tensor, float | None]:
    """(B, F, 3, H, W) and the fps (None for a bare tensor) of video or audio_video media."""
    if isinstance(media, Mapping):
        return media["video"], media.get("fps")
    return media, None


def audio_of(media: Any) -> tuple[torch.Tensor, int | None]:
    """(B, C, N) and the sample rate (None for a bare tensor) of audio or audio_video media."""
    if isinstance(media, Mapping):
        wave, rate = media["audio"], media.get("sample_rate")
    else:
        wave, rate = media, None
    return (wave if wave.ndim == 3 else wave[:, None]), rate


def _frame_indices(num_frames: int, count: int) -> list[int]:
    from flowrl.reward_models.video import uniform_frame_indices

    return uniform_frame_indices(num_frames, count)


# ---------------------------------------------------------------------------------------------- monitors
def video_monitors(video: torch.Tensor, group_ids: torch.Tensor, frames: int = MONITOR_FRAMES) -> dict[str, float]:
    """The image monitors on ``frames`` uniformly chosen frames, averaged over them, and
    ``monitor/video/temporal_change``: the mean absolute difference of consecutive frames (0 for a still clip)."""
    from flowrl.reward_models.monitors import image_monitors

    picked = [image_monitors(video[:, i], group_ids) for i in _frame_indices(video.shape[1], frames)]
    out = {name: sum(m[name] for m in picked) / len(picked) for name in picked[0]}
    num_frames = video.shape[1]
    if num_frames < 2:
        out["monitor/video/temporal_change"] = 0.0
        return out
    total = 0.0
    for t in range(num_frames - 1):  # frame by frame: no second copy of the whole clip
        total += float((video[:, t + 1].float() - video[:, t].float()).abs().mean(dtype=torch.float64))
    out["monitor/video/temporal_change"] = total / (num_frames - 1)
    return out


def log_spectra(wave: torch.Tensor, size: tuple[int, int] = SPECTRUM_SIZE) -> torch.Tensor:
    """(B, C, N) -> (B, prod(size)): each clip's mono log-magnitude spectrogram ``log(1 + |STFT|)`` (Hann
    window of 512, hop 128), area-averaged to ``size`` (frequency, time) and scaled to unit RMS (0 for silence)."""
    mono = wave.float().mean(dim=1)  # (B, N)
    window = torch.hann_window(SPECTRUM_FFT, device=mono.device)
    spec = torch.stft(
        mono, SPECTRUM_FFT, SPECTRUM_HOP, window=window, center=True, pad_mode="constant", return_complex=True
    ).abs()  # (B, freq, time)
    small = F.adaptive_avg_pool2d(torch.log1p(spec)[:, None], size).flatten(1)  # (B, cells)
    rms = small.pow(2).mean(dim=1, keepdim=True).sqrt()
    return torch.where(rms > 1e-12, small / rms.clamp(min=1e-12), torch.zeros_like(small))


def audio_diversity(wave: torch.Tensor, group_ids: torch.Tensor) -> dict[str, float]:
    """``monitor/diversity/audio_in_group``: the mean pairwise RMS distance of members' ``log_spectra`` within a
    group, averaged over groups (0 when every member of a group sounds alike; at most 2); the group count as
    ``monitor/diversity/groups``."""
    spectra = log_spectra(wave)
    per_group = []
    for g in torch.unique(group_ids):
        members = spectra[(group_ids == g).to(spectra.device)]
        n = len(members)
        if n < 2:
            continue
        dist = torch.cdist(members.double(), members.double()) / members.shape[1] ** 0.5
        per_group.append(float(dist.sum() / (n * (n - 1))))
    mean = sum(per_group) / len(per_group) if per_group else 0.0
    return {"monitor/diversity/audio_in_group": mean, "monitor/diversity/groups": float(len(per_group))}


def audio_level_stats(wave: torch.Tensor, clip_level: float = CLIP_LEVEL) -> dict[str, float]:
    """Per clip RMS ``sqrt(mean x^2)`` and peak ``max |x|``, averaged over clips; the share of sample values with
    ``|x| >= clip_level`` (clipping, a loudness hack)."""
    x = wave.float().flatten(1)  # (B, C N)
    return {
        "monitor/audio/rms": float(x.pow(2).mean(dim=1).sqrt().mean()),
        "monitor/audio/peak": float(x.abs().amax(dim=1).mean()),
        "monitor/audio/clipped_frac": float((x.abs() >= clip_level).float().mean()),
    }


def audio_monitors(wave: torch.Tensor, group_ids: torch.Tensor) -> dict[str, float]:
    """Level statistics and in-group diversity of audio (B, C, N) in [-1, 1]."""
    return {**audio_diversity(wave, group_ids), **audio_level_stats(wave)}


def media_monitors(media: Any, group_ids: torch.Tensor) -> dict[str, float]:
    """The reward-hacking monitors of a batch, flat ``monitor/...`` names: images exactly ``image_monitors``;
    video ``video_monitors``; audio ``audio_monitors``; audio_video both (the video's group count kept)."""
    kind = media_kind(media)
    group_ids = torch.as_tensor(group_ids)
    if kind is MediaKind.IMAGE:
        from flowrl.reward_models.monitors import image_monitors

        return image_monitors(media, group_ids)
    out: dict[str, float] = {}
    if kind.has_audio:
        out.update(audio_monitors(audio_of(media)[0], group_ids))
    if kind.has_video:
        out.update(video_monitors(video_of(media)[0], group_ids))
    return out


def as_media_kind(kind: MediaKind | str) -> MediaKind:
    """``kind`` as a ``MediaKind``; a name none of them has is refused in one line."""
    if kind not in KINDS:
        raise ValueError(f"unknown media kind {kind!r}; expected one of {', '.join(KINDS)}")
    return MediaKind(kind)


def example_media(kind: MediaKind | str, n: int = 2) -> Any:
    """A small random batch of ``kind`` (for names and tests)."""
    kind = as_media_kind(kind)
    gen = torch.Generator().manual_seed(0)
    video = {"video": torch.rand(n, 3, 3, 8, 8, generator=gen), "fps": 8.0}
    audio = {"audio": torch.rand(n, 1, 1024, generator=gen) * 2 - 1, "sample_rate": 16000}
    if kind is MediaKind.IMAGE:
        return torch.rand(n, 3, 8, 8, generator=gen)
    return {**(video if kind.has_video else {}), **(audio if kind.has_audio else {})}


def monitor_names(kind: MediaKind | str) -> set[str]:
    """The names ``media_monitors`` gives for media of ``kind`` (for the trainer's list of logged metrics)."""
    return set(media_monitors(example_media(kind), torch.zeros(2, dtype=torch.long)))


# ---------------------------------------------------------------------------------------------- pictures
def frame_sheet(video: torch.Tensor, frames: int = SHEET_FRAMES, side: int | None = SHEET_SIDE) -> torch.Tensor:
    """(B, F, 3, H, W) -> (B K, 3, h, w): ``frames`` uniformly chosen frames of each clip, sample-major (one
    row per clip when saved with ``nrow=K``), shrunk so that the longer side is at most ``side``."""
    index = _frame_indices(video.shape[1], frames)
    picked = video[:, index].flatten(0, 1).float().cpu()
    h, w = picked.shape[-2:]
    if side is not None and max(h, w) > side:
        scale = side / max(h, w)
        size = (max(1, round(h * scale)), max(1, round(w * scale)))
        picked = F.interpolate(picked, size=size, mode="bilinear", antialias=True, align_corners=False).clamp(0, 1)
    return picked


def waveform_picture(wave: torch.Tensor, width: int = 256, height: int = 48) -> torch.Tensor:
    """(C, N) in [-1, 1] -> (3, C height, width): each channel's min-max envelope per column, light on dark,
    with a grey zero line."""
    x = wave.float().cpu().clamp(-1, 1)
    hi = F.adaptive_max_pool1d(x[:, None], width)[:, 0]  # (C, width)
    lo = -F.adaptive_max_pool1d(-x[:, None], width)[:, 0]
    level = 1 - 2 * (torch.arange(height, dtype=torch.float32) + 0.5) / height  # (height,), +1 at the top
    half = 1.0 / height  # half a pixel: a flat stretch still shows as a line
    lit = (level[None, :, None] >= lo[:, None] - half) & (level[None, :, None] <= hi[:, None] + half)
    picture = torch.full((x.shape[0], height, width), 0.08)
    picture[:, height // 2] = 0.35
    picture[lit] = 0.9
    return picture.flatten(0, 1)[None].expand(3, -1, -1).contiguous()


# ---------------------------------------------------------------------------------------------- files
def _png_path(path: str | Path) -> tuple[Path, Path]:
    """(``stem.png``, ``stem/``) of ``path`` given with or without ``.png``."""
    path = Path(path)
    if path.suffix.lower() == ".png":
        path = path.with_suffix("")
    return path.parent / (path.name + ".png"), path


def edit_rows(images: torch.Tensor, sources: list[list[torch.Tensor]]) -> torch.Tensor:
    """Edits beside what they edit: for each image (B, 3, H, W) its source images (each (3, h, w) in [0, 1],
    resized to H x W), then the image itself; a row with fewer sources than the most is padded with white.
    Returns (B * (K + 1), 3, H, W) for ``save_image(..., nrow=K + 1)``, K the most sources of a row."""
    import torch.nn.functional as F

    b, _, h, w = images.shape
    k = max(len(row) for row in sources)
    cells = []
    for i in range(b):
        row = [F.interpolate(src[None].float().cpu(), size=(h, w), mode="bilinear", align_corners=False)[0]
               for src in sources[i]]  # fmt: skip
        row += [torch.ones(3, h, w)] * (k - len(row))
        cells += [*row, images[i].float().cpu()]
    return torch.stack(cells).clamp(0, 1)


def save_sheet(
    media: Any,
    path: str | Path,
    frames: int = SHEET_FRAMES,
    side: int | None = SHEET_SIDE,
    sources: list[list[torch.Tensor]] | None = None,
) -> Path:
    """One PNG picture of a batch at ``path`` (``.png`` added if missing): images the grid of ``save_grid``;
    video (and audio_video) a frame sheet, one row of ``frames`` uniformly chosen frames per clip; audio one
    waveform per clip, channels stacked. ``sources``: each image's source images (an edit family), drawn in a row
    before it (``edit_rows``). Returns the path written."""
    from torchvision.utils import save_image

    from flowrl.logs import save_grid

    png, _ = _png_path(path)
    kind = media_kind(media)
    png.parent.mkdir(parents=True, exist_ok=True)
    if kind is MediaKind.IMAGE and sources is not None and any(sources):
        save_image(edit_rows(media, sources), str(png), nrow=1 + max(len(row) for row in sources), padding=2)
    elif kind is MediaKind.IMAGE:
        save_grid(media, png)
    elif kind.has_video:
        video = video_of(media)[0]
        sheet = frame_sheet(video, frames, side)
        save_image(sheet, str(png), nrow=len(sheet) // len(video), padding=2)
    else:
        pictures = torch.stack([waveform_picture(w) for w in audio_of(media)[0]])
        save_image(pictures, str(png), nrow=1, padding=2)
    return png


def save_clips(media: Any, folder: str | Path, start: int = 0) -> list[Path]:
    """One file per sample in ``folder``, named ``0000``, ``0001``, ... (from ``start``): images PNG (as
    ``save_grid`` writes one), video H.264 MP4 at the batch's fps (PyAV; sides cropped to even), audio 16-bit
    WAV at its sample rate; audio_video an MP4 with the sound muxed in (an AAC track, see
    ``reward_models.media.video_to_mp4``) and, beside it, the same sound as a WAV (the exact waveform, for tools
    that want it raw). Returns the paths, sample-major."""
    from flowrl.logs import save_grid
    from flowrl.reward_models.media import audio_to_wav, video_to_mp4

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    kind, written = media_kind(media), []
    video, fps = video_of(media) if kind.has_video else (None, None)
    wave, rate = audio_of(media) if kind.has_audio else (None, None)
    if kind.has_audio and rate is None:
        raise ValueError("save_clips: audio needs its sample rate (media {'audio': ..., 'sample_rate': ...})")
    for i in range(num_samples(media)):
        name = f"{start + i:04d}"
        if kind is MediaKind.IMAGE:
            save_grid(media[i][None], folder / f"{name}.png")
            written.append(folder / f"{name}.png")
            continue
        if video is not None:
            sound = (wave[i].cpu(), int(rate)) if wave is not None else (None, None)
            (folder / f"{name}.mp4").write_bytes(video_to_mp4(video[i].cpu(), float(fps or 8.0), *sound))
            written.append(folder / f"{name}.mp4")
        if wave is not None:
            (folder / f"{name}.wav").write_bytes(audio_to_wav(wave[i].cpu(), int(rate)))
            written.append(folder / f"{name}.wav")
    return written


def save_media(
    media: Any,
    path: str | Path,
    max_samples: int | None = None,
    frames: int = SHEET_FRAMES,
    side: int | None = SHEET_SIDE,
    sources: list[list[torch.Tensor]] | None = None,
) -> list[Path]:
    """A batch as the run's ``samples/`` keep it, for ``path`` = ``samples/iter-000010`` (``.png`` optional):
    images ``iter-000010.png`` (the grid); video the frame sheet ``iter-000010.png`` and
    ``iter-000010/0000.mp4``, ...; audio the waveforms ``iter-000010.png`` and ``iter-000010/0000.wav``, ...
    (audio_video: sheet, MP4s and WAVs). ``max_samples``: only the first ones. Returns the paths written, the
    PNG first (the picture a tracker logs). ``sources``: each sample's source images (an edit family), shown
    before it in the picture."""
    if max_samples is not None:
        media = select_media(media, slice(0, max_samples))
        sources = None if sources is None else sources[:max_samples]
    png, folder = _png_path(path)
    written = [save_sheet(media, png, frames, side, sources)]
    if media_kind(media) is not MediaKind.IMAGE:
        written += save_clips(media, folder)
    return written

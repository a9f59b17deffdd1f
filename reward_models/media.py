"""Media on the wire: JSON-safe encodings of image, video and audio batches (never pickle).

An encoded batch is a dict ``{"kind": ..., "format": ..., "data": [...]}``:

* ``kind="image"`` (B, 3, H, W) float in [0, 1]: ``format="png"`` (one base64 PNG per sample; lossless
  for uint8, which is what every reward sees through ``images_to_uint8``) or ``"array"``.
* ``kind="video"`` (B, F, 3, H, W): ``"png"`` (a list of base64 PNG frames per sample), ``"mp4"`` (base64
  MP4 per sample, needs PyAV; lossy) or ``"array"``; ``fps`` is carried along.
* ``kind="audio"`` (B, C, N) float in [-1, 1]: ``"wav"`` (16-bit PCM, stdlib ``wave``) or ``"array"``;
  ``sample_rate`` is carried along.
* ``kind="audio_video"``: ``{"video": <video>, "audio": <audio>}`` encoded separately. (On disk, runs write
  one MP4 with both: ``video_to_mp4(frames, fps, audio, sample_rate)`` muxes an AAC track, ``mp4_to_audio``
  reads it back.)

``format="array"`` is ``{"dtype": "float32", "shape": [...], "data": base64 of the little-endian bytes}``:
exact, and larger. Decoding checks every field and raises ``MediaError`` with a one-line reason.
"""

from __future__ import annotations

import base64
import binascii
import io
import wave
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

IMAGE_FORMATS = ("png", "array")
VIDEO_FORMATS = ("png", "mp4", "array")
AUDIO_FORMATS = ("wav", "array")
MAX_ELEMENTS = 2**31  # refuse absurd array shapes before allocating


class MediaError(ValueError):
    """A media payload that cannot be decoded (the server answers 400 with this message)."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: Any, what: str) -> bytes:
    if not isinstance(text, str):
        raise MediaError(f"{what}: expected a base64 string, got {type(text).__name__}")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise MediaError(f"{what}: invalid base64 ({exc})") from None


# ---------------------------------------------------------------------------------------------- arrays


def encode_array(tensor: torch.Tensor) -> dict:
    array = np.ascontiguousarray(tensor.detach().float().cpu().numpy(), dtype="<f4")
    return {"dtype": "float32", "shape": list(array.shape), "data": _b64(array.tobytes())}


def decode_array(payload: Any, what: str = "array") -> torch.Tensor:
    if not isinstance(payload, Mapping) or not {"dtype", "shape", "data"} <= set(payload):
        raise MediaError(f"{what}: expected {{dtype, shape, data}}")
    if payload["dtype"] != "float32":
        raise MediaError(f"{what}: dtype must be 'float32', got {payload['dtype']!r}")
    shape = payload["shape"]
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise MediaError(f"{what}: shape must be a list of non-negative integers, got {shape!r}")
    count = int(np.prod(shape)) if shape else 1
    if count > MAX_ELEMENTS:
        raise MediaError(f"{what}: shape {shape} is too large")
    raw = _unb64(payload["data"], what)
    if len(raw) != 4 * count:
        raise MediaError(f"{what}: {len(raw)} bytes do not match shape {shape} of float32")
    array = np.frombuffer(raw, dtype="<f4").reshape(shape)
    if not np.isfinite(array).all():
        raise MediaError(f"{what}: contains NaN or inf")
    return torch.from_numpy(array.copy())


# ---------------------------------------------------------------------------------------------- images


def image_to_png(image: torch.Tensor | np.ndarray) -> bytes:
    """(3, H, W) float in [0, 1] or (H, W, 3) uint8 -> PNG bytes (uint8 by ``round(x * 255)``)."""
    from PIL import Image

    if isinstance(image, torch.Tensor):
        image = (image.detach().float() * 255).round().clamp(0, 255).to(torch.uint8).permute(1, 2, 0).cpu().numpy()
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(image)).save(buffer, format="PNG")
    return buffer.getvalue()


def png_to_image(data: bytes, what: str) -> torch.Tensor:
    """PNG bytes -> (3, H, W) float in [0, 1]."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            array = np.array(image.convert("RGB"))
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise MediaError(f"{what}: not a readable image ({exc})") from None
    return torch.from_numpy(array).permute(2, 0, 1).float() / 255


def _stack(items: list[torch.Tensor], what: str) -> torch.Tensor:
    shapes = {tuple(t.shape) for t in items}
    if len(shapes) > 1:
        raise MediaError(f"{what}: samples differ in size {sorted(shapes)}")
    return torch.stack(items)


def _list_of(payload: Mapping, what: str) -> list:
    data = payload.get("data")
    if not isinstance(data, list) or not data:
        raise MediaError(f"{what}: 'data' must be a non-empty list")
    return data


# ---------------------------------------------------------------------------------------------- video (mp4)


MP4_AUDIO_CODEC = "aac"  # FFmpeg's native AAC encoder, bundled with PyAV's wheels (no libfdk needed)
MP4_AUDIO_CHANNELS = {1: "mono", 2: "stereo"}


def _import_av(what: str):
    try:
        import av
    except ImportError as exc:
        raise MediaError(f"{what} needs PyAV: `pip install av` (or send format 'png' or 'array')") from exc
    return av


def mp4_audio_rate(sample_rate: int) -> int:
    """The rate ``video_to_mp4`` stores audio of ``sample_rate`` at: the rate itself when the AAC encoder takes
    it (every usual one: 8, 11.025, 12, 16, 22.05, 24, 32, 44.1, 48, 64, 88.2, 96 kHz and 7.35 kHz), otherwise
    the lowest rate it takes above ``sample_rate`` (96 kHz at most), the audio resampled to it."""
    av = _import_av("mp4 audio")
    rates = sorted(av.Codec(MP4_AUDIO_CODEC, "w").audio_rates or ())
    sample_rate = int(sample_rate)
    if not rates or sample_rate in rates:
        return sample_rate
    return next((r for r in rates if r > sample_rate), rates[-1])


def video_to_mp4(
    frames: torch.Tensor, fps: float, audio: torch.Tensor | None = None, sample_rate: int | None = None
) -> bytes:
    """(F, 3, H, W) float in [0, 1] -> H.264 MP4 bytes through PyAV (``pip install av``).

    ``audio`` (C, N) float in [-1, 1], C = 1 or 2, at ``sample_rate``: muxed into the same MP4 as an AAC track
    (FFmpeg's native encoder) at ``mp4_audio_rate(sample_rate)``, which is ``sample_rate`` for every usual rate
    (audio at another rate is resampled to the next rate AAC takes). Video and sound both start at 0; neither
    is cut or padded to the other's length. Without ``audio`` the bytes are exactly those of a video-only MP4."""
    av = _import_av("mp4 video")
    pixels = (frames.detach().float() * 255).round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy()
    wave = None
    if audio is not None:
        if sample_rate is None:
            raise MediaError("mp4 audio: sample_rate is required with audio")
        wave = audio.detach().float().cpu()
        wave = wave[None] if wave.ndim == 1 else wave
        if wave.ndim != 2 or wave.shape[0] not in MP4_AUDIO_CHANNELS or wave.shape[1] == 0:
            raise MediaError(f"mp4 audio: expected (C, N) with C = 1 or 2 and N > 0, got {tuple(audio.shape)}")
        wave = np.ascontiguousarray(wave.clamp(-1, 1).numpy(), dtype=np.float32)
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=max(1, round(fps)))
        stream.width, stream.height = pixels.shape[2] // 2 * 2, pixels.shape[1] // 2 * 2
        stream.pix_fmt = "yuv420p"
        if wave is not None:
            sound = container.add_stream(MP4_AUDIO_CODEC, rate=mp4_audio_rate(sample_rate))
            sound.layout, sound.format = MP4_AUDIO_CHANNELS[wave.shape[0]], "fltp"
        for frame in pixels:
            frame = np.ascontiguousarray(frame[: stream.height, : stream.width])
            container.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        container.mux(stream.encode())
        if wave is not None:
            # one frame of all the samples: the encoder's own resampler cuts it to AAC's 1024-sample frames
            # (and converts the rate when mp4_audio_rate differs); the muxer interleaves the two tracks
            chunk = av.AudioFrame.from_ndarray(wave, format="fltp", layout=MP4_AUDIO_CHANNELS[wave.shape[0]])
            chunk.sample_rate, chunk.pts = int(sample_rate), 0
            container.mux(sound.encode(chunk))
            container.mux(sound.encode(None))
    return buffer.getvalue()


def mp4_to_video(data: bytes, what: str) -> torch.Tensor:
    try:
        import av
    except ImportError:
        raise MediaError("mp4 video needs PyAV on the server: `pip install av`") from None
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    except (av.error.FFmpegError, ValueError) as exc:  # type: ignore[attr-defined]
        raise MediaError(f"{what}: not a readable MP4 ({exc})") from None
    if not frames:
        raise MediaError(f"{what}: MP4 holds no frame")
    return torch.from_numpy(np.stack(frames)).permute(0, 3, 1, 2).float() / 255


def mp4_to_audio(data: bytes, what: str = "mp4") -> tuple[torch.Tensor, int]:
    """The first sound track of MP4 bytes -> ((C, N) float, sample rate), cut to the track's recorded duration
    (AAC pads its last 1024-sample frame). A file without sound is a one-line ``MediaError``."""
    try:
        import av
    except ImportError:
        raise MediaError("mp4 audio needs PyAV: `pip install av`") from None
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.audio:
                raise MediaError(f"{what}: MP4 has no audio track")
            stream = container.streams.audio[0]
            rate = int(stream.codec_context.sample_rate)
            to_float = av.AudioResampler(format="fltp")  # keeps the layout and the rate
            chunks = [out.to_ndarray() for frame in container.decode(stream) for out in to_float.resample(frame)]
            chunks += [out.to_ndarray() for out in to_float.resample(None)]  # (C, n) each
            duration = stream.duration * stream.time_base if stream.duration and stream.time_base else None
    except MediaError:
        raise
    except (av.error.FFmpegError, ValueError) as exc:  # type: ignore[attr-defined]
        raise MediaError(f"{what}: not a readable MP4 ({exc})") from None
    if not chunks:
        raise MediaError(f"{what}: MP4 audio track holds no sample")
    wave = np.concatenate(chunks, axis=1).astype(np.float32)
    if duration is not None:
        wave = wave[:, : max(1, round(float(duration) * rate))]
    return torch.from_numpy(np.ascontiguousarray(wave)), rate


# ---------------------------------------------------------------------------------------------- audio (wav)


def audio_to_wav(waveform: torch.Tensor, sample_rate: int) -> bytes:
    """(C, N) float in [-1, 1] -> 16-bit PCM WAV bytes."""
    pcm = (waveform.detach().float().clamp(-1, 1) * 32767).round().to(torch.int16).T.contiguous().numpy()  # (N, C)
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(pcm.shape[1])
        out.setsampwidth(2)
        out.setframerate(int(sample_rate))
        out.writeframes(pcm.astype("<i2").tobytes())
    return buffer.getvalue()


def wav_to_audio(data: bytes, what: str) -> tuple[torch.Tensor, int]:
    """WAV bytes (8/16/32-bit PCM) -> ((C, N) float in [-1, 1], sample rate)."""
    try:
        with wave.open(io.BytesIO(data), "rb") as src:
            channels, width, rate = src.getnchannels(), src.getsampwidth(), src.getframerate()
            raw = src.readframes(src.getnframes())
    except (wave.Error, EOFError) as exc:
        raise MediaError(f"{what}: not a readable WAV ({exc})") from None
    dtypes = {1: ("u1", 128.0, 128.0), 2: ("<i2", 0.0, 32768.0), 4: ("<i4", 0.0, 2147483648.0)}
    if width not in dtypes:
        raise MediaError(f"{what}: unsupported WAV sample width {width} bytes")
    dtype, offset, scale = dtypes[width]
    samples = (np.frombuffer(raw, dtype=dtype).astype(np.float32) - offset) / scale
    return torch.from_numpy(samples.reshape(-1, channels).T.copy()), rate


# ---------------------------------------------------------------------------------------------- batches


def encode_media(
    media: Any, kind: str = "image", fmt: str | None = None, fps: float = 8.0, sample_rate: int = 16000
) -> dict:
    """Encode a batch for JSON. ``kind`` is the reward's modality; mappings carry their own rates."""
    if kind == "audio_video":
        if not isinstance(media, Mapping) or "video" not in media or "audio" not in media:
            raise MediaError("audio_video media must be a mapping with 'video' and 'audio'")
        return {
            "kind": kind,
            "video": encode_media(
                media["video"], "video", fmt if fmt in VIDEO_FORMATS else None, media.get("fps", fps)
            ),
            "audio": encode_media(
                media["audio"],
                "audio",
                fmt if fmt in AUDIO_FORMATS else None,
                sample_rate=media.get("sample_rate", sample_rate),
            ),
        }
    if kind == "audio" and isinstance(media, Mapping):
        media, sample_rate = media["audio"], int(media.get("sample_rate", sample_rate))
    if kind == "video" and isinstance(media, Mapping):
        media, fps = media["video"], float(media.get("fps") or fps)
    if kind == "image":
        fmt = fmt or "png"
        _check_fmt(fmt, IMAGE_FORMATS, kind)
        data = encode_array(media) if fmt == "array" else [_b64(image_to_png(x)) for x in media]
        return {"kind": kind, "format": fmt, "data": data}
    if kind == "video":
        fmt = fmt or "png"
        _check_fmt(fmt, VIDEO_FORMATS, kind)
        if fmt == "array":
            data: Any = encode_array(media)
        elif fmt == "png":
            data = [[_b64(image_to_png(frame)) for frame in video] for video in media]
        else:
            data = [_b64(video_to_mp4(video, fps)) for video in media]
        return {"kind": kind, "format": fmt, "fps": float(fps), "data": data}
    if kind == "audio":
        fmt = fmt or "wav"
        _check_fmt(fmt, AUDIO_FORMATS, kind)
        waves = media if media.ndim == 3 else media[:, None]  # (B, C, N)
        data = encode_array(waves) if fmt == "array" else [_b64(audio_to_wav(w, sample_rate)) for w in waves]
        return {"kind": kind, "format": fmt, "sample_rate": int(sample_rate), "data": data}
    raise MediaError(f"unknown media kind {kind!r}; expected image, video, audio or audio_video")


def _check_fmt(fmt: str, allowed: tuple[str, ...], kind: str) -> None:
    if fmt not in allowed:
        raise MediaError(f"{kind} media: format {fmt!r} is not one of {', '.join(allowed)}")


def decode_media(payload: Any) -> Any:
    """Inverse of ``encode_media``: a tensor batch, or a mapping for audio and audio_video."""
    if not isinstance(payload, Mapping):
        raise MediaError("'media' must be an object with 'kind', 'format' and 'data'")
    kind = payload.get("kind")
    if kind == "audio_video":
        video, audio = decode_media(payload.get("video")), decode_media(payload.get("audio"))
        if len(video["video"]) != len(audio["audio"]):
            raise MediaError("audio_video media: video and audio batch sizes differ")
        return {**video, **audio}
    fmt = payload.get("format")
    if kind == "image":
        _check_fmt(fmt, IMAGE_FORMATS, kind)
        if fmt == "array":
            return _checked(decode_array(payload.get("data"), "image array"), 4, "image array (B, 3, H, W)")
        items = _list_of(payload, "image media")
        return _stack([png_to_image(_unb64(x, f"image {i}"), f"image {i}") for i, x in enumerate(items)], "images")
    if kind == "video":
        _check_fmt(fmt, VIDEO_FORMATS, kind)
        fps = _number(payload.get("fps", 8.0), "video fps")
        if fmt == "array":
            videos = _checked(decode_array(payload.get("data"), "video array"), 5, "video array (B, F, 3, H, W)")
        elif fmt == "png":
            videos = _stack([_png_frames(v, i) for i, v in enumerate(_list_of(payload, "video media"))], "videos")
        else:
            items = _list_of(payload, "video media")
            videos = _stack(
                [mp4_to_video(_unb64(x, f"video {i}"), f"video {i}") for i, x in enumerate(items)], "videos"
            )
        return {"video": videos, "fps": fps}
    if kind == "audio":
        _check_fmt(fmt, AUDIO_FORMATS, kind)
        rate = int(_number(payload.get("sample_rate"), "audio sample_rate"))
        if fmt == "array":
            return {
                "audio": _checked(decode_array(payload.get("data"), "audio array"), 3, "audio (B, C, N)"),
                "sample_rate": rate,
            }
        waves = []
        for i, item in enumerate(_list_of(payload, "audio media")):
            waveform, file_rate = wav_to_audio(_unb64(item, f"audio {i}"), f"audio {i}")
            if file_rate != rate:
                raise MediaError(f"audio {i}: WAV rate {file_rate} differs from sample_rate {rate}")
            waves.append(waveform)
        return {"audio": _stack(waves, "audio"), "sample_rate": rate}
    raise MediaError(f"unknown media kind {kind!r}; expected image, video, audio or audio_video")


def _png_frames(frames: Any, index: int) -> torch.Tensor:
    if not isinstance(frames, list) or not frames:
        raise MediaError(f"video {index}: expected a non-empty list of PNG frames")
    decoded = [
        png_to_image(_unb64(f, f"video {index} frame {j}"), f"video {index} frame {j}") for j, f in enumerate(frames)
    ]
    return _stack(decoded, f"video {index} frames")


def _checked(tensor: torch.Tensor, ndim: int, what: str) -> torch.Tensor:
    if tensor.ndim != ndim or len(tensor) == 0:
        raise MediaError(f"expected {what}, got shape {tuple(tensor.shape)}")
    return tensor


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) or value <= 0:
        raise MediaError(f"{what} must be a positive number, got {value!r}")
    return float(value)


def unwrap_video(media: Any) -> tuple[torch.Tensor, float | None]:
    """(B, F, 3, H, W) and fps (None when unknown) from a tensor or a ``{"video", "fps"}`` mapping."""
    if isinstance(media, Mapping):
        return media["video"], media.get("fps")
    return media, None


def unwrap_audio(name: str, media: Any, default_rate: int | None) -> tuple[torch.Tensor, int]:
    """(B, C, N) and the sample rate from a tensor ((B, N) or (B, C, N)) or an ``{"audio", "sample_rate"}`` mapping."""
    from flowrl.reward_models.base import RewardError

    rate = default_rate
    if isinstance(media, Mapping):
        media, rate = media["audio"], media.get("sample_rate", default_rate)
    if not isinstance(media, torch.Tensor) or media.ndim not in (2, 3):
        raise RewardError(f"reward {name!r} expects audio (B, C, N) or (B, N)")
    if rate is None:
        raise RewardError(f"reward {name!r}: the audio sample rate is unknown; pass sample_rate=")
    return (media if media.ndim == 3 else media[:, None]).float(), int(rate)


# ---------------------------------------------------------------------------------------------- source images

SOURCE_IMAGES = "source_images"  # the request field (and the metadata key rewards read) of each sample's sources


def encode_sources(rows: list[list[torch.Tensor] | None], fmt: str | None = None) -> list[list[dict]]:
    """Each sample's source images (a list of (3, H, W) [0, 1] tensors, or None) for JSON: per sample a list of
    one-image payloads (``encode_media`` of kind image, ``fmt`` png or array), so images of different sizes travel
    as they are."""
    return [[encode_media(torch.as_tensor(x)[None], "image", fmt) for x in (row or [])] for row in rows]


def decode_sources(payload: Any, batch: int) -> list[list[torch.Tensor]]:
    """Inverse of ``encode_sources``: ``batch`` lists of (3, H, W) tensors; ``MediaError`` with a one-line reason."""
    if not isinstance(payload, list) or len(payload) != batch:
        raise MediaError(f"'{SOURCE_IMAGES}' must be a list of {batch} lists of images, one per prompt")
    rows = []
    for i, row in enumerate(payload):
        if not isinstance(row, list):
            raise MediaError(f"'{SOURCE_IMAGES}'[{i}] must be a list of image payloads")
        images = []
        for j, item in enumerate(row):
            if not isinstance(item, Mapping) or item.get("kind") != "image":
                raise MediaError(f"'{SOURCE_IMAGES}'[{i}][{j}] must be an image payload (kind image)")
            decoded = decode_media(item)
            if len(decoded) != 1:
                raise MediaError(f"'{SOURCE_IMAGES}'[{i}][{j}] must hold one image, got {len(decoded)}")
            images.append(decoded[0])
        rows.append(images)
    return rows

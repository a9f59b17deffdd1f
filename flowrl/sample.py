"""``flowrl sample``: images, video or audio from a run folder (its exported weights), a checkpoint, or a recipe.

The adapter's ``generate`` (its diffusers pipeline's own call) makes the samples. Each call writes into a new
numbered folder (``RUN/samples_cli/0001/``, ``0002/``, ... or under ``--out``): one file per sample
(``0000.png`` for images, ``0000.mp4`` for video, ``0000.wav`` for audio), beside video ``frames.png`` (a row
of frames per clip) and beside audio ``waveforms.png``, and a ``sample.json`` recording the prompts, seed,
steps, guidance, the weights used and the files written; nothing already there is overwritten.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

SAMPLE_FILE = "sample.json"


# ------------------------------------------------------------------------------------------ inputs
def _sample_config(target: str):
    """A run folder's resolved config, or a recipe's."""
    from flowrl.config import config_from_dict
    from flowrl.resolve import resolve, resolve_config

    run = Path(target)
    if (run / "config.yaml").is_file():
        import yaml

        data = yaml.safe_load((run / "config.yaml").read_text())
        data["resume"] = None
        return resolve(config_from_dict(data)), run
    return resolve_config(target, []), None


def checkpoint_folder(spec: str) -> tuple[Path, dict[str, Any]]:
    """``--checkpoint``: an intact checkpoint folder and its state, or a one-line error naming it."""
    from flowrl import checkpoint as ckpt

    path = Path(spec).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"--checkpoint: no such folder {spec!r}")
    if not path.is_dir():
        raise ValueError(
            f"--checkpoint: {spec!r} is a file; expected a checkpoint folder (RUN/checkpoints/iter-NNNNNN)"
        )
    if (path / "checkpoints").is_dir():
        newest = ckpt.list_checkpoints(path / "checkpoints")
        example = newest[-1] if newest else path / "checkpoints" / "iter-NNNNNN"
        raise ValueError(f"--checkpoint: {spec!r} is a run folder; give one of its checkpoints, e.g. {example}")
    if not (path / ckpt.STATE_FILE).is_file():
        raise ValueError(f"--checkpoint: {spec!r} is not a complete flowrl checkpoint (no {ckpt.STATE_FILE})")
    return path, ckpt.verify_checkpoint(path)


def _checkpoint_run(path: Path) -> Path:
    """The run folder of ``RUN/checkpoints/iter-N``: two levels up, where its config.yaml is."""
    run = path.resolve().parent.parent
    if not (run / "config.yaml").is_file():
        raise FileNotFoundError(
            f"--checkpoint: no config.yaml in {run} (two levels above the checkpoint, as in RUN/checkpoints/"
            "iter-NNNNNN); give the run folder or recipe it was trained with as well"
        )
    return run


def _output_run(checkpoint: Path | None) -> Path | None:
    """The run folder a checkpoint sits in, if it is one (for the default output folder)."""
    if checkpoint is None:
        return None
    run = checkpoint.resolve().parent.parent
    return run if (run / "config.yaml").is_file() else None


def _check_args(args: argparse.Namespace) -> None:
    if args.num < 1:
        raise ValueError(f"--num: must be at least 1, got {args.num}")
    if args.steps is not None and args.steps < 1:
        raise ValueError(f"--steps: must be at least 1, got {args.steps}")
    if args.ema and not args.checkpoint:
        raise ValueError(
            "--ema: needs --checkpoint (a run folder's exported weights are already the EMA ones "
            "when it trained with train.ema)"
        )
    if args.target is None and not args.checkpoint:
        raise ValueError("sample: give a run folder or recipe, or --checkpoint PATH")
    if args.out and Path(args.out).exists() and not Path(args.out).is_dir():
        raise ValueError(f"--out: {args.out!r} is a file; expected a folder")


def source_images(args: argparse.Namespace, pipeline: str) -> list | None:
    """``--image`` files read to (3, H, W) [0, 1] tensors, after checking their count against what the family
    takes (``source_images``) and each file, one line each, before any model is built; None: none given."""
    from flowrl.pipelines.base import adapter_class, source_images_of
    from flowrl.pipelines.kit.images import load_image

    paths = list(args.image or [])
    low, high = source_images_of(adapter_class(pipeline))
    if not low <= len(paths) <= high:
        if high == 0:
            raise ValueError(f"--image: model.pipeline={pipeline} takes no source images (a text-only family)")
        takes = f"{low}" if low == high else f"{low} to {high}"
        raise ValueError(f"--image: model.pipeline={pipeline} takes {takes} source image(s); {len(paths)} given")
    return [load_image(p) for p in paths] if paths else None


# ------------------------------------------------------------------------------------------ weights
def load_checkpoint_weights(adapter: Any, cfg: Any, path: Path, ema: bool = False) -> str:
    """Put a checkpoint's trainable tensors (``ema``: its EMA ones) into the adapter's transformer: the run's
    LoRA adapter is added first when ``train.lora.enabled``; names and shapes must match exactly."""
    import torch
    from safetensors.torch import load_file

    from flowrl import checkpoint as ckpt

    name = "ema.safetensors" if ema else "trainable.safetensors"
    if not (path / name).is_file():
        raise ValueError(f"checkpoint {path}: no {name}")
    from flowrl.policy import lora_config

    tensors = load_file(path / name)
    transformer = adapter.transformer
    lora = cfg.train.lora
    if lora.enabled:
        transformer.requires_grad_(False)
        transformer.add_adapter(lora_config(lora, adapter.lora_target_modules))
        params = {n: p for n, p in transformer.named_parameters() if p.requires_grad}
    else:
        params = dict(transformer.named_parameters())
    ckpt.check_trainable_against(tensors, params, path)
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(tensors[n])
    transformer.requires_grad_(False).eval()
    return f"{'LoRA' if lora.enabled else 'full weights'} ({name})"


# ------------------------------------------------------------------------------------------ output
def next_sample_folder(base: Path) -> Path:
    """Create and return ``base/NNNN``, one above the highest numbered folder there (never an existing one)."""
    base.mkdir(parents=True, exist_ok=True)
    while True:
        used = [int(p.name) for p in base.iterdir() if p.name.isdigit()]
        folder = base / f"{max(used, default=0) + 1:04d}"
        try:
            folder.mkdir()
            return folder
        except FileExistsError:  # another process took it: try the next
            continue


SHEETS = {"video": "frames.png", "audio": "waveforms.png", "audio_video": "frames.png"}


def write_samples(media: Any, folder: Path) -> dict[str, Any]:
    """One file per sample in ``folder`` (``0000.png`` images; ``0000.mp4`` video; ``0000.wav`` audio; both for
    audio_video, whose MP4 carries the sound as an AAC track, recorded as ``mp4_audio``) and, beside video or
    audio, one picture of them all (``frames.png``: a row of frames per clip; ``waveforms.png``). Returns what
    ``sample.json`` records of them."""
    from flowrl.media import audio_of, media_kind, save_clips, save_sheet, video_of

    kind = media_kind(media)
    files = [p.name for p in save_clips(media, folder)]
    record: dict[str, Any] = {"media_kind": kind, "files": files}
    if kind == "image":
        record["images"] = files
        return record
    record["sheet"] = save_sheet(media, folder / SHEETS[kind]).name
    if kind in ("video", "audio_video"):
        video, fps = video_of(media)
        record.update(videos=[f for f in files if f.endswith(".mp4")], fps=fps, num_frames=int(video.shape[1]))
    if kind in ("audio", "audio_video"):
        wave, rate = audio_of(media)
        record.update(
            audio=[f for f in files if f.endswith(".wav")], sample_rate=rate, duration_s=wave.shape[-1] / rate
        )
    if kind == "audio_video":  # the MP4s hold the sound too (the WAVs beside them are the exact waveform)
        from flowrl.reward_models.media import MP4_AUDIO_CODEC, mp4_audio_rate

        record["mp4_audio"] = {
            "codec": MP4_AUDIO_CODEC,
            "sample_rate": mp4_audio_rate(int(rate)),
            "channels": int(wave.shape[1]),
        }
    return record


def _record(
    folder: Path,
    args: argparse.Namespace,
    cfg: Any,
    weights: dict,
    steps: int,
    written: dict[str, Any],
    negative: str = "",
) -> None:
    record = {
        "prompts": [args.prompt] * args.num,
        "negative_prompt": negative,
        **({"source_images": [str(Path(p).resolve()) for p in args.image]} if args.image else {}),
        **written,
        "seed": args.seed,
        "steps": steps,
        "guidance_scale": cfg.sample.eval_guidance_scale,
        "resolution": cfg.model.resolution,
        **({"size": list(cfg.model.size)} if written["media_kind"] != "audio" else {}),  # (height, width)
        "model": cfg.model.path,
        "pipeline": cfg.model.pipeline,
        "target": args.target,
        "weights": weights,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    (folder / SAMPLE_FILE).write_text(json.dumps(record, indent=2) + "\n")


# ------------------------------------------------------------------------------------------ command
def _config_and_run(args: argparse.Namespace, checkpoint: Path | None, state: dict) -> tuple[Any, Path | None]:
    """The config to sample (the target's, or the checkpoint's run's) and its run folder (None: a recipe); a
    checkpoint of another family, or ``--ema`` on one without an EMA, refused in one line."""
    if args.target is not None:
        cfg, run = _sample_config(args.target)
    else:
        run = _checkpoint_run(checkpoint)
        cfg, _ = _sample_config(str(run))
    if checkpoint is not None:  # another family's checkpoint: named, before its tensors fail to fit the model
        from flowrl.checkpoint import check_family

        check_family(checkpoint, cfg.model.pipeline, "--checkpoint", state)
    if checkpoint is not None and args.ema and not (checkpoint / "ema.safetensors").is_file():
        raise ValueError(f"--ema: checkpoint {checkpoint} has no ema.safetensors (the run trained without train.ema)")
    return cfg, run


def _load_weights(
    adapter: Any, cfg: Any, args: argparse.Namespace, checkpoint: Path | None, state: dict, run: Path | None
) -> dict[str, Any]:
    """The checkpoint's weights (``--checkpoint``, its EMA with ``--ema``) or the run's exported ones into
    ``adapter``; returns what ``sample.json`` records of them."""
    if checkpoint is not None:
        loaded = load_checkpoint_weights(adapter, cfg, checkpoint, args.ema)
        weights = {
            "source": "checkpoint",
            "path": str(checkpoint),
            "iteration": state.get("iteration"),
            "ema": bool(args.ema),
            "loaded": loaded,
        }
    else:
        loaded = adapter.load_trained(run) if run is not None else None
        weights = {"source": "run" if loaded else "none", "path": str(run) if loaded else None, "loaded": loaded}
        if run is not None and not loaded:
            print(f"{run} has no exported weights (lora/ or transformer/): sampling the base model")
    if loaded:
        print(f"loaded {loaded} from {checkpoint or run}")
    return weights


def cmd_sample(args: argparse.Namespace) -> int:
    import torch

    from flowrl.benchmarks.models import check_model_path_or_hint
    from flowrl.media import num_samples, to_cpu
    from flowrl.pipelines.base import adapter_class

    _check_args(args)
    checkpoint, state = checkpoint_folder(args.checkpoint) if args.checkpoint else (None, {})
    cfg, run = _config_and_run(args, checkpoint, state)
    check_model_path_or_hint(cfg.model)  # before the build: a toy recipe names `flowrl eval toy --pretrain`
    sources = source_images(args, cfg.model.pipeline)  # the edit's source image(s), checked before the build
    adapter = adapter_class(cfg.model.pipeline).from_config(cfg.model, seed=cfg.seed)
    weights = _load_weights(adapter, cfg, args, checkpoint, state, run)
    home = run if run is not None else _output_run(checkpoint)
    base = Path(args.out) if args.out else (home / "samples_cli" if home is not None else Path("samples"))
    steps = args.steps or cfg.sample.eval_num_steps
    negative = cfg.data.negative_prompt if args.negative_prompt is None else args.negative_prompt
    extra = {} if sources is None else {"images": [sources] * args.num}  # every sample edits the same source
    media = to_cpu(
        adapter.generate(
            [args.prompt] * args.num,
            steps,
            cfg.sample.eval_guidance_scale,
            torch.Generator("cpu").manual_seed(args.seed),
            negative_prompts=[negative] * args.num if negative else None,  # None: the empty prompt
            **extra,
        )
    )
    out = next_sample_folder(base)
    written = write_samples(media, out)
    _record(out, args, cfg, weights, steps, written, negative)
    kind, n = written["media_kind"], num_samples(media)
    what = {
        "image": "images",
        "video": "videos (MP4)",
        "audio": "clips (WAV)",
        "audio_video": "clips (MP4 with sound + WAV)",
    }
    print(
        f"wrote {n} {what[kind]}{' and ' + written['sheet'] if 'sheet' in written else ''} and {SAMPLE_FILE} to {out}"
    )
    return 0


def add_commands(sub: Any) -> None:
    """Register ``flowrl sample`` on an argparse subparsers object."""
    p = sub.add_parser(
        "sample", help="generate images, video or audio from a run folder (with its LoRA), a checkpoint or a recipe"
    )
    p.add_argument(
        "target",
        nargs="?",
        default=None,
        help="run folder or recipe (default with --checkpoint: the run two levels above it)",
    )
    p.add_argument("--prompt", required=True)
    p.add_argument(
        "--negative-prompt",
        default=None,
        help='the CFG negative prompt (default: the config\'s data.negative_prompt; "": the empty prompt)',
    )
    p.add_argument(
        "--image",
        action="append",
        default=None,
        metavar="PATH",
        help="a source image to edit (an image-taking family: flux_kontext); repeat for a family that takes several",
    )
    p.add_argument("--num", type=int, default=4)
    p.add_argument("--steps", type=int, default=None, help="default: sample.eval_num_steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--out",
        default=None,
        help="folder to write a new numbered subfolder in (default RUN/samples_cli, or ./samples for a recipe)",
    )
    p.add_argument("--checkpoint", default=None, help="a checkpoint folder RUN/checkpoints/iter-NNNNNN to sample")
    p.add_argument("--ema", action="store_true", help="with --checkpoint: use its EMA weights")
    p.set_defaults(fn=cmd_sample)

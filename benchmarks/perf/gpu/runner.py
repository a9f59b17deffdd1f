"""Full-size speed and memory on one GPU, with random weights and nothing from the hub.

    python -m flowrl.benchmarks.perf.gpu [--json out.json]   # on a GPU: about 3-5 minutes
    python -m flowrl.benchmarks.perf.gpu --what flux|wan|audio|ltx2|z_image|flux2|qwen_image|flux_kontext|qwen_image_edit --max-seconds 500   # one family's iteration
    python -m flowrl.benchmarks.perf.gpu --smoke             # the same code at toy sizes: seconds on a CPU

Each figure is printed as it is measured, then Markdown tables (the default, ``--what sd35m,wan``: the first
three stages below):

* **SD3.5-Medium through flowrl's Trainer**: the transformer at its published config (2.24B), the SD3
  VAE, and CLIP-L, CLIP-G and the T5-XXL encoder at their real configs (``--shallow-text-encoders``: at
  their real widths but 1-2 layers; they only encode the prompts once), the encoders in bf16 because
  random T5 weights may overflow fp16. The sd35m-ocr recipe's model settings (512 px, fp16, LoRA 32, 10
  steps, CFG 4.5, EMA, beta 0.004) on 18 samples (3 prompts x 6, rollout batches of 9) and the JPEG
  reward (offline, cheap). Reports seconds per iteration (the last of ``--iterations``, the first warms
  up), images/s, peak GiB (``torch.cuda.max_memory_allocated``) and the phases, next to
  ``flowrl.estimate``'s prediction for the same configuration. The step-0 on-policy check is reported,
  not enforced. Then ``benchmarks.perf.overhead``'s side-by-side ratios at this size: the rollout with
  log-probs over a bare pipeline call, and the update over bare forwards+backwards.
* **Wan2.1-T2V-1.3B transformer** (``WanTransformer3DModel`` at its published config, 1.42B): seconds
  per no-grad forward and per forward+backward (LoRA on the attention projections, bf16 autocast) at a
  video latent of 81 frames at 480x832 (16 x 21 x 60 x 104, 32,760 tokens) and 512 text tokens, without
  and with gradient checkpointing.
* **Wan2.1-T2V-1.3B through flowrl's Trainer** (``--what wan`` runs it after the transformer alone): the
  whole ``WanPipeline`` at its published architecture (the UMT5-XXL encoder, the Wan VAE decoding all 81
  frames) through the wan adapter, Flow-GRPO's Wan settings (CFG 4.5, LoRA 32/64, beta 0.004, bf16) at 81 x
  480 x 832 with gradient checkpointing, 10 steps with an SDE window of 2, 2 samples one a batch, and the
  per-frame JPEG video reward. About 50-100 s an iteration on an H200: ``--what wan --max-seconds 500``.
* **FLUX.1-dev through flowrl's Trainer** (``--what flux``): the 11.9B transformer with its guidance
  embedding, CLIP-L and the T5-XXL encoder, FLUX's VAE, through the flux adapter; Flow-GRPO's pickscore_flux
  settings (512 px, 6 steps, guidance 3.5 embedded: one pass a step, noise 0.9, LoRA 64/128 with the
  feed-forwards, beta 0, bf16) on 12 samples in batches of 3, the JPEG reward.
* **Stable Audio 3 medium through flowrl's Trainer** (``--what audio``): the 1.45B DiT, the T5Gemma-B
  encoder, the duration embedder and SAME-L (``flowrl.estimate``'s table: the diffusers class defaults)
  through the stable_audio adapter; 10 s clips, 8 steps at guidance 1 (the distilled model), LoRA 32/64, 24
  samples in batches of 12, the band-energy reward.
* **LTX-2 through flowrl's Trainer with AV-GRPO** (``--what ltx2``): the 18.9B joint audio+video transformer
  (``LTX2VideoTransformer3DModel``'s class defaults, ``flowrl.estimate``'s table), Gemma-3-12B with its vision
  tower, the text connectors, both VAEs and the vocoder, random weights, a word tokenizer made in code,
  through the ltx2 adapter (only its loader patched) and the av_grpo method: one AV-GRPO step (the video
  phase) at 49 frames of 512 x 768 at 24 fps (7 x 16 x 24 + 51 = 2,739 tokens), 8 steps, CFG 4, G = 4 on one
  prompt (plus its anchor rollout), LoRA 32/32 on the adapter's targets, gradient checkpointing, bf16, the
  per-frame JPEG reward for both phases. One device call should run ``--what ltx2 --iterations 1
  --max-seconds 480`` (building the 33B parameters on the GPU takes most of a minute; the estimate is printed
  before the iteration).
* **Z-Image-Turbo and FLUX.2-klein-base-4B through flowrl's Trainer** (``--what z_image``, ``--what flux2``):
  the 6.15B Z-Image transformer (the class defaults) with Qwen3-4B and FLUX.1's VAE, full fine-tuning at
  Flow-Factory's Turbo settings (512 px, 6 steps, one SDE step in steps 1-3, no CFG, 4 samples one a batch,
  checkpointing); the 3.88B klein-base-4B transformer with Qwen3-4B and the FLUX.2 VAE, LoRA 64/128 at
  Flow-Factory's klein-base settings (384 px, 8 steps, one SDE step in steps 1-3, CFG 4, 8 samples in batches
  of 4); random weights, the Qwen chat tokenizer made in code, the JPEG reward.
  Each of the six reports seconds per iteration (the last of ``--iterations``), samples per second and the
  peak next to ``estimate(cfg)``'s, and is skipped when the estimate says it would overrun ``--max-seconds``.
  With ``--smoke`` they run the tiny models of each family folder (``pipelines/<family>/tiny.py``) (``--shallow-text-encoders``
  shrinks T5-XXL, UMT5-XXL and T5Gemma to one layer, CLIP-L to two).
* **Every method** (``--what methods``, not in the default): one iteration of each registered method on
  the same SD3.5-M (after a warm-up iteration): seconds and their ratio to Flow-GRPO's, NFE, NFE/s,
  reward calls and peak GiB. G²RPO and E-GRPO roll out one prompt group (6) per batch; DenseGRPO's
  calibration rounds are left out of its figure. ``--what methods --max-seconds 400`` fits one device
  call; methods that would overrun are skipped with a note.
* **Attention backends and torch.compile** (``--what attention``, not in the default): one iteration of the
  same SD3.5-M (after a warm-up iteration, which also pays any compilation) with today's attention, then
  ``model.attention_backend`` set to each backend of ``ATTENTION_BACKENDS`` (or ``--attention-backends``)
  that runs on this GPU, then ``train.compile=true`` with today's attention and with the fastest backend:
  seconds, the ratio to today's, and the first update's rollout-vs-update log-prob gap
  (``policy/onpolicy_logp_diff``) side by side. The target is 0.8 of today's time with the gap within
  ``train.onpolicy_tol``. ``--what attention --max-seconds 540`` fits one device call. With ``--smoke`` the
  compiled variants use torch.compile's ``aot_eager`` backend (graph capture, no kernel builds), so that
  the stage runs in seconds on a CPU: it checks the code path, not the speed.

* **Sequence parallelism on one GPU** (``--what sp``, not in the default): per video family with a published
  recipe (wan21-t2v-1.3b, wan22-ti2v-5b-pickscore, wan22-a14b, wan21-i2v-pickscore, ltx2-flow-grpo) the transformer
  at its published config, LoRA of the recipe, checkpointing as the recipe; one row's forward+backward on 1/S of
  its tokens for S in 1, 2, 4, 8 (a sequence-parallel process's share, emulated on a token slice through
  diffusers' context-parallel plan), at the recipe's clip and at the model's native clip: peak GiB beside the
  estimate's, seconds, and the smallest S within 80 GB (``sp``'s docstring says what the slice approximates).
  ``--what sp --max-seconds 540`` fits one device call; ``--sp-plan`` prints what it would build, from the configs
  on the meta device, and exits. On a CPU it needs ``--smoke`` (the tiny models at a few dozen tokens).

Stages that would overrun ``--max-seconds`` are skipped with a note, so the script ends in time.

One module a stage, sharing one runner: ``runner`` (arguments, the stage order, the tables), ``common`` (the
sizes, the time budget, device peaks, the timed iteration loop), ``sd35m`` (the SD3.5-M pipeline, its
iteration and the overhead ratios), ``methods``, ``attention``, ``wan`` (the transformer alone) and
``families`` (FLUX, Wan, SA3 and LTX-2 through the Trainer) and ``sp`` (sequence parallelism's share of a sample).
"""

from __future__ import annotations

import argparse
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from flowrl.benchmarks.perf.gpu.attention import ATTENTION_BACKENDS, bench_attention
from flowrl.benchmarks.perf.gpu.common import FULL, GIB, SMOKE, Clock, Scale
from flowrl.benchmarks.perf.gpu.families import bench_family
from flowrl.benchmarks.perf.gpu.methods import bench_methods
from flowrl.benchmarks.perf.gpu.sd35m import bench_sd35m
from flowrl.benchmarks.perf.gpu.sp import SP_FAMILY_KEYS, bench_sp, sp_markdown, sp_plan
from flowrl.benchmarks.perf.gpu.wan import bench_wan


@dataclass(frozen=True)
class Run:
    """What every stage is called with: the parsed arguments, the sizes, the device and the time budget."""

    args: argparse.Namespace
    scale: Scale
    device: torch.device
    clock: Clock

    def precision(self, gpu_default: str) -> str:
        """--precision, where auto means ``gpu_default`` on a GPU and fp32 on a CPU."""
        if self.args.precision != "auto":
            return self.args.precision
        return gpu_default if self.device.type == "cuda" else "fp32"


def _sd35m(r: Run) -> list[dict]:
    return bench_sd35m(r.scale, r.device, r.args.iterations, r.clock, r.precision("fp16"), r.args.overhead_repeats)


def _methods(r: Run) -> list[dict]:
    return bench_methods(r.scale, r.device, r.clock, r.precision("fp16"))


def _attention(r: Run) -> list[dict]:
    backends = r.args.attention_backends.split(",") if r.args.attention_backends else None
    return bench_attention(r.scale, r.device, r.clock, r.precision("fp16"), backends, smoke=r.args.smoke)


def _wan(r: Run) -> list[dict]:  # the transformer alone, then an iteration
    precision = r.precision("bf16")
    rows = bench_wan(r.scale, r.device, r.args.repeats, r.clock, precision)
    return rows + bench_family("wan", r.scale, r.device, r.args.iterations, r.clock, precision)


def _family(name: str) -> Callable[[Run], list[dict]]:
    return lambda r: bench_family(name, r.scale, r.device, r.args.iterations, r.clock, r.precision("bf16"))


def _sp_families(text: str) -> tuple[str, ...]:
    families = tuple(text.split(","))
    unknown = sorted(set(families) - set(SP_FAMILY_KEYS))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown family {unknown[0]!r}; choose from {', '.join(SP_FAMILY_KEYS)}")
    return families


def _sp_degrees(text: str) -> tuple[int, ...]:
    try:
        degrees = tuple(int(s) for s in text.split(","))
    except ValueError:
        degrees = ()
    if not degrees or min(degrees) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of positive integers")
    return degrees


def _sp(r: Run) -> list[dict]:
    families, degrees = r.args.sp_families, r.args.sp_degrees
    if r.args.sp_plan:
        for p in sp_plan(r.args.smoke, families, degrees):
            r.clock.say(
                f"{p['family']} ({p['recipe']}) {p['shape']} {p['video']}: {p['transformer']} "
                f"{p['params'] / 1e9:.2f}B x {p['experts']}, {p['heads']} heads, {p['tokens']} tokens "
                f"({'x'.join(map(str, p['grid']))} latent), "
                + ", ".join(f"S={s}: {v}" for s, v in p["degrees"].items())
            )
        return []
    return bench_sp(r.device, r.clock, r.precision("bf16"), r.args.smoke, families, degrees)


# --what name -> its stage, in the order they run (SD3.5-M in fp16 as its recipe, the other families in bf16)
STAGES: dict[str, Callable[[Run], list[dict]]] = {
    "sd35m": _sd35m,
    "methods": _methods,
    "attention": _attention,
    "wan": _wan,
    "flux": _family("flux"),
    "wan_i2v": _family("wan_i2v"),
    "audio": _family("stable_audio"),
    "ltx2": _family("ltx2"),
    "z_image": _family("z_image"),
    "flux2": _family("flux2"),
    "qwen_image": _family("qwen_image"),
    "flux_kontext": _family("flux_kontext"),
    "qwen_image_edit": _family("qwen_image_edit"),
    "sp": _sp,
}


def markdown(rows: list[dict]) -> str:
    def num(v: float, digits: int = 2) -> str:
        return "-" if math.isnan(v) else ("OOM" if math.isinf(v) else f"{v:.{digits}f}")

    lines = [
        "| model | setting | s | images/s | peak GiB | estimate s | estimate peak GiB |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "ratio" in r or "nfe" in r or "vs_today" in r or "sp" in r:
            continue
        lines.append(
            f"| {r['model']} | {r['setting']} | {num(r['seconds'], 3)} | {num(r['images_per_s'])} | "
            f"{num(r['peak_gib'])} | {num(r['est_seconds'])} | {num(r['est_peak_gib'])} |"
        )
    ratios = [r for r in rows if "ratio" in r]
    if ratios:
        lines += ["", "| side by side | flowrl s | bare s | flowrl / bare |", "|---|---|---|---|"]
        lines += [
            f"| {r['model']}: {r['setting']} | {num(r['seconds'], 3)} | {num(r['bare_seconds'], 3)} | "
            f"{num(r['ratio'], 3)} |"
            for r in ratios
        ]
    methods = [r for r in rows if "nfe" in r]
    if methods:
        lines += [
            "",
            "| method iteration | setting | s | vs flow_grpo | NFE | NFE/s | reward calls | peak GiB |",
            "|---|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['model']} | {r['setting']} | {num(r['seconds'], 3)} | {num(r.get('vs_flow_grpo', math.nan))} | "
            f"{r['nfe']:.0f} | {num(r['nfe_per_s'], 0)} | {r['reward_calls']:.0f} | {num(r['peak_gib'])} |"
            for r in methods
        ]
    attention = [r for r in rows if "vs_today" in r]
    if attention:
        header = (
            "| attention / compile | setting | s | vs today | first iteration s | on-policy log-prob gap | "
            "peak GiB | 0.8 x today, check passing |"
        )
        lines += ["", header, "|---|---|---|---|---|---|---|---|"]
        lines += [
            f"| {r['model']} | {r['setting']} | {num(r['seconds'], 3)} | {num(r['vs_today'], 3)} | "
            f"{num(r['first_seconds'])} | {r['onpolicy_logp_diff']:.3g} | {num(r['peak_gib'])} | "
            f"{'yes' if r['meets_target'] else 'no'} |"
            for r in attention
        ]
    lines += sp_markdown(rows)
    return "\n".join(lines)


def environment(device: torch.device) -> str:
    import diffusers

    what = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    if device.type == "cuda":
        what += f", {torch.cuda.get_device_properties(device).total_memory / GIB:.0f} GiB"
    return f"{what}; torch {torch.__version__}, diffusers {diffusers.__version__}"


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(prog="python -m flowrl.benchmarks.perf.gpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="toy sizes, on a CPU in seconds (tests run this)")
    p.add_argument(
        "--what",
        default="sd35m,wan",
        help="comma-separated: sd35m, wan (the transformer alone, then an iteration), flux, audio, "
        "ltx2 (one AV-GRPO step), methods, attention, sp (sequence parallelism's share of a sample on one GPU)",
    )
    p.add_argument(
        "--attention-backends",
        default=None,
        help=f"comma-separated, for --what attention (default: {','.join(ATTENTION_BACKENDS)})",
    )
    p.add_argument(
        "--iterations", type=int, default=2, help="flowrl iterations of SD3.5-M, Wan, FLUX and SA3 (the first warms up)"
    )
    p.add_argument("--repeats", type=int, default=3, help="timed Wan calls (median), after one warm-up")
    p.add_argument(
        "--overhead-repeats", type=int, default=3, help="side-by-side rollout and update timings of SD3.5-M (0: skip)"
    )
    p.add_argument(
        "--precision",
        choices=["auto", "fp32", "fp16", "bf16"],
        default="auto",
        help="model and autocast dtype (auto: on a GPU fp16 for SD3.5-M as its recipe, bf16 for Wan, FLUX and SA3; "
        "fp32 on a CPU)",
    )
    p.add_argument(
        "--sp-families",
        type=_sp_families,
        default=SP_FAMILY_KEYS,
        help=f"comma-separated, for --what sp (default: {','.join(SP_FAMILY_KEYS)})",
    )
    p.add_argument("--sp-degrees", type=_sp_degrees, default=(1, 2, 4, 8), help="comma-separated S, for --what sp")
    p.add_argument("--sp-plan", action="store_true", help="--what sp: print what it would build and run, then exit")
    p.add_argument("--shallow-text-encoders", action="store_true", help="1-2 layer text encoders at real widths")
    p.add_argument("--max-seconds", type=float, default=270.0, help="skip stages that would run past this")
    p.add_argument("--json", default=None, help="also write the rows as JSON")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    scale = SMOKE if args.smoke else FULL
    if args.shallow_text_encoders and not args.smoke:
        scale = Scale(**{**scale.__dict__, "encoders": "shallow"})
    clock = Clock(args.max_seconds)
    clock.say(environment(device) + (" (smoke sizes)" if args.smoke else ""))
    if device.type != "cuda" and not args.smoke:
        clock.say("no GPU here: full sizes need one (use --smoke on a CPU)")
    rows: list[dict] = []
    what = args.what.split(",")
    unknown = set(what) - set(STAGES)
    if unknown:
        p.error(f"--what: unknown stage {sorted(unknown)[0]!r}; choose from {', '.join(STAGES)}")
    for name, stage in STAGES.items():  # in the table's order, whatever the order of --what
        if name in what:
            rows += stage(Run(args, scale, device, clock))
    print("\n" + markdown(rows) + "\n", flush=True)
    clock.say("done")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return rows

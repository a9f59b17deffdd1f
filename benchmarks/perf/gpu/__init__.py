"""Full-size speed and memory on one GPU, with random weights and nothing from the hub.

    python -m flowrl.benchmarks.perf.gpu [--json out.json]   # on a GPU: about 3-5 minutes
    python -m flowrl.benchmarks.perf.gpu --what flux|wan|audio|ltx2 --max-seconds 500   # one family's iteration
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
  Each of the four reports seconds per iteration (the last of ``--iterations``), samples per second and the
  peak next to ``estimate(cfg)``'s, and is skipped when the estimate says it would overrun ``--max-seconds``.
  With ``--smoke`` they run the tiny models of ``pipelines/tiny_families.py`` (``--shallow-text-encoders``
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

Stages that would overrun ``--max-seconds`` are skipped with a note, so the script ends in time.

One module a stage, sharing one runner: ``runner`` (arguments, the stage order, the tables), ``common`` (the
sizes, the time budget, device peaks, the timed iteration loop), ``sd35m`` (the SD3.5-M pipeline, its
iteration and the overhead ratios), ``methods``, ``attention``, ``wan`` (the transformer alone) and
``families`` (FLUX, Wan, SA3 and LTX-2 through the Trainer).
"""

from __future__ import annotations

from flowrl.benchmarks.perf.gpu.attention import ATTENTION_BACKENDS, bench_attention
from flowrl.benchmarks.perf.gpu.common import FULL, GIB, SMOKE, Clock, Scale
from flowrl.benchmarks.perf.gpu.families import (
    FAMILY_NAMES,
    FAMILY_RUNS,
    bench_family,
    build_family,
    family_config,
    save_family_configs,
)
from flowrl.benchmarks.perf.gpu.methods import METHOD_OVERRIDES, bench_methods
from flowrl.benchmarks.perf.gpu.runner import environment, main, markdown
from flowrl.benchmarks.perf.gpu.sd35m import bench_sd35m, build_sd35m
from flowrl.benchmarks.perf.gpu.wan import WAN21_1_3B, bench_wan, wan_latent

__all__ = [
    "ATTENTION_BACKENDS",
    "FAMILY_NAMES",
    "FAMILY_RUNS",
    "FULL",
    "GIB",
    "METHOD_OVERRIDES",
    "SMOKE",
    "WAN21_1_3B",
    "Clock",
    "Scale",
    "bench_attention",
    "bench_family",
    "bench_methods",
    "bench_sd35m",
    "bench_wan",
    "build_family",
    "build_sd35m",
    "environment",
    "family_config",
    "main",
    "markdown",
    "save_family_configs",
    "wan_latent",
]

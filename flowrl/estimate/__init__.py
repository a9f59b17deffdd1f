"""Pre-flight estimate of peak memory and time per iteration, from a Config, before any weight loads.

    est = estimate(resolve_config("sd35m-ocr"), world_size=8)
    print(format_estimate(est))

The architecture is read, never loaded. The transformer, text encoders and VAE are built from their
configs on the ``meta`` device: the ``tiny`` presets through ``pipelines/sd3/tiny.py``, a hub id or local folder
through ``load_config`` (``transformer/config.json`` and so on), with a built-in table of the SD3/SD3.5
configs as the offline fallback (FLUX, Wan and Stable Audio 3: "Other families" below). Parameters are
counted there.

**Memory** (bytes, per process; P = parameters, b(dtype) = 4 for fp32, 2 for fp16/bf16):

* frozen weights: text encoders and transformer at ``model.dtype``, the VAE in fp32 (it decodes in fp32);
* trainable weights (the LoRA, or the whole transformer) are upcast to fp32: 4 P_train;
* gradients 4 P_train, AdamW's two moments 8 P_train, EMA 4 P_train, a DDP gradient bucket 4 P_train
  with several processes; full fine-tuning with Flow-GRPO's ``method.options.beta > 0`` also keeps a frozen reference copy,
  and under autocast the fp16 copies of the fp32 weights (2 P) are cached during each training forward;
* rollout buffers: every local sample keeps its (T+1) latents in fp32 (the other families: only those its
  trained transitions read or write, as ``Trajectory.trained_only`` keeps them: a window of k keeps k + 1,
  the first n transitions n + 1; none on the device with ``train.offload_states``) and its prompt embedding
  until the update; the batch being sampled holds its whole chain meanwhile; the prompt-embedding cache keeps one embedding per distinct
  prompt seen, up to ``model.prompt_cache``;
* training activations, per row of one training forward (a row is one sample and one CFG branch):
  ``act = D * sum_layers(a_img * N_img + a_txt * N_txt)`` bytes, where D is the hidden width and a the
  bytes saved for backward per token, per layer and per unit of width. The a's are measured, not
  guessed: a copy of the transformer at width 64 (all layers, the same LoRA targets, precision and
  autocast) runs one forward on the CPU while ``saved_tensors_hooks`` add up what autograd keeps. Every
  saved tensor of a block is (tokens x a multiple of D), so the total scales with D. Measured values,
  in floats per token, layer and unit of D: full fine-tuning in fp32 about 21 in an MMDiT block, plus
  16 on image tokens in SD3.5's dual-attention layers; LoRA on the attention projections about 12
  (plus 6.5). sd35m-ocr (LoRA, fp16 autocast, which keeps some tensors in fp32) averages 49 bytes.
  Gradient checkpointing keeps each block's two input streams (``b * D * L * N`` bytes) plus one
  block's activations;
* sharding (``strategy``): ``zero2`` divides the AdamW moments and gradients by the number of
  processes; ``fsdp`` (FSDP2) also every parameter of the wrapped transformer, frozen base included, and the
  LoRA and the EMA (kept as shards), plus two gathered blocks, and counts the start-up as a phase: the whole
  transformer each process built before sharding it, or, for a full fine-tune on a GPU (made in host memory,
  ``flowrl.policy.builds_on_host``), the 16-bit pipeline as loaded, with a note of the host bytes; a frozen second expert and full
  fine-tuning's KL reference copy are sharded too (``flowrl.sharding``); DDP divides nothing. Not sharded: the
  text encoders and the VAE;
* sequence parallelism (``sequence_parallel`` = S, Ulysses): the W / S data groups share the samples, so a
  process holds its group's; the token-proportional activations, the backward transient and the rollout
  forward's working set are 1/S a process (attention's head split holds the same bytes a process), and so
  are a forward's FLOPs; the weights stay whole unless FSDP shards them over all W processes. Refused where
  the family's adapter cannot split a sample (``sequence_parallel_refusal``) or S does not divide the heads
  or the tokens;
* memory savers, modelled only where this version's config has their key (``model.SAVERS``):
  ``train.optimizer=adamw_8bit`` (2 bytes of moments a parameter for 8), ``train.activation_offload`` (one
  block's activations on the device), ``model.base_quantization=int8|float8`` (the frozen base in 1 byte a
  weight), ``model.text_encoders=offload|cache`` (off the device, but on it while encoding: a phase; cache
  also keeps the prompts' embeddings in host memory, not on the device);
* transients: the backward of one block, a no-grad forward of one block during the rollout, and the VAE
  decode of a batch (about 5 tensors of C0 x H x W floats alive per image at full resolution).

peak = static + max(training activations + gradients, rollout forward, VAE decode). On CPU the peak is a
resident-set size and includes the runtime (Python, torch, diffusers, transformers, peft, accelerate,
about ``CPU_RUNTIME_GIB``); on CUDA it is ``torch.cuda.max_memory_allocated``, which leaves out the CUDA
context (about 0.5 GiB) and allocator fragmentation (reserved memory is often 5-20 % above allocated).

**Time** (per iteration, per process, compute only):

* a transformer forward costs ``2 * P * tokens`` FLOPs per row, where P counts only the weights that act
  per token (the adaLN modulation layers act once per sample), image-stream weights times image tokens
  and text-stream weights times text tokens, plus attention: ``4 * N^2 * D`` per joint layer
  (QK^T and AV) and ``4 * N_img^2 * D`` per SD3.5 dual-attention layer;
* rollout: T forwards per sample (x the guidance's passes: 2 rows with CFG); update: per trained transition one forward and
  backward, 3x a forward for full fine-tuning (input and weight gradients) and 2x with LoRA (the frozen
  weights need only input gradients), +1 forward with gradient checkpointing and +1 reference forward
  when ``method.options.beta > 0``; decode: ``2 * P * positions`` of each VAE decoder stage;
* seconds = FLOPs / (sustained FLOP/s) + forward calls x a per-forward overhead (kernel launches and
  Python, ``OVERHEAD_S``). The FLOP/s is ``flops`` if given, else a short matmul measured on this machine
  times ``MATMUL_EFFICIENCY`` (the share of a matmul's rate a whole model reaches), else a constant for
  an H100-class GPU. Not modelled: reward models (OCR, PickScore and VLM judges can dominate), the text
  encoders (prompts are cached), the optimizer step, evaluation and checkpointing, and communication.

**Other families** (``model.pipeline`` flux, wan, stable_audio, ltx2; ``families.py`` and one profile each). The same items,
with what differs measured rather than written out per architecture:

* parts: the tiny models through each family folder's ``tiny.py`` (built for real, they are small; the paths
  each adapter knows: Wan ``tiny`` / ``tiny-a14b``, Stable Audio ``tiny`` / ``tiny-base``), a hub id or
  local folder through ``model_index.json`` and each component's ``load_config``, else the built-in
  ``PUBLISHED`` table (FLUX.1-dev, Wan2.1-T2V-1.3B / 14B, Wan2.2-T2V-A14B, stable-audio-3-medium[-base];
  where each number comes from is written above the table);
* tokens per row: FLUX (H/16)(W/16) image tokens + ``model.max_sequence_length`` T5 tokens (CLIP gives only
  the pooled vector); Wan F' (H/16)(W/16) video tokens (F' = 1 + (F-1)/4, patch 1x2x2) + the padded UMT5
  tokens, which enter only the cross-attention; Stable Audio 3 ceil(duration x rate / 4096) latent frames +
  the DiT's 64 memory tokens, and 256 T5Gemma tokens + 1 duration token of context;
* rows: ``adapter.guidance(scale).passes`` per sample and velocity (FLUX.1-dev's embedded guidance 1; Wan's
  CFG 2, 1 at scale 1; Stable Audio 3's CFG 2 only above scale 1);
* FLOPs per row and the no-grad working set of a rollout forward: one forward of the full-size transformer
  on the meta device under torch's FLOP counter, with a dispatch mode tracking the bytes that live tensors
  hold (each storage once, freed when its last tensor dies); attention goes through the fused kernel's
  meta function (a GPU keeps no N x N scores) and its ``4 N_q N_k d`` FLOPs are added from the shapes. The
  same for the decode of one sample (Wan's video VAE over all F frames, the SAME audio decoder); FLUX's
  VAE is SD3's, costed by SD3's decode formula. Wan decodes one clip at a time and gathers the clips;
* activations: the same width-64 probe on a narrow copy of the family's transformer (all its blocks, its
  FFN ratio, the same LoRA targets and precision), three forwards solved for per row, per main token and
  per text token, scaled by D; checkpointing keeps each block's input (FLUX both streams, Wan and SA3 the
  main one: their text context is one tensor all blocks share);
* two experts (Wan 2.2 A14B): both experts' weights resident at ``model.dtype``; LoRA (or fp32 weights),
  gradients, AdamW and EMA of the ``model.trained_experts`` only; a plan's trained transition that the frozen
  expert takes (sigma below or above ``boundary_ratio``) runs its training forward with nothing requiring
  grad: no backward, no saved activations.

Checked on the tiny models (``tests/cli/test_estimate.py``): parameter counts equal the modules the adapters
build, LoRA counts equal what the trainer adds, meta FLOPs equal torch's counter on a real CPU forward,
meta decode FLOPs and working sets equal the CPU's, and each probe predicts the bytes a 4x wider copy saves
at other token counts within 5 %. Against the one GPU measurement there is (docs/scaling.md, Wan2.1-1.3B
at 81 x 480 x 832, LoRA 32, bf16, one row, the transformer alone): a forward+backward peak of 94 GiB
predicted for 80 measured, 14 GiB with gradient checkpointing for 9.5 (the probe runs the CPU's bf16
autocast, which may keep more in fp32 than CUDA's; the two-block backward transient is generous with
checkpointing); the no-grad forward's working set 1.5 GiB for 1.7. The estimate errs high there.

The verdict (``verdict``): the estimate at the recipe's declared launch (``launch.gpus``, ``launch.strategy``,
``train.sequence_parallel``), whether it fits 95 % of a card's memory, and the settings that would make it fit
(``flowrl validate RECIPE --estimate [--gpu-memory GIB] [--json]``).

The package: ``model`` (the memory and time formulas, ``estimate``, ``format_estimate``, and ``MODEL_SIZES``, the
estimator of each ``model.pipeline``), ``verdict`` (fits or not, and what would), ``sd3`` (SD3/SD3.5 by formula), ``families`` (every other family by its
profile: ``PROFILES``), ``flux`` / ``wan`` / ``stable_audio`` / ``ltx2`` (one profile each: layout, width,
inputs, probe copy, decode), ``profile`` (what a profile holds), ``meta`` (counting and measuring on the meta
device, the probe machinery), ``published`` (the published architectures), ``base`` (the results).
"""

from __future__ import annotations

from flowrl.estimate.base import Estimate
from flowrl.estimate.meta import component, lora_parameter_count
from flowrl.estimate.model import CPU_RUNTIME_GIB, GIB, estimate, format_estimate, is_tiny, model_size
from flowrl.estimate.published import CLIP_G, CLIP_L, SD3_TRANSFORMERS, SD3_VAE, T5_XXL, WAN21_1_3B

__all__ = [
    "CLIP_G",
    "CLIP_L",
    "CPU_RUNTIME_GIB",
    "Estimate",
    "GIB",
    "SD3_TRANSFORMERS",
    "SD3_VAE",
    "T5_XXL",
    "WAN21_1_3B",
    "component",
    "estimate",
    "format_estimate",
    "is_tiny",
    "lora_parameter_count",
    "model_size",
]

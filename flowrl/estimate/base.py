"""What every part of the estimate shares: its results (``ModelSize``, ``Estimate``) and what a Config's
plan says that the model size and the formulas both read (trained transitions, 16-bit compute, the KL
reference, AV-GRPO)."""

from __future__ import annotations

from dataclasses import dataclass, field

from flowrl.config import Config


@dataclass
class ModelSize:
    """What the estimate needs to know about an architecture (from its configs, no weights)."""

    source: str  # where the configs came from
    transformer_params: int
    text_encoder_params: int
    vae_params: int
    trainable_params: int  # LoRA parameters, or the transformer's
    layers: int
    hidden: int  # D
    image_tokens: int  # N_img per row
    text_tokens: int  # N_txt per row
    latent_elems: int  # C * h * w of one latent
    cond_elems: int  # prompt embedding + pooled embedding of one sample
    flops_per_row: float  # one transformer forward, one row
    vae_decode_flops: float  # one image
    vae_decode_bytes: float  # working set of decoding one image
    act_bytes_per_row: float  # saved for backward by one training forward, one row
    ckpt_bytes_per_row: float  # the same with gradient checkpointing
    block_bytes_per_row: float  # one block's share of act_bytes_per_row (backward transient)
    rollout_bytes_per_row: float  # a no-grad block's working set
    # families beyond SD3 (the defaults are SD3's)
    pipeline: str = "sd3"
    media: str = "image"  # what a sample decodes to: image | video | audio
    passes: int | None = None  # transformer rows per sample and velocity; None: SD3's CFG (2 unless scale 1)
    experts: int = 1  # transformers resident (Wan 2.2 A14B: 2)
    trained_experts: int = 1  # of which train
    trained_weights: int | None = None  # weights of the trained experts; None: transformer_params
    expert_params: int | None = None  # one expert's weights; None: transformer_params
    trained_transitions: float | None = None  # per sample, with a backward; None: the plan's
    forward_only_transitions: float = 0.0  # per sample: trained by the plan, taken by a frozen expert
    decode_rows: int | None = None  # samples a decode call holds at once; None: the rollout batch
    media_bytes: float | None = None  # one decoded sample (fp32, on the CPU); None: an RGB image
    ckpt_tokens: int | None = None  # tokens of each checkpointed block's input; None: image + text
    all_states: bool = False  # every sample keeps all T + 1 states (AV-GRPO trains every transition; SD3 counts them)
    anchor_rollouts: bool = False  # AV-GRPO: one extra deterministic joint rollout per prompt group, states cached
    kl_reference: bool | None = None  # the update's KL reference (forward, and a frozen copy for full FT); None: beta
    heads: int | None = None  # attention heads of the transformer (Ulysses splits them over the SP processes)


@dataclass
class Estimate:
    """Per process. ``memory_gib`` and ``time_s`` break the totals down (the package docstring has the formulas)."""

    peak_gib: float
    seconds_per_iteration: float
    images_per_s: float  # over all processes
    memory_gib: dict[str, float]
    time_s: dict[str, float]
    flops_per_iteration: float  # per process
    flops_per_s: float  # the sustained rate assumed
    flops_source: str
    samples_per_process: int
    world_size: int
    device: str
    strategy: str
    model: ModelSize
    sequence_parallel: int = 1  # processes that split each sample's tokens (train.sequence_parallel)
    notes: list[str] = field(default_factory=list)


def trained_transitions(cfg: Config) -> int:
    """Transitions per sample the plan trains: the window, else the first ``timestep_fraction`` of the steps
    (Flow-GRPO's knobs of the method, ``flowrl.methods.options.flow_knobs``)."""
    from flowrl.methods.options import flow_knobs

    o = flow_knobs(cfg)
    return o.window_size if o.window_size else int(cfg.sample.num_steps * o.timestep_fraction)


def compute_16bit(cfg: Config) -> bool:
    """Whether the transformer's matmuls run in 16-bit."""
    if cfg.train.mixed_precision != "no":
        return True
    return cfg.model.dtype != "fp32" and cfg.train.lora.enabled  # full fine-tuning upcasts to fp32


def is_av_grpo(cfg: Config) -> bool:
    """AV-GRPO trains every transition and adds an anchor rollout per prompt group."""
    return getattr(getattr(cfg, "method", None), "name", "flow_grpo") == "av_grpo"


def kl_reference(cfg: Config) -> bool:
    """Whether the update runs a reference forward (and full fine-tuning keeps a frozen copy): Flow-GRPO's
    ``method.options.beta > 0``, or AV-GRPO's own KL weights (``method.options.beta_video`` / ``beta_audio``, defaults 0.01 / 0.002)."""
    from flowrl.methods.options import flow_knobs

    if flow_knobs(cfg).beta > 0:
        return True
    if is_av_grpo(cfg):
        from flowrl.credit.av_grpo import BETA

        options = cfg.method.options or {}
        return max(float(options.get("beta_video", BETA["video"])), float(options.get("beta_audio", BETA["audio"]))) > 0
    return False

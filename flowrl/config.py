"""Run configuration: dataclasses nested by concern, YAML recipes holding overrides, ``key=value`` overrides.

Plain data: every field is checked on its own when the config is built (errors are one line that names the
field, with the closest known key for a typo and, for choices, the allowed values); nothing here imports a
plug-in. A config is checked against the methods, parts, rewards and pipelines by ``flowrl.resolve``.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from flowrl.configkit import (  # noqa: F401 - ConfigError, flatten_config, parse_stop_rule: part of the config's API
    ConfigError,
    build_dataclass,
    flatten_config,
    looks_numeric,
    parse_stop_rule,
    unknown_key,
)


def _choice(name: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        raise ConfigError(f"{name}: {value!r} is not one of {', '.join(map(str, allowed))}")


def _positive(name: str, value: float, strict: bool = True) -> None:
    if value < 0 or (strict and value == 0):
        raise ConfigError(f"{name}: must be {'> 0' if strict else '>= 0'}, got {value}")


@dataclass
class ModelConfig:
    pipeline: str = "sd3"  # adapter name (`flowrl ls pipelines`)
    path: str = "tiny"  # hub id, local folder, or "tiny" (real SD3 classes at a tiny size, offline)
    tiny_size: str = "tiny"  # size preset of the offline model: tiny | small | 70m
    revision: str | None = None  # hub revision (branch, tag or commit) of model.path
    # with a single-file model.path (.safetensors): a diffusers folder or hub id giving the configs, the
    # tokenizers and the parts the file lacks
    config_path: str | None = None
    dtype: str = "fp32"  # dtype of the frozen weights: fp32 | fp16 | bf16
    resolution: int = 512  # square image side in pixels (a multiple of 16)
    height: int | None = None  # image or video height in pixels (a multiple of 16); null: model.resolution
    width: int | None = None  # image or video width in pixels (a multiple of 16); null: model.resolution
    # video pipelines (wan): frames a clip (Wan: 4k + 1) and their rate in the written MP4s; null: the family's
    # default (Wan: 81 frames at 16 fps)
    num_frames: int | None = None
    fps: float | None = None
    duration_s: float | None = None  # audio pipelines (stable_audio): seconds a clip; null: the family's default
    # two-expert video models (Wan 2.2 A14B): which experts train, the high-noise one (t >= boundary), the
    # low-noise one, or both; an expert that does not train stays frozen and samples as it is
    trained_experts: str = "both"
    # editing families that resize each source image to a pixel area (qwen_image_edit: its VAE size, and what the
    # VL encoder sees of it, at most Edit-Plus's 384 x 384): that area; null: the pipeline's own (1024 x 1024). A
    # smaller area makes CPU-sized runs possible; the pipeline itself has no such setting
    source_area: int | None = None
    max_sequence_length: int = 128  # T5 tokens
    # distinct prompts whose embeddings stay on the device (least recently used dropped); 0: none kept
    prompt_cache: int = 1024
    # where the text encoders live during training: device (on the device throughout) | offload (on the CPU
    # between uses, moved to the device for each encode of prompts the prompt cache lacks) | cache (every
    # training and evaluation prompt encoded before training, the rows kept on the host and moved per batch, the
    # encoders then freed); `flowrl sample` loads them as usual
    text_encoders: str = "device"
    # the transformer's attention kernel, a backend of diffusers' attention dispatcher: native, flash, _flash_3,
    # _native_cudnn, _native_flash, _native_efficient, xformers, ... (training needs one with a backward pass,
    # so not sage); null: diffusers' default processor. Refused when the model is built where its package or
    # hardware is missing
    attention_backend: str | None = None
    # a LoRA run's frozen base Linear weights quantized, weight only (torchao; `pip install flowrl-toolkit[memory]`):
    # none | int8 (a quarter of fp32's bytes, half of bf16's) | float8 (e4m3, int8's bytes); rollouts, updates and
    # the KL reference all run the quantized base, the adapters train in fp32; refused with full fine-tuning
    base_quantization: str = "none"

    def __post_init__(self):
        _choice("model.dtype", self.dtype, ("fp32", "fp16", "bf16"))
        _choice("model.text_encoders", self.text_encoders, ("device", "offload", "cache"))
        _choice("model.base_quantization", self.base_quantization, ("none", "int8", "float8"))
        if self.prompt_cache < 0:
            raise ConfigError(f"model.prompt_cache: must be >= 0, got {self.prompt_cache}")
        _choice("model.tiny_size", self.tiny_size, ("tiny", "small", "70m"))
        _positive("model.resolution", self.resolution)
        if self.resolution % 16:
            raise ConfigError(f"model.resolution: must be a multiple of 16, got {self.resolution}")
        for side in ("height", "width"):
            value = getattr(self, side)
            if value is not None:
                _positive(f"model.{side}", value)
                if value % 16:
                    raise ConfigError(f"model.{side}: must be a multiple of 16, got {value}")
        for name in ("num_frames", "fps", "duration_s"):
            if getattr(self, name) is not None:
                _positive(f"model.{name}", getattr(self, name))
        _choice("model.trained_experts", self.trained_experts, ("both", "high_noise", "low_noise"))
        if self.source_area is not None and self.source_area < 32 * 32:
            raise ConfigError(f"model.source_area: at least 1024 pixels (32 x 32), got {self.source_area}")
        _positive("model.max_sequence_length", self.max_sequence_length)
        if self.attention_backend is not None:
            from diffusers.models.attention_dispatch import AttentionBackendName

            _choice("model.attention_backend", self.attention_backend, tuple(m.value for m in AttentionBackendName))

    @property
    def size(self) -> tuple[int, int]:
        """(height, width) in pixels: ``model.height`` / ``model.width``, each defaulting to ``model.resolution``."""
        return (self.height or self.resolution, self.width or self.resolution)


@dataclass
class DataConfig:
    # .txt (one prompt a line), .jsonl ({"prompt": ..., metadata}), .csv (a header line naming the columns, the
    # prompt's among them: data.prompt_column; the others metadata), builtin:NAME, a dataset folder with
    # train.jsonl, train_metadata.jsonl (GenEval tags) or train.txt, as flow_grpo and Flow-Factory lay theirs,
    # or a Hugging Face `datasets` dataset: hf:NAME (a hub id or a local folder; `pip install datasets`), or a
    # folder written by save_to_disk (read with load_from_disk)
    prompts: str = "builtin:tiny"
    # held-out prompts for evaluation samples; default: the eval_split of a dataset folder or Hugging Face
    # dataset `prompts`, when it has one, else `prompts`
    eval_prompts: str | None = None
    split: str = "train"  # the split that trains, of a dataset folder or a Hugging Face DatasetDict
    eval_split: str = "test"  # the held-out split, of a dataset folder or a Hugging Face DatasetDict
    # the column (Hugging Face dataset, .csv) or field (.jsonl) holding the prompt; every other one is the row's
    # metadata (reward inputs: GenEval tags, OCR targets), except negative_prompt
    prompt_column: str = "prompt"
    dataset_config: str | None = None  # with hf:NAME, the dataset's configuration (subset) name, if it has several
    # the CFG negative prompt (the unconditional branch) of every prompt whose row gives none of its own in a
    # negative_prompt field or column (null: none); "": the empty prompt, as the diffusers pipelines use
    negative_prompt: str = ""

    def __post_init__(self):
        for name in ("split", "eval_split", "prompt_column"):
            if not getattr(self, name).strip():
                raise ConfigError(f"data.{name}: must not be empty")
        if self.prompt_column == "negative_prompt":
            raise ConfigError(
                "data.prompt_column: 'negative_prompt' is the negative prompt's column; name the prompt's own"
            )


@dataclass
class SampleConfig:
    num_steps: int = 10  # denoising steps of training rollouts
    eval_num_steps: int = 40  # steps of evaluation / `flowrl sample`
    guidance_scale: float = 4.5  # CFG in rollouts (and in the training forward); 1 = no CFG
    eval_guidance_scale: float | None = None  # default: guidance_scale
    group_size: int = 24  # samples per prompt (G); at least 2 where the method compares them (1: SFT, reward backprop)
    prompts_per_iteration: int = 48  # prompt groups per iteration, over all processes
    batch_size: int = 9  # samples per rollout forward, per process; also the training minibatch
    same_noise_in_group: bool = False  # group members start from the same initial noise

    def __post_init__(self):
        _positive("sample.num_steps", self.num_steps)
        _positive("sample.eval_num_steps", self.eval_num_steps)
        _positive("sample.guidance_scale", self.guidance_scale)
        _positive("sample.group_size", self.group_size)  # at least 2 where the method compares a group's samples
        _positive("sample.prompts_per_iteration", self.prompts_per_iteration)
        _positive("sample.batch_size", self.batch_size)


@dataclass
class LoraConfig:
    enabled: bool = True  # False: full fine-tuning of the transformer
    rank: int = 32  # LoRA rank r
    alpha: float = 64  # LoRA alpha (scale alpha / r)
    target_modules: list[str] | None = None  # default: the adapter's attention projections
    init: str = "gaussian"  # peft init_lora_weights: gaussian | default
    dropout: float = 0.0  # must stay 0 for exact on-policy log-probs

    def __post_init__(self):
        _positive("train.lora.rank", self.rank)
        _positive("train.lora.alpha", self.alpha)
        _choice("train.lora.init", self.init, ("gaussian", "default"))
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"train.lora.dropout: must be in [0, 1), got {self.dropout}")


MAX_ITERATIONS = 10**9  # far beyond any run; above it a count is a typo (and overflows the progress bar)


@dataclass
class TrainConfig:
    iterations: int = 100  # sampling + update rounds of the run
    learning_rate: float = 3e-4  # AdamW base learning rate (see lr_schedule)
    # adamw (torch's) | adamw_8bit (torchao's AdamW8bit: both moments of every tensor of 4096+ values in 8 bits,
    # about a quarter of adamw's state; `pip install flowrl-toolkit[memory]`)
    optimizer: str = "adamw"
    lr_schedule: str = "constant"  # constant | cosine | linear, over the run's optimizer steps (flowrl.lr)
    lr_warmup_steps: int = 0  # optimizer steps of linear warm-up from 0 before the schedule
    lr_min_ratio: float = 0.0  # cosine / linear end at this fraction of learning_rate
    adam_betas: list[float] = field(default_factory=lambda: [0.9, 0.999])  # AdamW (beta1, beta2)
    weight_decay: float = 1e-4  # AdamW weight decay
    adam_eps: float = 1e-8  # AdamW epsilon
    max_grad_norm: float = 1.0  # gradient-norm clip before each optimizer step
    optimizer_steps_per_iteration: int = 2  # Flow-GRPO: two optimizer steps per epoch
    mixed_precision: str = "no"  # no | fp16 | bf16 (accelerate autocast, rollout and update alike)
    gradient_checkpointing: bool = False  # recompute the transformer's activations in the backward
    # the update forward's saved activations wait on the host (pinned) until the backward reads them: the same
    # numbers, device memory for host memory and copies
    activation_offload: bool = False
    # processes that share each sample, the transformer's tokens split over them (Ulysses; docs/scaling.md)
    sequence_parallel: int = 1
    # keep the rollout's stored states (the latents of the transitions that train) on the CPU until the update
    # moves each rollout batch's back to the device for its own loss: video latents are large
    offload_states: bool = False
    ema: bool = False  # keep an EMA of the trained weights (evaluation, export, `flowrl sample --ema`)
    ema_decay: float = 0.9  # EMA decay per EMA update
    ema_every: int = 8  # optimizer steps between EMA updates
    on_reward_error: str = "stop"  # a reward raised, hung or returned NaN: stop (after saving) or skip the iteration
    reward_timeout_s: float = 600.0  # seconds a reward call may take (0: no limit)
    reward_report_s: float = 60.0  # while waiting for a reward, report it every this many seconds
    # score each rollout batch in a background thread while the next one samples (the same calls and
    # results as in turn; a pairwise reward, which needs whole groups, is always called once after the rollout;
    # a process's share of one batch has nothing to overlap and is scored in turn)
    reward_overlap: bool = True
    # with reward_overlap, the rollout batches scored at once (results in batch order): 2 keeps up with a reward twice
    # as slow as a batch's rollout (a served judge) while a local reward holds two calls' memory at most
    reward_in_flight: int = 2
    # stop (after saving) when this many iterations in a row kept no sample: every group's reward was flat
    max_flat_iterations: int = 5
    onpolicy_check: bool = True  # stop at step 0 if the recomputed log-prob differs from the rollout's
    onpolicy_tol: float = 1e-4  # largest |recomputed - rollout log-prob| the first update accepts
    # torch.compile the transformer's forward, the one module that rollouts, updates and evaluations all call
    # (parameter names, checkpoints and the LoRA export unchanged); the first iterations pay the compilation
    compile: bool = False
    # with train.compile, torch.compile's mode (reduce-overhead and max-autotune also capture CUDA graphs)
    compile_mode: str = "default"  # default | reduce-overhead | max-autotune | max-autotune-no-cudagraphs
    lora: LoraConfig = field(default_factory=LoraConfig)

    def __post_init__(self):
        if not 1 <= self.iterations <= MAX_ITERATIONS:  # 0 trains nothing; a huge count is a slip of the keyboard
            raise ConfigError(f"train.iterations: must be between 1 and {MAX_ITERATIONS:,}, got {self.iterations}")
        _positive("train.learning_rate", self.learning_rate)
        _choice("train.lr_schedule", self.lr_schedule, ("constant", "cosine", "linear"))
        _choice("train.optimizer", self.optimizer, ("adamw", "adamw_8bit"))
        _positive("train.lr_warmup_steps", self.lr_warmup_steps, strict=False)
        if not 0 <= self.lr_min_ratio <= 1:
            raise ConfigError(f"train.lr_min_ratio: must be in [0, 1], got {self.lr_min_ratio}")
        if len(self.adam_betas) != 2 or not all(0 <= b < 1 for b in self.adam_betas):
            raise ConfigError(f"train.adam_betas: expected two values in [0, 1), got {self.adam_betas}")
        _positive("train.weight_decay", self.weight_decay, strict=False)
        _positive("train.max_grad_norm", self.max_grad_norm)
        _positive("train.sequence_parallel", self.sequence_parallel)
        _positive("train.optimizer_steps_per_iteration", self.optimizer_steps_per_iteration)
        _choice("train.mixed_precision", self.mixed_precision, ("no", "fp16", "bf16"))
        if not 0 <= self.ema_decay < 1:
            raise ConfigError(f"train.ema_decay: must be in [0, 1), got {self.ema_decay}")
        _positive("train.ema_every", self.ema_every)
        _positive("train.onpolicy_tol", self.onpolicy_tol)
        _choice("train.on_reward_error", self.on_reward_error, ("stop", "skip"))
        _positive("train.reward_timeout_s", self.reward_timeout_s, strict=False)
        _positive("train.reward_report_s", self.reward_report_s)
        _positive("train.reward_in_flight", self.reward_in_flight)
        _positive("train.max_flat_iterations", self.max_flat_iterations)
        _choice(
            "train.compile_mode",
            self.compile_mode,
            ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
        )


@dataclass
class MethodConfig:
    name: str = "flow_grpo"  # `flowrl ls methods`
    options: dict[str, Any] = field(default_factory=dict)  # method-specific settings
    # the method's parts (docs/config.md, "Method parts"); null: the method's own. The credit rule from rewards to
    # advantages: group_zscore, win_rates, dense_gains, turning_points, granular, ...
    credit: str | None = None
    # none | gdpo (GDPO, Pref-GRPO's --apply_gdpo: the advantages z-scored again over the whole iteration, all
    # processes together, sample std, eps 1e-8, each transition's column on its own, a 0 stays 0; then clipped)
    credit_norm: str | None = None
    # a transition's loss: ppo_clip | ratio_norm (GRPO-Guard's RatioNorm, Pref-GRPO's --rationorm, on Flow-GRPO's
    # loss and every method built on it; needs a flow_sde or dance_sde step) | the method's own (ram_regression, ...)
    loss: str | None = None


# the tracker names of accelerate 1.x (``accelerate.tracking.LOGGER_TYPE_TO_CLASS``); trackio needs accelerate >= 1.10
TRACKER_NAMES = ("tensorboard", "wandb", "swanlab", "aim", "mlflow", "comet_ml", "clearml", "dvclive", "trackio")


@dataclass
class LogConfig:
    save_every: int = 10  # iterations between checkpoints (the last iteration always saves)
    keep_last: int = 3  # checkpoints kept; the newest complete one is never deleted
    sample_every: int = 10  # iterations between sample grids
    num_sample_images: int = 8  # images in each sample grid (samples/iter-*.png)
    eval_every: int = 0  # iterations between evaluations (0: never); also before the first and after the last
    eval_num_prompts: int = 32  # held-out prompts per evaluation (from data.eval_prompts, else data.prompts)
    eval_images_per_prompt: int = 1  # evaluation images per held-out prompt (different noise)
    monitors: bool = True  # reward-hacking monitors every iteration: in-group diversity, saturation, colour
    stop_if: list[str] = field(default_factory=list)  # early stop, e.g. ["monitor/diversity/in_group<0.01"]
    # experiment trackers (accelerate's tracking, main process only), e.g. [tensorboard] or [tensorboard, wandb];
    # local files go under <run>/trackers (docs/trackers.md)
    trackers: list[str] = field(default_factory=list)
    tracker_project: str | None = None  # the trackers' project name; default: the run folder's name

    def __post_init__(self):
        for rule in self.stop_if:
            parse_stop_rule(rule)
        for i, name in enumerate(self.trackers):
            if name not in TRACKER_NAMES:
                close = difflib.get_close_matches(str(name).lower(), TRACKER_NAMES, n=1, cutoff=0.5)
                hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(TRACKER_NAMES)}"
                raise ConfigError(f"log.trackers: unknown tracker {name!r}{hint}")
            if name in self.trackers[:i]:
                raise ConfigError(f"log.trackers: {name!r} is listed twice")
        if self.tracker_project is not None and (
            not self.tracker_project.strip() or "/" in self.tracker_project or self.tracker_project in (".", "..")
        ):
            raise ConfigError(f"log.tracker_project: {self.tracker_project!r} must be a plain name")
        _positive("log.eval_every", self.eval_every, strict=False)
        _positive("log.eval_num_prompts", self.eval_num_prompts)
        _positive("log.eval_images_per_prompt", self.eval_images_per_prompt)
        _positive("log.save_every", self.save_every)
        _positive("log.keep_last", self.keep_last)
        _positive("log.sample_every", self.sample_every)
        _positive("log.num_sample_images", self.num_sample_images)


LAUNCH_STRATEGIES = ("ddp", "zero2", "fsdp")


@dataclass
class LaunchConfig:
    """The launch a recipe is sized for: plain data that `flowrl validate --estimate` assumes and the recipe's
    header repeats. The processes themselves are accelerate's (docs/scaling.md)."""

    gpus: int | None = None  # processes (GPUs) over all machines; null: train.sequence_parallel's (1 without SP)
    strategy: str = "ddp"  # ddp | zero2 | fsdp: the config in flowrl/recipes/accelerate/ to launch with

    def __post_init__(self):
        if self.gpus is not None and (isinstance(self.gpus, bool) or self.gpus < 1):
            raise ConfigError(f"launch.gpus: must be >= 1, got {self.gpus}")
        _choice("launch.strategy", self.strategy, LAUNCH_STRATEGIES)


@dataclass
class Config:
    output_dir: str = "runs/flowrl"  # the run folder (checkpoints, metrics.jsonl, samples, the LoRA)
    # the run folder is output_dir/run_name when set; "auto": a new timestamped name (YYYYmmdd-HHMMSS)
    run_name: str | None = None
    seed: int = 42  # seeds every random stream (prompts, noise, SDE draws, windows)
    # checkpoint folder (or its state.json), or "latest" (newest intact one in the run folder)
    resume: str | None = None
    resume_allow_changes: bool = False  # resume although settings that change the math differ
    overwrite: bool = False  # train into a folder holding a run: remove its checkpoints and outputs first
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    sample: SampleConfig = field(default_factory=SampleConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    method: MethodConfig = field(default_factory=MethodConfig)
    # reward name -> weight: the trained reward is the weighted sum (`flowrl ls rewards`, or "module:attr")
    reward: dict[str, float] = field(default_factory=lambda: {"jpeg_compressibility": 1.0})
    reward_args: dict[str, dict[str, Any]] = field(default_factory=dict)  # per-reward constructor kwargs
    eval_reward: dict[str, float] | None = None  # rewards scored at evaluation (default: `reward`), not trained on
    log: LogConfig = field(default_factory=LogConfig)
    launch: LaunchConfig = field(default_factory=LaunchConfig)  # the launch the recipe is sized for

    def __post_init__(self):
        if self.launch.gpus is not None and self.launch.gpus % self.train.sequence_parallel:
            raise ConfigError(
                f"launch.gpus: {self.launch.gpus} is not a multiple of train.sequence_parallel="
                f"{self.train.sequence_parallel} (each data group is that many processes)"
            )
        for name, weight in self.reward.items():
            if not isinstance(weight, (int, float)) or isinstance(weight, bool):
                raise ConfigError(f"reward.{name}: weight must be a number, got {weight!r}")
        if self.run_name is not None and (not self.run_name or "/" in self.run_name or self.run_name in (".", "..")):
            raise ConfigError(f"run_name: {self.run_name!r} must be a plain folder name (or 'auto')")
        if self.resume and self.resume != "latest" and Path(self.resume).name == "state.json":
            self.resume = str(Path(self.resume).parent)  # the file inside a checkpoint: that checkpoint's folder
        if self.model.base_quantization != "none" and not self.train.lora.enabled:
            raise ConfigError(
                f"model.base_quantization={self.model.base_quantization}: full fine-tuning "
                "(train.lora.enabled=false) trains the base weights, which cannot be quantized; set it to none"
            )
        if self.overwrite and self.resume:
            raise ConfigError("overwrite=true removes the run that resume= would continue: give one of them")
        if self.sample.eval_guidance_scale is None:
            self.sample.eval_guidance_scale = self.sample.guidance_scale

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def inert_settings(cfg: Config) -> list[str]:
    """One line for each setting changed from its default that has no effect in this config (a feature that
    is off, a schedule that does not read it), naming the setting and what would make it count."""
    lines = []
    defaults, t = TrainConfig(), cfg.train
    changed = [
        f"train.{key}={getattr(t, key)}"
        for key in ("ema_decay", "ema_every")
        if getattr(t, key) != getattr(defaults, key)
    ]
    if changed and not t.ema:
        lines.append(f"{' and '.join(changed)}: no effect, train.ema is false (set train.ema=true to keep an EMA)")
    if t.lr_schedule == "constant" and t.lr_min_ratio != defaults.lr_min_ratio:
        lines.append(
            f"train.lr_min_ratio={t.lr_min_ratio}: no effect, train.lr_schedule is constant (set "
            "train.lr_schedule=cosine or linear to decay to it)"
        )
    if cfg.data.negative_prompt and cfg.sample.guidance_scale == 1 and cfg.sample.eval_guidance_scale == 1:
        lines.append(
            "data.negative_prompt: no effect, sample.guidance_scale and sample.eval_guidance_scale are 1 "
            "(no CFG, so no negative branch)"
        )
    return lines


# ----------------------------------------------------------------------------------------------------
# building configs from dicts, recipes and overrides


def config_from_dict(data: dict[str, Any]) -> Config:
    if not isinstance(data, dict):
        raise ConfigError(f"a config must be a mapping of settings, got {type(data).__name__}")
    return build_dataclass(Config, data)


def set_path(tree: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``tree[a][b][c] = value`` for ``dotted = "a.b.c"``, checking each part against Config."""
    parts = dotted.split(".")
    cls: Any = Config
    node = tree
    for depth, part in enumerate(parts):
        prefix = ".".join(parts[:depth]) + ("." if depth else "")
        if dataclasses.is_dataclass(cls):
            names = [f.name for f in dataclasses.fields(cls)]
            if part not in names:
                raise unknown_key(prefix, part, names, dotted)
            cls = typing.get_type_hints(cls)[part]
        elif typing.get_origin(cls) is dict or cls is Any:
            cls = typing.get_args(cls)[1] if typing.get_origin(cls) is dict else Any
        elif typing.get_origin(cls) in (typing.Union, types.UnionType):
            inner = [a for a in typing.get_args(cls) if dataclasses.is_dataclass(a) or typing.get_origin(a) is dict]
            if not inner:
                raise ConfigError(f"{prefix.rstrip('.')}: is not a group of settings; cannot set {dotted!r}")
            cls = inner[0]
            names = [f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls) else None
            if names is not None and part not in names:
                raise unknown_key(prefix, part, names, dotted)
            cls = typing.get_type_hints(cls)[part] if names is not None else typing.get_args(cls)[1]
        else:
            raise ConfigError(f"{prefix.rstrip('.')}: is not a group of settings; cannot set {dotted!r}")
        if depth == len(parts) - 1:
            node[part] = value
        else:
            child = node.get(part)
            if part in node and not isinstance(child, dict) and _is_group(cls):
                # e.g. "train=5 train.iterations=3": the section was given a value; never drop it silently
                raise ConfigError(
                    f"{prefix}{part}: was set to {child!r}, not a group of settings; cannot also set {dotted!r}"
                )
            if child is None:
                child = {}
                node[part] = child
            node = child


def _is_group(tp: Any) -> bool:
    """A dataclass section or a mapping (possibly optional): something keys can be set inside."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return any(_is_group(a) for a in typing.get_args(tp))
    return dataclasses.is_dataclass(tp) or typing.get_origin(tp) is dict or tp is Any


def parse_override(text: str) -> tuple[str, Any]:
    """``"train.learning_rate=1e-4"`` -> ``("train.learning_rate", 1e-4)``; values are parsed as YAML."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"override {text!r}: expected key=value")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    quoted = raw.strip()[:1] in ("'", '"')  # a quoted value stays the string it spells ('"2024"')
    if isinstance(value, str) and not quoted and looks_numeric(value):
        value = float(value)
    return key, value


# ----------------------------------------------------------------------------------------------------
# recipes

DEFAULT_RECIPE = "tiny-cpu"


def recipe_names() -> list[str]:
    folder = resources.files("flowrl") / "recipes"
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


# sections a ``base:`` recipe's child replaces whole (their keys are names of the user's choosing)
REPLACED_SECTIONS = ("reward", "eval_reward", "reward_args")


def recipe_over_base(merged: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    """A recipe's settings ``data`` over its ``base:`` recipe's ``merged``: each section updates the base's key by
    key (a key's value replaces the base's, lists and mappings such as ``method.options`` whole); ``reward``,
    ``eval_reward`` and ``reward_args`` replace the base's sections whole."""
    for key, value in data.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict) and key not in REPLACED_SECTIONS:
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def read_recipe(name_or_path: str) -> dict[str, Any]:
    path = Path(name_or_path)
    names = recipe_names()
    # a bare name of a shipped recipe is that recipe, even where the working folder holds a folder of that name;
    # a .yaml/.yml path or an existing file is the user's own recipe file
    if path.suffix in (".yaml", ".yml") or path.is_file() or (path.is_dir() and name_or_path not in names):
        if path.is_dir():
            raise ConfigError(f"recipe {name_or_path!r}: is a folder, not a recipe file (a .yaml file)")
        if not path.is_file():
            raise ConfigError(f"recipe {name_or_path!r}: no such file")
        text = _recipe_text(path, name_or_path)
    else:
        if name_or_path not in names:
            close = difflib.get_close_matches(name_or_path, names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; shipped: {', '.join(names)}"
            raise ConfigError(f"unknown recipe {name_or_path!r}{hint}")
        text = (resources.files("flowrl") / "recipes" / f"{name_or_path}.yaml").read_text()
    try:
        _check_duplicate_keys(yaml.compose(text, Loader=yaml.SafeLoader), name_or_path)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        where = f" at line {line + 1}" if line is not None else ""
        raise ConfigError(f"recipe {name_or_path!r}: invalid YAML{where}") from None
    if data is None:  # an empty file, or one of comments only, would silently run every default
        raise ConfigError(
            f"recipe {name_or_path!r}: the file holds no settings (empty or comments only); write "
            "the settings to change, or `base: tiny-cpu` to start from a shipped recipe"
        )
    if not isinstance(data, dict):
        raise ConfigError(f"recipe {name_or_path!r}: must be a mapping of settings")
    return data


def _recipe_text(path: Path, name: str) -> str:
    """A recipe file's text (UTF-8); an unreadable or binary file is one line naming it."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"recipe {name!r}: cannot read it ({exc.strerror or exc})") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"recipe {name!r}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); save it as UTF-8"
        ) from None


def _check_duplicate_keys(node: Any, name: str, where: str = "") -> None:
    """A key given twice in one mapping (YAML loaders keep the last silently): one line naming both lines."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key, value in node.value:
            label = key.value if isinstance(key, yaml.ScalarNode) else None
            if label is not None and label != "<<":
                key_path = f"{where}{label}"
                if label in seen:
                    raise ConfigError(
                        f"recipe {name!r}: {key_path!r} is given twice (lines {seen[label] + 1} and "
                        f"{key.start_mark.line + 1}): YAML keeps only the last, so the first is lost; "
                        "merge them into one"
                    )
                seen[label] = key.start_mark.line
                _check_duplicate_keys(value, name, f"{key_path}.")
            else:
                _check_duplicate_keys(value, name, where)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_duplicate_keys(item, name, f"{where.rstrip('.')}[{i}].")


SECRET_WORDS = ("token", "api_key", "apikey", "password", "secret")


def redact_secrets(tree: Any) -> Any:
    """A copy of a config tree with the values of secret-looking keys (tokens, API keys) replaced."""
    if isinstance(tree, dict):
        return {
            k: "<redacted>" if any(w in str(k).lower() for w in SECRET_WORDS) and v else redact_secrets(v)
            for k, v in tree.items()
        }
    if isinstance(tree, list):
        return [redact_secrets(v) for v in tree]
    return tree


def dump_config(cfg: Config, redact: bool = True) -> str:
    """The resolved config as YAML; tokens and API keys passed as arguments are not written out."""
    data = cfg.to_dict()
    return yaml.safe_dump(redact_secrets(data) if redact else data, sort_keys=False)


# settings that do not change what a resumed run computes: where it writes, how long it runs, what it logs
# and evaluates, and how it waits for rewards. Anything else differing from the checkpoint's run is refused.
RESUME_FREE_KEYS = (
    "output_dir",
    "run_name",
    "resume",
    "resume_allow_changes",
    "overwrite",
    "train.iterations",
    "log.",
    "data.eval_prompts",
    "eval_reward",
    "model.prompt_cache",
    "model.text_encoders",
    "train.reward_timeout_s",
    "train.reward_report_s",
    "train.reward_overlap",
    "train.reward_in_flight",
    "data.eval_split",
    "train.on_reward_error",
    "train.onpolicy_check",
    "train.onpolicy_tol",
    "train.max_flat_iterations",
    "sample.eval_num_steps",
    "sample.eval_guidance_scale",
    # kernels, not the algorithm: a resume on other hardware may need another attention backend
    "model.attention_backend",
    "train.compile",
    "train.compile_mode",
    "train.offload_states",  # where states wait, not what they are
    "train.activation_offload",  # where the update's activations wait, not what they are
    "train.sequence_parallel",  # how a sample's tokens are split over processes, not what is computed
    "launch.",  # the launch a recipe is sized for: what the estimate assumes, not what is computed
)

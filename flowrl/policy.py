"""The policy: the trained transformer and the weights kept beside it.

``Policy`` sets the adapter's transformer up for training (LoRA or full fine-tuning, the frozen reference copy
of full fine-tuning, trainable parameters in fp32, gradient checkpointing, ``torch.compile``, accelerate's
``prepare`` with DeepSpeed's settings filled in), counts its forwards (``cost/nfe``), keeps the EMA and the
method's parameter averages, swaps any of them in (``weights(name)``) and exports the trained weights in
diffusers format.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from flowrl import sharding
from flowrl.configkit import NamedEnum
from flowrl.memory import add_adapter_quiet, build_optimizer, missing_inductor_backend, quantize_base
from flowrl.mesh import Mesh, enable_sequence_parallel


class Weights(NamedEnum):
    """The weights ``Policy.weights`` swaps in, besides a parameter average the method names."""

    CURRENT = "current"  # as trained
    REFERENCE = "reference"  # the base: LoRA off, or full fine-tuning's frozen copy
    EMA = "ema"  # the EMA (``train.ema``)

    @classmethod
    def of(cls, name: Weights | str) -> Weights | None:
        """The member ``name`` names; None: a parameter average's name."""
        try:
            return cls(name)
        except ValueError:
            return None


class ParamAverage:
    """A moving average of the trainable parameters: at its k-th update (k from 1)
    ``shadow <- d_k * shadow + (1 - d_k) * params``, ``d_k = decay_at(k)``; fp32, sharded like the params."""

    def __init__(self, params: dict[str, torch.Tensor], decay_at):
        self.decay_at = decay_at
        self.shadow = {k: p.detach().clone().float() for k, p in params.items()}
        self.updates = 0

    @torch.no_grad()
    def update(self, params: dict[str, torch.Tensor]) -> None:
        self.updates += 1
        d = float(self.decay_at(self.updates))
        for k, p in params.items():
            self.shadow[k].mul_(d).add_(p.detach().float(), alpha=1 - d)


class EMA(ParamAverage):
    """Exponential moving average of the trainable parameters (Flow-GRPO: used for export, not rollouts)."""

    def __init__(self, params: dict[str, torch.Tensor], decay: float):
        self.decay = decay
        super().__init__(params, lambda k: min(decay, (1 + k) / (10 + k)))  # warm-up as in Flow-GRPO


def lora_config(lora, default_targets: list[str]):
    """The peft ``LoraConfig`` for ``train.lora`` (also used to rebuild a checkpoint's adapter for sampling)."""
    from peft import LoraConfig

    return LoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        init_lora_weights="gaussian" if lora.init == "gaussian" else True,
        target_modules=lora.target_modules or default_targets,
        lora_dropout=lora.dropout,
    )


def check_compile(device: torch.device) -> None:
    """Refuse ``train.compile`` in one line where torch.compile's inductor cannot build kernels: a C++
    compiler on a CPU, Triton on a GPU."""
    missing = missing_inductor_backend(device)
    if missing == "triton":
        raise RuntimeError(
            "train.compile: torch.compile needs Triton on a GPU, which is not installed "
            "(pip install triton), or set train.compile=false"
        )
    if missing is not None:
        raise RuntimeError(
            f"train.compile: torch.compile on a CPU needs a C++ compiler (g++ or clang++, or $CXX) "
            f"({missing}); install one, or set train.compile=false"
        )


def compile_forward(module: torch.nn.Module, mode: str, device: torch.device) -> None:
    """``train.compile``: ``module.forward`` becomes its ``torch.compile`` in place (compiled at its first calls,
    again for a new grad mode, adapter state or batch shape). The module object, its parameter names and
    state_dict keys stay as they were, so checkpoints, the LoRA export and ``disable_adapters`` (the KL
    reference) are unchanged; its hooks (the NFE count, FSDP's) run outside the compiled graph."""
    check_compile(device)
    module.forward = torch.compile(module.forward, mode=mode)


def configure_deepspeed(plugin: Any, cfg: Any) -> None:
    """DeepSpeed wants a micro-batch size (there is no dataloader to read it from) and does the clipping
    itself: fill both from the config where the accelerate config left them on ``auto``, and refuse a
    clipping value that disagrees with ``train.max_grad_norm``."""
    t, ds = cfg.train, plugin.deepspeed_config
    if plugin.is_auto("train_micro_batch_size_per_gpu") or "train_micro_batch_size_per_gpu" not in ds:
        ds["train_micro_batch_size_per_gpu"] = cfg.sample.batch_size
    if plugin.is_auto("gradient_clipping") or "gradient_clipping" not in ds:
        ds["gradient_clipping"] = t.max_grad_norm
    elif float(ds["gradient_clipping"]) != float(t.max_grad_norm):
        raise ValueError(
            f"deepspeed gradient_clipping={ds['gradient_clipping']} differs from train.max_grad_norm="
            f"{t.max_grad_norm}: DeepSpeed clips, so set them equal"
        )
    if ds.get("gradient_accumulation_steps", 1) not in (1, "auto"):
        raise ValueError("deepspeed gradient_accumulation_steps must be 1: flowrl accumulates over transitions itself")
    ds["gradient_accumulation_steps"] = 1


def builds_on_host(acc: Any) -> bool:
    """Does a full fine-tune under FSDP2 build its fp32 weights and reference copy on the host? Yes on an
    accelerator: ``fully_shard`` moves each unit's shard to the device as it shards it, so the device never holds
    the whole fp32 model (4 bytes a parameter) beside its 16-bit reference, which for LTX-2 (19B) alone exceeds
    an 80 GB card. The host then holds them once a process until sharded (``flowrl validate --estimate``)."""
    return bool(acc.is_fsdp2) and torch.device(acc.device).type != "cpu"


def empty_device_cache(device: torch.device | str) -> None:
    """Return the allocator's freed blocks to the device (CUDA), so the next phase can use them."""
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


class Policy:
    """The adapter's transformer as the run trains it.

    ``model``: the transformer wrapped for the launch's strategy (what rollouts and updates call);
    ``optimizer``: AdamW (``train.optimizer``) over ``trainable`` (name -> parameter, FSDP2 shards where sharded);
    ``ref_model``: the frozen copy full fine-tuning keeps when the method reads the reference (else None: LoRA's
    reference is the base with its adapters off); ``ema`` (``train.ema``) and ``averages`` (the method's, by
    name); ``nfe``: transformer forwards counted by their rows (CFG branches are rows) since it was last reset.
    """

    def __init__(
        self,
        cfg: Any,
        adapter: Any,
        acc: Any,
        reference: bool,
        averages: Mapping[str, Callable],
        mesh: Mesh | None = None,
    ):
        t = cfg.train
        self.cfg, self.adapter, self.acc = cfg, adapter, acc
        self.device = acc.device
        transformer = self.transformer = adapter.transformer
        if not getattr(adapter, "attention_backpropagates", True):
            raise ValueError(
                f"model.attention_backend={cfg.model.attention_backend!r} is an inference-only "
                "kernel (no backward pass): it cannot train; choose another (or null)"
            )
        self.ref_model = self._make_trainable(transformer, reference)
        if t.gradient_checkpointing:
            transformer.enable_gradient_checkpointing()
        transformer.eval()  # no dropout anywhere: rollout and update must compute the same function
        self.nfe = 0
        transformer.register_forward_pre_hook(self._count_forward, with_kwargs=True)
        if self.ref_model is not None:  # the full fine-tuning reference's forwards cost the same
            self.ref_model.register_forward_pre_hook(self._count_forward, with_kwargs=True)
        self.trainable = {n: p for n, p in transformer.named_parameters() if p.requires_grad}
        if not self.trainable:
            raise ValueError("train.lora.target_modules matched no module: nothing to train")
        optimizer = build_optimizer(list(self.trainable.values()), t, acc.device)  # train.optimizer: adamw | adamw_8bit
        mesh = mesh or Mesh.of(acc)
        if mesh.seq > 1:  # each forward's tokens split over the sequence group (diffusers' context parallelism)
            for module in (transformer, self.ref_model):
                if module is not None:
                    enable_sequence_parallel(module, mesh, acc.device, getattr(adapter, "sequence_parallel_plan", None))
        self.deepspeed = acc.state.deepspeed_plugin is not None
        if self.deepspeed:
            configure_deepspeed(acc.state.deepspeed_plugin, cfg)
        self.model, self.optimizer = self.wrap(transformer, optimizer)
        fsdp = sharding.fsdp_settings(transformer)
        if fsdp is not None:
            # every forward gathers the root unit's shards afresh: an average swapped into them reaches it
            transformer.set_reshard_after_forward(True, recurse=False)
            if self.ref_model is not None:  # the frozen copy sharded as the transformer: 1/N each
                sharding.shard_frozen(self.ref_model, fsdp)
        if t.compile:  # inside accelerate's wrapper, so rollout, update and evaluation all run the compiled forward
            compile_forward(transformer, t.compile_mode, acc.device)
            if self.ref_model is not None:
                compile_forward(self.ref_model, t.compile_mode, acc.device)
        # FSDP2 swaps each parameter for its shard (a DTensor) in place: take them again
        self.trainable = {n: p for n, p in transformer.named_parameters() if p.requires_grad}
        self.ema = EMA(self.trainable, t.ema_decay) if t.ema else None
        # the method's parameter averages (RAM's lagged policy), updated once an iteration
        self.averages = {name: ParamAverage(self.trainable, decay_at) for name, decay_at in averages.items()}

    def _make_trainable(self, transformer: torch.nn.Module, reference: bool) -> torch.nn.Module | None:
        """LoRA adapters on the frozen (and maybe quantized) base, or every weight trainable; trainable weights in
        fp32. Returns the frozen reference copy full fine-tuning keeps when the method reads it (else None)."""
        t, ref_model = self.cfg.train, None
        transformer.requires_grad_(False)
        if t.lora.enabled:  # the frozen base quantized first (model.base_quantization), peft's LoRA wraps it
            quantize_base(transformer, self.cfg.model.base_quantization)
            add_adapter_quiet(transformer, lora_config(t.lora, self.adapter.lora_target_modules))
        else:
            transformer.requires_grad_(True)
            if builds_on_host(self.acc):  # the fp32 model and its reference made on the host; FSDP2 moves shards in
                transformer.to("cpu")
                empty_device_cache(self.acc.device)
            if reference:  # full fine-tuning keeps a frozen copy as the reference
                ref_model = copy.deepcopy(transformer).requires_grad_(False).eval()
        for p in transformer.parameters():
            if p.requires_grad:
                p.data = p.data.float()
        return ref_model

    def wrap(self, transformer: torch.nn.Module, optimizer: torch.optim.Optimizer):
        """Wrap for the launch's strategy (DDP, DeepSpeed, FSDP2) through accelerate."""
        return self.acc.prepare(transformer, optimizer)

    def _count_forward(self, module, args, kwargs) -> None:
        x = kwargs.get("hidden_states", args[0] if args else None)
        self.nfe += int(x.shape[0]) if x is not None else 0

    @contextmanager
    def weights(self, name: Weights | str) -> Iterator[torch.nn.Module]:
        """The module to call with the weights ``name`` in place, restored on exit: ``Weights.CURRENT`` (as
        trained), ``REFERENCE`` (the base: LoRA off, or full fine-tuning's frozen copy), ``EMA`` (the EMA; the
        current weights where ``train.ema`` is off), or the name of a parameter average."""
        which = Weights.of(name)
        if which is Weights.REFERENCE and self.ref_model is not None:
            yield self.ref_model
        elif which is Weights.REFERENCE:
            self.transformer.disable_adapters()
            try:
                yield self.model
            finally:
                self.transformer.enable_adapters()
        elif which is Weights.CURRENT or (which is Weights.EMA and self.ema is None):
            yield self.model
        else:
            average = self.ema if which is Weights.EMA else self.averages.get(name)
            if average is None:
                raise KeyError(f"no parameter average {name!r} (kept: {sorted(self.averages) or 'none'})")
            with self._swapped_in(average.shadow):
                yield self.model

    @contextmanager
    def _swapped_in(self, shadow: dict[str, torch.Tensor]):
        """Temporarily load ``shadow`` (an average's weights) into the trainable parameters."""
        saved = {k: p.detach().clone() for k, p in self.trainable.items()}
        with torch.no_grad():
            for k, p in self.trainable.items():
                p.copy_(shadow[k])
        try:
            yield
        finally:
            with torch.no_grad():
                for k, p in self.trainable.items():
                    p.copy_(saved[k])

    def export(self, run_dir: Path) -> None:
        """The trained weights in diffusers format (EMA weights when enabled): ``lora/`` for LoRA
        (``pipe.load_lora_weights``), ``transformer/`` for full fine-tuning (``from_pretrained``).

        Every process calls it (gathering FSDP shards is collective); the main process writes."""
        transformer = self.acc.unwrap_model(self.model)
        main = self.acc.is_main_process
        with self.weights(Weights.EMA):
            if self.cfg.train.lora.enabled:
                from peft.utils import get_peft_model_state_dict

                state = sharding.whole_on_main(get_peft_model_state_dict(transformer), main)
                if main:
                    (run_dir / "lora").mkdir(parents=True, exist_ok=True)
                    self.adapter.save_lora(run_dir / "lora", state)
            else:
                state = sharding.whole_on_main(transformer.state_dict(), main)
                if main:
                    from huggingface_hub import save_torch_state_dict

                    transformer.save_config(run_dir / "transformer")
                    save_torch_state_dict(
                        state,
                        run_dir / "transformer",
                        max_shard_size="10GB",
                        filename_pattern="diffusion_pytorch_model{suffix}.safetensors",
                    )

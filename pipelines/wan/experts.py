"""Wan 2.2 A14B's two experts as one trained module (``WanExperts``)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch

try:
    from torch.distributed.tensor import DTensor
except ImportError:  # a torch without distributed
    DTensor = ()

EXPERTS = ("high_noise", "low_noise")


class WanExperts(torch.nn.Module):
    """Wan 2.2 A14B's two experts as the one trained module.

    ``forward`` has the Wan transformer's signature and runs, for each row, ``high_noise`` where its
    ``timestep >= boundary_timestep`` and ``low_noise`` below (``WanPipeline``'s choice); rows that straddle the
    boundary are split and put back in order. ``trained`` names the experts that train: ``add_adapter`` and
    ``enable_gradient_checkpointing`` reach only them, ``requires_grad_`` never unfreezes the others, and a deep
    copy shares the frozen ones instead of copying them.

    Under grad, every trained parameter of an expert a forward did not run joins the output with weight 0, so
    every trained parameter gets a (zero) gradient from every backward: DDP needs no ``find_unused_parameters``,
    and a transition sampled by a frozen expert still has a differentiable (zero-gradient) loss.
    """

    # FSDP auto-wrap: the experts' blocks, then each expert as a unit of its own, so that a frozen expert the
    # full fine-tune's reference copy shares (``__deepcopy__``) gathers its own weights wherever it is called
    _no_split_modules = ("WanTransformerBlock", "WanTransformer3DModel")

    def __init__(
        self,
        high_noise: torch.nn.Module,
        low_noise: torch.nn.Module,
        boundary_timestep: float,
        trained: tuple[str, ...] = EXPERTS,
    ):
        super().__init__()
        self.high_noise = high_noise
        self.low_noise = low_noise
        self.boundary_timestep = float(boundary_timestep)
        unknown = set(trained) - set(EXPERTS)
        if unknown or not trained:
            raise ValueError(f"WanExperts: trained experts must be some of {', '.join(EXPERTS)}, got {trained}")
        self.trained = tuple(e for e in EXPERTS if e in trained)
        for name in EXPERTS:
            if name not in self.trained:
                getattr(self, name).requires_grad_(False)

    # ------------------------------------------------------------------ what the trainer calls
    def experts(self, trained: bool | None = None) -> list[tuple[str, torch.nn.Module]]:
        """(name, expert) pairs, high noise first: all, the trained ones, or (``trained=False``) the frozen ones."""
        return [(n, getattr(self, n)) for n in EXPERTS if trained is None or (n in self.trained) == trained]

    @property
    def config(self):
        """The experts' shared architecture (patch size, channels, heads): the high-noise expert's config."""
        return self.high_noise.config

    @property
    def dtype(self) -> torch.dtype:
        return self.high_noise.dtype

    def requires_grad_(self, requires_grad: bool = True) -> WanExperts:
        for name, expert in self.experts():
            expert.requires_grad_(requires_grad and name in self.trained)
        return self

    def add_adapter(self, adapter_config, adapter_name: str = "default") -> None:
        for _, expert in self.experts(trained=True):
            expert.add_adapter(adapter_config, adapter_name=adapter_name)

    @property
    def peft_config(self) -> dict:
        """The trained experts' LoRA configs (one config for both; ``peft.get_peft_model_state_dict`` reads it)."""
        for _, expert in self.experts(trained=True):
            config = getattr(expert, "peft_config", None)
            if config:
                return config
        raise AttributeError("peft_config: no expert holds a LoRA")

    def _with_lora(self) -> list[torch.nn.Module]:
        return [e for _, e in self.experts() if getattr(e, "_hf_peft_config_loaded", False)]

    def disable_adapters(self) -> None:
        for expert in self._with_lora():
            expert.disable_adapters()

    def enable_adapters(self) -> None:
        for expert in self._with_lora():
            expert.enable_adapters()

    def enable_gradient_checkpointing(self, *args, **kwargs) -> None:
        for _, expert in self.experts(trained=True):
            expert.enable_gradient_checkpointing(*args, **kwargs)

    def disable_gradient_checkpointing(self) -> None:
        for _, expert in self.experts():
            expert.disable_gradient_checkpointing()

    def save_config(self, directory: str | Path) -> None:
        """``config.json`` of a full fine-tuning export (the trainer writes the state dict beside it, keys
        ``high_noise.*`` and ``low_noise.*``): both experts' configs and the boundary (``WanAdapter.load_trained``)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        record = {
            "_class_name": type(self).__name__,
            "boundary_timestep": self.boundary_timestep,
            "trained_experts": list(self.trained),
            **{name: dict(expert.config) for name, expert in self.experts()},
        }
        (directory / "config.json").write_text(json.dumps(record, indent=2, default=str) + "\n")

    def __deepcopy__(self, memo: dict) -> WanExperts:
        """A copy that shares the frozen experts (they never change) and copies the trained ones."""
        for _, expert in self.experts(trained=False):
            memo[id(expert)] = expert
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        new.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return new

    # ------------------------------------------------------------------ the forward
    def is_high_noise(self, timestep: torch.Tensor) -> torch.Tensor:
        """(B,) bool: the rows the high-noise expert runs (``timestep >= boundary``, as ``WanPipeline``)."""
        return timestep >= self.boundary_timestep

    def forward(
        self,
        hidden_states: torch.Tensor,
        timestep: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        return_dict: bool = False,
        **kwargs,
    ):
        timestep = timestep.reshape(-1).expand(hidden_states.shape[0]) if timestep.numel() == 1 else timestep
        high = self.is_high_noise(timestep)
        parts, used = [], []
        for name, rows in (("high_noise", high), ("low_noise", ~high)):
            if not rows.any():
                continue
            index = None if rows.all() else rows.nonzero().flatten()
            inputs = [hidden_states, timestep, encoder_hidden_states]
            if index is not None:
                inputs = [t.index_select(0, index) for t in inputs]
            out = getattr(self, name)(
                hidden_states=inputs[0],
                timestep=inputs[1],
                encoder_hidden_states=inputs[2],
                return_dict=False,
                **kwargs,
            )[0]
            parts.append((index, out))
            used.append(name)
        if len(parts) == 1:
            out = parts[0][1]
        else:  # rows straddle the boundary: put them back in order
            order = torch.cat([index for index, _ in parts])
            out = torch.cat([o for _, o in parts]).index_select(0, torch.argsort(order))
        if torch.is_grad_enabled():
            anchors = [  # an FSDP2 shard (a DTensor: the unused expert's weights stay sharded) anchors its local piece
                (p.to_local() if isinstance(p.data, DTensor) else p).reshape(-1)[:1].float().sum()
                for name, expert in self.experts(trained=True)
                if name not in used
                for p in expert.parameters()
                if p.requires_grad and (type(p.data) is torch.Tensor or isinstance(p.data, DTensor))
            ]
            if anchors:
                out = out + (torch.stack(anchors).sum() * 0.0).to(out.dtype)
        if return_dict:
            from diffusers.models.modeling_outputs import Transformer2DModelOutput

            return Transformer2DModelOutput(sample=out)
        return (out,)

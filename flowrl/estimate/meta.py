"""Counting without weights: parameters and LoRA sizes, modules built from configs, FLOPs and live bytes of a
forward on the meta device, and the bytes autograd saves in a narrow copy's forward (the activation probe)."""

from __future__ import annotations

import contextlib
import warnings
from unittest import mock

import torch
import torch.utils._python_dispatch

from flowrl.config import Config

# the activation probes run a copy of the transformer at this width: PROBE_HEADS heads of PROBE_HEAD_DIM
PROBE_HEADS, PROBE_HEAD_DIM = 2, 32
PROBE_WIDTH = PROBE_HEADS * PROBE_HEAD_DIM
# modules of diffusers.pipelines.ltx2 that the diffusers top level does not export
LTX2_DIFFUSERS_EXTRA = ("LTX2TextConnectors", "LTX2Vocoder")


def plain(config: dict) -> dict:
    """A config without its private keys (``_class_name``, ...) and transformers' bookkeeping."""
    return {
        k: v for k, v in config.items() if not k.startswith("_") and k not in ("architectures", "transformers_version")
    }


class AttrDict(dict):
    """Attribute access to a config dict (a family's rules read ``config.x``)."""

    __getattr__ = dict.__getitem__


def count_parameters(module: torch.nn.Module) -> int:
    """Parameters of ``module`` (tied ones once)."""
    return sum(p.numel() for p in module.parameters())


def _matches(name: str, targets: list[str]) -> bool:
    """peft's rule for a list of target names: the module's full name equals one or ends with '.' + one."""
    return any(name == t or name.endswith("." + t) for t in targets)


def lora_parameter_count(module: torch.nn.Module, targets: list[str], rank: int) -> int:
    """r * (in + out) for every Linear (r * (in * k * k) + r * out for a Conv2d) whose name matches."""
    total = 0
    for name, m in module.named_modules():
        if not _matches(name, targets):
            continue
        if isinstance(m, torch.nn.Linear):
            total += rank * (m.in_features + m.out_features)
        elif isinstance(m, torch.nn.Conv2d):
            total += rank * (m.in_channels * m.kernel_size[0] * m.kernel_size[1] + m.out_channels)
    return total


def component(class_name: str, config: dict):
    """A diffusers or transformers module named ``class_name`` built from ``config`` (on the current device)."""
    import diffusers
    import transformers

    if class_name in LTX2_DIFFUSERS_EXTRA:
        from diffusers.pipelines import ltx2

        return getattr(ltx2, class_name).from_config(plain(config))
    if class_name == "StableAudio3DurationEmbedder":
        from diffusers.pipelines.stable_audio_3.modeling_stable_audio_3 import StableAudio3DurationEmbedder

        return StableAudio3DurationEmbedder.from_config(config)
    if hasattr(diffusers, class_name) and hasattr(getattr(diffusers, class_name), "from_config"):
        return getattr(diffusers, class_name).from_config(plain(config))
    cls = getattr(transformers, class_name)
    if class_name == "T5GemmaEncoderModel" and "encoder" not in config:  # the encoder's own config only
        module = dict(plain(config), is_decoder=False)
        return cls(
            transformers.T5GemmaConfig(
                encoder=module,
                decoder=dict(module),
                is_encoder_decoder=False,
                vocab_size=config.get("vocab_size", 256000),
            )
        )
    if class_name == "T5GemmaEncoderModel":
        return cls(transformers.T5GemmaConfig(**dict(plain(config), is_encoder_decoder=False)))
    return cls(cls.config_class(**plain(config)))


# ----------------------------------------------------------------------------------------------------
# measuring on the meta device: FLOPs and the live bytes of a no-grad forward or a decode


class LiveBytes(torch.utils._python_dispatch.TorchDispatchMode):
    """The peak of the bytes held by tensors that ops create (each storage once, freed when its last tensor
    dies), leaving out the ``external`` tensors (weights, inputs). Works on meta tensors, which hold none."""

    def __init__(self, external=()):
        super().__init__()
        self.refs: dict[int, list[int]] = {}
        self.live = self.peak = 0
        self.external = {t.untyped_storage()._cdata for t in external}

    def _release(self, key: int) -> None:
        entry = self.refs.get(key)
        if entry is not None:
            entry[0] -= 1
            if entry[0] == 0:
                self.live -= entry[1]
                del self.refs[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        import weakref

        from torch.utils._pytree import tree_flatten

        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            key = t.untyped_storage()._cdata
            if key in self.external:
                continue
            entry = self.refs.get(key)
            if entry is None:
                entry = self.refs[key] = [0, t.untyped_storage().nbytes()]
                self.live += entry[1]
                self.peak = max(self.peak, self.live)
            entry[0] += 1
            weakref.finalize(t, self._release, key)
        return out


@contextlib.contextmanager
def fused_attention_on_meta(counter: list[float]):
    """On meta tensors, ``scaled_dot_product_attention`` runs its decomposed math path (an N x N score
    matrix); a GPU runs a fused kernel that keeps only the output and one log-sum-exp per query. Route meta
    calls through the fused CPU kernel's meta function instead, adding its ``4 B H N_q N_k d`` FLOPs (QK^T
    and AV) to ``counter`` (torch's FLOP counter has no formula for that kernel)."""
    original = torch.nn.functional.scaled_dot_product_attention

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if query.device.type != "meta" or query.dim() != 4:
            return original(
                query,
                key,
                value,
                attn_mask=attn_mask,
                dropout_p=dropout_p,
                is_causal=is_causal,
                scale=scale,
                enable_gqa=enable_gqa,
            )
        if key.shape[1] != query.shape[1]:
            repeat = query.shape[1] // key.shape[1]
            key, value = key.repeat_interleave(repeat, 1), value.repeat_interleave(repeat, 1)
        b, h, n_q, d = query.shape
        counter[0] += 2 * b * h * n_q * key.shape[2] * (d + value.shape[-1])
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale
        )[0]

    with mock.patch.object(torch.nn.functional, "scaled_dot_product_attention", sdpa):
        yield


def meta_cost(module: torch.nn.Module, call, inputs: dict) -> tuple[float, float]:
    """(FLOPs, peak live bytes) of ``call(**inputs)`` with no grad, ``module`` and ``inputs`` on meta."""
    from torch.utils.flop_counter import FlopCounterMode

    external = [*module.parameters(), *module.buffers(), *(v for v in inputs.values() if torch.is_tensor(v))]
    attention = [0.0]
    with warnings.catch_warnings(), torch.no_grad(), fused_attention_on_meta(attention):
        warnings.simplefilter("ignore")
        with FlopCounterMode(display=False) as counter, LiveBytes(external) as live:
            out = call(**inputs)
            del out
    return float(counter.get_total_flops()) + attention[0], float(live.peak)


# ----------------------------------------------------------------------------------------------------
# the activation probe: bytes autograd saves in one forward of a narrow copy


def probe_dtypes(cfg: Config) -> tuple[torch.dtype, torch.dtype | None]:
    """(weight dtype, autocast dtype) of the CPU probe: 16-bit runs as bf16 there (same bytes as fp16)."""
    weights = torch.float32 if cfg.model.dtype == "fp32" else torch.bfloat16
    autocast = None if cfg.train.mixed_precision == "no" else torch.bfloat16
    return weights, autocast


def saved_bytes(model: torch.nn.Module, inputs: dict, autocast: torch.dtype | None) -> int:
    """Bytes autograd keeps for backward in one forward of ``model`` (parameters and repeats excluded)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            seen[ptr] = t.untyped_storage().nbytes()
        return t

    ctx = torch.autocast("cpu", dtype=autocast) if autocast is not None else torch.autocast("cpu", enabled=False)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), ctx:
        out = model(**inputs, return_dict=False)[0]
    del out
    return sum(seen.values())


def solve_probe(rows: list[list[float]]) -> tuple[float, ...]:
    """The coefficients (per row, per token of each kind) that the probe forwards' saved bytes solve for:
    ``rows`` are ``[1, tokens of each kind..., saved bytes]``."""
    a = torch.tensor([r[:-1] for r in rows], dtype=torch.float64)
    b = torch.tensor([r[-1] for r in rows], dtype=torch.float64)
    return tuple(torch.linalg.solve(a, b).tolist())

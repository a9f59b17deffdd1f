"""diffusers' attention dispatcher backends (``model.attention_backend``), shared by every family: the backend
names, a probe that a backend runs here (and whether it backpropagates), and setting one on a transformer whose
processors already call the dispatcher (FLUX, Wan, LTX-2, Stable Audio 3). SD3's processors do not: its family
module swaps them first (``flowrl.pipelines.sd3.attention``)."""

from __future__ import annotations

import torch

from flowrl.pipelines.kit.loading import first_line


def has_xformers() -> bool:
    """Whether xformers is installed (SD3 uses its attention on CUDA without a chosen backend)."""
    import importlib.util

    return importlib.util.find_spec("xformers") is not None


def attention_backend_names() -> tuple[str, ...]:
    """The backend names of diffusers' attention dispatcher (``AttentionBackendName``), in its order."""
    from diffusers.models.attention_dispatch import AttentionBackendName

    return tuple(member.value for member in AttentionBackendName)


def probe_attention(backend, device: torch.device, dtype: torch.dtype, heads: int, head_dim: int) -> bool:
    """One tiny attention call of ``backend`` on ``device`` in ``dtype``, after the backend's own constraints
    (its device and dtype checks, which diffusers runs only with DIFFUSERS_ATTN_CHECKS=1). Returns whether
    its output carries a gradient back to its inputs."""
    from diffusers.models.attention_dispatch import _AttentionBackendRegistry, dispatch_attention_fn

    q = torch.randn(1, 16, heads, head_dim, device=device, dtype=dtype, requires_grad=True)
    for check in getattr(_AttentionBackendRegistry, "_constraints", {}).get(backend, []):
        check(query=q, key=q, value=q, attn_mask=None, is_causal=False)
    with torch.enable_grad():
        return bool(dispatch_attention_fn(q, q, q, backend=backend).requires_grad)


def probe_error(backend, device: torch.device, dtype: torch.dtype, heads: int, head_dim: int) -> str | None:
    try:
        probe_attention(backend, device, dtype, heads, head_dim)
    except Exception as exc:  # noqa: BLE001 -- the kernels raise their own types
        return first_line(exc)
    return None


def set_dispatcher_attention_backend(
    transformer,
    name: str,
    device: torch.device,
    dtype: torch.dtype,
    heads: int | None = None,
    head_dim: int | None = None,
) -> bool:
    """Send the attention of a transformer whose processors already call diffusers' dispatcher (FLUX, Wan,
    LTX-2, Stable Audio 3) through backend ``name``; refused in one line where it cannot run. ``heads`` /
    ``head_dim`` size the probe (default: the config's ``num_attention_heads`` / ``attention_head_dim``).
    Returns whether it backpropagates."""
    from diffusers.models.attention_dispatch import AttentionBackendName, _AttentionBackendRegistry

    if name not in attention_backend_names():
        raise ValueError(f"model.attention_backend: {name!r} is not one of {', '.join(attention_backend_names())}")
    active = _AttentionBackendRegistry._active_backend
    try:
        transformer.set_attention_backend(name)
    except Exception as exc:  # noqa: BLE001 -- diffusers raises RuntimeError/ValueError, a hub fetch its own
        raise RuntimeError(f"model.attention_backend={name!r} is not available here: {first_line(exc)}") from None
    finally:  # only this transformer's processors change, not the process-wide default
        _AttentionBackendRegistry.set_active_backend(active)
    heads = int(heads or transformer.config.num_attention_heads)
    head_dim = int(head_dim or transformer.config.attention_head_dim)
    try:
        return probe_attention(AttentionBackendName(name), device, dtype, heads, head_dim)
    except Exception as exc:  # noqa: BLE001 -- the kernels raise their own types
        raise RuntimeError(
            f"model.attention_backend={name!r} cannot run on this {device.type} with "
            f"{str(dtype)[6:]} weights: {first_line(exc)}"
        ) from None

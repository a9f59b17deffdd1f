"""SD3's attention through diffusers' dispatcher: diffusers 0.42's SD3 processor calls
``scaled_dot_product_attention`` itself, so ``set_attention_backend`` swaps in ``DispatchedJointAttention``
first, then sets and probes the backend (``flowrl.pipelines.kit.attention``)."""

from __future__ import annotations

import logging

import torch

from flowrl.pipelines.kit import attention
from flowrl.pipelines.kit.attention import attention_backend_names
from flowrl.pipelines.kit.loading import first_line

logger = logging.getLogger(__name__)


class DispatchedJointAttention:
    """SD3's joint attention (the math of diffusers' ``JointAttnProcessor2_0``) with the attention product
    sent through diffusers' dispatcher (``dispatch_attention_fn``), so that ``set_attention_backend`` reaches
    it: diffusers 0.42's SD3 processor calls ``scaled_dot_product_attention`` itself and has no backend to set.

    Query, key and value go to the dispatcher as (B, S, heads, head_dim), image tokens first, then text
    tokens, as the SD3 processor concatenates them; the output is split back the same way."""

    _attention_backend = None  # set by ModelMixin.set_attention_backend (None: the dispatcher's active one)
    _parallel_config = None  # no context parallelism

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, *args, **kwargs):
        from diffusers.models.attention_dispatch import dispatch_attention_fn

        image_tokens = hidden_states.shape[1]

        def heads(t: torch.Tensor) -> torch.Tensor:  # (B, S, heads * head_dim) -> (B, S, heads, head_dim)
            return t.unflatten(-1, (attn.heads, -1))

        def normed(t: torch.Tensor, norm) -> torch.Tensor:
            return t if norm is None else norm(t)

        q = normed(heads(attn.to_q(hidden_states)), attn.norm_q)
        k = normed(heads(attn.to_k(hidden_states)), attn.norm_k)
        v = heads(attn.to_v(hidden_states))
        joint = encoder_hidden_states is not None
        if joint:
            q = torch.cat([q, normed(heads(attn.add_q_proj(encoder_hidden_states)), attn.norm_added_q)], dim=1)
            k = torch.cat([k, normed(heads(attn.add_k_proj(encoder_hidden_states)), attn.norm_added_k)], dim=1)
            v = torch.cat([v, heads(attn.add_v_proj(encoder_hidden_states))], dim=1)
        out = dispatch_attention_fn(
            q,
            k,
            v,
            dropout_p=0.0,
            is_causal=False,
            backend=self._attention_backend,
            parallel_config=self._parallel_config,
        )
        out = out.flatten(2).to(q.dtype)
        image = attn.to_out[1](attn.to_out[0](out[:, :image_tokens]))
        if not joint:
            return image
        text = out[:, image_tokens:]
        if not attn.context_pre_only:
            text = attn.to_add_out(text)
        return image, text


def set_attention_backend(transformer, name: str, device: torch.device, dtype: torch.dtype) -> bool:
    """Route every attention of an SD3 ``transformer`` through diffusers' dispatcher with backend ``name``
    (``model.attention_backend``). Refused in one line (RuntimeError) when the backend cannot run here: its
    package missing (flash-attn, sageattention, kernels...), the wrong device (a CUDA-only kernel on a CPU), a
    dtype it does not take. A backend that takes only 16-bit inputs passes an fp32 model with a warning: it
    runs under 16-bit autocast (``train.mixed_precision``) only. Returns whether the backend backpropagates
    (an inference-only kernel such as SageAttention's cannot train)."""
    from diffusers.models.attention_dispatch import AttentionBackendName, _AttentionBackendRegistry

    if name not in attention_backend_names():
        raise ValueError(f"model.attention_backend: {name!r} is not one of {', '.join(attention_backend_names())}")
    backend = AttentionBackendName(name)
    heads = int(transformer.config.num_attention_heads)
    head_dim = int(transformer.config.attention_head_dim)
    where = device.type + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "")
    transformer.set_attn_processor(DispatchedJointAttention())
    active = _AttentionBackendRegistry._active_backend
    try:
        # diffusers checks the backend's package (and fetches a hub kernel) here, then sets it on the processors
        transformer.set_attention_backend(name)
    except Exception as exc:  # noqa: BLE001 -- diffusers raises RuntimeError/ValueError, a hub fetch its own
        raise RuntimeError(f"model.attention_backend={name!r} is not available here: {first_line(exc)}") from None
    finally:
        # set_attention_backend also makes it the process-wide default of every other diffusers model (a Wan
        # transformer, say); only this transformer's processors should change
        _AttentionBackendRegistry.set_active_backend(active)
    try:
        return attention.probe_attention(backend, device, dtype, heads, head_dim)
    except Exception as exc:  # noqa: BLE001 -- the kernels raise their own types
        why = first_line(exc)
        if dtype == torch.float32:  # perhaps a 16-bit-only kernel, which autocast would feed
            half = torch.bfloat16 if device.type != "cuda" or torch.cuda.is_bf16_supported() else torch.float16
            half_error = attention.probe_error(backend, device, half, heads, head_dim)
            if half_error is None:
                logger.warning(
                    "model.attention_backend=%s takes only 16-bit inputs (%s with fp32 weights): it "
                    "runs under train.mixed_precision=bf16/fp16 only",
                    name,
                    why,
                )
                return attention.probe_attention(backend, device, half, heads, head_dim)
            why += f"; in {str(half)[6:]}: {half_error}" if half_error != why else ""
        raise RuntimeError(
            f"model.attention_backend={name!r} cannot run on this {where} with {str(dtype)[6:]} weights: {why}"
        ) from None

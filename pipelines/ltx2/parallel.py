"""LTX-2 under sequence parallelism (``train.sequence_parallel``): both token streams split over the group.

diffusers' own plan for ``LTX2VideoTransformer3DModel`` splits the video tokens (and the video prompt) only,
which serves video alone; with sound, the audio tower's attentions would see whole audio tokens, and the two
cross-modal attentions a split query against whole keys. ``av_plan`` splits the audio tokens, the audio prompt,
both prompt masks and every rotary table along their token axis the same way, and gathers both outputs.

The two self-attentions run diffusers' Ulysses attention (all-to-all over heads). The four cross-attentions of a
block (video and audio to their prompts, audio-to-video, video-to-audio) do not: their queries and keys differ
in length, and diffusers' Ulysses backward (0.42) reshapes the key and value gradients with the query's length
(a shape error in the first backward), and its mask, which LTX-2 widens to one row a head, is not split along
the heads Ulysses hands out. ``GatheredKeysProcessor`` instead keeps a process's queries and all-gathers the
keys, values and mask over the group (after each key's rotary table, itself split with its tokens), then runs
plain attention: exactly the whole attention for those queries. The backward sums each key's gradient over the
group. Every split length must divide by the group's size (``LTX2Adapter._split_inputs`` checks before a
forward)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from diffusers.models._modeling_parallel import ContextParallelInput, ContextParallelOutput

ROPES = ("rope", "audio_rope", "cross_attn_rope", "cross_attn_audio_rope")
CROSS_ATTENTIONS = ("attn2", "audio_attn2", "audio_to_video_attn", "video_to_audio_attn")


def _split(dims: int = 3) -> ContextParallelInput:
    return ContextParallelInput(split_dim=1, expected_dims=dims, split_output=False)


def av_plan(rope_type: str) -> dict:
    """The plan for a transformer whose rotary tables are ``rope_type``: "interleaved" tables (LTX-2) are
    (B, T, D), "split" ones (LTX-2.3) (B, H, T, D / 2), split along their token axis either way."""
    table = (
        ContextParallelInput(split_dim=2, expected_dims=4, split_output=True)
        if rope_type == "split"
        else ContextParallelInput(split_dim=1, expected_dims=3, split_output=True)
    )
    return {
        "": {
            "hidden_states": _split(),
            "audio_hidden_states": _split(),
            "encoder_hidden_states": _split(),
            "audio_encoder_hidden_states": _split(),
            "encoder_attention_mask": _split(2),
            "audio_encoder_attention_mask": _split(2),
        },
        **{rope: {0: table, 1: table} for rope in ROPES},
        "proj_out": ContextParallelOutput(gather_dim=1, expected_dims=3),
        "audio_proj_out": ContextParallelOutput(gather_dim=1, expected_dims=3),
    }


class _GatherTokens(torch.autograd.Function):
    """All-gather (B, T / S, ...) over the group to (B, T, ...), in rank order (the order the plan split them);
    the backward sums the gradient over the group and keeps this process's tokens."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group) -> torch.Tensor:
        ctx.group = group
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=1)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad.chunk(dist.get_world_size(ctx.group), dim=1)[dist.get_rank(ctx.group)], None


def _gather_last(mask: torch.Tensor, group) -> torch.Tensor:
    parts = [torch.empty_like(mask) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, mask.contiguous(), group=group)
    return torch.cat(parts, dim=-1)


class GatheredKeysProcessor:
    """``LTX2AudioVideoAttnProcessor``'s cross-attention on split tokens: this process's queries against the
    group's gathered keys and values (see the module's docstring); the rest is the diffusers processor's math."""

    _attention_backend = None
    _parallel_config = None  # never Ulysses: the attention below runs on whole keys

    def __init__(self, group, attention_backend=None):
        self.group = group
        self._attention_backend = attention_backend

    def __call__(
        self,
        attn,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        query_rotary_emb: tuple[torch.Tensor, torch.Tensor] | None = None,
        key_rotary_emb: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        from diffusers.models.attention_dispatch import dispatch_attention_fn
        from diffusers.models.transformers.transformer_ltx2 import (
            apply_interleaved_rotary_emb,
            apply_split_rotary_emb,
        )

        if encoder_hidden_states is None:
            raise ValueError("GatheredKeysProcessor serves LTX-2's cross-attentions: encoder_hidden_states is None")
        batch_size, sequence_length, _ = encoder_hidden_states.shape
        if attention_mask is not None:
            attention_mask = attn.prepare_attention_mask(attention_mask, sequence_length, batch_size)
            attention_mask = attention_mask.view(batch_size, attn.heads, -1, attention_mask.shape[-1])
            attention_mask = _gather_last(attention_mask, self.group)
        gate_logits = attn.to_gate_logits(hidden_states) if attn.to_gate_logits is not None else None

        query = attn.norm_q(attn.to_q(hidden_states))
        key = attn.norm_k(attn.to_k(encoder_hidden_states))
        value = attn.to_v(encoder_hidden_states)
        if query_rotary_emb is not None:
            rotate = apply_interleaved_rotary_emb if attn.rope_type == "interleaved" else apply_split_rotary_emb
            query = rotate(query, query_rotary_emb)
            key = rotate(key, key_rotary_emb if key_rotary_emb is not None else query_rotary_emb)
        key, value = _GatherTokens.apply(key, self.group), _GatherTokens.apply(value, self.group)

        query, key, value = (x.unflatten(2, (attn.heads, -1)) for x in (query, key, value))
        hidden_states = dispatch_attention_fn(
            query,
            key,
            value,
            attn_mask=attention_mask,
            dropout_p=0.0,
            is_causal=False,
            backend=self._attention_backend,
            parallel_config=None,
        )
        hidden_states = hidden_states.flatten(2, 3).to(query.dtype)
        if gate_logits is not None:
            gates = 2.0 * torch.sigmoid(gate_logits)  # [B, T, H], as diffusers' processor
            hidden_states = (hidden_states.unflatten(2, (attn.heads, -1)) * gates.unsqueeze(-1)).flatten(2, 3)
        hidden_states = attn.to_out[0](hidden_states)
        return attn.to_out[1](hidden_states)


def gather_cross_attention_keys(model: torch.nn.Module) -> None:
    """Give every cross-attention of ``model`` (a parallelized LTX-2 transformer, or its DDP/FSDP wrapper)
    ``GatheredKeysProcessor`` over its sequence group, once; its attention backend is kept."""
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] not in CROSS_ATTENTIONS or isinstance(module.processor, GatheredKeysProcessor):
            continue
        config = module.processor._parallel_config
        group = config.context_parallel_config._ulysses_mesh.get_group()
        module.set_processor(GatheredKeysProcessor(group, module.processor._attention_backend))

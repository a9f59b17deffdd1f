"""Methods: plug-ins that own their exploration, credit and loss (``flowrl.methods.base``).

Built-in names are registered lazily; ``register_method(name, "module:attr")`` and the entry-point
group ``flowrl.methods`` add more, as ``flowrl.reward_models`` does for rewards.
"""

from __future__ import annotations

from typing import Any

from flowrl.registry import Registry

_METHODS = Registry(
    "method",
    "flowrl.methods",
    {
        "flow_grpo": "flowrl.methods.flow_grpo:FlowGRPO",
        "dense_grpo": "flowrl.methods.dense_grpo:DenseGRPO",
        "tp_grpo": "flowrl.methods.tp_grpo:TPGRPO",
        "g2rpo": "flowrl.methods.g2rpo:G2RPO",
        "e_grpo": "flowrl.methods.e_grpo:EGRPO",
        "grpo_guard": "flowrl.methods.grpo_guard:GRPOGuard",
        "pref_grpo": "flowrl.methods.pref_grpo:PrefGRPO",
        "ram": "flowrl.methods.ram:RAM",
        "diffusion_nft": "flowrl.methods.diffusion_nft:DiffusionNFT",
        "av_grpo": "flowrl.methods.av_grpo:AVGRPO",
    },
)


def register_method(name: str, target: Any | None = None):
    """Register a method class (or ``"module:attr"``) under ``name``; usable as a decorator."""
    return _METHODS.register(name, target)


def list_methods(media_kind: str | None = None) -> list[str]:
    """The registered names; with ``media_kind``, those whose methods train that kind of media (AV-GRPO
    trains joint audio-video only)."""
    names = _METHODS.names()
    if media_kind is None:
        return names
    return [n for n in names if media_kind in (method_class(n).media_kinds or (media_kind,))]


def check_method_name(name: str) -> None:
    _METHODS.check(name)


def method_class(name: str) -> type:
    return _METHODS.get(name)


def build_method(cfg: Any):
    """The configured method, its typed options checked (one-line errors)."""
    return _METHODS.get(cfg.method.name)(cfg)

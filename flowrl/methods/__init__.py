"""Methods: plug-ins that own their exploration, credit and loss (``flowrl.methods.base``), composed of parts
(``flowrl.methods.parts``).

Built-in names are registered lazily; ``register_method(name, "module:attr")`` and the entry-point
group ``flowrl.methods`` add more, as ``flowrl.reward_models`` does for rewards. A method that only recombines
parts is a recipe: ``register_recipe(name, base, credit=..., credit_norm=..., loss=...)``.
"""

from __future__ import annotations

from typing import Any

from flowrl.registry import Registry

METHODS = Registry(
    "method",
    "flowrl.methods",
    {
        "flow_grpo": "flowrl.methods.flow_grpo:FlowGRPO",
        "flow_dppo": "flowrl.methods.flow_dppo:FlowDPPO",
        "dense_grpo": "flowrl.methods.dense_grpo:DenseGRPO",
        "tp_grpo": "flowrl.methods.tp_grpo:TPGRPO",
        "g2rpo": "flowrl.methods.g2rpo:G2RPO",
        "e_grpo": "flowrl.methods.e_grpo:EGRPO",
        "pref_grpo": "flowrl.methods.pref_grpo:PrefGRPO",
        "ram": "flowrl.methods.ram:RAM",
        "diffusion_nft": "flowrl.methods.diffusion_nft:DiffusionNFT",
        "awm": "flowrl.methods.awm:AWM",
        "av_grpo": "flowrl.methods.av_grpo:AVGRPO",
        "reward_backprop": "flowrl.methods.reward_backprop:RewardBackprop",
        "dpo": "flowrl.methods.dpo:DPO",
        "dgpo": "flowrl.methods.dgpo:DGPO",
        "sft": "flowrl.methods.sft:SFT",
    },
)


def register_method(name: str, target: Any | None = None):
    """Register a method class (or ``"module:attr"``) under ``name``; usable as a decorator."""
    return METHODS.register(name, target)


# recipes: a registered method with other default parts, by name -> (base method, {part key: part name})
_RECIPES: dict[str, tuple[str, dict[str, str]]] = {}
_RECIPE_CLASSES: dict[str, type] = {}


def register_recipe(name: str, base: str, **parts: str) -> None:
    """Register ``name`` as method ``base`` with other default parts (``credit``, ``credit_norm``, ``loss``:
    registered part names), e.g. ``register_recipe("grpo_guard", "flow_grpo", loss="ratio_norm")``."""
    unknown = sorted(set(parts) - {"credit", "credit_norm", "loss"})
    if unknown:
        raise ValueError(f"recipe {name!r}: {unknown[0]!r} is not a part key (credit, credit_norm, loss)")
    if _RECIPES.get(name, (base, parts)) != (base, parts):
        raise ValueError(f"method name {name!r} is already registered")
    METHODS.register(name, f"flowrl.methods:_recipe_{name}")
    _RECIPES[name] = (base, dict(parts))


register_recipe("grpo_guard", "flow_grpo", loss="ratio_norm")


def __getattr__(attr: str):
    if attr.startswith("_recipe_") and attr[len("_recipe_") :] in _RECIPES:
        return _recipe_class(attr[len("_recipe_") :])
    raise AttributeError(attr)


def _recipe_class(name: str) -> type:
    """The recipe's method: its base class with the recipe's name and default parts."""
    if name not in _RECIPE_CLASSES:
        base, parts = _RECIPES[name]
        cls = method_class(base)
        attrs = {"name": name, "__doc__": f"{cls.__name__} with {parts} (recipe {name})", "recipe_of": base}
        attrs.update({f"default_{key}": part for key, part in parts.items()})
        _RECIPE_CLASSES[name] = type(cls.__name__ + "Recipe", (cls,), attrs)
    return _RECIPE_CLASSES[name]


def recipes() -> dict[str, tuple[str, dict[str, str]]]:
    """The registered recipes: name -> (base method, its parts)."""
    return {k: (b, dict(p)) for k, (b, p) in _RECIPES.items()}


def list_methods(media_kind: str | None = None) -> list[str]:
    """The registered names; with ``media_kind``, those whose methods train that kind of media (AV-GRPO
    trains joint audio-video only)."""
    names = METHODS.names()
    if media_kind is None:
        return names
    return [n for n in names if media_kind in (method_class(n).media or (media_kind,))]


def check_method_name(name: str) -> None:
    METHODS.check(name)


def method_class(name: str) -> type:
    return METHODS.get(name)


def build_method(cfg: Any):
    """The configured method, its typed options checked (one-line errors)."""
    return METHODS.get(cfg.method.name)(cfg)

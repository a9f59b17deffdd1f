"""Methods: plug-ins that own their exploration, credit and loss (``flowrl.methods.base``), composed of parts
(``flowrl.methods.parts``).

Built-in names are registered lazily; ``register_method(name, "module:attr")`` and the entry-point
group ``flowrl.methods`` add more, as ``flowrl.reward_models`` does for rewards. A method that only recombines
parts is a recipe, a plain record: ``register_recipe(name, base, credit=..., credit_norm=..., loss=...)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
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


PART_KEYS = ("credit", "credit_norm", "loss")  # what a method chooses by default and a recipe may choose instead


@dataclass(frozen=True)
class Recipe:
    """A method that only recombines parts: method ``base``'s class, run under ``name`` with ``parts`` (part key ->
    registered part name) in place of its default parts."""

    name: str
    base: str
    parts: Mapping[str, str]


_RECIPES: dict[str, Recipe] = {}


def register_recipe(name: str, base: str, **parts: str) -> None:
    """Register ``name`` as method ``base`` with other default parts (``credit``, ``credit_norm``, ``loss``:
    registered part names), e.g. ``register_recipe("grpo_guard", "flow_grpo", loss="ratio_norm")``."""
    unknown = sorted(set(parts) - set(PART_KEYS))
    if unknown:
        raise ValueError(f"recipe {name!r}: {unknown[0]!r} is not a part key (credit, credit_norm, loss)")
    recipe = Recipe(name, base, dict(parts))
    if _RECIPES.get(name, recipe) != recipe:
        raise ValueError(f"method name {name!r} is already registered")
    METHODS.register(name, recipe)
    _RECIPES[name] = recipe


register_recipe("grpo_guard", "flow_grpo", loss="ratio_norm")


def recipes() -> dict[str, Recipe]:
    """The registered recipes, by name."""
    return dict(_RECIPES)


def recipe_on(name: str, cls: type) -> Recipe | None:
    """The recipe ``name`` where it runs on ``cls`` (its base method's class); None where ``name`` is no recipe."""
    recipe = _RECIPES.get(name)
    return recipe if recipe is not None and method_class(recipe.base) is cls else None


def default_parts(name: str) -> dict[str, str | None]:
    """Method ``name``'s default parts by key: its class's, a recipe's own in their place (None: the method's own
    ``transition_loss``)."""
    recipe = _RECIPES.get(name)
    cls = method_class(name)
    return {key: getattr(cls, f"default_{key}") for key in PART_KEYS} | (dict(recipe.parts) if recipe else {})


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
    """The class that runs method ``name`` (a recipe's: its base method's)."""
    target = METHODS.get(name)
    return method_class(target.base) if isinstance(target, Recipe) else target


def build_method(cfg: Any):
    """The configured method, its typed options checked (one-line errors)."""
    return method_class(cfg.method.name)(cfg)

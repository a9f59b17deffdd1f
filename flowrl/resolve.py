"""A config resolved against the plug-ins: the one place where a setting is checked against a method, a part, a
reward or a pipeline.

Checks have three homes, by what they need:

* ``flowrl.config``: a setting on its own (a range, a choice, two settings of the config together). The config is
  plain data and imports no plug-in.
* here, ``resolve``: a setting against the plug-ins (a registered name, a method's options and parts, what a
  method or reward declares). Recipes and ``key=value`` overrides resolve here too: a method switched at one level
  keeps only the Flow-GRPO knobs it holds (``flowrl.methods.options.carry_options``).
* ``flowrl.preflight``: what needs files, packages or a checkpoint, before any weight loads.
"""

from __future__ import annotations

from typing import Any

from flowrl.config import (
    DEFAULT_RECIPE,
    RESUME_FREE_KEYS,
    SECRET_WORDS,
    Config,
    ConfigError,
    config_from_dict,
    flatten_config,
    parse_override,
    read_recipe,
    recipe_over_base,
    set_path,
)
from flowrl.methods import build_method, check_method_name, method_class
from flowrl.methods.options import carry_options, drop_foreign_knobs, with_knob_defaults
from flowrl.methods.parts import check_part_names
from flowrl.pipelines.base import media_kind_of
from flowrl.reward_models import check_reward_name
from flowrl.reward_models.base import reward_target
from flowrl.scoring import check_reward_modality


def resolve_config(recipe: str | None = None, overrides: list[str] | None = None) -> Config:
    """Recipe (default ``tiny-cpu``) + ``key=value`` overrides -> a Config resolved against the plug-ins."""
    data = load_recipe(recipe)
    merge_overrides(data, overrides or [])
    return resolve(config_from_dict(data))


def resolve(cfg: Config) -> Config:
    """``cfg`` checked against the plug-ins (one line naming the setting); Flow-GRPO's knobs set for a method
    without them are dropped with a warning. Idempotent: the trainer resolves the config it is given again."""
    check_reward_names(cfg)
    try:
        check_method_name(cfg.method.name)
    except ValueError as exc:
        raise ConfigError(f"method.name: {exc}") from None
    least = method_class(cfg.method.name).min_group_size
    if cfg.sample.group_size < least:
        raise ConfigError(
            f"sample.group_size: method {cfg.method.name} compares the samples of a prompt, so it needs at "
            f"least {least} per prompt, got {cfg.sample.group_size}"
        )
    drop_foreign_knobs(cfg)
    check_part_names(cfg)
    if not cfg.reward and build_method(cfg).needs().rewards:  # only a method that brings its own preference
        raise ConfigError("reward: no reward configured; set reward.<name>=<weight>")
    return cfg


def check_reward_names(cfg: Config) -> None:
    """Every reward and evaluation reward registered (or ``module:attr``), and every ``reward_args`` entry one of
    them; a reward that cannot score the pipeline's media is said first."""
    for section, names in (("reward", cfg.reward), ("eval_reward", cfg.eval_reward or {})):
        for name in names:
            try:
                check_reward_name(name)
            except ValueError as exc:
                raise ConfigError(f"{section}.{name}: {exc}") from None
    orphans = [name for name in cfg.reward_args if name not in {**cfg.reward, **(cfg.eval_reward or {})}]
    if orphans:  # a recipe's reward_args left behind by a new reward: say first if that reward cannot fit
        check_reward_media(cfg)
        raise ConfigError(
            f"reward_args.{orphans[0]}: no reward named {orphans[0]!r} is configured (reward: "
            f"{', '.join(cfg.reward)}); add reward.{orphans[0]}=<weight>, or replace reward_args "
            "whole (reward_args={...})"
        )


def check_reward_media(cfg: Config) -> None:
    """The trained rewards' media kind against the pipeline's (``flowrl.scoring.check_reward_modality``)."""
    try:
        kind = media_kind_of(cfg.model.pipeline)
        targets = {name: reward_target(name) for name in cfg.reward}
    except (ValueError, ImportError):  # an unknown pipeline or reward has its own error later
        return
    for name, target in targets.items():
        if isinstance(target, type):  # a function reward declares nothing
            check_reward_modality(name, target, cfg.model.pipeline, kind)


# ----------------------------------------------------------------------------------------------------
# recipes and overrides


def load_recipe(name_or_path: str | None, _seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """A shipped recipe by name, or a YAML file by path; returns the override tree it holds.

    ``base: <recipe>`` starts from another recipe (``flowrl.config.recipe_over_base``); a recipe that names its
    own method without its own options keeps only the base's Flow-GRPO knobs that method holds.
    """
    name_or_path = name_or_path or DEFAULT_RECIPE
    data = read_recipe(name_or_path)
    base = data.pop("base", None)
    if base is None:
        return data
    if not isinstance(base, str):
        raise ConfigError(f"recipe {name_or_path!r}: base must be a recipe name or path, got {base!r}")
    if base in _seen or base == name_or_path:
        raise ConfigError(f"recipe {name_or_path!r}: base recipes form a cycle through {base!r}")
    merged = load_recipe(base, (*_seen, name_or_path))
    method = data.get("method")
    if isinstance(method, dict) and "name" in method and "options" not in method:  # its options replace the base's
        carry_options(merged, method["name"])
    return recipe_over_base(merged, data)


def merge_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """``key=value`` overrides over a recipe's tree; ``method.name`` keeps only the recipe's Flow-GRPO knobs that
    method holds (``carry_options``)."""
    given: set[str] = set()
    for text in overrides:
        key, value = parse_override(text)
        if key == "method.name":
            carry_options(data, value, keep=given)  # the recipe's options were for its own method
        set_path(data, key, value)
        given.add(key)
    return data


# ----------------------------------------------------------------------------------------------------
# comparing two runs' settings


def math_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``key (old -> new)`` for every setting that differs between two config dicts and changes the math
    of training (``RESUME_FREE_KEYS`` do not; redacted secrets are not compared; a method's Flow-GRPO knob
    given at its default equals the knob unset)."""
    a, b = with_knob_defaults(flatten_config(old)), with_knob_defaults(flatten_config(new))
    defaults = flatten_config(Config().to_dict())
    for key, value in defaults.items():  # a key added after the old run was saved: it ran with the default
        nested = any(k.startswith(key + ".") for k in (*a, *b))  # e.g. an empty default mapping, set in one run
        # only a key the new config has: a default entry of a free-form mapping (the default reward's name) that
        # neither run holds is no setting of either
        if not nested and key in b:
            a.setdefault(key, value)
    changes = []
    for key in sorted(set(a) | set(b)):
        if any(
            key == f or (f.endswith(".") and key.startswith(f)) or key.startswith(f + ".") for f in RESUME_FREE_KEYS
        ):
            continue
        if any(w in key.rsplit(".", 1)[-1].lower() for w in SECRET_WORDS):
            continue
        if a.get(key, "<unset>") != b.get(key, "<unset>"):
            changes.append(f"{key} ({a.get(key, '<unset>')!r} -> {b.get(key, '<unset>')!r})")
    return changes

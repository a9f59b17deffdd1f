"""The typed-settings machinery under flowrl's config, below every module that checks settings: ``ConfigError``, a
dataclass of settings built from a mapping with one-line errors (``build_section``: the config's sections and every
method's typed options), the flat dotted view of a settings tree, ``log.stop_if`` rules, and ``NamedEnum``, the base
of every enum whose members are names written in configs, adapters and logs. It imports nothing of
flowrl but the table of other tools' key names (``flowrl.migration``), so the config, the methods (their options)
and the logs all build on it without importing each other."""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from enum import Enum
from typing import Any


class NamedEnum(str, Enum):
    """An enum of names: each member equals, hashes and prints as its name (``"video"``), so a name written in a
    config, a plug-in or a JSON file stands for its member."""

    def __str__(self) -> str:
        return self.value


class ConfigError(ValueError):
    """A bad config value, key, recipe or override. The message is one line naming the culprit."""


def parse_stop_rule(rule: str) -> tuple[str, str, float]:
    """``"metric<value"`` or ``"metric>value"`` -> (metric, op, value)."""
    for op in ("<", ">"):
        metric, sep, value = rule.partition(op)
        if sep:
            try:
                return metric.strip(), op, float(value)
            except ValueError:
                break
    raise ConfigError(f"log.stop_if: {rule!r} is not 'metric<value' or 'metric>value'")


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(key: str, value: Any, tp: Any) -> Any:
    """Check ``value`` against the annotation ``tp``; ints are accepted for floats."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(key, value, arg)
            except ConfigError as exc:
                errors.append(exc)
        raise errors[0]
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping of settings, got {value!r}")
        return build_dataclass(tp, value, key + ".")
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        (item_tp,) = typing.get_args(tp)
        return [_coerce(f"{key}[{i}]", v, item_tp) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        key_tp, val_tp = typing.get_args(tp)
        return {str(k): _coerce(f"{key}.{k}", v, val_tp) for k, v in value.items()}
    if tp is Any:
        return value
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str) and looks_numeric(value):
        return float(value)  # YAML 1.1 reads 1e-3 (no dot) as a string
    if tp is float and isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{key}: expected a finite number, got {value}")
    if tp is bool and not isinstance(value, bool):
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if tp is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if not isinstance(value, tp):
        raise ConfigError(f"{key}: expected {_type_name(tp)}, got {value!r}")
    return value


def unknown_key(prefix: str, key: str, known: list[str], given: str | None = None) -> ConfigError:
    """An unknown key, with its flowrl name where it is flow_grpo's or Flow-Factory's (``given``: the whole dotted
    key the user wrote, of which ``prefix + key`` is the first unknown part), else the closest known key."""
    from flowrl.migration import foreign_key_hint, moved_key_hint  # tables only: configkit builds on no more flowrl

    for name in dict.fromkeys((given or prefix + key, prefix + key)):
        moved = moved_key_hint(name)
        if moved is not None:
            return ConfigError(moved)
        hint = foreign_key_hint(name)
        if hint is not None:
            return ConfigError(f"unknown key {name!r}: {hint}")
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    hint = f"; did you mean {prefix}{close[0]!r}?".replace(f"{prefix}'", f"'{prefix}") if close else ""
    return ConfigError(f"unknown key {prefix + key!r}{hint}")


def build_dataclass(cls: type, data: dict[str, Any], prefix: str = "") -> Any:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in data.items():
        if key not in names:
            below = flatten_config(value, f"{prefix}{key}.") if isinstance(value, dict) and value else {}
            raise unknown_key(prefix, str(key), names, next(iter(below), None))
        kwargs[key] = _coerce(prefix + key, value, hints[key])
    try:
        return cls(**kwargs)
    except TypeError as exc:  # pragma: no cover - guarded by the key check above
        raise ConfigError(f"{prefix or 'config'}: {exc}") from None


def build_section(cls: type, data: dict[str, Any], prefix: str = "") -> Any:
    """A dataclass of settings from a mapping, checked as the config is (a method's typed options)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'section'}: expected a mapping of settings, got {data!r}")
    return build_dataclass(cls, data, prefix)


def flatten_config(tree: Any, prefix: str = "") -> dict[str, Any]:
    """A nested config tree as ``{"a.b.c": value}`` (an empty mapping stays one entry)."""
    if isinstance(tree, dict) and tree:
        out: dict[str, Any] = {}
        for k, v in tree.items():
            out.update(flatten_config(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): tree}


def looks_numeric(text: str) -> bool:
    """A finite number written as text (``1e-3``); "nan" and "inf" are not accepted as settings."""
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False

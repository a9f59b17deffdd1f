"""Methods: small plug-ins that choose the step plan, the credit assignment and the loss."""

from __future__ import annotations

import difflib
import importlib
from typing import Any

_METHODS: dict[str, str] = {
    "flow_grpo": "flowrl.methods.flow_grpo:FlowGRPO",
}


def list_methods() -> list[str]:
    return sorted(_METHODS)


def check_method_name(name: str) -> None:
    if name not in _METHODS:
        close = difflib.get_close_matches(name, list(_METHODS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(list_methods())}"
        raise ValueError(f"unknown method {name!r}{hint}")


def build_method(cfg: Any):
    check_method_name(cfg.method.name)
    module, _, attr = _METHODS[cfg.method.name].partition(":")
    return getattr(importlib.import_module(module), attr)(cfg)

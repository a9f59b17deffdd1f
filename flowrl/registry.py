"""A registry of named plug-ins: classes or lazy ``"module:attr"`` strings, plus an entry-point group.

Duplicate names are refused, so two plug-ins cannot silently shadow each other; unknown names get a
one-line error with the closest known name.
"""

from __future__ import annotations

import difflib
import importlib
import logging
from typing import Any

logger = logging.getLogger(__name__)


class Registry:
    def __init__(self, kind: str, entry_point_group: str, builtins: dict[str, Any] | None = None):
        self.kind, self.group = kind, entry_point_group
        self._items: dict[str, Any] = dict(builtins or {})
        self._entry_points_read = False

    def register(self, name: str, target: Any | None = None):
        """Register ``target`` (a class or ``"module:attr"``) under ``name``; usable as a decorator."""

        def add(obj: Any) -> Any:
            # equality, not identity: re-importing a module re-registers equal "module:attr" strings
            if name in self._items and self._items[name] != obj:
                raise ValueError(f"{self.kind} name {name!r} is already registered")
            self._items[name] = obj
            return obj

        return add if target is None else add(target)

    def _read_entry_points(self) -> None:
        if self._entry_points_read:
            return
        self._entry_points_read = True
        from importlib.metadata import entry_points

        for ep in entry_points(group=self.group):
            if ep.name in self._items and self._items[ep.name] != ep.value:
                logger.warning(
                    "%s plug-in %r (%s) skipped: the name is already registered", self.kind, ep.name, ep.value
                )
                continue
            self._items[ep.name] = ep.value

    def names(self) -> list[str]:
        self._read_entry_points()
        return sorted(self._items)

    def check(self, name: str) -> None:
        if name in self._items:
            return
        self._read_entry_points()
        if name not in self._items:
            close = difflib.get_close_matches(name, list(self._items), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(self.names())}"
            raise ValueError(f"unknown {self.kind} {name!r}{hint}")

    def get(self, name: str) -> Any:
        """The registered object, importing a lazy ``"module:attr"`` string (one-line errors)."""
        self.check(name)
        target = self._items[name]
        if not isinstance(target, str):
            return target
        module, _, attr = target.partition(":")
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"{self.kind} {name!r}: cannot import {target!r} ({exc})") from None

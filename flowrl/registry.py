"""The one registry of named plug-ins: methods, method parts, pipeline families and rewards.

A name maps to an object (a class, a function, a part's record) or to a lazy ``"module:attr"`` string imported only
when the name is chosen; an entry-point group adds the names installed packages declare, read once, lazily.
Duplicate names are refused, so two plug-ins cannot silently shadow each other; an unknown name is a one-line error
with the closest known name. Rewards also take ``"module:attr"`` itself as a name (``free_targets``).
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import logging
import os
import sys
from collections.abc import Iterator
from typing import Any

logger = logging.getLogger(__name__)


class Registry:
    """Named plug-ins of one ``kind`` (the word of its errors: "unknown method 'x'"). ``where``: the config key
    that chooses one, which starts its errors ("method.loss: unknown part 'x'"); ``error``: the exception type
    of its errors."""

    def __init__(
        self,
        kind: str,
        entry_point_group: str | None = None,
        builtins: dict[str, Any] | None = None,
        *,
        where: str | None = None,
        free_targets: bool = False,
        error: type[Exception] = ValueError,
    ):
        self.kind, self.group, self.where = kind, entry_point_group, where
        self.free_targets, self.error = free_targets, error
        self._items: dict[str, Any] = dict(builtins or {})
        self._entry_points_read = entry_point_group is None

    def _fail(self, message: str) -> Exception:
        return self.error(f"{self.where}: {message}" if self.where else message)

    def register(self, name: str, target: Any | None = None):
        """Register ``target`` (an object or ``"module:attr"``) under ``name``; usable as a decorator."""

        def add(obj: Any) -> Any:
            # equality, not identity: re-importing a module re-registers equal "module:attr" strings
            if name in self._items and self._items[name] != obj:
                raise self._fail(f"{self.kind} name {name!r} is already registered")
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

    def known(self, name: str) -> bool:
        if self.free_targets and ":" in name:
            return True
        if name not in self._items:
            self._read_entry_points()
        return name in self._items

    def check(self, name: str) -> None:
        """A one-line error naming the closest known name when ``name`` is unknown."""
        if self.known(name):
            return
        close = difflib.get_close_matches(name, self.names(), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(self.names())}"
        raise self._fail(f"unknown {self.kind} {name!r}{hint}")

    def entry(self, name: str) -> Any:
        """What ``name`` is registered as (a lazy target stays its ``"module:attr"`` string)."""
        self.check(name)
        return self._items.get(name, name)

    def get(self, name: str) -> Any:
        """The registered object, importing a lazy ``"module:attr"`` string (one-line errors)."""
        target = self.entry(name)
        return import_target(target, self.kind, self.error, name) if isinstance(target, str) else target

    @contextlib.contextmanager
    def temporary(self) -> Iterator[Registry]:
        """Names registered inside the ``with`` block are forgotten after it (for tests)."""
        saved = dict(self._items)
        try:
            yield self
        finally:
            self._items = saved


def import_target(
    spec: str, kind: str = "plug-in", error: type[Exception] = ValueError, name: str | None = None
) -> Any:
    """``"module:attr"`` imported (``attr`` may be dotted: ``Class.function``); a module not found on the path is
    looked for in the working directory too. Every failure is one ``error`` line naming ``name`` (default: the
    spec) and what failed."""
    label = f"{kind} {name or spec!r}" if name in (None, spec) else f"{kind} {name!r} ({spec})"
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise error(f"{label}: expected 'module:attr'")
    try:
        obj: Any = _import_module(module_name)
    except ImportError as exc:
        raise error(f"{label}: cannot import module {module_name!r} ({exc})") from exc
    except Exception as exc:  # a user's module that fails on import (SyntaxError, NameError): one line, not a traceback
        raise error(f"{label}: importing module {module_name!r} raised {first_line(exc)}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise error(f"{label}: module {module_name!r} has no attribute {attr!r}") from exc
    return obj


def _import_module(module_name: str) -> Any:
    """Import ``module_name``, looking in the working directory too when it is not found elsewhere.

    ``python -m flowrl`` puts the working directory on ``sys.path`` but the installed ``flowrl`` console
    script does not, so without this a ``my_rewards.py`` next to the user would be found by one and not by
    the other. The directory is appended (installed packages keep precedence) and kept once it helped.
    """
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        cwd = os.getcwd()
        searched = {os.path.abspath(p or os.curdir) for p in sys.path}
        if exc.name != module_name.partition(".")[0] or cwd in searched:
            raise  # a dependency of the module is missing, or the working directory was searched already
        sys.path.append(cwd)
        importlib.invalidate_caches()
        try:
            return importlib.import_module(module_name)
        except ModuleNotFoundError:
            sys.path.remove(cwd)
            raise


def first_line(exc: BaseException) -> str:
    """``"TypeName: first line of the message"`` (or the type's name alone)."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__

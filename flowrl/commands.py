"""What every flowrl command shares, below every command module (each imports it; it imports none of them): the
one-line form of a user error, and the refusal to write over a user's file."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


def refuse_overwrite(paths: Iterable[str | Path], option: str, force: bool = False, how: str = "--force") -> None:
    """Refuse, in one line naming it, to write over a file of the user's that already exists: ``option`` is the
    argument that named it, ``how`` the way to replace it anyway (``force`` given: nothing is refused)."""
    if force:
        return
    for path in map(Path, paths):
        if path.is_dir() and not path.is_symlink():
            raise ValueError(f"{option}: {str(path)!r} is a folder; name a file")
        if path.exists() or path.is_symlink():
            raise ValueError(f"{option}: {str(path)!r} already exists; pass {how} to replace it, or name a new file")


def error_line(exc: BaseException) -> str:
    """What every flowrl command prints for a user error: one line, the message's first line."""
    return f"flowrl: error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"

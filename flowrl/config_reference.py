"""The configuration reference, generated from the config dataclasses and their comments.

    python -m flowrl.config_reference > docs/config.md

Every key of ``flowrl.config.Config`` (sections in order), and every method's ``method.options``, with
its type and default as the code declares them and its meaning from the comment on (or just above) the
field in the source. ``tests/cli/test_config_reference.py`` fails when docs/config.md drifts from the code.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import sys
from typing import Any

HEADER = """# Configuration reference

Generated from the code by `python -m flowrl.config_reference > docs/config.md` (a test fails when this
file and the code disagree). A recipe holds overrides of these defaults; on the command line
`section.key=value` sets one key, and a mapping (`reward={...}`, `method.options={...}`) replaces the
whole value. YAML reads `1e-3` as a string; flowrl accepts it as a float.
"""


def _field_comments(cls: type) -> dict[str, str]:
    """field name -> its comment: the ``#`` text on the field's line, after the comment lines above it."""
    lines, _ = inspect.getsourcelines(cls)
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body
    out = {}
    for node in body:
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        row = node.lineno - 1
        above = []
        k = row - 1
        while k >= 0 and lines[k].strip().startswith("#"):
            above.insert(0, lines[k].strip().lstrip("#").strip())
            k -= 1
        code = lines[row]
        trailing = code.split("  # ", 1)[1].strip() if "  # " in code else ""
        out[node.target.id] = " ".join(part for part in [*above, trailing] if part)
    return out


def _annotations(cls: type) -> dict[str, str]:
    tree = ast.parse(inspect.getsource(cls))
    return {
        n.target.id: ast.unparse(n.annotation)
        for n in tree.body[0].body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    }


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _show(value: Any) -> str:
    if dataclasses.is_dataclass(value):
        return ""
    if isinstance(value, str):
        return f'`"{value}"`'
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, tuple):
        value = list(value)
    return f"`{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _declared(cls: type, read) -> dict[str, str]:
    """``read`` over the dataclass and its dataclass bases, a subclass's declaration winning."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass) and klass is not object:
            out.update({k: v for k, v in read(klass).items() if v or k not in out})
    return out


def _rows(cls: type, prefix: str) -> list[tuple[str, str, str, str]]:
    comments, types = _declared(cls, _field_comments), _declared(cls, _annotations)
    rows = []
    for f in dataclasses.fields(cls):
        default = _default(f)
        if dataclasses.is_dataclass(default):
            rows += _rows(type(default), f"{prefix}{f.name}.")
            continue
        rows.append((f"{prefix}{f.name}", types.get(f.name, ""), _show(default), comments.get(f.name, "")))
    return rows


def _table(rows: list[tuple[str, str, str, str]]) -> list[str]:
    out = ["| key | type | default | meaning |", "|---|---|---|---|"]
    out += [f"| `{k}` | `{_cell(t)}` | {_cell(d)} | {_cell(m)} |" for k, t, d, m in rows]
    return out


def _parts_section() -> list[str]:
    """The registered parts (``flowrl.methods.parts``) and each method's own."""
    from flowrl.methods import default_parts, list_methods
    from flowrl.methods.parts import CREDIT_NORMS, CREDIT_RULES, LOSSES, RECORDS

    lines = [
        "## Method parts",
        "",
        "`method.credit`, `method.credit_norm` and `method.loss` swap a method's part where it fits (a part that",
        "needs what the method's exploration does not record, or options it does not have, is a one-line error).",
        "A method whose loss fits no other method has it as its own `transition_loss` (loss: own below).",
        "",
        "| key | part | needs | what it does |",
        "|---|---|---|---|",
    ]
    for registry in (CREDIT_RULES, CREDIT_NORMS, LOSSES):
        for name in registry.names():
            part = registry.get(name)
            needs = [RECORDS[r] for r in RECORDS if r in part.requires]
            needs += [f"method.options.{f}" for f in part.reads]
            lines.append(f"| `{registry.where}` | `{name}` | {_cell('; '.join(needs))} | {_cell(part.summary)} |")
    lines += ["", "| method | credit | credit_norm | loss |", "|---|---|---|---|"]
    for name in list_methods():
        parts = default_parts(name)
        loss = f"`{parts['loss']}`" if parts["loss"] else "own"
        lines.append(f"| `{name}` | `{parts['credit']}` | `{parts['credit_norm']}` | {loss} |")
    return [*lines, ""]


def reference() -> str:
    from flowrl.config import Config
    from flowrl.methods import list_methods, method_class

    lines = [HEADER]
    top = [r for r in _rows(Config, "") if "." not in r[0]]
    lines += ["## Top level", "", *_table(top), ""]
    for f in dataclasses.fields(Config):
        default = _default(f)
        if dataclasses.is_dataclass(default):
            lines += [f"## `{f.name}`", "", *_table(_rows(type(default), f"{f.name}.")), ""]
    lines += [
        "## `method.options`, per method",
        "",
        "Typed per method (`flowrl ls methods`); an unknown or mistyped option is a one-line error. Flow-GRPO's",
        "knobs (`sde_type`, `noise_level`, `window_size`, `window_range`, `timestep_fraction`, `clip_range`, `beta`,",
        "`adv_clip_max`, `global_std`, `std_eps`) are options of the methods that read them; their old keys",
        "(`sample.noise_level`, `train.beta`, ...) set them for one release with a FutureWarning, and are ignored",
        "with a warning for a method without the knob.",
        "",
    ]
    lines += _parts_section()
    for name in list_methods():
        options = method_class(name).Options
        rows = _rows(options, "method.options.")
        lines += [f"### `{name}`", ""]
        lines += [*_table(rows), ""] if rows else ["No options.", ""]
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    sys.stdout.write(reference())

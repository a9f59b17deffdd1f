"""The benchmarks' base models that are made on this machine and cached (the toy benchmarks pretrain theirs), and
the hint that names the command making one when ``model.path`` names it before it exists. A leaf: train, validate,
sample and the benchmarks' generation all check a model path through ``check_model_path_or_hint``."""

from __future__ import annotations

from pathlib import Path

# the benchmarks whose base model is made on this machine and cached: cache folder -> (what, command)
PRETRAINED = {
    "toy": ("the toy GenEval base model", "flowrl eval toy"),
    "toy_av": ("the toy audio-video base model", "flowrl eval toy-av"),
}


def missing_model_hint(path: str) -> str | None:
    """How to make ``path`` when it names a benchmark's cached base model that does not exist yet (the toy
    recipes name ``~/.cache/flowrl/<benchmark>/default``; ``$FLOWRL_CACHE/<benchmark>`` when that is set)."""
    import os

    local = Path(path).expanduser()
    roots = [Path.home() / ".cache" / "flowrl"]
    if os.environ.get("FLOWRL_CACHE"):
        roots.insert(0, Path(os.environ["FLOWRL_CACHE"]).expanduser())
    for folder, (what, command) in PRETRAINED.items():
        for root in roots:
            if local.parent != root / folder:
                continue
            moved = roots[0] / folder / local.name
            if moved != local and moved.exists():  # made under FLOWRL_CACHE, named here under ~/.cache
                return f"{what} is in $FLOWRL_CACHE: set model.path={moved}"
            return (
                f"{what} is not made yet: create it with `{command} --pretrain` (cached and reused), or let "
                f"`{command} RECIPE` pretrain it and train"
            )
    return None


def check_model_path_or_hint(model_cfg) -> None:
    """``check_model_path``, whose "no such file or folder" names the command that makes a benchmark's cached base
    model when ``model.path`` is one (train, validate, sample and generation all check through this)."""
    from flowrl.pipelines.base import check_model_path

    try:
        check_model_path(model_cfg)
    except FileNotFoundError as exc:
        hint = missing_model_hint(model_cfg.path)
        if hint is None:
            raise
        raise FileNotFoundError(f"{exc}; {hint}") from None

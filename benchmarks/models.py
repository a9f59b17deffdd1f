"""The benchmarks' base models that are made on this machine and cached (the toy benchmarks pretrain theirs), and
the hint that names the command making one (or the data made with it) when a recipe names it before it exists. A
leaf: train, validate, sample and the benchmarks' generation check a model path through
``check_model_path_or_hint``, the prompt loader a missing data path through ``missing_cache_hint``."""

from __future__ import annotations

from pathlib import Path

# the benchmarks whose base model is made on this machine and cached: cache folder -> (what, command)
PRETRAINED = {
    "toy": ("the toy GenEval base model", "flowrl eval toy"),
    "toy_av": ("the toy audio-video base model", "flowrl eval toy-av"),
}


def missing_cache_hint(path: str, key: str = "model.path") -> str | None:
    """How to make ``path`` when it names what a benchmark makes into its cache and it does not exist yet: its
    base model (the toy recipes' ``model.path``, ``~/.cache/flowrl/<benchmark>/default``) or data made with it
    (toy-sft's renders); ``$FLOWRL_CACHE/<benchmark>`` when that is set. ``key`` names the setting to change."""
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
            name = what if local.name == "default" else f"{local.name} (made with {what})"
            if moved != local and moved.exists():  # made under FLOWRL_CACHE, named here under ~/.cache
                return f"{name} is in $FLOWRL_CACHE: set {key}={moved}"
            return (
                f"{name} is not made yet: create it with `{command} --pretrain` (cached and reused), or let "
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
        hint = missing_cache_hint(model_cfg.path)
        if hint is None:
            raise
        raise FileNotFoundError(f"{exc}; {hint}") from None

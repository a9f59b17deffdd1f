"""docs/config.md is the generated configuration reference: it must match the code, and every key must say
what it means."""

from pathlib import Path

from flowrl.config import Config
from flowrl.config_reference import reference

DOC = Path(__file__).parents[2] / "docs" / "config.md"


def _keys(tree: dict, prefix: str = "") -> set[str]:
    out = set()
    for k, v in tree.items():
        if isinstance(v, dict) and k not in ("reward", "reward_args", "eval_reward", "options"):
            out |= _keys(v, f"{prefix}{k}.")
        else:
            out.add(f"{prefix}{k}")
    return out


def test_the_reference_in_docs_is_the_code_s():
    assert DOC.read_text() == reference(), "docs/config.md drifted: python -m flowrl.config_reference > docs/config.md"


def test_every_key_is_listed_with_a_meaning():
    text = reference()
    rows = [line.split("|") for line in text.splitlines() if line.startswith("| `")]
    listed = {cells[1].strip().strip("`"): cells[4].strip() for cells in rows}
    assert _keys(Config().to_dict()) <= set(listed)
    missing = sorted(k for k, meaning in listed.items() if not meaning)
    assert not missing, f"keys without a comment in the code: {missing}"

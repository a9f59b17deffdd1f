"""docs/architecture.md names every registered part, each under its kind."""

import re
from pathlib import Path

from flowrl.methods.parts import CREDIT_NORMS, LOSSES

DOC = (Path(__file__).parents[2] / "docs" / "architecture.md").read_text()


def _item(title: str) -> set[str]:
    """The backquoted names of the bullet that starts with ``**title**`` (up to the next bullet)."""
    text = DOC.split(f"- **{title}**", 1)[1].split("\n- ", 1)[0].split("\n\n", 1)[0]
    return set(re.findall(r"`([a-z0-9_]+)`", text)) - {"method", "loss", "credit_norm"}


def _names(registry) -> dict[str, str]:
    return {name: registry.get(name).kind for name in registry.names()}


def test_every_loss_is_listed_under_its_kind():
    listed = DOC.split("- **Losses**", 1)[1].split("\n- ", 1)[0].split("\n\n", 1)[0]
    policy, transition = listed.split("Transition losses", 1)
    kinds = _names(LOSSES)
    assert set(re.findall(r"`([a-z0-9_]+)`", policy)) - {"method"} == {n for n, k in kinds.items() if k == "policy"}
    assert set(re.findall(r"`([a-z0-9_]+)`", transition)) == {n for n, k in kinds.items() if k == "transition"}


def test_every_credit_norm_is_listed():
    assert set(_names(CREDIT_NORMS)) <= _item("Credit normalisations")

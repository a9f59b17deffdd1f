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


def test_every_loss_is_listed_and_each_own_loss_named():
    listed = DOC.split("- **Losses**", 1)[1].split("\n- ", 1)[0].split("\n\n", 1)[0]
    policy, own = listed.split("A loss that fits only its own method", 1)
    assert set(re.findall(r"`([a-z0-9_]+)`", policy)) - {"method"} == set(_names(LOSSES))
    assert all(k == "policy" for k in _names(LOSSES).values())
    from flowrl.methods import list_methods, method_class

    titles = {"ram": "RAM", "diffusion_nft": "DiffusionNFT", "awm": "AWM", "av_grpo": "AV-GRPO"}
    titles |= {"reward_backprop": "reward backprop", "dpo": "DPO", "dgpo": "DGPO", "sft": "SFT"}
    owners = {n for n in list_methods() if method_class(n).default_loss is None}
    assert owners == set(titles) and all(titles[n] in own for n in owners)


def test_every_credit_norm_is_listed():
    assert set(_names(CREDIT_NORMS)) <= _item("Credit normalisations")

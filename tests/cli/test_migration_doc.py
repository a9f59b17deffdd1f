"""docs/migration.md names only flowrl keys that exist, in its flow_grpo table and in its Flow-Factory table,
and the values it converts to are ones flowrl takes."""

import re
from pathlib import Path

from flowrl.config_reference import reference
from flowrl.resolve import resolve_config

DOC = Path(__file__).parents[2] / "docs" / "migration.md"


def _section(heading: str) -> str:
    text = DOC.read_text()
    rest = text[text.index(heading + "\n") + len(heading) + 1 :]
    end = re.search(r"^## ", rest, flags=re.MULTILINE)
    return rest[: end.start()] if end else rest


def _flowrl_keys(text: str) -> list[str]:
    rows = [line.split("|") for line in text.splitlines() if line.startswith("| `")]
    return [key for cells in rows for key in re.findall(r"`([^`]+)`", cells[2])]


def test_every_flowrl_key_in_the_migration_table_exists():
    known = set(re.findall(r"^\| `([^`]+)` \|", reference(), flags=re.MULTILINE))
    named = _flowrl_keys(DOC.read_text())
    assert len(named) >= 80
    assert set(named) <= known, sorted(set(named) - known)


def test_each_table_is_complete_enough_and_names_real_keys():
    known = set(re.findall(r"^\| `([^`]+)` \|", reference(), flags=re.MULTILINE))
    for heading, least in (("## flow_grpo", 40), ("## Flow-Factory", 40)):
        named = _flowrl_keys(_section(heading))
        assert len(named) >= least, heading
        assert set(named) <= known, (heading, sorted(set(named) - known))


def test_the_flow_factory_values_convert_to_values_flowrl_takes():
    text = _section("## Flow-Factory")
    # the conversions the notes state, each applied to the key its row names
    for overrides in (
        ["model.pipeline=sd3"],
        ["method.name=flow_grpo"],
        ["method.name=grpo_guard"],
        ["method.options.sde_type=flow_sde"],
        ["method.options.sde_type=dance_sde"],
        ["method.options.sde_type=cps"],
        ["train.lora.enabled=false"],
        ["log.trackers=[wandb]"],
        ["log.trackers=[tensorboard]"],
        ["log.trackers=[swanlab]"],
        ["log.trackers=[]"],
        ["train.ema=false"],
        ["method.options.window_size=2", "method.options.window_range=[1,6]"],
        ["reward={pickscore: 1.0}"],
    ):
        resolve_config("tiny-cpu", overrides)
    for written in (
        "`sd3-5` is `sd3`",
        "`grpo` is `flow_grpo`",
        "`grpo-guard` is `grpo_guard`",
        "`Flow-SDE` is `flow_sde`",
        "`Dance-SDE` is `dance_sde`",
        "`CPS` is `cps`",
        "`none` is `[]`",
    ):
        assert written in text, written


def test_the_unknown_key_table_is_the_doc_s():
    """flowrl.migration.FOREIGN_KEYS, which answers an unknown key with its flowrl name, is the doc's tables: every
    row's other-tool name that flowrl does not take (a list's field, ``name[]``, cannot be written as a key)."""
    from flowrl.migration import FOREIGN_KEYS

    known = set(re.findall(r"^\| `([^`]+)` \|", reference(), flags=re.MULTILINE))
    from_doc: dict[str, tuple[list[str], tuple[str, ...]]] = {}
    for tool, heading in (("flow_grpo's", "## flow_grpo"), ("Flow-Factory's", "## Flow-Factory")):
        for line in _section(heading).splitlines():
            if not line.startswith("| `"):
                continue
            cells = line.split("|")
            ours = tuple(re.findall(r"`([^`]+)`", cells[2]))
            for theirs in re.findall(r"`([^`]+)`", cells[1]):
                if theirs not in known and "[]" not in theirs:
                    from_doc.setdefault(theirs, ([], ours))[0].append(tool)
    assert {k: (" and ".join(w), ours) for k, (w, ours) in from_doc.items()} == FOREIGN_KEYS


def test_an_unknown_key_of_flow_grpo_names_its_flowrl_key():
    import pytest

    from flowrl.config import ConfigError

    for overrides, message in (
        (["pretrained.model=x"], "unknown key 'pretrained.model': flow_grpo's pretrained.model is model.path here"),
        (["train.adam_beta1=0.9"], "flow_grpo's train.adam_beta1 is train.adam_betas here"),
        (["mixed_precision=bf16"], "flow_grpo's and Flow-Factory's mixed_precision is train.mixed_precision here"),
        (["scheduler={noise_level: 0.7}"], "scheduler is Flow-Factory's section, not flowrl's: scheduler.seed is seed"),
    ):
        with pytest.raises(ConfigError) as info:
            resolve_config("tiny-cpu", overrides)
        assert message in str(info.value)

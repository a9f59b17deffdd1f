"""docs/migration.md names only flowrl keys that exist, in its flow_grpo table and in its Flow-Factory table,
and the values it converts to are ones flowrl takes."""

import re
from pathlib import Path

from flowrl.config import resolve_config
from flowrl.config_reference import reference

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
        ["sample.sde_type=flow_sde"],
        ["sample.sde_type=dance_sde"],
        ["sample.sde_type=cps"],
        ["train.lora.enabled=false"],
        ["log.trackers=[wandb]"],
        ["log.trackers=[tensorboard]"],
        ["log.trackers=[swanlab]"],
        ["log.trackers=[]"],
        ["train.ema=false"],
        ["sample.window_size=2", "sample.window_range=[1,6]"],
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

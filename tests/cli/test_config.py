from pathlib import Path

import pytest
import torch

from flowrl.benchmarks.toy.sft_data import SFT_DATA, ensure_sft_renders
from flowrl.config import ConfigError, config_from_dict, recipe_names
from flowrl.data import GroupSampler, load_prompts
from flowrl.methods import build_method
from flowrl.resolve import load_recipe, resolve_config


@pytest.mark.parametrize("name", recipe_names())
def test_every_shipped_recipe_loads_and_validates(name, tmp_path, monkeypatch):
    cfg = resolve_config(name)
    assert cfg.reward or not build_method(cfg).needs().rewards  # a dataset method may have none
    if cfg.data.prompts == SFT_DATA:  # toy-sft's renders, which `flowrl eval toy` makes: made here in a fresh home
        monkeypatch.setenv("HOME", str(tmp_path))
        ensure_sft_renders(Path(SFT_DATA).expanduser().parent)
    assert load_prompts(cfg.data.prompts)


def test_a_missing_toy_data_folder_names_the_command_that_makes_it(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("FLOWRL_CACHE", raising=False)
    with pytest.raises(ConfigError) as err:
        load_prompts(SFT_DATA)
    assert str(err.value) == (
        f"data.prompts: no such file {SFT_DATA!r}; sft-renders-v1 (made with the toy GenEval base model) is not made "
        "yet: create it with `flowrl eval toy --pretrain` (cached and reused), or let `flowrl eval toy RECIPE` "
        "pretrain it and train"
    )


def test_defaults_follow_the_spec():
    cfg = resolve_config("sd35m-ocr")
    o = build_method(cfg).options
    assert (cfg.sample.num_steps, cfg.sample.eval_num_steps, cfg.sample.guidance_scale) == (10, 40, 4.5)
    assert (o.noise_level, cfg.sample.group_size, o.clip_range) == (0.7, 24, 1e-4)
    assert (cfg.train.lora.rank, cfg.train.lora.alpha, cfg.train.learning_rate) == (32, 64, 3e-4)
    assert o.beta == pytest.approx(0.004)


def test_overrides_are_typed():
    cfg = resolve_config(
        None,
        [
            "train.iterations=3",
            "train.learning_rate=1e-4",
            "method.options.window_size=2",
            "method.options.window_range=[0, 4]",
            "reward.jpeg_incompressibility=0.5",
            "train.lora.target_modules=[attn.to_q]",
            "seed=7",
        ],
    )
    assert cfg.train.iterations == 3 and cfg.train.learning_rate == 1e-4 and cfg.seed == 7
    assert cfg.method.options["window_range"] == [0, 4]
    assert cfg.reward == {"jpeg_compressibility": 1.0, "jpeg_incompressibility": 0.5}
    assert cfg.train.lora.target_modules == ["attn.to_q"]


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.learnig_rate=1e-4", "unknown key 'train.learnig_rate'; did you mean 'train.learning_rate'?"),
        ("trian.iterations=3", "unknown key 'trian'; did you mean 'train'?"),
        ("train.iterations=three", "train.iterations: expected an integer, got 'three'"),
        ("train.iterations=2.5", "train.iterations: expected an integer, got 2.5"),
        ("train.ema=maybe", "train.ema: expected true or false, got 'maybe'"),
        ("train.learning_rate=-1", "train.learning_rate: must be > 0, got -1.0"),
        ("method.options.sde_type=sdee", "method.options.sde_type: 'sdee' is not one of flow_sde, cps, dance_sde"),
        (
            "sample.group_size=1",
            "sample.group_size: method flow_grpo compares the samples of a prompt, so it needs at least 2 per prompt, got 1",
        ),
        ("method.options.window_size=20", "method.options.window_size: 20 exceeds sample.num_steps=6"),
        ("model.resolution=30", "model.resolution: must be a multiple of 16, got 30"),
        ("model.dtype=fp8", "model.dtype: 'fp8' is not one of fp32, fp16, bf16"),
        ("train.mixed_precision=fp64", "train.mixed_precision: 'fp64' is not one of no, fp16, bf16"),
        ("reward.jpeg_compresibility=1", "unknown reward 'jpeg_compresibility'; did you mean 'jpeg_compressibility'?"),
        ("reward.ocr=heavy", "reward.ocr: expected float, got 'heavy'"),
        ("reward_args.pickscore.device=cpu", "reward_args.pickscore: no reward named 'pickscore' is configured"),
        ("method.name=flow_grp", "method.name: unknown method 'flow_grp'; did you mean 'flow_grpo'?"),
        ("train.adam_betas=[0.9]", "train.adam_betas: expected two values in [0, 1), got [0.9]"),
        ("train.lora.rank=0", "train.lora.rank: must be > 0, got 0"),
        ("train.iterations.x=1", "train.iterations: is not a group of settings"),
        ("iterations", "override 'iterations': expected key=value"),
    ],
)
def test_bad_overrides_name_the_culprit(override, message):
    with pytest.raises(ConfigError) as info:
        resolve_config(None, [override])
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_bad_recipes(tmp_path):
    with pytest.raises(ConfigError, match="unknown recipe 'tiny-cpuu'; did you mean 'tiny-cpu'"):
        load_recipe("tiny-cpuu")
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: [1, 2\n")
    with pytest.raises(ConfigError, match="invalid YAML at line"):
        load_recipe(str(bad))
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_recipe(str(bad))
    with pytest.raises(ConfigError, match="no such file"):
        load_recipe(str(tmp_path / "missing.yaml"))
    with pytest.raises(ConfigError, match="train: expected a mapping of settings"):
        config_from_dict({"train": 3})


def test_prompt_sources(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    with pytest.raises(ConfigError, match="holds no prompts"):
        load_prompts(str(empty))
    with pytest.raises(ConfigError, match="no such file"):
        load_prompts(str(tmp_path / "nope.txt"))
    with pytest.raises(ConfigError, match="unknown builtin prompt set 'tinyy'"):
        load_prompts("builtin:tinyy")
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"prompt": "a"}\n{"text": "b"}\n')
    with pytest.raises(ConfigError, match=r"p.jsonl:2: each line needs a string field 'prompt'"):
        load_prompts(str(bad))
    bad.write_text('{"prompt": "a", "tag": "x"}\nnot json\n')
    with pytest.raises(ConfigError, match=r"p.jsonl:2: not valid JSON"):
        load_prompts(str(bad))
    bad.write_text('{"prompt": "a", "tag": "x"}\n')
    assert load_prompts(str(bad))[0].metadata == {"tag": "x"}


def test_group_sampler_deals_complete_groups():
    shares = [GroupSampler(10, 3, 4, seed=1, world_size=2, rank=r).iteration(5) for r in range(2)]
    one = GroupSampler(10, 3, 4, seed=1).iteration(5)
    gathered = torch.cat([s.prompt_index[s.local] for s in shares])
    assert torch.equal(gathered, one.prompt_index)  # rank order restores the single-process order
    assert torch.equal(one.group_ids, torch.arange(3).repeat_interleave(4))
    assert len(set(one.prompt_index.tolist())) == 3
    with pytest.raises(ConfigError, match="must divide by the 5 processes"):
        GroupSampler(10, 3, 4, seed=1, world_size=5)


def test_a_recipe_can_start_from_a_base_recipe(tmp_path):
    """``base:``: sections update the base's key by key; rewards replace the base's whole; cycles are refused."""
    child = tmp_path / "child.yaml"
    child.write_text(
        "base: tiny-cpu\nsample:\n  num_steps: 3\nreward:\n  jpeg_incompressibility: 1.0\n"
        "method:\n  name: g2rpo\n  options:\n    granularities: [1]\n"
    )
    cfg = resolve_config(str(child))
    base = resolve_config("tiny-cpu")
    assert cfg.sample.num_steps == 3 and cfg.sample.group_size == base.sample.group_size
    assert dict(cfg.reward) == {"jpeg_incompressibility": 1.0}
    assert cfg.method.name == "g2rpo" and dict(cfg.method.options) == {"granularities": [1]}
    assert cfg.train.lora.rank == base.train.lora.rank
    grandchild = tmp_path / "grandchild.yaml"
    grandchild.write_text(f"base: {child}\nsample:\n  group_size: 4\n")
    assert resolve_config(str(grandchild)).sample.num_steps == 3
    loop = tmp_path / "loop.yaml"
    loop.write_text(f"base: {loop}\n")
    with pytest.raises(ConfigError, match="base recipes form a cycle"):
        resolve_config(str(loop))


def test_a_key_added_since_the_checkpoint_counts_as_its_default():
    """A run saved before a config key existed ran with that key's default: resuming it is no change,
    unless the new config sets something else."""
    from flowrl.config import Config
    from flowrl.resolve import math_changes

    new = Config().to_dict()
    old = {**new, "train": {k: v for k, v in new["train"].items() if not k.startswith("lr_")}}
    assert math_changes(old, new) == []
    new["train"]["lr_schedule"] = "cosine"
    assert math_changes(old, new) == ["train.lr_schedule ('constant' -> 'cosine')"]


def test_a_quoted_number_on_the_command_line_stays_a_string():
    from flowrl.config import parse_override

    assert parse_override('run_name="2024"') == ("run_name", "2024")  # the shell's run_name='"2024"'
    assert parse_override('model.revision="1e3"') == ("model.revision", "1e3")
    assert parse_override("train.learning_rate=1e-4") == ("train.learning_rate", 1e-4)


def test_a_recipe_whose_reward_replaces_the_default_one_resumes_without_changes():
    """The default config's reward is ``{jpeg_compressibility: 1.0}``; a run of ``reward: {video: 1.0}`` holds no
    such key, and neither does its resume: the default's entry of a free-form mapping is no setting of either
    (it was reported as ``reward.jpeg_compressibility (1.0 -> '<unset>')``)."""
    from flowrl.resolve import math_changes, resolve_config

    cfg = resolve_config("tiny-wan").to_dict()
    assert math_changes(cfg, resolve_config("tiny-wan").to_dict()) == []
    changed = resolve_config("tiny-wan", ["reward={video: 2.0}"]).to_dict()
    assert math_changes(cfg, changed) == ["reward.video (1.0 -> 2.0)"]


@pytest.mark.parametrize("key", sorted(__import__("flowrl.migration").migration.MOVED_KEYS))
def test_a_moved_key_is_one_line_naming_its_new_key(key, tmp_path):
    """The keys that moved before the first release (``flowrl.migration.MOVED_KEYS``), on the command line or in a
    recipe file: one line naming the setting that replaced each."""
    from flowrl.migration import MOVED_KEYS

    value = "true" if key in ("train.ratio_norm", "train.batch_renorm") else "[0, 4]" if "range" in key else "0.5"
    with pytest.raises(ConfigError, match=rf"^{key} is {MOVED_KEYS[key]} now$"):
        resolve_config("tiny-cpu", [f"{key}={value}"])
    section, name = key.split(".")
    recipe = tmp_path / "old.yaml"
    recipe.write_text(f"base: tiny-cpu\n{section}:\n  {name}: {value}\n")
    with pytest.raises(ConfigError, match=rf"^{key} is {MOVED_KEYS[key]} now$"):
        resolve_config(str(recipe))


def test_a_flow_grpo_knob_for_a_method_without_it_is_a_warning_naming_it():
    """ram has no Flow-GRPO knob, DiffusionNFT's beta and TP-GRPO's window are their own: a Flow-GRPO knob left in
    ``method.options`` is ignored with one warning line naming the method, and a recipe's Flow-GRPO options do not
    become another method's own knobs of the same name."""
    with pytest.warns(UserWarning, match=r"^method\.options\.beta: method ram has no such knob \(one of Flow-GRPO's\)"):
        cfg = resolve_config("tiny-cpu", ["method.options.beta=0.01", "method.name=ram"])
    assert "beta" not in cfg.method.options
    with pytest.warns(UserWarning, match=r"method\.options\.beta \(set for method flow_grpo\): method diffusion_nft"):
        cfg = resolve_config("tiny-cpu", ["method.name=diffusion_nft"])
    assert build_method(cfg).options.beta == 1.0 and cfg.method.options["global_std"] is False
    cfg = resolve_config("tiny-cpu", ["method.name=tp_grpo"])
    assert build_method(cfg).options.window_size is None


def test_no_shipped_recipe_sets_a_knob_its_method_ignores():
    import warnings

    for name in recipe_names():
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            resolve_config(name)


def test_a_knob_given_at_its_default_is_no_change_of_the_math():
    from flowrl.resolve import math_changes

    old = resolve_config("toy-flow-grpo").to_dict()
    old["method"]["options"] = {}
    new = resolve_config("toy-flow-grpo", ["method.options={clip_range: 1.0e-4, adv_clip_max: 5.0}"]).to_dict()
    assert math_changes(old, new) == []
    assert math_changes(old, {**new, "method": {**new["method"], "options": {"beta": 0.1}}}) == [
        "method.options.beta (0.004 -> 0.1)"
    ]

"""The guides in docs/ say only what the code does: docs/recipes.md, docs/metrics.md, docs/local-models.md and
the remote-scoring section of docs/rewards.md. Every override, recipe, command, key, metric name, reward
argument and quoted error message is run through the real code here."""

import inspect
import math
import re
import shlex
import threading
from pathlib import Path

import pytest
import torch
import yaml

from flowrl.cli import _split_recipe, build_parser, main
from flowrl.config import ConfigError, dump_config, parse_override, recipe_names
from flowrl.config_reference import reference
from flowrl.methods.options import flow_knobs
from flowrl.resolve import load_recipe, merge_overrides, resolve_config
from tiny_runs import NO_SAVES, small

DOCS = Path(__file__).parents[2] / "docs"
SMALL = small(3, *NO_SAVES)


def _doc(name: str) -> str:
    return (DOCS / name).read_text()


def _section(text: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading of the same or a higher level (outside code)."""
    level = len(heading.split(" ")[0])
    lines = text[text.index(heading + "\n") + len(heading) + 1 :].splitlines(keepends=True)
    out, fenced = [], False
    for line in lines:
        fenced ^= line.startswith("```")
        if not fenced and re.match(rf"#{{1,{level}}} ", line):
            break
        out.append(line)
    return "".join(out)


def _blocks(text: str, lang: str) -> list[str]:
    """The bodies of the fenced blocks opened with ```lang (``""``: unlabelled ones)."""
    out, body, open_lang = [], None, None
    for line in text.splitlines(keepends=True):
        if line.startswith("```"):
            if body is None:
                body, open_lang = [], line[3:].strip()
            else:
                if open_lang == lang:
                    out.append("".join(body))
                body = None
        elif body is not None:
            body.append(line)
    return out


def _ticked(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", text)


def _commands(text: str) -> list[list[str]]:
    """The flowrl command lines of the bash blocks, as argv after ``flowrl`` (env prefixes and
    ``accelerate launch ... -m flowrl`` removed, comments dropped)."""
    out = []
    for block in _blocks(text, "bash"):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
                words = words[1:]
            if words[:2] == ["accelerate", "launch"]:
                words = words[words.index("-m") + 1 :]
            if words and words[0] == "flowrl":
                out.append(words[1:])
    return out


def _parsed(argv: list[str]):
    args = build_parser().parse_args(argv)
    _split_recipe(args)
    return args


# ------------------------------------------------------------------------------------------- config keys
KNOWN = set(re.findall(r"^\| `([^`]+)` \|", reference(), flags=re.MULTILINE))
GROUPS = {k.rsplit(".", 1)[0] for k in KNOWN if "." in k} | {"model", "data", "sample", "train", "method", "log"}
KEYLIKE = re.compile(
    r"^(output_dir|run_name|seed|resume|resume_allow_changes|overwrite|reward|reward_args|eval_reward|"
    r"model|data|sample|train|method|log)(\.[A-Za-z0-9_:]+)*(=.*)?$"
)


def _key_exists(key: str) -> bool:
    if key in KNOWN or key in GROUPS:
        return True
    return key.startswith(("reward.", "eval_reward.", "reward_args.", "method.options."))  # names of one's choosing


# deliberately wrong examples the guides show as refused
REFUSED = {"train.adam_betas.0=0.8", "train.learnig_rate"}


@pytest.mark.parametrize("doc", ["recipes.md", "metrics.md", "local-models.md"])
def test_every_config_key_a_guide_names_exists(doc):
    named = {t.split("=", 1)[0] for t in _ticked(_doc(doc)) if KEYLIKE.match(t) and t not in REFUSED}
    assert len(named) >= 5
    missing = sorted(k for k in named if not _key_exists(k))
    assert not missing, missing
    for wrong in REFUSED & set(_ticked(_doc(doc))):
        with pytest.raises(ConfigError):
            resolve_config("tiny-cpu", [wrong if "=" in wrong else wrong + "=1"])


# ------------------------------------------------------------------------------------------- recipes.md
def test_recipes_named_are_the_shipped_ones(capsys):
    text = _doc("recipes.md")
    table = _section(text, "## Shipped recipes")
    named = {t for t in _ticked(table) if re.fullmatch(r"[a-z0-9.]+(-[a-z0-9.]+)+|tiny-cpu", t)}
    assert named == set(recipe_names()), set(recipe_names()) ^ named
    assert main(["ls", "recipes"]) == 0
    assert capsys.readouterr().out.split() == recipe_names()
    for name in recipe_names():  # "each is base: toy-flow-grpo (toy-av-flow-grpo) plus a few keys"
        baseline = "toy-av-flow-grpo" if name.startswith("toy-av-") else "toy-flow-grpo"
        if name.startswith("toy-") and name != baseline:
            raw = yaml.safe_load((Path(__file__).parents[2] / "flowrl" / "recipes" / f"{name}.yaml").read_text())
            assert raw["base"] == baseline and len(raw) <= 6, name
            assert load_recipe(name)["model"] == load_recipe(baseline)["model"]


def test_the_read_as_table_is_what_an_override_gives():
    rows = {
        "train.iterations=20": ("train.iterations", 20),
        "train.learning_rate=1e-4": ("train.learning_rate", 1e-4),
        "train.ema=true": ("train.ema", True),
        "model.revision=": ("model.revision", None),
        "train.adam_betas=[0.9,0.95]": ("train.adam_betas", [0.9, 0.95]),
        "reward={ocr: 1.0}": ("reward", {"ocr": 1.0}),
        "data.prompts=builtin:general": ("data.prompts", "builtin:general"),
    }
    text = _section(_doc("recipes.md"), "## Overrides")
    for override, (key, want) in rows.items():
        assert f"`{override}`" in text, override
        assert parse_override(override) == (key, want)
        cfg = resolve_config("tiny-cpu", [override]).to_dict()
        node = cfg
        for part in key.split("."):
            node = node[part]
        assert node == want and type(node) is type(want), (override, node)
    for word in ("yes", "no", "on", "off"):  # YAML 1.1 booleans
        assert isinstance(parse_override(f"train.ema={word}")[1], bool)


def test_quoted_overrides_from_the_guide_parse():
    cfg = resolve_config(
        "tiny-cpu",
        ["train.adam_betas=[0.9, 0.95]", "reward={pickscore: 1.0}", 'log.stop_if=["monitor/diversity/in_group<0.01"]'],
    )
    assert cfg.train.adam_betas == [0.9, 0.95] and cfg.reward == {"pickscore": 1.0}
    assert cfg.log.stop_if == ["monitor/diversity/in_group<0.01"]
    assert resolve_config("tiny-cpu", ["train.iterations=5", "train.iterations=9"]).train.iterations == 9
    with pytest.raises(ConfigError, match=r"unknown key 'train.learnig_rate'; did you mean 'train.learning_rate'\?"):
        resolve_config("tiny-cpu", ["train.learnig_rate=1"])
    with pytest.raises(ConfigError, match="expected true or false"):
        resolve_config("tiny-cpu", ["train.ema=1"])


def test_a_dotted_key_sets_one_entry_and_a_mapping_replaces_the_whole_value():
    text = _section(_doc("recipes.md"), "### A dotted key sets one entry; a mapping replaces the whole value")
    for example in (
        "reward.ocr=1.0",
        "reward={ocr: 1.0}",
        "train.lora.rank=8",
        "train.lora={rank: 8}",
        "method.options.eps1=1.5",
        "method.options={calibrate: false}",
        "train.lora.target_modules=[attn.to_q,attn.to_v]",
        "train.adam_betas.0=0.8",
        "reward_args.jpeg_compressibility.quality=80",
    ):
        assert f"`{example}`" in text, example
    tiny = resolve_config("tiny-cpu")
    assert resolve_config("tiny-cpu", ["reward.ocr=1.0"]).reward == {"jpeg_compressibility": 1.0, "ocr": 1.0}
    assert resolve_config("tiny-cpu", ["reward={ocr: 1.0}"]).reward == {"ocr": 1.0}
    kept = resolve_config("tiny-cpu", ["train.lora.rank=8"]).train.lora
    assert (kept.rank, kept.alpha, kept.target_modules) == (8, tiny.train.lora.alpha, tiny.train.lora.target_modules)
    replaced = resolve_config("tiny-cpu", ["train.lora={rank: 8}"]).train.lora
    assert (replaced.rank, replaced.alpha, replaced.target_modules) == (8, 64, None)
    dense = resolve_config("sd35m-dense-grpo").method.options
    one = resolve_config("sd35m-dense-grpo", ["method.options.eps1=1.5"]).method.options
    assert one == {**dense, "eps1": 1.5} and len(dense) > 1
    assert resolve_config("sd35m-dense-grpo", ["method.options={calibrate: false}"]).method.options == {
        "calibrate": False
    }
    assert resolve_config(
        "tiny-cpu", ["train.lora.target_modules=[attn.to_q,attn.to_v]"]
    ).train.lora.target_modules == ["attn.to_q", "attn.to_v"]
    with pytest.raises(ConfigError, match="not a group of settings"):
        resolve_config("tiny-cpu", ["train.adam_betas.0=0.8"])
    assert "`'reward={\"my_pkg.rewards:score\": 1.0}'`" in text
    assert merge_overrides({}, ['reward={"my_pkg.rewards:score": 1.0}']) == {"reward": {"my_pkg.rewards:score": 1.0}}
    with pytest.raises(ConfigError, match="not a group of settings"):
        merge_overrides({}, ["reward.my_pkg.rewards:score=1.0"])
    assert "`train=5 train.iterations=3`" in text
    with pytest.raises(ConfigError, match="not a group of settings"):
        resolve_config("tiny-cpu", ["train=5", "train.iterations=3"])
    cfg = resolve_config("tiny-cpu", ["reward_args.jpeg_compressibility.quality=80"])
    assert cfg.reward_args == {"jpeg_compressibility": {"quality": 80}}
    with pytest.raises(ConfigError, match="no reward named 'ocr' is configured"):
        resolve_config("tiny-cpu", ["reward_args.ocr.backend=tesseract"])


def test_the_yaml_float_rules(tmp_path, monkeypatch):
    text = _section(_doc("recipes.md"), "## Floats and YAML")
    table = {"1.0e-4": 1e-4, "1e-4": "1e-4", "1.0e+4": 10000.0, "1.0e4": "1.0e4", "1e4": "1e4"}
    for written, want in table.items():
        assert f"`{written}`" in text
        got = yaml.safe_load(f"x: {written}")["x"]
        assert got == want and type(got) is type(want), written
    monkeypatch.chdir(tmp_path)
    # float-typed keys take the numeric string, in a recipe file and on the command line
    Path("floats.yaml").write_text(
        "base: tiny-cpu\ntrain:\n  learning_rate: 1e-4\nmethod:\n  name: dense_grpo\n  options: {eps2: 1e-2}\n"
    )
    cfg = resolve_config("floats.yaml")
    assert cfg.train.learning_rate == 1e-4 and isinstance(cfg.train.learning_rate, float)
    from flowrl.methods import build_method

    assert build_method(cfg).options.eps2 == 0.01
    assert resolve_config("tiny-cpu", ["train.learning_rate=1e-4"]).train.learning_rate == 1e-4
    remote = ["reward={remote: 1.0}", "reward_args.remote.url=http://127.0.0.1:1"]
    assert (
        resolve_config("tiny-cpu", [*remote, "reward_args.remote.timeout=1e2"]).reward_args["remote"]["timeout"]
        == 100.0
    )
    assert "`train.iterations: expected an integer, got 1000.0`" in text
    with pytest.raises(ConfigError, match=r"^train.iterations: expected an integer, got 1000.0$"):
        resolve_config("tiny-cpu", ["train.iterations=1e3"])
    with pytest.raises(ConfigError, match="run_name: expected str"):
        resolve_config("tiny-cpu", ["run_name=2024"])
    assert resolve_config("tiny-cpu", ['run_name="2024"']).run_name == "2024"  # the shell's run_name='"2024"'
    Path("named.yaml").write_text('run_name: "2024"\n')
    assert resolve_config("named.yaml").run_name == "2024"
    # reward_args of a recipe file reach the reward as YAML read them
    from flowrl.reward_models import RewardError, check_reward_args

    for written, ok in (("1e2", False), ("1.0e+2", True), ("100.0", True)):
        Path("r.yaml").write_text(
            f"base: tiny-cpu\nreward: {{remote: 1.0}}\nreward_args:\n"
            f"  remote: {{url: 'http://127.0.0.1:1', timeout: {written}}}\n"
        )
        args = resolve_config("r.yaml").reward_args["remote"]
        if ok:
            check_reward_args("remote", args)
            assert args["timeout"] == 100.0
        else:
            assert args["timeout"] == "1e2"
            with pytest.raises(RewardError, match="timeout must be a number"):
                check_reward_args("remote", args)
    for bad in ("nan", ".inf", "inf"):
        with pytest.raises(ConfigError):
            resolve_config("tiny-cpu", [f"train.learning_rate={bad}"])


def _my_tiny() -> str:
    (block,) = [b for b in _blocks(_doc("recipes.md"), "yaml") if b.startswith("# my-tiny.yaml")]
    return block


def test_the_example_recipe_resolves_as_the_guide_says(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("my-tiny.yaml").write_text(_my_tiny())
    cfg, tiny = resolve_config("my-tiny.yaml"), resolve_config("tiny-cpu")
    assert cfg.output_dir == "runs/my-tiny" and cfg.train.iterations == 20 and cfg.train.learning_rate == 5e-3
    # sections merge one level deep: the base's other train keys stay ...
    for key in ("weight_decay", "optimizer_steps_per_iteration", "max_grad_norm"):
        assert getattr(cfg.train, key) == getattr(tiny.train, key), key
    assert cfg.sample == tiny.sample and cfg.model == tiny.model
    # ... a mapping inside a section is replaced whole
    assert (cfg.train.lora.rank, cfg.train.lora.alpha, cfg.train.lora.target_modules) == (8, 8, None)
    assert tiny.train.lora.target_modules
    assert cfg.reward == {"jpeg_compressibility": 1.0, "jpeg_incompressibility": 0.1}
    assert cfg.reward_args == {"jpeg_incompressibility": {"raw_kb": True}}
    # reward replaces the base's whole
    Path("only.yaml").write_text("base: tiny-cpu\nreward: {jpeg_incompressibility: 1.0}\n")
    assert resolve_config("only.yaml").reward == {"jpeg_incompressibility": 1.0}
    # the commands of the guide
    assert main(["validate", "my-tiny.yaml", "--print"]) == 0
    out = capsys.readouterr().out
    assert "ok: my-tiny.yaml is valid" in out and "output_dir: runs/my-tiny" in out
    args = _parsed(["train", "my-tiny.yaml", "train.iterations=5"])
    assert resolve_config(args.recipe, args.overrides).train.iterations == 5


def test_base_paths_are_relative_to_the_current_directory_and_cycles_are_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    Path("sub/base.yaml").write_text("base: tiny-cpu\ntrain: {iterations: 7}\n")
    Path("sub/child.yaml").write_text("base: base.yaml\ntrain: {learning_rate: 1.0e-3}\n")
    with pytest.raises(ConfigError, match="recipe 'base.yaml': no such file"):
        resolve_config("sub/child.yaml")
    monkeypatch.chdir(tmp_path / "sub")
    cfg = resolve_config("child.yaml")
    assert (cfg.train.iterations, cfg.train.learning_rate, cfg.train.lora.rank) == (7, 1e-3, 16)  # a chain
    Path("a.yaml").write_text("base: b.yaml\n")
    Path("b.yaml").write_text("base: a.yaml\n")
    with pytest.raises(ConfigError, match="cycle"):
        resolve_config("a.yaml")


def test_every_command_of_the_recipe_guide_parses_and_the_cheap_ones_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("my-tiny.yaml").write_text(_my_tiny())
    commands = _commands(_doc("recipes.md"))
    assert len(commands) >= 9
    for argv in commands:
        args = _parsed(argv)
        if args.command in ("train", "validate"):
            resolve_config(args.recipe, args.overrides)
        if args.command == "validate" and "--estimate" not in argv:
            assert main(argv) == 0, argv
            assert f"ok: {args.recipe or 'tiny-cpu'} is valid" in capsys.readouterr().out
    assert _parsed(["train", "train.iterations=10"]).recipe is None  # the first word holds "="
    # validate refuses in one line with exit code 2, e.g. a stop rule naming a metric the run does not log
    assert main(["validate", "log.stop_if=[nope<1]"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("flowrl: error: ")]
    assert len(err) == 1 and "which this run does not log" in err[0]


# ------------------------------------------------------------------------------------------- metrics.md
METRIC = re.compile(r"^(?:reward|adv|policy|monitor|eval|cost|throughput|timing_s|memory|method)/[A-Za-z0-9_/<>]+$")


def _doc_metrics() -> set[str]:
    text = _doc("metrics.md")
    return {t for t in _ticked(text) if METRIC.match(t)} | {"iteration", "skipped"}


def _normalise(name: str, rewards: set[str]) -> str:
    parts = name.split("/")
    return "/".join("<name>" if p in rewards else p for p in parts)


def _reward_names() -> set[str]:
    from flowrl.reward_models import list_rewards

    return set(list_rewards())


def test_every_metric_the_guide_names_is_logged_and_every_logged_one_is_explained():
    from flowrl.methods import list_methods
    from flowrl.preflight import logged_metric_names

    logged = set()
    # reward backprop needs a differentiable reward: JPEG compressibility logged beside it at weight 0
    own = {"reward_backprop": ["reward.smoothness=1", "reward.jpeg_compressibility=0"]}
    for method in list_methods():
        cfg = resolve_config(
            "tiny-cpu",
            [
                "log.eval_every=1",
                "eval_reward={jpeg_incompressibility: 1.0}",
                f"method.name={method}",
                *own.get(method, []),
            ],
        )
        logged |= logged_metric_names(cfg)
    for recipe in ("tiny-wan", "tiny-audio"):  # the monitors of video and audio media
        logged |= logged_metric_names(resolve_config(recipe))
    rewards = _reward_names()
    documented = {_normalise(n, rewards) for n in _doc_metrics()}
    assert len(documented) > 40
    normal = {_normalise(n, rewards) for n in logged}
    assert documented <= normal, sorted(documented - normal)
    assert normal <= documented, f"logged but not in docs/metrics.md: {sorted(normal - documented)}"


def test_a_tiny_run_logs_the_guide_s_metrics_with_the_exact_values_it_states(tmp_path, one_thread):
    """One optimizer step per iteration: every update is on-policy, so the ratio is 1 and nothing is clipped;
    cost/nfe counts rollout, update and the KL reference forward, each twice with CFG. Two rewards, so that
    each one's calls are logged too."""
    from flowrl.trainer import Trainer

    cfg = resolve_config(
        "tiny-cpu",
        [
            f"output_dir={tmp_path}",
            *SMALL,
            "train.iterations=2",
            "method.options.beta=0.01",
            "train.optimizer_steps_per_iteration=1",
            "log.eval_every=1",
            "reward.jpeg_incompressibility=0.5",
            "log.eval_num_prompts=2",
            "sample.eval_num_steps=2",
            "eval_reward={jpeg_incompressibility: 1.0}",
        ],
    )
    rows = Trainer(cfg).train()
    trained = [r for r in rows if "reward/mean" in r]
    assert len(trained) == 2
    rewards = _reward_names()
    logged = {_normalise(n, rewards) for r in rows for n in r}
    from flowrl.media import monitor_names

    other_media = {
        _normalise(m, rewards) for m in (monitor_names("video") | monitor_names("audio")) - monitor_names("image")
    }
    expected = {_normalise(m, rewards) for m in _doc_metrics() if not m.startswith("method/") and m != "skipped"}
    expected -= other_media  # an image run watches images only
    assert expected <= logged, sorted(expected - logged)
    s = cfg.sample
    n, steps, trained_steps = (
        s.prompts_per_iteration * s.group_size,
        s.num_steps,
        int(s.num_steps * flow_knobs(cfg).timestep_fraction),
    )
    for r in trained:
        assert r["policy/clip_frac"] == 0 and r["policy/approx_kl"] == 0 and r["policy/ratio_mean"] == 1
        assert r["policy/onpolicy_logp_diff"] == 0
        kept = round(r["adv/kept_frac"] * n)
        assert r["cost/nfe"] == 2 * (n * steps + kept * trained_steps + kept * trained_steps)
        assert r["cost/reward_calls"] == 2 * n  # samples x reward components
        assert r["cost/reward_calls/jpeg_compressibility"] == r["cost/reward_calls/jpeg_incompressibility"] == n
    assert trained[-1]["cost/nfe_total"] == sum(r["cost/nfe"] for r in trained)
    assert trained[-1]["policy/kl"] > 0  # beta > 0: computed (0 only at the very first step, LoRA B = 0)


# ------------------------------------------------------------------------------------------- local-models.md
def _reward_table() -> list[tuple[str, str, str, str]]:
    text = _section(_doc("local-models.md"), "## What each learned reward loads")
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`") and cells[1].startswith("`"):
            rows.append((cells[0].strip("`"), cells[1].strip("`"), cells[2], cells[3]))
    return rows


def _reward_target(name: str):
    from flowrl.reward_models.base import reward_target

    return reward_target(name)


def test_every_reward_argument_of_the_local_models_guide_exists_with_its_default():
    rows = _reward_table()
    assert len(rows) >= 20
    for reward, arg, _, default in rows:
        params = inspect.signature(_reward_target(reward).__init__).parameters
        assert arg in params, f"{reward} takes no argument {arg!r}"
        value = params[arg].default
        if isinstance(value, str):
            assert f"`{value}`" in default, (reward, arg, value, default)
        else:
            assert value is None and default.startswith(("none", "the ")), (reward, arg, default)
    from flowrl.reward_models.hps import HPSV2_CHECKPOINTS

    hps = {(r, a): d for r, a, _, d in rows}[("hpsv2", "checkpoint")]
    assert f"`{HPSV2_CHECKPOINTS['v2.1']}`" in hps


def test_the_model_path_checks_say_what_the_guide_quotes(tmp_path, capsys):
    from safetensors.torch import save_file

    from flowrl.pipelines.base import check_model_path
    from flowrl.pipelines.kit.loading import SINGLE_FILE_SUFFIXES

    text = _doc("local-models.md")
    assert set(SINGLE_FILE_SUFFIXES) == {".safetensors", ".ckpt"}
    assert not Path("/models/sd35n").exists()
    assert main(["validate", "model.path=/models/sd35n"]) == 2
    err = capsys.readouterr().err
    assert (
        "`model.path: no such file or folder '/models/sd35n'`" in text
        and "model.path: no such file or folder '/models/sd35n'" in err
    )

    def refused(path: Path, **kw) -> str:
        cfg = resolve_config("tiny-cpu", [f"model.path={path}", *[f"model.{k}={v}" for k, v in kw.items()]]).model
        with pytest.raises(ValueError) as exc:
            check_model_path(cfg)
        return str(exc.value)

    folder = tmp_path / "model"
    folder.mkdir()
    assert "is empty" in refused(folder)
    (folder / "x.txt").write_text("")
    assert "has no model_index.json" in refused(folder)
    (folder / "model_index.json").write_text('{"_class_name": "StableDiffusion3Pipeline", "transformer": ["d", "M"]}')
    assert "lacks transformer/, which its model_index.json lists" in refused(folder)
    (folder / "transformer").mkdir()
    (folder / "transformer" / "config.json").write_text("{}")
    assert "a config.json but no weights" in refused(folder)
    for quoted in (
        "is empty",
        "has no model_index.json",
        "lacks transformer/, which its model_index.json lists",
        "a config.json but no weights",
        "holds no SD3 transformer weights",
    ):
        assert f"`{quoted}`" in text, quoted
    save_file({"something.else": torch.zeros(1)}, tmp_path / "other.safetensors")
    assert "holds no SD3 transformer weights" in refused(tmp_path / "other.safetensors")
    save_file({"joint_blocks.0.x": torch.zeros(1)}, tmp_path / "tuned.safetensors")
    message = refused(tmp_path / "tuned.safetensors")
    quoted = "lacks text_encoder, text_encoder_2, text_encoder_3, vae; set model.config_path"
    assert quoted in message and f"`{quoted} ...`" in text
    cfg = resolve_config(
        "tiny-cpu", [f"model.path={tmp_path / 'tuned.safetensors'}", f"model.config_path={tmp_path / 'nowhere'}"]
    ).model
    with pytest.raises(FileNotFoundError, match="model.config_path: no such file or folder"):
        check_model_path(cfg)


def test_offline_errors_are_the_ones_the_guide_quotes(monkeypatch, capsys):
    from flowrl.commands import error_line
    from flowrl.pipelines.kit.loading import HubUnavailableError
    from flowrl.pipelines.sd3.loading import load_sd3_pipeline
    from flowrl.reward_models import RewardError, build_reward

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    text = _doc("local-models.md")
    (quoted,) = [b.strip() for b in _blocks(text, "") if "not a local folder" in b]
    fake = "nobody/flowrl-docs-no-such-model"
    with pytest.raises(HubUnavailableError) as exc:
        load_sd3_pipeline(fake)
    line = error_line(exc.value).replace(fake, "stabilityai/stable-diffusion-3.5-medium")
    assert re.sub(r"download it first \(.*?\) or", "download it first (...) or", line) == quoted
    with pytest.raises(RewardError) as exc:
        build_reward("pickscore", model="nobody/flowrl-docs-no-pickscore")
    assert re.fullmatch(
        r"pickscore: cannot load the model 'nobody/flowrl-docs-no-pickscore' \(.*\); download it "
        r"first .* or pass a local folder",
        str(exc.value),
    ), exc.value
    assert (
        "`pickscore: cannot load the model 'yuvalkirstain/PickScore_v1' (...); download it first ... or pass\na "
        "local folder`" in text
    )
    pytest.importorskip("open_clip")
    with pytest.raises(RewardError, match="hpsv2: cannot get the checkpoint 'f.pt' from 'nobody/flowrl-docs'"):
        build_reward("hpsv2", checkpoint="nobody/flowrl-docs::f.pt")
    assert "`cannot get the checkpoint ...`" in text
    assert main(["env"]) == 0
    assert "HF_HUB_OFFLINE" in capsys.readouterr().out


def test_the_local_recipe_and_commands_of_the_guide(tmp_path, monkeypatch, capsys):
    from flowrl.reward_models import check_reward_args

    text = _doc("local-models.md")
    monkeypatch.chdir(tmp_path)
    (block,) = [b for b in _blocks(text, "yaml") if b.startswith("# sd35m-pickscore-local.yaml")]
    Path("sd35m-pickscore-local.yaml").write_text(block)
    cfg = resolve_config("sd35m-pickscore-local.yaml")
    assert cfg.model.path == "/models/sd35m" and cfg.reward == {"pickscore": 1.0}
    assert cfg.reward_args["pickscore"] == {
        "model": "/models/PickScore_v1",
        "processor": "/models/CLIP-ViT-H-14-laion2B-s32B-b79K",
    }
    check_reward_args("pickscore", cfg.reward_args["pickscore"])
    assert cfg.train == resolve_config("sd35m-pickscore").train
    commands = _commands(text)
    assert len(commands) >= 5
    for argv in commands:
        args = _parsed(argv)
        if args.command in ("train", "validate"):
            resolve_config(args.recipe, args.overrides)
        if args.command == "rewards":
            check_reward_args(args.name, dict(a.split("=", 1) for a in args.kwargs))
    # validate checks the local model.path: here it does not exist, so the one line names it
    assert main(["validate", "sd35m-pickscore-local.yaml"]) == 2
    assert "model.path: no such file or folder '/models/sd35m'" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------- rewards.md: remote
def _remote_section() -> str:
    return _section(_doc("rewards.md"), "## Remote scoring")


def test_the_remote_table_is_the_remote_reward_s_signature():
    from flowrl.reward_models.remote import TOKEN_ENV, RemoteReward

    rows = {}
    for line in _remote_section().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells[1]
    params = dict(inspect.signature(RemoteReward.__init__).parameters)
    params.pop("self")
    assert set(rows) == set(params), set(rows) ^ set(params)
    assert "headers" not in params
    for key, default in rows.items():
        value = params[key].default
        if value is inspect.Parameter.empty:
            assert default == "required", key
        elif key == "token":
            assert value is None and default == f"`${TOKEN_ENV}`"
        else:
            written = yaml.safe_load(default.strip("`"))
            assert written == value and type(written) is type(value), (key, written, value)
    # the worst wait the section quotes: (1 + retries) x timeout plus the backoff pauses
    r, t, b = params["retries"].default, params["timeout"].default, params["backoff"].default
    assert "(487 s with the\ndefaults)" in _remote_section()
    assert (1 + r) * t + sum(b * 2**k for k in range(r)) == 487


def test_the_remote_examples_resolve_and_redact_the_token(tmp_path, monkeypatch):
    from flowrl.preflight import logged_metric_names
    from flowrl.reward_models import check_reward_args

    text = _remote_section()
    commands = _commands(text)
    serve = [_parsed(a) for a in commands if a[0] == "serve-reward"]
    assert serve and serve[0].name == "pickscore" and serve[0].port == 18085
    check_reward_args("pickscore", dict(a.split("=", 1) for a in serve[0].kwargs))
    train = [_parsed(a) for a in commands if a[0] == "train"]
    cfg = resolve_config(train[0].recipe, train[0].overrides)
    assert cfg.reward == {"remote": 1.0} and cfg.reward_args["remote"]["url"] == "http://127.0.0.1:18085"
    check_reward_args("remote", cfg.reward_args["remote"])
    assert "reward/remote/mean" in logged_metric_names(cfg) and "`reward/remote/mean`" in text
    (block,) = list(_blocks(text, "yaml"))
    monkeypatch.chdir(tmp_path)
    Path("remote.yaml").write_text("base: tiny-cpu\n" + block)
    args = resolve_config("remote.yaml").reward_args["remote"]
    check_reward_args("remote", args)
    assert args == {"url": "http://10.0.0.5:18085", "timeout": 60.0, "retries": 5, "batch_size": 32}
    secret = resolve_config(
        "tiny-cpu",
        ["reward={remote: 1.0}", "reward_args.remote.url=http://127.0.0.1:1", "reward_args.remote.token=s3cret"],
    )
    dumped = dump_config(secret)
    assert "s3cret" not in dumped and "<redacted>" in dumped


def test_a_served_reward_scores_as_the_local_one_and_a_dead_server_is_one_error():
    from flowrl.reward_models import RewardError, build_reward
    from flowrl.reward_models.server import RewardService, make_server

    local = build_reward("jpeg_compressibility")
    server = make_server(RewardService("jpeg_compressibility", local, token="s3cret"), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        images = torch.rand(3, 3, 16, 16, generator=torch.Generator().manual_seed(0))
        prompts = ["a", "b", "c"]
        remote = build_reward("remote", url=url, token="s3cret", batch_size=2)
        want = local(images, prompts, [{}] * 3).scores
        assert torch.equal(remote(images, prompts, [{}] * 3).scores, want)
        with pytest.raises(RewardError, match="HTTP 401"):  # a 4xx is not retried
            build_reward("remote", url=url, token="wrong", retries=5, backoff=5.0)(images, prompts, [{}] * 3)
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(RewardError, match=r"failed after 2 attempts .*is the server running"):
        build_reward("remote", url=url, timeout=1.0, retries=1, backoff=0.0)(images, prompts, [{}] * 3)
    assert math.isfinite(float(want.sum()))

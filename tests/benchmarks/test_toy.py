"""Toy GenEval: the world, its exact detector on GenEval's rules, the reward, a tiny pretrain, a short RL run."""

import json
import random
import subprocess
import sys
from importlib import resources

import numpy as np
import pytest
import torch

from flowrl.benchmarks.geneval.constants import TASKS
from flowrl.benchmarks.toy import world
from flowrl.benchmarks.toy.detect import judge_images
from flowrl.benchmarks.toy.world import PlacedObject, draw, render

# Hand-made rows, one per task, GenEval's format.
ROWS = {
    "single_object": {"tag": "single_object", "include": [{"class": "triangle", "count": 1}],
                      "prompt": "a photo of a triangle"},
    "two_object": {"tag": "two_object", "include": [{"class": "circle", "count": 1}, {"class": "square", "count": 1}],
                   "prompt": "a photo of a circle and a square"},
    "counting": {"tag": "counting", "include": [{"class": "circle", "count": 3}],
                 "exclude": [{"class": "circle", "count": 4}], "prompt": "a photo of three circles"},
    "colors": {"tag": "colors", "include": [{"class": "square", "count": 1, "color": "red"}],
               "prompt": "a photo of a red square"},
    "position": {"tag": "position", "include": [{"class": "square", "count": 1},
                                                {"class": "circle", "count": 1, "position": ["left of", 0]}],
                 "prompt": "a photo of a circle left of a square"},
    "color_attr": {"tag": "color_attr", "include": [{"class": "circle", "count": 1, "color": "blue"},
                                                    {"class": "triangle", "count": 1, "color": "yellow"}],
                   "prompt": "a photo of a blue circle and a yellow triangle"},
}  # fmt: skip

# For each task an image that breaks its row (drawn by hand), and the official rule's reason.
WRONG = {
    "single_object": [PlacedObject("square", "red", (4, 4, 16, 16))],  # a square, not a triangle
    "two_object": [PlacedObject("circle", "red", (4, 4, 16, 16)), PlacedObject("circle", "blue", (20, 4, 28, 12))],
    "counting": [PlacedObject("circle", c, (x, 4, x + 6, 10)) for c, x in zip(world.COLORS, (1, 9, 17, 25))],  # 4
    "colors": [PlacedObject("square", "blue", (8, 8, 20, 20))],  # blue, not red
    "position": [PlacedObject("circle", "red", (20, 8, 28, 16)), PlacedObject("square", "red", (4, 8, 12, 16))],
    "color_attr": [PlacedObject("circle", "yellow", (4, 4, 16, 16)), PlacedObject("triangle", "blue", (18, 18, 30, 30))],
}  # fmt: skip


@pytest.mark.parametrize("tag", TASKS)
def test_detector_is_exact_on_clean_renders_of_each_task(tag):
    rng = random.Random(0)
    images = np.stack([render(ROWS[tag], rng) for _ in range(20)])
    for j in judge_images(images, [ROWS[tag]] * 20):
        assert j.correct and j.strict and j.partial == 1.0, j.reasons


@pytest.mark.parametrize("tag", TASKS)
def test_a_wrong_render_is_judged_incorrect(tag):
    (j,) = judge_images(draw(WRONG[tag])[None], [ROWS[tag]])
    assert not j.correct and not j.strict and j.partial < 1.0
    assert j.reasons


def test_every_prompt_of_the_world_renders_and_is_judged_correct():
    rows = [r for task in world.all_rows().values() for r in task]
    assert len(rows) == 3 + 6 + 9 + 15 + 24 + 120
    images = world.render_batch(rows, seed=1)
    assert all(j.correct and j.strict for j in judge_images(images, rows))


def test_detections_carry_exact_boxes_colours_and_scores():
    from flowrl.benchmarks.toy.detect import ToyDetector

    objects = [PlacedObject("triangle", "green", (4, 8, 16, 20)), PlacedObject("circle", "white", (20, 20, 28, 28))]
    (dets,) = ToyDetector()(draw(objects)[None])
    assert sorted(dets) == ["circle", "triangle"]
    assert dets["triangle"].boxes.tolist() == [[4, 8, 16, 20]] and dets["triangle"].colors == ["green"]
    assert dets["circle"].scores.tolist() == [1.0] and dets["circle"].colors == ["white"]


def test_splits_are_disjoint_and_cover_every_task_and_shipped_files_match():
    split = world.split_rows(0)
    for tag in TASKS:
        train = {r["prompt"] for r in split.train[tag]}
        held = {r["prompt"] for r in split.heldout[tag]}
        assert train and held and not train & held
        assert train | held == {r["prompt"] for r in world.task_rows(tag)}
    folder = resources.files("flowrl") / "prompts"
    shipped = {
        n: [json.loads(x) for x in (folder / f"toy_{n}.jsonl").read_text().splitlines()] for n in ("train", "eval")
    }
    assert shipped["train"] == world.balanced_rows(split.train, 80)
    assert shipped["eval"] == world.balanced_rows(split.heldout, 16)
    from flowrl.pipelines.kit.tiny import make_word_tokenizer

    tok = make_word_tokenizer(12, list(world.WORDS))
    for row in shipped["train"] + shipped["eval"]:
        ids = tok(row["prompt"]).input_ids
        assert len(ids) <= 12 and 1 not in ids, row["prompt"]  # fits, and no [UNK]


def test_reward_scores_partial_credit_and_official_accuracy():
    from flowrl.reward_models import build_reward

    rows = [ROWS["counting"], ROWS["colors"]]
    good = torch.from_numpy(world.render_batch(rows, seed=0)).permute(0, 3, 1, 2).float() / 255
    blank = torch.zeros_like(good)
    meta = [{k: v for k, v in r.items() if k != "prompt"} for r in rows]
    prompts = [r["prompt"] for r in rows]
    partial, official = build_reward("toy_geneval"), build_reward("toy_geneval_accuracy")
    assert partial(good, prompts, meta).scores.tolist() == [1.0, 1.0]
    assert official(blank, prompts, meta).scores.tolist() == [0.0, 0.0]
    two = draw([PlacedObject("circle", "red", (2, 2, 10, 10)), PlacedObject("circle", "red", (20, 20, 28, 28))])
    out = partial(torch.from_numpy(two[None]).permute(0, 3, 1, 2).float() / 255, prompts[:1], meta[:1])
    assert out.scores.tolist() == pytest.approx([2 / 3])  # two of three circles: 1 - |3 - 2| / 3
    with pytest.raises(ValueError, match="no toy clauses"):
        partial(good, prompts, [{}, {}])


def test_identity_vae_reconstructs_renders():
    from flowrl.benchmarks.toy.pretrain import identity_vae, vae_error

    images = world.render_batch([ROWS[t] for t in TASKS], seed=3)
    assert vae_error(identity_vae(), images) < 1e-3


# ---------------------------------------------------------------------------------------- pretrain and RL

TINY = {"steps": 3, "batch_size": 4, "layers": 1, "heads": 1, "head_dim": 16, "text_size": "tiny", "warmup": 1}


@pytest.fixture(scope="module")
def toy_model(tmp_path_factory):
    from flowrl.benchmarks.toy.pretrain import ToyModelConfig, pretrain

    root = tmp_path_factory.mktemp("toy-cache")
    folder = pretrain(ToyModelConfig(**TINY), root=root)
    return folder


def test_tiny_pretrain_writes_a_loadable_pipeline_and_is_reused(toy_model):
    from flowrl.benchmarks.toy.pretrain import ToyModelConfig, load_pipeline, pretrain, read_info

    info = read_info(toy_model)
    assert info["config"]["steps"] == 3 and info["vae_max_error"] < 1e-3
    pipe = load_pipeline(toy_model)
    assert type(pipe).__name__ == "StableDiffusion3Pipeline"
    assert pipe.tokenizer("a photo of three triangles").input_ids.count(1) == 0  # every toy word is known
    mtime = (toy_model / "toy_pretrain.json").stat().st_mtime
    assert pretrain(ToyModelConfig(**TINY), root=toy_model.parent) == toy_model
    assert (toy_model / "toy_pretrain.json").stat().st_mtime == mtime


def test_short_rl_run_completes_and_evaluates(toy_model, tmp_path):
    from flowrl.resolve import resolve_config
    from flowrl.trainer import Trainer

    cfg = resolve_config("toy-flow-grpo", [
        f"output_dir={tmp_path}", f"model.path={toy_model}", "train.iterations=2", "sample.num_steps=3",
        "sample.eval_num_steps=3", "method.options.window_range=[0,3]", "sample.group_size=2",
        "sample.prompts_per_iteration=2", "sample.batch_size=4",
        "log.eval_every=1", "log.eval_num_prompts=6",
    ])  # fmt: skip
    history = Trainer(cfg).train()
    assert [h["iteration"] for h in history] == [0, 1, 2]
    assert all("reward/toy_geneval/mean" in h for h in history[:2])
    assert all(0 <= h["eval/reward/toy_geneval_accuracy/mean"] <= 1 for h in history)
    assert (tmp_path / "lora" / "pytorch_lora_weights.safetensors").is_file()

    from flowrl.benchmarks.toy.cli import main

    assert main(["--run", str(tmp_path), "--images-per-task", "1", "--steps", "2", "--out", str(tmp_path / "e")]) == 0
    report = json.loads((tmp_path / "e" / "toy_eval.json").read_text())
    assert set(report) >= {"base", "trained", "gain"} and report["base"]["images"] == 6


def test_compare_writes_a_table_and_a_plot(toy_model, tmp_path):
    from flowrl.benchmarks.toy.compare import main

    out = tmp_path / "cmp"
    small = ["sample.num_steps=3", "sample.eval_num_steps=3", "method.options.window_range=[0,3]", "sample.group_size=2",
             "sample.prompts_per_iteration=2",
             "sample.batch_size=4", "log.eval_every=1", "log.eval_num_prompts=6"]  # fmt: skip
    assert main(["--out", str(out), "--model", str(toy_model), "--iterations", "1", "--only", "flow_grpo",
                 "--images-per-task", "1", *small]) == 0  # fmt: skip
    results = json.loads((out / "compare.json").read_text())
    assert [r["name"] for r in results] == ["flow_grpo"] and results[0]["iterations"] == 1
    assert results[0]["curves"]["eval_iteration"] == [0, 1]
    table = (out / "compare.md").read_text()
    assert "| flow_grpo | 1 x 4 |" in table
    assert (out / "compare.png").stat().st_size > 1000
    # a second call with the same settings reuses the finished run instead of training again
    mtime = (out / "flow_grpo" / "metrics.jsonl").stat().st_mtime
    assert main(["--out", str(out), "--model", str(toy_model), "--iterations", "1", "--only", "flow_grpo",
                 "--images-per-task", "1", *small]) == 0  # fmt: skip
    assert (out / "flow_grpo" / "metrics.jsonl").stat().st_mtime == mtime


def test_missing_model_fails_with_a_line_naming_the_pretrain_command(tmp_path, monkeypatch, capsys):
    from flowrl.benchmarks.toy.cli import main

    monkeypatch.setenv("FLOWRL_CACHE", str(tmp_path))
    assert main(["--run", str(tmp_path)]) == 2
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text("model:\n  path: ~/.cache/flowrl/toy/nowhere\n")
    assert main(["--run", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "flowrl eval toy --pretrain" in err[-1]


def test_recipe_validates_and_help_works():
    from flowrl.resolve import resolve_config

    cfg = resolve_config("toy-flow-grpo", [])
    assert cfg.reward == {"toy_geneval": 1.0} and cfg.eval_reward == {"toy_geneval_accuracy": 1.0}
    cmd = [sys.executable, "-m", "flowrl.benchmarks.toy", "--help"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert out.returncode == 0 and "--pretrain" in out.stdout


def test_each_methods_toy_recipe_is_what_the_comparison_runs():
    """toy-<method>.yaml (for ``flowrl eval toy toy-<method>``) resolves to the comparison's run of that
    method: toy-flow-grpo with ``method.name`` and ``METHOD_SETTINGS`` (output_dir aside)."""
    from flowrl.benchmarks.toy.compare import METHOD_SETTINGS, NO_TOY_RUN, RECIPE
    from flowrl.config import recipe_names
    from flowrl.methods import list_methods
    from flowrl.resolve import resolve_config

    for method in list_methods("image"):
        if method == "flow_grpo" or method in NO_TOY_RUN:
            continue
        name = f"toy-{method.replace('_', '-')}"
        assert name in recipe_names(), name
        recipe = resolve_config(name, ["output_dir=x"]).to_dict()
        compared = resolve_config(
            RECIPE, [f"method.name={method}", *METHOD_SETTINGS.get(method, []), "output_dir=x"]
        ).to_dict()
        assert recipe == compared, method


def test_steps_images_and_time_to_reach_a_target():
    """The comparison's cost-to-target: spent before the first evaluation at or above the target."""
    from flowrl.benchmarks.toy.compare import ACCURACY, curves, to_reach

    rows = [{"iteration": 0, ACCURACY: 0.2}]
    for i in range(4):
        rows.append(
            {
                "iteration": i,
                "reward/mean": 0.1,
                "timing_s/iteration": 10.0,
                "cost/reward_calls": 128.0,
                **({"cost/optimizer_steps": 2.0} if i else {}),
            }
        )
        if i % 2 == 1:
            rows.append({"iteration": i + 1, ACCURACY: 0.3 + 0.1 * i})
    c = curves(rows, steps_per_iteration=5.0)
    assert c["eval_iteration"] == [0, 2, 4] and c["accuracy"] == pytest.approx([0.2, 0.4, 0.6])
    assert c["eval_steps"] == [0.0, 7.0, 11.0] and c["eval_images"] == [0.0, 256.0, 512.0]
    assert to_reach(c, 0.5) == {
        "iteration": 4,
        "steps": 11.0,
        "images": 512.0,
        "time_s": 40.0,
        "accuracy": pytest.approx(0.6),
    }
    assert to_reach(c, 0.7) is None

"""``flowrl eval checkpoint`` offline on a CPU: a tiny SD3 base and one tiny LoRA written in each tool's own layout
(flow_grpo's and DiffusionNFT's PEFT folders, Flow-Factory's checkpoint and bare file, diffusers'
pytorch_lora_weights.safetensors, a flowrl run's export), drawn and scored with tiny scorers; every format gives
the same images; another family's LoRA is refused in one line."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from flowrl.benchmarks.checkpoint_eval.lora import check_fits, checkpoint_lora, read_lora

RANK, ALPHA = 4, 8
TARGETS = ["attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0"]
TINY = ["model.resolution=32", "model.max_sequence_length=16"]  # over the preset's 512 px and 256 tokens
FAST = ["--steps", "2", "--limit", "1", "--images-per-prompt", "1", *TINY]


def _tiny_transformer(recipe: str = "tiny-cpu"):
    from flowrl.benchmarks.generation import load_config
    from flowrl.pipelines.base import adapter_class

    cfg, _ = load_config(recipe, TINY if recipe == "tiny-cpu" else [])
    return adapter_class(cfg.model.pipeline).from_config(cfg.model, seed=cfg.seed).transformer


def _peft_model(transformer, targets=TARGETS, seed=1):
    """The transformer wrapped as flow_grpo and DiffusionNFT wrap it (get_peft_model), lora_B non-zero."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=RANK, lora_alpha=ALPHA, init_lora_weights="gaussian", target_modules=targets)
    model = get_peft_model(transformer, config)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return model, config


@pytest.fixture(scope="module")
def formats(tmp_path_factory):
    """The same LoRA in each tool's layout: {format: path given to --lora}."""
    from diffusers import StableDiffusion3Pipeline
    from peft.utils import get_peft_model_state_dict
    from safetensors.torch import save_file

    root = tmp_path_factory.mktemp("loras")
    model, config = _peft_model(_tiny_transformer())
    out = {}
    # flow_grpo scripts/train_sd3.py save_ckpt: PeftModel.save_pretrained(<logdir>/checkpoints/checkpoint-N/lora)
    model.save_pretrained(root / "flow_grpo" / "checkpoints" / "checkpoint-60" / "lora")
    out["flow_grpo"] = root / "flow_grpo" / "checkpoints" / "checkpoint-60"
    # Flow-Factory save_checkpoint with several target components: <checkpoint>/transformer/ (a PEFT folder)
    model.save_pretrained(root / "flow_factory" / "checkpoint-3" / "transformer")
    out["flow_factory"] = root / "flow_factory" / "checkpoint-3"
    state = get_peft_model_state_dict(model)  # base_model.model.<module>.lora_A.weight
    # Flow-Factory's legacy bare file: <module>.lora_A.weight, no config (alpha read as the rank: given in metadata)
    bare = {k.removeprefix("base_model.model."): v.contiguous() for k, v in state.items()}
    save_file(bare, root / "bare.safetensors", metadata={"lora_adapter_metadata": json.dumps({"lora_alpha": ALPHA})})
    out["flow_factory_bare"] = root / "bare.safetensors"
    # diffusers: save_lora_weights writes transformer.<module>.lora_A.weight and the LoraConfig in the header
    StableDiffusion3Pipeline.save_lora_weights(
        str(root / "diffusers"),
        transformer_lora_layers=bare,
        transformer_lora_adapter_metadata={"r": RANK, "lora_alpha": ALPHA, "target_modules": TARGETS},
    )
    out["diffusers"] = root / "diffusers" / "pytorch_lora_weights.safetensors"
    # DiffusionNFT scripts/train_nft_sd3.py: a second adapter "old" beside "default", saved into lora/old/
    model.add_adapter("old", config)
    model.save_pretrained(root / "nft" / "lora")
    out["diffusion_nft"] = root / "nft" / "lora"
    return out


def test_each_format_is_detected_and_read_alike(formats):
    read = {name: read_lora(path) for name, path in formats.items()}
    assert {n: r.format for n, r in read.items()} == {
        "flow_grpo": "peft",
        "flow_factory": "flow_factory",
        "flow_factory_bare": "flow_factory",
        "diffusers": "diffusers",
        "diffusion_nft": "peft",
    }
    assert read["diffusion_nft"].tool == "DiffusionNFT PEFT folder" and "old/" in read["diffusion_nft"].notes[0]
    reference = read["flow_grpo"]
    assert reference.config["r"] == RANK and reference.config["lora_alpha"] == ALPHA
    assert reference.modules[0] == "transformer_blocks.0.attn.to_k" and len(reference.modules) == 8  # 2 blocks x 4
    for name, lora in read.items():
        assert lora.config["lora_alpha"] == ALPHA and lora.config["r"] == RANK, name
        assert set(lora.tensors) == set(reference.tensors), name
        assert all(torch.equal(lora.tensors[k], reference.tensors[k]) for k in reference.tensors), name


def test_a_flowrl_checkpoint_reads_its_peft_parameter_names(tmp_path, formats):
    from types import SimpleNamespace

    from safetensors.torch import save_file

    reference = read_lora(formats["flow_grpo"])
    named = {k.replace(".weight", ".default.weight"): v for k, v in reference.tensors.items()}  # peft parameter names
    save_file(named, tmp_path / "trainable.safetensors")
    lora = checkpoint_lora(tmp_path, SimpleNamespace(rank=RANK, alpha=ALPHA))
    assert lora.format == "flowrl" and set(lora.tensors) == set(reference.tensors)


def test_another_familys_lora_is_refused_in_one_line(tmp_path):
    flux_model, _ = _peft_model(_tiny_transformer("tiny-flux"), targets=["attn.to_q", "attn.to_k"])
    flux_model.save_pretrained(tmp_path / "flux_lora")
    with pytest.raises(ValueError) as info:
        check_fits(read_lora(tmp_path / "flux_lora"), _tiny_transformer(), "sd3")
    message = str(info.value)
    assert "\n" not in message and str(tmp_path / "flux_lora" / "adapter_model.safetensors") in message
    assert (
        "another model (FLUX (FluxTransformer2DModel))" in message and "SD3Transformer2DModel (family sd3)" in message
    )
    # the same module names with other shapes (a wider model of the family): both shapes named
    wide = read_lora(_sd3_lora(tmp_path))
    wide.tensors["transformer_blocks.0.attn.to_q.lora_A.weight"] = torch.zeros(RANK, 48)
    with pytest.raises(ValueError, match=r"has lora_A \(4, 48\), lora_B \(\d+, 4\), but .* has Linear\(\d+ -> \d+\)"):
        check_fits(wide, _tiny_transformer(), "sd3")


def _sd3_lora(tmp_path: Path) -> Path:
    model, _ = _peft_model(_tiny_transformer())
    model.save_pretrained(tmp_path / "sd3_lora")
    return tmp_path / "sd3_lora"


def test_a_hub_lora_offline_and_not_cached_is_one_line():
    with pytest.raises(FileNotFoundError) as info:
        read_lora("nobody/no-such-lora")
    message = str(info.value)
    assert message.startswith("--lora 'nobody/no-such-lora': no such file or folder here, and its hub repository")
    assert "\n" not in message


def test_unknown_layouts_are_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no LoRA found"):
        read_lora(tmp_path / "empty")
    from safetensors.torch import save_file

    save_file({"lora_unet_down.lora_down.weight": torch.zeros(2, 2)}, tmp_path / "kohya.safetensors")
    with pytest.raises(ValueError, match="kohya-style"):
        read_lora(tmp_path / "kohya.safetensors")


# ------------------------------------------------------------------------------------------- the command


@pytest.fixture(scope="module")
def setup(tmp_path_factory, formats):
    """Prompt files (two OCR and DrawBench rows each), the tiny scorers and the loopback UnifiedReward judge."""
    from _loopback import serve
    from tiny_scorers import FinalScoreJudge, tiny_scorer_options

    root = tmp_path_factory.mktemp("eval")
    (root / "data" / "ocr").mkdir(parents=True)
    (root / "data" / "ocr" / "test.txt").write_text('A sign that says "Hello"\nA mug reading "Tea"\n')
    # DrawBench's prompts inside a checkout laid out as DiffusionNFT's, whose flow_grpo/rewards.py holds the judge text
    checkout = root / "nft"
    (checkout / "dataset" / "drawbench").mkdir(parents=True)
    (checkout / "dataset" / "drawbench" / "test.txt").write_text("A red cube on a mat.\nA red cube on a mat.\nA cat.\n")
    (checkout / "flow_grpo").mkdir()
    (checkout / "flow_grpo" / "rewards.py").write_text(
        "def unifiedreward_score_sglang(device):\n"
        "    async def evaluate_image(prompt, image):\n"
        '        question = f"<image>\\nRate {{this}} caption: [{prompt}] after Final Score:"\n'
        "        return question\n"
    )
    prompts = ["--prompts", f"ocr={root / 'data'}", "--prompts", f"drawbench={checkout}"]
    with serve(FinalScoreJudge) as url:
        yield {"root": root, "args": [*prompts, *tiny_scorer_options(root / "scorers", url)]}


def _eval(setup, out: Path, *args: str) -> int:
    from flowrl.benchmarks.cli import main

    return main(["eval", "checkpoint", "--base", "tiny-cpu", "--out", str(out), *setup["args"], *FAST, *args])


def _pixels(path: Path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB"))


def test_one_command_scores_base_and_checkpoint_on_every_benchmark(setup, formats, capsys):
    from tiny_scorers import FinalScoreJudge

    out = setup["root"] / "flow_grpo"
    assert _eval(setup, out, "--lora", str(formats["flow_grpo"]), "--benchmarks", "geneval,ocr,drawbench") == 0
    printed = capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    assert list(results["benchmarks"]) == ["geneval", "ocr", "drawbench"]
    drawbench = results["benchmarks"]["drawbench"]
    assert list(drawbench["metrics"]) == [
        "pickscore",
        "clipscore",
        "hpsv2.1",
        "aesthetic",
        "imagereward",
        "unifiedreward",
    ]
    # the judge always replies "Final Score: 4": flow_grpo's parse gives 4 / 5, the table prints the 1-5 score
    assert drawbench["metrics"]["unifiedreward"] == pytest.approx({"base": 4.0, "checkpoint": 4.0, "delta": 0.0})
    assert "| unifiedreward | 4.0000 | 4.0000 | +0.0000 |" in printed and "| geneval |" in printed
    # the judge was asked the checkout's question (read from its rewards.py, braces kept, the prompt filled in)
    assert "<image>\nRate {this} caption: [A red cube on a mat.] after Final Score:" in FinalScoreJudge.texts
    assert "rewards.py (evaluate_image's question)" in drawbench["notes"]["unifiedreward_template"]
    assert set(results["benchmarks"]["geneval"]["metrics"]) == {"geneval", "geneval/images", "geneval/single_object"}
    assert "(not the published file)" in drawbench["notes"]["prompts"]
    assert 0.0 <= results["benchmarks"]["ocr"]["metrics"]["ocr"]["base"] <= 1.0
    s = drawbench["settings"]
    assert (s["steps"], s["guidance_scale"], s["height"], s["images_per_prompt"]) == (2, 1.0, 32, 1)  # preset's CFG 1
    record = json.loads((out / "checkpoint" / "drawbench" / "images" / "generation.json").read_text())
    assert record["model"]["trained_weights_file"].endswith("adapter_model.safetensors") and record["complete"]
    base_img = _pixels(out / "base" / "drawbench" / "images" / "00000_0.png")
    ckpt_img = _pixels(out / "checkpoint" / "drawbench" / "images" / "00000_0.png")
    assert base_img.shape == (32, 32, 3) and not np.array_equal(base_img, ckpt_img)  # the LoRA changes the image
    page = (out / "report.html").read_text()
    assert page.count("<img") == 6 and "A red cube on a mat." in page and "unifiedreward" in page
    # again: nothing is drawn or scored a second time, the table is the same
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*.png")}
    metrics_files = {p: p.read_text() for p in out.rglob("metrics.json")}
    assert _eval(setup, out, "--lora", str(formats["flow_grpo"]), "--benchmarks", "geneval,ocr,drawbench") == 0
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.png")} == stamps
    assert {p: p.read_text() for p in out.rglob("metrics.json")} == metrics_files
    assert json.loads((out / "results.json").read_text())["benchmarks"] == results["benchmarks"]
    # one more prompt: only its images are drawn, and the folders are scored again on both prompts
    assert _eval(setup, out, "--lora", str(formats["flow_grpo"]), "--benchmarks", "geneval,ocr,drawbench",
                 "--limit", "2") == 0  # fmt: skip
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())
    again = json.loads((out / "results.json").read_text())["benchmarks"]
    assert [b["prompts"] for b in again.values()] == [2, 2, 2]
    assert len((out / "base" / "drawbench" / "scores" / "scores.jsonl").read_text().splitlines()) == 2


def _flowrl_run(root: Path, formats) -> Path:
    """A flowrl run folder as training leaves it: config.yaml and the LoRA export lora/ (diffusers layout)."""
    import yaml

    run = root / "run"
    (run / "lora").mkdir(parents=True)
    shutil.copy(formats["diffusers"], run / "lora" / "pytorch_lora_weights.safetensors")
    config = {"model": {"pipeline": "sd3", "path": "tiny", "tiny_size": "tiny", "resolution": 32,
                        "max_sequence_length": 16}, "seed": 42,
              "train": {"lora": {"rank": RANK, "alpha": ALPHA, "target_modules": TARGETS}}}  # fmt: skip
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    return run


@pytest.mark.parametrize("fmt", ["diffusion_nft", "flow_factory", "flow_factory_bare", "diffusers", "flowrl_run"])
def test_every_format_draws_the_same_images(setup, formats, fmt):
    reference = setup["root"] / "flow_grpo" / "checkpoint" / "drawbench" / "images" / "00000_0.png"
    if not reference.is_file():
        pytest.skip("needs test_one_command_scores_base_and_checkpoint_on_every_benchmark first")
    out = setup["root"] / fmt
    given = (
        ["--run", str(_flowrl_run(setup["root"], formats))] if fmt == "flowrl_run" else ["--lora", str(formats[fmt])]
    )
    assert _eval(setup, out, *given, "--benchmarks", "drawbench", "--metrics", "pickscore") == 0
    assert np.array_equal(_pixels(out / "checkpoint" / "drawbench" / "images" / "00000_0.png"), _pixels(reference))
    scores = [
        json.loads((root / "checkpoint" / "drawbench" / "scores" / "scores.jsonl").read_text().splitlines()[0])
        for root in (out, setup["root"] / "flow_grpo")
    ]
    assert scores[0]["file"] == scores[1]["file"] == "00000_0.png"
    assert scores[0]["pickscore"] == pytest.approx(scores[1]["pickscore"], abs=1e-5)  # scored in a batch of 1, of 2
    assert (out / "report.html").is_file() and (out / "results.md").is_file()


def test_the_command_refuses_another_familys_lora_before_drawing(setup, tmp_path, capsys):
    flux_model, _ = _peft_model(_tiny_transformer("tiny-flux"), targets=["attn.to_q", "attn.to_k"])
    flux_model.save_pretrained(tmp_path / "flux_lora")
    out = tmp_path / "out"
    assert _eval(setup, out, "--lora", str(tmp_path / "flux_lora"), "--benchmarks", "drawbench") == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("flowrl: error: --lora ") and "flux_lora/adapter_model.safetensors" in err
    assert "another model (FLUX (FluxTransformer2DModel))" in err and "family sd3" in err
    assert not (out / "checkpoint").exists() and not (out / "base").exists()  # refused before any image


def test_help_and_bad_arguments_are_one_line(capsys):
    from flowrl.benchmarks.cli import main

    assert main(["eval", "checkpoint", "--base", "tiny-cpu", "--out", "x", "--benchmarks", "nope", "--lora", "y"]) == 2
    assert "unknown benchmark 'nope'; choose from geneval, ocr, drawbench" in capsys.readouterr().err
    assert main(["eval", "checkpoint", "--base", "tiny-cpu", "--out", "x", "--benchmarks", "ocr"]) == 2
    assert "give the checkpoint: --lora PATH" in capsys.readouterr().err
    assert main(["eval", "checkpoint", "--base", "tiny-cpu", "--out", "x", "--benchmarks", "ocr", "--lora", "y",
                 "--preset", "nope"]) == 2  # fmt: skip
    assert "--preset 'nope': choose one of diffusion_nft, flow_grpo" in capsys.readouterr().err


def test_a_missing_prompt_file_names_where_it_comes_from(tmp_path, monkeypatch, capsys, formats):
    from flowrl.benchmarks.cli import main

    monkeypatch.delenv("FLOWRL_EVAL_DATA", raising=False)
    argv = ["eval", "checkpoint", "--base", "tiny-cpu", "--out", str(tmp_path), "--benchmarks", "drawbench",
            "--lora", str(formats["diffusers"])]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "drawbench: its prompts are not shipped with flowrl; give --prompts drawbench=PATH" in err
    assert "NVlabs/DiffusionNFT" in err and not (tmp_path / "base").exists()


def _judged_inputs(setup, tmp_path: Path) -> list[str]:
    """GenEval 2's and DPG-Bench's prompt files (the rows of their own tests) in ``tmp_path`` and the loopback
    judge's options for both."""
    import csv

    from test_dpgbench import QUESTIONS
    from test_geneval2 import ROWS

    from flowrl.benchmarks.dpgbench import scoring as dpg_scoring
    from tiny_vlm import vl_tokenizer

    (tmp_path / "g2.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    with open(tmp_path / "dpg.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(dpg_scoring.COLUMNS)
        for key, qid, dep, tup, question in QUESTIONS:
            writer.writerow([key, f"prompt {key}", "", qid, dep, tup.split(" ")[0], "", tup, question])
    vl_tokenizer().save_pretrained(tmp_path / "tokenizer")
    url = next(a.split("=", 1)[1] for a in setup["args"] if a.startswith("unifiedreward.base_url="))
    judge = [f"geneval2.base_url={url}", "geneval2.model=served", f"geneval2.tokenizer={tmp_path / 'tokenizer'}",
             f"dpg.base_url={url}", "dpg.model=served"]  # fmt: skip
    return judge


def test_geneval2_and_dpg_join_by_module_path(setup, formats, tmp_path):
    """GenEval 2 under UniRL's preset (its seeds and sigma grid) and DPG-Bench (4 images a prompt) through their
    modules' load_items / protocol / score_folder, judged by the loopback endpoint."""

    judge = _judged_inputs(setup, tmp_path)
    from flowrl.benchmarks.cli import main

    out = tmp_path / "out"
    argv = ["eval", "checkpoint", "--base", "tiny-cpu", "--lora", str(formats["diffusers"]), "--out", str(out),
            "--benchmarks", "geneval2,dpg", "--prompts", f"geneval2={tmp_path / 'g2.jsonl'}",
            "--prompts", f"dpg={tmp_path / 'dpg.csv'}", "--steps", "2", *TINY,
            *[x for o in judge for x in ("--option", o)]]  # fmt: skip
    assert main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    g2, dpg = results["benchmarks"]["geneval2"], results["benchmarks"]["dpg"]
    assert g2["preset"] == "unirl" and g2["settings"]["images_per_prompt"] == 1 and g2["prompts"] == 2
    assert (g2["settings"]["steps"], g2["settings"]["guidance_scale"]) == (2, 1.0)  # UniRL's CFG 1, --steps 2
    assert {"soft_tifa_gm", "soft_tifa_am"} <= set(g2["metrics"])
    assert dpg["settings"]["images_per_prompt"] == 4 and "dpg_score" in dpg["metrics"]
    # the judge says yes to everything: item b scores 100 on every crop (item a's parent row is skipped)
    assert dpg["metrics"]["dpg_score"] == {"base": 100.0, "checkpoint": 100.0, "delta": 0.0}
    record = json.loads((out / "checkpoint" / "geneval2" / "images" / "generation.json").read_text())
    assert record["settings"]["height"] == 32 and sorted(
        p.name for p in (out / "base" / "dpg" / "images").glob("*.png")
    ) == [f"{k}_{i}.png" for k in "ab" for i in range(4)]


@pytest.mark.slow
def test_two_processes_share_the_drawing_and_one_scores(setup, formats):
    """Under torchrun (2 CPU processes over gloo) each process draws its prompts; the images equal one process's
    (the same seeds), and the main process alone scores and writes the table."""
    import os
    import subprocess
    import sys

    from _processes import ENV, needs_torchrun, torchrun

    if needs_torchrun.args[0]:
        pytest.skip(needs_torchrun.kwargs["reason"])
    reference = setup["root"] / "flow_grpo" / "checkpoint" / "drawbench" / "images" / "00000_0.png"
    if not reference.is_file():
        pytest.skip("needs test_one_command_scores_base_and_checkpoint_on_every_benchmark first")
    out = setup["root"] / "two"
    fast = ["--steps", "2", "--images-per-prompt", "1", *TINY]
    argv = [*torchrun(29583), "-m", "flowrl", "eval", "checkpoint", "--base", "tiny-cpu", "--lora",
            str(formats["flow_grpo"]), "--out", str(out), "--benchmarks", "drawbench", "--metrics", "pickscore",
            "--limit", "2", *setup["args"], *fast]  # fmt: skip
    env = {**ENV, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("| pickscore |") == 1  # the table, printed once
    images = out / "checkpoint" / "drawbench" / "images"
    assert np.array_equal(_pixels(images / "00000_0.png"), _pixels(reference))
    assert json.loads((images / "generation.json").read_text())["num_processes"] == 2
    assert json.loads((out / "results.json").read_text())["benchmarks"]["drawbench"]["prompts"] == 2


@pytest.fixture(scope="module")
def sd3_folder(tmp_path_factory):
    """The tiny SD3 of tiny-cpu (build seed 42) saved as a diffusers folder, as a hub download is laid out."""
    from flowrl.benchmarks.generation import load_config
    from flowrl.pipelines.base import adapter_class

    cfg, _ = load_config("tiny-cpu", TINY)
    folder = tmp_path_factory.mktemp("sd3") / "tiny-sd3"
    adapter_class("sd3").from_config(cfg.model, seed=cfg.seed).pipe.save_pretrained(folder)
    return folder


def test_a_diffusers_folder_base_checks_the_lora_before_its_weights_load(
    setup, sd3_folder, tmp_path, monkeypatch, capsys
):
    """A folder (or hub id) base: its family read from model_index.json, its transformer built on the meta device
    from config.json; another family's LoRA is refused before the pipeline is built."""
    import yaml

    from flowrl.benchmarks.cli import main
    from flowrl.pipelines.sd3 import SD3Adapter

    flux_model, _ = _peft_model(_tiny_transformer("tiny-flux"), targets=["attn.to_q", "attn.to_k"])
    flux_model.save_pretrained(tmp_path / "flux_lora")

    def no_build(*args, **kwargs):
        raise AssertionError("the base was built before the LoRA was checked")

    monkeypatch.setattr(SD3Adapter, "from_config", classmethod(no_build))
    argv = ["eval", "checkpoint", "--base", str(sd3_folder), "--lora", str(tmp_path / "flux_lora"), "--out",
            str(tmp_path / "out"), "--benchmarks", "drawbench", *setup["args"], *FAST]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "another model (FLUX (FluxTransformer2DModel))" in err and "SD3Transformer2DModel (family sd3)" in err
    written = yaml.safe_load((tmp_path / "out" / "base.yaml").read_text())
    assert written == {"model": {"pipeline": "sd3", "path": str(sd3_folder)}}


def test_a_diffusers_folder_base_draws_what_the_recipe_draws(setup, sd3_folder, formats):
    reference = setup["root"] / "flow_grpo" / "checkpoint" / "drawbench" / "images" / "00000_0.png"
    if not reference.is_file():
        pytest.skip("needs test_one_command_scores_base_and_checkpoint_on_every_benchmark first")
    from flowrl.benchmarks.cli import main

    out = setup["root"] / "folder-base"
    argv = ["eval", "checkpoint", "--base", str(sd3_folder), "--lora", str(formats["flow_grpo"]), "--out", str(out),
            "--benchmarks", "drawbench", "--metrics", "pickscore", *setup["args"], *FAST]  # fmt: skip
    assert main(argv) == 0
    assert np.array_equal(_pixels(out / "checkpoint" / "drawbench" / "images" / "00000_0.png"), _pixels(reference))


def test_an_unreachable_hub_id_is_one_line(tmp_path, formats, capsys):
    from flowrl.benchmarks.cli import main

    argv = ["eval", "checkpoint", "--base", "nobody/no-such-model", "--lora", str(formats["diffusers"]), "--out",
            str(tmp_path), "--benchmarks", "geneval", "--limit", "1"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("flowrl: error: --base 'nobody/no-such-model': cannot read its model_index.json")
    assert "give a local folder or a recipe, or set model.pipeline=FAMILY" in err


def test_a_flowrl_runs_full_fine_tune_is_drawn_with_its_transformer(setup, tmp_path):
    """``--run RUN`` whose export is a fine-tuned ``transformer/`` (no LoRA): the base is the run's config, the
    checkpoint its transformer; the images differ from the base's."""
    import yaml

    from flowrl.benchmarks.cli import main

    run = tmp_path / "run"
    transformer = _tiny_transformer()
    with torch.no_grad():
        transformer.proj_out.weight.mul_(3.0)
    transformer.save_pretrained(run / "transformer")
    config = {"model": {"pipeline": "sd3", "path": "tiny", "tiny_size": "tiny", "resolution": 32,
                        "max_sequence_length": 16}, "seed": 42, "train": {"lora": {"enabled": False}}}  # fmt: skip
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    out = tmp_path / "out"
    argv = ["eval", "checkpoint", "--run", str(run), "--out", str(out), "--benchmarks", "drawbench",
            "--metrics", "pickscore", *setup["args"], *FAST]  # fmt: skip
    assert main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["checkpoint"]["description"] == "flowrl run export, fine-tuned transformer/"
    images = [_pixels(out / m / "drawbench" / "images" / "00000_0.png") for m in ("base", "checkpoint")]
    assert not np.array_equal(*images)
    record = json.loads((out / "checkpoint" / "drawbench" / "images" / "generation.json").read_text())
    assert record["model"]["trained_weights"] == "fine-tuned transformer"


@pytest.mark.slow  # it trains a tiny run first
def test_a_flowrl_checkpoint_and_its_runs_export_draw_the_same_images(setup, tmp_path):
    """A tiny run trained for one iteration: ``--run RUN/checkpoints/iter-000001`` (its trainable.safetensors, peft
    names, rank and alpha from the run's train.lora) and ``--run RUN`` (its lora/ export) draw the same images."""
    from flowrl.benchmarks.cli import main as eval_main
    from flowrl.cli import main

    run = tmp_path / "run"
    train = ["sample.num_steps=2", "sample.group_size=4", "sample.prompts_per_iteration=2", "sample.batch_size=4",
             "train.iterations=1", "log.save_every=1", "log.sample_every=1000", "train.lora.alpha=32"]  # fmt: skip
    assert main(["train", f"output_dir={run}", *train]) == 0
    common = ["--benchmarks", "drawbench", "--metrics", "pickscore", *setup["args"], *FAST]
    checkpoint = run / "checkpoints" / "iter-000001"
    assert eval_main(["eval", "checkpoint", "--run", str(checkpoint), "--out", str(tmp_path / "a"), *common]) == 0
    assert eval_main(["eval", "checkpoint", "--run", str(run), "--out", str(tmp_path / "b"), *common]) == 0
    a, b = (json.loads((tmp_path / k / "results.json").read_text())["checkpoint"] for k in "ab")
    assert a["description"].startswith("flowrl checkpoint (trainable.safetensors)") and a["format"] == "flowrl"
    assert b["description"].startswith("flowrl run export (lora/, diffusers layout)")
    images = [_pixels(tmp_path / k / m / "drawbench" / "images" / "00000_0.png") for k, m in
              (("a", "checkpoint"), ("b", "checkpoint"), ("a", "base"))]  # fmt: skip
    assert np.abs(images[0].astype(int) - images[1]).max() <= 1  # the same weights (PNG rounding at most)
    assert not np.array_equal(images[0], images[2])


def test_protocol_settings_by_preset_and_command_line(tmp_path):
    """The published settings (docs/evaluation.md: DiffusionNFT scripts/evaluation.py, Flow-GRPO config/grpo.py
    and train_sd3.py eval()), a preset for one benchmark, and the command line over both."""
    from flowrl.benchmarks.checkpoint_eval.evaluate import Request, benchmark_settings
    from flowrl.benchmarks.checkpoint_eval.suites import get_suite

    def settings(name, **given):
        return benchmark_settings(Request(out=tmp_path, benchmarks=[name], **given), get_suite(name))

    nft = {"resolution": 512, "steps": 40, "guidance_scale": 1.0, "max_sequence_length": 256, "seed": 42}
    assert settings("geneval") == ({**nft, "images_per_prompt": 4}, "diffusion_nft")
    assert settings("ocr") == ({**nft, "images_per_prompt": 1}, "diffusion_nft")
    assert settings("drawbench") == ({**nft, "images_per_prompt": 5}, "diffusion_nft")
    fg = {**nft, "guidance_scale": 4.5, "max_sequence_length": 128, "images_per_prompt": 5}
    assert settings("drawbench", preset="flow_grpo") == (fg, "flow_grpo")
    assert settings("drawbench", presets={"drawbench": "flow_grpo"}) == (fg, "flow_grpo")
    assert settings("ocr", presets={"drawbench": "flow_grpo"})[1] == "diffusion_nft"
    given = {"steps": 2, "guidance": 3.0, "seed": 7, "images_per_prompt": 2}
    assert settings("drawbench", preset="flow_grpo", **given) == (
        {**fg, "steps": 2, "guidance_scale": 3.0, "seed": 7, "images_per_prompt": 2},
        "flow_grpo",
    )


@pytest.mark.slow  # six formats x five benchmarks, base and checkpoint each
@pytest.mark.parametrize(
    "fmt", ["flow_grpo", "diffusion_nft", "flow_factory", "flow_factory_bare", "diffusers", "flowrl_run"]
)
def test_every_format_on_every_benchmark(setup, formats, fmt, tmp_path):
    """Each LoRA format, in one command, on GenEval, OCR, DrawBench's reward table, GenEval 2 and DPG-Bench: the
    table and the page written, every benchmark with a base and a checkpoint number."""
    from flowrl.benchmarks.cli import main

    judge = _judged_inputs(setup, tmp_path)
    given = ["--run", str(_flowrl_run(tmp_path, formats))] if fmt == "flowrl_run" else ["--lora", str(formats[fmt])]
    out = tmp_path / "out"
    argv = ["eval", "checkpoint", "--base", "tiny-cpu", *given, "--out", str(out), *setup["args"], *FAST,
            "--benchmarks", "geneval,ocr,drawbench,geneval2,dpg", "--limit", "2",  # DPG's first item is skipped
            "--prompts", f"geneval2={tmp_path / 'g2.jsonl'}", "--prompts", f"dpg={tmp_path / 'dpg.csv'}",
            *[x for o in judge for x in ("--option", o)]]  # fmt: skip
    assert main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    assert list(results["benchmarks"]) == ["geneval", "ocr", "drawbench", "geneval2", "dpg"]
    for name, bench in results["benchmarks"].items():
        assert bench["metrics"], name
        assert all({"base", "checkpoint", "delta"} <= set(v) for v in bench["metrics"].values()), name
    table = (out / "results.md").read_text()
    assert all(f"| {m} |" in table for m in ("geneval", "ocr", "pickscore", "soft_tifa_gm", "dpg_score"))
    assert (out / "report.html").is_file()

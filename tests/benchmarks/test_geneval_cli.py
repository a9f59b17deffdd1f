"""``flowrl eval geneval``: prompt file, generation with a run's LoRA in GenEval's layout, scoring from local
model folders, summary; ``flowrl eval`` help. The tiny SD3 (random weights, 32 px) and the tiny
Mask2Former / open_clip stand-ins are real classes built offline."""

from __future__ import annotations

import hashlib
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from PIL import Image

from flowrl.benchmarks.cli import main
from flowrl.benchmarks.geneval.prompts import OFFICIAL_SHA256
from helpers_geneval import TINY_CLIP, register_tiny_clip, save_tiny_clip_weights, save_tiny_detector

ROWS = [
    {"tag": "single_object", "include": [{"class": "dog", "count": 1}], "prompt": "a photo of a dog"},
    {"tag": "colors", "include": [{"class": "dog", "count": 1, "color": "red"}], "prompt": "a photo of a red dog"},
    {
        "tag": "counting",
        "include": [{"class": "dog", "count": 2}],
        "exclude": [{"class": "dog", "count": 3}],
        "prompt": "a photo of two dogs",
    },
]


@pytest.mark.parametrize(
    "command", [["eval"], ["eval", "geneval"], ["eval", "unigenbench"]], ids=["eval", "geneval", "unigenbench"]
)
def test_help(command, capsys):
    with pytest.raises(SystemExit) as info:
        main([*command, "--help"])
    assert info.value.code == 0 and "usage" in capsys.readouterr().out


def test_write_prompts_is_the_official_file(tmp_path, capsys):
    assert main(["eval", "geneval", "--write-prompts", str(tmp_path / "meta.jsonl")]) == 0
    assert hashlib.sha256((tmp_path / "meta.jsonl").read_bytes()).hexdigest() == OFFICIAL_SHA256


def test_write_prompts_never_writes_over_a_file_without_force(tmp_path, capsys):
    meta, txt = tmp_path / "meta.jsonl", tmp_path / "prompts.txt"
    meta.write_text("mine\n")
    assert main(["eval", "geneval", "--write-prompts", str(meta)]) == 2
    assert meta.read_text() == "mine\n" and "--write-prompts" in capsys.readouterr().err
    txt.write_text("mine too\n")  # the second file is checked before the first is written
    assert main(["eval", "geneval", "--write-prompts", str(tmp_path / "new.jsonl"), "--prompts-txt", str(txt)]) == 2
    assert not (tmp_path / "new.jsonl").exists() and txt.read_text() == "mine too\n"
    assert main(["eval", "geneval", "--write-prompts", str(meta), "--prompts-txt", str(txt), "--force"]) == 0
    assert hashlib.sha256(meta.read_bytes()).hexdigest() == OFFICIAL_SHA256 and txt.read_text().count("\n") == 553


def test_one_line_errors(tmp_path, capsys):
    assert main(["eval", "geneval", "--score", str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2
    assert main(["eval", "geneval", "--generate", "tiny-cpu"]) == 2  # no --out
    assert main(["eval", "geneval", "--summary", str(tmp_path), "train.iterations=1"]) == 2  # overrides misplaced
    assert main(["eval", "geneval", "--score", str(tmp_path), "--out", str(tmp_path), "--option", "x=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(line.startswith("flowrl: error: ") for line in err)
    assert "does not exist" in err[0] and "--out" in err[1] and "--generate only" in err[2] and "threshold" in err[3]


# ------------------------------------------------------------------------------------------ generation


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    """A run folder as training leaves it: config.yaml and a non-zero LoRA in diffusers format."""
    from peft import LoraConfig
    from peft.utils import get_peft_model_state_dict

    from flowrl.config import dump_config
    from flowrl.pipelines.sd3 import SD3Adapter
    from flowrl.resolve import resolve_config

    run = tmp_path_factory.mktemp("run")
    cfg = resolve_config("tiny-cpu", [f"output_dir={run}"])
    (run / "config.yaml").write_text(dump_config(cfg))
    adapter = SD3Adapter.from_config(cfg.model, seed=cfg.seed)
    adapter.transformer.add_adapter(LoraConfig(r=4, lora_alpha=4, target_modules=["attn.to_q", "attn.to_v"]))
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in adapter.transformer.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.5)
    (run / "lora").mkdir()
    adapter.save_lora(run / "lora", get_peft_model_state_dict(adapter.transformer))
    return run


@pytest.fixture(scope="module")
def generated(lora_run, tmp_path_factory):
    root = tmp_path_factory.mktemp("geneval")
    (root / "meta.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    out = root / "images"
    argv = ["eval", "geneval", "--generate", str(lora_run), "--out", str(out), "--metadata", str(root / "meta.jsonl")]
    assert main([*argv, "--images-per-prompt", "2", "--steps", "2", "--batch-size", "4"]) == 0
    return out, argv


def test_generate_writes_genevals_layout_and_the_record(generated, lora_run):
    out, _ = generated
    for i, row in enumerate(ROWS):
        folder = out / f"{i:05d}"
        assert json.loads((folder / "metadata.jsonl").read_text()) == row
        names = sorted(p.name for p in (folder / "samples").iterdir())
        assert names == ["00000.png", "00001.png"]
        with Image.open(folder / "samples" / "00000.png") as image:
            assert image.size == (32, 32) and image.mode == "RGB"
    record = json.loads((out / "generation.json").read_text())
    assert record["complete"] and record["images"] == 6 and record["prompts"] == 3
    # guidance: tiny-cpu's sample.guidance_scale, the default of sample.eval_guidance_scale
    expected = {"steps": 2, "guidance_scale": 4.5, "height": 32, "width": 32, "max_sequence_length": 16, "seed": 42}
    assert record["settings"] == {**expected, "images_per_prompt": 2, "negative_prompt": None}
    model = record["model"]
    lora_file = lora_run / "lora" / "pytorch_lora_weights.safetensors"
    assert model["trained_weights"] == "LoRA" and model["path"] == "tiny"
    assert model["trained_weights_sha256"] == hashlib.sha256(lora_file.read_bytes()).hexdigest()
    assert record["versions"]["flowrl"] and record["num_processes"] == 1
    assert record["metadata"]["rows"] == 3 and "seed + i * images_per_prompt + k" in record["seed_rule"]
    assert len(record["seeds"]) == 6 and record["seeds"]["00001/samples/00001.png"] == 42 + 1 * 2 + 1


def test_generate_resumes_and_refuses_other_settings(generated, capsys):
    out, argv = generated
    before = (out / "00001" / "samples" / "00001.png").read_bytes()
    (out / "00002" / "samples" / "00001.png").unlink()  # as if the run had stopped there
    assert main([*argv, "--images-per-prompt", "2", "--steps", "2"]) == 0
    assert "wrote 6 images" in capsys.readouterr().out
    assert (out / "00002" / "samples" / "00001.png").is_file()
    assert (out / "00001" / "samples" / "00001.png").read_bytes() == before  # kept, not redrawn
    assert main([*argv, "--images-per-prompt", "2", "--steps", "3"]) == 2
    assert "other settings" in capsys.readouterr().err


def test_score_and_summary_from_local_model_folders(generated, tmp_path, capsys):
    out, _ = generated
    detector = save_tiny_detector(tmp_path / "detector")
    register_tiny_clip(tmp_path)
    weights = save_tiny_clip_weights(tmp_path / "clip.pt")
    argv = ["eval", "geneval", "--score", str(out), "--out", str(tmp_path / "scores"), "--detector", str(detector)]
    assert main([*argv, "--clip-arch", TINY_CLIP, "--clip-pretrained", str(weights), "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    rows = [json.loads(line) for line in (tmp_path / "scores" / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and all(r["reason"] is not None for r in rows)
    # The tiny detector sees several "dogs" (class prob ~1, random masks): one dog passes; its mask-weighted
    # scores (~0.5) never clear the 0.9 counting threshold, so "two dogs" finds none.
    summary = json.loads((tmp_path / "scores" / "summary.json").read_text())
    assert summary["tasks"]["single_object"]["accuracy"] == 1.0
    assert summary["tasks"]["counting"]["accuracy"] == 0.0
    assert all("expected dog>=2, found 0" in r["reason"] for r in rows if r["tag"] == "counting")
    assert summary["images"] == 6 and summary["prompts"] == 3
    assert "| single_object | 100.00 |" in printed and "**overall**" in printed
    assert (tmp_path / "scores" / "summary.md").read_text().startswith("# GenEval")

    assert main(["eval", "geneval", "--summary", str(tmp_path / "scores"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["overall"] == pytest.approx(summary["overall"])

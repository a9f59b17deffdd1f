import subprocess
import sys

import pytest

from flowrl.cli import build_parser, main

COMMANDS = ["train", "sample", "ls", "validate", "env", "report", "rewards", "serve-reward", "eval"]


def test_help_for_every_command(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    for cmd in COMMANDS:
        with pytest.raises(SystemExit) as info:
            main([cmd, "--help"])
        assert info.value.code == 0
        assert cmd in capsys.readouterr().out
    # every registered subcommand is covered above
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(sub.choices) == set(COMMANDS)
    with pytest.raises(SystemExit) as info:
        main(["rewards", "test", "--help"])
    assert info.value.code == 0


def test_ls_and_validate(capsys):
    assert main(["ls", "recipes"]) == 0
    assert "tiny-cpu" in capsys.readouterr().out.split()
    assert main(["validate", "sd35m-ocr", "train.iterations=3"]) == 0
    assert "ok: sd35m-ocr is valid" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "train.learnig_rate=1"], "unknown key 'train.learnig_rate'; did you mean 'train.learning_rate'?"),
        (["validate", "nope-recipe"], "unknown recipe 'nope-recipe'"),
        (["sample", "tiny-cpu", "--prompt", "a cat", "--num", "0"], "--num: must be at least 1, got 0"),
        (
            ["train", "model.path=stabilityai/stable-diffusion-3.5-medium", "train.iterations=1"],
            "model.path='stabilityai/stable-diffusion-3.5-medium': not a local folder and the hub is offline",
        ),
    ],
)
def test_user_errors_are_one_line(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("flowrl: error: ") and message in err
    assert len(err.splitlines()) == 1


@pytest.mark.slow
def test_console_script_train_then_sample(tmp_path):
    """The real entry point: a 1-iteration run, then sampling from its folder with its LoRA."""
    run = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "flowrl",
        "train",
        f"output_dir={run}",
        "train.iterations=1",
        "sample.num_steps=2",
        "sample.group_size=2",
        "sample.prompts_per_iteration=2",
        "sample.batch_size=4",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "done: 1 iterations" in done.stdout
    cmd = [
        sys.executable,
        "-m",
        "flowrl",
        "sample",
        str(run),
        "--prompt",
        "a red cat",
        "--num",
        "2",
        "--steps",
        "2",
        "--out",
        str(tmp_path / "imgs"),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "loaded LoRA" in done.stdout
    assert len(list((tmp_path / "imgs" / "0001").glob("*.png"))) == 2  # each call writes a new numbered folder


def test_train_tears_its_process_group_down_before_exit(tmp_path):
    """``flowrl train`` ends the process group it ran in (a group left to the interpreter's exit can abort the
    process in gloo's teardown); with no group it does nothing."""
    import torch.distributed as dist

    from flowrl.trainer import end_process_group

    end_process_group()  # no group: nothing to do
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    assert dist.is_initialized()
    end_process_group()
    assert not dist.is_initialized()

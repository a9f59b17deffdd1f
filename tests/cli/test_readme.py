"""The README's own sequences run as written: the block after the demo (``make demo``, ``flowrl sample`` into
the run, ``flowrl report``, ``make demo`` again) and the block of "Adding a reward". ``make demo`` is the
Makefile's own demo command; each ``flowrl train`` gets overrides that make it a few seconds long
(``SHORT``), and nothing else is changed. The README's other blocks name real models (``sd35m-ocr``) that
cannot load offline; their keys and recipes are checked by the docs tests and ``flowrl validate``."""

import re
import shlex
from pathlib import Path

from flowrl.cli import main

ROOT = Path(__file__).parents[2]
SHORT = ["train.iterations=2", "sample.num_steps=3", "sample.prompts_per_iteration=2", "sample.group_size=4"]


def _blocks(lang: str) -> list[str]:
    """The README's fenced blocks opened with ```lang."""
    return re.findall(rf"^```{lang}\n(.*?)^```", (ROOT / "README.md").read_text(), flags=re.M | re.S)


def _make_demo() -> list[str]:
    """The flowrl arguments of the Makefile's ``demo`` target (its environment assignments and comment dropped)."""
    recipe = (ROOT / "Makefile").read_text().split("\ndemo:", 1)[1]
    line = next(x for x in recipe.splitlines() if "flowrl train" in x)
    words = shlex.split(line.split("#", 1)[0])
    return words[next(i for i, w in enumerate(words) if w.endswith("/flowrl")) + 1 :]


def _run(block: str) -> list[list[str]]:
    """Run each command of ``block`` in order; returns the argument lists run."""
    ran = []
    for line in block.splitlines():
        line = line.split("  #", 1)[0].strip()
        if not line:
            continue
        if line == "make demo":
            argv = _make_demo()
        else:
            words = shlex.split(line)
            assert words[0] == "flowrl", f"a README command this test cannot run: {line!r}"
            argv = words[1:]
        if argv[0] == "train":
            argv += SHORT
        assert main(argv) == 0, f"README command failed: {line!r} ({argv})"
        ran.append(argv)
    return ran


def test_the_makefile_demo_is_a_plain_flowrl_train():
    assert _make_demo() == ["train", "overwrite=true"]


def test_after_the_demo_sample_report_and_demo_again(tmp_path, monkeypatch, one_thread):
    monkeypatch.chdir(tmp_path)
    block = next(b for b in _blocks("bash") if b.startswith("make demo ") and "flowrl sample" in b)
    commands = [line.split()[0:2] for line in block.splitlines()]
    assert commands == [["make", "demo"], ["flowrl", "sample"], ["flowrl", "report"], ["make", "demo"]]
    lines = block.splitlines()
    _run("\n".join(lines[:3]))
    run = tmp_path / "runs" / "tiny-cpu"
    assert len(list((run / "samples_cli" / "0001").glob("*.png"))) == 4
    assert (run / "report.html").is_file()
    _run(lines[3])  # make demo again: refused before flowrl sample's folder counted as flowrl's
    assert not (run / "samples_cli").exists() and not (run / "report.html").exists()
    assert (run / "checkpoints" / "iter-000002").is_dir()


def test_adding_a_reward(tmp_path, monkeypatch, one_thread):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", list(__import__("sys").path))  # the reward's import adds the working folder
    source = next(b for b in _blocks("python") if b.startswith("# my_rewards.py"))
    (tmp_path / "my_rewards.py").write_text(source)
    block = next(b for b in _blocks("bash") if "my_rewards:redness" in b)
    ran = _run(block)
    assert len(ran) == 2
    for argv in ran:
        out = tmp_path / next(a.split("=", 1)[1] for a in argv if a.startswith("output_dir="))
        assert (out / "metrics.jsonl").read_text().count("\n") == 2

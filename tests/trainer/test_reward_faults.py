"""Rewards that hang, arguments that a reward does not take, and a user's reward module in the working directory.

A hung reward must end the run (one line, exit code 2) instead of keeping the process alive; a remote reward
must never wait forever; ``my_rewards.py`` next to the user must work with the installed ``flowrl`` script.
"""

import logging
import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch

from flowrl.reward_models import RewardError, RewardOutput, WeightedReward, build_reward, check_reward_args
from flowrl.reward_models.remote import request_json
from tiny_runs import small

HELPERS = Path(__file__).parents[1] / "helpers"
SMALL = small(2, "log.sample_every=1000")
PROGRESS = re.compile(r"^flowrl:\s+\d+%\|")  # the trainer's tqdm bar, also on stderr


def _sleeps(seconds: float):
    def reward(media, prompts, metadata):
        time.sleep(seconds)
        return RewardOutput(scores=torch.zeros(len(prompts)))

    return reward


def _call(weighted: WeightedReward) -> RewardOutput:
    return weighted(torch.zeros(2, 3, 4, 4), ["a", "b"], [{}, {}])


# ---------------------------------------------------------------------------------------------- hangs


def test_a_slow_reward_is_reported_while_waiting_then_timed_out(caplog):
    weighted = WeightedReward({"slow": (_sleeps(10), 1.0)}, timeout_s=0.5, report_every_s=0.15)
    start = time.monotonic()
    timed_out = pytest.raises(RewardError, match=r"^reward 'slow' timed out after 0.5 s$")
    with caplog.at_level(logging.WARNING, logger="flowrl.reward_models.base"), timed_out:
        _call(weighted)
    assert time.monotonic() - start < 5  # the 10 s call was left behind, not waited for
    reports = [r.getMessage() for r in caplog.records if "has given no answer" in r.getMessage()]
    assert 1 <= len(reports) <= 3, reports  # at 0.15, 0.3 and 0.45 s (fewer if this machine is very busy)
    pattern = r"^reward 'slow' has given no answer for 0\.[1-5] s \(timeout 0\.5 s\)$"
    assert all(re.match(pattern, r) for r in reports), reports
    hung = [t for t in threading.enumerate() if t.name == "reward-slow-0"]  # flowrl.workers names it
    assert hung and all(t.daemon for t in hung)  # cannot keep the interpreter alive


def test_without_a_timeout_a_slow_answer_is_reported_and_kept(caplog):
    weighted = WeightedReward({"slow": (_sleeps(0.35), 2.0)}, timeout_s=0, report_every_s=0.1)
    with caplog.at_level(logging.WARNING, logger="flowrl.reward_models.base"):
        out = _call(weighted)
    assert out.scores.tolist() == [0.0, 0.0]
    reports = [r.getMessage() for r in caplog.records if "has given no answer" in r.getMessage()]
    assert reports and all(r.endswith("(no timeout)") for r in reports), reports


def test_the_reward_thread_keeps_grad_mode_and_errors_name_the_reward():
    seen = {}

    def grad_mode(media, prompts, metadata):
        seen["grad"] = torch.is_grad_enabled()
        raise ConnectionError("backend went away\nsecond line")

    weighted = WeightedReward({"g": (grad_mode, 1.0)}, timeout_s=5, report_every_s=1)
    with torch.no_grad(), pytest.raises(RewardError, match=r"^reward 'g' raised ConnectionError: backend went away$"):
        _call(weighted)
    assert seen["grad"] is False


def test_a_process_whose_reward_hung_exits_at_once():
    """The bug: a ThreadPoolExecutor worker, stuck in the hung call, was joined at exit (for ever)."""
    code = textwrap.dedent("""
        import sys, time, torch
        from flowrl.reward_models import RewardError, WeightedReward
        def hang(media, prompts, metadata):
            time.sleep(600)
        try:
            WeightedReward({"hang": (hang, 1.0)}, timeout_s=0.2)(torch.zeros(1, 3, 4, 4), ["a"], [{}])
        except RewardError as exc:
            print(exc)
            sys.exit(2)
    """)
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 2 and "reward 'hang' timed out after 0.2 s" in done.stdout, done.stderr[-2000:]
    assert time.monotonic() - start < 60  # interpreter start and torch import; the hung call is not waited for


@pytest.mark.slow
def test_a_hung_reward_ends_the_training_process_with_one_line(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "flowrl",
        "train",
        f"output_dir={tmp_path / 'run'}",
        *SMALL,
        "train.iterations=2",
        "reward={'fault_rewards:FailAt': 1.0}",
        "reward_args={'fault_rewards:FailAt': {how: hang, at: 0, seconds: 600}}",
        "train.reward_timeout_s=1",
    ]
    env = {**os.environ, "PYTHONPATH": str(HELPERS), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    start = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300, env=env, cwd=tmp_path)
    took = time.monotonic() - start
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [line for line in re.split(r"[\r\n]", done.stderr) if line.strip() and not PROGRESS.match(line)]
    assert lines == ["flowrl: error: reward 'fault_rewards:FailAt' timed out after 1 s"], done.stderr[-2000:]
    assert took < 90, took  # start-up, model and one rollout (about 12 s on 2 cores); never the hung 600 s


# ---------------------------------------------------------------------------------------------- remote waits


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"timeout": None}, "timeout must be a positive, finite number"),
        ({"timeout": 0}, "timeout must be a positive, finite number"),
        ({"timeout": float("inf")}, "timeout must be a positive, finite number"),
        ({"retries": -1}, "retries must be a whole number >= 0"),
        ({"retries": 1.5}, "retries must be a whole number >= 0"),
        ({"backoff": float("nan")}, "backoff must be a finite number"),
    ],
)
def test_a_remote_reward_cannot_be_told_to_wait_forever(kwargs, message):
    with pytest.raises(RewardError, match=message):
        build_reward("remote", url="http://127.0.0.1:9", **kwargs)
    with pytest.raises(RewardError, match=message):
        request_json("http://127.0.0.1:9/health", **kwargs)


def test_a_remote_reward_has_finite_default_timeouts():
    import inspect

    remote = build_reward("remote", url="http://127.0.0.1:9")
    assert 0 < remote.timeout < 600 and 0 <= remote.retries < 10
    assert 0 < inspect.signature(request_json).parameters["timeout"].default < 600


# ---------------------------------------------------------------------------------------------- reward arguments


def test_check_reward_args_names_the_argument():
    check_reward_args("jpeg_compressibility", {"quality": 80})
    check_reward_args("remote", {"url": "http://127.0.0.1:9", "timeout": 3})
    with pytest.raises(RewardError) as info:
        check_reward_args("jpeg_compressibility", {"qualty": 80})
    assert str(info.value) == (
        "reward_args.jpeg_compressibility.qualty: jpeg_compressibility takes no argument 'qualty'; "
        "it takes quality; did you mean 'quality'?"
    )
    with pytest.raises(RewardError, match=r"^ocr takes no argument 'backnd'; it takes backend, .*'backend'\?$"):
        check_reward_args("ocr", {"backnd": "tesseract"}, where=None)
    with pytest.raises(RewardError, match=r"^reward_args.remote.url: remote needs argument 'url'"):
        check_reward_args("remote", {})
    with pytest.raises(RewardError, match=r"^remote needs argument 'url': give url=\.\.\.$"):
        check_reward_args("remote", {}, where=None)


def test_check_reward_args_of_a_function_skips_media_prompts_metadata():
    check_reward_args("fault_rewards:brightness", {})
    with pytest.raises(RewardError, match="takes no argument 'scale'; it takes no arguments"):
        check_reward_args("fault_rewards:brightness", {"scale": 2})
    with pytest.raises(RewardError, match="unknown reward 'pickscor'; did you mean 'pickscore'"):
        check_reward_args("pickscor", {})


def test_check_reward_args_loads_no_weights():
    """Only the reward's module is imported: checking pickscore's arguments must not read a checkpoint."""
    code = (
        "from flowrl.reward_models import check_reward_args; "
        "check_reward_args('pickscore', {}); check_reward_args('vlm_judge', {}); print('ok')"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=180, env=env
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


# ---------------------------------------------------------------------------------------------- the working directory

README_REWARD = """\
# my_rewards.py
import torch
from flowrl.reward_models import RewardOutput

def redness(images, prompts, metadata):
    return RewardOutput(scores=images[:, 0].mean(dim=(1, 2)) - images[:, 1:].mean(dim=(1, 2, 3)))
"""


def _console_script() -> str:
    script = shutil.which("flowrl", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip("the flowrl console script is not installed next to this python (pip install -e .)")
    return script


@pytest.mark.slow
def test_the_readme_reward_works_with_the_installed_console_script(tmp_path):
    """The console script, unlike ``python -m``, does not put the working directory on sys.path."""
    (tmp_path / "my_rewards.py").write_text(README_REWARD)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HF_HUB_OFFLINE"] = "1"
    script = _console_script()
    for argv in (["rewards", "test", "my_rewards:redness"], ["validate", 'reward={"my_rewards:redness": 1.0}']):
        done = subprocess.run(
            [script, *argv], capture_output=True, text=True, check=False, timeout=300, env=env, cwd=tmp_path
        )
        assert done.returncode == 0, (argv, done.stdout[-2000:], done.stderr[-2000:])
    assert "ok: tiny-cpu is valid" in done.stdout
    missing = subprocess.run(
        [script, "rewards", "test", "their_rewards:redness"],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert missing.returncode == 2
    expected = (
        "flowrl: error: reward 'their_rewards:redness': cannot import module 'their_rewards' "
        "(No module named 'their_rewards')"
    )
    assert missing.stderr.splitlines() == [expected]


def test_the_working_directory_is_searched_last_and_only_when_needed(tmp_path, monkeypatch):
    from flowrl.registry import import_target as _import_attr

    monkeypatch.setattr(sys, "path", [p for p in sys.path if p and os.path.abspath(p) != str(tmp_path)])
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cwd_reward_probe.py").write_text("def reward(media, prompts, metadata):\n    return [0.0]\n")
    monkeypatch.delitem(sys.modules, "cwd_reward_probe", raising=False)
    assert callable(_import_attr("cwd_reward_probe:reward"))
    assert sys.path[-1] == str(tmp_path)  # appended: an installed package of the same name would win
    sys.modules.pop("cwd_reward_probe", None)
    (tmp_path / "colorsys.py").write_text("raise SystemExit('shadowed')\n")
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    assert callable(_import_attr("colorsys:rgb_to_hsv"))  # the standard library's, not the working directory's

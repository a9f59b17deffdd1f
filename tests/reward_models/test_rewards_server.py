"""Remote scoring for real (a server process on loopback, the client's retries), the `rewards test` conformance
command, and plug-in discovery through the ``flowrl.reward_models`` entry-point group of an installed package."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import json
import logging
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch

from flowrl.reward_models import RewardError, RewardOutput, build_reward
from flowrl.reward_models.cli import main as rewards_main
from flowrl.reward_models.cli import parse_kwargs
from flowrl.reward_models.media import encode_media

HELPERS = Path(__file__).parents[1] / "helpers"


def slow_brightness(media, prompts, metadata, seconds=0.0):
    """A reward served by the test server: mean brightness, after ``seconds`` of 'work'."""
    time.sleep(seconds)
    return RewardOutput(scores=media.mean(dim=(1, 2, 3)))


def nan_reward(media, prompts, metadata):
    return torch.full((len(prompts),), float("nan"))


def order_dependent(media, prompts, metadata):
    return torch.arange(len(prompts), dtype=torch.float32)  # depends on position, not content


class VideoStats:
    """A served video reward: mean brightness; details say what arrived (fps, frames)."""

    modality = "video"

    def __call__(self, media, prompts, metadata):
        video, fps = media["video"], media["fps"]
        return RewardOutput(
            scores=video.mean(dim=(1, 2, 3, 4)),
            details={"fps": [fps] * len(video), "frames": [video.shape[1]] * len(video)},
        )


class AudioStats:
    """A served audio reward: RMS; details say what arrived (sample rate, channels)."""

    modality = "audio"

    def __call__(self, media, prompts, metadata):
        audio, rate = media["audio"], media["sample_rate"]
        return RewardOutput(
            scores=audio.pow(2).mean(dim=(1, 2)).sqrt(),
            details={"sample_rate": [rate] * len(audio), "channels": [audio.shape[1]] * len(audio)},
        )


def _env() -> dict:
    paths = [str(HELPERS), *(p for p in sys.path if p)]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths), HF_HUB_OFFLINE="1")


class _Server:
    def __init__(self, *args: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "flowrl.reward_models.cli", "serve-reward", *args, "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        line = self.proc.stdout.readline()  # "serving reward 'x' on http://127.0.0.1:PORT (...)"
        if "serving reward" not in line:
            self.stop()
            raise RuntimeError(f"server did not start: {line!r} {self.proc.stderr.read()[-2000:]}")
        self.url = line.split(" on ", 1)[1].split()[0]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)


@pytest.fixture()
def server():
    started = _Server("jpeg_compressibility", "--token", "s3cret", "--max-batch", "2")
    yield started
    started.stop()


def _post(url: str, body: bytes, token: str | None = "s3cret") -> tuple[int, dict]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body, headers=headers), timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_server_scores_a_batch_like_the_local_reward(server):
    with urllib.request.urlopen(
        urllib.request.Request(server.url + "/health", headers={"Authorization": "Bearer s3cret"})
    ) as r:
        health = json.loads(r.read())
    assert health["status"] == "ok" and health["reward"] == "jpeg_compressibility" and health["modality"] == "image"
    images = torch.rand(5, 3, 32, 24, generator=torch.Generator().manual_seed(0))
    prompts = [f"p{i}" for i in range(5)]
    remote = build_reward("remote", url=server.url, token="s3cret", batch_size=3)
    out = remote(images, prompts, [{}] * 5)  # 2 requests of 3 + 2; the server scores in chunks of 2
    local = build_reward("jpeg_compressibility")(images, prompts, [{}] * 5)
    assert out.scores.tolist() == pytest.approx(local.scores.tolist(), abs=1e-7)  # PNG is lossless on uint8
    assert out.details["size_kb"] == pytest.approx(local.details["size_kb"].tolist())


def test_bad_requests_get_a_4xx_with_a_reason_and_the_server_lives_on(server):
    url = server.url + "/score"
    good = encode_media(torch.rand(2, 3, 8, 8), "image")
    cases = [
        (b"{not json", 400, "not JSON"),
        (json.dumps({"media": good}).encode(), 400, "missing field"),
        (json.dumps({"media": good, "prompts": ["only one"]}).encode(), 400, "2 media samples but 1 prompts"),
        (
            json.dumps({"media": {"kind": "image", "format": "png", "data": ["@@"]}, "prompts": ["a"]}).encode(),
            400,
            "base64",
        ),
        (json.dumps({"media": good, "prompts": ["a", "b"], "pickle": 1}).encode(), 400, "unknown field"),
        (
            json.dumps({"media": encode_media(torch.rand(1, 2, 3, 8, 8), "video"), "prompts": ["a"]}).encode(),
            422,
            "takes image media, got video",
        ),
    ]
    for body, status, reason in cases:
        got, answer = _post(url, body)
        assert got == status and reason in answer["error"], (got, answer)
    assert _post(url, json.dumps({"media": good, "prompts": ["a", "b"]}).encode(), token="wrong")[0] == 401
    assert _post(server.url + "/nope", b"{}")[0] == 404
    status, answer = _post(url, json.dumps({"media": good, "prompts": ["a", "b"]}).encode())
    assert status == 200 and len(answer["scores"]) == 2 and server.proc.poll() is None


def test_client_refused_by_a_wrong_token_does_not_retry(server):
    remote = build_reward("remote", url=server.url, token="wrong", retries=3, backoff=5.0)
    start = time.monotonic()
    with pytest.raises(RewardError, match="HTTP 401"):
        remote(torch.rand(1, 3, 8, 8), ["a"], [{}])
    assert time.monotonic() - start < 5.0


def test_killing_the_server_mid_run_gives_retries_then_a_clear_error(caplog):
    slow = _Server(f"{__name__}:slow_brightness", "seconds=1.0")
    remote = build_reward("remote", url=slow.url, retries=2, backoff=0.05, timeout=20, modality="image")
    images = (torch.rand(2, 3, 8, 8) * 255).round() / 255  # uint8 values: PNG carries them exactly
    assert remote(images, ["a", "b"], [{}, {}]).scores.tolist() == pytest.approx(images.mean(dim=(1, 2, 3)).tolist())

    result = {}

    def score():
        try:
            result["out"] = remote(images, ["a", "b"], [{}, {}])
        except RewardError as exc:
            result["error"] = exc

    thread = threading.Thread(target=score)
    with caplog.at_level(logging.WARNING, logger="flowrl.reward_models.remote"):
        thread.start()
        time.sleep(0.4)  # the request is in flight, the reward is "working"
        slow.stop()
        thread.join(timeout=60)
    assert "error" in result, result
    message = str(result["error"])
    assert "failed after 3 attempts" in message and slow.url in message and "\n" not in message
    assert len([r for r in caplog.records if "retrying" in r.getMessage()]) == 2


def test_remote_video_reward_gets_the_trainer_s_video_mapping_at_its_fps():
    served = _Server(f"{__name__}:VideoStats")
    try:
        remote = build_reward("remote", url=served.url, batch_size=2)  # fps=8 is for bare tensors only
        gen = torch.Generator().manual_seed(0)
        video = (torch.rand(3, 4, 3, 8, 8, generator=gen) * 255).round() / 255  # uint8 values: PNG frames are exact
        out = remote({"video": video, "fps": 16.0}, ["a", "b", "c"], [{}] * 3)  # the adapters' decode form
        assert remote.modality == "video"
        assert out.scores.tolist() == pytest.approx(video.mean(dim=(1, 2, 3, 4)).tolist(), abs=1e-6)
        assert out.details == {"fps": [16.0] * 3, "frames": [4] * 3}
        audio = torch.zeros(3, 1, 400)
        both = remote({"video": video, "fps": 24.0, "audio": audio, "sample_rate": 16000}, ["a", "b", "c"], [{}] * 3)
        assert both.details["fps"] == [24.0] * 3  # an LTX-2 mapping: the video reward gets its video part
        mp4 = build_reward("remote", url=served.url, media_format="mp4")({"video": video[:1], "fps": 12.0}, ["a"], [{}])
        assert mp4.details["fps"] == [12.0] and mp4.details["frames"] == [4]
        assert torch.equal(remote(video, ["a", "b", "c"], [{}] * 3).scores, out.scores)  # a bare tensor too
    finally:
        served.stop()


def test_remote_audio_reward_gets_the_trainer_s_audio_mapping_at_its_rate():
    served = _Server(f"{__name__}:AudioStats")
    try:
        remote = build_reward("remote", url=served.url, batch_size=2)
        t = torch.arange(8000) / 22050
        audio = torch.stack([a * torch.sin(2 * torch.pi * 440 * t) for a in (0.1, 0.5, 0.9)])[:, None].repeat(1, 2, 1)
        out = remote({"audio": audio, "sample_rate": 22050}, ["a", "b", "c"], [{}] * 3)
        assert remote.modality == "audio"
        assert out.scores.tolist() == pytest.approx(audio.pow(2).mean(dim=(1, 2)).sqrt().tolist(), abs=1e-4)  # WAV
        assert out.details == {"sample_rate": [22050] * 3, "channels": [2] * 3}
        exact = build_reward("remote", url=served.url, media_format="array")
        assert exact({"audio": audio, "sample_rate": 22050}, ["a", "b", "c"], [{}] * 3).scores.tolist() == (
            pytest.approx(audio.pow(2).mean(dim=(1, 2)).sqrt().tolist(), rel=1e-6)
        )
        both = remote(
            {"video": torch.rand(3, 2, 3, 8, 8), "fps": 8.0, "audio": audio, "sample_rate": 22050},
            ["a", "b", "c"],
            [{}] * 3,
        )
        assert both.details["sample_rate"] == [22050] * 3  # an LTX-2 mapping: the audio reward gets its audio part
    finally:
        served.stop()


def test_remote_audio_video_reward_gets_both_parts():
    from flowrl.media import cat_media

    served = _Server("av_sync")
    try:
        remote = build_reward("remote", url=served.url)
        frames, per_frame = 8, 200
        video = 0.1 * torch.ones(2, frames, 3, 8, 8)
        audio = torch.zeros(2, 1, frames * per_frame)
        for f in (2, 5):  # a flash and a click together
            video[:, f] = 0.9
            audio[:, 0, f * per_frame : f * per_frame + 50] = 0.8
        media = cat_media([{"video": video, "fps": 8.0, "audio": audio, "sample_rate": 1600}] * 2)
        out = remote(media, ["a"] * 4, [{}] * 4)
        local = build_reward("av_sync")(media, ["a"] * 4, [{}] * 4)
        assert remote.modality == "audio_video"
        assert out.scores.tolist() == pytest.approx(local.scores.tolist(), abs=1e-4)
    finally:
        served.stop()


def test_remote_to_nowhere_is_one_line():
    remote = build_reward("remote", url="http://127.0.0.1:9", retries=1, backoff=0.01, timeout=2, modality="image")
    with pytest.raises(RewardError, match=r"failed after 2 attempts .*is the server running"):
        remote(torch.rand(1, 3, 8, 8), ["a"], [{}])


def test_serve_reward_refuses_a_public_bind_without_token():
    code = rewards_main(["serve-reward", "jpeg_compressibility", "--host", "0.0.0.0", "--port", "0"])
    assert code == 2


# ---------------------------------------------------------------------------------------------- rewards test


def test_rewards_test_passes_a_good_reward(capsys):
    assert rewards_main(["rewards", "test", "jpeg_compressibility", "quality=90"]) == 0
    out = capsys.readouterr().out
    assert "verdict: PASS" in out and "[ok] batch-order invariance" in out and "[ok] determinism" in out
    assert len(out.splitlines()) < 20  # one screen


def test_rewards_test_with_the_real_ocr_model(capsys):
    pytest.importorskip("rapidocr_onnxruntime")
    assert rewards_main(["rewards", "test", "ocr"]) == 0
    out = capsys.readouterr().out
    assert "verdict: PASS" in out and "scores: 1.0000, 0.0000, 1.0000, 0.0000" in out  # text images read, noise not


@pytest.mark.parametrize(("attr", "failing"), [("nan_reward", "finiteness"), ("order_dependent", "batch-order")])
def test_rewards_test_fails_a_bad_reward(capsys, attr, failing):
    assert rewards_main(["rewards", "test", f"{__name__}:{attr}"]) == 1
    out = capsys.readouterr().out
    assert "verdict: FAIL" in out and f"[FAIL] {failing}" in out


def test_rewards_test_pairwise_and_audio_video_media(capsys):
    assert rewards_main(["rewards", "test", "av_sync"]) == 0
    assert "modality audio_video" in capsys.readouterr().out


def test_cli_input_errors_are_one_line(capsys):
    assert rewards_main(["rewards", "test", "pickscor"]) == 2
    assert "did you mean 'pickscore'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="key=value"):
        parse_kwargs(["frames"])
    assert parse_kwargs(["frames=8", "backend=tesseract", "reward_kwargs={formula: cos}"]) == {
        "frames": 8,
        "backend": "tesseract",
        "reward_kwargs": {"formula": "cos"},
    }
    with pytest.raises(SystemExit):
        rewards_main(["serve-reward", "--help"])


# ---------------------------------------------------------------------------------------------- plug-ins


def test_plugin_package_is_discovered_through_its_entry_point(tmp_path):
    package = tmp_path / "src"
    (package / "flowrl_demo_plugin").mkdir(parents=True)
    (package / "flowrl_demo_plugin" / "__init__.py").write_text(
        textwrap.dedent('''
        import torch
        from flowrl.reward_models import RewardOutput

        class Redness:
            """Mean of the red channel minus the others."""
            score_range = (-1.0, 1.0)

            def __init__(self, scale=1.0):
                self.scale = scale

            def __call__(self, media, prompts, metadata):
                red = media[:, 0] - 0.5 * (media[:, 1] + media[:, 2])
                return RewardOutput(scores=self.scale * red.mean(dim=(1, 2)))
    ''')
    )
    (package / "pyproject.toml").write_text(
        textwrap.dedent("""
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "flowrl-demo-plugin"
        version = "0.0.1"

        [project.entry-points."flowrl.reward_models"]
        redness = "flowrl_demo_plugin:Redness"
        ocr = "flowrl_demo_plugin:Redness"
    """)
    )
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(site),
            str(package),
        ],
        check=True,
        timeout=240,
        capture_output=True,
    )
    code = textwrap.dedent("""
        import torch
        from flowrl.reward_models import build_reward, list_rewards
        assert "redness" in list_rewards(), list_rewards()
        images = torch.zeros(2, 3, 4, 4)
        images[0, 0] = 1.0
        out = build_reward("redness", scale=2.0)(images, ["a", "b"], [{}, {}])
        assert out.scores.tolist() == [2.0, 0.0], out.scores
        from flowrl.reward_models.ocr import OcrReward
        class Blind:  # an OCR back end that needs no binary (tesseract may be missing)
            def read(self, image):
                return ""
        assert type(build_reward("ocr", backend=Blind())) is OcrReward  # a plug-in cannot shadow a built-in
        print("plugin ok")
    """)
    env = _env()
    env["PYTHONPATH"] = os.pathsep.join([str(site), env["PYTHONPATH"]])
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0 and "plugin ok" in done.stdout, done.stderr[-2000:]
    assert "reward plug-in 'ocr'" in done.stderr and "skipped" in done.stderr

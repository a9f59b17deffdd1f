"""``flowrl sample``: numbered output folders that never overwrite, sample.json, --checkpoint and --ema; the
adapter's ``generate`` for every media kind (PNG images, MP4 video with a frame sheet, WAV audio with waveforms)."""

import json
from typing import ClassVar

import numpy as np
import pytest
from PIL import Image

from flowrl.cli import main

TRAIN = [
    "sample.num_steps=2",
    "sample.group_size=4",
    "sample.prompts_per_iteration=2",
    "sample.batch_size=4",
    "train.iterations=2",
    "log.save_every=1",
    "log.sample_every=1000",
    "train.lora.alpha=32",
]  # alpha = 2 x rank (16), as the SD3.5 recipes: the exported LoRA must keep it
PROMPT = ["--prompt", "a red cat", "--num", "2", "--steps", "2", "--seed", "3"]


def _train(root, *extra):
    assert main(["train", f"output_dir={root}", *TRAIN, *extra]) == 0
    return root


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("run"))


@pytest.fixture(scope="module")
def ema_run(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("ema_run"), "train.ema=true", "train.ema_every=1", "train.ema_decay=0.5")


def _images(folder):
    return [np.asarray(Image.open(folder / f"{i:04d}.png"), dtype=np.int16) for i in range(2)]


def _record(folder):
    return json.loads((folder / "sample.json").read_text())


def _max_diff(a, b):
    return max(int(np.abs(x - y).max()) for x, y in zip(a, b))


def test_two_calls_write_two_folders_and_record_them(run, capsys):
    (run / "samples_cli").mkdir(exist_ok=True)
    (run / "samples_cli" / "0000.png").write_bytes(b"an image from an older flowrl")
    assert main(["sample", str(run), *PROMPT]) == 0
    assert main(["sample", str(run), *PROMPT, "--seed", "4"]) == 0
    first, second = run / "samples_cli" / "0001", run / "samples_cli" / "0002"
    assert sorted(p.name for p in first.iterdir()) == ["0000.png", "0001.png", "sample.json"]
    assert (run / "samples_cli" / "0000.png").read_bytes() == b"an image from an older flowrl"
    rec = _record(first)
    assert rec["prompts"] == ["a red cat", "a red cat"] and rec["seed"] == 3 and rec["steps"] == 2
    assert rec["guidance_scale"] == 4.5 and rec["images"] == ["0000.png", "0001.png"]
    assert rec["weights"] == {"source": "run", "path": str(run), "loaded": "LoRA"}
    assert rec["time"][:2] == "20" and _record(second)["seed"] == 4
    assert _max_diff(_images(first), _images(second)) > 0  # another seed, other images, both kept


def test_out_gets_the_next_free_numbered_subfolder(run, tmp_path):
    (tmp_path / "0007").mkdir()
    (tmp_path / "notes").mkdir()
    assert main(["sample", str(run), *PROMPT, "--out", str(tmp_path)]) == 0
    assert main(["sample", "tiny-cpu", *PROMPT, "--out", str(tmp_path)]) == 0
    assert (tmp_path / "0008" / "sample.json").is_file() and not any((tmp_path / "0007").iterdir())
    rec = _record(tmp_path / "0009")
    assert rec["weights"] == {"source": "none", "path": None, "loaded": None} and rec["target"] == "tiny-cpu"


def test_the_last_checkpoint_equals_the_exported_lora_and_differs_from_the_base(run, tmp_path):
    last = run / "checkpoints" / "iter-000002"
    assert main(["sample", str(run), *PROMPT, "--out", str(tmp_path / "lora")]) == 0
    assert main(["sample", "--checkpoint", str(last), *PROMPT, "--out", str(tmp_path / "ckpt")]) == 0
    assert main(["sample", "tiny-cpu", *PROMPT, "--out", str(tmp_path / "base")]) == 0
    exported, sampled, base = (_images(tmp_path / k / "0001") for k in ("lora", "ckpt", "base"))
    assert _max_diff(sampled, exported) <= 1  # the same weights (PNG rounding at most)
    assert _max_diff(sampled, base) > 8
    rec = _record(tmp_path / "ckpt" / "0001")
    assert rec["weights"] == {
        "source": "checkpoint",
        "path": str(last),
        "iteration": 2,
        "ema": False,
        "loaded": "LoRA (trainable.safetensors)",
    }
    assert rec["target"] is None  # the config came from the run two levels up


def test_checkpoint_alone_writes_into_its_run(run):
    before = sorted((run / "samples_cli").iterdir()) if (run / "samples_cli").exists() else []
    assert main(["sample", "--checkpoint", str(run / "checkpoints" / "iter-000001"), *PROMPT]) == 0
    new = sorted(set((run / "samples_cli").iterdir()) - set(before))
    assert len(new) == 1 and _record(new[0])["weights"]["iteration"] == 1


def test_ema_weights_are_those_exported(ema_run, tmp_path):
    last = ema_run / "checkpoints" / "iter-000002"
    assert main(["sample", str(ema_run), *PROMPT, "--out", str(tmp_path / "lora")]) == 0
    assert main(["sample", "--checkpoint", str(last), "--ema", *PROMPT, "--out", str(tmp_path / "ema")]) == 0
    assert main(["sample", "--checkpoint", str(last), *PROMPT, "--out", str(tmp_path / "raw")]) == 0
    exported, ema, raw = (_images(tmp_path / k / "0001") for k in ("lora", "ema", "raw"))
    assert _max_diff(ema, exported) <= 1
    assert _max_diff(raw, ema) > 0
    assert _record(tmp_path / "ema" / "0001")["weights"]["loaded"] == "LoRA (ema.safetensors)"


def test_a_rank_mismatch_names_the_tensor_and_writes_nothing(run, tmp_path, capsys):
    recipe = tmp_path / "rank4.yaml"
    recipe.write_text("model: {path: tiny, resolution: 32, max_sequence_length: 16}\ntrain: {lora: {rank: 4}}\n")
    last = run / "checkpoints" / "iter-000002"
    assert main(["sample", str(recipe), "--checkpoint", str(last), *PROMPT, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"flowrl: error: checkpoint {last}: tensor 'transformer_blocks.0.attn.to_q.lora_A.default.weight' "
        "has shape (16, 32) in the checkpoint but (4, 32) in the model; check train.lora.rank"
    )
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------ every media kind
def test_generate_is_the_pipeline_call_sample_made_before():
    import torch

    from flowrl.pipelines.sd3 import SD3Adapter
    from flowrl.resolve import resolve_config

    cfg = resolve_config("tiny-cpu", [])
    adapter = SD3Adapter.from_config(cfg.model, seed=cfg.seed)
    ours = adapter.generate(["a red cat"] * 2, 2, 4.5, torch.Generator("cpu").manual_seed(3))
    before = adapter.pipe(
        prompt=["a red cat"] * 2,
        negative_prompt=None,
        num_inference_steps=2,
        guidance_scale=4.5,
        height=cfg.model.resolution,
        width=cfg.model.resolution,
        max_sequence_length=cfg.model.max_sequence_length,
        generator=torch.Generator("cpu").manual_seed(3),
        output_type="pt",
    ).images
    assert ours.shape == (2, 3, 32, 32) and torch.equal(ours, before)


class _FakeAdapter:
    """Stands in for the Wan / Stable Audio adapters: ``generate`` returns their media forms."""

    calls: ClassVar[list] = []
    media_kind = "video"

    @classmethod
    def from_config(cls, model_cfg, seed=0):
        return cls()

    def load_trained(self, run_dir):
        return None

    def generate(self, prompts, num_steps, guidance_scale, generator, negative_prompts=None):
        import torch

        type(self).calls.append((list(prompts), num_steps, guidance_scale, negative_prompts))
        n = len(prompts)
        if self.media_kind == "video":  # smooth ramps that brighten over 9 frames (H.264 is lossy)
            ramp = torch.linspace(0, 1, 32).view(1, 1, 1, 1, 32) * torch.linspace(0.3, 1, 9).view(1, 9, 1, 1, 1)
            return {"video": ramp.expand(n, 9, 3, 16, 32).contiguous(), "fps": 16.0}
        t = torch.arange(4000) / 8000
        return {"audio": (0.5 * torch.sin(2 * torch.pi * 440 * t)).view(1, 1, -1).repeat(n, 2, 1), "sample_rate": 8000}


@pytest.fixture()
def fake(monkeypatch):
    from flowrl.pipelines import base

    monkeypatch.setattr(base, "adapter_class", lambda name: _FakeAdapter)
    _FakeAdapter.calls = []
    yield _FakeAdapter


def test_video_samples_are_mp4s_with_a_frame_sheet(fake, tmp_path, capsys):
    from flowrl.reward_models.media import mp4_to_video

    fake.media_kind = "video"
    assert main(["sample", "tiny-cpu", *PROMPT, "--negative-prompt", "blurry", "--out", str(tmp_path)]) == 0
    assert fake.calls == [(["a red cat"] * 2, 2, 4.5, ["blurry"] * 2)]
    folder = tmp_path / "0001"
    assert sorted(p.name for p in folder.iterdir()) == ["0000.mp4", "0001.mp4", "frames.png", "sample.json"]
    rec = _record(folder)
    assert rec["media_kind"] == "video" and rec["videos"] == ["0000.mp4", "0001.mp4"] and rec["sheet"] == "frames.png"
    assert rec["files"] == rec["videos"] and rec["fps"] == 16.0 and rec["num_frames"] == 9
    assert rec["negative_prompt"] == "blurry" and rec["weights"]["source"] == "none" and "images" not in rec
    clip = mp4_to_video((folder / "0000.mp4").read_bytes(), "clip")
    assert clip.shape == (9, 3, 16, 32) and clip[-1].mean() > clip[0].mean()
    with Image.open(folder / "frames.png") as sheet:  # 2 clips x 8 frames
        assert sheet.size == (8 * 34 + 2, 2 * 18 + 2)
    assert "wrote 2 videos (MP4) and frames.png and sample.json" in capsys.readouterr().out


def test_audio_samples_are_wavs_with_waveforms(fake, tmp_path):
    from flowrl.reward_models.media import wav_to_audio

    fake.media_kind = "audio"
    assert main(["sample", "tiny-cpu", *PROMPT, "--out", str(tmp_path)]) == 0
    assert fake.calls[0][3] is None  # no negative prompt: the empty one
    folder = tmp_path / "0001"
    assert sorted(p.name for p in folder.iterdir()) == ["0000.wav", "0001.wav", "sample.json", "waveforms.png"]
    rec = _record(folder)
    assert rec["media_kind"] == "audio" and rec["audio"] == ["0000.wav", "0001.wav"] and rec["sample_rate"] == 8000
    assert rec["duration_s"] == 0.5 and rec["sheet"] == "waveforms.png"
    wave, rate = wav_to_audio((folder / "0001.wav").read_bytes(), "clip")
    assert rate == 8000 and wave.shape == (2, 4000) and abs(float(wave.abs().max()) - 0.5) < 1e-3


def test_audio_video_samples_are_mp4s_with_sound_and_wavs(fake, tmp_path, monkeypatch, capsys):
    import av
    import torch

    from flowrl.reward_models.media import mp4_to_audio, mp4_to_video

    def generate(self, prompts, num_steps, guidance_scale, generator, negative_prompts=None):  # LTX-2's form
        n, t = len(prompts), torch.arange(16000) / 16000
        ramp = torch.linspace(0, 1, 32).view(1, 1, 1, 1, 32) * torch.linspace(0.3, 1, 9).view(1, 9, 1, 1, 1)
        return {
            "video": ramp.expand(n, 9, 3, 16, 32).contiguous(),
            "fps": 8.0,
            "audio": (0.5 * torch.sin(2 * torch.pi * 440 * t)).view(1, 1, -1).repeat(n, 2, 1),
            "sample_rate": 16000,
        }

    monkeypatch.setattr(fake, "generate", generate)
    assert main(["sample", "tiny-cpu", *PROMPT, "--out", str(tmp_path)]) == 0
    folder = tmp_path / "0001"
    assert sorted(p.name for p in folder.iterdir()) == [
        "0000.mp4",
        "0000.wav",
        "0001.mp4",
        "0001.wav",
        "frames.png",
        "sample.json",
    ]
    rec = _record(folder)
    assert rec["media_kind"] == "audio_video" and rec["videos"] == ["0000.mp4", "0001.mp4"]
    assert rec["audio"] == ["0000.wav", "0001.wav"] and rec["sample_rate"] == 16000 and rec["duration_s"] == 1.0
    assert rec["fps"] == 8.0 and rec["num_frames"] == 9 and rec["sheet"] == "frames.png"
    assert rec["mp4_audio"] == {"codec": "aac", "sample_rate": 16000, "channels": 2}
    with av.open(str(folder / "0001.mp4")) as container:
        assert len(container.streams.audio) == 1 and container.streams.audio[0].rate == 16000
    wave, rate = mp4_to_audio((folder / "0000.mp4").read_bytes(), "clip")
    assert rate == 16000 and wave.shape[0] == 2 and abs(wave.shape[1] - 16000) <= 1024
    assert mp4_to_video((folder / "0000.mp4").read_bytes(), "clip").shape == (9, 3, 16, 32)
    assert "wrote 2 clips (MP4 with sound + WAV) and frames.png and sample.json" in capsys.readouterr().out

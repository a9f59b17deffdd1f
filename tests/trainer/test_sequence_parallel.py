"""Sequence parallelism (``train.sequence_parallel``, ``flowrl.mesh``): the processes of a group share their samples,
the transformer's tokens split over them by diffusers' Ulysses engine, and a run logs what one process logs.

The mesh's bookkeeping is checked by hand; the runs are CPU processes over gloo under torchrun: SP 2 against one
process (tiny-wan, tiny-flux2, tiny-edit (FLUX.1-Kontext), tiny-qwen-image, tiny-qwen-image-edit and tiny-ltx2),
SP 2 x DP 2 on 4 processes against DP 2, and a run saved at SP 2 resumed at SP 1 and the other way. Every value
compared is float32 noise apart (1e-5)."""

import sys

import pytest
import torch

from _processes import ENV, needs_torchrun, torchrun, train_metrics
from flowrl.benchmarks.perf.strategies import KEYS
from flowrl.cli import main
from flowrl.mesh import Mesh

PORT = 29583
ONE = [sys.executable, "-m", "flowrl", "train"]
SHORT = ["train.iterations=2", "log.sample_every=1000", "log.eval_every=0"]


def assert_same_metrics(a: list[dict], b: list[dict]) -> None:
    """Every compared value (``strategies.KEYS``) equal within 1e-5, or 1e-6 absolute: a loss is a mean of
    advantage-weighted ratios that nearly cancel (sizes about 1 for a mean of 1e-5), and the split attention
    rounds each forward otherwise in float32, which moves a ratio by about 1e-7 (tiny-edit's first loss: 2.7e-7)."""
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b)):
        for key in KEYS:
            assert x[key] == pytest.approx(y[key], rel=1e-5, abs=1e-6), (i, key, x[key], y[key])


def _launch(processes: int, port: int = PORT) -> list[str]:
    return [
        *torchrun(port)[:-4],
        "--nproc_per_node",
        str(processes),
        "--master_port",
        str(port),
        "-m",
        "flowrl",
        "train",
    ]


# ------------------------------------------------------------------------------------------ the mesh by hand
def test_the_mesh_places_each_process():
    # 4 processes, groups of 2: processes 0, 1 are data group 0, processes 2, 3 data group 1
    places = [(m.data, m.data_rank, m.seq_rank, m.leads) for m in (Mesh(4, r, 2) for r in range(4))]
    assert places == [(2, 0, 0, True), (2, 0, 1, False), (2, 1, 0, True), (2, 1, 1, False)]
    assert (Mesh(4, 3, 1).data, Mesh(4, 3, 1).data_rank) == (4, 3)  # no sequence parallelism: as before


def test_a_group_size_that_does_not_divide_the_launch_is_refused():
    with pytest.raises(ValueError, match="train.sequence_parallel=2 must divide the 3 processes"):
        Mesh(3, 0, 2)


def test_each_group_rows_are_gathered_once():
    # each process holds 2 rows; processes 0 and 1 (a group) hold the same rows, as do 2 and 3
    gathered = torch.tensor([10, 11, 10, 11, 20, 21, 20, 21])
    assert Mesh(4, 0, 2).once(gathered).tolist() == [10, 11, 20, 21]
    assert Mesh(4, 0, 1).once(gathered).tolist() == gathered.tolist()
    assert Mesh(4, 2, 2).once_objects(["a", "a", "b", "b"]) == ["a", "b"]


@pytest.mark.parametrize(
    "recipe, family, why",
    [
        ("tiny-cpu", "sd3", "no context-parallel plan for SD3Transformer2DModel"),
        ("tiny-z-image", "z_image", "no context-parallel plan for ZImageTransformer2DModel"),
        ("tiny-audio", "stable_audio", "no context-parallel plan for StableAudioDiTModel"),
    ],
)
def test_a_family_that_cannot_split_a_sample_is_refused_in_one_line(recipe, family, why, capsys):
    assert main(["validate", recipe, "train.sequence_parallel=2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"train.sequence_parallel=2: model.pipeline={family} cannot split a sample yet" in err and why in err


def test_qwen_image_pads_the_prompt_to_the_group_and_refuses_image_tokens_it_does_not_divide():
    from types import SimpleNamespace

    from flowrl.pipelines.qwen_image import QwenImageAdapter
    from flowrl.resolve import resolve_config

    adapter = QwenImageAdapter.from_config(resolve_config("tiny-qwen-image").model)
    embeds, mask = torch.ones(2, 5, 3), torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    assert adapter._split_text(embeds, None, 4) == (embeds, None)  # whole: unchanged
    adapter.transformer._parallel_config = SimpleNamespace(context_parallel_config=SimpleNamespace(ulysses_degree=2))
    padded, padded_mask = adapter._split_text(embeds, None, 4)  # every token real: a mask for the padding
    assert padded.shape == (2, 6, 3) and padded[:, 5].abs().sum() == 0
    assert padded_mask.tolist() == [[1, 1, 1, 1, 1, 0]] * 2
    assert adapter._split_text(embeds, mask, 4)[1].tolist() == [[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]]
    assert adapter._split_text(embeds[:, :4], None, 4)[1] is None  # divides already
    with pytest.raises(ValueError, match=r"train.sequence_parallel=2 does not divide the transformer's 9 image tokens"):
        adapter._split_text(embeds, mask, 9)


def test_ltx2_refuses_a_token_count_the_group_does_not_divide():
    from types import SimpleNamespace

    from flowrl.pipelines.ltx2.adapter import LTX2Adapter
    from flowrl.resolve import resolve_config

    adapter = LTX2Adapter.from_config(resolve_config("tiny-ltx2").model)
    assert set(adapter.sequence_parallel_plan[""]) >= {"hidden_states", "audio_hidden_states"}  # both towers split
    xv, xa = torch.zeros(1, adapter.video_seq_len, 128), torch.zeros(1, adapter.audio_frames, 128)
    inputs = {"prompt_embeds": torch.zeros(1, 128, 32)}
    adapter._split_inputs(adapter.transformer, xv, xa, inputs)  # whole: nothing to check
    adapter.transformer._parallel_config = SimpleNamespace(context_parallel_config=SimpleNamespace(ulysses_degree=2))
    with pytest.raises(ValueError, match=r"train.sequence_parallel=2 does not divide LTX-2's 9 audio latent frames"):
        adapter._split_inputs(adapter.transformer, xv, xa, inputs)


def test_a_launch_the_group_does_not_divide_is_refused(tmp_path, capsys):
    assert main(["train", "tiny-wan", "train.sequence_parallel=2", f"output_dir={tmp_path}", *SHORT]) == 2
    assert "train.sequence_parallel=2 must divide the 1 processes of the launch" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ runs over gloo
@pytest.mark.slow
@needs_torchrun
@pytest.mark.parametrize(
    "recipe, overrides",
    [
        ("tiny-wan", []),
        ("tiny-flux2", []),
        ("tiny-edit", []),
        # prompts padded to even lengths, masked (QwenImageCore._split_text); LoRA on the last block's dropped
        # text stream too (tiny-qwen-image's targets include txt_mlp), which DDP must see used
        ("tiny-qwen-image", []),
        ("tiny-qwen-image-edit", []),  # 4 noisy and 4 source tokens
        # 25 frames: 4 video tokens, 26 audio latent frames (9 frames, the recipe's, give 9: refused); a smooth
        # reward, since a JPEG's byte count flips with float32 noise and the recipe's per-group std (1e-5)
        # turns one byte into a different advantage
        ("tiny-ltx2", ["model.num_frames=25", "reward_args.video.reward=smoothness"]),
    ],
)
def test_two_processes_splitting_each_sample_log_what_one_process_logs(recipe, overrides, tmp_path):
    one = train_metrics([*ONE, recipe], tmp_path / "one", *SHORT, *overrides)
    two = train_metrics(
        [*_launch(2), recipe], tmp_path / "sp2", *SHORT, *overrides, "train.sequence_parallel=2", env=ENV
    )
    assert_same_metrics(one, two)
    assert [r["cost/nfe"] for r in one] == [r["cost/nfe"] for r in two]  # a group's forward counts once
    assert [r["cost/reward_calls"] for r in one] == [r["cost/reward_calls"] for r in two]  # scored once


@pytest.mark.slow
@needs_torchrun
def test_ltx2_split_over_two_processes_is_the_whole_transformer_in_float64():
    # both rotary layouts, a padded prompt, STG rows, isolated modalities: float64 rounding apart (1e-12)
    import subprocess
    from pathlib import Path

    script = Path(__file__).parents[1] / "helpers" / "_ltx2_split.py"
    done = subprocess.run([*torchrun(PORT + 3), str(script)], env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {line.split()[0]: [float(v) for v in line.split()[1:]] for line in done.stdout.splitlines()}
    assert set(rows) == {"split-plain", "interleaved-plain", "split-stg", "split-isolated"}
    assert all(forward < 1e-12 and gradient < 1e-12 for forward, gradient in rows.values()), rows


@pytest.mark.slow
@needs_torchrun
def test_sequence_and_data_parallel_on_four_processes_equal_data_parallel(tmp_path):
    dp2 = train_metrics([*_launch(2, PORT + 1), "tiny-wan"], tmp_path / "dp2", *SHORT)
    both = train_metrics([*_launch(4, PORT + 1), "tiny-wan"], tmp_path / "sp2dp2", *SHORT, "train.sequence_parallel=2")
    assert_same_metrics(dp2, both)


@pytest.mark.slow
@needs_torchrun
def test_a_run_saved_split_resumes_whole_and_the_other_way(tmp_path):
    straight = train_metrics([*ONE, "tiny-wan"], tmp_path / "straight", *SHORT)
    first = ["train.iterations=1"]
    # SP 2 for the first iteration, one process for the second
    train_metrics([*_launch(2, PORT + 2), "tiny-wan"], tmp_path / "a", *SHORT, *first, "train.sequence_parallel=2")
    a = train_metrics([*ONE, "tiny-wan"], tmp_path / "a", *SHORT, "resume=latest")
    # one process for the first, SP 2 for the second
    train_metrics([*ONE, "tiny-wan"], tmp_path / "b", *SHORT, *first)
    b = train_metrics(
        [*_launch(2, PORT + 2), "tiny-wan"], tmp_path / "b", *SHORT, "resume=latest", "train.sequence_parallel=2"
    )
    assert_same_metrics(straight, a)
    assert_same_metrics(straight, b)

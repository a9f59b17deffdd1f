"""CFG negative prompts: data.negative_prompt and a row's own negative_prompt, carried as rows of the conditioning."""

import json

import numpy as np
import pytest
import torch
from PIL import Image

from flowrl.cli import main
from flowrl.config import Config, ConfigError, DataConfig, ModelConfig
from flowrl.data import load_prompts, load_train_prompts
from flowrl.pipelines.base import concat, select
from flowrl.pipelines.sd3 import SD3Adapter
from flowrl.plan import make_plan, ode_plan
from flowrl.resolve import math_changes, resolve_config
from flowrl.rollout import rollout, transition

# words the tiny tokenizers know (the shipped prompt sets'), so that each negative embeds differently
PROMPTS = ["a red apple on a table", "a photo of a cat", "a blue car in the city"]
NEGATIVES = ["a white house by the sea", "", "a green tree in a field"]


@pytest.fixture(scope="module")
def adapter():
    return SD3Adapter.from_config(ModelConfig(path="tiny", resolution=32, max_sequence_length=8))


def _noise(adapter, n, seed=0):
    return adapter.initial_noise(n, torch.Generator().manual_seed(seed))


def _direct_velocity(adapter, x, sigma, cond, negative, w):
    """CFG written out: one transformer forward of (negative, prompt) rows, v_u + w (v_c - v_u)."""
    rows = 2 * x.shape[0]
    out = adapter.transformer(
        hidden_states=torch.cat([x, x]),
        timestep=torch.full((rows,), sigma * 1000.0),
        encoder_hidden_states=torch.cat([negative["prompt_embeds"], cond["prompt_embeds"]]),
        pooled_projections=torch.cat([negative["pooled_prompt_embeds"], cond["pooled_prompt_embeds"]]),
        return_dict=False,
    )[0].float()
    v_u, v_c = out.chunk(2)
    return v_u + w * (v_c - v_u)


@torch.no_grad()
def test_no_negative_is_the_empty_prompt_bitwise(adapter):
    x, sigma, w = _noise(adapter, 3), 0.7, 4.5
    cond = adapter.encode_prompts(PROMPTS)
    assert set(cond) == {"prompt_embeds", "pooled_prompt_embeds"}  # no negative rows by default
    v = adapter.velocity(x, sigma, adapter.model_inputs(cond, w), w)
    empty = {k: t.expand(3, *t.shape[1:]) for k, t in adapter._encode([""]).items()}
    assert torch.equal(v, _direct_velocity(adapter, x, sigma, cond, empty, w))
    # negatives given, all "": the same embeddings, the same velocity
    with_empty = adapter.encode_prompts(PROMPTS, [""] * 3)
    assert torch.equal(with_empty["negative_prompt_embeds"], empty["prompt_embeds"])
    assert torch.equal(adapter.velocity(x, sigma, adapter.model_inputs(with_empty, w), w), v)
    # without CFG there is no negative branch
    assert torch.equal(
        adapter.model_inputs(adapter.encode_prompts(PROMPTS, NEGATIVES), 1.0)["prompt_embeds"],
        adapter.model_inputs(cond, 1.0)["prompt_embeds"],
    )


@torch.no_grad()
def test_a_rows_negative_changes_its_cfg_velocity_as_computed_directly(adapter):
    x, sigma, w = _noise(adapter, 3), 0.7, 4.5
    plain = adapter.velocity(x, sigma, adapter.model_inputs(adapter.encode_prompts(PROMPTS), w), w)
    cond = adapter.encode_prompts(PROMPTS, NEGATIVES)
    v = adapter.velocity(x, sigma, adapter.model_inputs(cond, w), w)
    embedded = [adapter._encode([n]) for n in NEGATIVES]  # each negative encoded on its own
    negative = {k: torch.cat([e[k] for e in embedded]) for k in embedded[0]}
    torch.testing.assert_close(cond["negative_prompt_embeds"], negative["prompt_embeds"], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(v, _direct_velocity(adapter, x, sigma, cond, negative, w), rtol=1e-5, atol=1e-5)
    for i in (0, 2):  # the rows with a negative of their own move; the "" row is the default's
        assert (v[i] - plain[i]).abs().max() > 1e-3
    torch.testing.assert_close(v[1], plain[1], rtol=1e-5, atol=1e-6)


@torch.no_grad()
def test_the_ode_rollout_matches_the_diffusers_pipeline_given_negative_prompts(adapter):
    noise = _noise(adapter, 3, seed=1)
    cond = adapter.encode_prompts(PROMPTS, NEGATIVES)
    traj = rollout(adapter, cond, ode_plan(adapter.sigmas(4)), noise, torch.arange(3), 4.5)
    ref = adapter.pipe(
        prompt=PROMPTS,
        negative_prompt=NEGATIVES,
        latents=noise.clone(),
        num_inference_steps=4,
        guidance_scale=4.5,
        max_sequence_length=8,
        output_type="latent",
    ).images
    torch.testing.assert_close(traj.final, ref, rtol=1e-4, atol=1e-4)


@torch.no_grad()
def test_select_and_concat_keep_each_row_with_its_negative(adapter):
    x, sigma, w = _noise(adapter, 3), 0.5, 4.5
    cond = adapter.encode_prompts(PROMPTS, NEGATIVES)
    v = adapter.velocity(x, sigma, adapter.model_inputs(cond, w), w)
    index = torch.tensor([2, 0, 0])  # reordered and repeated, as group expansion and keep-masks do
    picked = select(cond, index)
    assert set(picked) == set(cond)
    v_picked = adapter.velocity(x[index], sigma, adapter.model_inputs(picked, w), w)
    torch.testing.assert_close(v_picked, v[index], rtol=1e-5, atol=1e-6)
    both = concat([select(cond, torch.tensor([0])), select(cond, torch.tensor([1, 2]))])
    assert all(torch.equal(both[k], cond[k]) for k in cond)
    with pytest.raises(ValueError, match="different keys"):
        concat([cond, adapter.encode_prompts(PROMPTS)])


def test_rollout_and_recomputed_log_probs_agree_with_negatives(adapter):
    cond = adapter.encode_prompts(PROMPTS, NEGATIVES)
    gen = torch.Generator().manual_seed(0)
    traj = rollout(
        adapter, cond, make_plan(adapter.sigmas(3), "flow_sde", 0.7), _noise(adapter, 3), torch.arange(3), 4.5, gen
    )
    inputs = adapter.model_inputs(cond, 4.5)
    for j in traj.plan.trained_indices:
        out = transition(adapter, traj.plan, j, traj.states[:, j], inputs, 4.5, x_next=traj.states[:, j + 1])
        assert torch.equal(out.log_prob, traj.log_probs[:, j])


def test_jsonl_negative_prompts_and_the_default(tmp_path):
    path = tmp_path / "p.jsonl"
    rows = [
        {"prompt": "a cat", "negative_prompt": "a dog", "tag": "x"},
        {"prompt": "a cow"},
        {"prompt": "a hen", "negative_prompt": None},
        {"prompt": "an owl", "negative_prompt": ""},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [it.negative_prompt for it in load_prompts(str(path))] == ["a dog", None, None, ""]
    assert load_prompts(str(path))[0].metadata == {"tag": "x"}
    items = load_train_prompts(DataConfig(prompts=str(path), negative_prompt="a pig"))
    assert [it.negative_prompt for it in items] == ["a dog", "a pig", "a pig", ""]
    assert [it.negative_prompt for it in load_train_prompts(DataConfig(prompts=str(path)))] == ["a dog", "", "", ""]


def test_a_bad_negative_prompt_is_one_line_with_file_and_line(tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "a cat"}\n\n{"prompt": "a dog", "negative_prompt": ["blurry"]}\n')
    with pytest.raises(ConfigError) as info:
        load_prompts(str(path))
    text = str(info.value)
    assert "\n" not in text and f"{path}:3: 'negative_prompt' must be a string, got list" in text
    assert main(["validate", f"data.prompts={path}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.jsonl:3: 'negative_prompt' must be a string" in err[0]


def test_changing_the_negative_prompt_is_a_change_of_the_math():
    changed = resolve_config("tiny-cpu", ["data.negative_prompt=a dog"]).to_dict()
    assert any(
        c.startswith("data.negative_prompt ") for c in math_changes(resolve_config("tiny-cpu").to_dict(), changed)
    )
    assert Config().data.negative_prompt == ""


def test_the_trainer_rolls_out_and_trains_each_row_with_its_own_negative(tmp_path, tiny_cfg_overrides):
    from flowrl.logs import read_metrics
    from flowrl.trainer import Trainer

    path = tmp_path / "p.jsonl"
    path.write_text(
        "".join(
            json.dumps(r) + "\n"
            for r in [
                {"prompt": PROMPTS[0], "negative_prompt": NEGATIVES[0]},
                {"prompt": PROMPTS[1]},
                {"prompt": PROMPTS[2], "negative_prompt": NEGATIVES[2]},
            ]
        )
    )
    run = tmp_path / "run"
    cfg = resolve_config(
        "tiny-cpu",
        [
            f"output_dir={run}",
            f"data.prompts={path}",
            "data.negative_prompt=a red car",
            *tiny_cfg_overrides,
            "train.iterations=1",
            "sample.batch_size=3",
        ],
    )
    tr = Trainer(cfg)
    own = {PROMPTS[0]: NEGATIVES[0], PROMPTS[1]: "a red car", PROMPTS[2]: NEGATIVES[2]}
    batches, _ = tr.collect(0)
    for b in batches:  # every rollout row holds its prompt's negative
        expected = tr.adapter.encode_prompts(b.prompts, [own[p] for p in b.prompts])
        assert all(torch.equal(b.cond[k], expected[k]) for k in expected)
        assert "negative_prompt_embeds" in b.cond
    tr.train()
    [row] = read_metrics(run / "metrics.jsonl")
    assert row["policy/onpolicy_logp_diff"] == 0.0  # the update's forward used the rollout's negatives


def test_flowrl_sample_takes_a_negative_prompt(tmp_path):
    args = ["sample", "tiny-cpu", "--prompt", "a red cat", "--num", "1", "--steps", "2", "--out", str(tmp_path)]
    assert main(args) == 0
    assert main([*args, "--negative-prompt", "a green tree"]) == 0
    plain, negative = (json.loads((tmp_path / n / "sample.json").read_text()) for n in ("0001", "0002"))
    assert plain["negative_prompt"] == "" and negative["negative_prompt"] == "a green tree"
    a, b = (np.asarray(Image.open(tmp_path / n / "0000.png"), dtype=np.int16) for n in ("0001", "0002"))
    assert np.abs(a - b).max() > 0

"""The ``audiobox_aesthetics`` reward (reward_models/audiobox.py) on tiny random stand-ins of the real
architecture. Hand-checked: 10 s chunking and its length weights, the de-normalisation of each axis, the
mean over the chosen axes, resampling to 16 kHz and the mono mix, the frame padding rule. Checked against
the reference: parameter names and shapes of ``audiobox-aesthetics`` 0.0.4's ``AesMultiOutput``, the
WavLM encoder against transformers' ``WavLMModel``, and end-to-end ratings computed once with the real
0.0.4 code (and torchaudio 2.11.1; neither is a dependency) on a deterministically filled tiny model."""

import json
import math
import re

import pytest
import torch

from flowrl.reward_models import RewardError, build_reward, check_reward_args, list_rewards
from flowrl.reward_models import audiobox as ab
from flowrl.reward_models.audiobox import AXES, AudioboxAesthetics, AudioboxAestheticsReward, chunk_audio
from flowrl.reward_models.conformance import run_conformance

pytestmark = pytest.mark.usefixtures("one_thread")  # toy-sized ops: a second thread mostly waits

CONV = [(8, 10, 5)] + [(8, 3, 2)] * 4 + [(8, 2, 2)] * 2  # the real strides (320 samples a frame), 8 channels
TINY = {
    "conv_layers": CONV,
    "dim": 16,
    "ffn": 32,
    "layers": 2,
    "heads": 2,
    "conv_pos": 4,
    "conv_pos_groups": 2,
    "proj_num_layer": 2,
}
# the released target_transform as reported for the hub's config.json (a third-party converter; unverified)
TARGET = {
    "CE": {"mean": 5.06865, "std": 1.93029},
    "CU": {"mean": 5.73633, "std": 1.75669},
    "PC": {"mean": 3.18591, "std": 1.86637},
    "PQ": {"mean": 6.57505, "std": 1.51466},
}


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return AudioboxAesthetics(TINY).eval()


def _call(reward, audio, rate):
    return reward({"audio": audio, "sample_rate": rate}, [""] * len(audio), [{} for _ in audio])


def _noise(batch, seconds, rate, channels=1, seed=0):
    return torch.randn(batch, channels, int(seconds * rate), generator=torch.Generator().manual_seed(seed)) * 0.2


def _fill(model):
    """Deterministic parameters by sorted name (as filled when the reference numbers were computed)."""
    state = model.state_dict()
    with torch.no_grad():
        for i, name in enumerate(sorted(state)):
            t = state[name]
            t.copy_((0.25 * torch.sin(torch.arange(t.numel(), dtype=torch.float64) * 0.7 + i)).reshape(t.shape))
    return model


# ---------------------------------------------------------------------------------------- contract
def test_registered_with_its_contract(tiny):
    assert "audiobox_aesthetics" in list_rewards()
    check_reward_args("audiobox_aesthetics", {"checkpoint": "/w/checkpoint.pt", "axes": ["PQ", "CE"]})
    reward = AudioboxAestheticsReward.from_components(tiny, TARGET, device="cpu")
    assert reward.modality == "audio" and reward.score_range is None and reward.axes == AXES
    assert AXES == ("CE", "CU", "PC", "PQ")
    assert (ab.MODEL_RATE, ab.CHUNK_SECONDS, ab.HUB_ID, ab.CHECKPOINT_FILE) == (
        16000,
        10,
        "facebook/audiobox-aesthetics",
        "checkpoint.pt",
    )


def test_tiny_stand_in_rates_a_batch(tiny):
    reward = AudioboxAestheticsReward.from_components(tiny, TARGET, device="cpu")
    out = _call(reward, _noise(3, 2.0, 24000, channels=2), 24000)
    assert out.scores.shape == (3,) and out.scores.dtype == torch.float32 and torch.isfinite(out.scores).all()
    for axis in AXES:
        assert out.details[axis].shape == (3,) and torch.isfinite(out.details[axis]).all()
    assert out.details["chunks"].tolist() == [1, 1, 1]
    mean = torch.stack([out.details[a] for a in AXES]).mean(dim=0)
    assert torch.allclose(out.scores, mean, atol=1e-6)  # the default: the mean of the four
    assert torch.allclose(
        _call(
            AudioboxAestheticsReward.from_components(tiny, TARGET, axes="PQ", device="cpu"),
            _noise(3, 2.0, 24000, channels=2),
            24000,
        ).scores,
        out.details["PQ"],
    )


def test_matches_the_real_audiobox_code_on_a_filled_tiny_model():
    # audiobox_aesthetics 0.0.4 (AesMultiOutput with its WavLMConfig cut to these sizes, torchaudio resample,
    # make_inference_batch, Normalize.inverse, the weighted chunk mean) gave these for the same parameters
    model = _fill(AudioboxAesthetics(TINY)).eval()
    rate = 24000
    t = torch.arange(int(12.5 * rate), dtype=torch.float64) / rate
    left = 0.4 * torch.sin(2 * math.pi * 220 * t) + 0.1 * torch.sin(2 * math.pi * 3100 * t)
    right = 0.3 * torch.sin(2 * math.pi * 440 * t) * torch.sin(2 * math.pi * 0.5 * t)
    audio = torch.stack([left, right]).float()[None]  # 12.5 s stereo at 24 kHz: chunks of 10 s and 2.5 s
    out = _call(AudioboxAestheticsReward.from_components(model, TARGET, device="cpu"), audio, rate)
    expected = {"CE": 4.955012321472168, "CU": 5.83328104019165, "PC": 3.424219846725464, "PQ": 6.727026462554932}
    for axis, value in expected.items():
        assert out.details[axis].item() == pytest.approx(value, abs=1e-4), axis
    assert out.details["chunks"].tolist() == [2]


# ------------------------------------------------------------------------------------ preprocessing
def test_chunks_of_10_s_weighted_by_their_length():
    rate = 16000
    clips = [torch.ones(25 * rate), torch.ones(10 * rate), torch.ones(3 * rate)]
    chunks, masks, weights, owners = chunk_audio(clips)
    assert chunks.shape == masks.shape == (5, 10 * rate)
    assert owners.tolist() == [0, 0, 0, 1, 2]
    assert weights.tolist() == [1.0, 1.0, 0.5, 1.0, 0.3]
    assert masks.sum(dim=1).tolist() == [160000, 160000, 80000, 160000, 48000]
    assert torch.all(chunks[2, 80000:] == 0) and torch.all(chunks[2, :80000] == 1)  # zero padding at the end


def test_resampled_to_16_khz_and_mixed_to_mono(tiny):
    reward = AudioboxAestheticsReward.from_components(tiny, TARGET, device="cpu")
    for rate in (24000, 48000, 16000):
        t = torch.arange(rate) / rate
        tone = 0.5 * torch.sin(2 * math.pi * 440 * t)
        mono = reward.mono_16k({"audio": torch.stack([tone, tone])[None], "sample_rate": rate})
        assert len(mono) == 1 and mono[0].shape == (16000,)
        expected = 0.5 * torch.sin(2 * math.pi * 440 * torch.arange(16000) / 16000)
        assert torch.allclose(mono[0][200:-200], expected[200:-200], atol=2e-3), rate  # away from the edges
        silent = reward.mono_16k({"audio": torch.stack([tone, -tone])[None], "sample_rate": rate})
        assert silent[0].abs().max() < 1e-6  # left and right cancel: the mix is the mean of the channels


def test_de_normalisation_and_chunk_weights_by_hand(tiny, monkeypatch):
    reward = AudioboxAestheticsReward.from_components(tiny, TARGET, device="cpu", chunk_batch=2)
    # normalised predictions per chunk: clip 0 (25 s) -> chunks 1, -1, 2; clip 1 (4 s) -> 0.5
    values = torch.tensor([1.0, -1.0, 2.0, 0.5])
    offsets = {"CE": 0.0, "CU": 1.0, "PC": -1.0, "PQ": 0.5}
    seen = []

    def forward(wav, valid):
        start = sum(len(w) for w, _ in seen)
        seen.append((wav, valid))
        return {a: values[start : start + len(wav)] + offsets[a] for a in AXES}

    monkeypatch.setattr(reward.model, "forward", forward)
    audio = torch.zeros(2, 1, 25 * 16000)
    audio[0] = 0.1
    out = _call(reward, audio[:1], 16000)
    assert out.details["chunks"].tolist() == [3]
    for axis in AXES:
        mean, std = TARGET[axis]["mean"], TARGET[axis]["std"]
        rated = [(v + offsets[axis]) * std + mean for v in (1.0, -1.0, 2.0)]
        expected = (rated[0] * 1.0 + rated[1] * 1.0 + rated[2] * 0.5) / 2.5
        assert out.details[axis].item() == pytest.approx(expected, abs=1e-5)
    assert [len(w) for w, _ in seen] == [2, 1]  # chunk_batch chunks a forward
    assert seen[1][1].sum().item() == 5 * 16000  # the last chunk: 5 s real, 5 s masked
    # CE of clip 0 by hand (mean 5.06865, std 1.93029): (6.99894 + 3.13836 + 0.5 * 8.92923) / 2.5
    assert out.details["CE"].item() == pytest.approx(
        (1.0 * 1.93029 + 5.06865 - 1.0 * 1.93029 + 5.06865 + 0.5 * (2.0 * 1.93029 + 5.06865)) / 2.5, abs=1e-5
    )
    seen.clear()
    short = _call(reward, torch.zeros(1, 1, 4 * 16000), 16000)  # one chunk of weight 0.4: its own value
    assert short.details["PQ"].item() == pytest.approx((1.0 + 0.5) * 1.51466 + 6.57505, abs=1e-5)
    pq_ce = AudioboxAestheticsReward.from_components(tiny, TARGET, axes=["PQ", "CE"], device="cpu")
    monkeypatch.setattr(pq_ce.model, "forward", lambda wav, valid: {a: torch.zeros(len(wav)) for a in AXES})
    assert _call(pq_ce, torch.zeros(1, 1, 16000), 16000).scores.item() == pytest.approx((6.57505 + 5.06865) / 2)


def test_frame_padding_follows_fairseqs_rule(tiny):
    valid = torch.zeros(1, 160000, dtype=torch.bool)
    valid[0, :1000] = True  # 1000 real samples of a 10 s chunk
    with torch.no_grad():
        states, pad = tiny.wavlm_model(torch.zeros(1, 160000), ~valid)
    assert pad.shape == (1, 499)  # 160000 samples -> 499 frames; the mask: 320 samples a frame, tail dropped
    assert (~pad).sum().item() == 4  # frame 3 (samples 960..1279) still holds real samples
    assert len(states) == 3 and states[0].shape == (1, 499, 16)  # layers + 1 hidden states


def test_wavlm_encoder_matches_transformers_wavlm(tiny):
    from transformers import WavLMConfig, WavLMModel

    ref = WavLMModel(
        WavLMConfig(
            hidden_size=16,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=32,
            conv_dim=(8,) * 7,
            conv_kernel=(10, 3, 3, 3, 3, 2, 2),
            conv_stride=(5, 2, 2, 2, 2, 2, 2),
            num_conv_pos_embeddings=4,
            num_conv_pos_embedding_groups=2,
            feat_extract_norm="group",
            do_stable_layer_norm=False,
            conv_bias=False,
            num_buckets=320,
            max_bucket_distance=800,
        )
    ).eval()
    renames = [
        (r"^feature_extractor\.conv_layers\.(\d+)\.0\.", r"feature_extractor.conv_layers.\1.conv."),
        (r"^feature_extractor\.conv_layers\.0\.2\.", "feature_extractor.conv_layers.0.layer_norm."),
        (r"^layer_norm\.", "feature_projection.layer_norm."),
        (r"^post_extract_proj", "feature_projection.projection"),
        (r"^mask_emb", "masked_spec_embed"),
        (r"pos_conv\.0\.weight_g", "pos_conv_embed.conv.parametrizations.weight.original0"),
        (r"pos_conv\.0\.weight_v", "pos_conv_embed.conv.parametrizations.weight.original1"),
        (r"pos_conv\.0\.bias", "pos_conv_embed.conv.bias"),
        (r"self_attn\.relative_attention_bias", "attention.rel_attn_embed"),
        (r"self_attn\.grep_linear", "attention.gru_rel_pos_linear"),
        (r"self_attn\.grep_a", "attention.gru_rel_pos_const"),
        (r"self_attn_layer_norm", "layer_norm"),
        (r"self_attn\.", "attention."),
        (r"\.fc1\.", ".feed_forward.intermediate_dense."),
        (r"\.fc2\.", ".feed_forward.output_dense."),
    ]
    state = {}
    for key, value in tiny.wavlm_model.state_dict().items():
        for old, new in renames:
            key = re.sub(old, new, key)
        state[key] = value
    ref.load_state_dict(state, strict=True)
    wav = torch.randn(2, 16000, generator=torch.Generator().manual_seed(3)) * 0.3
    with torch.no_grad():
        mine, _ = tiny.wavlm_model(wav, torch.zeros(2, 16000, dtype=torch.bool))
        theirs = ref(wav, output_hidden_states=True).hidden_states
    assert len(mine) == len(theirs) == 3
    for a, b in zip(mine, theirs):
        assert torch.allclose(a, b, atol=1e-5)


# ------------------------------------------------------------------------- against the real model's names
# AesMultiOutput of audiobox-aesthetics 0.0.4 (model/aes.py, model/wavlm.py, model/utils.py create_mlp_block)
# with the released sizes; the heads as the hub's config.json (proj_num_layer 5, proj_ln true; reported by a
# third-party converter that also counts 324 tensors in model.safetensors). checkpoint.pt has them with "model.".
REAL_NAMES = {
    "wavlm_model.feature_extractor.conv_layers.0.0.weight": (512, 1, 10),
    "wavlm_model.feature_extractor.conv_layers.0.2.weight": (512,),
    "wavlm_model.feature_extractor.conv_layers.0.2.bias": (512,),
    "wavlm_model.feature_extractor.conv_layers.4.0.weight": (512, 512, 3),
    "wavlm_model.feature_extractor.conv_layers.6.0.weight": (512, 512, 2),
    "wavlm_model.layer_norm.weight": (512,),
    "wavlm_model.post_extract_proj.weight": (768, 512),
    "wavlm_model.post_extract_proj.bias": (768,),
    "wavlm_model.mask_emb": (768,),
    "wavlm_model.encoder.pos_conv.0.weight_g": (1, 1, 128),
    "wavlm_model.encoder.pos_conv.0.weight_v": (768, 48, 128),
    "wavlm_model.encoder.pos_conv.0.bias": (768,),
    "wavlm_model.encoder.layer_norm.weight": (768,),
    "wavlm_model.encoder.layers.0.self_attn.relative_attention_bias.weight": (320, 12),
    "wavlm_model.encoder.layers.0.self_attn.grep_linear.weight": (8, 64),
    "wavlm_model.encoder.layers.11.self_attn.grep_linear.bias": (8,),
    "wavlm_model.encoder.layers.11.self_attn.grep_a": (1, 12, 1, 1),
    "wavlm_model.encoder.layers.0.self_attn.k_proj.weight": (768, 768),
    "wavlm_model.encoder.layers.0.self_attn.q_proj.bias": (768,),
    "wavlm_model.encoder.layers.0.self_attn.out_proj.weight": (768, 768),
    "wavlm_model.encoder.layers.5.self_attn_layer_norm.weight": (768,),
    "wavlm_model.encoder.layers.5.fc1.weight": (3072, 768),
    "wavlm_model.encoder.layers.5.fc2.weight": (768, 3072),
    "wavlm_model.encoder.layers.5.final_layer_norm.bias": (768,),
    "proj_layer.CE.0.weight": (768, 768),
    "proj_layer.CE.1.weight": (768,),  # LayerNorm
    "proj_layer.PQ.9.bias": (768,),
    "proj_layer.PQ.12.weight": (1, 768),
    "proj_layer.PC.12.bias": (1,),
    "layer_weights.CU": (13,),
}


def _pattern(name):
    return re.sub(r"\.\d+\.", ".N.", name)


def test_the_released_sizes_build_the_real_names_and_shapes():
    with torch.device("meta"):
        state = AudioboxAesthetics().state_dict()
    for name, shape in REAL_NAMES.items():
        assert name in state, name
        assert tuple(state[name].shape) == shape, name
    assert len(state) == 324
    assert [k for k in state if "relative_attention_bias" in k] == [
        "wavlm_model.encoder.layers.0.self_attn.relative_attention_bias.weight"
    ]  # layer 0 only
    with torch.device("meta"):  # the code's own head default: one Linear
        assert {
            k
            for k in AudioboxAesthetics({"proj_num_layer": 1, "proj_ln": False}).state_dict()
            if k.startswith("proj_layer.CE")
        } == {"proj_layer.CE.0.weight", "proj_layer.CE.0.bias"}


def test_the_released_sizes_run_on_the_meta_device():
    with torch.device("meta"):  # shapes only: three 10 s chunks
        out = AudioboxAesthetics().eval()(torch.empty(3, 160000), torch.ones(3, 160000, dtype=torch.bool))
    assert {axis: tuple(v.shape) for axis, v in out.items()} == dict.fromkeys(AXES, (3,))


def test_the_tiny_stand_in_has_the_real_names(tiny):
    with torch.device("meta"):
        real = {_pattern(k) for k in AudioboxAesthetics({"proj_num_layer": 2, "proj_ln": True}).state_dict()}
    assert {_pattern(k) for k in tiny.state_dict()} == real


def _checkpoint_pt(model, path, **cfg):
    model_cfg = {
        "proj_num_layer": 2,
        "proj_ln": True,
        "proj_act_fn": "gelu",
        "proj_dropout": 0.0,
        "nth_layer": 3,
        "use_weighted_layer_sum": True,
        "precision": "32",
        "normalize_embed": True,
        "output_dim": 1,
        **cfg,
    }
    torch.save(
        {
            "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
            "model_cfg": model_cfg,
            "target_transform": TARGET,
        },
        path,
    )


def test_checkpoint_pt_round_trip(tiny, tmp_path):
    path = tmp_path / "checkpoint.pt"
    _checkpoint_pt(tiny, path)
    audio = _noise(2, 1.5, 16000)
    expected = _call(AudioboxAestheticsReward.from_components(tiny, TARGET, device="cpu"), audio, 16000).scores
    for spec in (str(path), str(tmp_path)):  # the file or its folder
        loaded = AudioboxAestheticsReward(
            checkpoint=spec, config={k: v for k, v in TINY.items() if k != "proj_num_layer"}, device="cpu"
        )
        assert torch.equal(_call(loaded, audio, 16000).scores, expected)
    # the checkpoint's model_cfg decides the heads: 3 layers here although config says 2
    three = AudioboxAesthetics(dict(TINY, proj_num_layer=3)).eval()
    _checkpoint_pt(three, path, proj_num_layer=3)
    head = AudioboxAestheticsReward(checkpoint=str(path), config=TINY, device="cpu").model.proj_layer.CE
    assert sum(isinstance(m, torch.nn.Linear) for m in head) == 3 and len(head) == 7  # (Linear, LN, GELU) x 2, Linear


def test_hub_folder_round_trip(tiny, tmp_path):
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in tiny.state_dict().items()}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "proj_num_layer": 2,
                "proj_ln": True,
                "proj_act_fn": "gelu",
                "proj_dropout": 0,
                "nth_layer": 3,
                "use_weighted_layer_sum": True,
                "precision": "32",
                "normalize_embed": True,
                "output_dim": 1,
                "target_transform": TARGET,
            }
        )
    )
    audio = _noise(1, 1.0, 16000)
    loaded = AudioboxAestheticsReward(checkpoint=str(tmp_path), config=TINY, device="cpu")
    assert torch.equal(
        _call(loaded, audio, 16000).scores,
        _call(AudioboxAestheticsReward.from_components(tiny, TARGET, device="cpu"), audio, 16000).scores,
    )


@pytest.mark.parametrize(
    "change,pattern",
    [
        ({"target_transform": None}, "holds no target_transform"),
        (
            {"target_transform": {"CE": {"mean": 1.0, "std": 1.0}}},
            r"target_transform\.CU needs numbers 'mean' and 'std'",
        ),
        ({"model_cfg": {"nth_layer": 13}}, r"nth_layer=13 but the encoder has 2 layers \(expected 3\)"),
        ({"model_cfg": {"proj_act_fn": "relu"}}, "proj_act_fn='relu'"),
        ({"state_dict": {}}, "do not fit the model: missing"),
    ],
)
def test_bad_checkpoints_are_one_line(tiny, tmp_path, change, pattern):
    ckpt = {
        "state_dict": {f"model.{k}": v for k, v in tiny.state_dict().items()},
        "model_cfg": {"proj_num_layer": 2, "proj_ln": True, "nth_layer": 3},
        "target_transform": TARGET,
    }
    ckpt.update(change)
    path = tmp_path / "checkpoint.pt"
    torch.save(ckpt, path)
    with pytest.raises(RewardError, match=pattern) as err:
        AudioboxAestheticsReward(checkpoint=str(path), config=TINY, device="cpu")
    assert "\n" not in str(err.value) and str(err.value).startswith("audiobox_aesthetics: ")


def test_missing_weights_are_one_line(tmp_path):
    # the default: the hub id's checkpoint.pt, offline here (HF_HUB_OFFLINE=1) and not cached
    with pytest.raises(
        RewardError,
        match=r"^audiobox_aesthetics: cannot get the checkpoint 'checkpoint\.pt' from "
        r"'facebook/audiobox-aesthetics'",
    ) as err:
        build_reward("audiobox_aesthetics")
    assert "\n" not in str(err.value)
    with pytest.raises(
        RewardError, match=r"^audiobox_aesthetics: checkpoint '/nowhere/checkpoint\.pt' does not exist"
    ) as err:
        AudioboxAestheticsReward(checkpoint="/nowhere/checkpoint.pt")
    assert "\n" not in str(err.value) and ab.CHECKPOINT_URL in str(err.value)
    with pytest.raises(RewardError, match="holds neither checkpoint.pt nor model.safetensors"):
        AudioboxAestheticsReward(checkpoint=str(tmp_path))


@pytest.mark.parametrize(
    "axes,pattern",
    [
        ("XX", r"axes has 'XX'; allowed: CE, CU, PC, PQ"),
        (["PQ", "PQ"], "names an axis twice"),
        ([], "expected a list of CE, CU, PC, PQ"),
        (3, "expected a list of CE, CU, PC, PQ"),
    ],
)
def test_bad_axes_are_refused_before_any_weights_load(axes, pattern):
    with pytest.raises(RewardError, match=pattern):
        AudioboxAestheticsReward(checkpoint="/nowhere/checkpoint.pt", axes=axes)


def test_axes_forms(tiny):
    for axes, expected in [("PQ", ("PQ",)), ("CE, PQ", ("CE", "PQ")), (["CU"], ("CU",))]:
        assert AudioboxAestheticsReward.from_components(tiny, TARGET, axes=axes, device="cpu").axes == expected


@pytest.mark.parametrize(
    "media,pattern",
    [
        ({"audio": torch.zeros(1, 1, 0), "sample_rate": 16000}, "the audio is empty"),
        ({"audio": torch.full((1, 1, 100), float("nan")), "sample_rate": 16000}, "the audio holds NaN or inf"),
        (torch.zeros(1, 100), "sample rate is unknown"),
        (torch.zeros(100), r"expects audio \(B, C, N\) or \(B, N\)"),
    ],
)
def test_bad_media_is_one_line(tiny, media, pattern):
    reward = AudioboxAestheticsReward.from_components(tiny, TARGET, device="cpu")
    with pytest.raises(RewardError, match=pattern) as err:
        reward(media, [""], [{}])
    assert "\n" not in str(err.value)


def test_bad_arguments_and_config_are_one_line(tiny):
    with pytest.raises(RewardError, match=r"chunk_batch=0; expected a positive integer"):
        AudioboxAestheticsReward.from_components(tiny, TARGET, chunk_batch=0)
    with pytest.raises(RewardError, match=r"target_transform\.PQ = mean 1\.0, std 0\.0"):
        AudioboxAestheticsReward.from_components(tiny, dict(TARGET, PQ={"mean": 1.0, "std": 0.0}))
    with pytest.raises(RewardError, match=r"config\.width is not an Audiobox size"):
        AudioboxAesthetics({"width": 3})
    with pytest.raises(RewardError, match=r"config\.dim=15 must be a multiple of config\.heads=2"):
        AudioboxAesthetics(dict(TINY, dim=15))
    with pytest.raises(RewardError, match=r"config\.conv_layers must be a list of \(channels, kernel, stride\)"):
        AudioboxAesthetics(dict(TINY, conv_layers=[(8, 10)]))


def test_passes_the_conformance_checks(tiny):
    report = run_conformance(
        AudioboxAestheticsReward.from_components(tiny, TARGET, device="cpu"), "audiobox_aesthetics", batch=2
    )
    assert all(check.ok for check in report.checks), report.checks

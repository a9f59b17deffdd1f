"""Joint latents (a mapping of modalities, ``flowrl.latents``) through the core: the joint step's log-prob is the
flat one, per-modality step kinds and noise levels, a frozen (deterministic, untrained) modality, trajectories
that select, keep and move joint states, and a whole Flow-GRPO run on a two-modality toy adapter whose video and
audio velocities attend to each other."""

import math
import zlib
from pathlib import Path

import pytest
import torch

from flowrl import latents
from flowrl.pipelines.base import cfg_guidance
from flowrl.plan import make_plan
from flowrl.resolve import resolve_config
from flowrl.reward_models.base import RewardOutput
from flowrl.rollout import rollout, transition
from flowrl.sde import flow_sde, flow_sde_g, joint_step

VIDEO, AUDIO = (4, 3, 2, 2), (6, 5)  # one sample's video latent (C, F, H, W) and audio latent (L, D)


class ToyJointTransformer(torch.nn.Module):
    """v_video and v_audio from both modalities: each sees the other's mean (the cross-modal path)."""

    def __init__(self):
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.video = torch.nn.Parameter(torch.randn(4, 4, generator=gen) * 0.3)
        self.audio = torch.nn.Parameter(torch.randn(5, 5, generator=gen) * 0.3)
        self.a2v = torch.nn.Parameter(torch.randn(4, generator=gen) * 0.3)
        self.v2a = torch.nn.Parameter(torch.randn(5, generator=gen) * 0.3)
        self.text = torch.nn.Parameter(torch.randn(8, 4, generator=gen) * 0.3)
        self.config = {}

    def forward(self, hidden_states, audio_hidden_states, timestep, encoder_hidden_states, return_dict=False):
        b = hidden_states.shape[0]
        t = timestep.reshape(b, 1)
        text = encoder_hidden_states @ self.text  # (b, 4)
        v = torch.einsum("bcfhw,cd->bdfhw", hidden_states, self.video)
        v = v + (audio_hidden_states.mean(dim=(1, 2)).reshape(b, 1) * self.a2v + text * t).reshape(b, 4, 1, 1, 1)
        a = audio_hidden_states @ self.audio + (hidden_states.mean(dim=(1, 2, 3, 4)).reshape(b, 1) * self.v2a)[:, None]
        return (v, a)

    def save_config(self, directory):  # what the trainer's full fine-tuning export calls
        Path(directory).mkdir(parents=True, exist_ok=True)
        (Path(directory) / "config.json").write_text("{}")


class ToyJointAdapter:
    """A two-modality adapter on the contract: joint latents {"video", "audio"}, CFG, audio-video media."""

    media_kind = "audio_video"
    lora_target_modules = ["video"]
    attention_backpropagates = True

    def __init__(self, device="cpu"):
        self.device = torch.device(device)
        self.pipe = None
        self.transformer_module = ToyJointTransformer()
        self.compute_dtype = torch.float32

    @classmethod
    def from_config(cls, model_cfg, device="cpu", seed=0):
        return cls(device)

    @property
    def transformer(self):
        return self.transformer_module

    def guidance(self, scale):
        return cfg_guidance(scale)

    def encode_prompts(self, prompts, negative_prompts=None):
        rows = [torch.randn(1, 8, generator=torch.Generator().manual_seed(zlib.crc32(p.encode()))) for p in prompts]
        return {"prompt_embeds": torch.cat(rows)}

    def negative_conditioning(self, n):
        return {"prompt_embeds": torch.zeros(n, 8)}

    def sigmas(self, num_steps):
        return torch.linspace(1, 0, num_steps + 1)

    def initial_noise(self, n, generator):
        return {
            "video": torch.randn((n, *VIDEO), generator=generator),
            "audio": torch.randn((n, *AUDIO), generator=generator),
        }

    def model_inputs(self, cond, guidance_scale):
        embeds = cond["prompt_embeds"]
        if guidance_scale != 1.0:
            embeds = torch.cat([self.negative_conditioning(len(embeds))["prompt_embeds"], embeds])
        return {"prompt_embeds": embeds}

    def velocity(self, x, sigma, inputs, guidance_scale, model=None):
        use_cfg = guidance_scale != 1.0
        video, audio = x["video"], x["audio"]
        n = video.shape[0]
        if use_cfg:
            video, audio = torch.cat([video, video]), torch.cat([audio, audio])
        t = (
            torch.as_tensor(sigma, dtype=torch.float32).expand(n)
            if torch.as_tensor(sigma).numel() == 1
            else torch.as_tensor(sigma, dtype=torch.float32)
        )
        t = torch.cat([t, t]) if use_cfg else t
        v, a = (model or self.transformer)(
            hidden_states=video,
            audio_hidden_states=audio,
            timestep=t,
            encoder_hidden_states=inputs["prompt_embeds"],
            return_dict=False,
        )
        if use_cfg:
            (vu, vc), (au, ac) = v.chunk(2), a.chunk(2)
            v, a = vu + guidance_scale * (vc - vu), au + guidance_scale * (ac - au)
        return {"video": v.float(), "audio": a.float()}

    def decode(self, lat):
        video = (
            torch.sigmoid(lat["video"][:, :3].permute(0, 2, 1, 3, 4)).repeat_interleave(4, -1).repeat_interleave(4, -2)
        )
        audio = torch.tanh(lat["audio"].flatten(1))[:, None]  # (B, 1, 30)
        return {"video": video, "fps": 8.0, "audio": audio, "sample_rate": 30}

    def clear_cache(self):
        pass


class BrightAndLoud:
    """A toy audio-video reward: mean brightness of the frames plus mean |audio|."""

    modality = "audio_video"

    def __call__(self, media, prompts, metadata):
        return RewardOutput(scores=media["video"].mean(dim=(1, 2, 3, 4)) + media["audio"].abs().mean(dim=(1, 2)))


@pytest.fixture()
def toy():
    return ToyJointAdapter()


def test_the_joint_log_prob_is_the_flat_tensors():
    """One std for both modalities: the joint step's log-prob is flow_sde's on the two flattened into one tensor
    (the same draws), and its std per modality is Flow-GRPO's g sqrt(|dt|)."""
    gen = torch.Generator().manual_seed(0)
    x = {"video": torch.randn(3, *VIDEO, generator=gen), "audio": torch.randn(3, *AUDIO, generator=gen)}
    v = {k: torch.randn_like(t) for k, t in x.items()}
    out = joint_step(
        {"video": "flow_sde", "audio": "flow_sde"},
        v,
        x,
        0.8,
        0.6,
        {"video": 0.7, "audio": 0.7},
        ("video", "audio"),
        generator=torch.Generator().manual_seed(1),
    )
    flat = lambda d: torch.cat([d["video"].flatten(1), d["audio"].flatten(1)], dim=1)  # noqa: E731
    ref = flow_sde(flat(v), flat(x), 0.8, 0.6, 0.7, x_next=flat(out.x_next))
    assert torch.allclose(out.log_prob, ref.log_prob, rtol=1e-6, atol=1e-6)
    g = flow_sde_g(0.8, 0.7)
    assert torch.allclose(out.std["audio"], torch.full((3,), g * math.sqrt(0.2)))
    # scoring what was drawn gives the drawn log-prob exactly
    again = joint_step(
        {"video": "flow_sde", "audio": "flow_sde"},
        v,
        x,
        0.8,
        0.6,
        {"video": 0.7, "audio": 0.7},
        ("video", "audio"),
        x_next=out.x_next,
    )
    assert torch.equal(again.log_prob, out.log_prob)


def test_per_modality_noise_levels_and_a_frozen_deterministic_modality(toy):
    """The audio at its own noise level; then audio as an untrained ODE modality: the same audio in every draw,
    and a log-prob over the video elements alone; recomputed transitions give the rollout's log-probs."""
    cond = toy.encode_prompts(["a", "b"])
    plan = make_plan(toy.sigmas(4), "flow_sde", 0.7)
    levels = torch.tensor([0.3, 0.3, 0.3, 0.3])
    two = plan.__class__(**{**plan.__dict__, "modality_noise_levels": {"audio": levels}})
    noise = toy.initial_noise(2, torch.Generator().manual_seed(0))
    traj = rollout(toy, cond, two, noise, torch.arange(2), 4.5, torch.Generator().manual_seed(1))
    assert latents.num_slots(traj.states) == 5 and traj.states["audio"].shape == (2, 5, *AUDIO)
    inputs = toy.model_inputs(cond, 4.5)
    for j in two.trained_indices:
        x, x_next = traj.pair(j)
        out = transition(toy, two, j, x, inputs, 4.5, x_next=x_next)
        assert torch.allclose(out.log_prob, traj.log_probs[:, j], atol=1e-6)
        assert torch.allclose(
            out.std["audio"],
            torch.full(
                (2,),
                flow_sde_g(float(plan.sigma[j]), 0.3, plan.sigma_at_one)
                * math.sqrt(float(plan.sigma[j] - plan.sigma_next[j])),
            ),
        )
    frozen = plan.__class__(
        **{**plan.__dict__, "modality_kinds": {"audio": ("ode",) * 4}, "trained_modalities": ("video",)}
    )
    a = rollout(toy, cond, frozen, noise, torch.arange(2), 4.5, torch.Generator().manual_seed(1))
    x, x_next = a.pair(0)
    v = toy.velocity(x, float(plan.sigma[0]), inputs, 4.5)
    # the audio takes the Euler step of its (cross-modal) velocity: no noise, whatever the draw
    assert torch.allclose(x_next["audio"], x["audio"] + float(plan.sigma_next[0] - plan.sigma[0]) * v["audio"])
    b = rollout(toy, cond, frozen, noise, torch.arange(2), 4.5, torch.Generator().manual_seed(2))
    assert torch.equal(a.pair(0)[1]["audio"], b.pair(0)[1]["audio"])  # the same first audio step in every draw
    out = transition(toy, frozen, 0, x, inputs, 4.5, x_next=x_next)
    assert set(out.mean) == {"video"} and torch.allclose(out.log_prob, a.log_probs[:, 0], atol=1e-6)
    video_only = flow_sde(
        v["video"],
        x["video"],
        float(plan.sigma[0]),
        float(plan.sigma_next[0]),
        0.7,
        sigma_at_one=plan.sigma_at_one,
        x_next=x_next["video"],
    )
    assert torch.allclose(out.log_prob, video_only.log_prob, atol=1e-6)
    with pytest.raises(ValueError, match="modality 'audio' trains, but some of its trained transitions are 'ode'"):
        plan.__class__(**{**plan.__dict__, "modality_kinds": {"audio": ("ode",) * 4}, "trained_modalities": ("audio",)})


def test_trajectories_of_joint_states_keep_select_and_move(toy):
    cond = toy.encode_prompts(["a", "b", "c"])
    plan = make_plan(
        toy.sigmas(6), "flow_sde", 0.7, window_size=2, window_range=(1, 4), rng=__import__("random").Random(0)
    )
    noise = toy.initial_noise(3, torch.Generator().manual_seed(0))
    full = rollout(toy, cond, plan, noise, torch.arange(3), 1.0, torch.Generator().manual_seed(1))
    lean = rollout(
        toy, cond, plan, noise, torch.arange(3), 1.0, torch.Generator().manual_seed(1), keep_all_states=False
    )
    kept = full.trained_only()
    s = plan.trained_indices[0]
    assert kept.state_index == (s, s + 1, s + 2) and kept.states["video"].shape[1] == 3
    assert all(torch.equal(lean.final[k], full.final[k]) for k in ("video", "audio"))
    for j in plan.trained_indices:
        for a, b in zip(kept.pair(j), full.pair(j)):
            assert all(torch.equal(a[k], b[k]) for k in ("video", "audio"))
    one = kept.select(torch.tensor([2]))
    assert len(one) == 1 and torch.equal(one.pair(s)[1]["audio"], full.states["audio"][2:, s + 1])
    moved = kept.states_to(torch.device("meta"))
    assert moved.states["audio"].device.type == "meta" and moved.log_probs.device.type == "cpu"


def test_flow_grpo_trains_a_two_modality_model_end_to_end(tmp_path, monkeypatch, one_thread):
    """Both modalities stochastic (Flow-GRPO on joint latents, the LTX-2 baseline): on-policy at the first
    update, every parameter of both towers and both cross-modal paths moves, the reward is scored on audio-video
    media, and the run folder holds the frame sheet, MP4s and WAVs."""
    import flowrl.pipelines.base
    import flowrl.preflight
    import flowrl.trainer
    from flowrl.trainer import Trainer

    # each looks the pipeline's adapter up (the scorer and the checks through pipelines.base.media_kind_of)
    for room in (flowrl.trainer, flowrl.preflight, flowrl.pipelines.base):
        monkeypatch.setattr(room, "adapter_class", lambda name: ToyJointAdapter)
    cfg = resolve_config(
        "tiny-cpu",
        [
            f"output_dir={tmp_path}",
            "train.lora.enabled=false",
            "train.iterations=2",
            "sample.num_steps=4",
            "sample.group_size=4",
            "sample.prompts_per_iteration=2",
            "sample.batch_size=4",
            "train.learning_rate=1e-2",
            "method.options.beta=0.01",
            "reward={'test_joint_latents:BrightAndLoud': 1.0}",
            "reward_args={}",
            "log.save_every=1000",
            "log.eval_every=0",
        ],
    )
    tr = Trainer(cfg)
    before = {n: p.detach().clone() for n, p in tr.policy.trainable.items()}
    rows = tr.train()
    assert len(rows) == 2 and all("skipped" not in r for r in rows)
    assert rows[0]["policy/onpolicy_logp_diff"] <= 1e-6
    kept = round(rows[0]["adv/kept_frac"] * 8)
    # CFG rows: the rollout's 4 steps, the update's 3 trained ones, and as many for the frozen KL reference
    assert rows[0]["cost/nfe"] == 2 * (8 * 4 + kept * 3 + kept * 3)
    assert all(not torch.equal(before[n], p) for n, p in tr.policy.trainable.items()), "a parameter did not move"
    assert "monitor/video/temporal_change" in rows[0] and "monitor/audio/rms" in rows[0]
    samples = tmp_path / "samples"
    assert (samples / "iter-000001.png").is_file()
    assert (samples / "iter-000001" / "0000.mp4").is_file() and (samples / "iter-000001" / "0000.wav").is_file()


def test_flowrl_trains_the_tiny_ltx2_on_both_modalities(tmp_path, one_thread):
    """``tiny-ltx2``: Flow-GRPO over LTX-2's joint latents through the real adapter: on-policy, every LoRA weight
    of both towers moves, and the run folder's clips are MP4s with a sound track."""
    import av

    from flowrl.trainer import Trainer

    cfg = resolve_config(
        "tiny-ltx2",
        [
            f"output_dir={tmp_path}",
            "train.iterations=1",
            "sample.num_steps=3",
            "sample.group_size=4",
            "sample.prompts_per_iteration=2",
            "sample.batch_size=4",
            "log.save_every=1000",
            "log.eval_every=0",
        ],
    )
    tr = Trainer(cfg)
    before = {n: p.detach().clone() for n, p in tr.policy.trainable.items()}
    rows = tr.train()
    assert rows[0]["policy/onpolicy_logp_diff"] <= 1e-5 and "skipped" not in rows[0]
    moved = {n for n, p in tr.policy.trainable.items() if not torch.equal(before[n], p)}
    assert moved == set(before), sorted(set(before) - moved)[:3]
    assert any(".audio_attn1." in n for n in moved) and any(".attn1." in n and "audio" not in n for n in moved)
    with av.open(str(tmp_path / "samples" / "iter-000001" / "0000.mp4")) as container:
        assert len(container.streams.video) == 1 and len(container.streams.audio) == 1

"""The conformance kit: every registered pipeline family (``flowrl.pipelines.base.list_pipelines``) through one
contract, on its tiny recipe (the adapter's ``tiny_recipe``). A new family joins by registering itself.

* the Protocol: every member the core calls is there, the media kind declared on the class;
* shapes: noise in the family's layout (``flowrl.pipelines.<family>.layout.for_model``), velocity of the same
  shape in fp32, the schedule from about 1 to 0, the transformer rows a guidance costs, decoded media of the
  adapter's kind;
* the noise-free rollout is the family's own diffusers pipeline: ``generate`` (the pipeline's call) with a
  one-step Euler scheduler on the adapter's own sigmas gives the media ``decode`` makes of flowrl's ODE rollout
  from the same generator;
* on policy: the log-prob recomputed for training equals the rollout's, exactly;
* a LoRA export (``save_lora``) that the family's pipeline loads back (``load_trained``) with every weight;
* every method whose media fit (``method.needs().media``) runs one iteration on the recipe.

A family that takes source images (``source_images`` = (min, max) > 0: editing, image-to-video) gets ``min``
random images (3, 40, 48) per prompt in every ``encode_prompts`` and ``generate`` call; its tiny recipe's data
names image files.
"""

import importlib
import math
import re

import pytest
import torch

from flowrl.config import ConfigError
from flowrl.logs import read_metrics
from flowrl.media import media_kind
from flowrl.methods import build_method, list_methods
from flowrl.pipelines.base import Guidance, PipelineAdapter, adapter_class, list_pipelines, source_images_of
from flowrl.plan import make_plan, ode_plan
from flowrl.resolve import resolve_config
from flowrl.reward_models.base import PairwiseReward
from flowrl.rollout import encode_rows, rollout, transition
from flowrl.trainer import Trainer
from tiny_runs import NO_EVAL, SKIP, small

FAMILIES = list_pipelines()
PROMPTS = ["a red cat", "a blue dog"]
SMALL = small(4, *NO_EVAL)
GUIDANCE = 3.0  # a scale at which two-branch CFG runs both branches


def _leaves(x) -> list[torch.Tensor]:
    return list(x.values()) if isinstance(x, dict) else [x]


def _rows(kwargs: dict) -> int:
    """The rows of a transformer call: its ``hidden_states`` batch, or the length of Z-Image's list ``x``."""
    return int(kwargs["hidden_states"].shape[0]) if "hidden_states" in kwargs else len(kwargs["x"])


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _sources(adapter, n: int) -> list | None:
    """``n`` lists of the family's fewest source images (random, (3, 40, 48) in [0, 1]); None: a text-only family."""
    low, high = source_images_of(adapter)
    if high == 0:
        return None
    count = max(low, 1)
    return [[torch.rand(3, 40, 48, generator=_gen(100 + 10 * i + j)) for j in range(count)] for i in range(n)]


def _encode(adapter, prompts: list[str]):
    """``encode_prompts`` with the family's source images when it takes them (else the text-only call)."""
    return encode_rows(adapter, prompts, images=_sources(adapter, len(prompts)))


@pytest.fixture(scope="module", params=FAMILIES)
def family(request):
    """(name, the tiny recipe's config, its adapter), built once per family for the whole module. A smaller
    ``model.source_area`` (a CPU-sized edit recipe's) is a size the family's pipeline cannot take: the contract
    holds the pipeline's own."""
    name = request.param
    cfg = resolve_config(adapter_class(name).tiny_recipe, ["model.source_area=null"])
    return name, cfg, adapter_class(name).from_config(cfg.model, seed=cfg.seed)


# ---------------------------------------------------------------------------------------------------- the Protocol
@pytest.mark.parametrize("name", FAMILIES)
def test_every_member_the_core_calls_is_there(name):
    cls = adapter_class(name)
    assert cls.media_kind in ("image", "video", "audio", "audio_video")
    assert resolve_config(cls.tiny_recipe).model.pipeline == name
    for member in ("from_config", "check_model_path", "save_lora", "load_trained", "generate", "clear_cache"):
        assert callable(getattr(cls, member, None)), f"{name}: no {member}"


def test_the_built_adapter_is_a_pipeline_adapter(family, one_thread):
    name, _, adapter = family
    assert isinstance(adapter, PipelineAdapter), name
    assert adapter.lora_target_modules and isinstance(adapter.attention_backpropagates, bool)


# ---------------------------------------------------------------------------------------------------- shapes
def test_noise_velocity_schedule_and_media_shapes(family, one_thread):
    name, cfg, adapter = family
    noise = adapter.initial_noise(2, _gen(0))
    layout = importlib.import_module(f"flowrl.pipelines.{name}.layout").for_model(cfg.model)
    want = layout.latent if isinstance(layout.latent, dict) else {"x": layout.latent}
    got = noise if isinstance(noise, dict) else {"x": noise}
    assert {k: tuple(v.shape) for k, v in got.items()} == {k: (2, *s) for k, s in want.items()}, name
    assert layout.tokens > 0

    sigmas = adapter.sigmas(4)
    assert sigmas.shape == (5,) and sigmas.dtype == torch.float32
    assert 0.99 <= float(sigmas[0]) <= 1.0 and float(sigmas[-1]) == 0.0 and torch.all(sigmas[1:] < sigmas[:-1])

    g = adapter.guidance(GUIDANCE)
    assert isinstance(g, Guidance) and g.scale == GUIDANCE and g.passes >= 1
    rows = []
    handle = adapter.transformer.register_forward_pre_hook(lambda m, a, k: rows.append(_rows(k)), with_kwargs=True)
    try:
        inputs = adapter.model_inputs(_encode(adapter, PROMPTS), GUIDANCE)
        v = adapter.velocity(noise, float(sigmas[1]), inputs, GUIDANCE)
    finally:
        handle.remove()
    assert sum(rows) == 2 * g.passes, name
    for vv, x in zip(_leaves(v), _leaves(noise)):
        assert vv.shape == x.shape and vv.dtype == torch.float32

    media = adapter.decode(noise)
    assert media_kind(media) == adapter.media_kind, name


# ---------------------------------------------------------------------------------------------------- the pipeline's own sampler
def _euler_on(pipe, sigmas: torch.Tensor):
    """The pipeline's scheduler swapped for a one-step FlowMatchEuler that runs exactly ``sigmas`` (T+1, ending
    in 0) whatever the pipeline asks ``set_timesteps`` for (its steps, its own sigmas, a shift ``mu``); the
    original scheduler comes back from the return value."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    fixed = sigmas[:-1].tolist()

    class Fixed(FlowMatchEulerDiscreteScheduler):
        def set_timesteps(self, num_inference_steps=None, device=None, sigmas=None, mu=None, timesteps=None):
            super().set_timesteps(sigmas=fixed, device=device)

    own = pipe.scheduler
    pipe.scheduler = Fixed(num_train_timesteps=own.config.num_train_timesteps, shift=1.0)
    return own


def test_noise_free_rollout_is_the_familys_pipeline(family, one_thread):
    """flowrl's ODE rollout, decoded, equals the family's own pipeline call (``generate``) from the same
    generator, once both step the same sigmas with Euler (Wan's UniPC and Stable Audio's ping-pong are their
    solvers, not their model: with those only the schedule is shared)."""
    name, _, adapter = family
    steps = 3
    sigmas = adapter.sigmas(steps)
    noise = adapter.initial_noise(2, _gen(5))
    traj = rollout(adapter, _encode(adapter, PROMPTS), ode_plan(sigmas), noise, torch.arange(2), GUIDANCE)
    mine = adapter.decode(traj.final)
    own = _euler_on(adapter.pipe, sigmas)
    try:
        sources = _sources(adapter, len(PROMPTS))
        extra = {} if sources is None else {"images": sources}
        theirs = adapter.generate(PROMPTS, steps, GUIDANCE, _gen(5), **extra)
    finally:
        adapter.pipe.scheduler = own
    compared = 0
    for key in ("video", "audio") if isinstance(mine, dict) else (None,):
        a, b = (mine, theirs) if key is None else (mine.get(key), theirs.get(key))
        if a is None:
            continue
        assert a.shape == b.shape, (name, key)
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4, msg=f"{name} {key}")
        compared += 1
    assert compared, name


# ---------------------------------------------------------------------------------------------------- on policy
def test_recomputed_log_prob_equals_the_rollouts(family, one_thread):
    name, _, adapter = family
    plan = make_plan(adapter.sigmas(3), noise_level=0.7, timestep_fraction=1.0)
    cond = _encode(adapter, PROMPTS)
    noise = adapter.initial_noise(2, _gen(1))
    traj = rollout(adapter, cond, plan, noise, torch.arange(2), GUIDANCE, _gen(2))
    inputs = adapter.model_inputs(cond, GUIDANCE)
    assert traj.plan.trained_indices, name
    for j in traj.plan.trained_indices:
        x, x_next = traj.pair(j)
        with torch.no_grad():
            out = transition(adapter, traj.plan, j, x, inputs, GUIDANCE, x_next=x_next)
        assert torch.isfinite(out.log_prob).all() and torch.equal(out.log_prob, traj.log_probs[:, j]), (name, j)


# ---------------------------------------------------------------------------------------------------- LoRA export
def _strip(name: str) -> str:  # drop peft's adapter name ("default", "default_0", ...)
    return re.sub(r"\.(lora_[AB])\.[^.]+\.", r".\1.", name)


def test_a_lora_export_loads_back_into_the_familys_pipeline(family, tmp_path, one_thread):
    """A LoRA on the family's targets, its weights made non-zero, written by ``save_lora`` and loaded into a
    fresh build of the same tiny model by ``load_trained``: every LoRA weight arrives unchanged."""
    from peft import LoraConfig
    from peft.utils import get_peft_model_state_dict

    name, cfg, _ = family
    trained = adapter_class(name).from_config(cfg.model, seed=cfg.seed)
    trained.transformer.add_adapter(
        LoraConfig(r=2, lora_alpha=4, init_lora_weights="gaussian", target_modules=trained.lora_target_modules)
    )
    with torch.no_grad():
        for n, p in trained.transformer.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=_gen(7)) * 0.01)
    (tmp_path / "lora").mkdir()
    trained.save_lora(tmp_path / "lora", get_peft_model_state_dict(trained.transformer))

    fresh = adapter_class(name).from_config(cfg.model, seed=cfg.seed)
    assert fresh.load_trained(tmp_path).startswith("LoRA"), name
    want = {_strip(k): v for k, v in trained.transformer.named_parameters() if "lora_" in k}
    got = {_strip(k): v for k, v in fresh.transformer.named_parameters() if "lora_" in k}
    assert want and want.keys() == got.keys(), name
    for k, v in want.items():
        torch.testing.assert_close(got[k].float(), v.detach().float(), rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------------- every method
class BrighterPair(PairwiseReward):
    """A pairwise judge for pref_grpo on images, video or audio-video (``test_family_contract:BrighterPair``):
    the brighter image or clip wins."""

    name = "brighter_pair"
    modality = "video"

    def compare(self, media_a, media_b, prompts, metadata):
        a, b = (m["video"] if isinstance(m, dict) else m for m in (media_a, media_b))
        a, b = a.float().flatten(1).mean(1), b.float().flatten(1).mean(1)
        return torch.where(a > b, 1.0, torch.where(a == b, 0.5, 0.0))


class ImageBrighterPair(BrighterPair):
    modality = "image"


class LouderPair(PairwiseReward):
    """A pairwise judge for pref_grpo on audio (``test_family_contract:LouderPair``): the louder clip wins."""

    name = "louder_pair"
    modality = "audio"

    def compare(self, media_a, media_b, prompts, metadata):
        a, b = media_a["audio"].abs().mean(dim=(1, 2)), media_b["audio"].abs().mean(dim=(1, 2))
        return torch.where(a > b, 1.0, torch.where(a == b, 0.5, 0.0))


PAIRWISE = {
    "image": "ImageBrighterPair",
    "video": "BrighterPair",
    "audio": "LouderPair",
    "audio_video": "BrighterPair",
}


def _method_overrides(method: str, kind: str) -> list[str]:
    if method in ("ram", "diffusion_nft"):
        return ["method.options.num_noisings=2"]
    if method == "pref_grpo":
        return [f"reward={{'test_family_contract:{PAIRWISE[kind]}': 1.0}}", "reward_args={}", "method.options.beta=0"]
    if method == "dense_grpo":  # its calibration samples rounds before training: two are enough here
        return ["method.options.calibration_max_rounds=2"]
    if method == "dgpo":  # its training times come from the head of the tiny recipe's short grid
        return ["method.options.trunc_steps=2", "method.options.num_noisings=2"]
    if method == "reward_backprop":  # a reward it can backpropagate through (images and video frames)
        return ["reward={smoothness: 1.0}", "reward_args={}"]
    if method == "sft":  # a dataset method: the shipped folder's images, no reward
        return ["data.prompts=builtin:preference_pairs", "reward={}", "reward_args={}", "log.eval_every=0"]
    return []


def _fitting(name: str) -> list:
    """Every method that takes the family's media, on the family. The fast suite keeps a cover of the product:
    each family under Flow-GRPO, and each method on the first family (in registry order) that takes its
    media; the rest of the product is marked slow (CI runs it)."""
    params = []
    for method in list_methods(adapter_class(name).media_kind):
        first = next(f for f in FAMILIES if method in list_methods(adapter_class(f).media_kind))
        fast = method == "flow_grpo" or name == first
        marks = () if fast else (pytest.mark.slow,)
        params.append(pytest.param(name, method, id=f"{name}-{method}", marks=marks))
    return params


@pytest.mark.parametrize(("name", "method"), [p for n in FAMILIES for p in _fitting(n)])
def test_every_fitting_method_runs_an_iteration(tmp_path, one_thread, name, method):
    kind = adapter_class(name).media_kind
    overrides = [f"output_dir={tmp_path}", *SMALL, "train.iterations=1", f"method.name={method}"]
    try:  # a part that does not take this family refuses it when the config resolves, or at needs()
        cfg = resolve_config(adapter_class(name).tiny_recipe, overrides + _method_overrides(method, kind))
        fits = build_method(cfg).needs().media
    except ConfigError as exc:  # a part that does not take this family (RatioNorm on joint latents) refuses it
        assert "\n" not in str(exc) and f"model.pipeline={name}" in str(exc)
        return
    assert fits is None or kind in fits
    rows = Trainer(cfg).train()
    assert len(rows) == 1 and "skipped" not in rows[0]
    assert rows[0].get("policy/onpolicy_logp_diff", 0.0) <= 1e-4
    assert not any(math.isnan(v) for k, v in rows[0].items() if not k.startswith(SKIP))
    assert read_metrics(tmp_path / "metrics.jsonl")[0]["iteration"] == 0

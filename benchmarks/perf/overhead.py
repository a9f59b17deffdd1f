"""flowrl's overhead over bare diffusers/torch work, measured side by side in one run.

    python -m flowrl.benchmarks.perf [--sizes tiny,70m] [--repeats 5] [--json out.json]

For each model size it times, alternating the two sides so that machine noise hits both alike:

* **rollout**: flowrl's SDE rollout with per-step log-probs vs a bare ``StableDiffusion3Pipeline``
  call. Both use the same model, steps, batch, CFG, prompt embeddings and initial latents, and both
  return latents (no text encoding, no VAE decode).
* **update**: flowrl's update phase (recompute log-prob, PPO-clip loss, backward, clip, AdamW step)
  vs bare forwards+backwards of the same transformer calls with a trivial loss and the same optimizer
  steps.
* **iteration**: one whole flowrl iteration (rollout, decode, reward, advantages, update) vs the bare
  pieces: pipeline sampling, decode, the same reward call, bare forwards+backwards.
* **reward_overlap**: 4 rollout batches whose reward answers after as long as one batch's rollout (a
  served judge's latency): rollout plus reward with each batch scored while the next samples
  (``train.reward_overlap``, the default) against in turn. Ideal 0.625; the "bare" side is in turn.

It reports the median of each side and the ratio flowrl / bare. It runs on CPU or CUDA, whatever
``accelerate`` picks.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Callable

import torch

from flowrl.config import config_from_dict, resolve_config
from flowrl.plan import make_plan
from flowrl.reward_models import RewardOutput
from flowrl.rollout import rollout
from flowrl.trainer import Trainer

SIZES = {  # name -> (tiny_size preset, resolution)
    "tiny": ("tiny", 32),
    "70m": ("70m", 32),
}


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _time(fn: Callable[[], object]) -> float:
    _sync()
    start = time.perf_counter()
    fn()
    _sync()
    return time.perf_counter() - start


def _side_by_side(ours: Callable, bare: Callable, repeats: int) -> tuple[float, float]:
    ours(), bare()  # warm-up
    t_ours, t_bare = [], []
    for i in range(repeats):
        first, second = (ours, bare) if i % 2 == 0 else (bare, ours)
        a, b = _time(first), _time(second)
        t_ours.append(a if first is ours else b)
        t_bare.append(b if first is ours else a)
    return statistics.median(t_ours), statistics.median(t_bare)


def _trainer(size: str, steps: int, batch: int, out: str, beta: float = 0.0) -> Trainer:
    preset, res = SIZES[size]
    cfg = resolve_config(
        "tiny-cpu",
        [
            f"output_dir={out}",
            f"model.tiny_size={preset}",
            f"model.resolution={res}",
            f"sample.num_steps={steps}",
            f"sample.batch_size={batch}",
            "sample.group_size=2",
            f"sample.prompts_per_iteration={batch // 2}",
            "train.optimizer_steps_per_iteration=1",
            f"train.beta={beta}",
            "train.onpolicy_check=false",
        ],
    )
    return Trainer(cfg)


def bench_rollout(tr: Trainer, repeats: int) -> tuple[float, float]:
    cfg, ad = tr.cfg, tr.adapter
    prompts = [p.prompt for p in tr.prompts[: cfg.sample.batch_size]]
    cond = ad.encode_prompts(prompts)
    neg = ad.negative_conditioning(len(prompts))
    noise = ad.initial_noise(len(prompts), torch.Generator(ad.device).manual_seed(0))
    ids = torch.arange(len(prompts))
    w, steps = cfg.sample.guidance_scale, cfg.sample.num_steps

    def ours():
        plan = make_plan(ad.sigmas(steps), "flow_sde", cfg.sample.noise_level)
        return rollout(ad, cond, plan, noise, ids, w, torch.Generator(ad.device).manual_seed(1))

    def bare():
        with torch.no_grad():
            return ad.pipe(
                prompt_embeds=cond["prompt_embeds"],
                pooled_prompt_embeds=cond["pooled_prompt_embeds"],
                negative_prompt_embeds=neg["prompt_embeds"],
                negative_pooled_prompt_embeds=neg["pooled_prompt_embeds"],
                latents=noise.clone(),
                num_inference_steps=steps,
                guidance_scale=w,
                output_type="latent",
            ).images

    return _side_by_side(ours, bare, repeats)


def _bare_fwd_bwd(tr: Trainer, batches) -> None:
    """The update's transformer calls as plain forward+backward with a trivial loss, same optimizer steps."""
    ad, w = tr.adapter, tr.cfg.sample.guidance_scale
    for b in batches:
        plan = b.traj.plan
        inputs = ad.model_inputs(b.cond, w)
        for j in plan.trained_indices:
            v = ad.velocity(b.traj.pair(j)[0], float(plan.sigma[j]), inputs, w, model=tr.model)
            tr.acc.backward(v.square().mean() / len(plan.trained_indices))
    tr.acc.clip_grad_norm_(list(tr.trainable.values()), 1.0)
    tr.optimizer.step()
    tr.optimizer.zero_grad(set_to_none=True)


def bench_update(tr: Trainer, repeats: int) -> tuple[float, float]:
    batches, group_ids = tr.collect(0)
    adv = tr.method.credit(tr.score(batches).columns, group_ids)
    return _side_by_side(lambda: tr.update(batches, adv, first=False), lambda: _bare_fwd_bwd(tr, batches), repeats)


def bench_iteration(tr: Trainer, repeats: int) -> tuple[float, float]:
    ad, cfg = tr.adapter, tr.cfg
    batches, _ = tr.collect(0)
    state = {"it": 0}

    def ours():
        state["it"] += 1
        return tr.step(state["it"])

    def bare():
        out = []
        for b in batches:
            neg = ad.negative_conditioning(len(b.traj))
            with torch.no_grad():
                lat = ad.pipe(
                    prompt_embeds=b.cond["prompt_embeds"],
                    pooled_prompt_embeds=b.cond["pooled_prompt_embeds"],
                    negative_prompt_embeds=neg["prompt_embeds"],
                    negative_pooled_prompt_embeds=neg["pooled_prompt_embeds"],
                    latents=b.traj.state(0).clone(),
                    num_inference_steps=cfg.sample.num_steps,
                    guidance_scale=cfg.sample.guidance_scale,
                    output_type="latent",
                ).images
            out.append(ad.decode(lat).cpu())
        images = torch.cat(out)
        tr.reward(images, [p for b in batches for p in b.prompts], [m for b in batches for m in b.metadata])
        _bare_fwd_bwd(tr, batches)

    return _side_by_side(ours, bare, repeats)


class SleepingReward:
    """Brightness, answered after ``seconds``: the latency of a served judge or a detector in another process."""

    def __init__(self, seconds: float = 0.0):
        self.seconds = seconds

    def __call__(self, images, prompts, metadata):
        time.sleep(self.seconds)
        return RewardOutput(scores=images.float().mean(dim=(1, 2, 3)))


def bench_reward_overlap(tr: Trainer, repeats: int, batches: int = 4) -> tuple[float, float]:
    """Rollout plus reward of ``batches`` rollout batches whose reward takes as long as one batch's rollout:
    overlapped (``train.reward_overlap``, each batch scored while the next samples) against in turn.
    Ideal ratio (batches + 1) / (2 batches): 0.625 for 4."""
    data = tr.cfg.to_dict()
    data["sample"]["prompts_per_iteration"] = batches * data["sample"]["batch_size"] // data["sample"]["group_size"]
    data["reward"] = {"flowrl.benchmarks.perf.overhead:SleepingReward": 1.0}
    data["output_dir"] = f"{data['output_dir']}-overlap"
    data["overwrite"] = True
    slow = Trainer(config_from_dict(data))
    reward = next(iter(slow.reward.rewards.values()))[0]
    slow.collect(0)  # warm-up
    reward.seconds = _time(lambda: slow.collect(0)) / batches  # one batch's rollout

    def rollout_and_reward(overlap: bool):
        slow.cfg.train.reward_overlap = overlap
        batches_, _ = slow.collect(0)
        slow.score(batches_)

    return _side_by_side(lambda: rollout_and_reward(True), lambda: rollout_and_reward(False), repeats)


BENCHES = {
    "rollout": bench_rollout,
    "update": bench_update,
    "iteration": bench_iteration,
    "reward_overlap": bench_reward_overlap,
}


def run(
    sizes: list[str], repeats: int, steps: int, batch: int, out: str, what: list[str] | None = None, beta: float = 0.0
) -> list[dict]:
    rows = []
    for size in sizes:
        tr = _trainer(size, steps, batch, f"{out}/{size}", beta)
        params = sum(p.numel() for p in tr.adapter.transformer.parameters() if not p.requires_grad)
        for name in what or list(BENCHES):
            fn = BENCHES[name]
            ours, bare = fn(tr, repeats)
            rows.append(
                {
                    "size": size,
                    "transformer_params_m": round(params / 1e6, 2),
                    "what": name,
                    "flowrl_s": ours,
                    "bare_s": bare,
                    "ratio": ours / bare,
                }
            )
            print(
                f"{size:5s} {params / 1e6:6.1f}M  {name:9s}  flowrl {ours:8.4f} s   bare {bare:8.4f} s   "
                f"ratio {ours / bare:6.3f}",
                flush=True,
            )
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m flowrl.benchmarks.perf", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="tiny,70m")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--out", default="/tmp/flowrl-perf")
    p.add_argument("--what", default="rollout,update,iteration,reward_overlap", help="which comparisons to run")
    p.add_argument(
        "--beta",
        type=float,
        default=0.0,
        help="train.beta: above 0 flowrl's update adds a no-grad reference forward per trained step, "
        "which the bare side does not do",
    )
    p.add_argument("--json", default=None, help="also write the rows as JSON")
    args = p.parse_args(argv)
    torch.manual_seed(0)
    rows = run(args.sizes.split(","), args.repeats, args.steps, args.batch, args.out, args.what.split(","), args.beta)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)

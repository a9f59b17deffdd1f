"""flowrl's overhead over bare diffusers/torch work, measured side by side in one run.

    python -m flowrl.benchmarks.perf [--sizes tiny,70m] [--betas 0,0.004] [--slowness 1,2]
                                     [--reward-in-flight N] [--repeats 5] [--threads 1] [--json out.json]

For each model size it times, alternating the two sides so that machine noise hits both alike:

* **rollout**: flowrl's SDE rollout with per-step log-probs vs a bare ``StableDiffusion3Pipeline``
  call. Both use the same model, steps, batch, CFG, prompt embeddings and initial latents, and both
  return latents (no text encoding, no VAE decode).
* **update**: flowrl's update phase (recompute log-prob, PPO-clip loss, backward, clip, AdamW step)
  vs bare forwards+backwards of the same transformer calls with a trivial loss and the same optimizer
  steps.
* **iteration**: one whole flowrl iteration (rollout, decode, reward, advantages, update) vs the bare
  pieces: pipeline sampling, decode, the same reward call, bare forwards+backwards.
* **iteration_flow_grpo**: the same whole flowrl iteration vs one iteration as flow_grpo's own loop makes it
  (``_flow_grpo_loop``: the bare pieces plus what that loop does besides: encoding each batch's prompts, the SDE
  step's log-prob at every sampling step, and the log-prob, PPO-clip and KL of each trained step), on the same
  model, latents, reward and trained steps.
* **iteration_self**: the same whole flowrl iteration against itself: a calibration, whose true ratio is 1.
* **reward_overlap**: 4 rollout batches whose reward answers after ``slowness`` times one batch's rollout
  (a served judge's latency): rollout plus reward with each batch scored while the next samples
  (``train.reward_overlap``, the default; ``train.reward_in_flight`` calls at once where the tree has that
  key, else one) against in turn. The "bare" side is in turn, so the ratio is the fraction of serial.
  Ideal with every call in flight at once: (batches + slowness) / (batches (1 + slowness)), 0.625 for
  slowness 1 and 0.5 for slowness 2; with one call in flight (batches slowness + 1) / (batches (1 + slowness))
  once slowness > 1: 0.75 for slowness 2.

update and iteration run at each ``--betas`` (``method.options.beta``: above 0 both sides add a no-grad reference
forward per trained step; the rollout does not depend on it and runs at the first only); reward_overlap at
each ``--slowness``. Each comparison runs ``--repeats`` pairs back to back, the side that goes first
alternating. Its ratio is the median of the pairs' ratios flowrl / bare: a slow spell of the machine longer than
a pair scales both sides of it alike, where the two sides' medians would each take a different share of it.
Beside the ratio it prints a 95 % bootstrap interval of it, the ratio of the two sides' medians and of their
minima, then a summary of the figures the speed targets name: a target counts as shown only where the whole
interval is at or below it. ``--json`` keeps every pair's times. It runs on CPU or CUDA, whatever
``accelerate`` picks; ``--threads`` sets torch's CPU threads (1: both sides on one thread, least disturbed by
other work on a shared machine).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import statistics
import time
from typing import Callable

import torch

from flowrl.advantages import clip_advantages, group_advantages
from flowrl.config import TrainConfig, config_from_dict
from flowrl.methods.seam import RewardTable
from flowrl.plan import make_plan
from flowrl.resolve import resolve_config
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


@dataclasses.dataclass
class Timing:
    """``repeats`` interleaved runs of the two sides: each side's times, in run order (pair i is ours[i], bare[i])."""

    ours: list[float]
    bare: list[float]

    @property
    def ratios(self) -> list[float]:
        return [a / b for a, b in zip(self.ours, self.bare)]

    @property
    def ratio(self) -> float:
        """The median of the pairs' ratios: each pair ran back to back, so a slow spell of the machine that
        lasts longer than one pair scales both of its sides and leaves the ratio alone."""
        return statistics.median(self.ratios)

    def interval(self, level: float = 0.95, resamples: int = 2000) -> tuple[float, float]:
        """A percentile-bootstrap interval of ``ratio`` (fixed seed: the same times give the same interval)."""
        rng, ratios = random.Random(0), self.ratios
        medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(resamples))
        tail = int(resamples * (1 - level) / 2)
        return medians[tail], medians[resamples - 1 - tail]


def _side_by_side(ours: Callable, bare: Callable, repeats: int) -> Timing:
    """``repeats`` interleaved pairs after a warm-up, the side that runs first alternating, so machine noise
    hits both alike."""
    ours(), bare()  # warm-up
    t_ours, t_bare = [], []
    for i in range(repeats):
        first, second = (ours, bare) if i % 2 == 0 else (bare, ours)
        a, b = _time(first), _time(second)
        t_ours.append(a if first is ours else b)
        t_bare.append(b if first is ours else a)
    return Timing(t_ours, t_bare)


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
            f"method.options.beta={beta}",
            "train.onpolicy_check=false",
        ],
    )
    return Trainer(cfg)


def bench_rollout(tr: Trainer, repeats: int) -> Timing:
    cfg, ad = tr.cfg, tr.adapter
    prompts = [p.prompt for p in tr.prompts[: cfg.sample.batch_size]]
    cond = ad.encode_prompts(prompts)
    neg = ad.negative_conditioning(len(prompts))
    noise = ad.initial_noise(len(prompts), torch.Generator(ad.device).manual_seed(0))
    ids = torch.arange(len(prompts))
    w, steps = cfg.sample.guidance_scale, cfg.sample.num_steps

    def ours():
        plan = make_plan(ad.sigmas(steps), "flow_sde", tr.method.options.noise_level)
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


def _reference_velocity(tr: Trainer, x, sigma: float, inputs, w: float) -> torch.Tensor:
    """The reference policy's velocity, no grad: the frozen copy (full fine-tuning) or the model with LoRA off."""
    ad = tr.adapter
    with torch.no_grad():
        if tr.policy.ref_model is not None:
            return ad.velocity(x, sigma, inputs, w, model=tr.policy.ref_model)
        ad.transformer.disable_adapters()
        try:
            return ad.velocity(x, sigma, inputs, w, model=tr.policy.model)
        finally:
            ad.transformer.enable_adapters()


def _bare_fwd_bwd(tr: Trainer, batches) -> None:
    """The update's transformer calls as plain forward+backward with a trivial loss, same optimizer steps;
    with ``method.options.beta`` above 0 also the reference forward per trained step (no grad, LoRA off or the
    frozen copy) that a KL penalty needs, as flow_grpo's loop makes it."""
    ad, w, beta = tr.adapter, tr.cfg.sample.guidance_scale, tr.method.options.beta
    for b in batches:
        plan = b.traj.plan
        inputs = ad.model_inputs(b.cond, w)
        for j in plan.trained_indices:
            x, sigma = b.traj.pair(j)[0], float(plan.sigma[j])
            v = ad.velocity(x, sigma, inputs, w, model=tr.policy.model)
            loss = v.square().mean()
            if beta > 0:
                loss = loss + beta * (v - _reference_velocity(tr, x, sigma, inputs, w)).square().mean()
            tr.acc.backward(loss / len(plan.trained_indices))
    tr.acc.clip_grad_norm_(list(tr.policy.trainable.values()), 1.0)
    tr.policy.optimizer.step()
    tr.policy.optimizer.zero_grad(set_to_none=True)


def bench_update(tr: Trainer, repeats: int) -> Timing:
    batches, group_ids = tr.collect(0)
    adv = tr.method.credit(RewardTable(tr.scoring.score(batches).columns, group_ids)).values
    return _side_by_side(
        lambda: tr.updater.run(batches, adv, False, tr.context(0), trains=tr.method.begin(0).trains),
        lambda: _bare_fwd_bwd(tr, batches),
        repeats,
    )


def _steps(tr: Trainer, first: int) -> Callable[[], object]:
    """flowrl's side of a whole-iteration comparison: ``tr.step`` of iterations first, first + 1, ..."""
    state = {"it": first - 1}

    def ours():
        state["it"] += 1
        return tr.step(state["it"])

    return ours


def bench_iteration(tr: Trainer, repeats: int) -> Timing:
    ad, cfg = tr.adapter, tr.cfg
    batches, _ = tr.collect(0)

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

    return _side_by_side(_steps(tr, 1), bare, repeats)


def _flow_grpo_sde_step(x, v, sigmas: list[float], j: int, a: float, x_next=None, generator=None):
    """Flow-GRPO's SDE step j with its log-prob, written from its rules (``sde_step_with_logprob``): the mean
    x (1 + s^2 dt / 2 sigma) + v (1 + s^2 (1 - sigma) / 2 sigma) dt with s = a sqrt(sigma / (1 - sigma))
    (sigma 1 in the denominator read as the grid's second sigma), the std s sqrt(-dt), and the Gaussian
    log-density of the next state averaged over its elements."""
    sigma, dt = sigmas[j], sigmas[j + 1] - sigmas[j]
    s = a * math.sqrt(sigma / (1 - (sigmas[1] if sigma >= 1 else sigma)))
    mean = x * (1 + s**2 / (2 * sigma) * dt) + v * (1 + s**2 * (1 - sigma) / (2 * sigma)) * dt
    std = s * math.sqrt(-dt)
    if x_next is None:
        x_next = mean + std * torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype)
    log_prob = -((x_next.detach() - mean) ** 2) / (2 * std**2) - math.log(std) - math.log(math.sqrt(2 * math.pi))
    return x_next, log_prob.mean(dim=tuple(range(1, x.ndim))), mean, std


def _flow_grpo_loop(tr: Trainer, batches) -> None:
    """One iteration as flow_grpo's own loop makes it (``scripts/train_sd3.py``, written from its rules, not its
    code) on the same model, prompts, latents, reward and trained steps as flowrl's: encode each batch's prompts,
    sample with the SDE step's log-prob at every step (CFG in one forward), decode, score, group-normalise the
    rewards, then per trained step a forward with grad, the log-prob of the recorded next state, PPO-clip on the
    ratio and, with beta above 0, the reference forward (LoRA off) and the Gaussian KL of the two means."""
    ad, cfg = tr.adapter, tr.cfg
    w, a, steps = cfg.sample.guidance_scale, tr.method.options.noise_level, cfg.sample.num_steps
    clip, beta = tr.method.options.clip_range, tr.method.options.beta
    sigmas = [float(x) for x in ad.sigmas(steps)]
    generator = torch.Generator(ad.device).manual_seed(1)
    rollouts = []
    for b in batches:
        inputs = ad.model_inputs(ad._encode(b.prompts), w)  # flow_grpo encodes each batch's prompts
        x = b.traj.state(0).clone()
        states, log_probs = [x], []
        with torch.no_grad():
            for j in range(steps):
                v = ad.velocity(x, sigmas[j], inputs, w)
                x, lp, _, _ = _flow_grpo_sde_step(x, v, sigmas, j, a, generator=generator)
                states.append(x)
                log_probs.append(lp)
        rollouts.append((b, inputs, states, torch.stack(log_probs, dim=1), ad.decode(x).cpu()))
    images = torch.cat([r[4] for r in rollouts])
    rewards = tr.reward(images, [p for b in batches for p in b.prompts], [m for b in batches for m in b.metadata])
    groups = torch.cat([b.traj.prompt_ids for b in batches])
    adv = group_advantages(rewards.scores.float(), groups, global_std=tr.method.options.global_std)
    adv = clip_advantages(adv, tr.method.options.adv_clip_max)
    trained = list(batches[0].traj.plan.trained_indices)
    start = 0
    for b, inputs, states, old_lp, _ in rollouts:
        a_b = adv[start : start + len(b.traj)].to(ad.device)
        start += len(b.traj)
        for j in trained:
            v = ad.velocity(states[j], sigmas[j], inputs, w, model=tr.policy.model)
            _, lp, mean, std = _flow_grpo_sde_step(states[j], v, sigmas, j, a, x_next=states[j + 1])
            ratio = torch.exp(lp - old_lp[:, j])
            loss = torch.maximum(-a_b * ratio, -a_b * ratio.clamp(1 - clip, 1 + clip)).mean()
            if beta > 0:
                v_ref = _reference_velocity(tr, states[j], sigmas[j], inputs, w)
                _, _, mean_ref, _ = _flow_grpo_sde_step(states[j], v_ref, sigmas, j, a, states[j + 1])
                kl = ((mean - mean_ref) ** 2).mean(dim=tuple(range(1, mean.ndim))) / (2 * std**2)
                loss = loss + beta * kl.mean()
            tr.acc.backward(loss / len(trained))
    tr.acc.clip_grad_norm_(list(tr.policy.trainable.values()), 1.0)
    tr.policy.optimizer.step()
    tr.policy.optimizer.zero_grad(set_to_none=True)


def bench_iteration_flow_grpo(tr: Trainer, repeats: int) -> Timing:
    """A whole flowrl iteration against flow_grpo's loop (``_flow_grpo_loop``): what flowrl adds beyond the
    work flow_grpo's own loop does, where ``iteration`` compares with bare diffusers work that records no
    log-prob and computes no PPO or KL loss."""
    batches, _ = tr.collect(0)
    return _side_by_side(_steps(tr, 101), lambda: _flow_grpo_loop(tr, batches), repeats)


def bench_iteration_self(tr: Trainer, repeats: int) -> Timing:
    """flowrl's iteration against itself (two runs of iterations, each side its own): the true ratio is 1, so
    its spread shows what the machine's noise alone gives with this many pairs."""
    return _side_by_side(_steps(tr, 201), _steps(tr, 401), repeats)


class SleepingReward:
    """Brightness, answered after ``seconds``: the latency of a served judge or a detector in another process."""

    def __init__(self, seconds: float = 0.0):
        self.seconds = seconds

    def __call__(self, images, prompts, metadata):
        time.sleep(self.seconds)
        return RewardOutput(scores=images.float().mean(dim=(1, 2, 3)))


IN_FLIGHT_KEY = "reward_in_flight"  # train.<key>: how many reward calls run at once


def has_in_flight_key() -> bool:
    return IN_FLIGHT_KEY in {f.name for f in dataclasses.fields(TrainConfig)}


_SLOW: dict[tuple[int, int | None], tuple[Trainer, SleepingReward, float]] = {}


def _slow_trainer(tr: Trainer, batches: int, in_flight: int | None) -> tuple[Trainer, SleepingReward, float]:
    """A copy of ``tr`` with ``batches`` rollout batches scored by a SleepingReward, and one batch's rollout time."""
    key = (id(tr), in_flight)
    if key not in _SLOW:
        data = tr.cfg.to_dict()
        data["sample"]["prompts_per_iteration"] = batches * data["sample"]["batch_size"] // data["sample"]["group_size"]
        data["reward"] = {"flowrl.benchmarks.perf.overhead:SleepingReward": 1.0}
        data["output_dir"] = f"{data['output_dir']}-overlap"
        data["overwrite"] = True
        if in_flight is not None and has_in_flight_key():
            data["train"][IN_FLIGHT_KEY] = in_flight
        slow = Trainer(config_from_dict(data))
        reward = next(iter(slow.reward.rewards.values()))[0]
        slow.collect(0)  # warm-up
        rollouts = sorted(_time(lambda: slow.collect(0)) for _ in range(3))
        _SLOW[key] = (slow, reward, rollouts[1] / batches)
    return _SLOW[key]


def bench_reward_overlap(
    tr: Trainer, repeats: int, batches: int = 4, slowness: float = 1.0, in_flight: int | None = None
) -> Timing:
    """Rollout plus reward of ``batches`` rollout batches whose reward takes ``slowness`` times one batch's
    rollout: overlapped (``train.reward_overlap``, each batch scored while the next samples, ``in_flight``
    calls at once where ``train.reward_in_flight`` exists) against in turn. The ratio is the fraction of
    serial; ideal with every call at once (batches + slowness) / (batches (1 + slowness)): 0.625, 0.5."""
    slow, reward, one_batch = _slow_trainer(tr, batches, in_flight)
    reward.seconds = slowness * one_batch

    def rollout_and_reward(overlap: bool):
        slow.scoring.overlap = overlap  # the reward phase reads train.reward_overlap once, when it is built
        batches_, _ = slow.collect(0)
        slow.scoring.score(batches_)

    return _side_by_side(lambda: rollout_and_reward(True), lambda: rollout_and_reward(False), repeats)


BENCHES = {
    "rollout": bench_rollout,
    "update": bench_update,
    "iteration": bench_iteration,
    "iteration_flow_grpo": bench_iteration_flow_grpo,
    "iteration_self": bench_iteration_self,
    "reward_overlap": bench_reward_overlap,
}


TARGETS = {  # the largest ratio the speed targets accept
    "iteration": 1.03,
    "iteration_flow_grpo": 1.03,
    "reward_overlap x1": 0.61,
    "reward_overlap x2": 0.52,
}


def _target(row: dict) -> float | None:
    if row["what"] in ("iteration", "iteration_flow_grpo"):
        return TARGETS[row["what"]]
    if row["what"] == "reward_overlap":
        return TARGETS.get(f"reward_overlap x{row['slowness']:g}")
    return None


def _row(size: str, params: float, name: str, timing: Timing, **extra) -> dict:
    ours, bare = statistics.median(timing.ours), statistics.median(timing.bare)
    lo, hi = timing.interval()
    row = {
        "size": size,
        "transformer_params_m": round(params / 1e6, 2),
        "what": name,
        **extra,
        "pairs": len(timing.ours),
        "flowrl_s": ours,
        "bare_s": bare,
        "ratio": timing.ratio,
        "interval": [lo, hi],
        "ratio_of_medians": ours / bare,
        "ratio_of_minima": min(timing.ours) / min(timing.bare),
        "flowrl_times_s": timing.ours,
        "bare_times_s": timing.bare,
    }
    label = ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in extra.items())
    print(
        f"{size:5s} {params / 1e6:6.1f}M  {name:19s} {label:24s} flowrl {ours:8.4f} s   bare {bare:8.4f} s   "
        f"ratio {timing.ratio:6.3f} [{lo:.3f}, {hi:.3f}] of {len(timing.ours)} pairs   "
        f"(of medians {row['ratio_of_medians']:6.3f}, of minima {row['ratio_of_minima']:6.3f})",
        flush=True,
    )
    return row


def run(
    sizes: list[str],
    repeats: int,
    steps: int,
    batch: int,
    out: str,
    what: list[str] | None = None,
    betas: list[float] = (0.0,),
    slowness: list[float] = (1.0,),
    in_flight: int | None = None,
) -> list[dict]:
    what = what or list(BENCHES)
    rows = []
    for size in sizes:
        for k, beta in enumerate(betas):
            tr = _trainer(size, steps, batch, f"{out}/{size}-beta{beta:g}", beta)
            params = sum(p.numel() for p in tr.adapter.transformer.parameters() if not p.requires_grad)
            for name in what:
                if name == "rollout" and k == 0:
                    rows.append(_row(size, params, name, bench_rollout(tr, repeats)))
                elif name in ("update", "iteration", "iteration_flow_grpo", "iteration_self"):
                    rows.append(_row(size, params, name, BENCHES[name](tr, repeats), beta=beta))
                elif name == "reward_overlap" and k == 0:
                    for s in slowness:
                        timing = bench_reward_overlap(tr, repeats, slowness=s, in_flight=in_flight)
                        calls = (
                            getattr(tr.cfg.train, IN_FLIGHT_KEY, 1)
                            if in_flight is None or not has_in_flight_key()
                            else in_flight
                        )
                        rows.append(_row(size, params, name, timing, slowness=s, in_flight=calls))
            _SLOW.clear()
            del tr
    return rows


def _label(row: dict) -> str | None:
    """The summary column of ``row``: the figures the speed targets name and the noise floor beside them, else
    None."""
    if row["what"] == "iteration":
        return f"iteration/bare beta {row['beta']:g}"
    if row["what"] == "iteration_flow_grpo":
        return f"iteration/flow_grpo loop beta {row['beta']:g}"
    if row["what"] == "iteration_self":
        return f"iteration/itself beta {row['beta']:g} (noise floor)"
    if row["what"] == "reward_overlap":
        return f"slow reward x{row['slowness']:g} / serial ({row['in_flight']} in flight)"
    return None


def _cell(row: dict) -> str:
    """The ratio, its 95 % interval where the row has one, and the verdict against its target: "<=" where the
    whole interval is at or below it, "<= ... not shown" where the ratio is but the interval reaches above."""
    text, target = f"{row['ratio']:.3f}", _target(row)
    lo, hi = row.get("interval") or (row["ratio"], row["ratio"])
    if "interval" in row:
        text += f" [{lo:.3f}, {hi:.3f}]"
    if target is None:
        return text
    if hi <= target:
        return f"{text} (<= {target})"
    if row["ratio"] <= target:
        return f"{text} (<= {target} not shown)"
    return f"{text} (> {target})"


def summary(rows: list[dict]) -> str:
    """The figures the speed targets name as a table, one line per size, each with its target."""
    labels = [_label(r) for r in rows if _label(r)]
    columns = sorted(dict.fromkeys(labels), key=lambda c: not c.startswith("iteration"))  # iterations first
    lines = ["| size | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for size in dict.fromkeys(r["size"] for r in rows):
        of_size = {_label(r): r for r in rows if r["size"] == size}
        cells = []
        for column in columns:
            r = of_size.get(column)
            if r is None:
                cells.append("-")
                continue
            cells.append(_cell(r))
        params = next(r["transformer_params_m"] for r in rows if r["size"] == size)
        lines.append(f"| {size} ({params:g}M) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x]
    except ValueError:
        raise SystemExit(f"perf: {text!r} is not a comma-separated list of numbers") from None


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(prog="python -m flowrl.benchmarks.perf", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="tiny,70m")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--out", default="/tmp/flowrl-perf")
    p.add_argument(
        "--what", default="rollout,update,iteration,iteration_flow_grpo,reward_overlap", help="which comparisons to run"
    )
    p.add_argument("--betas", default="0,0.004", help="method.options.beta values for update and iteration")
    p.add_argument("--beta", type=float, default=None, help="one method.options.beta (instead of --betas)")
    p.add_argument("--slowness", default="1,2", help="reward latency in units of one batch's rollout")
    p.add_argument(
        "--reward-in-flight",
        type=int,
        default=None,
        help=f"train.{IN_FLIGHT_KEY} for reward_overlap (default: the recipe's; ignored where the key is absent)",
    )
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's default)")
    p.add_argument("--json", default=None, help="also write the rows as JSON")
    args = p.parse_args(argv)
    unknown = set(args.what.split(",")) - set(BENCHES)
    if unknown:
        raise SystemExit(f"perf: --what {sorted(unknown)[0]!r} is none of {', '.join(BENCHES)}")
    unknown = set(args.sizes.split(",")) - set(SIZES)
    if unknown:
        raise SystemExit(f"perf: --sizes {sorted(unknown)[0]!r} is none of {', '.join(SIZES)}")
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    betas = [args.beta] if args.beta is not None else _floats(args.betas)
    if args.reward_in_flight is not None and not has_in_flight_key():
        print(f"train.{IN_FLIGHT_KEY} is not a key of this tree: one reward call in flight", flush=True)
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU"
    print(
        f"{device}, torch {torch.__version__}, {torch.get_num_threads()} thread(s), "
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores",
        flush=True,
    )
    rows = run(
        args.sizes.split(","),
        args.repeats,
        args.steps,
        args.batch,
        args.out,
        args.what.split(","),
        betas,
        _floats(args.slowness),
        args.reward_in_flight,
    )
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}\n" + summary(rows), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return rows

"""The one trainer. Each iteration runs named, timed phases:

    rollout -> reward -> advantage -> update -> log/save

A method (``flowrl.methods``) chooses the step plan, the credit assignment and the transition loss;
the pipeline adapter (``flowrl.pipelines``) owns the model; rewards come from ``flowrl.reward_models``.
"""

from __future__ import annotations

import copy
import logging
import math
import random
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import torch

from flowrl import checkpoint as ckpt
from flowrl import sharding
from flowrl.advantages import zero_std_ratio
from flowrl.config import Config, dump_config
from flowrl.data import GroupSampler, load_prompts
from flowrl.logs import MetricsWriter, plot_reward_curve, read_metrics, save_grid, timed
from flowrl.methods import build_method
from flowrl.pipelines.base import Conditioning, adapter_class
from flowrl.reward_models import RewardError, WeightedReward, build_reward
from flowrl.rollout import Trajectory, rollout, sample_images, transition

logger = logging.getLogger(__name__)


class OnPolicyError(RuntimeError):
    """The first update's recomputed log-probs differ from the rollout's."""


@dataclass
class RolloutBatch:
    traj: Trajectory
    cond: Conditioning
    prompts: list[str]
    metadata: list[dict]
    images: torch.Tensor  # (B, 3, H, W) in [0, 1], CPU


@dataclass
class UpdateStats:
    values: dict[str, list[float]] = field(default_factory=dict)

    def add(self, **kwargs: float) -> None:
        for k, v in kwargs.items():
            self.values.setdefault(k, []).append(float(v))

    def means(self) -> dict[str, float]:
        return {k: sum(v) / len(v) for k, v in self.values.items() if v}


class EMA:
    """Exponential moving average of the trainable parameters (Flow-GRPO: used for export, not rollouts)."""

    def __init__(self, params: dict[str, torch.Tensor], decay: float):
        self.decay = decay
        self.shadow = {k: p.detach().clone().float() for k, p in params.items()}
        self.updates = 0

    @torch.no_grad()
    def update(self, params: dict[str, torch.Tensor]) -> None:
        self.updates += 1
        d = min(self.decay, (1 + self.updates) / (10 + self.updates))  # warm-up as in Flow-GRPO
        for k, p in params.items():
            self.shadow[k].mul_(d).add_(p.detach().float(), alpha=1 - d)


def build_rewards(cfg: Config, weights: dict[str, float] | None = None) -> WeightedReward:
    weights = cfg.reward if weights is None else weights
    return WeightedReward(
        {name: (build_reward(name, **cfg.reward_args.get(name, {})), w) for name, w in weights.items()},
        timeout_s=cfg.train.reward_timeout_s,
    )


def _seed_of(*parts: object) -> int:
    return random.Random(":".join(map(str, parts))).getrandbits(63)


class Trainer:
    def __init__(self, cfg: Config, accelerator=None):
        from accelerate import Accelerator

        self.cfg = cfg
        self.acc = accelerator or Accelerator(mixed_precision=cfg.train.mixed_precision)
        if self.acc.distributed_type.value == "FSDP" and not self.acc.is_fsdp2:  # before any weight loads
            raise ValueError(
                "accelerate FSDP1 is not supported (it flattens each block into one tensor of one dtype): set "
                "fsdp_version: 2 in the accelerate config, as flowrl/recipes/accelerate/fsdp.yaml does"
            )
        # the same on every process (rank 0's seed, as ever): FSDP processes each keep a piece of one model
        torch.manual_seed(_seed_of(cfg.seed, "init", 0))
        self.out = Path(cfg.output_dir)
        self.prompts = load_prompts(cfg.data.prompts)
        s = cfg.sample
        self.sampler = GroupSampler(
            len(self.prompts), s.prompts_per_iteration, s.group_size, cfg.seed,
            self.acc.num_processes, self.acc.process_index,
        )
        self.adapter = adapter_class(cfg.model.pipeline).from_config(cfg.model, device=self.acc.device, seed=cfg.seed)
        self.method = build_method(cfg)
        self.reward = build_rewards(cfg)
        self.eval_reward = build_rewards(cfg, cfg.eval_reward) if cfg.eval_reward else self.reward
        self.eval_prompts = load_prompts(cfg.data.eval_prompts) if cfg.data.eval_prompts else self.prompts
        share = s.prompts_per_iteration * s.group_size // self.acc.num_processes
        if self.reward.pairwise and share % s.group_size:
            raise ValueError(
                f"a pairwise reward needs whole groups on each process: {share} samples per process is not a "
                f"multiple of sample.group_size={s.group_size}"
            )
        self._setup_policy()
        self.start_iteration = 0
        self._checked_onpolicy = False
        if cfg.resume:
            self._resume(cfg.resume)

    # ------------------------------------------------------------------------------------ set-up
    def _setup_policy(self) -> None:
        cfg, t = self.cfg, self.cfg.train
        transformer = self.adapter.transformer
        transformer.requires_grad_(False)
        self.ref_model = None
        if t.lora.enabled:
            from peft import LoraConfig

            transformer.add_adapter(
                LoraConfig(
                    r=t.lora.rank,
                    lora_alpha=t.lora.alpha,
                    init_lora_weights="gaussian" if t.lora.init == "gaussian" else True,
                    target_modules=t.lora.target_modules or self.adapter.lora_target_modules,
                    lora_dropout=t.lora.dropout,
                )
            )
        else:
            transformer.requires_grad_(True)
            if t.beta > 0:  # full fine-tuning keeps a frozen copy as the KL reference
                self.ref_model = copy.deepcopy(transformer).requires_grad_(False).eval()
        for p in transformer.parameters():
            if p.requires_grad:
                p.data = p.data.float()
        if t.gradient_checkpointing:
            transformer.enable_gradient_checkpointing()
        transformer.eval()  # no dropout anywhere: rollout and update must compute the same function
        self.trainable = {n: p for n, p in transformer.named_parameters() if p.requires_grad}
        if not self.trainable:
            raise ValueError("train.lora.target_modules matched no module: nothing to train")
        optimizer = torch.optim.AdamW(
            list(self.trainable.values()), lr=t.learning_rate, betas=tuple(t.adam_betas),
            weight_decay=t.weight_decay, eps=t.adam_eps,
        )
        self._deepspeed = self.acc.state.deepspeed_plugin is not None
        if self._deepspeed:
            self._configure_deepspeed()
        self.model, self.optimizer = self._prepare(transformer, optimizer)
        # FSDP2 swaps each parameter for its shard (a DTensor) in place: take them again
        self.trainable = {n: p for n, p in transformer.named_parameters() if p.requires_grad}
        self.ema = EMA(self.trainable, t.ema_decay) if t.ema else None
        self.optimizer_steps = 0

    def _prepare(self, transformer: torch.nn.Module, optimizer: torch.optim.Optimizer):
        """Wrap for the launch's strategy (DDP, DeepSpeed, FSDP2) through accelerate."""
        return self.acc.prepare(transformer, optimizer)

    def _configure_deepspeed(self) -> None:
        """DeepSpeed wants a micro-batch size (there is no dataloader to read it from) and does the
        clipping itself: fill both from the config where the accelerate config left them on ``auto``, and
        refuse a clipping value that disagrees with ``train.max_grad_norm``."""
        plugin, t = self.acc.state.deepspeed_plugin, self.cfg.train
        ds = plugin.deepspeed_config
        if plugin.is_auto("train_micro_batch_size_per_gpu") or "train_micro_batch_size_per_gpu" not in ds:
            ds["train_micro_batch_size_per_gpu"] = self.cfg.sample.batch_size
        if plugin.is_auto("gradient_clipping") or "gradient_clipping" not in ds:
            ds["gradient_clipping"] = t.max_grad_norm
        elif float(ds["gradient_clipping"]) != float(t.max_grad_norm):
            raise ValueError(
                f"deepspeed gradient_clipping={ds['gradient_clipping']} differs from train.max_grad_norm="
                f"{t.max_grad_norm}: DeepSpeed clips, so set them equal"
            )
        if ds.get("gradient_accumulation_steps", 1) not in (1, "auto"):
            raise ValueError(
                "deepspeed gradient_accumulation_steps must be 1: flowrl accumulates over transitions itself"
            )
        ds["gradient_accumulation_steps"] = 1

    def _resume(self, spec: str) -> None:
        path = ckpt.latest_checkpoint(self.out / "checkpoints") if spec == "latest" else Path(spec)
        if path is None:
            raise ckpt.CheckpointError(f"resume=latest: no complete checkpoint under {self.out / 'checkpoints'}")
        state = ckpt.load_checkpoint(path, rank=self.acc.process_index)
        missing = set(self.trainable) - set(state["trainable"])
        if missing:
            raise ckpt.CheckpointError(
                f"resume={str(path)!r}: checkpoint lacks {len(missing)} trainable tensors "
                f"(e.g. {sorted(missing)[0]!r}); was it saved with another model or LoRA setting?"
            )
        with torch.no_grad():
            for name, p in self.trainable.items():
                p.copy_(sharding.shard_like(state["trainable"][name], p))
        ckpt.optimizer_from_tensors(self.optimizer.optimizer, state["optimizer_tensors"], state["optimizer"])
        if self.ema is not None and state["ema"] is not None:
            self.ema.shadow = {k: sharding.shard_like(v, self.ema.shadow[k]) for k, v in state["ema"].items()}
            self.ema.updates = state.get("ema_updates", 0)
        ckpt.set_rng_state(state["rng_tensors"], state["rng"])
        self.optimizer_steps = state.get("optimizer_steps", 0)
        self.start_iteration = int(state["iteration"])
        self._checked_onpolicy = True  # weights are no longer the rollout policy of iteration 0
        logger.info("resumed from %s at iteration %d", path, self.start_iteration)

    # ------------------------------------------------------------------------------------ phases
    def collect(self, iteration: int) -> tuple[list[RolloutBatch], torch.Tensor]:
        """Rollout phase: this process's share of the iteration's samples, in rollout batches.

        All randomness is seeded by (seed, iteration, global sample position), so a sample's noise, SDE
        draws and window do not depend on the number of processes, and a resumed run repeats them.
        """
        cfg, s = self.cfg, self.cfg.sample
        samples = self.sampler.iteration(iteration)
        prompt_index = samples.prompt_index[samples.local]
        group_ids = samples.group_ids[samples.local]
        device = self.acc.device
        noise = self._initial_noise(iteration, samples)
        sigmas = self.adapter.sigmas(s.num_steps)
        batches = []
        for start in range(0, len(prompt_index), s.batch_size):
            rows = slice(start, start + s.batch_size)
            position = samples.local.start + start  # global position of the batch's first sample
            gen = torch.Generator(device).manual_seed(_seed_of(cfg.seed, iteration, "sde", position))
            plan = self.method.plan(sigmas, random.Random(_seed_of(cfg.seed, iteration, "plan", position)))
            items = [self.prompts[i] for i in prompt_index[rows].tolist()]
            prompts = [it.prompt for it in items]
            cond = self.adapter.encode_prompts(prompts)
            traj = rollout(self.adapter, cond, plan, noise[rows], group_ids[rows], s.guidance_scale, gen,
                           model=self.model)
            images = self.adapter.decode(traj.final).cpu()
            # "group" tells pairwise rewards which samples to compare (the prompt alone may repeat)
            metadata = [{**it.metadata, "group": g} for it, g in zip(items, group_ids[rows].tolist())]
            batches.append(RolloutBatch(traj, cond, prompts, metadata, images))
        return batches, samples.group_ids

    def _initial_noise(self, iteration: int, samples) -> torch.Tensor:
        """x at sigma = 1 for the local samples; shared within a group if ``same_noise_in_group``.

        Noise is drawn for all N samples of the iteration from one generator and sliced, so members on
        different processes agree; shared noise is drawn once per group.
        """
        cfg, device = self.cfg, self.acc.device
        n_draws = int(samples.group_ids.max()) + 1 if cfg.sample.same_noise_in_group else len(samples.group_ids)
        gen = torch.Generator(device).manual_seed(_seed_of(cfg.seed, iteration, "x0"))
        noise = self.adapter.initial_noise(n_draws, gen)
        if cfg.sample.same_noise_in_group:
            noise = noise[samples.group_ids.to(noise.device)]
        return noise[samples.local]

    def score(self, batches: list[RolloutBatch]) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]] | None:
        """Reward phase: local scores (n,), all processes' scores (N,) and each component's (N,).

        A reward that raises, hangs past ``train.reward_timeout_s`` or returns non-finite scores stops
        the run (``train.on_reward_error=stop``, the error names the reward) or skips the iteration
        (``skip``: returns None). Processes agree on the outcome before any gather.
        """
        images = torch.cat([b.images for b in batches])
        prompts = [p for b in batches for p in b.prompts]
        metadata = [m for b in batches for m in b.metadata]
        error: RewardError | None = None
        try:
            out = self.reward(images, prompts, metadata)
        except RewardError as exc:
            error = exc
        device = self.acc.device
        failed = self.acc.gather(torch.tensor([error is not None], device=device)).any()
        if bool(failed):
            if self.cfg.train.on_reward_error == "skip":
                logger.warning("skipping the iteration: %s", error or "a reward failed on another process")
                return None
            raise error or RewardError("a reward failed on another process")
        gathered = self.acc.gather(out.scores.to(device)).cpu()
        comps = {k: self.acc.gather(v.to(device)).cpu() for k, v in out.details["components"].items()}
        return out.scores, gathered, comps

    def update(self, batches: list[RolloutBatch], advantages: torch.Tensor, first: bool) -> dict[str, float]:
        """Update phase: PPO-clip (+ KL) over every trained transition of every kept sample.

        ``advantages``: (n,) or (n, T) for the local samples, in rollout order. Samples whose advantage
        is 0 at every trained step carry no signal and are dropped (single process; with several
        processes every rank keeps its rows so that all ranks run the same number of backward passes).
        """
        t = self.cfg.train
        units = []
        offset = 0
        for b in batches:
            n = len(b.traj)
            adv = advantages[offset : offset + n]
            offset += n
            keep = (adv != 0) if adv.ndim == 1 else (adv != 0).any(dim=1)
            if self.acc.num_processes == 1 and not bool(keep.all()):
                if not bool(keep.any()):
                    continue
                idx = keep.nonzero().flatten()
                b = RolloutBatch(b.traj.select(idx), {k: v[idx.to(v.device)] for k, v in b.cond.items()},
                                 [b.prompts[i] for i in idx.tolist()], [b.metadata[i] for i in idx.tolist()],
                                 b.images[idx])
                adv = adv[idx]
            units.append((b, adv))
        stats = UpdateStats()
        stats.add(kept_frac=sum(len(u[0].traj) for u in units) / max(offset, 1))
        if not units:
            return stats.means()
        n_steps = min(t.optimizer_steps_per_iteration, len(units))
        per_step = math.ceil(len(units) / n_steps)
        for u, (b, adv) in enumerate(units):
            group_start = (u // per_step) * per_step
            in_group = min(per_step, len(units) - group_start)
            sync = u == group_start + in_group - 1
            self._update_unit(b, adv, in_group, sync, stats, measure=u == 0, enforce=first)
            if sync:
                grad_norm = self.acc.clip_grad_norm_(list(self.trainable.values()), t.max_grad_norm)
                grad_norm = float("nan") if grad_norm is None else sharding.as_float(grad_norm)  # None: DeepSpeed's first step
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
                self.optimizer_steps += 1
                stats.add(grad_norm=float(grad_norm))
                if self.ema is not None and self.optimizer_steps % t.ema_every == 0:
                    self.ema.update(self.trainable)
        return stats.means()

    def _update_unit(self, b: RolloutBatch, adv: torch.Tensor, in_group: int, sync: bool,
                     stats: UpdateStats, measure: bool, enforce: bool) -> None:
        """Loss and backward for every trained transition of one minibatch. ``measure``: this is the
        iteration's first minibatch, still on-policy, so log the log-prob gap; ``enforce``: the first
        update of the run, where a gap above ``train.onpolicy_tol`` stops it."""
        traj, plan = b.traj, b.traj.plan
        trained = plan.trained_indices
        w = self.cfg.sample.guidance_scale
        max_diff = 0.0
        inputs = self.adapter.model_inputs(b.cond, w)
        for k, j in enumerate(trained):
            last = sync and k == len(trained) - 1
            ctx = nullcontext() if last or self.acc.num_processes == 1 else self.acc.no_sync(self.model)
            adv_j = (adv if adv.ndim == 1 else adv[:, j]).to(self.acc.device)
            with ctx:
                x, x_next = traj.states[:, j], traj.states[:, j + 1]
                new = transition(self.adapter, plan, j, x, inputs, w, x_next=x_next, model=self.model)
                ref_mean = self._reference_mean(plan, j, x, x_next, inputs) if self.cfg.train.beta > 0 else None
                tl = self.method.transition_loss(new, traj.log_probs[:, j], adv_j, ref_mean)
                if self._deepspeed:  # DeepSpeed steps the optimizer inside the backward it is told is last
                    self.acc.gradient_state._set_sync_gradients(last)
                self.acc.backward(tl.loss / (len(trained) * in_group))
            max_diff = max(max_diff, float((new.log_prob.detach() - traj.log_probs[:, j]).abs().max()))
            stats.add(loss=tl.loss.item(), pg_loss=tl.policy_loss, kl=tl.kl, approx_kl=tl.approx_kl,
                      clip_frac=tl.clip_frac, ratio_mean=tl.ratio_mean)
        if measure:
            stats.add(onpolicy_logp_diff=max_diff)
            if enforce and self.cfg.train.onpolicy_check and not self._checked_onpolicy:
                self._checked_onpolicy = True
                if max_diff > self.cfg.train.onpolicy_tol:
                    raise OnPolicyError(
                        f"step-0 on-policy check failed: recomputed log-prob differs from the rollout's by "
                        f"{max_diff:.3g} > train.onpolicy_tol={self.cfg.train.onpolicy_tol:g}; the training "
                        "forward is not the rollout's (precision/autocast mismatch, a different schedule or "
                        "batch, or dropout left on)"
                    )

    @torch.no_grad()
    def _reference_mean(self, plan, j, x, x_next, inputs) -> torch.Tensor:
        """Mean of transition j under the reference policy: the base weights (LoRA disabled)."""
        w = self.cfg.sample.guidance_scale
        if self.ref_model is not None:
            return transition(self.adapter, plan, j, x, inputs, w, x_next=x_next, model=self.ref_model).mean
        with self._adapters_disabled():
            return transition(self.adapter, plan, j, x, inputs, w, x_next=x_next, model=self.model).mean

    @contextmanager
    def _adapters_disabled(self):
        transformer = self.adapter.transformer
        transformer.disable_adapters()
        try:
            yield
        finally:
            transformer.enable_adapters()

    # ------------------------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self, iteration: int) -> dict[str, float]:
        """ODE samples (eval steps and guidance, EMA weights) of held-out prompts, scored by ``eval_reward``.

        The prompts and initial noise are the same at every evaluation, so curves compare like with like.
        Prompts are dealt to processes in equal shares (padded by repeating the last) and scores gathered.
        """
        cfg, log = self.cfg, self.cfg.log
        items = self.eval_prompts[: log.eval_num_prompts]
        items = [it for it in items for _ in range(log.eval_images_per_prompt)]
        world, rank = self.acc.num_processes, self.acc.process_index
        n = len(items)
        items = items + items[-1:] * ((-n) % world)
        share = len(items) // world
        mine = items[rank * share : (rank + 1) * share]
        gen = torch.Generator(self.acc.device).manual_seed(_seed_of(cfg.seed, "eval"))
        noise = self.adapter.initial_noise(len(items), gen)[rank * share : (rank + 1) * share]
        with self._ema_weights():
            images = sample_images(self.adapter, [it.prompt for it in mine], noise, cfg.sample.eval_num_steps,
                                   cfg.sample.eval_guidance_scale, cfg.sample.batch_size, model=self.model)  # fmt: skip
        out = self.eval_reward(images, [it.prompt for it in mine], [dict(it.metadata) for it in mine])
        device = self.acc.device
        total = self.acc.gather(out.scores.to(device)).cpu()[:n]
        metrics = {"eval/reward/mean": float(total.mean()), "eval/reward/std": float(total.std(unbiased=False))}
        if self.eval_reward is not self.reward:  # the trained reward on held-out prompts, for the gap
            trained = self.reward(images, [it.prompt for it in mine], [dict(it.metadata) for it in mine])
            metrics["eval/train_reward/mean"] = float(self.acc.gather(trained.scores.to(device)).cpu()[:n].mean())
        for name, v in out.details["components"].items():
            metrics[f"eval/reward/{name}/mean"] = float(self.acc.gather(v.to(device)).cpu()[:n].mean())
        if self.acc.is_main_process:
            save_grid(images[: log.num_sample_images], self.out / "samples" / f"eval-{iteration:06d}.png")
        return metrics

    def _due_for_eval(self, iteration: int) -> bool:
        """Before iterations 0, k, 2k, ... (the policy as trained so far); the end is evaluated apart."""
        every = self.cfg.log.eval_every
        return every > 0 and iteration % every == 0

    def _timed_eval(self, iteration: int) -> dict[str, float]:
        metrics: dict[str, float] = {}
        with timed(metrics, "eval"):
            metrics.update(self.evaluate(iteration))
        return metrics

    # ------------------------------------------------------------------------------------ one iteration
    def step(self, iteration: int) -> dict[str, float]:
        metrics: dict[str, float] = {"iteration": iteration}
        with timed(metrics, "iteration"):
            with timed(metrics, "rollout"):
                batches, group_ids = self.collect(iteration)
            with timed(metrics, "reward"):
                scored = self.score(batches)
            if scored is None:
                metrics["skipped"] = 1.0
                return metrics
            _, scores, comps = scored
            with timed(metrics, "advantage"):
                adv_all = self.method.advantages(scores, group_ids)
                share = self.sampler.iteration(iteration).local
                advantages = adv_all[share]
            with timed(metrics, "update"):
                first = iteration == self.start_iteration
                self._updating = True  # weights change from here on: an interrupt must not save them
                upd = self._mean_over_processes(self.update(batches, advantages, first))
                self._updating = False
        metrics.update(self._reward_metrics(scores, comps, group_ids))
        if self.cfg.log.monitors:
            from flowrl.reward_models.monitors import image_monitors

            local_groups = torch.cat([b.traj.prompt_ids for b in batches])
            metrics.update(self._mean_over_processes(image_monitors(self._last_images_of(batches), local_groups)))
        metrics["throughput/images_per_s"] = len(group_ids) / metrics["timing_s/iteration"]
        metrics["memory/peak_gib"] = _peak_memory_gib(self.acc.device)
        metrics.update({f"policy/{k}": v for k, v in upd.items() if k != "kept_frac"})
        metrics["adv/kept_frac"] = upd.get("kept_frac", 0.0)
        metrics["adv/abs_mean"] = float(adv_all.abs().mean())
        self._last_images = self._last_images_of(batches)
        return metrics

    @staticmethod
    def _last_images_of(batches: list[RolloutBatch]) -> torch.Tensor:
        return torch.cat([b.images for b in batches])

    def _mean_over_processes(self, values: dict[str, float]) -> dict[str, float]:
        """Average per-process update statistics (each process holds an equal share of the samples)."""
        if self.acc.num_processes == 1 or not values:
            return values
        keys = sorted(values)
        t = torch.tensor([values[k] for k in keys], dtype=torch.float64, device=self.acc.device)
        t = self.acc.reduce(t, reduction="mean")
        return dict(zip(keys, t.tolist()))

    @staticmethod
    def _reward_metrics(scores, comps, group_ids) -> dict[str, float]:
        m = {"reward/mean": float(scores.mean()), "reward/std": float(scores.std(unbiased=False))}
        for name, v in comps.items():
            m[f"reward/{name}/mean"] = float(v.mean())
            m[f"reward/{name}/std"] = float(v.std(unbiased=False))
        m["reward/zero_std_ratio"] = zero_std_ratio(scores, group_ids)
        return m

    # ------------------------------------------------------------------------------------ run
    def train(self) -> list[dict]:
        """Run ``train.iterations`` iterations (from the resumed one); returns the metrics written."""
        cfg, main = self.cfg, self.acc.is_main_process
        if main:
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / "config.yaml").write_text(dump_config(cfg))
        writer = MetricsWriter(self.out / "metrics.jsonl", self.start_iteration) if main else None
        history = []
        bar = _progress(range(self.start_iteration, cfg.train.iterations), disable=not main)
        iteration = self.start_iteration
        self._last_saved = self.start_iteration
        self._updating = False
        restore_sigterm = _sigterm_as_interrupt()
        try:
            for iteration in bar:
                evaluation = self._timed_eval(iteration) if self._due_for_eval(iteration) else {}
                metrics = {**self.step(iteration), **evaluation}
                if "eval/reward/mean" in metrics and "reward/mean" in metrics:
                    # trained-on prompts minus held-out prompts, both under the training reward
                    held_out = metrics.get("eval/train_reward/mean", metrics["eval/reward/mean"])
                    metrics["monitor/heldout_gap"] = metrics["reward/mean"] - held_out
                history.append(metrics)
                if main:
                    writer.write(metrics)
                    bar.set_postfix(reward=f"{metrics.get('reward/mean', float('nan')):.4f}",
                                    kl=f"{metrics.get('policy/kl', 0):.2g}")
                    self._maybe_save_samples(iteration)
                done = iteration + 1
                stop = self._stop_rule_hit(metrics)
                if done % cfg.log.save_every == 0 or done == cfg.train.iterations or stop:
                    self.save(done)
                if stop:
                    logger.warning("early stop after iteration %d: %s", iteration, stop)
                    break
            if self.cfg.log.eval_every > 0 and self.start_iteration < cfg.train.iterations:
                # the trained policy: one more row after the last iteration, with evaluation metrics only
                done = iteration + 1
                final = {"iteration": done, **self._timed_eval(done)}
                history.append(final)
                if main:
                    writer.write(final)
        except (KeyboardInterrupt, RewardError) as exc:
            # all processes reach this together (a reward failure is agreed on in `score`)
            if iteration > self._last_saved and not self._updating:
                logger.warning("stopping (%s): saving the %d completed iterations first", type(exc).__name__, iteration)
                self.save(iteration)
            raise
        finally:
            restore_sigterm()
        if main and (self.out / "metrics.jsonl").exists():
            plot_reward_curve(read_metrics(self.out / "metrics.jsonl"), self.out / "reward_curve.png")
        return history

    def _stop_rule_hit(self, metrics: dict[str, float]) -> str | None:
        """The first ``log.stop_if`` rule that this iteration's metrics satisfy (same on every process)."""
        from flowrl.config import parse_stop_rule

        for rule in self.cfg.log.stop_if:
            name, op, value = parse_stop_rule(rule)
            if name in metrics and (metrics[name] < value if op == "<" else metrics[name] > value):
                return f"{rule} ({name} = {metrics[name]:.4g})"
        return None

    def _maybe_save_samples(self, iteration: int) -> None:
        log = self.cfg.log
        last = iteration == self.cfg.train.iterations - 1
        if iteration % log.sample_every == 0 or last:
            save_grid(self._last_images[: log.num_sample_images], self.out / "samples" / f"iter-{iteration:06d}.png")

    def save(self, iterations_done: int) -> None:
        """Checkpoint (rank 0 writes, every rank waits) and export the LoRA in diffusers format."""
        self._last_saved = iterations_done
        root = self.out / "checkpoints"
        tmp = root / (ckpt.checkpoint_name(iterations_done) + ".tmp")
        self.acc.wait_for_everyone()
        if self.acc.is_main_process:
            ckpt.begin_checkpoint(root, iterations_done)
        self.acc.wait_for_everyone()
        ckpt.write_rng(tmp, self.acc.process_index)  # every process's RNG
        self.acc.wait_for_everyone()
        # whole tensors, gathered from FSDP shards by every process and kept by the main one
        main = self.acc.is_main_process
        trainable = sharding.whole_on_main(self.trainable, main)
        optimizer_state = ckpt.optimizer_to_tensors(self.optimizer.optimizer, main)
        ema = sharding.whole_on_main(self.ema.shadow, main) if self.ema else None
        if main:
            ckpt.finish_checkpoint(
                tmp, iterations_done, trainable, optimizer_state, ema=ema,
                extra={"optimizer_steps": self.optimizer_steps, "ema_updates": self.ema.updates if self.ema else 0,
                       "processes": self.acc.num_processes},
            )
            ckpt.prune_checkpoints(root, self.cfg.log.keep_last)
        del trainable, optimizer_state, ema
        self.export(self.out)
        self.acc.wait_for_everyone()

    def export(self, run_dir: Path) -> None:
        """The trained weights in diffusers format (EMA weights when enabled): ``lora/`` for LoRA
        (``pipe.load_lora_weights``), ``transformer/`` for full fine-tuning (``from_pretrained``).

        Every process calls it (gathering FSDP shards is collective); the main process writes."""
        transformer = self.acc.unwrap_model(self.model)
        main = self.acc.is_main_process
        with self._ema_weights():
            if self.cfg.train.lora.enabled:
                from peft.utils import get_peft_model_state_dict

                state = sharding.whole_on_main(get_peft_model_state_dict(transformer), main)
                if main:
                    (run_dir / "lora").mkdir(parents=True, exist_ok=True)
                    self.adapter.save_lora(run_dir / "lora", state)
            else:
                state = sharding.whole_on_main(transformer.state_dict(), main)
                if main:
                    from huggingface_hub import save_torch_state_dict

                    transformer.save_config(run_dir / "transformer")
                    save_torch_state_dict(state, run_dir / "transformer", max_shard_size="10GB",
                                          filename_pattern="diffusion_pytorch_model{suffix}.safetensors")

    @contextmanager
    def _ema_weights(self):
        """Temporarily load the EMA weights into the trainable parameters (no-op without EMA)."""
        if self.ema is None:
            yield
            return
        saved = {k: p.detach().clone() for k, p in self.trainable.items()}
        with torch.no_grad():
            for k, p in self.trainable.items():
                p.copy_(self.ema.shadow[k])
        try:
            yield
        finally:
            with torch.no_grad():
                for k, p in self.trainable.items():
                    p.copy_(saved[k])


def _peak_memory_gib(device: torch.device) -> float:
    """Peak accelerator memory since the last call (CUDA), else the process's peak resident memory."""
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        return peak / 2**30
    # VmHWM is this process's own high-water mark; ru_maxrss survives exec, so a process started from a
    # large parent (pytest, a launcher) would report the parent's peak
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 2**20  # kB
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def _sigterm_as_interrupt():
    """SIGTERM (a scheduler's pre-emption) behaves like Ctrl-C: save, then stop. Returns the restorer."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    return lambda: signal.signal(signal.SIGTERM, previous)


def _progress(iterable, disable: bool):
    from tqdm.auto import tqdm

    return tqdm(iterable, desc="flowrl", unit="it", disable=disable, dynamic_ncols=True)

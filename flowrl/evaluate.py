"""Held-out evaluation: ODE samples of held-out prompts under the EMA weights, scored by ``eval_reward``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from flowrl import latents
from flowrl.data import item_images, with_source_images
from flowrl.logs import timed
from flowrl.media import save_media
from flowrl.mesh import Mesh
from flowrl.pipelines.kit.images import ImageCache
from flowrl.policy import Weights
from flowrl.reward_models import RewardOutput, WeightedReward
from flowrl.rollout import sample_images
from flowrl.seeds import seed_of


class Evaluation:
    """The run's evaluations: before iterations 0, k, 2k, ... (``log.eval_every`` k) and once after the last."""

    def __init__(
        self,
        cfg: Any,
        acc: Any,
        adapter: Any,
        policy: Any,
        prompts: list,
        reward: WeightedReward,
        train_reward: WeightedReward,
        out: Path,
        mesh: Mesh | None = None,
    ):
        self.cfg, self.acc, self.adapter, self.policy = cfg, acc, adapter, policy
        self.mesh = mesh or Mesh.of(acc)
        self.prompts, self.reward, self.train_reward, self.out = prompts, reward, train_reward, out
        self.read_images = ImageCache()

    def due(self, iteration: int) -> bool:
        """Before iterations 0, k, 2k, ... (the policy as trained so far); the end is evaluated apart."""
        every = self.cfg.log.eval_every
        return every > 0 and iteration % every == 0

    def timed(self, iteration: int) -> dict[str, float]:
        """``run`` with its time as ``timing_s/eval``."""
        metrics: dict[str, float] = {}
        with timed(metrics, "eval"):
            metrics.update(self.run(iteration))
        return metrics

    @torch.no_grad()
    def run(self, iteration: int) -> dict[str, float]:
        """ODE samples (eval steps and guidance, EMA weights) of held-out prompts, scored by ``eval_reward``.

        The prompts and initial noise are the same at every evaluation, so curves compare like with like.
        Prompts are dealt to processes in equal shares (padded by repeating the last) and scores gathered.
        """
        cfg, log, acc = self.cfg, self.cfg.log, self.acc
        items = self.prompts[: log.eval_num_prompts]
        items = [it for it in items for _ in range(log.eval_images_per_prompt)]
        world, rank, once = self.mesh.data, self.mesh.data_rank, self.mesh.once
        n = len(items)
        items = items + items[-1:] * ((-n) % world)
        share = len(items) // world
        mine = items[rank * share : (rank + 1) * share]
        gen = torch.Generator(acc.device).manual_seed(seed_of(cfg.seed, "eval"))
        noise = latents.rows(self.adapter.initial_noise(len(items), gen), slice(rank * share, (rank + 1) * share))
        sources = item_images(mine, self.read_images)  # None for text-only prompts
        with self.policy.weights(Weights.EMA) as model:
            media = sample_images(self.adapter, [it.prompt for it in mine], noise, cfg.sample.eval_num_steps,
                                  cfg.sample.eval_guidance_scale, cfg.sample.batch_size, model=model,
                                  negative_prompts=[it.negative_prompt for it in mine], images=sources)  # fmt: skip
        prompts = [it.prompt for it in mine]
        metadata = with_source_images([dict(it.metadata) for it in mine], sources)
        out = self._score(self.reward, media, prompts, metadata)
        device = acc.device
        total = once(acc.gather(out.scores.to(device))).cpu()[:n]
        metrics = {"eval/reward/mean": float(total.mean()), "eval/reward/std": float(total.std(unbiased=False))}
        if self.reward is not self.train_reward:  # the trained reward on held-out prompts, for the gap
            trained = self._score(self.train_reward, media, prompts, [dict(m) for m in metadata])
            metrics["eval/train_reward/mean"] = float(once(acc.gather(trained.scores.to(device))).cpu()[:n].mean())
        for name, v in out.details["components"].items():
            metrics[f"eval/reward/{name}/mean"] = float(once(acc.gather(v.to(device))).cpu()[:n].mean())
        if acc.is_main_process:
            save_media(
                media,
                self.out / "samples" / f"eval-{iteration:06d}",
                max_samples=log.num_sample_images,
                sources=sources,
            )
        return metrics

    def _score(self, reward: WeightedReward, media: Any, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        """``reward`` of the samples, called once per sample: under sequence parallelism by a group's first
        process only (the others' zeros are dropped when gathered, ``Mesh.once``)."""
        if self.mesh.leads:
            return reward(media, prompts, metadata)
        zeros = torch.zeros(len(prompts))
        return RewardOutput(zeros, {"components": dict.fromkeys(reward.rewards, zeros)})

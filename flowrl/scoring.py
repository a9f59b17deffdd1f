"""The reward phase: the rewards a run calls, their calls in the background while the rollout goes on, the error
policy, and the scores of every process gathered in global sample order.

With ``train.reward_overlap`` (the default) the rollout phase hands each rollout batch to ``Scoring.submit`` as soon
as it is decoded; up to ``train.reward_in_flight`` of these calls run at once in daemon threads while the next
batches sample, and ``Scoring.score`` waits for them in batch order. So ``timing_s/rollout`` includes the decode and
the submission, and ``timing_s/reward`` is the wait that is left.
"""

from __future__ import annotations

import logging
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from flowrl.advantages import zero_std_ratio
from flowrl.configkit import ConfigError
from flowrl.media import cat_media, num_samples
from flowrl.mesh import Mesh
from flowrl.pipelines.base import media_kind_of
from flowrl.reward_models import RewardError, WeightedReward, build_reward
from flowrl.rollout import RolloutBatch
from flowrl.workers import Workers

if TYPE_CHECKING:  # the config checks rewards through this module (check_reward_modality)
    from flowrl.config import Config

logger = logging.getLogger(__name__)


def build_rewards(cfg: Config, weights: dict[str, float] | None = None) -> WeightedReward:
    weights = cfg.reward if weights is None else weights
    rewards = {name: (build_reward(name, **cfg.reward_args.get(name, {})), w) for name, w in weights.items()}
    kind = media_kind_of(cfg.model.pipeline)
    for name, (reward, _) in rewards.items():
        check_reward_modality(name, reward, cfg.model.pipeline, kind)
    return WeightedReward(rewards, timeout_s=cfg.train.reward_timeout_s, report_every_s=cfg.train.reward_report_s)


def check_reward_modality(name: str, reward, pipeline: str, kind: str) -> None:
    """Refuse, in one line, a reward that scores another kind of media than the pipeline makes (an image reward
    on video points to the per-frame ``video`` reward). A remote reward, whose modality its server says, is
    checked by the server on each call instead."""
    from flowrl.reward_models.base import FunctionReward

    if isinstance(reward, FunctionReward):  # a plain function declares no media kind: it takes what comes
        return
    cls = reward if isinstance(reward, type) else type(reward)
    declared = getattr(reward, "__dict__", {}).get("modality", getattr(cls, "modality", "image"))
    if isinstance(declared, property) or kind in getattr(cls, "modalities", (declared,)):
        return
    if kind == "audio_video" and declared in ("video", "audio"):  # it reads its own modality of the mapping
        return
    if declared == "image" and kind in ("video", "audio_video"):
        hint = (
            f"; to score each frame with it, use the video reward instead: reward.video=<weight> with "
            f"reward_args.video.reward={name}"
        )
    else:
        hint = f"; choose a reward that scores {kind} (flowrl ls rewards)"
    raise ConfigError(f"reward {name!r} scores {declared} media, but model.pipeline={pipeline} makes {kind}{hint}")


@dataclass
class Scores:
    """The reward phase's output, all processes' samples in global order."""

    final: torch.Tensor  # (N,) weighted reward of the final samples
    components: dict[str, torch.Tensor]  # reward name -> (N,) its score of the final samples
    # what credit sees: "final" (N,), every other scored name (N, K), each reward's own unweighted score of
    # them as "final/<reward>" and "<name>/<reward>", and the method's info columns
    columns: dict[str, torch.Tensor]
    calls: int  # this process's reward evaluations (samples x pointwise rewards, plus pairwise comparisons)
    calls_by_reward: dict[str, float] = field(default_factory=dict)  # the same, per reward


def reward_metrics(scores: torch.Tensor, comps: dict[str, torch.Tensor], group_ids: torch.Tensor) -> dict[str, float]:
    """``reward/*``: the weighted reward's and each reward's mean and std over the iteration's samples."""
    m = {"reward/mean": float(scores.mean()), "reward/std": float(scores.std(unbiased=False))}
    for name, v in comps.items():
        m[f"reward/{name}/mean"] = float(v.mean())
        m[f"reward/{name}/std"] = float(v.std(unbiased=False))
    m["reward/zero_std_ratio"] = zero_std_ratio(scores, group_ids)
    return m


def extra_k(b: RolloutBatch, name: str) -> int:
    """K of the extra scored name ``name``: its samples per rollout sample."""
    return num_samples(b.extra[name]) // len(b.prompts)


class Scoring:
    """The reward phase of a run: ``reward`` (a ``WeightedReward``) called on every rollout batch, in the
    background while the rollout goes on (``submit``) or in turn, and ``score`` over an iteration's batches."""

    def __init__(self, cfg: Config, acc: Any, reward: WeightedReward | None, mesh: Mesh | None = None):
        self.cfg, self.acc, self.reward = cfg, acc, reward  # None: no reward (a method that needs none)
        self.mesh = mesh or Mesh.of(acc)
        rewards = reward.rewards if reward is not None else {}
        # the names of the pairwise rewards (their columns are win rates), for credit
        self.pairwise = frozenset(n for n, (r, _) in rewards.items() if getattr(r, "pairwise", False))
        # a pairwise reward compares whole groups, so it is called once after the rollout
        self.overlap = cfg.train.reward_overlap and bool(rewards) and not self.pairwise
        self._workers: Workers | None = None

    def submit(self, rb: RolloutBatch, alone: bool = False) -> None:
        """Start ``rb``'s reward calls in the background (``train.reward_overlap``; else nothing happens now).
        ``alone``: ``rb`` is this process's whole share of the iteration, so no later batch samples while its reward
        runs; it is scored in ``score`` with no thread to hand it to."""
        if not self.overlap or alone:
            return
        if self._workers is None:
            self._workers = Workers("flowrl-rewards", self.cfg.train.reward_in_flight)
        rb.pending = self._workers.submit(self.call, [rb])

    def close(self) -> None:
        """Stop the reward workers (the end of ``Trainer.train``); the next ``submit`` starts them again."""
        if self._workers is not None:
            self._workers.close()
            self._workers = None

    def call(self, batches: list[RolloutBatch]) -> dict[str, tuple[torch.Tensor, dict[str, torch.Tensor], dict]]:
        """The reward calls of ``batches``: their final samples and every other scored name, as
        name -> (weighted scores (n K,), each reward's scores, calls). Raises ``RewardError`` (the reward's name)."""
        prompts = [p for b in batches for p in b.prompts]
        metadata = [m for b in batches for m in b.metadata]
        jobs = {"final": (cat_media([b.media for b in batches]), 1)}
        for name in batches[0].extra:
            jobs[name] = (cat_media([b.extra[name] for b in batches]), extra_k(batches[0], name))
        out = {}
        for name, (media, k) in jobs.items():
            if not self.mesh.leads:  # a sequence-parallel group's samples are scored once, by its first process
                zeros = torch.zeros(num_samples(media))
                out[name] = (zeros, dict.fromkeys(self.reward.rewards, zeros), {})
                continue
            result = self.reward(media, [p for p in prompts for _ in range(k)], [m for m in metadata for _ in range(k)])
            out[name] = (
                result.scores,
                {c: torch.as_tensor(v) for c, v in result.details["components"].items()},
                result.details.get("calls", {}),
            )
        return out

    def score(self, batches: list[RolloutBatch]) -> Scores | None:
        """The final samples and every other latent the method asked to score, gathered over processes in
        global order.

        A reward that raises, hangs past ``train.reward_timeout_s`` or returns non-finite scores stops
        the run (``train.on_reward_error=stop``, the error names the reward) or skips the iteration
        (``skip``: returns None). Processes agree on the outcome before any gather.
        """
        if self.reward is None:
            return self.unscored(batches)
        names = ["final", *batches[0].extra]
        parts, error = self._call_all(batches)
        outputs = self._joined(parts, names) if error is None else {}
        failed = self.acc.gather(torch.tensor([error is not None], device=self.acc.device)).any()
        if bool(failed):
            if self.cfg.train.on_reward_error == "skip":
                logger.warning("skipping the iteration: %s", error or "a reward failed on another process")
                return None
            raise error or RewardError("a reward failed on another process")
        columns, components = self._gathered(batches, names, outputs)
        # this process's evaluations: a pointwise reward's samples, a pairwise one's comparisons
        by_reward = {
            r: float(sum(part[name][2].get(r, 0) for part in parts for name in names)) for r in self.reward.rewards
        }
        return Scores(columns["final"], components, columns, int(sum(by_reward.values())), by_reward)

    def _call_all(self, batches: list[RolloutBatch]) -> tuple[list[dict], RewardError | None]:
        """Every batch's reward results, in batch order, or the error that stopped them."""
        parts, error = [], None
        try:
            if self.overlap:  # each batch was submitted when it was sampled; their results in batch order
                parts = [b.pending.result() if b.pending is not None else self.call([b]) for b in batches]
            elif self.reward.pairwise:  # whole groups in one call
                parts = [self.call(batches)]
            else:
                parts = [self.call([b]) for b in batches]
        except RewardError as exc:
            error = exc
            # the batches still scoring in the background finish first (each call is bounded by the
            # timeout), so that no reward runs while the next phase or an evaluation calls it
            futures_wait([b.pending for b in batches if b.pending is not None])
        return parts, error

    @staticmethod
    def _joined(parts: list[dict], names: list[str]) -> dict[str, tuple[torch.Tensor, dict[str, torch.Tensor]]]:
        """This process's scores and components of each scored latent, its batches' joined."""
        return {
            name: (
                torch.cat([part[name][0] for part in parts]),
                {c: torch.cat([part[name][1][c] for part in parts]) for c in parts[0][name][1]},
            )
            for name in names
        }

    def _gathered(
        self, batches: list[RolloutBatch], names: list[str], outputs: dict
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Every process's reward columns (``final`` (N,), another scored latent's (N, K), each component's,
        the exploration's info columns), and the final reward's components, in global order."""
        n, device = sum(len(b.prompts) for b in batches), self.acc.device
        ks = {"final": 1, **{name: extra_k(batches[0], name) for name in batches[0].extra}}

        def gather(t: torch.Tensor) -> torch.Tensor:  # each sample once: its sequence-parallel group's first
            return self.mesh.once(self.acc.gather(t.to(device))).cpu()

        final_scores, final_components = outputs["final"]
        columns = {"final": gather(final_scores)}  # (N,)
        for name in names[1:]:
            k = ks[name]
            scores, comps = outputs[name]
            columns[name] = gather(scores.view(n, k))  # (N, K)
            for comp, values in comps.items():  # each reward's own, unweighted
                columns[f"{name}/{comp}"] = gather(values.view(n, k))
        for name in batches[0].info:
            columns[name] = gather(torch.cat([b.info[name] for b in batches]))
        components = {k: gather(v) for k, v in final_components.items()}
        columns.update({f"final/{k}": v for k, v in components.items()})
        return columns, components

    def unscored(self, batches: list[RolloutBatch]) -> Scores:
        """The reward phase without a reward: no call, a zero ``final`` column and the method's info columns,
        gathered over processes in global order."""
        n = sum(len(b.prompts) for b in batches)
        acc, once = self.acc, self.mesh.once
        columns = {"final": once(acc.gather(torch.zeros(n, device=acc.device))).cpu()}
        for name in batches[0].info:
            columns[name] = once(acc.gather(torch.cat([b.info[name] for b in batches]).to(acc.device))).cpu()
        return Scores(columns["final"], {}, columns, 0, {})

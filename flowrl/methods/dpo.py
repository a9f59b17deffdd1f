"""Diffusion-DPO (Wallace et al., CVPR 2024, arXiv 2311.12908), online and offline, in the flow-matching form of
flow_grpo (``scripts/train_sd3_dpo.py``), Flow-Factory (``trainers/dpo.py``, offline DPO) and verl-omni
(``docs/algo/diffusion_dpo.md``). Math: ``flowrl.preference``.

* **online** (``pairs=online``): each prompt group's endpoints by the ODE sampler (``sample.*``), one reward each;
  the group's best sample is the chosen x0^w and its worst the rejected x0^l (``best_worst``; a flat group makes
  no pair);
* **offline** (``pairs=dataset``): a preference folder's (prompt, chosen, rejected) rows (``flowrl.media_data``),
  a row a prompt group of two (``sample.group_size=2``: member 0 chosen, 1 rejected), the images VAE-encoded;
  no rollout, and no reward needs to be configured.

Both members of a pair are noised with the same eps and t, K times (``num_noisings``; t logit-normal, shifted), and
with Delta(x0) = ||v_theta - u||^2 - ||v_ref - u||^2 (mean over elements, u = eps - x0) the loss of a pair is
-log sigmoid(-(beta / 2) (Delta(x0^w) - Delta(x0^l))). The reference forward runs in the loss, on the pairs' rows
only (a group of 24 trains 2 of them). Pairs stay together on every process: each rollout batch holds whole groups.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from flowrl.configkit import ConfigError
from flowrl.media import MediaKind
from flowrl.media_data import DatasetKind, check_family_encodes, data_root, encode_images, load_images, row_media
from flowrl.methods.base import Context, Experience, MethodBase, PromptBatch, TransitionLoss
from flowrl.methods.forward_process import Endpoints
from flowrl.methods.seam import Advantages, Needs, RewardTable
from flowrl.pipelines.base import Conditioning
from flowrl.plan import ODE_SOLVERS, ode_plan
from flowrl.preference import best_worst, dpo_loss, logit_normal_times, pair_rows, velocity_error

CHOSEN = "dpo/chosen"  # the info column of offline rows: 1 the chosen member of its pair, 0 the rejected


@dataclass
class NoisingOptions:
    """How a clean sample is noised for a flow-matching loss: K times, t ~ logit-normal (or uniform), shifted."""

    # K noisings of each sample (of each pair), each a loss item (DPO: Flow-Factory's 1; flow_grpo's int(0.99 N))
    num_noisings: int = 1
    time_law: str = "logit_normal"  # logit_normal: t = sigmoid(mean + std z) | uniform
    logit_mean: float = 0.0  # the logit-normal law's mean (Flow-Factory and flow_grpo: 0)
    logit_std: float = 1.0  # the logit-normal law's std (Flow-Factory and flow_grpo: 1)
    # t <- s t / (1 + (s - 1) t): flow_grpo's 3 (its DPO indexes SD3's shift-3 scheduler with the logit-normal
    # draw); Flow-Factory's DPO default is 1.0 (no shift)
    time_shift: float = 3.0

    def __post_init__(self):
        if self.num_noisings < 1:
            raise ConfigError(f"method.options.num_noisings: must be >= 1, got {self.num_noisings}")
        if self.time_law not in ("logit_normal", "uniform"):
            raise ConfigError(f"method.options.time_law: {self.time_law!r}; allowed: logit_normal, uniform")
        if self.logit_std <= 0:
            raise ConfigError(f"method.options.logit_std: must be > 0, got {self.logit_std}")
        if self.time_shift <= 0:
            raise ConfigError(f"method.options.time_shift: must be > 0, got {self.time_shift}")


def draw_noisings(
    o: NoisingOptions, shape: tuple[int, ...], gen: torch.Generator, device
) -> tuple[torch.Tensor, torch.Tensor]:
    """K noising times (K,) and noises (K, *shape) from ``gen``."""
    k = o.num_noisings
    if o.time_law == "uniform":
        t = torch.rand((k,), generator=gen, device=device)
    else:
        t = logit_normal_times((k,), o.logit_mean, o.logit_std, gen, device)
    t = o.time_shift * t / (1 + (o.time_shift - 1) * t)
    return t, torch.randn((k, *shape), generator=gen, device=device, dtype=torch.float32)


def grouped_noisings(o: NoisingOptions, ctx: Context, group_ids: torch.Tensor, shape: tuple[int, ...], purpose: str):
    """(B, K) times and (B, K, *shape) noises, one draw per prompt group (the stream of its global group number),
    so that a pair's members share eps and t on any process."""
    draws = {int(g): draw_noisings(o, shape, ctx.generator(purpose, int(g)), ctx.device) for g in group_ids.unique()}
    rows = [draws[int(g)] for g in group_ids]
    return torch.stack([t for t, _ in rows]), torch.stack([n for _, n in rows])


def dataset_latents(ctx: Context, batch: PromptBatch, kind: DatasetKind, member_of) -> torch.Tensor:
    """The clean latents of a batch of dataset rows: row i's ``member_of(i)``-th media file, VAE-encoded."""
    root = data_root(ctx.cfg.data.prompts)
    paths = [Path(root) / row_media(m, kind)[member_of(i)] for i, m in enumerate(batch.metadata)]
    images = load_images(paths, ctx.cfg.model.resolution)
    return encode_images(ctx.adapter, images).to(ctx.device).float()


@dataclass
class DPOOptions(NoisingOptions):
    pairs: str = "online"  # online: each group's best and worst rollout | dataset: a preference folder's pairs
    beta: float = 2000.0  # the DPO temperature (verl-omni and Flow-Factory 2000; flow_grpo's SD3 configs 100)
    endpoint_solver: str = "euler"  # online: the endpoints' ODE solver over sample.num_steps: euler | dpm2

    def __post_init__(self):
        super().__post_init__()
        if self.pairs not in ("online", "dataset"):
            raise ConfigError(f"method.options.pairs: {self.pairs!r}; allowed: online, dataset")
        if self.beta <= 0:
            raise ConfigError(f"method.options.beta: must be > 0, got {self.beta}")
        if self.endpoint_solver not in ODE_SOLVERS:
            raise ConfigError(
                f"method.options.endpoint_solver: {self.endpoint_solver!r}; allowed: {', '.join(ODE_SOLVERS)}"
            )


def preference_pairs_credit(method: MethodBase, table: RewardTable) -> Advantages:
    """The credit part ``preference_pairs``: +1 at the chosen and -1 at the rejected member of each pair, 0 at the
    rest (no signal): a dataset's pairs (the ``dpo/chosen`` column), or each group's best and worst by the final
    reward (``best_worst``); (N,)."""
    if CHOSEN in table.columns:
        values = 2.0 * table.columns[CHOSEN].float() - 1.0
    else:
        values = best_worst(table.columns["final"], table.group_ids)
    pairs = float((values > 0).sum())
    return Advantages(values, metrics={"dpo/pairs": pairs})


class DPO(MethodBase):
    name = "dpo"
    Options = DPOOptions
    media = (
        MediaKind.IMAGE,
        MediaKind.VIDEO,
        MediaKind.AUDIO,
    )  # one latent tensor per sample (offline: images, which it encodes)
    default_credit = "preference_pairs"

    def __init__(self, cfg):
        super().__init__(cfg)
        s = cfg.sample
        if self.offline and s.group_size != 2:
            raise ConfigError(
                f"sample.group_size: method.options.pairs=dataset makes a prompt group of each (chosen, rejected) "
                f"pair, so it must be 2, got {s.group_size}"
            )
        if not self.offline and s.group_size < 2:
            raise ConfigError(f"sample.group_size: online DPO pairs a group's best and worst, got {s.group_size}")
        if not self.offline and s.same_noise_in_group:
            raise ConfigError(
                "sample.same_noise_in_group: online DPO samples with a deterministic ODE, so a group sharing its "
                "noise would be one image: set it to false"
            )

    @property
    def offline(self) -> bool:
        return self.options.pairs == "dataset"

    def records(self) -> frozenset[str]:
        return frozenset({"endpoints"})

    def needs(self) -> Needs:
        if self.offline:
            check_family_encodes(self.cfg, self.name)
        return Needs(
            media=(MediaKind.IMAGE,) if self.offline else self.media,
            whole_groups=True,  # a pair's two rows train in one unit
            reference=True,
            onpolicy_check="it records no per-step log-probs to recompute",
            metrics=("dpo/pairs",),
            rewards=not self.offline,
            dataset=DatasetKind.PREFERENCE if self.offline else None,
        )

    def explore(self, ctx: Context, batch: PromptBatch) -> Experience:
        if self.offline:
            g = self.cfg.sample.group_size
            member = [(batch.position + i) % g for i in range(len(batch.prompts))]
            x0 = dataset_latents(ctx, batch, DatasetKind.PREFERENCE, lambda i: member[i])
            info = {CHOSEN: torch.tensor([m == 0 for m in member], dtype=torch.float32, device=ctx.device)}
        else:
            plan = ode_plan(ctx.sigmas(), self.options.endpoint_solver)
            x0 = ctx.rollout(plan, batch.noise, batch.cond, batch.group_ids, None).final.float()
            info = {}
        t, noise = grouped_noisings(self.options, ctx, batch.group_ids, tuple(x0.shape[1:]), "dpo_noising")
        return Experience(Endpoints(x0, t, noise, batch.group_ids), {"final": x0}, info)

    def transition_loss(
        self, ctx: Context, traj: Endpoints, j: int, cond: Conditioning, advantages: torch.Tensor
    ) -> TransitionLoss:
        """The loss part ``dpo``: the mean over the unit's pairs of ``dpo_loss`` at their shared noising j."""
        x_t, t, noise = traj.x_t(j), traj.t[:, j], traj.noise[:, j]
        chosen, rejected = pair_rows(advantages, traj.prompt_ids)
        v = ctx.velocity(x_t, t, cond, guidance_scale=ctx.conditional_scale)
        # The reference forward runs on a pass without a pair too: under DDP or FSDP every forward is a collective
        # (buffer broadcast, shard gathers), so each process must make the same calls in the same order.
        with torch.no_grad(), ctx.reference_weights() as ref:
            v_ref = ctx.velocity(x_t, t, cond, guidance_scale=ctx.conditional_scale, model=ref)
        if len(chosen) == 0:  # a padding pass (no pair here): a zero loss that still reaches every parameter
            loss = 0.0 * v.mean()
            return TransitionLoss(loss, loss.detach())
        err, ref_err = velocity_error(v, noise, traj.x0), velocity_error(v_ref, noise, traj.x0)
        loss = dpo_loss(err[chosen], ref_err[chosen], err[rejected], ref_err[rejected], self.options.beta).mean()
        return TransitionLoss(loss, loss.detach())

"""SFT: the plain flow-matching loss on a dataset of media with prompts (Flow-Factory's ``sft``, verl-omni's
``sft_trainer``, UniRL's ``train/sft``, flow-control's ``training/sft.py``), for LoRA warm-up before RL and as the
reward-free baseline.

Each row of the ``data.prompts`` folder (``flowrl.media_data``: ``{"prompt", "image"}``, or a preference folder,
whose chosen images it reads) is VAE-encoded to x0 and noised K times (``num_noisings``; t logit-normal, shifted),
x_t = (1 - t) x0 + t eps; the loss is the mean over rows, noisings and elements of (v_theta(x_t, t) - (eps - x0))^2
(``flowrl.preference.velocity_error``), the conditional prediction without CFG. No rollout, no reward, no
reference. ``sample.group_size`` repeats a row within an iteration (1: each drawn row once).
"""

from __future__ import annotations

import torch

from flowrl.media import MediaKind
from flowrl.media_data import DatasetKind, check_family_encodes
from flowrl.methods.base import Context, Experience, MethodBase, PromptBatch, TransitionLoss
from flowrl.methods.dpo import NoisingOptions, dataset_latents, draw_noisings
from flowrl.methods.forward_process import Endpoints
from flowrl.methods.seam import Advantages, Needs, RewardTable
from flowrl.pipelines.base import Conditioning
from flowrl.preference import velocity_error


def targets_credit(method: MethodBase, table: RewardTable) -> Advantages:
    """The credit part ``targets``: every row trains, advantage 1 (its reward, if one is configured, is only
    logged); (N,)."""
    n = len(table.group_ids)
    return Advantages(torch.ones(n), keep=torch.ones(n, dtype=torch.bool))


class SFT(MethodBase):
    name = "sft"
    Options = NoisingOptions
    media = (MediaKind.IMAGE,)  # the images it encodes (video and audio targets: not read yet)
    default_credit = "targets"
    keeps_flat_rows = True  # every row is a target to regress on
    min_group_size = 1  # each row is its own target

    def records(self) -> frozenset[str]:
        return frozenset({"endpoints"})

    def needs(self) -> Needs:
        check_family_encodes(self.cfg, self.name)
        return Needs(
            media=self.media,
            onpolicy_check="it records no per-step log-probs to recompute",
            rewards=False,
            dataset=DatasetKind.MEDIA,
        )

    def explore(self, ctx: Context, batch: PromptBatch) -> Experience:
        x0 = dataset_latents(ctx, batch, DatasetKind.MEDIA, lambda i: 0)
        draws = [
            draw_noisings(
                self.options, tuple(x0.shape[1:]), ctx.generator("sft_noising", batch.position + i), ctx.device
            )
            for i in range(len(x0))
        ]
        t, noise = torch.stack([d[0] for d in draws]), torch.stack([d[1] for d in draws])
        return Experience(Endpoints(x0, t, noise, batch.group_ids), {"final": x0})

    def transition_loss(
        self, ctx: Context, traj: Endpoints, j: int, cond: Conditioning, advantages: torch.Tensor
    ) -> TransitionLoss:
        """The loss part ``flow_matching``: the mean of ``velocity_error`` over the unit's rows at noising j."""
        v = ctx.velocity(traj.x_t(j), traj.t[:, j], cond, guidance_scale=ctx.conditional_scale)
        loss = velocity_error(v, traj.noise[:, j], traj.x0).mean()
        return TransitionLoss(loss, loss.detach())

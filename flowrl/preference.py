"""The math of the preference methods as pure functions: Diffusion-DPO's pairs and loss (Wallace et al., CVPR 2024,
arXiv 2311.12908, in the flow-matching form of flow_grpo's ``scripts/train_sd3_dpo.py``), DGPO's group weights and
clip (Luo et al., ICLR 2026, arXiv 2510.08425; Luo-Yihong/DGPO ``scripts/train_sd3_dgpo.py``) and the
flow-matching regression of SFT. Notation: x_t = (1 - t) x0 + t eps, the velocity target u = eps - x0, and a
sample's error err = mean over its elements of (v - u)^2.
"""

from __future__ import annotations

import torch


def velocity_error(v: torch.Tensor, noise: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
    """err = mean over each row's elements of (v - (eps - x0))^2, (B,): the flow-matching loss of one noising
    (every peer's reduction is the mean, flow_grpo's ``.reshape(B, -1).mean(dim=1)``)."""
    return (v.float() - (noise.float() - x0.float())).pow(2).flatten(1).mean(dim=1)


def best_worst(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Online DPO's pairs: (N,) +1 at the best sample of each prompt group, -1 at the worst, 0 elsewhere. Ties go
    to the first sample in the group's order (``argmax`` / ``argmin``, as flow_grpo's ``stat_tracking.py`` and
    Flow-Factory's ``_form_pairs_from_advantages``). A group whose rewards are all equal makes no pair (0s):
    Flow-Factory pairs a sample with itself there (a zero gradient); flow_grpo trains its members 1 over 0."""
    out = torch.zeros(len(rewards), dtype=torch.float32)
    for g in torch.unique(group_ids):
        rows = (group_ids == g).nonzero().flatten()
        r = rewards[rows].double()
        best, worst = int(torch.argmax(r)), int(torch.argmin(r))
        if r[best] > r[worst]:
            out[rows[best]], out[rows[worst]] = 1.0, -1.0
    return out


def dpo_loss(
    err_w: torch.Tensor, ref_err_w: torch.Tensor, err_l: torch.Tensor, ref_err_l: torch.Tensor, beta: float
) -> torch.Tensor:
    """Diffusion-DPO per pair, (P,): -log sigmoid(-(beta / 2) (Delta_w - Delta_l)), Delta = err_theta - err_ref of
    the chosen (w) and rejected (l) sample noised with the same eps and t (the paper's loss with beta/2 and the
    mean-reduced error as flow_grpo and Flow-Factory write it)."""
    inside = -0.5 * beta * ((err_w - ref_err_w) - (err_l - ref_err_l))
    return -torch.nn.functional.logsigmoid(inside)


def pair_rows(advantages: torch.Tensor, prompt_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The (chosen, rejected) row indices of the pairs among a unit's rows, (P,) each, in group order: in each
    prompt group the row whose advantage is > 0 and the one whose advantage is < 0. A group that does not hold
    exactly one of each makes no pair (a padding row; whole groups keep every pair together)."""
    chosen, rejected = [], []
    for g in torch.unique(prompt_ids):
        rows = (prompt_ids == g).nonzero().flatten()
        a = advantages[rows.to(advantages.device)].cpu()
        w, lose = rows[a > 0], rows[a < 0]
        if len(w) != 1 or len(lose) != 1:
            continue
        chosen.append(int(w[0]))
        rejected.append(int(lose[0]))
    return torch.tensor(chosen, dtype=torch.long), torch.tensor(rejected, dtype=torch.long)


def dgpo_group_weights(
    err: torch.Tensor,
    ref_err: torch.Tensor,
    advantages: torch.Tensor,
    group_ids: torch.Tensor,
    beta_dpo: float,
    group_size: int,
) -> torch.Tensor:
    """DGPO's per-row weight, no grad, (B,): sigmoid(S_g) of the row's group, S_g = sum over its members of
    A_i beta_dpo (err_i - ref_err_i) / G. S_g = -(R(G+) - R(G-)) / G with R the |A|-weighted implicit rewards
    beta_dpo (ref_err - err) (positives A > 0, negatives A < 0), so sigmoid(S_g) = 1 - sigmoid(R(G+) - R(G-)),
    the factor the gradient of -log sigmoid(R(G+) - R(G-)) puts on each member's error (the authors'
    ``compute_group_dgpo_loss_allreduce``)."""
    with torch.no_grad():
        term = advantages.float() * beta_dpo * (err.detach().float() - ref_err.float()) / group_size
        _, inverse = torch.unique(group_ids, return_inverse=True)
        sums = torch.zeros(int(inverse.max()) + 1, dtype=term.dtype, device=term.device)
        sums.scatter_add_(0, inverse.to(term.device), term)
        return torch.sigmoid(sums)[inverse.to(term.device)]


def dgpo_loss(err: torch.Tensor, weights: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """DGPO's surrogate, a scalar: mean_i w_i A_i err_i. Its gradient is (G / beta_dpo) / B times that of
    sum_g -log sigmoid(R(G+) - R(G-)) over the batch's groups (``dgpo_group_weights``)."""
    return (weights.detach() * advantages.float() * err).mean()


def dsm_clip_mask(err: torch.Tensor, old_err: torch.Tensor, advantages: torch.Tensor, clip: float) -> torch.Tensor:
    """DGPO's PPO-style clip, (B,) bool: with ratio = exp(old_err - err) (the implicit likelihood ratio to the old
    policy), a row is clipped when A > 0 and ratio > 1 + clip, or A <= 0 and ratio < 1 - clip; a clipped row's
    error is detached (the authors' ``should_clip``)."""
    ratio = torch.exp(old_err.float() - err.detach().float())
    return torch.where(advantages > 0, ratio > 1.0 + clip, ratio < 1.0 - clip)


def logit_normal_times(
    shape: tuple[int, ...], mean: float, std: float, generator: torch.Generator | None, device: torch.device | str
) -> torch.Tensor:
    """t = sigmoid(mean + std z), z ~ N(0, 1): the logit-normal density of SD3's training (Esser et al. 2024) that
    flow_grpo's DPO (``compute_density_for_timestep_sampling("logit_normal", 0, 1)``) and Flow-Factory draw."""
    z = torch.randn(shape, generator=generator, device=device, dtype=torch.float32)
    return torch.sigmoid(mean + std * z)

"""Stochastic and deterministic steps of a rectified-flow sampler, with exact log-probabilities.

Conventions (diffusers ``FlowMatchEulerDiscreteScheduler``): ``x_s = (1 - s) x0 + s eps`` with
``s`` in [0, 1] (1 is pure noise), the model predicts the velocity ``v = eps - x0``, and a transition
goes from ``sigma`` to ``sigma_next < sigma``; ``dt = sigma_next - sigma < 0``.

Every step is a pure function ``(v, x, sigma, sigma_next, ...) -> StepOutput`` computed in fp32. Given
``x_next`` it only scores that state; otherwise it samples ``x_next = mean + std * noise``.

Log-prob reduction: Flow-GRPO averages the per-element Gaussian log-density over all non-batch
elements (C, H, W or C, F, H, W) instead of summing it. The importance ratio is then the geometric
mean of per-element ratios and stays very close to 1, which is why the matching PPO clip range is tiny
(1e-4 for ``flow_sde``, 1e-5 for ``cps``). ``reduction="sum"`` is available but needs a clip range
re-tuned by roughly the number of latent elements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Literal, NamedTuple

import torch

from flowrl.checks import ScalarOrTensor, fail, finite_f32

Reduction = Literal["mean", "sum"]
STEP_KINDS = ("ode", "flow_sde", "cps", "dance_sde", "dpm2")
# steps without noise (no density, never trained)
DETERMINISTIC_KINDS = ("ode", "dpm2")
# steps that read the previous transition's data prediction (``previous``): a rollout hands it on
MULTISTEP_KINDS = ("dpm2",)
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


@dataclass
class StepOutput:
    """Result of one transition. ``log_prob`` is (B,); ``std`` is the per-element std (B,). ``x0``: the data
    prediction x - sigma v that a multistep solver's next step reads (``MULTISTEP_KINDS``; None for the others)."""

    x_next: torch.Tensor
    log_prob: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor
    x0: torch.Tensor | None = None


Scalar = float  # a transition's sigma or noise level shared by the whole batch


def _coef(value: torch.Tensor | float, x: torch.Tensor) -> torch.Tensor | float:
    """A python float stays a float (the fast path of a rollout, where the batch shares one sigma);
    a (B,) tensor becomes (B, 1, 1, ...) fp32 on x's device."""
    if isinstance(value, (int, float)):
        return float(value)
    t = torch.as_tensor(value, dtype=torch.float32, device=x.device)
    if t.ndim == 0:
        return float(t)
    return t.reshape(-1, *([1] * (x.ndim - 1)))


def _per_sample(value: torch.Tensor | float, x: torch.Tensor) -> torch.Tensor:
    """(B,) fp32 tensor of a per-sample or shared value."""
    if isinstance(value, float):
        return torch.full((x.shape[0],), value, device=x.device)
    return value.flatten().expand(x.shape[0]) if value.numel() == 1 else value.flatten()


def _sqrt(value):
    return math.sqrt(value) if isinstance(value, float) else torch.sqrt(value)


def _log(value):
    if isinstance(value, float):
        return math.log(value) if value > 0 else -math.inf  # a zero-noise step has no density
    return torch.log(value)


def _sum_of_squares(diff: torch.Tensor) -> torch.Tensor:
    """(B,) sum over non-batch elements of diff^2, as one fused norm kernel (the hot path of a rollout)."""
    return torch.linalg.vector_norm(diff.reshape(diff.shape[0], -1), dim=1).square()


def gaussian_log_prob(x_next: torch.Tensor, mean: torch.Tensor, std, reduction: Reduction = "mean"):
    """log N(x_next; mean, std^2 I) per element, reduced over non-batch dims.

    ``std`` is a float or (B, 1, ...). Computed as -S / (2 std^2) / n - log std - log(2 pi) / 2 for the
    mean (n elements, S the sum of squared deviations), or n times that for the sum: the per-element
    densities reduced exactly, in two kernels.
    """
    n = x_next[0].numel()
    if isinstance(std, float) and std == 0.0:  # a zero-noise (ODE) step has no density
        return torch.full((x_next.shape[0],), float("nan"), device=x_next.device)
    scale = 1.0 / n if reduction == "mean" else 1.0
    per_element_const = _log(std) + _HALF_LOG_2PI
    if not isinstance(std, float):
        std, per_element_const = std.flatten(), per_element_const.flatten()
    const = per_element_const if reduction == "mean" else n * per_element_const
    return -_sum_of_squares(x_next - mean) * (scale / (2 * std * std)) - const


def _sample_or_score(mean, std, x_next, noise, generator, log_prob_fn):
    if x_next is None:
        if noise is None:
            noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=torch.float32)
        x_next = torch.add(mean, noise.float(), alpha=std) if isinstance(std, float) else mean + std * noise.float()
    else:
        x_next = x_next.detach().float()
    return x_next, log_prob_fn(x_next)


# sigmas within this of 1 count as the schedule's start: Wan's UniPC flow sigmas begin at 0.99999899, where
# 1 - s is 1e-6 and g would come out near 700 instead of Flow-GRPO's substitute value
SIGMA_ONE_TOL = 1e-4


def flow_sde_g(sigma: torch.Tensor | float, noise_level: torch.Tensor | float, sigma_at_one: float | None = None):
    """Flow-GRPO diffusion coefficient g = a * sqrt(s / (1 - s~)) (arXiv 2505.05470, Eq. 8).

    ``s~ = s`` except at the schedule's start, ``s >= 1 - SIGMA_ONE_TOL``: there it is replaced by
    ``sigma_at_one`` (Flow-GRPO uses the schedule's first sigma below 1) to avoid dividing by (nearly) zero.
    Flow-GRPO tests ``s == 1`` exactly; a tolerance gives the same value wherever sigma_0 is exactly 1 and the
    intended one where a schedule starts just below it (Wan).
    """
    if isinstance(sigma, (int, float)) and isinstance(noise_level, (int, float)):
        denom = sigma_at_one if (sigma >= 1.0 - SIGMA_ONE_TOL and sigma_at_one is not None) else sigma
        return float(noise_level) * math.sqrt(sigma / (1 - denom))
    sigma = torch.as_tensor(sigma, dtype=torch.float32)
    denom_sigma = sigma
    if sigma_at_one is not None:
        denom_sigma = torch.where(
            sigma >= 1.0 - SIGMA_ONE_TOL, torch.as_tensor(sigma_at_one, dtype=torch.float32), sigma
        )
    return torch.as_tensor(noise_level, dtype=torch.float32) * torch.sqrt(sigma / (1 - denom_sigma))


def _sde_mean(v, x, sigma, dt, g):
    """Euler-Maruyama mean of the marginal-preserving reverse SDE:
    mu = x + dt * [v + g^2 / (2 s) * (x + (1 - s) v)]  (Flow-GRPO Eq. 9)."""
    c = g * g / (2 * sigma)
    if isinstance(c, float) and isinstance(dt, float):  # shared sigma: fold into two scaled adds
        return torch.add(x * (1 + dt * c), v, alpha=dt * (1 + c * (1 - sigma)))
    return x + dt * (v + c * (x + (1 - sigma) * v))


def _gaussian_step(v, x, s, s_next, g, x_next, noise, generator, reduction) -> StepOutput:
    """Shared by flow_sde and dance_sde: drift mean, per-element std g sqrt(|dt|), Gaussian log-prob."""
    dt = s_next - s
    mean = _sde_mean(v, x, s, dt, g)
    std = g * _sqrt(-dt)
    x_next, log_prob = _sample_or_score(
        mean, std, x_next, noise, generator, lambda y: gaussian_log_prob(y, mean, std, reduction)
    )
    return StepOutput(x_next, log_prob, mean, _per_sample(std, x))


def flow_sde(
    v: torch.Tensor,
    x: torch.Tensor,
    sigma: torch.Tensor | float,
    sigma_next: torch.Tensor | float,
    noise_level: torch.Tensor | float = 0.7,
    *,
    sigma_at_one: float | None = None,
    x_next: torch.Tensor | None = None,
    noise: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    reduction: Reduction = "mean",
) -> StepOutput:
    """Flow-GRPO SDE step: g = a sqrt(s/(1-s)), std = g sqrt(|dt|), Gaussian log-prob."""
    v, x = v.float(), x.float()
    s, s_next = _coef(sigma, x), _coef(sigma_next, x)
    if isinstance(s, float) and not isinstance(noise_level, torch.Tensor):
        g = flow_sde_g(s, float(noise_level), sigma_at_one)
    else:
        g = _coef(flow_sde_g(torch.as_tensor(sigma, dtype=torch.float32), noise_level, sigma_at_one), x)
    return _gaussian_step(v, x, s, s_next, g, x_next, noise, generator, reduction)


def dance_sde(
    v: torch.Tensor,
    x: torch.Tensor,
    sigma: torch.Tensor | float,
    sigma_next: torch.Tensor | float,
    noise_level: torch.Tensor | float = 0.3,
    *,
    x_next: torch.Tensor | None = None,
    noise: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    reduction: Reduction = "mean",
    **_: object,
) -> StepOutput:
    """DanceGRPO step: the same drift with a constant diffusion coefficient g = eta (``noise_level``)."""
    v, x = v.float(), x.float()
    s, s_next = _coef(sigma, x), _coef(sigma_next, x)
    return _gaussian_step(v, x, s, s_next, _coef(noise_level, x), x_next, noise, generator, reduction)


def cps(
    v: torch.Tensor,
    x: torch.Tensor,
    sigma: torch.Tensor | float,
    sigma_next: torch.Tensor | float,
    noise_level: torch.Tensor | float = 0.8,
    *,
    x_next: torch.Tensor | None = None,
    noise: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    reduction: Reduction = "mean",
    **_: object,
) -> StepOutput:
    """Coefficients-preserving sampling (arXiv 2509.05952).

    std = s' sin(a pi / 2); mean = (1 - s') x0_hat + sqrt(s'^2 - std^2) x1_hat with
    x0_hat = x - s v and x1_hat = x + (1 - s) v. The "log-prob" is unnormalised, -mean((x' - mean)^2),
    as in Flow-GRPO; it is a surrogate, not a density, and pairs with clip range 1e-5.
    """
    v, x = v.float(), x.float()
    s, s_next, a = _coef(sigma, x), _coef(sigma_next, x), _coef(noise_level, x)
    if isinstance(a, float):
        std = s_next * math.sin(a * math.pi / 2)
        keep = s_next * math.cos(a * math.pi / 2)  # sqrt(s'^2 - std^2)
    else:
        std = s_next * torch.sin(a * math.pi / 2)
        keep = torch.sqrt((s_next**2 - std**2).clamp_min(0))
    x0_hat = x - s * v
    x1_hat = x + (1 - s) * v
    mean = (1 - s_next) * x0_hat + keep * x1_hat
    x_next, log_prob = _sample_or_score(
        mean,
        std,
        x_next,
        noise,
        generator,
        lambda y: -_sum_of_squares(y - mean) / (y[0].numel() if reduction == "mean" else 1),
    )
    return StepOutput(x_next, log_prob, mean, _per_sample(std, x))


def ode(
    v: torch.Tensor,
    x: torch.Tensor,
    sigma: torch.Tensor | float,
    sigma_next: torch.Tensor | float,
    noise_level: torch.Tensor | float = 0.0,
    **_: object,
) -> StepOutput:
    """Plain Euler step x' = x + dt v. It has no density: ``log_prob`` is zeros and must not be trained."""
    v, x = v.float(), x.float()
    dt = _coef(sigma_next, x) - _coef(sigma, x)
    x_next = x + dt * v
    zeros = torch.zeros(x.shape[0], device=x.device)
    return StepOutput(x_next, zeros, x_next, zeros)


def _log_snr(sigma: float) -> float:
    """lambda = log(alpha / sigma) with alpha = 1 - sigma (the flow-matching parameterisation)."""
    return math.log((1.0 - sigma) / sigma)


def dpm2(
    v: torch.Tensor,
    x: torch.Tensor,
    sigma: torch.Tensor | float,
    sigma_next: torch.Tensor | float,
    noise_level: torch.Tensor | float = 0.0,
    *,
    previous: tuple[float, torch.Tensor] | None = None,
    **_: object,
) -> StepOutput:
    """Multistep second-order DPM-Solver++ on the data prediction x0 = x - s v (Lu et al. 2022, arXiv
    2211.01095, Eq. 15 / Algorithm 2; diffusers ``DPMSolverMultistepScheduler``, ``algorithm_type="dpmsolver++"``,
    ``solver_order=2``, midpoint; the "dpm2" solver of NVlabs/DiffusionNFT ``flow_grpo/diffusers_patch/solver.py``).

    With alpha = 1 - s and lambda = log(alpha / s), h = lambda' - lambda, h0 = lambda - lambda_prev, D1 = (h / h0)
    (x0 - x0_prev):  x' = (s' / s) x + alpha' (1 - e^-h) (x0 + D1 / 2).

    ``previous`` = (s_prev, x0_prev), the step before's sigma and data prediction (a rollout hands it on). The
    step is first order, x' = x + (s' - s) v (DDIM, which is Euler in this parameterisation), without one, and
    where s' = 0 (lambda' is infinite: the authors' and diffusers' lower-order final step, which returns x0).
    At s_prev = 1, lambda_prev = -inf makes D1 = 0, as the authors' float64 arithmetic does. Deterministic: no
    density, never trained. One sigma for the whole batch.
    """
    v, x = v.float(), x.float()
    s, s_next = float(sigma), float(sigma_next)
    x0 = x - s * v
    zeros = torch.zeros(x.shape[0], device=x.device)
    if previous is None or s_next <= 0.0:
        x_next = x + (s_next - s) * v
        return StepOutput(x_next, zeros, x_next, zeros, x0)
    s_prev, x0_prev = float(previous[0]), previous[1].float()
    h = _log_snr(s_next) - _log_snr(s)
    d1 = 0.0 if s_prev >= 1.0 else h / (_log_snr(s) - _log_snr(s_prev))  # D1 = d1 (x0 - x0_prev)
    c = (1.0 - s_next) * -math.expm1(-h)  # -alpha' (e^-h - 1)
    x_next = (s_next / s) * x + c * (x0 + (0.5 * d1) * (x0 - x0_prev))
    return StepOutput(x_next, zeros, x_next, zeros, x0)


STEPS: dict[str, Callable[..., StepOutput]] = {
    "ode": ode,
    "flow_sde": flow_sde,
    "cps": cps,
    "dance_sde": dance_sde,
    "dpm2": dpm2,
}


def _history(kind: str, m: str, previous: tuple[float, dict[str, torch.Tensor]] | None) -> dict:
    """``joint_step``'s ``previous`` for modality ``m``: given to a multistep kind that has one, else nothing."""
    if kind in MULTISTEP_KINDS and previous is not None and m in previous[1]:
        return {"previous": (previous[0], previous[1][m])}
    return {}


def _joint_log_prob(
    outs: dict[str, StepOutput], x: dict[str, torch.Tensor], trained: tuple[str, ...], reduction: Reduction
) -> torch.Tensor:
    """The trained modalities' log-probs together (``joint_step``): with ``"mean"`` weighted by element counts."""
    if reduction == "mean":
        counts = {m: x[m][0].numel() for m in trained}
        total = sum(counts.values())
        return sum(outs[m].log_prob * (counts[m] / total) for m in trained)
    return sum(outs[m].log_prob for m in trained)


def joint_step(
    kinds: dict[str, str],
    v: dict[str, torch.Tensor],
    x: dict[str, torch.Tensor],
    sigma: torch.Tensor | float,
    sigma_next: torch.Tensor | float,
    noise_levels: dict[str, torch.Tensor | float],
    trained: tuple[str, ...],
    *,
    sigma_at_one: float | None = None,
    x_next: dict[str, torch.Tensor] | None = None,
    noise: dict[str, torch.Tensor] | None = None,
    generator: torch.Generator | None = None,
    reduction: Reduction = "mean",
    previous: tuple[float, dict[str, torch.Tensor]] | None = None,
) -> StepOutput:
    """One transition of joint latents (``flowrl.latents``): each modality ``m`` takes its own step kind
    ``kinds[m]`` and noise level, drawing in the order of ``x``'s keys; given ``x_next``, each is scored.

    The log-prob is over the ``trained`` modalities' elements together: with ``reduction="mean"`` the
    per-modality dimension means weighted by their element counts, which is the dimension mean of the
    modalities flattened into one tensor (exactly so when they share one std); with ``"sum"`` their sum.
    ``mean`` and ``std`` hold the trained modalities only (what a KL to a reference compares). ``previous``
    = (sigma_prev, {modality: x0_prev}) for the modalities with a multistep kind (``MULTISTEP_KINDS``); ``x0`` of
    the result holds those modalities' data predictions (None when there are none)."""
    outs = {
        m: step(
            kinds[m],
            v[m],
            x[m],
            sigma,
            sigma_next,
            noise_levels[m],
            sigma_at_one=sigma_at_one,
            x_next=None if x_next is None else x_next[m],
            noise=None if noise is None else noise[m],
            generator=generator,
            reduction=reduction,
            **_history(kinds[m], m, previous),
        )
        for m in x
    }
    x0 = {m: o.x0 for m, o in outs.items() if o.x0 is not None} or None
    if not trained:  # every modality deterministic here: no density, as an 'ode' step of one tensor
        batch = next(iter(x.values())).shape[0]
        return StepOutput(
            {m: o.x_next for m, o in outs.items()}, torch.zeros(batch, device=next(iter(x.values())).device), {}, {}, x0
        )
    return StepOutput(
        {m: o.x_next for m, o in outs.items()},
        _joint_log_prob(outs, x, trained, reduction),
        {m: outs[m].mean for m in trained},
        {m: outs[m].std for m in trained},
        x0,
    )


def step(kind: str, *args, **kwargs) -> StepOutput:
    """Dispatch to the step named ``kind`` (one of ``STEP_KINDS``)."""
    try:
        fn = STEPS[kind]
    except KeyError:
        raise ValueError(f"unknown step kind {kind!r}; choose one of {', '.join(STEP_KINDS)}") from None
    return fn(*args, **kwargs)


# --------------------------------------------------------------------------------------------------------
# A capped diffusion coefficient and the SDE step with a given g (AV-GRPO, arXiv 2609.29816 §7 step 3)
# --------------------------------------------------------------------------------------------------------
MAX_STD = 0.5  # AV-GRPO's cap on the per-step std g·sqrt(|Δ|) [the authors' code]
ONE_MINUS_T_MIN = 1e-5  # the AV-GRPO code's clamp of 1 − t in g = a·sqrt(t/(1−t)): g = a·sqrt(1e5) at t = 1


def _scalar(value):
    """A 0-d tensor becomes a python float (as the steps above treat it); anything else is left alone."""
    return float(value) if isinstance(value, torch.Tensor) and value.ndim == 0 else value


class CappedNoise(NamedTuple):
    """g: the diffusion coefficient to step with; std = g·sqrt(|Δ|) (<= max_std); capped: the cap fired.
    Python floats and a bool for scalar inputs, fp32 tensors (``capped`` bool) for tensor ones."""

    g: ScalarOrTensor
    std: ScalarOrTensor
    capped: bool | torch.Tensor


def _check_step(sigma, sigma_next, a, max_std, sigma_at_one) -> None:
    s, s_next, a_t = finite_f32("sigma", sigma), finite_f32("sigma_next", sigma_next), finite_f32("a", a)
    if not ((s > 0).all() and (s <= 1).all()):
        fail(f"sigma must be in (0, 1], got {sigma!r}")
    if not ((s_next >= 0).all() and (s_next < s).all()):
        fail(f"sigma_next must be in [0, sigma), got {sigma_next!r}")
    if not (a_t > 0).all():
        fail(f"a (noise level) must be > 0, got {a!r}")
    if not (isinstance(max_std, (int, float)) and 0 < max_std < math.inf):
        fail(f"max_std must be a finite number > 0, got {max_std!r}")
    if sigma_at_one is not None and not 0 < sigma_at_one < 1:
        fail(f"sigma_at_one must be in (0, 1) or None, got {sigma_at_one!r}")


def _cap_float(g: float, dt_abs: float, max_std: float) -> tuple[float, bool]:
    root = math.sqrt(dt_abs)
    if not g * root > max_std:
        return g, False
    g = max_std / root
    if g * root > max_std:  # one ulp down makes the step's own std g·sqrt(|Δ|) <= max_std
        g = math.nextafter(g, 0.0)
    return g, True


def capped_noise(
    sigma: ScalarOrTensor,
    sigma_next: ScalarOrTensor,
    a: ScalarOrTensor,
    max_std: float = MAX_STD,
    sigma_at_one: float | None = None,
) -> CappedNoise:
    """§7 step 3: g = a·sqrt(t/(1−t)) (``flow_sde_g``), scaled down so that g·sqrt(|Δ|) <= max_std.

    ``sigma_at_one=None`` (the authors' code): 1 − t is clamped at ``ONE_MINUS_T_MIN`` (1e-5), so at t = 1
    g = a·sqrt(1e5) and the cap decides the first step's std (0.5 unless |Δ_0| is tiny). Given, Flow-GRPO's
    first-step substitute 1 − σ_1 (``flow_sde_g``). Uncapped and below t = 1, g is bitwise
    ``flow_sde_g(sigma, a)`` (float path for floats, fp32 for tensors, as ``flow_sde`` computes it). Capped,
    g = max_std/sqrt(|Δ|) (one ulp lower if the product would round above max_std), so the std the step
    computes is max_std to the last bit or one ulp below. The cap is strict: s == max_std is not capped.
    sigma, sigma_next: floats or (B,) tensors; a: the trained modality's noise level (``NOISE_LEVEL``).
    """
    sigma, sigma_next, a = _scalar(sigma), _scalar(sigma_next), _scalar(a)
    _check_step(sigma, sigma_next, a, max_std, sigma_at_one)
    if all(isinstance(v, (int, float)) for v in (sigma, sigma_next, a)):
        sigma, sigma_next, a = float(sigma), float(sigma_next), float(a)
        dt_abs = -(sigma_next - sigma)  # bitwise the |dt| flowrl.sde uses
        g = (
            a * math.sqrt(sigma / max(1 - sigma, ONE_MINUS_T_MIN))
            if sigma_at_one is None
            else flow_sde_g(sigma, a, sigma_at_one)
        )
        g, capped = _cap_float(g, dt_abs, float(max_std))
        return CappedNoise(g, g * math.sqrt(dt_abs), capped)
    s = torch.as_tensor(sigma, dtype=torch.float32)
    root = torch.sqrt(-(torch.as_tensor(sigma_next, dtype=torch.float32) - s))
    if sigma_at_one is None:  # the code's clamp of 1 - t; bitwise flow_sde_g wherever 1 - t >= 1e-5
        g = torch.as_tensor(a, dtype=torch.float32) * torch.sqrt(s / (1 - s).clamp_min(ONE_MINUS_T_MIN))
    else:
        g = flow_sde_g(s, a, sigma_at_one)
    capped = g * root > max_std
    g_cap = max_std / root
    g_cap = torch.where(g_cap * root > max_std, torch.nextafter(g_cap, torch.zeros_like(g_cap)), g_cap)
    g = torch.where(capped, g_cap, g)
    return CappedNoise(g, g * root, capped)


def sde_step_with_g(
    v: torch.Tensor,
    x: torch.Tensor,
    sigma: ScalarOrTensor,
    sigma_next: ScalarOrTensor,
    g: ScalarOrTensor,
    x_next: torch.Tensor | None = None,
    noise: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> StepOutput:
    """Flow-GRPO SDE step with an explicit diffusion coefficient g (float or (B,)), e.g. a capped one:
    μ = x + Δ·[v + g²/(2t)·(x + (1−t)v)], std = g·sqrt(|Δ|), log-prob = dimension-mean Gaussian log-density.

    ``flow_sde`` derives g from the noise level and cannot take one; ``dance_sde`` takes g as its noise
    level and is exactly this step (same drift ``_sde_mean``, same ``gaussian_log_prob``), so this calls it.
    With g = flow_sde_g(t, a) the result is bitwise ``flow_sde(v, x, t, t', a)``.
    """
    g = _scalar(g)
    g_t = finite_f32("g", g)
    if not (g_t > 0).all():
        fail(f"g must be > 0 (a zero-noise step has no density), got {g!r}")
    _check_step(_scalar(sigma), _scalar(sigma_next), 1.0, MAX_STD, None)
    return dance_sde(v, x, sigma, sigma_next, g, x_next=x_next, noise=noise, generator=generator, reduction="mean")

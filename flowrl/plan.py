"""Step plans: which transitions a rollout takes, with which step kind and noise, and which ones train.

A plan is built from the pipeline's sigma schedule (its scheduler owns the shift math) and the sampling
config. Methods may edit a plan before the rollout (per-step noise levels, merged transitions that jump
from ``sigmas[i]`` to ``sigmas[i + l]``, a different trained set).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

import torch

from flowrl.sde import DETERMINISTIC_KINDS, STEP_KINDS

# the deterministic solvers of an ODE plan, by name -> their step kind
ODE_SOLVERS = {"euler": "ode", "dpm2": "dpm2"}


@dataclass(frozen=True)
class StepPlan:
    """One rollout's transitions. All tensors are fp32/bool on CPU, length T (transitions).

    sigma[i] -> sigma_next[i] is transition i; ``kinds[i]`` is its step function; ``noise_levels[i]``
    its noise parameter; ``train[i]`` whether it is trained. ``sigma_at_one`` is the substitute used
    by ``flow_sde`` where sigma == 1.
    """

    sigma: torch.Tensor
    sigma_next: torch.Tensor
    kinds: tuple[str, ...]
    noise_levels: torch.Tensor
    train: torch.Tensor
    sigma_at_one: float
    # joint latents (a mapping of modalities, ``flowrl.latents``): a modality's own step kinds and noise levels
    # (absent: ``kinds`` / ``noise_levels``), and which modalities a trained transition's log-prob covers (None:
    # all). A single-tensor latent ignores the three.
    modality_kinds: dict[str, tuple[str, ...]] | None = None
    modality_noise_levels: dict[str, torch.Tensor] | None = None
    trained_modalities: tuple[str, ...] | None = None
    # each transition's (sigma, sigma_next, noise level) as Python floats, and the trained indices, derived in
    # ``__post_init__`` from the tensors above (a value given here is replaced): a rollout and an update read
    # them at every step, where indexing a tensor costs two dispatched operations a value. The tensors are
    # never changed in place; ``replace`` builds a new plan.
    _values: tuple[tuple[float, float, float], ...] = field(default=(), repr=False, compare=False)
    _trained: tuple[int, ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self):
        n = len(self.kinds)
        for name in ("sigma", "sigma_next", "noise_levels", "train"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"StepPlan.{name} has length {len(getattr(self, name))}, expected {n}")
        for m, kinds in (self.modality_kinds or {}).items():
            if len(kinds) != n:
                raise ValueError(f"StepPlan.modality_kinds[{m!r}] has length {len(kinds)}, expected {n}")
        for m, levels in (self.modality_noise_levels or {}).items():
            if len(levels) != n:
                raise ValueError(f"StepPlan.modality_noise_levels[{m!r}] has length {len(levels)}, expected {n}")
        every = [self.kinds, *(self.modality_kinds or {}).values()]
        bad = [k for kinds in every for k in kinds if k not in STEP_KINDS]
        if bad:
            raise ValueError(f"unknown step kind {bad[0]!r}; choose one of {', '.join(STEP_KINDS)}")
        floats = zip(self.sigma.tolist(), self.sigma_next.tolist(), self.noise_levels.tolist())
        object.__setattr__(self, "_values", tuple(floats))
        object.__setattr__(self, "_trained", tuple(i for i, t in enumerate(self.train.tolist()) if t))
        deterministic = [k in DETERMINISTIC_KINDS for k in self.kinds]
        if bool((self.train & torch.tensor(deterministic, dtype=torch.bool)).any()):
            kind = next(k for k, d, t in zip(self.kinds, deterministic, self.train.tolist()) if d and t)
            article = "an" if kind == "ode" else "a"
            raise ValueError(f"{article} {kind!r} transition cannot be trained: it has no log-prob")
        for m in self.trained_modalities or ():
            kinds = (self.modality_kinds or {}).get(m, self.kinds)
            fixed = [kinds[i] for i in self.trained_indices if kinds[i] in DETERMINISTIC_KINDS]
            if fixed:
                raise ValueError(f"modality {m!r} trains, but some of its trained transitions are {fixed[0]!r} steps")

    # ------------------------------------------------------------------ joint latents
    def kinds_at(self, i: int, modalities) -> dict[str, str]:
        """Transition ``i``'s step kind per modality of ``modalities``."""
        own = self.modality_kinds or {}
        return {m: own[m][i] if m in own else self.kinds[i] for m in modalities}

    def noise_levels_at(self, i: int, modalities) -> dict[str, float]:
        own = self.modality_noise_levels or {}
        return {m: float(own[m][i]) if m in own else self._values[i][2] for m in modalities}

    def trained_of(self, modalities) -> tuple[str, ...]:
        """The modalities of ``modalities`` whose log-prob a trained transition counts."""
        return tuple(m for m in modalities if self.trained_modalities is None or m in self.trained_modalities)

    def __len__(self) -> int:
        return len(self.kinds)

    @property
    def trained_indices(self) -> list[int]:
        return list(self._trained)

    def step_values(self, i: int) -> tuple[float, float, float]:
        """Transition ``i``'s (sigma, sigma_next, noise level) as Python floats."""
        return self._values[i]

    def with_noise_levels(self, noise_levels: torch.Tensor) -> "StepPlan":
        return replace(self, noise_levels=torch.as_tensor(noise_levels, dtype=torch.float32))


def ode_plan(sigmas: torch.Tensor, solver: str = "euler") -> StepPlan:
    """A deterministic plan over the whole schedule (evaluation, ODE completions, endpoints): ``solver``
    "euler" (step kind ``ode``) or "dpm2" (the multistep second-order DPM-Solver++, step kind ``dpm2``: each
    step reads the previous one's data prediction, which ``flowrl.rollout.rollout`` hands on)."""
    if solver not in ODE_SOLVERS:
        raise ValueError(f"unknown ODE solver {solver!r}; choose one of {', '.join(ODE_SOLVERS)}")
    sigmas = sigmas.float().cpu()
    n = len(sigmas) - 1
    return StepPlan(
        sigma=sigmas[:-1].clone(),
        sigma_next=sigmas[1:].clone(),
        kinds=(ODE_SOLVERS[solver],) * n,
        noise_levels=torch.zeros(n),
        train=torch.zeros(n, dtype=torch.bool),
        sigma_at_one=float(sigmas[1]) if n > 0 else 0.0,
    )


def make_plan(
    sigmas: torch.Tensor,
    sde_type: str = "flow_sde",
    noise_level: float = 0.7,
    window_size: int = 0,
    window_range: tuple[int, int] | None = None,
    timestep_fraction: float = 0.99,
    rng: random.Random | None = None,
    start: int | None = None,
    tail: str = "euler",
) -> StepPlan:
    """Flow-GRPO's plan over a schedule ``sigmas`` (T+1 values from 1 down to 0).

    * No window (``window_size == 0``): every transition uses ``sde_type``; the first
      ``int(T * timestep_fraction)`` train (0.99 of 10 -> 9: the last, nearly deterministic step is
      left out).
    * Window: a start is drawn uniformly in ``[lo, hi - size]`` (per call, from ``rng``), or given (``start``, a
      schedule's: ``window_start``, in ``[lo, hi]``); the window is the transitions ``start .. min(start + size,
      hi) - 1``, cut at ``hi`` as MixGRPO's ``get_current_timesteps`` cuts it (empty at ``start = hi``: every step
      an ODE step and none trained). Transitions in the window are stochastic and trained, the others are ODE
      steps: Euler before the window, and after it Euler or (``tail="dpm2"``) the second-order DPM-Solver++,
      which restarts at first order after the window (MixGRPO-Flash's tail).
    """
    sigmas = sigmas.float().cpu()
    n = len(sigmas) - 1
    if n < 1:
        raise ValueError("the schedule needs at least one transition")
    if window_size > 0:
        lo, hi = window_range if window_range is not None else (0, n)
        if not 0 <= lo <= hi - window_size or hi > n:
            raise ValueError(f"window of size {window_size} does not fit in range ({lo}, {hi}) of {n} steps")
        if start is None:
            start = (rng or random).randint(lo, hi - window_size)
        elif not lo <= start <= hi:
            raise ValueError(f"window start {start} is outside [{lo}, {hi}]")
        sde = [start <= i < min(start + window_size, hi) for i in range(n)]
        train = list(sde)
    else:
        start = n
        sde = [True] * n
        n_train = int(n * timestep_fraction)
        train = [i < n_train for i in range(n)]
    if tail not in ODE_SOLVERS:
        raise ValueError(f"unknown ODE solver {tail!r} for the tail; choose one of {', '.join(ODE_SOLVERS)}")
    kinds = tuple(sde_type if s else ("ode" if i < start else ODE_SOLVERS[tail]) for i, s in enumerate(sde))
    return StepPlan(
        sigma=sigmas[:-1].clone(),
        sigma_next=sigmas[1:].clone(),
        kinds=kinds,
        noise_levels=torch.tensor([noise_level if s else 0.0 for s in sde], dtype=torch.float32),
        train=torch.tensor(train, dtype=torch.bool),
        sigma_at_one=float(sigmas[1]),
    )


# how a window's start is chosen: per rollout batch (Flow-GRPO-Fast), per iteration (MixGRPO's random), or
# advanced by its size every few iterations (MixGRPO's progressive)
WINDOW_SCHEDULES = ("batch", "iteration", "progressive")


def window_start(
    schedule: str,
    iteration: int,
    size: int,
    lo: int,
    hi: int,
    every: int = 1,
    wrap: bool = True,
    rng: random.Random | None = None,
) -> int | None:
    """The start of an SDE window of ``size`` steps in ``[lo, hi]`` at ``iteration`` (MixGRPO, arXiv 2507.21802;
    Tencent-Hunyuan/MixGRPO ``fastvideo/utils/grpo_states.py`` ``update_iteration``, with ``hi`` its
    ``max_timesteps``): ``iteration`` draws one start uniformly in ``[lo, hi - size]`` from ``rng`` (a stream of
    the seed and the iteration: the same on every process); ``progressive`` starts at ``lo`` and advances by
    ``size`` every ``every`` iterations while the start is at most ``hi``; past ``hi`` it goes back to ``lo``
    (``wrap``, the authors' ``roll_back``) or stays at ``hi`` (their clip). ``make_plan`` cuts the window at
    ``hi``: the last position may be short, and a start at ``hi`` trains nothing (the authors' window empties).
    A pure function of the iteration, so a resumed run repeats it. ``batch``: None (each batch draws its own)."""
    last = hi - size
    if not 0 <= lo <= last:
        raise ValueError(f"window of size {size} does not fit in range ({lo}, {hi})")
    if schedule == "batch":
        return None
    if schedule == "iteration":
        return (rng or random).randint(lo, last)
    if schedule != "progressive":
        raise ValueError(f"unknown window schedule {schedule!r}; choose one of {', '.join(WINDOW_SCHEDULES)}")
    if every < 1:
        raise ValueError(f"a progressive window moves every >= 1 iterations, got {every}")
    moves = iteration // every
    if wrap:
        positions = (hi - lo) // size + 1  # starts lo, lo + size, ... up to hi (the last ones cut or empty)
        return lo + (moves % positions) * size
    return min(lo + moves * size, hi)

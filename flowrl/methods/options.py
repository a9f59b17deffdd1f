"""Flow-GRPO's knobs as method options.

Flow-GRPO's knobs come in groups, each a dataclass that a method's options extend where the method reads them:

* ``SDEOptions``: the step plan of ``flowrl.plan.make_plan`` (SDE kind, noise level, window, trained fraction);
* ``PolicyOptions``: the PPO clip of the policy loss parts (``ppo_clip``, ``ratio_norm``) and the KL weight;
* ``GroupZScoreOptions``: the group z-score of the credit (``group_zscore``, dense gains, turning points);
* ``AdvantageClipOptions``: the clip of the advantages.

``FlowGRPOOptions`` holds all of them. A method with a knob of the same name that means something else (TP-GRPO's
``window_size``, Pref-GRPO's ``std_eps``) keeps its own field. One of Flow-GRPO's knobs set for a method that has no
such knob (left in ``method.options`` by a recipe written for another method) is a one-line warning naming the
method and is dropped: the method never read it, and a shared list of overrides (one per method) keeps working.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from typing import Any

from flowrl.configkit import ConfigError

SDE_TYPES = ("flow_sde", "cps", "dance_sde")
# the knobs that must be > 0 (True) or >= 0 (False)
POSITIVE = {
    "noise_level": True,
    "window_size": False,
    "clip_range": True,
    "adv_clip_max": True,
    "beta": False,
    "std_eps": True,
}


@dataclass
class SDEOptions:
    """Flow-GRPO's step plan (``flowrl.plan.make_plan``)."""

    sde_type: str = "flow_sde"  # flow_sde | cps | dance_sde
    noise_level: float = 0.7  # a of flow_sde / cps, eta of dance_sde
    window_size: int = 0  # 0: stochastic at every step; k: an SDE window of k steps, ODE elsewhere
    # [lo, hi] where the window may start/end; default [0, num_steps], and [0, num_steps - 2] under the iteration and
    # progressive schedules (MixGRPO's max_timesteps: their windows are cut at hi)
    window_range: list[int] | None = None
    timestep_fraction: float = 0.99  # without a window: train the first int(T * fraction) transitions
    # how the window's start is chosen (MixGRPO): batch (each rollout batch draws its own) | iteration (one seeded
    # draw per iteration, the same on every process) | progressive (from lo, advanced by window_size every
    # window_every iterations)
    window_schedule: str = "batch"
    window_every: int = 25  # progressive: iterations at each window position (MixGRPO's iters_per_group)
    # progressive: past hi go back to lo (MixGRPO's roll_back), else stay at hi, where the window is empty
    window_wrap: bool = True
    ode_tail: str = "euler"  # the ODE steps after the window: euler | dpm2 (MixGRPO-Flash's DPM-Solver++ tail)


@dataclass
class PolicyOptions:
    """The policy loss on a recomputed SDE step, and its KL to the reference."""

    clip_range: float = 1e-4  # PPO clip on the mean-reduced ratio (1e-5 for cps / windows)
    beta: float = 0.004  # KL weight, exact per-element Gaussian KL (= Flow-GRPO code beta 0.04 x |dt| 0.1)


@dataclass
class GroupZScoreOptions:
    """The group advantage (r - mean) / (std + std_eps)."""

    global_std: bool = True  # normalise by the std of all rewards (True) or of each group (False)
    std_eps: float = 1e-4  # group advantage (r - mean) / (std + std_eps)


@dataclass
class AdvantageClipOptions:
    adv_clip_max: float = 5.0  # advantages are clipped to [-adv_clip_max, adv_clip_max]


KNOB_GROUPS = (SDEOptions, PolicyOptions, GroupZScoreOptions, AdvantageClipOptions)


@dataclass
class FlowGRPOOptions(SDEOptions, PolicyOptions, GroupZScoreOptions, AdvantageClipOptions):
    """Flow-GRPO's options (``method.options.*``): every group of knobs."""

    def __post_init__(self):
        check_knobs(self)


KNOB_NAMES = frozenset(f.name for g in KNOB_GROUPS for f in dataclasses.fields(g))


def shared_knobs(options_cls: type) -> frozenset[str]:
    """The names of Flow-GRPO's knobs an options class holds from the knob groups (a field of the same name that
    a class of its own declares is its own knob)."""
    if not dataclasses.is_dataclass(options_cls):
        return frozenset()
    groups = [g for g in KNOB_GROUPS if issubclass(options_cls, g)]
    names = {f.name for g in groups for f in dataclasses.fields(g)}
    own = set()
    for klass in options_cls.__mro__:
        if klass not in KNOB_GROUPS and klass is not FlowGRPOOptions:
            own |= set(vars(klass).get("__annotations__", {}))
    return frozenset(names - own)


def check_knobs(options: Any) -> None:
    """Flow-GRPO's knobs an options object holds, each in range (one line naming ``method.options.<name>``)."""
    knobs = shared_knobs(type(options))
    if "sde_type" in knobs and options.sde_type not in SDE_TYPES:
        raise ConfigError(f"method.options.sde_type: {options.sde_type!r} is not one of {', '.join(SDE_TYPES)}")
    if "timestep_fraction" in knobs and not 0 < options.timestep_fraction <= 1:
        raise ConfigError(f"method.options.timestep_fraction: must be in (0, 1], got {options.timestep_fraction}")
    if "window_schedule" in knobs:
        check_window_schedule(options)
    for name, strict in POSITIVE.items():
        value = getattr(options, name) if name in knobs else 1
        if value < 0 or (strict and value == 0):
            raise ConfigError(f"method.options.{name}: must be {'> 0' if strict else '>= 0'}, got {value}")


def check_window_schedule(options: Any) -> None:
    """The window schedule's knobs (MixGRPO's), each a one-line error naming it."""
    from flowrl.plan import ODE_SOLVERS, WINDOW_SCHEDULES

    if options.window_schedule not in WINDOW_SCHEDULES:
        raise ConfigError(
            f"method.options.window_schedule: {options.window_schedule!r} is not one of {', '.join(WINDOW_SCHEDULES)}"
        )
    if options.window_every < 1:
        raise ConfigError(f"method.options.window_every: must be >= 1, got {options.window_every}")
    if options.ode_tail not in ODE_SOLVERS:
        raise ConfigError(f"method.options.ode_tail: {options.ode_tail!r} is not one of {', '.join(ODE_SOLVERS)}")
    if options.window_size == 0 and (options.window_schedule != "batch" or options.ode_tail != "euler"):
        knob = "window_schedule" if options.window_schedule != "batch" else "ode_tail"
        raise ConfigError(f"method.options.{knob}: needs an SDE window (method.options.window_size > 0)")


def check_steps(options: Any, num_steps: int) -> None:
    """The step plan's knobs against ``sample.num_steps`` (an options object without them: nothing to check)."""
    if "window_size" not in shared_knobs(type(options)):
        return
    w = options.window_size
    if w > num_steps:
        raise ConfigError(f"method.options.window_size: {w} exceeds sample.num_steps={num_steps}")
    mixgrpo = getattr(options, "window_schedule", "batch") != "batch"
    if w > 0 and mixgrpo and options.window_range is None and w > num_steps - 2:
        raise ConfigError(
            f"method.options.window_size: {w} exceeds the window schedule's range [0, num_steps - 2] = "
            f"[0, {num_steps - 2}] (MixGRPO's max_timesteps); set method.options.window_range"
        )
    if options.window_range is not None:
        lo_hi = options.window_range
        if len(lo_hi) != 2 or not 0 <= lo_hi[0] <= lo_hi[1] - w or lo_hi[1] > num_steps:
            raise ConfigError(
                f"method.options.window_range: {lo_hi} must be [lo, hi] with 0 <= lo <= hi - window_size and "
                f"hi <= num_steps={num_steps}"
            )
    if w == 0 and int(num_steps * options.timestep_fraction) == 0:
        raise ConfigError("method.options.timestep_fraction: trains no transition at this num_steps")


# ----------------------------------------------------------------------------------------------------
# a method's knobs in a config
def carry_options(tree: dict[str, Any], name: Any, keep: Any = ()) -> None:
    """``method.name`` set to ``name`` over a lower level's method (the command line over a recipe, a recipe over its
    ``base:``): the lower level's ``method.options`` were written for its own method, so of Flow-GRPO's knobs among
    them only those ``name`` holds as Flow-GRPO's stay (``tiny-cpu`` with ``method.name=diffusion_nft`` keeps
    ``global_std``; Flow-GRPO's ``beta`` does not become DiffusionNFT's own); the others are dropped with a warning.
    ``keep``: keys set at the same level, which stay."""
    from flowrl.methods import method_class

    method = tree.get("method")
    options = method.get("options") if isinstance(method, dict) else None
    old = method.get("name", "flow_grpo") if isinstance(method, dict) else "flow_grpo"
    if not isinstance(options, dict) or not isinstance(name, str) or name == old:
        return
    try:
        knobs = shared_knobs(method_class(name).Options)
    except ValueError:  # an unknown method has its own error later
        return
    for key in sorted(KNOB_NAMES & set(options) - knobs):
        if f"method.options.{key}" not in keep:
            warnings.warn(
                f"method.options.{key} (set for method {old}): method {name} has no such knob of Flow-GRPO's; ignored",
                UserWarning,
                stacklevel=4,
            )
            del options[key]


def drop_foreign_knobs(cfg: Any) -> None:
    """Flow-GRPO's knobs in ``method.options`` of a method without them are dropped with a warning naming the method;
    the knobs it holds are then checked (range, ``sample.num_steps``)."""
    from flowrl.configkit import build_section
    from flowrl.methods import method_class

    name = cfg.method.name
    options_cls = method_class(name).Options
    knobs = shared_knobs(options_cls)
    fields = {f.name for f in dataclasses.fields(options_cls)} if dataclasses.is_dataclass(options_cls) else set()
    options = cfg.method.options
    for key in sorted(KNOB_NAMES & set(options) - fields):
        warnings.warn(
            f"method.options.{key}: method {name} has no such knob (one of Flow-GRPO's); ignored",
            UserWarning,
            stacklevel=4,
        )
        del options[key]
    given = {k: options[k] for k in knobs if k in options}
    if given:
        try:
            check_steps(build_section(options_cls, given, "method.options."), cfg.sample.num_steps)
        except ConfigError as exc:
            raise ConfigError(f"{exc} (method {name})") from None


def with_knob_defaults(flat: dict[str, Any]) -> dict[str, Any]:
    """A flattened config dict (``flowrl.configkit.flatten_config``) with the method's Flow-GRPO knobs at their
    defaults where unset, so a knob given at its default compares equal to one left unset
    (``flowrl.resolve.math_changes``)."""
    from flowrl.methods import method_class

    try:
        options_cls = method_class(flat.get("method.name", "flow_grpo")).Options
    except ValueError:
        return flat
    knobs = shared_knobs(options_cls)
    out = dict(flat)
    for f in dataclasses.fields(options_cls) if knobs else ():
        if f.name in knobs:
            out.setdefault(f"method.options.{f.name}", f.default)
    if any(k.startswith("method.options.") for k in out) and out.get("method.options") == {}:
        del out["method.options"]
    return out


def flow_knobs(cfg: Any) -> FlowGRPOOptions:
    """Flow-GRPO's knobs of a resolved config without building its method: those its method holds, Flow-GRPO's
    defaults for the step plan where it holds none, and ``beta`` 0 (no Flow-GRPO KL) where it has no such knob
    (``flowrl.estimate`` sizes the plan and the reference forward with them)."""
    from flowrl.configkit import build_section
    from flowrl.methods import method_class

    try:
        options_cls = method_class(cfg.method.name).Options
    except ValueError:
        options_cls = FlowGRPOOptions
    knobs = shared_knobs(options_cls)
    given = {k: v for k, v in (cfg.method.options or {}).items() if k in knobs}
    out = build_section(FlowGRPOOptions, given, "method.options.")
    if "beta" not in knobs:
        out.beta = 0.0
    return out

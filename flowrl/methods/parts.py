"""The parts a method is composed of, in registries (as verl registers advantage estimators and policy losses).

Three kinds of part, each chosen by a method by default and swappable from the command line where it fits:

* **credit rules** (``method.credit``): a reward table to advantages (``credit(method, table) -> Advantages``);
* **credit normalisations** (``method.credit_norm``): applied to a credit rule's advantages over the whole
  iteration (``gdpo``: GDPO's batch re-normalisation, then the clip);
* **policy losses** (``method.loss``): the loss of one trained transition on the recomputed step of an SDE
  transition (PPO-clip, RatioNorm, Flow-DPPO's mask), taken by every method built on Flow-GRPO's loss. A method
  whose loss fits no other method (the forward-process regressions, AV-GRPO's weighted loss, DPO, SFT, reward
  backprop) has it as its own ``transition_loss``, not as a part: the registries list what can be recombined.

A part declares what it needs: ``requires``, facts a method's exploration records (``MethodBase.records``:
``log_probs``, ``gaussian_means``, ``endpoints``, ``joint_phases``, ...), and ``reads``, the
``method.options`` fields it reads (Flow-GRPO's knobs among them: ``flowrl.methods.options``). A composition whose method lacks one is refused in one line naming both
parts and why, when the config resolves (before any weight loads).

A part's ``target`` is ``"module:attr"`` (``attr`` may be ``Class.function``), imported only when chosen. The
registries are ``flowrl.registry.Registry``'s, as the methods', families' and rewards' are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flowrl.configkit import NamedEnum
from flowrl.registry import Registry, import_target

# what an exploration may record, in words (for the one-line refusals)
RECORDS = {
    "log_probs": "per-step log-probs",
    "gaussian_means": "the Gaussian mean of every transition (a flow_sde or dance_sde step)",
    "endpoints": "clean ODE endpoints and their noisings",
    "joint_phases": "joint audio-video latents trained one modality at a time",
    "state_completions": "ODE completions of every rollout state",
    "window_completions": "ODE completions of an SDE window's states",
    "branches": "SDE branches off a shared anchor, scored at several granularities",
}


class PartKind(NamedEnum):
    """Which seam a part fills: a credit rule, a credit normalisation, or a policy loss on a recomputed SDE step."""

    CREDIT = "credit"
    NORM = "norm"
    POLICY = "policy"


@dataclass(frozen=True)
class Part:
    name: str
    target: str  # "module:attr", imported when the part is chosen
    summary: str  # one line: what it computes
    requires: frozenset[str] = frozenset()  # facts the method's exploration must record (``RECORDS``)
    reads: tuple[str, ...] = ()  # the ``method.options`` fields it reads
    kind: PartKind = PartKind.CREDIT
    metrics: tuple[str, ...] = ()  # the figures it reports (logged as method/<name>)

    def load(self) -> Callable[..., Any]:
        return import_target(self.target, "part", ValueError, self.name)


# each registry's ``where`` is the config key that chooses one of its parts
CREDIT_RULES = Registry("part", where="method.credit")
CREDIT_NORMS = Registry("part", where="method.credit_norm")
LOSSES = Registry("part", where="method.loss")


def register_credit_rule(part: Part) -> Part:
    return CREDIT_RULES.register(part.name, part)


def register_loss(part: Part) -> Part:
    return LOSSES.register(part.name, part)


_M = "flowrl.methods"
for _part in (
    Part(
        "group_zscore",
        f"{_M}.flow_grpo:group_zscore_credit",
        "the final reward z-scored within its prompt group (global_std, std_eps), clipped to adv_clip_max",
        reads=("global_std", "std_eps", "adv_clip_max"),
    ),
    Part(
        "iteration_zscore",
        f"{_M}.ram:iteration_zscore_credit",
        "the final reward minus its group's mean, over the iteration's (or the group's) std; unclipped",
        reads=("std_eps", "std_scope"),
    ),
    Part(
        "win_rates",
        f"{_M}.pref_grpo:PrefGRPO.win_rate_credit",
        "each reward's win rates (pairwise, or derived from scores) z-scored within groups, weighted sum",
        reads=("win_rate_from", "std_eps", "unbiased_std", "adv_clip_max"),
        metrics=("pref/win_rate_mean", "pref/win_rate_std"),
    ),
    Part(
        "dense_gains",
        f"{_M}.dense_grpo:DenseGRPO.dense_credit",
        "per-transition reward gains of the completed states, z-scored per transition: (N, T)",
        requires=frozenset({"state_completions"}),
        reads=("baseline", "global_std", "std_eps", "adv_clip_max"),
    ),
    Part(
        "turning_points",
        f"{_M}.tp_grpo:TPGRPO.turning_point_credit",
        "incremental step rewards with turning points credited the long-term reward, balanced: (N, T)",
        requires=frozenset({"window_completions"}),
        reads=(
            "eta",
            "first_step",
            "consistency",
            "balance",
            "drop_incremental",
            "balance_pool",
            "global_std",
            "std_eps",
            "adv_clip_max",
        ),
        metrics=("tp/detected_frac", "tp/kept_frac", "tp/kept_positive", "tp/kept_negative", "tp/active_frac"),
    ),
    Part(
        "granular",
        f"{_M}.g2rpo:G2RPO.granular_credit",
        "per-(branch, granularity, reward) z-scores within groups, summed over granularities and rewards",
        requires=frozenset({"branches"}),
        reads=("granularities", "eps", "unbiased", "adv_clip_max"),
    ),
    Part(
        "entropy_merged",
        f"{_M}.e_grpo:EGRPO.merged_credit",
        "z-scores of each merged branch's weighted reward sum (or G²RPO's per reward), summed over granularities",
        requires=frozenset({"branches"}),
        reads=("granularities", "eps", "unbiased", "reward_zscore", "adv_clip_max"),
    ),
    Part(
        "modality_zscore",
        f"{_M}.av_grpo:AVGRPO.modality_credit",
        "the trained modality's rewards z-scored per group with AV-GRPO's fallbacks, z-scored again; NaN guard",
        requires=frozenset({"joint_phases"}),
        reads=("video_rewards", "audio_rewards", "vq_reward", "clap_reward", "vq_floor", "clap_floor"),
        metrics=("av/phase_video", "av/fallback_frac", "av/capped_frac", "av/nan_switches"),
    ),
    Part(
        "uniform",
        f"{_M}.reward_backprop:uniform_credit",
        "every row weighs 1 and trains: no advantage, the reward's gradient is the signal (reward backprop)",
        metrics=("stop_step",),
    ),
    Part(
        "preference_pairs",
        f"{_M}.dpo:preference_pairs_credit",
        "+1 at each pair's chosen member, -1 at its rejected one: a dataset's pairs, or each group's best and worst",
        metrics=("dpo/pairs",),
    ),
    Part(
        "targets",
        f"{_M}.sft:targets_credit",
        "every row a target to regress on (advantage 1): a dataset's media, no reward",
    ),
):
    register_credit_rule(_part)

for _part in (
    Part("none", f"{_M}.parts:no_norm", "the credit rule's advantages as they are", kind=PartKind.NORM),
    Part(
        "gdpo",
        f"{_M}.parts:gdpo_norm",
        "GDPO: the advantages z-scored again over the whole iteration (sample std, eps 1e-8; a 0 stays 0), "
        "then clipped to adv_clip_max",
        kind=PartKind.NORM,
        reads=("adv_clip_max",),
    ),
):
    CREDIT_NORMS.register(_part.name, _part)

for _part in (
    Part(
        "ppo_clip",
        f"{_M}.flow_grpo:ppo_clip_policy",
        "Flow-GRPO's PPO-clipped ratio of the recomputed log-prob (plus beta times the Gaussian KL)",
        requires=frozenset({"log_probs"}),
        reads=("clip_range", "beta"),
        kind=PartKind.POLICY,
    ),
    Part(
        "ratio_norm",
        f"{_M}.flow_grpo:ratio_norm_policy",
        "GRPO-Guard's RatioNorm: the corrected ratio, the clipped loss divided by |dt| (plus the KL)",
        requires=frozenset({"log_probs", "gaussian_means"}),
        reads=("clip_range", "beta"),
        kind=PartKind.POLICY,
    ),
    Part(
        "dppo_mask",
        f"{_M}.flow_dppo:dppo_mask_policy",
        "Flow-DPPO: the unclipped ratio, a row dropped where the exact Gaussian KL to the rollout's step is at least "
        "kl_threshold and the ratio moves with its advantage (plus the KL)",
        requires=frozenset({"log_probs", "gaussian_means"}),
        reads=("kl_threshold", "kl_sigma_cap", "beta"),
        kind=PartKind.POLICY,
    ),
):
    register_loss(_part)


# ------------------------------------------------------------------------------------------- the norms
def no_norm(adv: Any, method: Any) -> Any:
    return adv


def gdpo_norm(adv: Any, method: Any) -> Any:
    from flowrl.advantages import batch_zscore, clip_advantages

    adv.values = clip_advantages(batch_zscore(adv.values), method.options.adv_clip_max)
    return adv


# ------------------------------------------------------------------------------------------- composition
@dataclass(frozen=True)
class Composition:
    """The parts one method runs with: its defaults, or what ``method.credit`` / ``credit_norm`` / ``loss`` chose."""

    credit: Part
    credit_norm: Part
    loss: Part | None  # None: the method's own ``transition_loss``


def compose(
    method_name: str, cls: type, options: Any, cfg: Any, records: frozenset[str], defaults: dict[str, str | None]
) -> Composition:
    """The method's parts (``defaults``, by part key; a recipe's in place of its class's) with the command line's
    choices, each checked against what the method's exploration records and what its options hold: a mismatch
    is one ``ConfigError`` line naming both parts and why."""
    from flowrl.configkit import ConfigError

    m = cfg.method
    chosen = {
        "credit": m.credit or defaults["credit"],
        "credit_norm": m.credit_norm or defaults["credit_norm"],
        "loss": m.loss or defaults["loss"],
    }
    registries = {"credit": CREDIT_RULES, "credit_norm": CREDIT_NORMS, "loss": LOSSES}
    parts: dict[str, Part | None] = {}
    for key, name in chosen.items():
        try:
            parts[key] = registries[key].get(name) if name is not None else None
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    fields = {f.name for f in dataclasses.fields(options)} if dataclasses.is_dataclass(options) else set()

    def own(key: str) -> str:
        return defaults[key] or f"{method_name}'s own transition_loss"

    for key, part in parts.items():
        if part is None:
            continue
        label = f"{registries[key].where}={part.name}"
        missing = [r for r in RECORDS if r in part.requires and r not in records]
        if missing:
            raise ConfigError(
                f"{label}: needs {RECORDS[missing[0]]}, which method {method_name}'s exploration does not "
                f"record (its own {key}: {own(key)})"
            )
        lacking = [f for f in part.reads if f not in fields]
        if lacking:
            raise ConfigError(
                f"{label}: reads method.options.{lacking[0]}, which method {method_name}'s options do not have "
                f"(its own {key}: {own(key)})"
            )
    if parts["loss"] is not None and not cls.hosts_policy_loss:
        raise ConfigError(
            f"method.loss={parts['loss'].name}: a policy loss on a recomputed SDE step, which method "
            f"{method_name} does not take (its own loss: {own('loss')})"
        )
    return Composition(parts["credit"], parts["credit_norm"], parts["loss"])


def joint_pipeline(cfg: Any) -> bool:
    """Whether ``model.pipeline`` steps joint audio-video latents (an unknown pipeline: no; its own error comes)."""
    from flowrl.media import MediaKind
    from flowrl.pipelines.base import media_kind_of

    try:
        return media_kind_of(cfg.model.pipeline) is MediaKind.AUDIO_VIDEO
    except ValueError:
        return False


# ------------------------------------------------------------------------------------------- config keys
def check_part_names(cfg: Any) -> None:
    """``method.credit`` / ``credit_norm`` / ``loss``, where set, name registered parts (one line with the closest)."""
    from flowrl.configkit import ConfigError

    for key, registry in (("credit", CREDIT_RULES), ("credit_norm", CREDIT_NORMS), ("loss", LOSSES)):
        name = getattr(cfg.method, key)
        if name is not None:
            try:
                registry.get(name)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None

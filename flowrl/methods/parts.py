"""The parts a method is composed of, in registries (as verl registers advantage estimators and policy losses).

Three kinds of part, each chosen by a method by default and swappable from the command line where it fits:

* **credit rules** (``method.credit``): a reward table to advantages (``credit(method, table) -> Advantages``);
* **credit normalisations** (``method.credit_norm``): applied to a credit rule's advantages over the whole
  iteration (``gdpo``: GDPO's batch re-normalisation, then the clip);
* **transition losses** (``method.loss``): the loss of one trained transition. A ``policy`` loss scores the
  recomputed step of an SDE transition (PPO-clip, RatioNorm); a ``transition`` loss is the whole loss of a
  unit's transition (the forward-process regressions, AV-GRPO's weighted loss).

A part declares what it needs: ``requires``, facts a method's exploration records (``MethodBase.records``:
``log_probs``, ``gaussian_means``, ``endpoints``, ``joint_phases``, ...), and ``reads``, the
``method.options`` fields it reads (Flow-GRPO's knobs among them: ``flowrl.methods.options``). A composition whose method lacks one is refused in one line naming both
parts and why, when the config resolves (before any weight loads).

A part's ``target`` is ``"module:attr"`` (``attr`` may be ``Class.function``), imported only when chosen.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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


@dataclass(frozen=True)
class Part:
    name: str
    target: str  # "module:attr", imported when the part is chosen
    summary: str  # one line: what it computes
    requires: frozenset[str] = frozenset()  # facts the method's exploration must record (``RECORDS``)
    reads: tuple[str, ...] = ()  # the ``method.options`` fields it reads
    kind: str = "credit"  # credit | norm | policy | transition
    metrics: tuple[str, ...] = ()  # the figures it reports (logged as method/<name>)
    keeps_flat_rows: bool = False  # a loss that still pulls a row whose advantage is 0 (every row trains)

    def load(self) -> Callable[..., Any]:
        module, _, attr = self.target.partition(":")
        obj: Any = importlib.import_module(module)
        for name in attr.split("."):
            obj = getattr(obj, name)
        return obj


class Parts:
    """A registry of parts of one kind: refuses duplicate names, suggests close ones."""

    def __init__(self, key: str):
        self.key = key  # the config key that chooses one
        self._parts: dict[str, Part] = {}

    def register(self, part: Part) -> Part:
        if part.name in self._parts and self._parts[part.name] != part:
            raise ValueError(f"{self.key}: a part named {part.name!r} is already registered")
        self._parts[part.name] = part
        return part

    def names(self) -> list[str]:
        return sorted(self._parts)

    def get(self, name: str) -> Part:
        if name not in self._parts:
            close = difflib.get_close_matches(name, list(self._parts), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(self.names())}"
            raise ValueError(f"{self.key}: unknown part {name!r}{hint}")
        return self._parts[name]


CREDIT_RULES = Parts("method.credit")
CREDIT_NORMS = Parts("method.credit_norm")
LOSSES = Parts("method.loss")


def register_credit_rule(part: Part) -> Part:
    return CREDIT_RULES.register(part)


def register_loss(part: Part) -> Part:
    return LOSSES.register(part)


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
    Part("none", f"{_M}.parts:no_norm", "the credit rule's advantages as they are", kind="norm"),
    Part(
        "gdpo",
        f"{_M}.parts:gdpo_norm",
        "GDPO: the advantages z-scored again over the whole iteration (sample std, eps 1e-8; a 0 stays 0), "
        "then clipped to adv_clip_max",
        kind="norm",
        reads=("adv_clip_max",),
    ),
):
    CREDIT_NORMS.register(_part)

for _part in (
    Part(
        "ppo_clip",
        f"{_M}.flow_grpo:ppo_clip_policy",
        "Flow-GRPO's PPO-clipped ratio of the recomputed log-prob (plus beta times the Gaussian KL)",
        requires=frozenset({"log_probs"}),
        reads=("clip_range", "beta"),
        kind="policy",
    ),
    Part(
        "ratio_norm",
        f"{_M}.flow_grpo:ratio_norm_policy",
        "GRPO-Guard's RatioNorm: the corrected ratio, the clipped loss divided by |dt| (plus the KL)",
        requires=frozenset({"log_probs", "gaussian_means"}),
        reads=("clip_range", "beta"),
        kind="policy",
    ),
    Part(
        "dppo_mask",
        f"{_M}.flow_dppo:dppo_mask_policy",
        "Flow-DPPO: the unclipped ratio, a row dropped where the exact Gaussian KL to the rollout's step is at least "
        "kl_threshold and the ratio moves with its advantage (plus the KL)",
        requires=frozenset({"log_probs", "gaussian_means"}),
        reads=("kl_threshold", "kl_sigma_cap", "beta"),
        kind="policy",
    ),
    Part(
        "ram_regression",
        f"{_M}.ram:RAM.regression_loss",
        "RAM: the velocity regressed on v_ref + m A ((eps - x0) - v_old)",
        requires=frozenset({"endpoints"}),
        reads=("reward_multiplier", "target_velocity"),
        kind="transition",
        keeps_flat_rows=True,
    ),
    Part(
        "nft",
        f"{_M}.diffusion_nft:DiffusionNFT.nft_transition_loss",
        "DiffusionNFT: the negative-aware x0 regression of the implicit positive and negative policies",
        requires=frozenset({"endpoints"}),
        reads=("beta", "kl_beta", "adv_clip_max"),
        kind="transition",
        keeps_flat_rows=True,
    ),
    Part(
        "awm",
        f"{_M}.awm:AWM.awm_transition_loss",
        "AWM: the clipped ratio of the weighted flow-matching surrogate log-probs times the advantage, plus the "
        "velocity KLs to the reference and to a slow average",
        requires=frozenset({"endpoints"}),
        reads=("weighting", "ghuber_power", "clip_range", "advantage_max", "adv_clip_max", "kl_beta", "ema_kl_beta"),
        kind="transition",
        keeps_flat_rows=True,
    ),
    Part(
        "av_grpo",
        f"{_M}.av_grpo:AVGRPO.weighted_loss",
        "AV-GRPO: lambda_pol-weighted PPO-clip plus beta lambda_rw times the Gaussian KL, per phase",
        requires=frozenset({"log_probs", "joint_phases"}),
        reads=("clip_range", "beta_video", "beta_audio"),
        kind="transition",
    ),
    Part(
        "reward_backprop",
        f"{_M}.reward_backprop:RewardBackprop.backprop_loss",
        "ReFL / DRaFT-K: -lambda r(decode(x0_hat)) backpropagated through the reward, the decoder and K steps",
        reads=("reward_weight", "kl_weight", "decode_checkpointing"),
        kind="transition",
        keeps_flat_rows=True,
    ),
    Part(
        "dpo",
        f"{_M}.dpo:DPO.dpo_transition_loss",
        "Diffusion-DPO: -log sigmoid(-(beta/2)(Delta_w - Delta_l)), Delta = ||v - u||^2 - ||v_ref - u||^2",
        requires=frozenset({"endpoints"}),
        reads=("beta",),
        kind="transition",
    ),
    Part(
        "dgpo",
        f"{_M}.dgpo:DGPO.dgpo_transition_loss",
        "DGPO: each error weighted by A and its group's sigmoid of the summed implicit rewards; clip and KL",
        requires=frozenset({"endpoints"}),
        reads=("beta_dpo", "clip_range", "kl_beta", "use_ema_ref"),
        kind="transition",
    ),
    Part(
        "flow_matching",
        f"{_M}.sft:SFT.flow_matching_loss",
        "SFT: the flow-matching regression ||v_theta(x_t) - (eps - x0)||^2 on the dataset's media",
        requires=frozenset({"endpoints"}),
        kind="transition",
        keeps_flat_rows=True,
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
    loss: Part


def compose(method_name: str, cls: type, options: Any, cfg: Any, records: frozenset[str]) -> Composition:
    """The method's parts with the command line's choices, each checked against what the method's exploration
    records and what its options hold: a mismatch is one ``ConfigError`` line naming both parts and why."""
    from flowrl.configkit import ConfigError

    m = cfg.method
    chosen = {
        "credit": m.credit or cls.default_credit,
        "credit_norm": m.credit_norm or cls.default_credit_norm,
        "loss": m.loss or cls.default_loss,
    }
    registries = {"credit": CREDIT_RULES, "credit_norm": CREDIT_NORMS, "loss": LOSSES}
    parts = {}
    for key, name in chosen.items():
        try:
            parts[key] = registries[key].get(name)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    fields = {f.name for f in dataclasses.fields(options)} if dataclasses.is_dataclass(options) else set()
    for key, part in parts.items():
        label = f"{registries[key].key}={part.name}"
        missing = [r for r in RECORDS if r in part.requires and r not in records]
        if missing:
            raise ConfigError(
                f"{label}: needs {RECORDS[missing[0]]}, which method {method_name}'s exploration does not "
                f"record (its own {key}: {getattr(cls, 'default_' + key)})"
            )
        lacking = [f for f in part.reads if f not in fields]
        if lacking:
            raise ConfigError(
                f"{label}: reads method.options.{lacking[0]}, which method {method_name}'s options do not have "
                f"(its own {key}: {getattr(cls, 'default_' + key)})"
            )
    if parts["loss"].kind == "policy" and not cls.hosts_policy_loss:
        raise ConfigError(
            f"method.loss={parts['loss'].name}: a policy loss on a recomputed SDE step, which method "
            f"{method_name} does not take (its own loss: {cls.default_loss})"
        )
    if parts["loss"].kind == "transition" and parts["loss"].name != cls.default_loss:
        raise ConfigError(
            f"method.loss={parts['loss'].name}: the whole transition loss of method "
            f"{_owner(parts['loss'])}, whose exploration and options method {method_name} does not share"
        )
    return Composition(parts["credit"], parts["credit_norm"], parts["loss"])


def joint_pipeline(cfg: Any) -> bool:
    """Whether ``model.pipeline`` steps joint audio-video latents (an unknown pipeline: no; its own error comes)."""
    from flowrl.pipelines.base import adapter_class

    try:
        return getattr(adapter_class(cfg.model.pipeline), "media_kind", "image") == "audio_video"
    except ValueError:
        return False


def _owner(part: Part) -> str:
    return part.target.split(":")[0].rsplit(".", 1)[-1]


# ------------------------------------------------------------------------------------------- config keys
# deprecated keys that choose a part (one release): key -> (part key, part name)
PART_ALIASES = {"train.ratio_norm": ("loss", "ratio_norm"), "train.batch_renorm": ("credit_norm", "gdpo")}


def check_part_keys(cfg: Any) -> None:
    """At config resolution: ``method.credit`` / ``credit_norm`` / ``loss`` name registered parts, and the
    deprecated ``train.ratio_norm`` / ``train.batch_renorm`` set ``method.loss`` / ``method.credit_norm`` with a
    FutureWarning (refused where the method or pipeline cannot take RatioNorm, in their own words)."""
    import warnings

    from flowrl.configkit import ConfigError
    from flowrl.methods import method_class

    for key, (part, name) in PART_ALIASES.items():
        if not getattr(cfg.train, key.split(".")[1]):
            continue
        warnings.warn(f"{key} is deprecated; use method.{part}={name}", FutureWarning, stacklevel=5)
        chosen = getattr(cfg.method, part)
        if chosen not in (None, name):
            raise ConfigError(f"{key}: chooses method.{part}={name}, but method.{part}={chosen} is set too")
        setattr(cfg.method, part, name)
    for key, registry in (("credit", CREDIT_RULES), ("credit_norm", CREDIT_NORMS), ("loss", LOSSES)):
        name = getattr(cfg.method, key)
        if name is not None:
            try:
                registry.get(name)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
    if cfg.train.ratio_norm:
        if not method_class(cfg.method.name).hosts_policy_loss:
            raise ConfigError(
                f"train.ratio_norm: method {cfg.method.name} has no clipped PPO ratio to normalise "
                "(RatioNorm applies to Flow-GRPO's loss and the methods built on it)"
            )
        if joint_pipeline(cfg):
            raise ConfigError(
                f"train.ratio_norm: model.pipeline={cfg.model.pipeline} steps joint latents with "
                "one std per modality, where RatioNorm's single step scale is not defined"
            )

"""Pre-flight: the input errors that would otherwise surface after the model is built (or never), each in one
line, before any weight loads; and the metric names a run can log (``log.stop_if`` is checked against them).
``flowrl validate`` runs these without building a trainer."""

from __future__ import annotations

import difflib
import logging

from flowrl import trackers
from flowrl.config import Config, inert_settings
from flowrl.configkit import ConfigError, parse_stop_rule
from flowrl.media import monitor_names
from flowrl.mesh import check_family
from flowrl.methods import build_method
from flowrl.pipelines.base import adapter_class, media_kind_of
from flowrl.reward_models.base import reward_target
from flowrl.scoring import check_reward_modality

logger = logging.getLogger(__name__)


def preflight(cfg: Config) -> None:
    """Input errors that would otherwise surface after the model is built (or never): one line each."""
    from flowrl.benchmarks.models import check_model_path_or_hint
    from flowrl.reward_models import check_reward_args

    check_model_path_or_hint(cfg.model)  # a benchmark's cached base model not made yet: names the command
    check_resume_family(cfg)  # a checkpoint of another family, before its tensors fail to fit the model
    trackers.check_trackers(cfg)  # an unknown tracker or its missing package
    method = build_method(cfg)  # unknown or mistyped method.options
    check_whole_groups(cfg, method, 1)
    check_family(cfg.train.sequence_parallel, cfg.model.pipeline, adapter_class(cfg.model.pipeline))
    kind = media_kind_of(cfg.model.pipeline)
    needs = method.needs()
    if needs.dataset is not None:  # every row's media readable, before any weight loads
        from flowrl.media_data import check_media_folder

        check_media_folder(cfg, needs.dataset)
    if not cfg.reward and cfg.log.eval_every > 0 and not cfg.eval_reward:
        raise ConfigError(
            "log.eval_every: evaluation scores with a reward and none is configured; set eval_reward.<name>=<weight> "
            "or log.eval_every=0"
        )
    kinds = needs.media
    if kinds is not None and kind not in kinds:
        raise ConfigError(
            f"method {cfg.method.name} trains {' or '.join(kinds)} media; model.pipeline="
            f"{cfg.model.pipeline} makes {kind}"
        )
    for section in (cfg.reward, cfg.eval_reward or {}):
        for name in section:
            check_reward_args(name, cfg.reward_args.get(name, {}))
            target = reward_target(name)
            if isinstance(target, type):  # a function reward declares nothing
                check_reward_modality(name, target, cfg.model.pipeline, kind)
    if cfg.reward and all(w == 0 for w in cfg.reward.values()):
        logger.warning("every reward weight is 0: every advantage will be 0 and nothing can be learned")
    for line in inert_settings(cfg):  # a setting the user changed that this config never reads
        logger.warning(line)
    for rule in cfg.log.stop_if:
        metric = parse_stop_rule(rule)[0]
        logged = logged_metric_names(cfg)
        if metric not in logged:
            close = difflib.get_close_matches(metric, sorted(logged), n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"log.stop_if: {rule!r} names {metric!r}, which this run does not log{hint}")


def check_resume_family(cfg: Config) -> None:
    """``resume=`` naming a checkpoint (or, ``latest``, a run folder whose newest one is) of another family than
    ``model.pipeline``: one line naming both. A checkpoint that cannot be read is left to the resume's own checks."""
    from pathlib import Path

    from flowrl import checkpoint as ckpt

    if not cfg.resume:
        return
    if cfg.resume == "latest":
        if cfg.run_name == "auto":
            return
        found = ckpt.list_checkpoints(Path(cfg.output_dir, cfg.run_name or "").expanduser() / "checkpoints")
        if not found:
            return
        path = found[-1]
    else:
        path = Path(cfg.resume).expanduser()
    ckpt.check_family(path, cfg.model.pipeline, f"resume={cfg.resume}" if cfg.resume == "latest" else "resume")


def check_whole_groups(cfg: Config, method, world: int, pairwise: bool = False) -> None:
    """Rollouts that must hold whole prompt groups: a method that explores per group (``Needs.whole_groups``)
    needs each process's share of samples and ``sample.batch_size`` to be multiples of the group size; a
    ``pairwise`` reward, which compares the samples of a group, needs each process's share to be one."""
    s = cfg.sample
    share = s.prompts_per_iteration * s.group_size // world
    if method.needs().whole_groups and (s.batch_size % s.group_size or share % s.group_size):
        raise ConfigError(
            f"method {method.name} explores per prompt group, so every rollout batch must hold whole groups: "
            f"sample.batch_size={s.batch_size} and the {share} samples per process must be multiples of "
            f"sample.group_size={s.group_size}"
        )
    if pairwise and share % s.group_size:
        raise ConfigError(
            f"a pairwise reward needs whole groups on each process: {share} samples per process is not a "
            f"multiple of sample.group_size={s.group_size}"
        )


def logged_metric_names(cfg: Config) -> set[str]:
    """The metric names an iteration's row can hold under ``cfg`` (a test holds this to a real run)."""
    names = {
        "iteration",
        "skipped",
        "reward/mean",
        "reward/std",
        "reward/zero_std_ratio",
        "adv/kept_frac",
        "adv/abs_mean",
        "throughput/images_per_s",
        "memory/peak_gib",
    }
    names |= {
        f"policy/{k}"
        for k in (
            "loss",
            "pg_loss",
            "kl",
            "approx_kl",
            "clip_frac",
            "ratio_mean",
            "grad_norm",
            "lr",
            "onpolicy_logp_diff",
        )
    }
    names |= {f"timing_s/{k}" for k in ("iteration", "rollout", "reward", "advantage", "update", "eval")}
    names |= {
        "cost/nfe",
        "cost/reward_calls",
        "cost/nfe_total",
        "cost/reward_calls_total",
        "throughput/nfe_per_s",
        "cost/optimizer_steps",
    }
    names |= {f"method/{k}" for k in build_method(cfg).needs().metrics}
    for name in cfg.reward:
        names |= {f"reward/{name}/mean", f"reward/{name}/std", f"cost/reward_calls/{name}"}
    if cfg.log.monitors:
        names |= monitor_names(media_kind_of(cfg.model.pipeline))
    if cfg.log.eval_every > 0:
        names |= {"eval/reward/mean", "eval/reward/std", "monitor/heldout_gap"}
        names |= {f"eval/reward/{n}/mean" for n in (cfg.eval_reward or cfg.reward)}
        if cfg.eval_reward:
            names.add("eval/train_reward/mean")
    return names

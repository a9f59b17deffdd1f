"""The config keys of flow_grpo and Flow-Factory that flowrl spells another way, each with its flowrl key or keys:
the tables of docs/migration.md (``tests/cli/test_migration_doc.py`` holds the two to each other); and flowrl's own
keys that moved before its first release. An unknown key that is one of these is answered with its flowrl name
instead of a spelling suggestion. Imports nothing."""

from __future__ import annotations

DOC = "docs/migration.md"

# their key -> (whose, flowrl's keys); a key both tools spell alike (mixed_precision) names both
FOREIGN_KEYS: dict[str, tuple[str, tuple[str, ...]]] = {
    "num_epochs": ("flow_grpo's", ("train.iterations",)),
    "resume_from": ("flow_grpo's", ("resume",)),
    "logdir": ("flow_grpo's", ("output_dir",)),
    "save_freq": ("flow_grpo's", ("log.save_every",)),
    "eval_freq": ("flow_grpo's", ("log.eval_every",)),
    "num_checkpoint_limit": ("flow_grpo's", ("log.keep_last",)),
    "mixed_precision": ("flow_grpo's and Flow-Factory's", ("train.mixed_precision",)),
    "use_lora": ("flow_grpo's", ("train.lora.enabled",)),
    "dataset": ("flow_grpo's", ("data.prompts",)),
    "resolution": ("flow_grpo's", ("model.resolution",)),
    "activation_checkpointing": ("flow_grpo's", ("train.gradient_checkpointing",)),
    "pretrained.model": ("flow_grpo's", ("model.path",)),
    "pretrained.revision": ("flow_grpo's", ("model.revision",)),
    "sample.train_batch_size": ("flow_grpo's", ("sample.batch_size",)),
    "sample.num_image_per_prompt": ("flow_grpo's", ("sample.group_size",)),
    "sample.num_batches_per_epoch": ("flow_grpo's", ("sample.prompts_per_iteration",)),
    "sample.global_std": ("flow_grpo's", ("method.options.global_std",)),
    "sample.noise_level": ("flow_grpo's", ("method.options.noise_level",)),
    "train.clip_range": ("flow_grpo's and Flow-Factory's", ("method.options.clip_range",)),
    "train.adv_clip_max": ("flow_grpo's", ("method.options.adv_clip_max",)),
    "train.beta": ("flow_grpo's", ("method.options.beta",)),
    "train.global_std": ("Flow-Factory's", ("method.options.global_std",)),
    "sample.same_latent": ("flow_grpo's", ("sample.same_noise_in_group",)),
    "sample.sde_window_size": ("flow_grpo's", ("method.options.window_size",)),
    "sample.sde_window_range": ("flow_grpo's", ("method.options.window_range",)),
    "train.adam_beta1": ("flow_grpo's", ("train.adam_betas",)),
    "train.adam_beta2": ("flow_grpo's", ("train.adam_betas",)),
    "train.adam_weight_decay": ("flow_grpo's", ("train.weight_decay",)),
    "train.adam_epsilon": ("flow_grpo's", ("train.adam_eps",)),
    "train.gradient_accumulation_steps": ("flow_grpo's", ("train.optimizer_steps_per_iteration",)),
    "train.timestep_fraction": ("flow_grpo's", ("method.options.timestep_fraction",)),
    "prompt_fn": ("flow_grpo's", ("data.prompts",)),
    "prompt_fn_kwargs": ("flow_grpo's", ("data.prompts",)),
    "reward_fn": ("flow_grpo's", ("reward",)),
    "per_prompt_stat_tracking": ("flow_grpo's", ("method.options.global_std",)),
    "model.model_name_or_path": ("Flow-Factory's", ("model.path",)),
    "model.model_type": ("Flow-Factory's", ("model.pipeline",)),
    "model.finetune_type": ("Flow-Factory's", ("train.lora.enabled",)),
    "model.lora_rank": ("Flow-Factory's", ("train.lora.rank",)),
    "model.lora_alpha": ("Flow-Factory's", ("train.lora.alpha",)),
    "model.target_modules": ("Flow-Factory's", ("train.lora.target_modules",)),
    "model.resume_path": ("Flow-Factory's", ("resume",)),
    "log.run_name": ("Flow-Factory's", ("run_name",)),
    "log.project": ("Flow-Factory's", ("log.tracker_project",)),
    "log.logging_backend": ("Flow-Factory's", ("log.trackers",)),
    "log.save_dir": ("Flow-Factory's", ("output_dir",)),
    "log.save_freq": ("Flow-Factory's", ("log.save_every",)),
    "train.trainer_type": ("Flow-Factory's", ("method.name",)),
    "train.advantage_aggregation": ("Flow-Factory's", ("reward", "method.credit_norm")),
    "train.adv_clip_range": ("Flow-Factory's", ("method.options.adv_clip_max",)),
    "train.kl_beta": ("Flow-Factory's", ("method.options.beta",)),
    "train.resolution": ("Flow-Factory's", ("model.resolution",)),
    "train.num_inference_steps": ("Flow-Factory's", ("sample.num_steps",)),
    "train.guidance_scale": ("Flow-Factory's", ("sample.guidance_scale",)),
    "train.per_device_batch_size": ("Flow-Factory's", ("sample.batch_size",)),
    "train.group_size": ("Flow-Factory's", ("sample.group_size",)),
    "train.unique_sample_num_per_epoch": ("Flow-Factory's", ("sample.prompts_per_iteration",)),
    "train.gradient_step_per_epoch": ("Flow-Factory's", ("train.optimizer_steps_per_iteration",)),
    "train.ema_update_interval": ("Flow-Factory's", ("train.ema_every",)),
    "train.enable_gradient_checkpointing": ("Flow-Factory's", ("train.gradient_checkpointing",)),
    "train.seed": ("Flow-Factory's", ("seed",)),
    "scheduler.seed": ("Flow-Factory's", ("seed",)),
    "eval.seed": ("Flow-Factory's", ("seed",)),
    "scheduler.dynamics_type": ("Flow-Factory's", ("method.options.sde_type",)),
    "scheduler.noise_level": ("Flow-Factory's", ("method.options.noise_level",)),
    "scheduler.num_sde_steps": ("Flow-Factory's", ("method.options.window_size",)),
    "scheduler.sde_steps": ("Flow-Factory's", ("method.options.window_range",)),
    "eval.num_inference_steps": ("Flow-Factory's", ("sample.eval_num_steps",)),
    "eval.guidance_scale": ("Flow-Factory's", ("sample.eval_guidance_scale",)),
    "eval.eval_freq": ("Flow-Factory's", ("log.eval_every",)),
    "eval_rewards": ("Flow-Factory's", ("eval_reward",)),
}


# flowrl's keys that moved before its first release -> the setting that replaces each (named by the one-line error
# of a recipe or command line that still uses one)
MOVED_KEYS: dict[str, str] = {
    **{
        f"sample.{name}": f"method.options.{name}"
        for name in ("sde_type", "noise_level", "window_size", "window_range", "timestep_fraction")
    },
    **{
        f"train.{name}": f"method.options.{name}"
        for name in ("clip_range", "adv_clip_max", "beta", "global_std", "std_eps")
    },
    "train.batch_renorm": "method.credit_norm=gdpo",
    "train.ratio_norm": "method.loss=ratio_norm",
}


def moved_key_hint(key: str) -> str | None:
    """``train.beta``: "train.beta is method.options.beta now"; None for a key that never moved."""
    return f"{key} is {MOVED_KEYS[key]} now" if key in MOVED_KEYS else None


def _flowrl_keys(key: str) -> str:
    return " and ".join(FOREIGN_KEYS[key][1])


def foreign_key_hint(key: str) -> str | None:
    """What ``key``, unknown to flowrl, is called here when it is flow_grpo's or Flow-Factory's (``pretrained.model``:
    "flow_grpo's pretrained.model is model.path here"), or the keys of theirs it starts (``pretrained``); else None."""
    if key in FOREIGN_KEYS:
        return f"{FOREIGN_KEYS[key][0]} {key} is {_flowrl_keys(key)} here ({DOC})"
    below = [k for k in FOREIGN_KEYS if k.startswith(key + ".")]
    if not below:
        return None
    whose = FOREIGN_KEYS[below[0]][0]
    pairs = ", ".join(f"{k} is {_flowrl_keys(k)}" for k in below)
    return f"{key} is {whose} section, not flowrl's: {pairs} here ({DOC})"

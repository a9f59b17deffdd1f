"""The one trainer. Each iteration runs named, timed phases:

    rollout -> reward -> advantage -> update -> log/save

A method (``flowrl.methods``) chooses the step plan, the credit assignment and the transition loss;
the pipeline adapter (``flowrl.pipelines``) owns the model; rewards come from ``flowrl.reward_models``.
"""

from __future__ import annotations

import difflib
import logging
import queue
import threading
from concurrent.futures import Future
from concurrent.futures import wait as futures_wait
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from flowrl import checkpoint as ckpt
from flowrl import latents, runs, sharding, trackers
from flowrl.advantages import zero_std_ratio
from flowrl.config import (
    Config,
    ConfigError,
    dump_config,
    inert_settings,
    math_changes,
    parse_stop_rule,
    redact_secrets,
)
from flowrl.data import GroupSampler, load_eval_prompts, load_train_prompts, uses_negatives
from flowrl.interrupts import Interrupted, StopSignals
from flowrl.logs import MetricsWriter, plot_reward_curve, read_metrics, timed
from flowrl.lr import lr_factor
from flowrl.media import cat_media, media_monitors, monitor_names, num_samples, save_media, select_media, to_cpu
from flowrl.methods import build_method, seam
from flowrl.methods.base import PromptBatch
from flowrl.methods.context import Context
from flowrl.pipelines.base import Conditioning, adapter_class
from flowrl.policy import EMA, ParamAverage, Policy, check_compile, compile_forward, lora_config  # noqa: F401 (re-exported)
from flowrl.reward_models import RewardError, WeightedReward, build_reward
from flowrl.reward_models.base import reward_target
from flowrl.rollout import Trajectory, sample_images
from flowrl.seeds import seed_of

logger = logging.getLogger(__name__)


class OnPolicyError(RuntimeError):
    """The first update's recomputed log-probs differ from the rollout's."""


class NoSignalError(RuntimeError):
    """Too many iterations in a row in which every group's reward was flat: nothing can be learned."""


@dataclass
class RolloutBatch:
    traj: Trajectory
    cond: Conditioning
    prompts: list[str]
    metadata: list[dict]
    media: Any  # the final samples as the adapter decodes them (``flowrl.media``: images, video, audio), CPU
    # name -> media of B x K samples (sample-major: sample i's K are rows i K .. i K + K - 1): more to score
    extra: dict[str, Any] = field(default_factory=dict)
    info: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> (B,) or (B, K): facts for credit
    pending: Future | None = None  # its reward calls, running in the background (``train.reward_overlap``)


class BackgroundWorker:
    """One daemon thread running submitted calls in order: the rewards of rollout batch k run while batch
    k+1 samples. Daemon, unlike a ThreadPoolExecutor's workers (joined at exit), so a reward left hanging
    after its timeout cannot keep the process alive. Each call gets the submitter's grad mode and CUDA device."""

    def __init__(self, name: str):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn, *args) -> Future:
        future: Future = Future()
        device = torch.cuda.current_device() if torch.cuda.is_initialized() else None
        self._jobs.put((future, fn, args, torch.is_grad_enabled(), torch.is_inference_mode_enabled(), device))
        return future

    def _run(self) -> None:
        while True:
            future, fn, args, grad, inference, device = self._jobs.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                if device is not None:
                    torch.cuda.set_device(device)
                with torch.inference_mode(inference), torch.set_grad_enabled(grad):
                    future.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                future.set_exception(exc)


@dataclass
class Scores:
    """The reward phase's output, all processes' samples in global order."""

    final: torch.Tensor  # (N,) weighted reward of the final samples
    components: dict[str, torch.Tensor]  # reward name -> (N,) its score of the final samples
    # what credit sees: "final" (N,), every other scored name (N, K), each reward's own unweighted score of
    # them as "final/<reward>" and "<name>/<reward>", and the method's info columns
    columns: dict[str, torch.Tensor]
    calls: int  # this process's reward evaluations (samples x pointwise rewards, plus pairwise comparisons)
    calls_by_reward: dict[str, float] = field(default_factory=dict)  # the same, per reward


class UpdateStats:
    """Update statistics as weighted sums, so that means over processes are means over samples."""

    def __init__(self):
        self.sums: dict[str, float] = {}
        self.weights: dict[str, float] = {}
        self.maxima: dict[str, float] = {}

    def add(self, weight: float = 1.0, **kwargs: float | None) -> None:
        for k, v in kwargs.items():
            if v is None:  # a figure this method's loss does not have
                continue
            self.sums[k] = self.sums.get(k, 0.0) + float(v) * weight
            self.weights[k] = self.weights.get(k, 0.0) + weight

    def add_max(self, **kwargs: float) -> None:
        for k, v in kwargs.items():
            self.maxima[k] = max(self.maxima.get(k, float("-inf")), float(v))

    def reduce(self, acc) -> dict[str, float]:
        """Weighted means over every process's entries, and maxima over processes (collective)."""
        keys = sorted(self.sums)
        sums = [self.sums[k] for k in keys] + [self.weights[k] for k in keys]
        maxima = dict(self.maxima)
        if acc.num_processes > 1:
            t = acc.reduce(torch.tensor(sums, dtype=torch.float64, device=acc.device), reduction="sum")
            sums = t.tolist()
            names = ["onpolicy_logp_diff"]  # the only maximum logged; the same list on every process
            m = torch.tensor([maxima.get(k, 0.0) for k in names], dtype=torch.float64, device=acc.device)
            maxima = dict(zip(names, acc.gather(m[None]).max(dim=0).values.tolist()))
        n = len(keys)
        out = {k: sums[i] / sums[n + i] for i, k in enumerate(keys) if sums[n + i] > 0}
        return {**out, **maxima}


def build_rewards(cfg: Config, weights: dict[str, float] | None = None) -> WeightedReward:
    weights = cfg.reward if weights is None else weights
    rewards = {name: (build_reward(name, **cfg.reward_args.get(name, {})), w) for name, w in weights.items()}
    kind = getattr(adapter_class(cfg.model.pipeline), "media_kind", "image")
    for name, (reward, _) in rewards.items():
        check_reward_modality(name, reward, cfg.model.pipeline, kind)
    return WeightedReward(rewards, timeout_s=cfg.train.reward_timeout_s, report_every_s=cfg.train.reward_report_s)


def check_reward_modality(name: str, reward, pipeline: str, kind: str) -> None:
    """Refuse, in one line, a reward that scores another kind of media than the pipeline makes (an image reward
    on video points to the per-frame ``video`` reward). A remote reward, whose modality its server says, is
    checked by the server on each call instead."""
    from flowrl.reward_models.base import _FunctionReward

    if isinstance(reward, _FunctionReward):  # a plain function declares no media kind: it takes what comes
        return
    cls = reward if isinstance(reward, type) else type(reward)
    declared = getattr(reward, "__dict__", {}).get("modality", getattr(cls, "modality", "image"))
    if isinstance(declared, property) or kind in getattr(cls, "modalities", (declared,)):
        return
    if kind == "audio_video" and declared in ("video", "audio"):  # it reads its own modality of the mapping
        return
    if declared == "image" and kind in ("video", "audio_video"):
        hint = (
            f"; to score each frame with it, use the video reward instead: reward.video=<weight> with "
            f"reward_args.video.reward={name}"
        )
    else:
        hint = f"; choose a reward that scores {kind} (flowrl ls rewards)"
    raise ConfigError(f"reward {name!r} scores {declared} media, but model.pipeline={pipeline} makes {kind}{hint}")


def preflight(cfg: Config) -> None:
    """Input errors that would otherwise surface after the model is built (or never): one line each."""
    from flowrl.benchmarks.cli import check_model_path_or_hint
    from flowrl.reward_models import check_reward_args

    check_model_path_or_hint(cfg.model)  # a benchmark's cached base model not made yet: names the command
    trackers.check_trackers(cfg)  # an unknown tracker or its missing package
    method = build_method(cfg)  # unknown or mistyped method.options
    check_whole_groups(cfg, method, 1)
    kind = getattr(adapter_class(cfg.model.pipeline), "media_kind", "image")
    kinds = seam.needs(method).media
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
    if all(w == 0 for w in cfg.reward.values()):
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


def check_whole_groups(cfg: Config, method, world: int) -> None:
    """A method that explores per prompt group (``Needs.whole_groups``) needs every rollout batch to hold
    whole groups: each process's share of samples and ``sample.batch_size`` multiples of the group size."""
    if not seam.needs(method).whole_groups:
        return
    s = cfg.sample
    share = s.prompts_per_iteration * s.group_size // world
    if s.batch_size % s.group_size or share % s.group_size:
        raise ConfigError(
            f"method {method.name} explores per prompt group, so every rollout batch must hold whole groups: "
            f"sample.batch_size={s.batch_size} and the {share} samples per process must be multiples of "
            f"sample.group_size={s.group_size}"
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
    names |= {f"method/{k}" for k in seam.needs(build_method(cfg)).metrics}
    for name in cfg.reward:
        names |= {f"reward/{name}/mean", f"reward/{name}/std", f"cost/reward_calls/{name}"}
    if cfg.log.monitors:
        names |= monitor_names(getattr(adapter_class(cfg.model.pipeline), "media_kind", "image"))
    if cfg.log.eval_every > 0:
        names |= {"eval/reward/mean", "eval/reward/std", "monitor/heldout_gap"}
        names |= {f"eval/reward/{n}/mean" for n in (cfg.eval_reward or cfg.reward)}
        if cfg.eval_reward:
            names.add("eval/train_reward/mean")
    return names


class Trainer:
    def __init__(self, cfg: Config, accelerator=None):
        from accelerate import Accelerator

        self.cfg = cfg
        self.acc = accelerator or Accelerator(mixed_precision=cfg.train.mixed_precision)
        self._tracking = trackers.NO_TRACKING  # log.trackers, started by train() (flowrl.trackers)
        if self.acc.distributed_type.value == "FSDP" and not self.acc.is_fsdp2:  # before any weight loads
            raise ValueError(
                "accelerate FSDP1 is not supported (it flattens each block into one tensor of one dtype): set "
                "fsdp_version: 2 in the accelerate config, as flowrl/recipes/accelerate/fsdp.yaml does"
            )
        # the same on every process (rank 0's seed, as ever): FSDP processes each keep a piece of one model
        torch.manual_seed(seed_of(cfg.seed, "init", 0))
        self.prompts = load_train_prompts(cfg.data)
        # any negative prompt: every rollout batch's conditioning holds each row's negative (else CFG's is "")
        self._own_negatives = uses_negatives(self.prompts)
        s = cfg.sample
        self.sampler = GroupSampler(
            len(self.prompts),
            s.prompts_per_iteration,
            s.group_size,
            cfg.seed,
            self.acc.num_processes,
            self.acc.process_index,
        )
        self.method = build_method(cfg)  # its typed options are checked before any weights load
        self.needs = seam.needs(self.method)
        check_whole_groups(cfg, self.method, self.acc.num_processes)
        self.out = self._prepare_run_dir()
        self._resume_path = self._resume_checkpoint(cfg.resume) if cfg.resume else None
        self._signals = StopSignals(defer_always=self.acc.num_processes > 1)
        self.already_done = False
        self.adapter = adapter_class(cfg.model.pipeline).from_config(cfg.model, device=self.acc.device, seed=cfg.seed)
        self.reward = build_rewards(cfg)
        self.pairwise = frozenset(n for n, (r, _) in self.reward.rewards.items() if getattr(r, "pairwise", False))
        self.eval_reward = build_rewards(cfg, cfg.eval_reward) if cfg.eval_reward else self.reward
        self.eval_prompts = load_eval_prompts(cfg.data) or self.prompts  # a dataset folder: its test split
        share = s.prompts_per_iteration * s.group_size // self.acc.num_processes
        if self.reward.pairwise and share % s.group_size:
            raise ValueError(
                f"a pairwise reward needs whole groups on each process: {share} samples per process is not a "
                f"multiple of sample.group_size={s.group_size}"
            )
        self._setup_policy()
        self.start_iteration = 0
        self._checked_onpolicy = False
        if cfg.train.onpolicy_check and self.needs.onpolicy_check is not None:
            self._checked_onpolicy = True
            logger.warning(
                "train.onpolicy_check does not apply to method %s: %s, so no on-policy check is made",
                self.method.name,
                self.needs.onpolicy_check,
            )
        self._reward_worker: BackgroundWorker | None = None
        if self._resume_path is not None:
            self._resume(self._resume_path)

    # ------------------------------------------------------------------------------------ set-up
    def _prepare_run_dir(self) -> Path:
        """Check the inputs that a model build would only trip over later, then resolve the run folder
        (``flowrl.runs``: refuse to mix runs, ``overwrite``); all before any weights load."""
        cfg = self.cfg
        preflight(cfg)
        out = runs.run_dir(cfg, broadcast=self._broadcast)
        # the main process decides (another process checking later could see the main one's new run)
        error = None
        self._run_lock = None
        if self.acc.is_main_process:
            try:  # the lock first: a second launch into the folder is refused before anything is read or removed
                runs.make_folder(out)
                self._run_lock = runs.RunLock.acquire(out)
                runs.check_run_dir(out, cfg)
                if cfg.overwrite and runs.holds_run(out):
                    runs.clear_run(out)
                runs.claim(out)
            except ConfigError as exc:
                error = str(exc)
        error = self._broadcast(error)
        if error is not None:
            raise ConfigError(error)
        cfg.output_dir = str(out)  # the resolved folder, as config.yaml records it
        cfg.run_name = None
        return out

    def _broadcast(self, obj):
        if self.acc.num_processes == 1:
            return obj
        from accelerate.utils import broadcast_object_list

        return broadcast_object_list([obj])[0]

    def _resume_checkpoint(self, spec: str) -> Path | None:
        """The checkpoint ``resume=`` names (``latest``: the newest intact one), refusing one whose run
        differs from this config in a setting that changes the math (unless ``resume_allow_changes``)."""
        root = self.out / "checkpoints"
        if spec == "latest":
            path, corrupt = ckpt.latest_intact_checkpoint(root)
            for line in corrupt if path is not None else ():  # with none intact, the error names the first
                logger.warning("resume=latest: skipping %s", line)
            if path is None and not corrupt and (self.out / "config.yaml").is_file():
                rows = read_metrics(self.out / "metrics.jsonl") if (self.out / "metrics.jsonl").is_file() else []
                if rows:  # iterations ran (then the process was killed) but none was saved
                    raise ckpt.CheckpointError(
                        f"resume=latest: the run in {self.out} logged {len(rows)} iteration(s) but saved no checkpoint; "
                        f"start it again with overwrite=true"
                    )
                logger.warning(
                    "resume=latest: the run in %s had completed no iteration; starting at iteration 0", self.out
                )
                return None
            if path is None:
                why = f" ({len(corrupt)} corrupt: {corrupt[0]})" if corrupt else ""
                raise ckpt.CheckpointError(f"resume=latest: no complete checkpoint under {root}{why}")
        else:
            path = Path(spec).expanduser()
        ckpt.verify_checkpoint(path)
        old = ckpt.read_state(path).get("config")
        if old is None and (path.parent.parent / "config.yaml").is_file():  # checkpoints from before v0.1.1
            import yaml

            old = yaml.safe_load((path.parent.parent / "config.yaml").read_text())
        changes = math_changes(old, self.cfg.to_dict()) if isinstance(old, dict) else []
        if changes and not self.cfg.resume_allow_changes:
            shown = ", ".join(changes[:4]) + (f" and {len(changes) - 4} more" if len(changes) > 4 else "")
            raise ConfigError(
                f"resume={spec}: this config differs from the checkpoint's run in {shown}; these change what "
                f"is trained: keep them, or set resume_allow_changes=true"
            )
        for change in changes:
            logger.warning("resume_allow_changes: %s differs from the checkpoint's run", change)
        return path

    def _setup_policy(self) -> None:
        self.policy = Policy(self.cfg, self.adapter, self.acc, self.needs.reference, self.needs.averages)
        # cost/nfe: every transformer forward, counted by its rows (CFG branches are rows)
        self.cost_totals = {"nfe": 0.0, "reward_calls": 0.0}
        self.optimizer_steps = 0
        num_units = len(self._unit_layout(self.cfg.sample.prompts_per_iteration * self.cfg.sample.group_size))
        self.total_optimizer_steps = self.cfg.train.iterations * len(self.method.schedule(num_units))

    # the policy's parts, as the phases read them
    model = property(lambda self: self.policy.model)
    optimizer = property(lambda self: self.policy.optimizer)
    trainable = property(lambda self: self.policy.trainable)
    ref_model = property(lambda self: self.policy.ref_model)
    ema = property(lambda self: self.policy.ema)
    averages = property(lambda self: self.policy.averages)

    def _cost_metrics(self, reward_calls: int, seconds: float) -> dict[str, float]:
        """This iteration's transformer forwards (sample rows) and reward evaluations over all processes,
        their running totals (kept in checkpoints) and forwards per second."""
        local = torch.tensor([float(self.policy.nfe), float(reward_calls)], dtype=torch.float64, device=self.acc.device)
        nfe, calls = (self.acc.reduce(local, reduction="sum") if self.acc.num_processes > 1 else local).tolist()
        self.cost_totals["nfe"] += nfe
        self.cost_totals["reward_calls"] += calls
        return {
            "cost/nfe": nfe,
            "cost/reward_calls": calls,
            "cost/nfe_total": self.cost_totals["nfe"],
            "cost/reward_calls_total": self.cost_totals["reward_calls"],
            "throughput/nfe_per_s": nfe / seconds,
        }

    def _resume(self, path: Path) -> None:
        state = ckpt.load_checkpoint(path, rank=self.acc.process_index)
        ckpt.check_trainable_against(state["trainable"], self.trainable, path)  # a DTensor's shape is the whole one
        with torch.no_grad():
            for name, p in self.trainable.items():
                p.copy_(sharding.shard_like(state["trainable"][name], p))
        ckpt.optimizer_from_tensors(self.optimizer.optimizer, state["optimizer_tensors"], state["optimizer"])
        if self.ema is not None and state["ema"] is not None:
            self.ema.shadow = {k: sharding.shard_like(v, self.ema.shadow[k]) for k, v in state["ema"].items()}
            self.ema.updates = state.get("ema_updates", 0)
        for name, average in self.averages.items():
            saved = state["averages"].get(name)
            if saved is None:
                raise ckpt.CheckpointError(
                    f"resume={str(path)!r}: the checkpoint holds no parameter average {name!r}, "
                    f"which method {self.method.name} keeps"
                )
            average.shadow = {k: sharding.shard_like(v, average.shadow[k]) for k, v in saved.items()}
            average.updates = int(state.get("average_updates", {}).get(name, 0))
        ckpt.set_rng_state(state["rng_tensors"], state["rng"])
        self.optimizer_steps = state.get("optimizer_steps", 0)
        self.method.load_state_dict(state.get("method", {}))
        self.cost_totals = dict(state.get("cost_totals", self.cost_totals))
        self.start_iteration = int(state["iteration"])
        self._checked_onpolicy = True  # weights are no longer the rollout policy of iteration 0
        logger.info("resumed from %s at iteration %d", path, self.start_iteration)

    # ------------------------------------------------------------------------------------ phases
    def collect(
        self, iteration: int, ctx: Context | None = None, turn: seam.Turn | None = None
    ) -> tuple[list[RolloutBatch], torch.Tensor]:
        """Rollout phase: this process's share of the iteration's samples, in rollout batches.

        All randomness is seeded by (seed, iteration, global sample position), so a sample's noise, SDE
        draws and window do not depend on the number of processes, and a resumed run repeats them.
        """
        s = self.cfg.sample
        turn = turn or seam.begin(self.method, iteration)
        samples = self.sampler.iteration(turn.prompts_of)
        prompt_index = samples.prompt_index[samples.local]
        group_ids = samples.group_ids[samples.local]
        noise = self._initial_noise(iteration, samples)
        ctx = ctx or self.context(iteration)
        batches = []
        for start in range(0, len(prompt_index), s.batch_size):
            rows = slice(start, start + s.batch_size)
            items = [self.prompts[i] for i in prompt_index[rows].tolist()]
            prompts = [it.prompt for it in items]
            # "group" tells pairwise rewards which samples to compare (the prompt alone may repeat)
            metadata = [{**it.metadata, "group": g} for it, g in zip(items, group_ids[rows].tolist())]
            cond = (
                self.adapter.encode_prompts(prompts, [it.negative_prompt for it in items])
                if self._own_negatives
                else self.adapter.encode_prompts(prompts)
            )
            batch = PromptBatch(
                samples.local.start + start, prompts, metadata, group_ids[rows], latents.rows(noise, rows), cond
            )
            exp = self.method.explore(ctx, batch)
            media = to_cpu(self.adapter.decode(exp.score["final"]))
            extra = {name: self._decode_many(lat) for name, lat in exp.score.items() if name != "final"}
            clash = set(exp.info) & set(exp.score)
            if clash:
                raise ValueError(f"method {self.method.name}: {sorted(clash)[0]!r} is both scored and an info column")
            # only the states that train are kept until the update
            traj = exp.traj.trained_only()
            if self.cfg.train.offload_states:  # kept on the CPU until the update needs them
                traj = traj.states_to(torch.device("cpu"))
            rb = RolloutBatch(traj, batch.cond, prompts, metadata, media, extra, exp.info)
            if self._overlap_rewards:
                if self._reward_worker is None:
                    self._reward_worker = BackgroundWorker("flowrl-rewards")
                rb.pending = self._reward_worker.submit(self._call_rewards, [rb])
            batches.append(rb)
        return batches, samples.group_ids

    def _decode_many(self, many: Any) -> Any:
        """(B, K, ...) latents -> media of B x K samples on the CPU, sample-major."""
        return to_cpu(self.adapter.decode(latents.tree_map(lambda t: t.flatten(0, 1), many)))

    def context(self, iteration: int) -> Context:
        return Context(self.adapter, self.cfg, self.policy, iteration)

    def _initial_noise(self, iteration: int, samples) -> torch.Tensor:
        """x at sigma = 1 for the local samples; shared within a group if ``same_noise_in_group``.

        Noise is drawn for all N samples of the iteration from one generator and sliced, so members on
        different processes agree; shared noise is drawn once per group.
        """
        cfg, device = self.cfg, self.acc.device
        n_draws = int(samples.group_ids.max()) + 1 if cfg.sample.same_noise_in_group else len(samples.group_ids)
        gen = torch.Generator(device).manual_seed(seed_of(cfg.seed, iteration, "x0"))
        noise = self.adapter.initial_noise(n_draws, gen)
        if cfg.sample.same_noise_in_group:
            noise = latents.rows(noise, samples.group_ids)
        return latents.rows(noise, samples.local)

    @property
    def _overlap_rewards(self) -> bool:
        return self.cfg.train.reward_overlap and not self.reward.pairwise

    def _call_rewards(self, batches: list[RolloutBatch]) -> dict[str, tuple[torch.Tensor, dict[str, torch.Tensor]]]:
        """The reward calls of ``batches``: their final samples and every other scored name, as
        name -> (weighted scores (n K,), each reward's scores). Raises ``RewardError`` (the reward's name)."""
        prompts = [p for b in batches for p in b.prompts]
        metadata = [m for b in batches for m in b.metadata]
        jobs = {"final": (cat_media([b.media for b in batches]), 1)}
        for name in batches[0].extra:
            jobs[name] = (cat_media([b.extra[name] for b in batches]), self._extra_k(batches[0], name))
        out = {}
        for name, (media, k) in jobs.items():
            result = self.reward(media, [p for p in prompts for _ in range(k)], [m for m in metadata for _ in range(k)])
            out[name] = (
                result.scores,
                {c: torch.as_tensor(v) for c, v in result.details["components"].items()},
                result.details.get("calls", {}),
            )
        return out

    def score(self, batches: list[RolloutBatch]) -> Scores | None:
        """Reward phase: the final samples and every other latent the method asked to score, gathered
        over processes in global order.

        A reward that raises, hangs past ``train.reward_timeout_s`` or returns non-finite scores stops
        the run (``train.on_reward_error=stop``, the error names the reward) or skips the iteration
        (``skip``: returns None). Processes agree on the outcome before any gather.
        """
        prompts = [p for b in batches for p in b.prompts]
        names = ["final", *batches[0].extra]
        parts, error = [], None
        try:
            if self._overlap_rewards:  # each batch was submitted when it was sampled, in order
                parts = [b.pending.result() if b.pending is not None else self._call_rewards([b]) for b in batches]
            elif self.reward.pairwise:  # whole groups in one call
                parts = [self._call_rewards(batches)]
            else:
                parts = [self._call_rewards([b]) for b in batches]
        except RewardError as exc:
            error = exc
            # the batches still scoring in the background finish first (each call is bounded by the
            # timeout), so that no reward runs while the next phase or an evaluation calls it
            futures_wait([b.pending for b in batches if b.pending is not None])
        outputs = (
            {
                name: (
                    torch.cat([part[name][0] for part in parts]),
                    {c: torch.cat([part[name][1][c] for part in parts]) for c in parts[0][name][1]},
                )
                for name in names
            }
            if error is None
            else {}
        )
        ks = {"final": 1, **{name: self._extra_k(batches[0], name) for name in batches[0].extra}}
        device = self.acc.device
        failed = self.acc.gather(torch.tensor([error is not None], device=device)).any()
        if bool(failed):
            if self.cfg.train.on_reward_error == "skip":
                logger.warning("skipping the iteration: %s", error or "a reward failed on another process")
                return None
            raise error or RewardError("a reward failed on another process")

        def gather(t: torch.Tensor) -> torch.Tensor:
            return self.acc.gather(t.to(device)).cpu()

        final_scores, final_components = outputs["final"]
        columns = {"final": gather(final_scores)}  # (N,)
        for name in names[1:]:
            k = ks[name]
            scores, comps = outputs[name]
            columns[name] = gather(scores.view(len(prompts), k))  # (N, K)
            for comp, values in comps.items():  # each reward's own, unweighted
                columns[f"{name}/{comp}"] = gather(values.view(len(prompts), k))
        for name in batches[0].info:
            columns[name] = gather(torch.cat([b.info[name] for b in batches]))
        components = {k: gather(v) for k, v in final_components.items()}
        columns.update({f"final/{k}": v for k, v in components.items()})
        # this process's evaluations: a pointwise reward's samples, a pairwise one's comparisons
        by_reward = {
            r: float(sum(part[name][2].get(r, 0) for part in parts for name in names)) for r in self.reward.rewards
        }
        return Scores(columns["final"], components, columns, int(sum(by_reward.values())), by_reward)

    def update(
        self,
        batches: list[RolloutBatch],
        adv_all: torch.Tensor,
        first: bool,
        ctx: Context | None = None,
        keep_rows: torch.Tensor | None = None,
        turn: seam.Turn | None = None,
    ) -> dict[str, float]:
        """Update phase: the method's loss over every trained transition of every kept sample.

        ``adv_all``: (N,) or (N, T) advantages of all processes' samples, in global order. Every rollout
        batch of the iteration (over all processes, in rank order) is one training unit; the method's
        ``schedule`` says which (unit, transition) pairs, or (unit, transition, row) triples, each optimizer
        step trains (default: step s trains the units q with q % S == s; AV-GRPO: one step per sample and
        transition), so each step sees the same global samples whatever the number of processes (given
        equal batch boundaries, which equal results need anyway). Every step runs at the rate the method's
        ``learning_rate`` gives (default: ``train.lr_schedule`` over the run's optimizer steps). Rows whose
        advantage is 0 at every transition a step trains carry no signal and are dropped; every kept sample weighs
        the same in its step's gradient (1 / the step's kept samples), ragged batches included; ``keep_rows``
        (the credit's ``Advantages.keep``) names the rows every step trains instead. ``turn.trains`` names the
        parameters that step (default: the method's ``begin``).
        Processes run the same number of forward/backward passes (zero-weight passes where one holds
        fewer units) so that DDP and FSDP collectives stay in step.
        """
        t, world = self.cfg.train, self.acc.num_processes
        ctx = ctx or self.context(0)
        trains = (turn or seam.begin(self.method, 0)).trains
        layout = self._unit_layout(len(adv_all))  # (rank, global start, rows) per unit, in rank order
        local = [q for q, (rank, _, _) in enumerate(layout) if rank == self.acc.process_index]
        trained = self._trained_per_unit(batches, local)  # unit -> its trained transitions
        stats = UpdateStats()
        measured = False
        # DDP (without find_unused_parameters) waits in every backward for a gradient of each parameter it wraps: the
        # ones a method does not train now (AV-GRPO's other tower, which its loss may not reach) join the loss with
        # weight 0, and their gradient is dropped before the optimizer step as on one process
        ddp = isinstance(self.model, torch.nn.parallel.DistributedDataParallel) and trains is not None
        untrained = [p for n, p in self.trainable.items() if not trains(n)] if ddp else []
        for entries in self.method.schedule(len(layout)):
            named: dict[tuple[int, int | None], torch.Tensor | None] = {}  # (unit, k) -> its rows named, None: all
            for q, k, *row in entries:
                rows = layout[q][2]
                if row and row[0] >= rows:
                    continue  # a row past the end of a shorter (last) unit
                mask = None if not row else torch.arange(rows) == row[0]
                prev = named.get((q, k), mask)
                named[(q, k)] = None if prev is None or mask is None else prev | mask
            work = []  # (unit, its transitions this step, which of its rows train)
            for (q, k), mask in named.items():
                js = trained[q] if k is None else [trained[q][k]]
                _, start, rows = layout[q]
                adv = adv_all[start : start + rows]
                keep = (adv != 0) if adv.ndim == 1 else (adv[:, js] != 0).any(dim=1)
                if keep_rows is not None:
                    keep = keep_rows[start : start + rows].to(keep.device)
                if mask is not None:
                    keep = keep & mask.to(keep.device)
                work.append((q, js, keep))
            step_kept = sum(int(keep.sum()) for _, _, keep in work)
            if step_kept == 0:
                continue  # no sample of this step carries signal, on any process
            busy = [(q, js, keep) for q, js, keep in work if keep.any()]
            passes = max(sum(1 for q, _, _ in busy if layout[q][0] == r) for r in range(world))
            units = [
                (self._kept_unit(batches[local.index(q)], adv_all, layout[q], keep), js)
                for q, js, keep in busy
                if q in local
            ]
            if len(units) < passes:  # padding: one real row, weight 0, as many transitions as a busy unit
                pad, adv_pad, _ = self._kept_unit(batches[0], adv_all, layout[local[0]], None, rows=1)
                units += [((pad, adv_pad, 0.0), trained[local[0]][: len(busy[0][1])])] * (passes - len(units))
            for u, ((b, adv, weight_rows), js) in enumerate(units):
                scale = weight_rows / step_kept * world  # DDP/FSDP average gradients over processes
                measure = not measured and weight_rows > 0
                self._update_unit(ctx, b, adv, js, scale, u == passes - 1, stats, measure, untrained)
                if not measured:
                    measured = True
                    if first:
                        self._check_onpolicy(stats)
            if trains is not None:  # this phase's frozen set: no gradient, so AdamW leaves it be
                for name, p in self.trainable.items():
                    if not trains(name):
                        p.grad = None
            grad_norm = self.acc.clip_grad_norm_(list(self.trainable.values()), t.max_grad_norm)
            grad_norm = (
                float("nan") if grad_norm is None else sharding.as_float(grad_norm)
            )  # None: DeepSpeed's first step
            scheduled = t.learning_rate * lr_factor(
                self.optimizer_steps, self.total_optimizer_steps, t.lr_schedule, t.lr_warmup_steps, t.lr_min_ratio
            )
            lr = self.method.learning_rate(scheduled, self.optimizer_steps)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.optimizer_steps += 1
            stats.add(grad_norm=float(grad_norm), lr=lr)
            if self.ema is not None and self.optimizer_steps % t.ema_every == 0:
                self.ema.update(self.trainable)
        for average in self.averages.values():
            average.update(self.trainable)
        if seam.end(
            self.method
        ).reset_optimizer:  # the method starts afresh (AV-GRPO's phase switch): no moments carried
            getattr(self.optimizer, "optimizer", self.optimizer).state.clear()
        out = stats.reduce(self.acc)
        keep_all = (adv_all != 0) if adv_all.ndim == 1 else (adv_all != 0).any(dim=1)
        out["kept_frac"] = float(keep_all.float().mean())
        return out

    def _trained_per_unit(self, batches: list[RolloutBatch], local: list[int]) -> list[list[int]]:
        """Every unit's trained transitions (plan indices), the same lists on every process: a process
        knows only its own units' plans, so they are gathered (one small list per process)."""
        mine = [list(batches[local.index(q)].traj.trained_indices) for q in local]
        if self.acc.num_processes == 1:
            return mine
        from accelerate.utils import gather_object

        return [js for part in gather_object([mine]) for js in part]

    def _unit_layout(self, n: int) -> list[tuple[int, int, int]]:
        """(rank, global start, rows) of every rollout batch of an iteration of ``n`` samples, the batches
        of rank 0 first (``collect`` cuts each process's share into ``sample.batch_size`` rows)."""
        world, b = self.acc.num_processes, self.cfg.sample.batch_size
        share = n // world
        return [(r, r * share + s, min(b, share - s)) for r in range(world) for s in range(0, share, b)]

    @staticmethod
    def _kept_unit(
        b: RolloutBatch,
        adv_all: torch.Tensor,
        where: tuple[int, int, int],
        keep: torch.Tensor | None,
        rows: int | None = None,
    ) -> tuple[RolloutBatch, torch.Tensor, float]:
        """The unit's rows that train (``keep``, (rows,) over the unit's rows), or its first ``rows`` rows;
        with their advantages and count."""
        _, start, n = where
        adv = adv_all[start : start + n]
        idx = keep.nonzero().flatten() if keep is not None else torch.arange(rows)
        if len(idx) < n:
            b = RolloutBatch(
                b.traj.select(idx),
                {k: v[idx.to(v.device)] for k, v in b.cond.items()},
                [b.prompts[i] for i in idx.tolist()],
                [b.metadata[i] for i in idx.tolist()],
                select_media(b.media, idx),
            )
            adv = adv[idx]
        return b, adv, float(len(idx))

    def _update_unit(
        self,
        ctx: Context,
        b: RolloutBatch,
        adv: torch.Tensor,
        transitions: list[int],
        scale: float,
        sync: bool,
        stats: UpdateStats,
        measure: bool,
        untrained: list[torch.nn.Parameter] = (),
    ) -> None:
        """Loss and backward for ``transitions`` of one unit, their mean loss weighted by ``scale``
        (0: a padding pass that only keeps the processes' collectives in step). ``measure``: this is
        the iteration's first unit, still on-policy, so log the log-prob gap. ``untrained``: parameters the
        method does not train now, joined to the loss with weight 0 under DDP (see ``update``).

        With a ``row_mask`` (a per-row subset of the transitions) each transition forwards only the rows
        that train it, and every trained (row, transition) pair weighs the same; a transition no row
        trains still makes one zero-weight pass, so processes run the same passes."""
        traj = b.traj.states_to(self.acc.device) if self.cfg.train.offload_states else b.traj
        max_diff = None
        mask = traj.row_mask
        pairs = int(mask[:, transitions].sum()) if mask is not None else 0
        for k, j in enumerate(transitions):
            last = sync and k == len(transitions) - 1
            sync_ctx = nullcontext() if last or self.acc.num_processes == 1 else self.acc.no_sync(self.model)
            adv_j = (adv if adv.ndim == 1 else adv[:, j]).to(self.acc.device)
            unit, cond, weight = traj, b.cond, scale / len(transitions)
            rows = float(len(traj)) if scale > 0 else 0.0  # a padding pass adds nothing to the statistics
            if mask is not None:
                idx = mask[:, j].nonzero().flatten()
                weight = scale * len(idx) / pairs if len(idx) and pairs else 0.0
                idx = idx if len(idx) else torch.zeros(1, dtype=torch.long)
                unit, adv_j = traj.select(idx), adv_j[idx.to(adv_j.device)]
                cond = {key: v.index_select(0, idx.to(v.device)) for key, v in b.cond.items()}
                rows = float(len(idx)) if weight > 0 else 0.0
            with sync_ctx:
                tl = self.method.transition_loss(ctx, unit, j, cond, adv_j)
                loss = tl.loss * weight
                if untrained:  # weight 0: DDP's reducer hears from every parameter (see ``update``)
                    loss = loss + 0.0 * sum(p.sum() for p in untrained)
                if self.policy.deepspeed:  # DeepSpeed steps the optimizer inside the backward it is told is last
                    self.acc.gradient_state._set_sync_gradients(last)
                self.acc.backward(loss)
            if tl.logp_gap is not None:
                max_diff = max(max_diff or 0.0, tl.logp_gap)
            stats.add(
                rows,
                loss=tl.loss.item(),
                pg_loss=tl.policy_loss,
                kl=tl.kl,
                approx_kl=tl.approx_kl,
                clip_frac=tl.clip_frac,
                ratio_mean=tl.ratio_mean,
            )
        if measure and max_diff is not None:  # None: the method's loss has no rollout log-prob to match
            stats.add_max(onpolicy_logp_diff=max_diff)

    def _check_onpolicy(self, stats: UpdateStats) -> None:
        """The run's first update: stop if the recomputed log-prob is not the rollout's (on any process)."""
        if not self.cfg.train.onpolicy_check or self._checked_onpolicy:
            return
        self._checked_onpolicy = True
        diff = stats.maxima.get("onpolicy_logp_diff", 0.0)
        if self.acc.num_processes > 1:
            diff = float(self.acc.gather(torch.tensor([diff], device=self.acc.device)).max())
        if diff > self.cfg.train.onpolicy_tol:
            raise OnPolicyError(
                f"step-0 on-policy check failed: recomputed log-prob differs from the rollout's by "
                f"{diff:.3g} > train.onpolicy_tol={self.cfg.train.onpolicy_tol:g}; the training "
                "forward is not the rollout's (precision/autocast mismatch, a different schedule or "
                "batch, or dropout left on)"
            )

    # ------------------------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self, iteration: int) -> dict[str, float]:
        """ODE samples (eval steps and guidance, EMA weights) of held-out prompts, scored by ``eval_reward``.

        The prompts and initial noise are the same at every evaluation, so curves compare like with like.
        Prompts are dealt to processes in equal shares (padded by repeating the last) and scores gathered.
        """
        cfg, log = self.cfg, self.cfg.log
        items = self.eval_prompts[: log.eval_num_prompts]
        items = [it for it in items for _ in range(log.eval_images_per_prompt)]
        world, rank = self.acc.num_processes, self.acc.process_index
        n = len(items)
        items = items + items[-1:] * ((-n) % world)
        share = len(items) // world
        mine = items[rank * share : (rank + 1) * share]
        gen = torch.Generator(self.acc.device).manual_seed(seed_of(cfg.seed, "eval"))
        noise = latents.rows(self.adapter.initial_noise(len(items), gen), slice(rank * share, (rank + 1) * share))
        with self.policy.weights("ema"):
            media = sample_images(self.adapter, [it.prompt for it in mine], noise, cfg.sample.eval_num_steps,
                                  cfg.sample.eval_guidance_scale, cfg.sample.batch_size, model=self.model,
                                  negative_prompts=[it.negative_prompt for it in mine])  # fmt: skip
        out = self.eval_reward(media, [it.prompt for it in mine], [dict(it.metadata) for it in mine])
        device = self.acc.device
        total = self.acc.gather(out.scores.to(device)).cpu()[:n]
        metrics = {"eval/reward/mean": float(total.mean()), "eval/reward/std": float(total.std(unbiased=False))}
        if self.eval_reward is not self.reward:  # the trained reward on held-out prompts, for the gap
            trained = self.reward(media, [it.prompt for it in mine], [dict(it.metadata) for it in mine])
            metrics["eval/train_reward/mean"] = float(self.acc.gather(trained.scores.to(device)).cpu()[:n].mean())
        for name, v in out.details["components"].items():
            metrics[f"eval/reward/{name}/mean"] = float(self.acc.gather(v.to(device)).cpu()[:n].mean())
        if self.acc.is_main_process:
            save_media(media, self.out / "samples" / f"eval-{iteration:06d}", max_samples=log.num_sample_images)
        return metrics

    def _due_for_eval(self, iteration: int) -> bool:
        """Before iterations 0, k, 2k, ... (the policy as trained so far); the end is evaluated apart."""
        every = self.cfg.log.eval_every
        return every > 0 and iteration % every == 0

    def _timed_eval(self, iteration: int) -> dict[str, float]:
        metrics: dict[str, float] = {}
        with timed(metrics, "eval"):
            metrics.update(self.evaluate(iteration))
        return metrics

    # ------------------------------------------------------------------------------------ one iteration
    def step(self, iteration: int) -> dict[str, float]:
        metrics: dict[str, float] = {"iteration": iteration}
        ctx = self.context(iteration)
        turn = seam.begin(self.method, iteration)
        self.policy.nfe = 0
        with timed(metrics, "iteration"):
            with timed(metrics, "rollout"):
                batches, group_ids = self.collect(iteration, ctx, turn)
            with timed(metrics, "reward"):
                scored = self.score(batches)
            if scored is None:
                metrics["skipped"] = 1.0
                return metrics
            scores, comps = scored.final, scored.components
            with timed(metrics, "advantage"):
                adv = seam.credit(self.method, seam.RewardTable(scored.columns, group_ids, self.pairwise))
                adv_all = adv.values
            metrics.update({f"method/{k}": v for k, v in adv.metrics.items()})
            # the weights change from here on: a signal waits for the end of the iteration (see `train`)
            self._signals.hold()
            steps_before = self.optimizer_steps
            with timed(metrics, "update"):
                upd = self.update(
                    batches, adv_all, first=iteration == self.start_iteration, ctx=ctx, keep_rows=adv.keep, turn=turn
                )
            metrics["cost/optimizer_steps"] = float(self.optimizer_steps - steps_before)
        metrics.update(self._reward_metrics(scores, comps, group_ids))
        if self.cfg.log.monitors:
            local_groups = torch.cat([b.traj.prompt_ids for b in batches])
            metrics.update(self._over_processes(media_monitors(self._last_media_of(batches), local_groups), "mean"))
        metrics["throughput/images_per_s"] = len(group_ids) / metrics["timing_s/iteration"]
        metrics.update(self._cost_metrics(scored.calls, metrics["timing_s/iteration"]))
        if len(scored.calls_by_reward) > 1 or self.reward.pairwise:  # each reward's own count
            by_reward = self._over_processes(scored.calls_by_reward, "sum")
            metrics.update({f"cost/reward_calls/{r}": v for r, v in by_reward.items()})
        metrics["memory/peak_gib"] = _peak_memory_gib(self.acc.device)
        metrics.update({f"policy/{k}": v for k, v in upd.items() if k != "kept_frac"})
        metrics["adv/kept_frac"] = upd["kept_frac"]
        metrics["adv/abs_mean"] = float(adv_all.abs().mean())
        self._last_media = self._last_media_of(batches)
        return metrics

    @staticmethod
    def _last_media_of(batches: list[RolloutBatch]) -> Any:
        return cat_media([b.media for b in batches])

    @staticmethod
    def _extra_k(b: RolloutBatch, name: str) -> int:
        """K of the extra scored name ``name``: its samples per rollout sample."""
        return num_samples(b.extra[name]) // len(b.prompts)

    def _over_processes(self, values: dict[str, float], reduction: str) -> dict[str, float]:
        """``values`` reduced over processes ("mean": per-process statistics of equal shares; "sum": counts)."""
        if self.acc.num_processes == 1 or not values:
            return values
        keys = sorted(values)
        t = torch.tensor([values[k] for k in keys], dtype=torch.float64, device=self.acc.device)
        return dict(zip(keys, self.acc.reduce(t, reduction=reduction).tolist()))

    @staticmethod
    def _reward_metrics(scores, comps, group_ids) -> dict[str, float]:
        m = {"reward/mean": float(scores.mean()), "reward/std": float(scores.std(unbiased=False))}
        for name, v in comps.items():
            m[f"reward/{name}/mean"] = float(v.mean())
            m[f"reward/{name}/std"] = float(v.std(unbiased=False))
        m["reward/zero_std_ratio"] = zero_std_ratio(scores, group_ids)
        return m

    # ------------------------------------------------------------------------------------ run
    def train(self) -> list[dict]:
        """Run ``train.iterations`` iterations (from the resumed one); returns the metrics written.

        SIGINT and SIGTERM (``flowrl.interrupts``) end the run with every completed iteration saved and
        ``Interrupted`` saying where: a signal before an iteration's update stops at once, one during the
        update lets the iteration finish first; a second signal stops at once, abandoning the iteration.
        """
        cfg, main = self.cfg, self.acc.is_main_process
        if self.start_iteration >= cfg.train.iterations:
            return self._already_done()
        if main:
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / "config.yaml").write_text(dump_config(cfg))
        writer = MetricsWriter(self.out / "metrics.jsonl", self.start_iteration) if main else None
        history = []
        bar = _progress(range(self.start_iteration, cfg.train.iterations), disable=not main)
        iteration = self.start_iteration
        self._last_saved = self.start_iteration
        self._flat_iterations = 0
        self._rng_at_start = ckpt.rng_state()  # what a checkpoint of the completed iterations holds
        agree = self._any_process if self.acc.num_processes > 1 else None
        with self._signals, trackers.session(self):  # trackers are closed on every exit, interrupts included
            try:
                if self.start_iteration == 0:
                    self._prepare_method()
                for iteration in bar:
                    evaluation = self._timed_eval(iteration) if self._due_for_eval(iteration) else {}
                    metrics = {**self.step(iteration), **evaluation}
                    self._signals.hold()  # held from the update on (`step`); a skipped iteration holds here
                    if "eval/reward/mean" in metrics and "reward/mean" in metrics:
                        # trained-on prompts minus held-out prompts, both under the training reward
                        held_out = metrics.get("eval/train_reward/mean", metrics["eval/reward/mean"])
                        metrics["monitor/heldout_gap"] = metrics["reward/mean"] - held_out
                    history.append(metrics)
                    if main:
                        writer.write(metrics)
                        self._tracking.log(metrics, step=iteration)
                        bar.set_postfix(
                            reward=f"{metrics.get('reward/mean', float('nan')):.4f}",
                            kl=f"{metrics.get('policy/kl', 0):.2g}",
                        )
                        if "skipped" not in metrics:
                            self._maybe_save_samples(iteration)
                    done = iteration + 1
                    stop, flat = self._stop_rule_hit(metrics), self._flat_for_too_long(metrics)
                    if done % cfg.log.save_every == 0 or done == cfg.train.iterations or stop or flat:
                        self.save(done)
                    if self._signals.release(agree):
                        self._signals.hold()
                        if done > self._last_saved:
                            self.save(done)
                        raise Interrupted(self._stopped_line(self._signals.requested))
                    self._rng_at_start = ckpt.rng_state()
                    if flat:
                        raise NoSignalError(flat)
                    if stop:
                        logger.warning("early stop after iteration %d: %s", iteration, stop)
                        break
                if cfg.log.eval_every > 0:
                    history.append(self._final_evaluation(iteration + 1, writer))
            except (Interrupted, NoSignalError):
                raise
            except (KeyboardInterrupt, RewardError) as exc:
                self._stop_after(exc, iteration)
        if main and (self.out / "metrics.jsonl").exists():
            plot_reward_curve(read_metrics(self.out / "metrics.jsonl"), self.out / "reward_curve.png")
        if self._run_lock is not None:  # an interrupted run keeps it until the process (or this trainer) ends
            self._run_lock.release()
        return history

    def _prepare_method(self) -> None:
        """The method's set-up before the first iteration (``Method.prepare``), its state written to
        ``method_state.json``; its forwards and reward calls count in the cost totals."""
        self.policy.nfe, self._prepare_calls = 0, 0
        figures = self.method.prepare(self.context(-1), self._sample_round)
        if not figures:
            return
        cost = self._cost_metrics(self._prepare_calls, 1.0)
        logger.warning(
            "%s prepared: %s (%d forwards, %d reward calls)",
            self.method.name,
            ", ".join(f"{k} {v:.4g}" for k, v in figures.items()),
            cost["cost/nfe"],
            cost["cost/reward_calls"],
        )
        if self.acc.is_main_process:
            import json

            (self.out / "method_state.json").write_text(json.dumps(self.method.state_dict(), indent=1))

    def _sample_round(self, k: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Round k of a method's preparation: fresh prompts and draws (iteration index -1 - k, which no
        training iteration uses), explored and scored, no update."""
        iteration = -1 - k
        batches, group_ids = self.collect(iteration, self.context(iteration))
        scored = self.score(batches)
        if scored is None:
            raise RewardError("a reward failed while the method prepared; nothing to skip to")
        self._prepare_calls += scored.calls
        return scored.columns, group_ids

    def _stop_after(self, exc: BaseException, iteration: int) -> None:
        """A signal or a reward failure in iteration ``iteration``: save the completed iterations unless
        the iteration's update had begun (then only a second signal gets here: it is abandoned)."""
        signal_name = (str(exc) or "SIGINT") if isinstance(exc, KeyboardInterrupt) else None
        if self._signals.held:
            raise Interrupted(
                f"stopped at once by a {signal_name}: abandoned iteration {iteration} after its update began; "
                f"{self._saved_phrase()}"
            ) from None
        if iteration > self._last_saved:
            logger.warning(
                "stopping (%s): saving the %d completed iterations first", signal_name or "reward", iteration
            )
            ckpt.set_rng_state(*self._rng_at_start)  # the RNG as the completed iterations left it
            self._signals.hold()
            try:
                self.save(iteration)
            except KeyboardInterrupt:
                raise Interrupted(
                    f"stopped at once by a second signal: abandoned the checkpoint of iteration "
                    f"{iteration} being written; {self._saved_phrase()}"
                ) from None
            self._signals.release()
        if signal_name is not None:
            raise Interrupted(self._stopped_line(signal_name)) from None
        raise exc

    def _saved_phrase(self) -> str:
        latest = ckpt.latest_checkpoint(self.out / "checkpoints")
        if latest is None:
            return "no checkpoint was saved yet"
        return f"the newest checkpoint is {latest}"

    def _stopped_line(self, signal_name: str | None) -> str:
        done = self._last_saved
        what = (
            f"{done} completed iterations are saved ({self._saved_phrase()})" if done else "no iteration had completed"
        )
        return f"interrupted ({signal_name}): {what}; continue with the same command and resume=latest"

    def _any_process(self, flag: bool) -> bool:
        t = torch.tensor([float(flag)], device=self.acc.device)
        return bool(self.acc.reduce(t, reduction="sum").item() > 0)

    def _flat_for_too_long(self, metrics: dict[str, float]) -> str | None:
        """Count iterations in a row that kept no sample (every group's reward flat): warn at the first,
        give the reason to stop at ``train.max_flat_iterations``."""
        if "skipped" in metrics:
            return None
        if metrics["adv/kept_frac"] > 0:
            self._flat_iterations = 0
            return None
        self._flat_iterations += 1
        limit = self.cfg.train.max_flat_iterations
        if self._flat_iterations == 1:
            logger.warning(
                "iteration %d learned nothing: every group's reward was flat (reward/std %.3g), so every advantage "
                "is 0; the run stops after %d such iterations in a row (train.max_flat_iterations)",
                metrics["iteration"],
                metrics.get("reward/std", float("nan")),
                limit,
            )
        if self._flat_iterations < limit:
            return None
        return (
            f"the reward was flat within every group for {limit} iterations in a row (train.max_flat_iterations), "
            f"so nothing was learned: check the reward's weights and that it varies between samples; "
            f"the completed iterations are saved"
        )

    def _already_done(self) -> list[dict]:
        """A resumed run that had finished: say so, and add the final evaluation if it was interrupted."""
        rows = read_metrics(self.out / "metrics.jsonl") if (self.out / "metrics.jsonl").exists() else []
        n = self.cfg.train.iterations
        history = []
        if self.cfg.log.eval_every > 0 and not any(r.get("iteration") == n and "reward/mean" not in r for r in rows):
            writer = MetricsWriter(self.out / "metrics.jsonl", n) if self.acc.is_main_process else None
            history.append(self._final_evaluation(n, writer))
        self.already_done = True
        return history

    def _final_evaluation(self, done: int, writer: MetricsWriter | None) -> dict[str, float]:
        """The trained policy: one more row after the last iteration, with evaluation metrics only."""
        final = {"iteration": done, **self._timed_eval(done)}
        if writer is not None:
            writer.write(final)
            self._tracking.log(final, step=done)
        return final

    def _stop_rule_hit(self, metrics: dict[str, float]) -> str | None:
        """The first ``log.stop_if`` rule that this iteration's metrics satisfy (same on every process)."""
        for rule in self.cfg.log.stop_if:
            name, op, value = parse_stop_rule(rule)
            if name in metrics and (metrics[name] < value if op == "<" else metrics[name] > value):
                return f"{rule} ({name} = {metrics[name]:.4g})"
        return None

    def _maybe_save_samples(self, iteration: int) -> None:
        """Rollout grids count like checkpoints: ``samples/iter-N.png`` holds the rollouts of the N-th
        iteration, whose end ``checkpoints/iter-N`` saves (the first, every ``log.sample_every``, the last)."""
        log, done = self.cfg.log, iteration + 1
        if done == 1 or done % log.sample_every == 0 or done == self.cfg.train.iterations:
            path = save_media(
                self._last_media, self.out / "samples" / f"iter-{done:06d}", max_samples=log.num_sample_images
            )[0]
            self._tracking.log_image(path, step=iteration)  # at the step of the metrics of these rollouts

    def save(self, iterations_done: int) -> None:
        """Checkpoint (rank 0 writes, every rank waits) and export the LoRA in diffusers format."""
        self._last_saved = iterations_done
        root = self.out / "checkpoints"
        tmp = root / (ckpt.checkpoint_name(iterations_done) + ".tmp")
        self.acc.wait_for_everyone()
        if self.acc.is_main_process:
            ckpt.begin_checkpoint(root, iterations_done)
        self.acc.wait_for_everyone()
        ckpt.write_rng(tmp, self.acc.process_index)  # every process's RNG
        self.acc.wait_for_everyone()
        # whole tensors, gathered from FSDP shards by every process and kept by the main one
        main = self.acc.is_main_process
        trainable = sharding.whole_on_main(self.trainable, main)
        optimizer_state = ckpt.optimizer_to_tensors(self.optimizer.optimizer, main)
        ema = sharding.whole_on_main(self.ema.shadow, main) if self.ema else None
        averages = {name: sharding.whole_on_main(a.shadow, main) for name, a in self.averages.items()}
        if main:
            ckpt.finish_checkpoint(
                tmp,
                iterations_done,
                trainable,
                optimizer_state,
                ema=ema,
                averages=averages,
                extra={
                    "optimizer_steps": self.optimizer_steps,
                    "ema_updates": self.ema.updates if self.ema else 0,
                    "average_updates": {name: a.updates for name, a in self.averages.items()},
                    "processes": self.acc.num_processes,
                    "config": redact_secrets(self.cfg.to_dict()),
                    "method": self.method.state_dict(),
                    "cost_totals": self.cost_totals,
                },
            )
            ckpt.prune_checkpoints(root, self.cfg.log.keep_last)
        del trainable, optimizer_state, ema, averages
        self.export(self.out)
        if main:
            runs.share_with_group(self.out)
        self.acc.wait_for_everyone()

    def export(self, run_dir: Path) -> None:
        """The trained weights in diffusers format (``Policy.export``)."""
        self.policy.export(run_dir)


def _peak_memory_gib(device: torch.device) -> float:
    """Peak accelerator memory since the last call (CUDA), else the process's peak resident memory."""
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        return peak / 2**30
    # VmHWM is this process's own high-water mark; ru_maxrss survives exec, so a process started from a
    # large parent (pytest, a launcher) would report the parent's peak
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 2**20  # kB
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def _progress(iterable, disable: bool):
    from tqdm.auto import tqdm

    # disable=None: no bar when stderr is not a terminal (logs of batch jobs, a piped error line)
    return tqdm(iterable, desc="flowrl", unit="it", disable=True if disable else None, dynamic_ncols=True)

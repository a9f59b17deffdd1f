"""The one trainer: the run loop over iterations, each of named, timed phases

    rollout -> reward -> advantage -> update -> log/save

read top to bottom in ``Trainer``: ``__init__`` wires the rooms, ``train`` runs the loop, ``step`` is one
iteration and ``collect`` its rollout phase. The rooms: ``flowrl.policy`` (the trained transformer, its
reference, EMA and averages), ``flowrl.scoring`` (the reward phase), ``flowrl.update`` (the update phase),
``flowrl.evaluate``, ``flowrl.preflight``, ``flowrl.runs`` and ``flowrl.checkpoint`` (the run folder, resume and
checkpoints). A method (``flowrl.methods``) is read through ``flowrl.methods.seam``; the pipeline adapter
(``flowrl.pipelines``) owns the model; rewards come from ``flowrl.reward_models``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch

from flowrl import checkpoint as ckpt
from flowrl import latents, runs, trackers
from flowrl.config import Config, dump_config, redact_secrets
from flowrl.data import (
    SOURCE_IMAGES_KEY,
    GroupSampler,
    check_source_images,
    item_images,
    load_eval_prompts,
    load_train_prompts,
    uses_negatives,
    with_source_images,
)
from flowrl.evaluate import Evaluation
from flowrl.interrupts import Interrupted, StopSignals
from flowrl.logs import MetricsWriter, peak_memory_gib, plot_reward_curve, progress, read_metrics, stop_rule_hit, timed
from flowrl.media import cat_media, media_monitors, save_media, to_cpu
from flowrl.media_data import as_targets
from flowrl.mesh import Mesh
from flowrl.methods import build_method, seam
from flowrl.methods.base import PromptBatch
from flowrl.methods.context import Context
from flowrl.pipelines.base import adapter_class, source_images_of
from flowrl.pipelines.kit.images import ImageCache
from flowrl.policy import Policy
from flowrl.preflight import check_whole_groups, preflight
from flowrl.resolve import resolve
from flowrl.reward_models import RewardError
from flowrl.reward_models.differentiable import GradRewardSum
from flowrl.rollout import RolloutBatch, encode_rows
from flowrl.scoring import Scoring, build_rewards, reward_metrics
from flowrl.seeds import seed_of
from flowrl.update import Updater

logger = logging.getLogger(__name__)


class NoSignalError(RuntimeError):
    """Too many iterations in a row in which every group's reward was flat: nothing can be learned."""


def check_launch(acc: Any, cfg: Config) -> None:
    """The launch's strategy, refused in one line where flowrl cannot train under it."""
    if acc.distributed_type.value == "FSDP" and not acc.is_fsdp2:
        raise ValueError(
            "accelerate FSDP1 is not supported (it flattens each block into one tensor of one dtype): set "
            "fsdp_version: 2 in the accelerate config, as flowrl/recipes/accelerate/fsdp.yaml does"
        )
    if acc.distributed_type.value == "FSDP" and cfg.model.base_quantization != "none":
        raise ValueError(
            f"model.base_quantization={cfg.model.base_quantization}: FSDP2 cannot shard torchao's quantized "
            "weights; launch with DDP (flowrl/recipes/accelerate/ddp.yaml), or set it to none"
        )


def add_heldout_gap(metrics: dict[str, float]) -> None:
    """``monitor/heldout_gap``: trained-on prompts minus held-out prompts, both under the training reward."""
    if "eval/reward/mean" in metrics and "reward/mean" in metrics:
        held_out = metrics.get("eval/train_reward/mean", metrics["eval/reward/mean"])
        metrics["monitor/heldout_gap"] = metrics["reward/mean"] - held_out


class Trainer:
    """One training run of ``cfg``: ``train()`` runs ``train.iterations`` iterations (from a resumed one), each
    ``step(i)``: the rollout (``collect``), reward (``Scoring.score``), advantage (the method's credit) and update
    (``Updater.run``) phases, then its metrics, checkpoint and stop rules. Any process count: every random draw is
    seeded by what it is (``flowrl.seeds``), so a run on one process and on several compute the same samples."""

    def __init__(self, cfg: Config, accelerator=None):
        from accelerate import Accelerator

        self.cfg = resolve(cfg)  # a config built from a dict, not a recipe, is checked against the plug-ins here
        self.acc = accelerator or Accelerator(mixed_precision=cfg.train.mixed_precision)
        self.tracking = trackers.NO_TRACKING  # log.trackers, started by train() (flowrl.trackers)
        check_launch(self.acc, cfg)  # before any weight loads
        # the same on every process (rank 0's seed, as ever): FSDP processes each keep a piece of one model
        torch.manual_seed(seed_of(cfg.seed, "init", 0))
        self.prompts = load_train_prompts(cfg.data)
        eval_items = load_eval_prompts(cfg.data)  # a dataset folder: its test split
        self.read_images = ImageCache()
        # any negative prompt: every rollout batch's conditioning holds each row's negative (else CFG's is "")
        self._own_negatives = uses_negatives(self.prompts)
        # data x sequence: the processes of a sequence-parallel group draw the same samples (flowrl.mesh)
        self.mesh = Mesh.of(self.acc, cfg.train.sequence_parallel)
        s, world = cfg.sample, self.mesh.data
        self.sampler = GroupSampler(
            len(self.prompts), s.prompts_per_iteration, s.group_size, cfg.seed, world, self.mesh.data_rank
        )
        self.method = build_method(cfg)  # its typed options are checked before any weights load
        self.needs = self.method.needs()
        check_whole_groups(cfg, self.method, world)
        if self.needs.dataset:  # a row's image is the method's target, not a source to edit
            self.prompts = as_targets(self.prompts)
        preflight(cfg)  # the inputs that a model build would only trip over later
        self._check_source_images(eval_items)  # after the settings and before any model loads
        self.out, self._run_lock = runs.prepare_run_dir(cfg, self.acc)
        resume_path = runs.resolve_resume(cfg, self.out) if cfg.resume else None
        self._signals = StopSignals(defer_always=self.acc.num_processes > 1)
        self.already_done = False
        self.adapter = adapter_class(cfg.model.pipeline).from_config(cfg.model, device=self.acc.device, seed=cfg.seed)
        self._build_rewards()
        self.eval_prompts = eval_items or self.prompts
        self._place_text_encoders(cfg.model.text_encoders)
        check_whole_groups(cfg, self.method, world, pairwise=self.reward is not None and self.reward.pairwise)
        self.scoring = Scoring(cfg, self.acc, self.reward, self.mesh)
        self.policy = Policy(cfg, self.adapter, self.acc, self.needs.reference, self.needs.averages, self.mesh)
        self.cost_totals = {"nfe": 0.0, "reward_calls": 0.0}  # cost/*_total, kept in checkpoints
        self.updater = Updater(cfg, self.acc, self.policy, self.method, self.mesh)
        self.evaluation = Evaluation(
            cfg,
            self.acc,
            self.adapter,
            self.policy,
            self.eval_prompts,
            self.eval_reward,
            self.reward,
            self.out,
            self.mesh,
        )
        self.start_iteration = 0
        if cfg.train.onpolicy_check and self.needs.onpolicy_check is not None:
            self._skip_onpolicy_check()
        if resume_path is not None:
            self._resume(resume_path)

    def _check_source_images(self, eval_items: list | None) -> None:
        """Each training and evaluation row's source images, as the family takes them."""
        pipeline = self.cfg.model.pipeline
        takes = source_images_of(adapter_class(pipeline))
        check_source_images(self.prompts, takes, pipeline)
        check_source_images(eval_items or [], takes, pipeline, "data.eval_prompts")

    def _build_rewards(self) -> None:
        """``reward`` (None: no reward configured, which a method whose experience needs none allows,
        ``Needs.rewards``), ``grad_reward`` (a loss through the rewards: the same instances summed with grad,
        ``Context.reward_with_grad``) and ``eval_reward``."""
        cfg = self.cfg
        self.reward = build_rewards(cfg) if cfg.reward else None
        self.grad_reward = (
            GradRewardSum(self.reward.rewards, self.method.name) if self.needs.differentiable_reward else None
        )
        self.eval_reward = build_rewards(cfg, cfg.eval_reward) if cfg.eval_reward else self.reward

    def _skip_onpolicy_check(self) -> None:
        """The method's loss has no rollout log-prob to recompute (``Needs.onpolicy_check`` says why): no check."""
        self.updater.checked_onpolicy = True
        logger.warning(
            "train.onpolicy_check does not apply to method %s: %s, so no on-policy check is made",
            self.method.name,
            self.needs.onpolicy_check,
        )

    def _place_text_encoders(self, mode: str) -> None:
        """``model.text_encoders`` (``flowrl.pipelines.kit.text_encoders``): ``offload`` hooks them onto the
        device for each encode; ``cache`` encodes every training and evaluation prompt now, through the calls the
        rollouts and evaluations make, and frees them."""
        from flowrl.pipelines.kit import text_encoders

        if mode == "offload":
            text_encoders.offload(self.adapter)
        elif mode == "cache":

            def encode_all() -> None:
                size = self.cfg.sample.batch_size
                for items in (self.prompts, self.eval_prompts):
                    own = uses_negatives(items)
                    for start in range(0, len(items), size):
                        chunk = items[start : start + size]
                        negatives = [it.negative_prompt for it in chunk] if own else None
                        sources = item_images(chunk, self.read_images)
                        encode_rows(self.adapter, [it.prompt for it in chunk], negatives, sources)

            text_encoders.cache_and_free(self.adapter, encode_all)

    # ------------------------------------------------------------------------------------ the run
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
        bar = progress(range(self.start_iteration, cfg.train.iterations), disable=not main)
        iteration = self.start_iteration
        self._last_saved = self.start_iteration
        self._flat_iterations = 0
        self._rng_at_start = ckpt.rng_state()  # what a checkpoint of the completed iterations holds
        agree = self._any_process if self.acc.num_processes > 1 else None
        # trackers are closed on every exit, interrupts included
        with self._signals, trackers.session(self.acc, cfg, self.out, self.start_iteration) as self.tracking:
            try:
                if self.start_iteration == 0:
                    self._prepare_method()
                for iteration in bar:
                    evaluation = self.evaluation.timed(iteration) if self.evaluation.due(iteration) else {}
                    metrics = {**self.step(iteration), **evaluation}
                    self._signals.hold()  # held from the update on (`step`); a skipped iteration holds here
                    add_heldout_gap(metrics)
                    history.append(metrics)
                    if main:
                        self._log(metrics, iteration, writer, bar)
                    done = iteration + 1
                    stop, flat = stop_rule_hit(cfg.log.stop_if, metrics), self._flat_for_too_long(metrics)
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
            finally:  # no reward thread outlives the run (a process then exits with no worker left)
                self.scoring.close()
        self._close_run()
        return history

    def _log(self, metrics: dict[str, float], iteration: int, writer: MetricsWriter, bar: Any) -> None:
        """The main process's record of an iteration: metrics.jsonl, the trackers, the progress bar, samples."""
        writer.write(metrics)
        self.tracking.log(metrics, step=iteration)
        bar.set_postfix(
            reward=f"{metrics.get('reward/mean', float('nan')):.4g}",
            kl=f"{metrics.get('policy/kl', 0):.2g}",
        )
        if "skipped" not in metrics:
            self._maybe_save_samples(iteration)

    def _close_run(self) -> None:
        """After the last iteration: the reward curve drawn, the run folder's lock released."""
        if self.acc.is_main_process and (self.out / "metrics.jsonl").exists():
            plot_reward_curve(read_metrics(self.out / "metrics.jsonl"), self.out / "reward_curve.png")
        if self._run_lock is not None:  # an interrupted run keeps it until the process (or this trainer) ends
            self._run_lock.release()

    # ------------------------------------------------------------------------------------ one iteration
    def step(self, iteration: int) -> dict[str, float]:
        """One iteration's phases, each timed (``timing_s/<phase>``). With ``train.reward_overlap`` the rollout
        phase already starts each batch's reward calls (``flowrl.scoring``), so ``timing_s/reward`` is the wait
        that is left after the rollout."""
        metrics: dict[str, float] = {"iteration": iteration}
        ctx = self.context(iteration)
        turn = self.method.begin(iteration)
        self.policy.nfe = 0
        with timed(metrics, "iteration"):
            with timed(metrics, "rollout"):
                batches, group_ids = self.collect(iteration, ctx, turn)
            with timed(metrics, "reward"):
                scored = self.scoring.score(batches)
            if scored is None:
                metrics["skipped"] = 1.0
                return metrics
            with timed(metrics, "advantage"):
                adv = self.method.credit(seam.RewardTable(scored.columns, group_ids, self.scoring.pairwise))
            metrics.update({f"method/{k}": v for k, v in adv.metrics.items()})
            # the weights change from here on: a signal waits for the end of the iteration (see `train`)
            self._signals.hold()
            steps_before = self.updater.optimizer_steps
            with timed(metrics, "update"):
                first = iteration == self.start_iteration
                upd = self.updater.run(batches, adv.values, first, ctx, adv.keep, turn.trains)
            metrics["cost/optimizer_steps"] = float(self.updater.optimizer_steps - steps_before)
        if self.reward is not None:
            metrics.update(reward_metrics(scored.final, scored.components, group_ids))
        self._last_media = cat_media([b.media for b in batches])
        self._last_sources = [m.get(SOURCE_IMAGES_KEY, []) for b in batches for m in b.metadata]  # edit families
        if self.cfg.log.monitors:
            local_groups = torch.cat([b.traj.prompt_ids for b in batches])
            metrics.update(self._over_processes(media_monitors(self._last_media, local_groups), "mean"))
        metrics["throughput/images_per_s"] = len(group_ids) / metrics["timing_s/iteration"]
        grad_calls = self.grad_reward.take_calls() if self.grad_reward is not None else 0  # the update's
        metrics.update(self._cost_metrics(scored.calls + grad_calls, metrics["timing_s/iteration"]))
        if len(scored.calls_by_reward) > 1 or self.scoring.pairwise:  # each reward's own count
            by_reward = self._over_processes(scored.calls_by_reward, "sum")
            metrics.update({f"cost/reward_calls/{r}": v for r, v in by_reward.items()})
        metrics["memory/peak_gib"] = peak_memory_gib(self.acc.device)
        metrics.update({f"policy/{k}": v for k, v in upd.items() if k != "kept_frac"})
        metrics["adv/kept_frac"] = upd["kept_frac"]
        metrics["adv/abs_mean"] = float(adv.values.abs().mean())
        return metrics

    def collect(
        self, iteration: int, ctx: Context | None = None, turn: seam.Turn | None = None
    ) -> tuple[list[RolloutBatch], torch.Tensor]:
        """Rollout phase: this process's share of the iteration's samples, in rollout batches, each handed to the
        reward phase as soon as it is decoded (``Scoring.submit``).

        All randomness is seeded by (seed, iteration, global sample position), so a sample's noise, SDE
        draws and window do not depend on the number of processes, and a resumed run repeats them.
        """
        s = self.cfg.sample
        turn = turn or self.method.begin(iteration)
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
            sources = item_images(items, self.read_images)  # None for a text-only batch
            metadata = with_source_images(metadata, sources)  # rewards see each sample's source images
            negatives = [it.negative_prompt for it in items] if self._own_negatives else None
            cond = encode_rows(self.adapter, prompts, negatives, sources)
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
            self.scoring.submit(rb, alone=len(prompt_index) <= s.batch_size)
            batches.append(rb)
        return batches, samples.group_ids

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

    def _decode_many(self, many: Any) -> Any:
        """(B, K, ...) latents -> media of B x K samples on the CPU, sample-major."""
        return to_cpu(self.adapter.decode(latents.tree_map(lambda t: t.flatten(0, 1), many)))

    def context(self, iteration: int) -> Context:
        """The services a method may use in iteration ``iteration``."""
        return Context(self.adapter, self.cfg, self.policy, iteration, reward=self.grad_reward)

    # ------------------------------------------------------------------------------------ metrics
    def _cost_metrics(self, reward_calls: int, seconds: float) -> dict[str, float]:
        """This iteration's transformer forwards (sample rows) and reward evaluations over all processes,
        their running totals (kept in checkpoints) and forwards per second."""
        local = torch.tensor([float(self.policy.nfe), float(reward_calls)], dtype=torch.float64, device=self.acc.device)
        nfe, calls = (self.acc.reduce(local, reduction="sum") if self.acc.num_processes > 1 else local).tolist()
        nfe /= self.mesh.seq  # a sequence-parallel group runs each forward together: one forward of its rows
        self.cost_totals["nfe"] += nfe
        self.cost_totals["reward_calls"] += calls
        return {
            "cost/nfe": nfe,
            "cost/reward_calls": calls,
            "cost/nfe_total": self.cost_totals["nfe"],
            "cost/reward_calls_total": self.cost_totals["reward_calls"],
            "throughput/nfe_per_s": nfe / seconds,
        }

    def _over_processes(self, values: dict[str, float], reduction: str) -> dict[str, float]:
        """``values`` reduced over processes ("mean": per-process statistics of equal shares; "sum": counts)."""
        if self.acc.num_processes == 1 or not values:
            return values
        keys = sorted(values)
        t = torch.tensor([values[k] for k in keys], dtype=torch.float64, device=self.acc.device)
        return dict(zip(keys, self.acc.reduce(t, reduction=reduction).tolist()))

    def _maybe_save_samples(self, iteration: int) -> None:
        """Rollout grids count like checkpoints: ``samples/iter-N.png`` holds the rollouts of the N-th
        iteration, whose end ``checkpoints/iter-N`` saves (the first, every ``log.sample_every``, the last)."""
        log, done = self.cfg.log, iteration + 1
        if done == 1 or done % log.sample_every == 0 or done == self.cfg.train.iterations:
            path = save_media(
                self._last_media,
                self.out / "samples" / f"iter-{done:06d}",
                max_samples=log.num_sample_images,
                sources=self._last_sources,
            )[0]
            self.tracking.log_image(path, step=iteration)  # at the step of the metrics of these rollouts

    # ------------------------------------------------------------------------------------ the run's edges
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
            (self.out / "method_state.json").write_text(json.dumps(self.method.state_dict(), indent=1))

    def _sample_round(self, k: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Round k of a method's preparation: fresh prompts and draws (iteration index -1 - k, which no
        training iteration uses), explored and scored, no update."""
        iteration = -1 - k
        batches, group_ids = self.collect(iteration, self.context(iteration))
        scored = self.scoring.score(batches)
        if scored is None:
            raise RewardError("a reward failed while the method prepared; nothing to skip to")
        self._prepare_calls += scored.calls
        return scored.columns, group_ids

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
        final = {"iteration": done, **self.evaluation.timed(done)}
        if writer is not None:
            writer.write(final)
            self.tracking.log(final, step=done)
        return final

    # ------------------------------------------------------------------------------------ interrupts
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

    # ------------------------------------------------------------------------------------ checkpoints
    def save(self, iterations_done: int) -> None:
        """Checkpoint (rank 0 writes, every rank waits) and export the trained weights in diffusers format."""
        self._last_saved = iterations_done
        extra = {
            "optimizer_steps": self.updater.optimizer_steps,
            "config": redact_secrets(self.cfg.to_dict()),
            "method": self.method.state_dict(),
            "cost_totals": self.cost_totals,
        }
        ckpt.save_run(self.out / "checkpoints", iterations_done, self.acc, self.policy, extra, self.cfg.log.keep_last)
        self.policy.export(self.out)
        if self.acc.is_main_process:
            runs.share_with_group(self.out)
        self.acc.wait_for_everyone()

    def _resume(self, path: Path) -> None:
        state = ckpt.restore_run(path, self.acc, self.policy, self.method.name)
        self.updater.optimizer_steps = state.get("optimizer_steps", 0)
        self.method.load_state_dict(state.get("method", {}))
        self.cost_totals = dict(state.get("cost_totals", self.cost_totals))
        self.start_iteration = int(state["iteration"])
        self.updater.checked_onpolicy = True  # weights are no longer the rollout policy of iteration 0
        logger.info("resumed from %s at iteration %d", path, self.start_iteration)


def end_process_group() -> None:
    """Tear the process group down once every process is done, before the interpreter exits. ``Trainer.train``
    leaves the group to its caller (``flowrl train`` calls this; so should a script that owns its processes). Left
    to the interpreter's exit, gloo's threads may be destroyed still running and abort the process ("terminate
    called without an active exception"). With no group it does nothing."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()

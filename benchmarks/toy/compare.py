"""Every method on the toy benchmark with the same budget: a table and a plot.

    python -m flowrl.benchmarks.toy.compare [--out runs/toy-compare] [--force] [--iterations N] [--only NAME ...]
                                            [--images-per-task 32] [--model FOLDER] [key=value ...]

Runs ``toy-flow-grpo`` once per registered method (``flowrl.methods.list_methods()``, with
``method.name`` set) and once per Flow-GRPO variant in ``VARIANTS`` (settings expressible by config),
all with the same iterations, samples per iteration, seed and evaluation. Writes to ``--out``:
``compare.json`` and ``compare.md`` (held-out accuracy before and after, the gain, the final training
reward, wall time) and ``compare.png`` (training reward and held-out accuracy against iterations and
against training wall time, evaluation time excluded). Methods that fail are listed with their error.
A run folder that already holds a finished run with the same settings is reused, so runs can be made in
parallel (``--only A`` and ``--only B`` into the same ``--out``) and a last call without ``--only``
collects them into one table and plot. What another comparison left in ``--out`` (its tables, or a
finished run with other settings) is refused, as every command refuses to write over a file, unless
``--force`` is given.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from .sft_data import SFT_DATA

RECIPE = "toy-flow-grpo"
OUTPUTS = ("compare.json", "compare.md", "compare.png")  # written to --out (another comparison's: refused)
# Flow-GRPO variants expressible by config: name -> overrides.
VARIANTS: dict[str, list[str]] = {
    # Flow-GRPO's original SDE instead of the recipe's coefficient-preserving one: a = 0.7, the first 3 steps
    "flow_grpo_flow_sde": [
        "method.options.sde_type=flow_sde", "method.options.noise_level=0.7", "method.options.window_size=3", "method.options.window_range=[0,3]",
        "method.options.clip_range=1.0e-3",
    ],
}  # fmt: skip
ACCURACY = "eval/reward/toy_geneval_accuracy/mean"
RESULT_FILE = "compare_result.json"  # written into each run folder when its run and evaluation finish


# Methods whose exploration has options of its own explore what the recipe's Flow-GRPO does: the same
# SDE kind, noise level and stochastic, trained transitions among the first four steps (the same budget of
# exploration; not a tuning of the newcomer). Where a method's own rule forbids the recipe's CPS step
# (E-GRPO's entropy merge, GRPO-Guard's Gaussian ratio), it runs Flow-GRPO's SDE as the variant
# ``flow_grpo_flow_sde`` does, which is then its baseline. DenseGRPO's calibration (Algorithm 1) gets 3
# sampling rounds: each costs an iteration's exploration without an update, and it is counted in its time.
FLOW_SDE = VARIANTS["flow_grpo_flow_sde"]
METHOD_SETTINGS: dict[str, list[str]] = {
    "tp_grpo": ["method.options.sde_type=cps", "method.options.noise_level=0.8", "method.options.window_size=2",
                "method.options.window_range=[0,4]"],
    "g2rpo": ["method.options.sde_type=cps", "method.options.noise_level=0.8", "method.options.trained_steps=[0,1,2,3]"],
    "e_grpo": ["method.options.sde_type=flow_sde", "method.options.noise_level=0.7",
               "method.options.active_steps=[0,1,2,3]", "method.options.clip_range=1.0e-3"],
    "grpo_guard": FLOW_SDE,
    "dense_grpo": ["method.options.calibration_max_rounds=3"],
    "pref_grpo": ["method.options.win_rate_from=[toy_geneval]"],
    # the forward-process methods sample endpoints with the recipe's ODE (no SDE to match); a deterministic
    # sampler needs a group's members to start from different noise, or they are one image
    "ram": ["sample.same_noise_in_group=false"],
    "diffusion_nft": ["sample.same_noise_in_group=false"],
    # Flow-DPPO's KL needs a Gaussian step: Flow-GRPO's SDE, as for GRPO-Guard; AWM's members have their own noise
    "flow_dppo": FLOW_SDE,
    "awm": ["sample.same_noise_in_group=false"],
    "dpo": ["sample.same_noise_in_group=false"],
    "dgpo": ["sample.same_noise_in_group=false", "method.options.global_std=false"],
    # SFT learns from correct renders of the training prompts (``sft_data``; no reward), 128 distinct images an
    # iteration as the others score 128 samples
    "sft": ["method.options={}", f"data.prompts={SFT_DATA}", "sample.group_size=1",
            "sample.prompts_per_iteration=128"],
}  # fmt: skip
# methods with no run on the toy benchmark: reward backprop needs a differentiable reward, and the toy's is an
# exact detector
NO_TOY_RUN = ("reward_backprop",)
# (GRPO-Guard's paper clips 50x tighter than Flow-GRPO, 2e-6 against 1e-4. On the toy that changes nothing:
# one optimizer step per iteration leaves every ratio at exactly 1, and a run at 2e-5 was bit-identical.)


def runs_to_make(only: list[str] | None) -> dict[str, list[str]]:
    from flowrl.methods import list_methods

    runs = {
        name: [f"method.name={name}", *METHOD_SETTINGS.get(name, [])]
        for name in list_methods("image")
        if name not in NO_TOY_RUN
    }
    runs.update({name: ["method.name=flow_grpo", *extra] for name, extra in VARIANTS.items()})
    if only:
        unknown = sorted(set(only) - set(runs))
        if unknown:
            raise ValueError(f"--only: unknown run {unknown[0]!r}; known: {', '.join(runs)}")
        runs = {k: v for k, v in runs.items() if k in only}
    return runs


def curves(metrics: list[dict], steps_per_iteration: float = 1.0) -> dict[str, list[float]]:
    """Per-iteration training reward and the held-out accuracy at each evaluation, with the training wall
    time, optimizer steps and scored images (reward calls) spent before each.

    Wall time is the cumulative ``timing_s/iteration`` (evaluation excluded); an evaluation made before
    iteration k is placed at the cost iterations 0..k-1 took. Optimizer steps are ``cost/optimizer_steps``
    (``steps_per_iteration`` for runs from before that metric).
    """
    out: dict[str, list[float]] = {"iteration": [], "time_s": [], "reward": [], "eval_iteration": [],
                                   "eval_time_s": [], "accuracy": [], "eval_steps": [], "eval_images": []}  # fmt: skip
    elapsed, steps, images = 0.0, 0.0, 0.0
    for row in metrics:
        if ACCURACY in row:
            out["eval_iteration"].append(row["iteration"])
            out["eval_time_s"].append(elapsed)
            out["eval_steps"].append(steps)
            out["eval_images"].append(images)
            out["accuracy"].append(row[ACCURACY])
        if "reward/mean" in row or "timing_s/iteration" in row:  # an iteration's row (SFT's has no reward)
            elapsed += row.get("timing_s/iteration", 0.0)
            steps += row.get("cost/optimizer_steps", steps_per_iteration)
            images += row.get("cost/reward_calls", 0.0)
            out["iteration"].append(row["iteration"])
            out["time_s"].append(elapsed)
            out["reward"].append(row.get("reward/mean", float("nan")))
    return out


def to_reach(c: dict[str, list[float]], target: float) -> dict[str, float] | None:
    """The first evaluation at or above ``target``: its iteration, and the optimizer steps, scored images
    and training seconds spent before it; None if no evaluation reaches it."""
    for i, acc in enumerate(c["accuracy"]):
        if acc >= target:
            return {
                "iteration": c["eval_iteration"][i],
                "steps": c["eval_steps"][i],
                "images": c["eval_images"][i],
                "time_s": c["eval_time_s"][i],
                "accuracy": acc,
            }
    return None


def _steps_per_iteration(cfg) -> float:
    from flowrl.methods import build_method

    s = cfg.sample
    return float(len(build_method(cfg).schedule(-(-s.prompts_per_iteration * s.group_size // s.batch_size))))


def run_one(
    name: str,
    overrides: list[str],
    out: Path,
    common: list[str],
    args: argparse.Namespace,
    base_cache: dict | None = None,
) -> dict[str, Any]:
    from flowrl.logs import read_metrics
    from flowrl.resolve import resolve_config
    from flowrl.trainer import Trainer

    from .cli import _evaluate_run

    run_dir = out / name
    if name == "sft":  # its folder of renders, made once into the toy cache
        from .sft_data import ensure_sft_renders

        made = ensure_sft_renders()
        if made != Path(SFT_DATA).expanduser():  # FLOWRL_CACHE moved the cache
            overrides = [*overrides, f"data.prompts={made}"]
    cfg = resolve_config(RECIPE, [*common, *overrides, f"output_dir={run_dir}"])
    done = run_dir / RESULT_FILE
    if done.is_file():  # a finished run of the same settings (e.g. from a parallel `--only` invocation)
        previous = json.loads(done.read_text())
        if previous.get("settings") == [*common, *overrides]:
            print(f"[{name}] reusing the finished run in {run_dir}", flush=True)
            previous["curves"] = curves(read_metrics(run_dir / "metrics.jsonl"), _steps_per_iteration(cfg))
            return previous
    print(f"[{name}] training {cfg.train.iterations} iterations into {run_dir}", flush=True)
    cfg.overwrite = True  # the folder is this comparison's own: an unfinished or other-settings run is replaced
    start = time.perf_counter()
    Trainer(cfg).train()
    train_s = time.perf_counter() - start
    eval_args = argparse.Namespace(images_per_task=args.images_per_task, steps=None, guidance=None, seed=0,
                                   out=str(run_dir / "toy_eval"), json=False)  # fmt: skip
    report = _evaluate_run(eval_args, run_dir, base_cache)
    metrics = read_metrics(run_dir / "metrics.jsonl")
    c = curves(metrics, _steps_per_iteration(cfg))
    result = {
        "name": name, "overrides": overrides, "settings": [*common, *overrides], "iterations": cfg.train.iterations,
        "samples_per_iteration": cfg.sample.prompts_per_iteration * cfg.sample.group_size,
        "train_s": round(train_s, 1), "train_only_s": round(c["time_s"][-1], 1) if c["time_s"] else None,
        "reward_first": c["reward"][0] if c["reward"] else None, "reward_last": c["reward"][-1] if c["reward"] else None,
        "base": report["base"], "trained": report["trained"], "gain": report["gain"], "curves": c,
    }  # fmt: skip
    done.write_text(json.dumps(result, indent=2) + "\n")
    return result


def markdown(results: list[dict[str, Any]], note: str) -> str:
    lines = [
        "| method | iterations x samples | train time (s) | train reward first -> last | held-out acc. base -> trained | gain |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['name']} | failed: {r['error']} | | | | |")
            continue
        first, last = r["reward_first"], r["reward_last"]
        reward = "-" if first is None or first != first else f"{first:.3f} -> {last:.3f}"  # SFT scores nothing
        lines.append(
            f"| {r['name']} | {r['iterations']} x {r['samples_per_iteration']} | {r['train_s']:.0f} | "
            f"{reward} | {r['base']['accuracy']:.3f} -> {r['trained']['accuracy']:.3f} | {r['gain']:+.3f} |"
        )
    ok = [r for r in results if "error" not in r]
    base = next((r for r in ok if r["name"] == "flow_grpo" and r["curves"]["accuracy"]), None)
    if base is not None:
        target = base["curves"]["accuracy"][-1]
        ref = to_reach(base["curves"], target)
        lines += [
            "",
            f"To reach Flow-GRPO's final held-out accuracy during training ({target:.3f}, the "
            f"in-training evaluation; cost spent before the first evaluation at or above it):",
            "",
            "| method | iteration | optimizer steps | scored images | train time (s) | steps vs flow_grpo | images vs flow_grpo | time vs flow_grpo |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in ok:
            hit = to_reach(r["curves"], target)
            if hit is None:
                best = max(r["curves"]["accuracy"]) if r["curves"]["accuracy"] else float("nan")
                lines.append(f"| {r['name']} | not reached (best {best:.3f}) | | | | | | |")
                continue

            def ratio(key):
                if hit[key] <= 0:
                    return "at once"
                r = ref[key] / hit[key]
                return f"{r:.2f}x fewer" if r >= 1 else f"{1 / r:.2f}x more"

            lines.append(
                f"| {r['name']} | {hit['iteration']} | {hit['steps']:.0f} | {hit['images']:.0f} | "
                f"{hit['time_s']:.0f} | {ratio('steps')} | {ratio('images')} | {ratio('time_s')} |"
            )
    if ok:
        tasks = list(ok[0]["trained"]["tasks"])
        lines += ["", "| method | " + " | ".join(tasks) + " |", "|---|" + "---:|" * len(tasks)]
        lines.append("| base | " + " | ".join(f"{ok[0]['base']['tasks'][t]:.3f}" for t in tasks) + " |")
        for r in ok:
            lines.append(f"| {r['name']} | " + " | ".join(f"{r['trained']['tasks'][t]:.3f}" for t in tasks) + " |")
    return "# Toy GenEval: methods on the same budget\n\n" + "\n".join(lines) + "\n\n" + note + "\n"


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(14, 7), dpi=110)
    for r in (r for r in results if "error" not in r):
        c = r["curves"]
        axes[0, 0].plot(c["iteration"], c["reward"], label=r["name"])
        axes[0, 1].plot(c["time_s"], c["reward"], label=r["name"])
        axes[0, 2].plot(c["eval_images"], c["accuracy"], marker="o", label=r["name"])
        axes[1, 0].plot(c["eval_iteration"], c["accuracy"], marker="o", label=r["name"])
        axes[1, 1].plot(c["eval_time_s"], c["accuracy"], marker="o", label=r["name"])
        axes[1, 2].plot(c["eval_steps"], c["accuracy"], marker="o", label=r["name"])
    for ax, (x, y) in zip(axes.flat, [("iteration", "training reward (partial credit)"),
                                      ("training wall time (s)", "training reward (partial credit)"),
                                      ("scored images", "held-out accuracy"),
                                      ("iteration", "held-out accuracy"),
                                      ("training wall time (s)", "held-out accuracy"),
                                      ("optimizer steps", "held-out accuracy")]):  # fmt: skip
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(loc="best", fontsize=8)
    fig.suptitle("Toy GenEval on a CPU")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flowrl.benchmarks.toy.compare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("overrides", nargs="*", help="key=value overrides for every run")
    parser.add_argument("--out", default="runs/toy-compare")
    parser.add_argument("--iterations", type=int, default=None, help="default: the recipe's")
    parser.add_argument(
        "--force", action="store_true", help="replace another comparison's tables and runs already in --out"
    )
    parser.add_argument("--only", nargs="*", default=None, help="run only these methods / variants")
    parser.add_argument("--images-per-task", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument(
        "--model", default=None, help="toy model folder (default: the cached default, pretrained if missing)"
    )
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(max(1, args.threads))
    from flowrl.commands import error_line

    try:
        return _compare(args)
    except (ValueError, RuntimeError, FileNotFoundError) as exc:
        print(error_line(exc), file=sys.stderr)
        return 2


def refuse_other_comparison(out: Path, common: list[str], only: list[str] | None) -> None:
    """Refuse, in one line, an ``--out`` that holds what another comparison wrote: tables recording a run with
    other settings (or no ``compare.json`` beside them), or a finished run that this call would retrain."""
    from flowrl.commands import refuse_overwrite

    every = runs_to_make(None)
    tables = out / OUTPUTS[0]
    try:
        recorded = json.loads(tables.read_text()) if tables.is_file() else []
    except ValueError:
        recorded = None
    ours = isinstance(recorded, list) and all(
        isinstance(r, dict)
        and r.get("name") in every
        and r.get("settings", [*common, *r.get("overrides", [])]) == [*common, *every[r["name"]]]
        for r in recorded
    )
    if not ours or (not tables.is_file() and any((out / name).exists() for name in OUTPUTS[1:])):
        refuse_overwrite([out / name for name in OUTPUTS], "--out")
    for name, overrides in runs_to_make(only).items():
        done = out / name / RESULT_FILE
        if done.is_file() and json.loads(done.read_text()).get("settings") != [*common, *overrides]:
            raise ValueError(
                f"--out: {str(out / name)!r} holds a finished {name} run with other settings; pass --force to "
                "replace it, or name a new folder"
            )


def _compare(args: argparse.Namespace) -> int:
    from .cli import ensure_model

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out: {str(out)!r} is a file; name a folder")
    folder = Path(args.model).expanduser() if args.model else ensure_model()
    if not (folder / "model_index.json").is_file():
        raise FileNotFoundError(
            f"--model {folder}: not a pipeline folder (create one with `flowrl eval toy --pretrain`)"
        )
    common = [f"model.path={folder}", *args.overrides]
    if args.iterations is not None:
        common.append(f"train.iterations={args.iterations}")
    if not args.force:
        refuse_other_comparison(out, common, args.only)
    out.mkdir(parents=True, exist_ok=True)
    base_cache: dict = {}  # the base model is evaluated once, not once per method
    results = []
    for name, overrides in runs_to_make(args.only).items():
        try:
            results.append(run_one(name, overrides, out, common, args, base_cache))
        except Exception as exc:  # noqa: BLE001 - one failing method must not lose the others' results
            traceback.print_exc()
            results.append({"name": name, "overrides": overrides, "error": str(exc).splitlines()[0][:200]})
        (out / "compare.json").write_text(json.dumps(results, indent=2) + "\n")
    note = (f"Recipe `{RECIPE}` with {' '.join(common) or 'no overrides'}; held-out accuracy: GenEval's overall "
            f"score on {args.images_per_task} images per task, same noise for every model.")  # fmt: skip
    (out / "compare.md").write_text(markdown(results, note))
    plot(results, out / "compare.png")
    print(markdown(results, note))
    print(f"wrote {out / 'compare.md'}, {out / 'compare.json'}, {out / 'compare.png'}")
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

"""The same short run under each shipped accelerate config, against one plain process, side by side.

    python -m flowrl.benchmarks.perf.strategies [--num-processes N] [--strategies fsdp,ddp,zero2]
                                                [--precision no|bf16|fp16] [--out DIR] [--set KEY=VALUE ...]

Each strategy launches ``accelerate launch --config_file flowrl/recipes/accelerate/<config>.yaml
--num_processes N -m flowrl train`` on the tiny recipe (2 iterations, a checkpoint after each), then
resumes it from its first checkpoint. It prints, per strategy, the largest relative difference of the
training metrics (rewards, advantages, losses, KL, gradient norm) from the one-process run, whether the
resumed second iteration repeats the uninterrupted one exactly, and the wall time. It needs GPUs (accelerate
shards and uses DeepSpeed on GPUs only); ``zero2`` also needs ``pip install deepspeed``. The tests run the
FSDP2 comparison on the CPU with 2 gloo processes (``tests/trainer/test_distributed.py``). ``--set`` adds an
override to every run: ``--set train.lora.enabled=false`` trains the whole transformer with its KL reference,
which under FSDP2 on a GPU is built in host memory and moved in shard by shard (``flowrl.policy.builds_on_host``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

CONFIGS = {"ddp": "ddp.yaml", "fsdp": "fsdp.yaml", "zero2": "deepspeed_zero2.yaml"}
OVERRIDES = [
    "sample.num_steps=3",
    "sample.group_size=4",
    "sample.prompts_per_iteration=2",
    "sample.batch_size=4",
    "train.iterations=2",
    "train.optimizer_steps_per_iteration=2",
    "method.options.beta=0.01",
    "train.ema=true",
    "train.ema_every=1",
    "log.save_every=1",
    "log.sample_every=1000",
]
KEYS = [
    "reward/mean",
    "reward/std",
    "adv/abs_mean",
    "policy/loss",
    "policy/kl",
    "policy/approx_kl",
    "policy/clip_frac",
    "policy/grad_norm",
]


def _train(command: list[str], out: Path, extra: list[str], log: Path) -> tuple[list[dict], float]:
    start = time.perf_counter()
    with open(log, "w") as f:
        done = subprocess.run(
            [*command, f"output_dir={out}", *OVERRIDES, *extra],
            stdout=f,
            stderr=subprocess.STDOUT,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
            timeout=900,
        )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        tail = log.read_text().splitlines()[-15:]
        raise RuntimeError(f"{' '.join(command[:6])} ... failed ({done.returncode}):\n" + "\n".join(tail))
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()], seconds


def _largest_difference(a: list[dict], b: list[dict]) -> tuple[float, str]:
    worst, where = 0.0, ""
    for x, y in zip(a, b):
        for key in KEYS:
            diff = abs(x[key] - y[key]) / max(abs(x[key]), 1e-6)
            if diff > worst:
                worst, where = diff, f"{key} at iteration {x['iteration']}"
    return worst, where


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(
        prog="python -m flowrl.benchmarks.perf.strategies", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--num-processes", type=int, default=None, help="default: every visible GPU")
    p.add_argument("--strategies", default="fsdp,ddp,zero2")
    p.add_argument("--precision", default="no", choices=["no", "bf16", "fp16"], help="train.mixed_precision")
    p.add_argument("--out", default="runs/strategies")
    p.add_argument("--json", default=None)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="an override for every run")
    args = p.parse_args(argv)
    import torch

    n = args.num_processes or torch.cuda.device_count()
    if n < 1:
        raise SystemExit("strategies: no GPU here (accelerate shards and uses DeepSpeed on GPUs only)")
    out = Path(args.out) / args.precision
    out.mkdir(parents=True, exist_ok=True)
    precision = [f"train.mixed_precision={args.precision!r}", *args.set]
    folder = resources.files("flowrl") / "recipes" / "accelerate"
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU"
    print(f"{device} x {n}, torch {torch.__version__}, mixed precision {args.precision}", flush=True)
    one, one_s = _train([sys.executable, "-m", "flowrl", "train"], out / "one", precision, out / "one.log")
    print(f"one process: {one_s:.1f} s, reward/mean {one[-1]['reward/mean']:.5f}", flush=True)
    rows = []
    for strategy in args.strategies.split(","):
        if strategy == "zero2" and importlib.util.find_spec("deepspeed") is None:
            print(f"{strategy}: skipped (deepspeed is not installed)")
            continue
        launch = [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--config_file",
            str(folder / CONFIGS[strategy]),
            "--num_processes",
            str(n),
            "--main_process_port",
            "29555",
            "-m",
            "flowrl",
            "train",
        ]
        run, seconds = _train(launch, out / strategy, precision, out / f"{strategy}.log")
        resumed, _ = _train(
            launch,
            out / f"{strategy}-resumed",
            [*precision, f"resume={out / strategy / 'checkpoints' / 'iter-000001'}"],
            out / f"{strategy}-resumed.log",
        )
        exact = [r["iteration"] for r in resumed] == [1] and all(resumed[0][k] == run[1][k] for k in KEYS)
        worst, where = _largest_difference(one, run)
        row = {
            "strategy": strategy,
            "processes": n,
            "precision": args.precision,
            "max_rel_diff": worst,
            "where": where,
            "resume_exact": exact,
            "seconds": seconds,
            "one_process_seconds": one_s,
        }
        rows.append(row)
        print(
            f"{strategy}: {n} processes, largest relative difference from one process {worst:.2e} ({where}), "
            f"resumed iteration {'repeats exactly' if exact else 'DIFFERS'}, {seconds:.1f} s",
            flush=True,
        )
    print("\n| strategy | processes | mixed precision | largest rel. diff. vs 1 process | resume exact | s |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['strategy']} | {r['processes']} | {r['precision']} | {r['max_rel_diff']:.2e} | "
            f"{'yes' if r['resume_exact'] else 'no'} | {r['seconds']:.1f} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    main()

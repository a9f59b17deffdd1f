"""Per-process peak memory of a launch of 2 CPU processes over gloo, measured next to the estimate.

    python -m flowrl.benchmarks.perf.parallel_memory [--cases tiny-fsdp2 70m-fsdp2 tiny-sp2] [--json FILE]

Each case builds a Trainer and runs its iterations (``Trainer.step``, no checkpoint: writing one gathers whole
tensors) under ``torchrun --nproc_per_node 2``; every process reports its resident high-water mark (``VmHWM``)
after the Trainer is built and after the last iteration, and the estimate is ``flowrl.estimate.estimate`` for the same config on the CPU
(world size 2, the case's strategy and sequence parallelism). The cases:

* ``tiny-fsdp2`` / ``70m-fsdp2``: tiny-cpu (SD3 at the tiny preset, LoRA) and the 70m preset fully fine-tuned,
  the transformer sharded by FSDP2 with one ``fully_shard`` unit per block plus the root, as accelerate's
  ``fsdp2_prepare_model`` does on GPUs (accelerate shards only on GPUs; ``tests/helpers/_fsdp_train.py`` does
  the same for the tests);
* ``tiny-sp2``: tiny-wan with ``train.sequence_parallel=2`` (Ulysses over the 2 processes; SD3, the family with
  the 70m preset, cannot split a sample, so there is no 70m SP case).

Two things in a CPU process's resident set are not the estimate's to predict, and the measurement sets them aside:

* the runtime (Python, torch, diffusers, ...) differs from one machine and install to another (0.83 GiB a process
  in a development install, 1.05 in a fresh ``make install`` on the same machine, for the same tree): it is
  measured here, as the resident set of the built ``tiny-fsdp2`` Trainer (its model is a few MB), and stands in for
  the estimate's constant ``CPU_RUNTIME_GIB`` + ``CPU_DISTRIBUTED_GIB``;
* glibc's heap keeps memory a process has freed: after a large tensor is freed, glibc raises its mmap threshold
  and serves later tensors of that size from the heap, which it seldom returns. With the threshold left to move,
  ``70m-fsdp2`` measured 0.3 GiB above its tensors (the whole model, built before FSDP2 shards it, is freed and
  its pages kept). The launch fixes the threshold at glibc's starting value (``MALLOC_MMAP_THRESHOLD_=131072``),
  so that every large tensor is mapped and unmapped on its own; a GPU's caching allocator is another matter,
  which the estimate's usable fraction of the GPU covers.

The ratio printed is estimate (with the measured runtime) / measured peak; it is meant to be within 20 %.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

RUNTIME_CASE = "tiny-fsdp2"  # the case whose built Trainer measures the runtime: its tensors are a few MB
RUNTIME_KEY = "runtime (Python, torch, ...)"  # the estimate's line for it (flowrl.estimate.model)
COMMON = ["log.save_every=1000", "log.sample_every=1000", "log.monitors=false", "log.eval_every=0"]
CASES = {
    "tiny-fsdp2": ("tiny-cpu", "fsdp", 1, ["sample.num_steps=3", "sample.group_size=2",
                                           "sample.prompts_per_iteration=2", "sample.batch_size=2"]),
    "70m-fsdp2": ("tiny-cpu", "fsdp", 1, ["model.tiny_size=70m", "model.resolution=16", "train.lora.enabled=false",
                                          "sample.num_steps=2", "sample.group_size=2",
                                          "sample.prompts_per_iteration=2", "sample.batch_size=2"]),
    "tiny-sp2": ("tiny-wan", "ddp", 2, ["train.sequence_parallel=2"]),
}  # fmt: skip


def _high_water_gib() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20
    raise RuntimeError("no VmHWM in /proc/self/status (Linux only)")


def worker(recipe: str, strategy: str, overrides: list[str]) -> None:
    """One process of the launch (under torchrun): train, then print this process's peak as one JSON line."""
    from flowrl.resolve import resolve_config
    from flowrl.trainer import Trainer, end_process_group

    if strategy == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        import flowrl.trainer
        from flowrl.policy import Policy

        class ShardedPolicy(Policy):  # accelerate's fsdp2_prepare_model, which shards only on GPUs
            def wrap(self, transformer, optimizer):
                names = {id(p): n for n, p in transformer.named_parameters()}
                order = [names[id(p)] for p in optimizer.param_groups[0]["params"]]
                mesh = init_device_mesh("cpu", (self.acc.num_processes,))
                for block in transformer.transformer_blocks:
                    fully_shard(block, mesh=mesh)
                fully_shard(transformer, mesh=mesh)
                sharded = dict(transformer.named_parameters())
                optimizer.param_groups[0]["params"] = [sharded[n] for n in order]
                return transformer, self.acc.prepare_optimizer(optimizer)

        flowrl.trainer.Policy = ShardedPolicy
    cfg = resolve_config(recipe, overrides)
    trainer = Trainer(cfg)
    built = _high_water_gib()
    for iteration in range(cfg.train.iterations):  # the iterations alone: no checkpoint (gathered whole tensors)
        trainer.step(iteration)
    rank = trainer.acc.process_index
    peak = _high_water_gib()
    end_process_group()
    print(json.dumps({"rank": rank, "peak_gib": peak, "built_gib": built}), flush=True)
    sys.stderr.flush()
    os._exit(0)  # FSDP2's functional collectives keep gloo threads whose teardown can abort the exit


def measure(case: str, iterations: int, port: int, runtime_gib: float | None = None) -> dict:
    """One case on 2 processes. ``runtime_gib`` (the runtime measured on this machine) replaces the estimate's
    runtime constant; without it, this case's own built Trainer is taken (right only for ``RUNTIME_CASE``)."""
    from flowrl.estimate import estimate
    from flowrl.resolve import resolve_config

    recipe, strategy, seq, extra = CASES[case]
    with tempfile.TemporaryDirectory(prefix="flowrl-pmem-") as out:
        overrides = [*COMMON, *extra, f"train.iterations={iterations}", f"output_dir={out}"]
        env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", ACCELERATE_USE_CPU="1")
        env.setdefault("MALLOC_MMAP_THRESHOLD_", "131072")  # glibc's own value, kept from moving (module docstring)
        proc = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
             "-m", "flowrl.benchmarks.perf.parallel_memory", "--worker", recipe, strategy, *overrides],
            capture_output=True, text=True, env=env, check=False, timeout=1200,
        )  # fmt: skip
        # the two processes share stdout: their lines may interleave, so each report is read on its own
        rows = [json.loads(m) for m in re.findall(r'\{"rank": [^{}]*\}', proc.stdout)]
        if len(rows) != 2:
            reason = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
            return {"case": case, "skipped": reason[:200]}
        cfg = resolve_config(recipe, overrides)
    est = estimate(cfg, world_size=2, device="cpu", strategy=strategy, sequence_parallel=seq, flops=1e9)
    peaks = {r["rank"]: r["peak_gib"] for r in rows}
    built = {r["rank"]: r["built_gib"] for r in rows}
    runtime = max(built.values()) if runtime_gib is None else runtime_gib
    est_here = est.peak_gib - est.memory_gib[RUNTIME_KEY] + runtime
    return {
        "built_gib_rank0": built[0],
        "case": case,
        "strategy": strategy,
        "sequence_parallel": seq,
        "peak_gib_rank0": peaks[0],
        "peak_gib_rank1": peaks[1],
        "est_peak_gib": est.peak_gib,
        "runtime_gib": runtime,
        "est_with_runtime_gib": est_here,
        "ratio": est_here / max(peaks.values()),
    }


def measure_cases(cases: list[str], iterations: int, port: int) -> list[dict]:
    """The runtime case first (it measures this machine's runtime), then the others with that runtime."""
    first = measure(RUNTIME_CASE, iterations, port)
    if "skipped" in first:
        return [first]
    rest = [
        measure(c, iterations, port + 1 + i, first["runtime_gib"]) for i, c in enumerate(cases) if c != RUNTIME_CASE
    ]
    return [first, *rest] if RUNTIME_CASE in cases else rest


def table(results: list[dict]) -> str:
    from flowrl.benchmarks.perf.memory import results_table

    head = [
        "| case (2 CPU processes) | strategy | SP | peak GiB, process 0 | process 1 | runtime GiB | "
        "estimate GiB | estimate / measured |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    return results_table(
        head,
        results,
        "case",
        lambda r: (
            f"{r['strategy']} | {r['sequence_parallel']} | {r['peak_gib_rank0']:.3f} | "
            f"{r['peak_gib_rank1']:.3f} | {r['runtime_gib']:.3f} | {r['est_with_runtime_gib']:.3f} | {r['ratio']:.2f}"
        ),
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        worker(argv[1], argv[2], argv[3:])
        return 0
    p = argparse.ArgumentParser(
        prog="python -m flowrl.benchmarks.perf.parallel_memory", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    p.add_argument("--iterations", type=int, default=2)
    p.add_argument("--port", type=int, default=29611)
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args(argv)
    results = measure_cases(args.cases, args.iterations, args.port)
    for r in results:
        print(json.dumps(r), flush=True)
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

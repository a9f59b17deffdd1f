"""Every registered method for one SD3.5-M-size iteration on the same in-memory pipeline."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch

from flowrl.benchmarks.perf.gpu.common import Clock, Scale, reset_peak
from flowrl.benchmarks.perf.gpu.sd35m import build_sd35m, save_configs, sd35m_config, trainer_with

# per method, what its SD3.5-M iteration changes: branch methods need whole groups in a rollout batch;
# DenseGRPO's calibration (rounds of exploration before training) is not part of an iteration's figure
METHOD_OVERRIDES: dict[str, list[str]] = {
    "dense_grpo": ["method.options.calibrate=false"],
    "g2rpo": ["sample.batch_size={group}"],
    "e_grpo": ["sample.batch_size={group}"],
    # the smoke's 2 steps hold a time stratum only with every grid index (the full 10 steps hold its 6 either way)
    "awm": ["method.options.time_fraction=1.0"],
    "dgpo": ["method.options.trunc_steps=1", "method.options.num_noisings=1"],  # the smoke's 2-step grid
    # a differentiable reward to backpropagate through
    "reward_backprop": ["reward={{smoothness: 1.0}}", "reward_args={{}}"],  # (str.format: braces doubled)
    # a dataset method: the shipped folder's images, no reward
    "sft": ["data.prompts=builtin:preference_pairs", "reward={{}}", "reward_args={{}}", "log.eval_every=0"],
}


def bench_methods(
    scale: Scale, device: torch.device, clock: Clock, precision: str, methods: list[str] | None = None
) -> list[dict]:
    """One SD3.5-M-size iteration of every registered method (after one warm-up iteration), on the same
    in-memory pipeline: seconds, NFE/s, NFE and reward calls, peak memory, beside Flow-GRPO's."""
    from flowrl.config import config_from_dict
    from flowrl.methods import list_methods
    from flowrl.pipelines.kit.loading import DTYPES
    from flowrl.resolve import merge_overrides

    clock.say(f"methods: building SD3.5-Medium ({scale.encoders} text encoders, {precision}) on {device}")
    pipe = build_sd35m(scale, device, DTYPES[precision])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        save_configs(pipe, folder)
        base = sd35m_config(scale, folder, 2, precision).to_dict()
        names = methods or sorted(list_methods("image"), key=lambda m: m != "flow_grpo")  # Flow-GRPO first
        for name in names:
            if rows and clock.left() < 3 * max(r["seconds"] for r in rows):
                clock.say(f"skipping {name} and after: time budget")
                break
            extra = [o.format(group=scale.group_size) for o in METHOD_OVERRIDES.get(name, [])]
            data = merge_overrides(
                json.loads(json.dumps(base)), [f"method.name={name}", *extra, f"output_dir={folder / name}"]
            )
            trainer = trainer_with(config_from_dict(data), pipe, device)
            trainer.step(0)  # warm-up
            reset_peak(device)
            m = trainer.step(1)
            clock.say(
                f"{name}: {m['timing_s/iteration']:.2f} s, {m['throughput/nfe_per_s']:.0f} NFE/s, "
                f"{m['cost/nfe']:.0f} NFE, {m['cost/reward_calls']:.0f} reward calls, "
                f"peak {m['memory/peak_gib']:.2f} GiB"
            )
            rows.append(
                {
                    "model": f"SD3.5-M method {name}",
                    "setting": f"{scale.resolution}px, {trainer.cfg.sample.prompts_per_iteration * trainer.cfg.sample.group_size} "
                    f"samples, batch {trainer.cfg.sample.batch_size}, {trainer.cfg.sample.num_steps} steps, {precision}",
                    "seconds": m["timing_s/iteration"],
                    "images_per_s": m["throughput/images_per_s"],
                    "nfe": m["cost/nfe"],
                    "nfe_per_s": m["throughput/nfe_per_s"],
                    "reward_calls": m["cost/reward_calls"],
                    "peak_gib": m["memory/peak_gib"],
                }
            )
            del trainer
            pipe.transformer.delete_adapters("default")  # the next method starts from the base weights
    flow = next((r for r in rows if r["model"].endswith(" flow_grpo")), None)
    for r in rows:
        if flow:
            r["vs_flow_grpo"] = r["seconds"] / flow["seconds"]
    del pipe
    reset_peak(device)
    return rows

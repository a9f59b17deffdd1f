"""The GPU script: `python -m flowrl.benchmarks.perf.gpu` runs the stages at published sizes with random weights.
Its usage, stages and outputs are the runner's docstring (``flowrl.benchmarks.perf.gpu.runner``, printed by
``--help``); each stage is a module of this package sharing the runner and ``common``."""

from __future__ import annotations

from flowrl.benchmarks.perf.gpu.attention import ATTENTION_BACKENDS, bench_attention
from flowrl.benchmarks.perf.gpu.common import FULL, GIB, SMOKE, Clock, Scale
from flowrl.benchmarks.perf.gpu.families import (
    FAMILY_NAMES,
    FAMILY_RUNS,
    bench_family,
    build_family,
    family_config,
    save_family_configs,
)
from flowrl.benchmarks.perf.gpu.methods import METHOD_OVERRIDES, bench_methods
from flowrl.benchmarks.perf.gpu.runner import environment, main, markdown
from flowrl.benchmarks.perf.gpu.sd35m import bench_sd35m, build_sd35m
from flowrl.benchmarks.perf.gpu.sp import SP_DEGREES, SP_FAMILIES, bench_sp, sp_plan
from flowrl.benchmarks.perf.gpu.wan import WAN21_1_3B, bench_wan, wan_latent

__all__ = [
    "ATTENTION_BACKENDS",
    "FAMILY_NAMES",
    "FAMILY_RUNS",
    "FULL",
    "GIB",
    "METHOD_OVERRIDES",
    "SMOKE",
    "SP_DEGREES",
    "SP_FAMILIES",
    "WAN21_1_3B",
    "Clock",
    "Scale",
    "bench_attention",
    "bench_family",
    "bench_methods",
    "bench_sd35m",
    "bench_sp",
    "bench_wan",
    "build_family",
    "build_sd35m",
    "environment",
    "family_config",
    "main",
    "markdown",
    "save_family_configs",
    "sp_plan",
    "wan_latent",
]

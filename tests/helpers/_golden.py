"""The golden runs: every method on `tiny-cpu` (AV-GRPO on `tiny-ltx2-av-grpo`) and every tiny family recipe,
2 iterations each, with a KL reference, an EMA updated every optimizer step and two optimizer steps an iteration.

`tests/assets/golden_metrics.json` holds every logged value of each run, recorded once for each set of CPU float
kernels (`KERNELS`) under the key of the machine that ran them (`machine()`); `tests/methods/test_golden.py` runs them
again and holds every value bit for bit to the recording with this machine's key, or near the nearest recording where
none has it (`Tolerance`). The first recording (AVX-512) was made before the trainer was split into phases and the
method seam was recomposed, so a refactor that changes any number shows here.

`python tests/helpers/_golden.py [RUN ...]` records the runs (all by default) under every kernel set this CPU can run,
each in a fresh interpreter (torch and MKL read the kernel variables once, at load), and replaces the recordings of
those keys (recordings of other keys, another CPU's or torch's, are kept: after a deliberate change of numbers, drop
them), then the ALTERED runs under this CPU's own kernels."""

import json
import math
import os
import platform
import subprocess
import sys
from pathlib import Path

GOLDEN = Path(__file__).parents[1] / "assets" / "golden_metrics.json"

# every value a run logs, except the ones that measure this machine (time, speed, memory)
SKIP = ("timing_s/", "throughput/", "memory/", "time/")

SMALL = [
    "sample.num_steps=4",
    "sample.group_size=4",
    "sample.prompts_per_iteration=2",
    "sample.batch_size=4",
    "train.iterations=2",
    "train.optimizer_steps_per_iteration=2",
    "train.ema=true",
    "train.ema_every=1",
    "log.save_every=1000",
    "log.sample_every=1000",
    "log.eval_every=0",
]

METHODS = ["dense_grpo", "diffusion_nft", "e_grpo", "flow_grpo", "g2rpo", "grpo_guard", "pref_grpo", "ram", "tp_grpo"]
# the methods that hold Flow-GRPO's KL weight (method.options.beta), which the runs set to 0.01 (DiffusionNFT's own
# beta and RAM, which has none, keep their defaults)
KL_METHODS = ("dense_grpo", "e_grpo", "flow_grpo", "g2rpo", "grpo_guard", "pref_grpo", "tp_grpo")

RUNS: dict[str, tuple[str, list[str]]] = {
    **{
        f"tiny-cpu/{m}": ("tiny-cpu", [f"method.name={m}", *SMALL, *(["method.options.beta=0.01"] * (m in KL_METHODS))])
        for m in METHODS
    },
    "tiny-ltx2-av-grpo/av_grpo": ("tiny-ltx2-av-grpo", ["train.iterations=2", "train.ema=true", "train.ema_every=1"]),
    **{
        f"{r}/recipe": (r, ["train.iterations=2", "train.ema=true", "train.ema_every=1", "log.eval_every=0"])
        for r in ("tiny-flux", "tiny-wan", "tiny-audio", "tiny-ltx2")
    },
}

# small deliberate changes of math, each a golden run with overrides: tests/methods/test_golden.py holds each outside
# the tolerance of its run's recording
ALTERED: dict[str, tuple[str, list[str]]] = {
    "flow_grpo clip_range 1e-4 -> 2e-4": ("tiny-cpu/flow_grpo", ["method.options.clip_range=2e-4"]),
    "flow_grpo clip_range 1e-4 -> 1.2e-4": ("tiny-cpu/flow_grpo", ["method.options.clip_range=1.2e-4"]),
    "flow_grpo beta 0.01 -> 0.012": ("tiny-cpu/flow_grpo", ["method.options.beta=0.012"]),
}

# The CPU float kernels a run's numbers depend on: ATen's own vectorized ones (ATEN_CPU_CAPABILITY) and MKL's and
# oneDNN's matrix products and convolutions, which pick theirs from the CPU's instruction sets (capped here by
# MKL_ENABLE_INSTRUCTIONS and ONEDNN_MAX_CPU_ISA, so that the set recorded on an AVX-512 CPU is the one an AVX2-only or
# an SSE-only CPU runs). Each moves the numbers alone: on the AVX-512 CPU the values were first recorded on, capping MKL
# and oneDNN to AVX2 under ATEN_CPU_CAPABILITY=avx2 changes 13 of the 14 runs. The last two sets are ATen's alone
# over the CPU's own matrix kernels (what ATEN_CPU_CAPABILITY by itself runs).
KERNELS: dict[str, dict[str, str]] = {
    "avx512": {"ATEN_CPU_CAPABILITY": "avx512"},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "default": {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ONEDNN_MAX_CPU_ISA": "SSE41"},
    "aten-avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "aten-default": {"ATEN_CPU_CAPABILITY": "default"},
}
ISA_ORDER = ["SSE4_2", "AVX", "AVX2", "AVX512"]  # the x86 instruction sets MKL and oneDNN pick among, lowest first


def _isa_of(name: str) -> str | None:
    """An MKL_ENABLE_INSTRUCTIONS / ONEDNN_MAX_CPU_ISA value (AVX512_CORE_VNNI, AVX2, SSE41...) as one of ISA_ORDER."""
    name = name.upper()
    for isa, prefix in (("AVX512", "AVX512"), ("AVX2", "AVX2"), ("AVX", "AVX"), ("SSE4_2", "SSE")):
        if name.startswith(prefix):
            return isa
    return None


def _cpuinfo() -> tuple[str, set[str]]:
    model, flags = platform.processor() or platform.machine(), set()
    if os.path.exists("/proc/cpuinfo"):
        for line in open("/proc/cpuinfo"):
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not flags:
                model = value.strip()
            elif key.strip() in ("flags", "Features"):  # x86, arm64
                flags = set(value.split())
                break
    return model, flags


def cpu_isa(flags: set[str] | None = None) -> str:
    """The instruction set MKL and oneDNN run on: the CPU's best, lowered by the variables that cap them."""
    if flags is None:
        flags = _cpuinfo()[1]
    if not flags & {"sse4_2", "avx", "avx2", "avx512f"}:
        return platform.machine()  # not x86: its own BLAS kernels
    have = "AVX512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "AVX" if "avx" in flags else "SSE4_2"
    caps = [_isa_of(os.environ.get(v, "")) for v in ("MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")]
    return min([have, *(c for c in caps if c)], key=ISA_ORDER.index)


def machine() -> dict:
    """What the float kernels and so the golden values depend on: the CPU model, the instruction set of its matrix
    kernels, ATen's kernel set (`torch.backends.cpu.get_cpu_capability()`), the torch build and the thread count."""
    import torch

    return {
        "cpu": _cpuinfo()[0],
        "isa": cpu_isa(),
        "aten": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }


def label(key: dict) -> str:
    cpu, isa, aten = key["cpu"], key["isa"], key["aten"]
    return f"{cpu} | {isa} matrix kernels | ATen {aten} | torch {key['torch']} | threads {key['threads']}"


def nearest(recordings: list[dict], key: dict) -> tuple[dict, bool]:
    """The recording with this key (and True), else the one nearest to it (and False): the same torch build first,
    then the same ATen kernels, then the same matrix kernels, then the same CPU model; the first recorded on a tie."""
    for rec in recordings:
        if rec["key"] == key:
            return rec, True
    weight = {"torch": 8, "aten": 4, "isa": 2, "cpu": 1}
    return max(recordings, key=lambda rec: sum(w for f, w in weight.items() if rec["key"][f] == key[f])), False


# Where no recording has this machine's key, each value is held to the nearest recording within a relative tolerance
# (`drift`: |a - b| / max(|a|, |b|)) fitted to how far the recordings differ from each other. Another kernel set moves
# float32 results by rounding (~1e-7 relative), which the losses that are differences of nearly equal numbers
# (CANCELLING: up to 5 % on the steady runs) amplify; and a discrete step can turn it into an event (a JPEG one byte
# larger, one more element clipped, a sample kept or not, another DenseGRPO calibration round: EVENTS values), after
# which every later value of that run moves (the images' statistics by up to 5 %, the rewards' mean and spread by up
# to 18 %, the policy figures by 100 %). Which rows have had an event is measured (`Tolerance.first_event`: the first
# row whose recordings differ by more than EVENT_LEVEL in an EVENTS value); the tolerance of a family of values
# (`family`) is a factor over its largest difference between two recordings, pooled over the steady rows of every run
# (STEADY_FACTOR) or over the eventful ones (EVENT_FACTOR). Fitted to four of the five recorded kernel sets and held to
# the fifth, each in turn, the steady rows need a factor of 2 and the eventful ones 3 (tests/methods/test_golden.py
# holds that with these factors). A row whose rewards, advantages or counts move beyond the steady tolerance had an
# event of this machine's own (ATen AVX2 over AVX matrix kernels, a set not recorded, gives G2RPO one in its first row):
# it is held as an eventful one, and so are the later rows. Since an update's change of math leaves its own row's
# rollout alone, a first row still catches it: another PPO clip range (1.2e-4 or 2e-4 for 1e-4) moves policy/clip_frac
# 10^4 times its tolerance, another KL weight (0.012 for 0.01) policy/grad_norm twice (tests/methods/test_golden.py
# holds these), while an eventful row (from the first on DenseGRPO, AV-GRPO and the tiny Flux, Wan and LTX-2
# recipes; from the second on E-GRPO and G2RPO) holds only changes larger than the kernels' events (a KL weight of
# 0.011 for 0.01 on GRPO-Guard shows only in its second row's rewards, and passes there).
CANCELLING = ("policy/loss", "policy/pg_loss", "policy/approx_kl", "policy/onpolicy_logp_diff")
EVENTS = ("reward/", "cost/", "adv/", "policy/clip_frac")
OWN_EVENTS = ("reward/", "cost/", "adv/")  # what an update's change of math leaves alone in its own row
EVENT_LEVEL = 1e-4
STEADY_FACTOR = 10.0
EVENT_FACTOR = 4.0
REL_FLOOR = 1e-6


def family(metric: str) -> str:
    return metric if metric in CANCELLING else metric.split("/")[0]


def _nan(v) -> bool:
    return isinstance(v, float) and math.isnan(v)


def drift(a, b) -> float:
    """|a - b| relative to the larger of the two; 0 where equal (NaN equals NaN), inf where one is NaN."""
    if a == b or (_nan(a) and _nan(b)):
        return 0.0
    if _nan(a) or _nan(b):
        return math.inf
    return abs(a - b) / max(abs(a), abs(b))


class Tolerance:
    """The relative tolerance of each (run, logged value), fitted to how far `recordings` differ from each other."""

    def __init__(self, recordings: list[dict]):
        names = set.intersection(*(set(rec["runs"]) for rec in recordings))
        drifts: dict[tuple[str, int, str], float] = {}  # (run, row, value) -> largest drift between two recordings
        for name in names:
            for i, row in enumerate(recordings[0]["runs"][name]):
                for k in row:
                    values = [rec["runs"][name][i][k] for rec in recordings]
                    drifts[name, i, k] = max(drift(a, b) for a in values for b in values)
        # the first row of each run whose recordings differ by an event: that row and the later ones are eventful
        self.first_event = {}
        for (name, i, k), d in drifts.items():
            if k.startswith(EVENTS) and d > EVENT_LEVEL:
                self.first_event[name] = min(i, self.first_event.get(name, i))
        self.table: dict[tuple[bool, str], float] = {}  # (eventful, family) -> tolerance
        for (name, i, k), d in drifts.items():
            key = (self.eventful(name, i), family(k))
            self.table[key] = max(self.table.get(key, REL_FLOOR), d * (EVENT_FACTOR if key[0] else STEADY_FACTOR))

    def eventful(self, name: str, row: int) -> bool:
        return row >= self.first_event.get(name, math.inf)

    def __call__(self, name: str, row: int, metric: str) -> float:
        return self.table.get((self.eventful(name, row), family(metric)), REL_FLOOR)

    def far(self, name: str, want: list[dict], got: list[dict]) -> list[str]:
        """Every value of `got` further from `want` than its tolerance, as "row i: name want -> got (tolerance)". A row
        whose rewards, advantages or counts differ beyond the steady tolerance had an event of this machine's own (a
        JPEG byte the recordings did not have): it and the later rows are held as eventful ones."""
        out, event = [], self.first_event.get(name, math.inf)
        for i, (w, g) in enumerate(zip(want, got)):
            if i < event and any(
                k.startswith(OWN_EVENTS) and drift(w[k], g[k]) > self.table.get((False, family(k)), REL_FLOOR)
                for k in w
            ):
                event = i
            for k in w:
                tol = self.table.get((i >= event, family(k)), REL_FLOOR)
                if drift(w[k], g[k]) > tol:
                    out.append(f"row {i}: {k} {w[k]!r} -> {g[k]!r} (tolerance {tol:.2g} relative)")
        return out


def run(name: str, output_dir, extra: list[str] = ()) -> list[dict]:
    from flowrl.resolve import resolve_config
    from flowrl.trainer import Trainer

    recipe, overrides = RUNS[name]
    rows = Trainer(resolve_config(recipe, [f"output_dir={output_dir}", *overrides, *extra])).train()
    return [{k: v for k, v in row.items() if not k.startswith(SKIP)} for row in rows]


def _record_here(out: str, names: list[str]) -> None:
    """Run `names` in this interpreter (kernels as its environment set them) and write {key, runs} to `out`; with no
    names, the ALTERED runs as {change: {key, run, overrides, rows}}."""
    import tempfile

    import torch

    torch.set_num_threads(1)  # as the test's one_thread fixture
    jobs = {name: (name, []) for name in names} or ALTERED
    rows = {}
    for job, (name, extra) in jobs.items():
        with tempfile.TemporaryDirectory() as d:
            rows[job] = run(name, d, extra)
        print(job, len(rows[job]), "rows", flush=True)
    if names:
        got = {"key": machine(), "runs": rows}
    else:
        got = {c: {"key": machine(), "run": n, "overrides": e, "rows": rows[c]} for c, (n, e) in ALTERED.items()}
    Path(out).write_text(json.dumps(got))


def record(names: list[str]) -> None:
    import tempfile

    golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {"recordings": []}
    have = cpu_isa()
    for kernels, env in KERNELS.items():
        aten = ISA_ORDER.index(_isa_of(env["ATEN_CPU_CAPABILITY"]) or "SSE4_2")
        if aten > (ISA_ORDER.index(have) if have in ISA_ORDER else 0) or have not in ISA_ORDER and len(env) > 1:
            continue  # this CPU cannot run them (not x86: ATen's default kernels alone)
        print(f"kernels {kernels}: {' '.join(f'{k}={v}' for k, v in env.items())}", flush=True)
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "rec.json"
            subprocess.run(
                [sys.executable, __file__, "--here", str(out), *names], env={**os.environ, **env}, check=True
            )
            got = json.loads(out.read_text())
        rec = next((r for r in golden["recordings"] if r["key"] == got["key"]), None)
        if rec is None:
            rec = {"key": got["key"], "environment": env, "runs": {}}
            golden["recordings"].append(rec)
        rec["runs"].update(got["runs"])
    with tempfile.TemporaryDirectory() as d:  # under this CPU's own kernels
        out = Path(d) / "altered.json"
        subprocess.run([sys.executable, __file__, "--here", str(out)], check=True)
        golden["altered"] = json.loads(out.read_text())
    GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--here"]:
        _record_here(sys.argv[2], sys.argv[3:])
    else:
        record(sys.argv[1:] or list(RUNS))

"""The golden runs: every method on `tiny-cpu` (AV-GRPO on `tiny-ltx2-av-grpo`) and every tiny family recipe,
2 iterations each, with a KL reference, an EMA updated every optimizer step and two optimizer steps an iteration.

`python tests/helpers/_golden.py` writes every logged value of each run to `tests/assets/golden_metrics.json`;
`tests/methods/test_golden.py` runs them again and holds every value equal. They were recorded before the trainer was
split into phases and the method seam was recomposed, so a refactor that changes any number shows here."""

import os
import platform
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
    "train.beta=0.01",
    "train.ema=true",
    "train.ema_every=1",
    "log.save_every=1000",
    "log.sample_every=1000",
    "log.eval_every=0",
]

METHODS = ["dense_grpo", "diffusion_nft", "e_grpo", "flow_grpo", "g2rpo", "grpo_guard", "pref_grpo", "ram", "tp_grpo"]

RUNS: dict[str, tuple[str, list[str]]] = {
    **{f"tiny-cpu/{m}": ("tiny-cpu", [f"method.name={m}", *SMALL]) for m in METHODS},
    "tiny-ltx2-av-grpo/av_grpo": ("tiny-ltx2-av-grpo", ["train.iterations=2", "train.ema=true", "train.ema_every=1"]),
    **{
        f"{r}/recipe": (r, ["train.iterations=2", "train.ema=true", "train.ema_every=1", "log.eval_every=0"])
        for r in ("tiny-flux", "tiny-wan", "tiny-audio", "tiny-ltx2")
    },
}


def machine() -> str:
    """What makes float kernels differ: the CPU model and the torch build."""
    import torch

    cpu = platform.processor()
    if os.path.exists("/proc/cpuinfo"):
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return f"{cpu} | torch {torch.__version__} | threads 1"


def run(name: str, output_dir) -> list[dict]:
    from flowrl.config import resolve_config
    from flowrl.trainer import Trainer

    recipe, overrides = RUNS[name]
    rows = Trainer(resolve_config(recipe, [f"output_dir={output_dir}", *overrides])).train()
    return [{k: v for k, v in row.items() if not k.startswith(SKIP)} for row in rows]


def record(names: list[str]) -> None:
    import json
    import tempfile

    import torch

    torch.set_num_threads(1)  # as the test's one_thread fixture

    golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {"runs": {}}
    for name in names:
        with tempfile.TemporaryDirectory() as d:
            golden["runs"][name] = run(name, d)
        print(name, len(golden["runs"][name]), "rows", flush=True)
    golden["machine"] = machine()
    GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    import sys

    record(sys.argv[1:] or list(RUNS))

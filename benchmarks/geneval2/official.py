"""Parity with GenEval 2's own code, only the judge faked: ``parity(official_dir, work_dir)``.

The official ``evaluation.py`` (from the user's checkout of facebookresearch/GenEval2; never shipped here) is
imported with a stand-in ``transformers`` module whose Qwen3-VL "model" returns, for each (image, text),
logits drawn from a seeded generator over a small vocabulary, and whose tokenizer maps the answer forms to
ids (``" 3"`` to two tokens, the first a space, as Qwen's tokenizer splits a digit after a space). Its
``main()`` runs ``--method soft_tifa_gm`` and ``soft_tifa_am`` on one synthetic image per prompt, and
``soft_tifa_analysis.py``'s breakdowns run on its score lists. flowrl's ``score_folder`` judges the same
images with a ``LocalJudge`` over the same logits. Returns both sides' numbers and counts.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np

from flowrl.benchmarks.official_scripts import printed_by

VOCAB = ["Yes", "yes", " yes", " Yes", "No", "no", " ", "other", "The", "I"]
VOCAB += [w for n in ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
          for w in (n, n.capitalize(), " " + n, " " + n.capitalize())]  # fmt: skip
VOCAB += [str(d) for d in range(10)]


class FakeTokenizer:
    """Whole-word ids for the vocabulary; a leading space before a digit is its own token (as Qwen's)."""

    def __init__(self) -> None:
        self.ids = {w: i for i, w in enumerate(VOCAB)}

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        if text in self.ids:
            return [self.ids[text]]
        if text.startswith(" ") and text[1:].isdigit():
            return [self.ids[" "], *[self.ids[c] for c in text[1:]]]
        if text.isdigit():
            return [self.ids[c] for c in text]
        raise KeyError(f"fake tokenizer: no tokens for {text!r}")

    def decode(self, ids: Any) -> str:
        ids = [int(i) for i in (ids if isinstance(ids, (list, tuple)) else [ids])]
        return "".join(VOCAB[i] for i in ids)


def image_id(image: Any) -> int:
    """The synthetic images carry their number in pixel (0, 0): red * 256 + green."""
    pixel = np.asarray(image)[0, 0]
    return int(pixel[0]) * 256 + int(pixel[1])


def fake_logits(image: int, text: str):
    """Seeded logits over the vocabulary (float32, (1, V)); some forms get -inf (probability exactly 0)."""
    import torch

    seed = int.from_bytes(hashlib.sha256(f"{image}|{text}".encode()).digest()[:8], "big")
    rng = np.random.default_rng(seed)
    logits = rng.normal(0.0, 2.0, len(VOCAB)).astype(np.float32)
    if rng.random() < 0.75:  # a judge that mostly says yes, and names one number most of the time
        logits[:4] += 5.0
    word = 10 + 4 * int(rng.integers(10))
    logits[word : word + 4] += 5.0
    if rng.random() < 0.03:  # a question whose every answer form is impossible: its image's GM is 0
        logits[: len(VOCAB) - 10] = -np.inf
        logits[VOCAB.index("I")] = 0.0
    return torch.from_numpy(logits)[None]


class FakeChat:
    """What flowrl's ``LocalJudge`` needs: ``next_token_distribution`` (fp32 softmax) and ``tokenizer``."""

    batch_size = 1

    def __init__(self) -> None:
        self.tokenizer = FakeTokenizer()

    def next_token_distribution(self, requests: list[Any]):
        import torch

        rows = [torch.nn.functional.softmax(fake_logits(image_id(r.images[0]), r.text), dim=-1)[0] for r in requests]
        return torch.stack(rows)


def _fake_transformers() -> types.ModuleType:
    """A ``transformers`` stand-in for the official script: processor, model and generate, nothing else."""
    from PIL import Image

    module = types.ModuleType("transformers")
    tokenizer = FakeTokenizer()

    class Inputs(dict):
        def to(self, device: Any) -> Inputs:
            return self

    class Processor:
        def __init__(self) -> None:
            self.tokenizer = tokenizer

        @classmethod
        def from_pretrained(cls, *args: Any, **kwargs: Any) -> Processor:
            return cls()

        def apply_chat_template(self, messages: list, **kwargs: Any) -> Inputs:
            content = messages[0]["content"]
            with Image.open(content[0]["image"]) as image:
                return Inputs(image=image_id(image.convert("RGB")), text=content[1]["text"])

        def batch_decode(self, sequences: list) -> list[str]:
            return [tokenizer.decode(int(s)) for s in sequences]

    class Model:
        device = "cpu"

        @classmethod
        def from_pretrained(cls, *args: Any, **kwargs: Any) -> Model:
            return cls()

        def generate(self, image: int, text: str, **kwargs: Any) -> Any:
            return types.SimpleNamespace(scores=[fake_logits(image, text)])

    module.AutoProcessor = Processor
    module.Qwen3VLForConditionalGeneration = Model
    for name in ("AutoModelForCausalLM", "GenerationConfig", "AutoTokenizer"):
        setattr(module, name, Processor)
    return module


def _load(path: Path, name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def write_images(items: list[dict[str, Any]], folder: Path) -> dict[str, str]:
    """One 16 px image per prompt (``{key}_0.png``) whose pixel (0, 0) holds its number; {prompt: path}."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for i, item in enumerate(items):
        array = np.full((16, 16, 3), 128, dtype=np.uint8)
        array[0, 0] = (i // 256, i % 256, 0)
        path = folder / f"{item['key']}_0.png"
        Image.fromarray(array).save(path)
        paths[item["prompt"]] = str(path)
    return paths


def run_official(official_dir: Path, data: Path, images: dict[str, str], work: Path) -> dict[str, Any]:
    saved = sys.modules.get("transformers")
    sys.modules["transformers"] = _fake_transformers()
    try:
        evaluation = _load(official_dir / "evaluation.py", "geneval2_official_evaluation")
        analysis = _load(official_dir / "soft_tifa_analysis.py", "geneval2_official_analysis")
    finally:
        if saved is not None:
            sys.modules["transformers"] = saved
        else:
            sys.modules.pop("transformers", None)
    (work / "images.json").write_text(json.dumps(images))
    out: dict[str, Any] = {}
    for method in ("soft_tifa_gm", "soft_tifa_am"):
        argv = ["evaluation.py", "--benchmark_data", str(data), "--image_filepath_data", str(work / "images.json"),
                "--method", method, "--output_file", str(work / f"{method}.json")]  # fmt: skip
        printed = printed_by(evaluation.main, argv)
        out[method] = float(printed.strip().splitlines()[-1].split("Score:")[1])
    rows = [json.loads(line) for line in data.read_text().splitlines() if line.strip()]
    lists = json.loads((work / "soft_tifa_gm.json").read_text())
    skills = analysis.per_skill_analysis(lists, [r["skills"] for r in rows])
    atoms = analysis.per_atomicity_analysis(lists, [r["atom_count"] for r in rows])
    out["per_skill_am"] = dict(zip(("object", "attribute", "count", "position", "verb"), skills))
    out["per_atomicity_gm"] = {str(k): v["accuracy"] for k, v in atoms.items()}
    out["prompts"], out["questions"] = len(lists), sum(len(s) for s in lists)
    out["score_lists"] = lists
    return out


def parity(official_dir: str | Path, work_dir: str | Path, data: str | Path | None = None) -> dict[str, Any]:
    """Run the official scripts and flowrl on the same synthetic judge; returns ``{"official", "flowrl",
    "max_abs_diff", "question_scores_equal"}``."""
    from .data import load_items
    from .evaluate import read_progress, score_folder
    from .judge import LocalJudge

    official_dir, work = Path(official_dir), Path(work_dir)
    data = Path(data) if data else official_dir / "geneval2_data.jsonl"
    items = load_items(data)
    images = write_images(items, work / "images")
    official = run_official(official_dir, data, images, work)
    judge = LocalJudge(FakeChat(), {"model": "fake", "version": None, "backend": "transformers", "base_url": None})
    ours = score_folder(work / "images", work / "flowrl", {"prompts": data, "judge": judge, "show_progress": False})
    rows = read_progress(work / "flowrl" / "progress.jsonl")
    our_lists = [rows[(item["key"], 0)]["scores"] for item in items]
    pairs = [(official["soft_tifa_gm"], ours["soft_tifa_gm"]), (official["soft_tifa_am"], ours["soft_tifa_am"])]
    pairs += [(official["per_skill_am"][s], ours["per_skill_am"][s]) for s in official["per_skill_am"]]
    pairs += [(official["per_atomicity_gm"][a], ours["per_atomicity_gm"][a]) for a in official["per_atomicity_gm"]]
    official.pop("score_lists_equal", None)
    equal = our_lists == official.pop("score_lists")
    return {
        "official": official,
        "flowrl": {
            k: ours[k]
            for k in (
                "soft_tifa_gm",
                "soft_tifa_am",
                "per_skill_am",
                "per_atomicity_gm",
                "prompts",
                "scored_images",
                "scored_questions",
            )
        },  # fmt: skip
        "max_abs_diff": max(abs(a - b) for a, b in pairs),
        "question_scores_equal": equal,
        "zero_gm_images": sum(1 for s in our_lists if min(s) == 0.0),
    }

"""LoRA files from the tools that train flow models, read into one form, checked against a base transformer and
written as the diffusers LoRA file the family's pipeline loads (``pipe.load_lora_weights``).

Formats, told apart by their files (``read_lora``):

* ``peft``: a folder with ``adapter_config.json`` and ``adapter_model.safetensors`` (or ``.bin``), written by
  peft's ``PeftModel.save_pretrained``. flow_grpo (``scripts/train_sd3.py`` ``save_ckpt``) and DiffusionNFT
  (``scripts/train_nft_sd3.py`` ``save_ckpt``) write it to ``checkpoints/checkpoint-N/lora/``; DiffusionNFT's
  holds a second adapter in ``lora/old/`` (its sampling policy), which is not the trained one and is ignored.
  Keys: ``base_model.model.<module>.lora_A.weight``. A ``checkpoint-N`` folder holding ``lora/`` is read
  from there.
* ``flow_factory``: Flow-Factory's ``BaseAdapter.save_checkpoint`` (``src/flow_factory/models/abc.py``) writes
  the same peft folder, into ``<checkpoint>/transformer/`` when it trains several components; its loader also
  takes a bare state dict (one ``*.safetensors`` without ``adapter_config.json``, keys ``<module>.lora_A.weight``
  with or without ``base_model.model.``), whose rank is read from ``lora_A`` and whose alpha is the rank (its
  ``infer_lora_alpha``), or the ``lora_adapter_metadata`` the file carries.
* ``diffusers``: ``pytorch_lora_weights.safetensors`` (a file, or a folder holding it) as
  ``save_lora_weights`` writes it: keys ``transformer.<module>.lora_A.weight``, the ``LoraConfig`` in the
  ``lora_adapter_metadata`` header (else alpha = rank, as diffusers assumes). A flowrl run's ``lora/`` export is
  this format.
* ``flowrl``: a run's checkpoint ``RUN/checkpoints/iter-N`` (``trainable.safetensors``, peft parameter names
  ``<module>.lora_A.default.weight``; rank, alpha and targets from the run's ``config.yaml``) is read by
  ``checkpoint_lora``.

Whatever the format, ``LoraWeights.tensors`` maps ``<module>.lora_A.weight`` / ``<module>.lora_B.weight`` (and
DoRA's ``<module>.lora_magnitude_vector``) to tensors, ``<module>`` a module path inside the transformer.
``check_fits`` refuses, in one line naming the file and both models, a LoRA whose modules are not the base
transformer's or whose shapes differ (another family's); ``transformer_skeleton`` builds a base's transformer
on the meta device from its config, so the check runs before any base weight loads.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

LORA_FILE = "pytorch_lora_weights.safetensors"  # diffusers' name (save_lora_weights / load_lora_weights)
PEFT_CONFIG = "adapter_config.json"
PEFT_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
METADATA_KEY = "lora_adapter_metadata"  # diffusers.loaders.lora_base.LORA_ADAPTER_METADATA_KEY
# the LoraConfig fields that change what a LoRA computes; others (task type, revision, ...) are dropped
CONFIG_FIELDS = ("r", "lora_alpha", "use_rslora", "use_dora", "rank_pattern", "alpha_pattern", "lora_bias")
_LORA_KEY = re.compile(
    r"^(?P<module>.+)\.(?P<part>lora_A|lora_B|lora_magnitude_vector)(?:\.(?P<adapter>[^.]+))?(?:\.weight)?$"
)


@dataclass
class LoraWeights:
    """One LoRA, whatever wrote it. ``tensors``: ``<module>.lora_A.weight`` ... (module paths inside the
    transformer); ``config``: the peft ``LoraConfig`` fields (``r``, ``lora_alpha``, ``target_modules``, ...)."""

    format: str  # peft | flow_factory | diffusers | flowrl
    tool: str  # who writes this layout, in words
    path: Path  # the weights file read
    tensors: dict[str, torch.Tensor]
    config: dict[str, Any]
    base_model: str | None = None  # what the file says it was trained on (peft's base_model_name_or_path)
    notes: list[str] = field(default_factory=list)

    @property
    def modules(self) -> list[str]:
        return sorted({k.rsplit(".", 2)[0] for k in self.tensors if ".lora_A." in k})

    def describe(self) -> str:
        c = self.config
        return f"{self.tool}: {len(self.modules)} modules, rank {c['r']}, alpha {c['lora_alpha']:g}"


# ------------------------------------------------------------------------------------------------ reading


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _load_tensors(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """A weights file's tensors and (safetensors) header metadata."""
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        tensors = {}
        with safe_open(str(path), framework="pt") as f:
            metadata = dict(f.metadata() or {})
            for key in f.keys():
                tensors[key] = f.get_tensor(key)
        return tensors, metadata
    state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict):
        raise ValueError(f"--lora {str(path)!r}: not a state dict")
    return state, {}


def _module_keys(tensors: dict[str, torch.Tensor], path: Path, strip: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """``<module>.lora_A.weight`` keys: prefixes in ``strip`` and peft's adapter name (``.default``) removed."""
    out: dict[str, torch.Tensor] = {}
    for key, value in tensors.items():
        name = key
        for prefix in strip:
            if name.startswith(prefix):
                name = name[len(prefix) :]
                break
        m = _LORA_KEY.match(name)
        if m is None:
            raise ValueError(
                f"--lora {str(path)!r}: key {key!r} is not a LoRA tensor (<module>.lora_A.weight / lora_B); "
                "kohya-style lora_down/lora_up files are not read here: convert them with diffusers first"
            )
        part = m["part"] + (".weight" if m["part"] != "lora_magnitude_vector" else "")
        out[f"{m['module']}.{part}"] = value
    if not any(".lora_A." in k for k in out):
        raise ValueError(f"--lora {str(path)!r}: holds no lora_A tensors")
    return out


def _ranks(tensors: dict[str, torch.Tensor]) -> dict[str, int]:
    return {k[: -len(".lora_A.weight")]: int(v.shape[0]) for k, v in tensors.items() if k.endswith(".lora_A.weight")}


def _config(tensors: dict[str, torch.Tensor], given: dict[str, Any]) -> dict[str, Any]:
    """The LoraConfig fields: ``given`` (a file's config) where it has them, the rank read from ``lora_A`` and
    alpha = rank otherwise; ``target_modules`` the LoRA's exact module paths, ``rank_pattern`` where they differ."""
    ranks = _ranks(tensors)
    config = {k: given[k] for k in CONFIG_FIELDS if given.get(k) not in (None, {}, False, "none")}
    r = int(config.get("r") or max(set(ranks.values()), key=list(ranks.values()).count))
    config["r"] = r
    config["lora_alpha"] = float(config.get("lora_alpha", r))
    config["target_modules"] = sorted(ranks)
    pattern = dict(config.get("rank_pattern") or {})
    for module, rank in ranks.items():
        if rank != r and not any(module == p or module.endswith("." + p) for p in pattern):
            pattern[module] = rank
    if pattern:
        config["rank_pattern"] = pattern
    return config


def _peft_folder(folder: Path, fmt: str, tool: str) -> LoraWeights:
    weights = next((folder / n for n in PEFT_WEIGHTS if (folder / n).is_file()), None)
    if weights is None:
        raise ValueError(f"--lora {str(folder)!r}: has {PEFT_CONFIG} but no {' or '.join(PEFT_WEIGHTS)}")
    given = json.loads((folder / PEFT_CONFIG).read_text(encoding="utf-8"))
    if given.get("peft_type", "LORA") != "LORA":
        raise ValueError(f"--lora {str(folder)!r}: a peft {given.get('peft_type')} adapter, not a LoRA")
    tensors, _ = _load_tensors(weights)
    tensors = _module_keys(tensors, weights, ("base_model.model.",))
    notes = []
    if (folder / "old" / PEFT_CONFIG).is_file():
        tool = "DiffusionNFT PEFT folder"
        notes.append("its second adapter old/ (DiffusionNFT's sampling policy) is not the trained one: ignored")
    lora = LoraWeights(fmt, tool, weights, tensors, _config(tensors, given), given.get("base_model_name_or_path"))
    lora.notes.extend(notes)
    return lora


def _bare_file(path: Path) -> LoraWeights:
    """A single weights file: diffusers (``transformer.`` keys) or a bare peft state dict (Flow-Factory's)."""
    tensors, metadata = _load_tensors(path)
    given = json.loads(metadata[METADATA_KEY]) if METADATA_KEY in metadata else {}
    if any(k.startswith("transformer.") for k in tensors):
        others = sorted({k.split(".", 1)[0] for k in tensors if not k.startswith("transformer.")})
        if others:
            raise ValueError(
                f"--lora {str(path)!r}: also adapts {', '.join(others)}; only transformer LoRAs are evaluated here"
            )
        given = {k[len("transformer.") :]: v for k, v in given.items() if k.startswith("transformer.")}
        tensors = _module_keys(tensors, path, ("transformer.",))
        return LoraWeights(
            "diffusers", "diffusers LoRA file (save_lora_weights)", path, tensors, _config(tensors, given)
        )
    tensors = _module_keys(tensors, path, ("base_model.model.",))
    tool = "bare peft state dict (Flow-Factory's legacy LoRA file)"
    return LoraWeights("flow_factory", tool, path, tensors, _config(tensors, given))


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
# the files of a LoRA repository on the hub (a released PEFT folder, Flow-Factory's, or a diffusers file)
HUB_PATTERNS = ["*adapter_config.json", "*adapter_model.safetensors", "*adapter_model.bin", f"*{LORA_FILE}"]


def hub_lora(repo_id: str) -> Path:
    """A hub repository's LoRA files, downloaded (or found in the cache) with ``snapshot_download``."""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, allow_patterns=HUB_PATTERNS))
    except Exception as exc:  # noqa: BLE001 - offline, unknown, gated: said in one line
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise FileNotFoundError(
            f"--lora {repo_id!r}: no such file or folder here, and its hub repository cannot be read ({reason})"
        ) from None


def read_lora(spec: str | Path) -> LoraWeights:
    """The LoRA at ``spec``: a file or a folder of one of the formats in the module docstring, or a hub id whose
    repository holds one (``jieliu/SD3.5M-FlowGRPO-GenEval``: downloaded into the hub cache)."""
    path = Path(spec).expanduser()
    if not path.exists() and _HUB_ID.match(str(spec)):
        path = hub_lora(str(spec))
    if not path.exists():
        raise FileNotFoundError(f"--lora: no such file or folder {str(spec)!r}")
    if path.is_file():
        if path.suffix not in (".safetensors", ".bin", ".pt", ".pth"):
            raise ValueError(f"--lora {str(spec)!r}: not a weights file (.safetensors, .bin)")
        return _bare_file(path)
    if (path / PEFT_CONFIG).is_file():
        return _peft_folder(path, "peft", "PEFT folder (flow_grpo / DiffusionNFT / Flow-Factory)")
    if (path / "lora" / PEFT_CONFIG).is_file():  # flow_grpo / DiffusionNFT checkpoints/checkpoint-N
        return _peft_folder(path / "lora", "peft", "PEFT folder (flow_grpo / DiffusionNFT checkpoint)")
    if (path / "transformer" / PEFT_CONFIG).is_file():  # Flow-Factory, several trained components
        if (path / "transformer_2" / PEFT_CONFIG).is_file():
            raise ValueError(
                f"--lora {str(spec)!r}: a Flow-Factory checkpoint of two components (transformer, transformer_2); "
                "give one of them"
            )
        return _peft_folder(path / "transformer", "flow_factory", "Flow-Factory checkpoint (transformer/)")
    for candidate in (path / LORA_FILE, path / "lora" / LORA_FILE):
        if candidate.is_file():
            return _bare_file(candidate)
    files = sorted(path.glob("*.safetensors"))
    if len(files) == 1:
        return _bare_file(files[0])
    if (path / "trainable.safetensors").is_file() or (path / "config.yaml").is_file():
        raise ValueError(f"--lora {str(spec)!r}: a flowrl run or checkpoint; give it as --run")
    raise ValueError(
        f"--lora {str(spec)!r}: no LoRA found (expected {PEFT_CONFIG} + adapter_model.safetensors, {LORA_FILE}, "
        f"a checkpoint folder holding lora/ or transformer/, or one .safetensors file)"
    )


def checkpoint_lora(path: Path, lora_cfg: Any, ema: bool = False) -> LoraWeights:
    """A flowrl checkpoint's LoRA (``trainable.safetensors``, or ``ema.safetensors``), its config from the run's
    ``train.lora`` (rank, alpha; the targets are the modules it holds)."""
    name = "ema.safetensors" if ema else "trainable.safetensors"
    if not (path / name).is_file():
        raise ValueError(f"--run {str(path)!r}: no {name}")
    tensors, _ = _load_tensors(path / name)
    tensors = _module_keys(tensors, path / name, ())
    given = {"r": lora_cfg.rank, "lora_alpha": lora_cfg.alpha}
    return LoraWeights("flowrl", f"flowrl checkpoint ({name})", path / name, tensors, _config(tensors, given))


# ----------------------------------------------------------------------------------------------- checking

# module-name marks of the families' transformers (diffusers' names), to say whose LoRA a stray one is
FAMILY_MARKS = (
    ("single_transformer_blocks.", "FLUX (FluxTransformer2DModel)"),
    (".attn1.", "Wan / LTX (attn1/attn2 blocks)"),
    ("img_mlp.", "Qwen-Image (QwenImageTransformer2DModel)"),
    ("layers.", "Z-Image / Lumina (layers.N)"),
    ("transformer_blocks.", "SD3 / FLUX double-stream blocks (transformer_blocks.N)"),
)


def guess_family(modules: list[str]) -> str:
    for mark, family in FAMILY_MARKS:
        if any(mark in m or m.startswith(mark) for m in modules):
            return family
    return "an unknown model"


def _linear_shape(module: torch.nn.Module) -> tuple[int, int] | None:
    """(in, out) features of a linear layer (peft adapts these), else None."""
    if hasattr(module, "in_features") and hasattr(module, "out_features"):
        return int(module.in_features), int(module.out_features)
    return None


def check_fits(lora: LoraWeights, transformer: torch.nn.Module, family: str, option: str = "--lora") -> None:
    """Refuse, in one line naming the file and both models, a LoRA whose modules the base transformer lacks or
    whose ``lora_A`` (r, in) / ``lora_B`` (out, r) shapes do not fit the module's (in, out) features."""
    base = f"the base's {type(transformer).__name__} (family {family})"
    theirs = lora.base_model or guess_family(lora.modules)
    modules = dict(transformer.named_modules())
    missing = [m for m in lora.modules if m not in modules]
    if missing:
        raise ValueError(
            f"{option} {str(lora.path)!r} is a LoRA of another model ({theirs}): {len(missing)} of its "
            f"{len(lora.modules)} modules are not in {base}, e.g. {missing[0]!r}"
        )
    for m in lora.modules:
        a, b = lora.tensors[f"{m}.lora_A.weight"].shape, lora.tensors.get(f"{m}.lora_B.weight")
        shape = _linear_shape(modules[m])
        if shape is None:
            raise ValueError(
                f"{option} {str(lora.path)!r}: its module {m!r} is a {type(modules[m]).__name__} in {base}"
            )
        fan_in, fan_out = shape
        if b is None or a[1] != fan_in or b.shape[0] != fan_out or b.shape[1] != a[0]:
            got = f"lora_A {tuple(a)}, lora_B {tuple(b.shape) if b is not None else 'missing'}"
            raise ValueError(
                f"{option} {str(lora.path)!r} is a LoRA of another model ({theirs}): its module {m!r} has {got}, "
                f"but {base} has Linear({fan_in} -> {fan_out}) there"
            )


def transformer_skeleton(path: str, revision: str | None = None) -> torch.nn.Module | None:
    """The transformer of a diffusers folder or hub id built on the meta device from its config alone (no
    weights read), to check a LoRA against before the base loads; None where its config cannot be read here
    (the check then runs on the loaded model)."""
    import diffusers
    from accelerate import init_empty_weights

    try:
        local = Path(path).expanduser()
        if local.is_dir():
            index = json.loads((local / "model_index.json").read_text(encoding="utf-8"))
            config_file = local / "transformer" / "config.json"
        else:
            from huggingface_hub import hf_hub_download

            index = json.loads(Path(hf_hub_download(path, "model_index.json", revision=revision)).read_text())
            config_file = Path(hf_hub_download(path, "config.json", subfolder="transformer", revision=revision))
        cls = getattr(diffusers, index["transformer"][1])
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except Exception:  # noqa: BLE001 - offline, gated, another layout: the check runs after the build instead
        return None
    with init_empty_weights():
        return cls.from_config(config)


# ----------------------------------------------------------------------------------------------- writing


def write_diffusers(lora: LoraWeights, pipeline_class: Any, folder: Path) -> Path:
    """``folder/pytorch_lora_weights.safetensors`` in diffusers' layout (``transformer.`` keys, the LoraConfig in
    the header) through the family pipeline's own ``save_lora_weights``; returns the file."""
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.contiguous() for k, v in lora.tensors.items()}
    pipeline_class.save_lora_weights(
        str(folder), transformer_lora_layers=state, transformer_lora_adapter_metadata=dict(lora.config)
    )
    return folder / LORA_FILE

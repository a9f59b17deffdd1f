"""Bad-input cases for model paths, checkpoints and ``flowrl sample``, in tests/cli/test_bad_inputs.py's format.

``CASES``: (argv to ``flowrl.cli.main``, a substring of the one stderr line); ``{tmp}`` in argv is the test's
tmp dir, which ``prepare(tmp)`` fills (and the test chdirs into); messages hold no ``{tmp}``. Every case must
return 2 and print exactly one line starting ``flowrl: error: ``. ``NEEDS_TRAINER_WIRING`` lists the cases that
were wired in the trainer afterwards.
"""

from __future__ import annotations

from pathlib import Path

P = ["--prompt", "a cat", "--num", "1", "--steps", "1"]
T = ["train", "train.iterations=1"]
CKPT = "{tmp}/run/checkpoints"
Q = "transformer_blocks.0.attn.to_q"
RANK = (
    f"tensor '{Q}.lora_A.default.weight' has shape (4, 32) in the checkpoint but (16, 32) in the model; "
    "check train.lora.rank"
)


def _checkpoint(root: Path, iteration: int, tensors: dict, ema: bool = False, extra: dict | None = None) -> Path:
    import torch

    from flowrl.checkpoint import save_checkpoint

    params = {k: torch.nn.Parameter(v) for k, v in tensors.items()}
    opt = torch.optim.AdamW(list(params.values()), lr=1e-3)
    return save_checkpoint(root, iteration, params, opt, ema=dict(tensors) if ema else None, extra=extra)


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def prepare(tmp: Path) -> None:
    """Model folders and files, a run folder with damaged and mismatched checkpoints."""
    import torch
    from safetensors.torch import save_file

    from flowrl.config import dump_config
    from flowrl.resolve import resolve_config

    tmp = Path(tmp)
    (tmp / "emptydir").mkdir()
    (tmp / "noindex").mkdir()
    (tmp / "noindex" / "config.json").write_text("{}")
    (tmp / "partial").mkdir()
    index = '{"_class_name": "StableDiffusion3Pipeline", "transformer": ["diffusers", "SD3Transformer2DModel"]}'
    (tmp / "partial" / "model_index.json").write_text(index)
    (tmp / "noclass").mkdir()
    (tmp / "noclass" / "model_index.json").write_text('{"transformer": ["diffusers", "SD3Transformer2DModel"]}')
    (tmp / "noweights" / "transformer").mkdir(parents=True)
    (tmp / "noweights" / "model_index.json").write_text(index)
    (tmp / "noweights" / "transformer" / "config.json").write_text('{"_class_name": "SD3Transformer2DModel"}')
    (tmp / "badindex").mkdir()
    (tmp / "badindex" / "model_index.json").write_text('{"transformer": [')
    (tmp / "garbage.safetensors").write_bytes(b"this is not a safetensors file")
    (tmp / "weights.bin").write_bytes(b"\0" * 16)
    save_file({"first_stage_model.decoder.conv_in.weight": torch.zeros(2)}, tmp / "vae.safetensors")
    save_file(
        {"model.diffusion_model.joint_blocks.0.x_block.attn.qkv.weight": torch.zeros(2)},
        tmp / "transformer.safetensors",
    )

    run = tmp / "run"
    run.mkdir()
    (run / "config.yaml").write_text(dump_config(resolve_config("tiny-cpu", [f"output_dir={run}"])))
    root = run / "checkpoints"
    _checkpoint(root, 1, {f"{Q}.lora_A.default.weight": torch.zeros(4, 32)})  # rank 4; tiny-cpu trains rank 16
    _flip_last_byte(_checkpoint(root, 2, {f"{Q}.lora_A.default.weight": torch.zeros(16, 32)}) / "trainable.safetensors")
    (_checkpoint(root, 3, {f"{Q}.lora_A.default.weight": torch.zeros(16, 32)}) / "state.json").write_text('{"iter')
    (_checkpoint(root, 4, {f"{Q}.lora_A.default.weight": torch.zeros(16, 32)}) / "optimizer.safetensors").unlink()
    _checkpoint(tmp / "full" / "checkpoints", 1, {"proj_out.weight": torch.zeros(16, 32)})
    _checkpoint(
        tmp / "other" / "checkpoints",
        1,
        {"transformer_blocks.0.attn.add_q_proj.lora_A.default.weight": torch.zeros(16, 32)},
    )
    _checkpoint(tmp / "orphan", 1, {f"{Q}.lora_A.default.weight": torch.zeros(16, 32)})
    flux_run = {"config": resolve_config("tiny-flux").to_dict()}  # a FLUX run's checkpoint, as the trainer saves it
    _checkpoint(tmp / "fluxrun" / "checkpoints", 1, {f"{Q}.lora_A.default.weight": torch.zeros(16, 32)}, extra=flux_run)
    # pipeline folders of other families, as far as the family check reads them (before any weight loads)
    for name, cls in (("sd3folder", "StableDiffusion3Pipeline"), ("fluxfolder", "FluxPipeline"), ("sdxl", "X")):
        (tmp / name).mkdir()
        (tmp / name / "model_index.json").write_text(f'{{"_class_name": "{cls}"}}')
    (tmp / "sdxl" / "model_index.json").write_text('{"_class_name": "StableDiffusionXLPipeline"}')
    _flip_last_byte(
        _checkpoint(tmp / "allbad" / "checkpoints", 1, {"x.lora_A.default.weight": torch.zeros(1)})
        / "optimizer.safetensors"
    )


SAMPLE = [
    (["sample", *P], "sample: give a run folder or recipe, or --checkpoint PATH"),
    (["sample", "tiny-cpu", *P, "--steps", "0"], "--steps: must be at least 1, got 0"),
    (["sample", "tiny-cpu", *P, "--ema"], "--ema: needs --checkpoint"),
    (["sample", "tiny-cpu", *P, "--out", "{tmp}/weights.bin"], "weights.bin' is a file; expected a folder"),
    (["sample", "tiny-cpu", *P, "--checkpoint", "{tmp}/nope"], "--checkpoint: no such folder "),
    (["sample", "tiny-cpu", *P, "--checkpoint", "{tmp}/weights.bin"], "is a file; expected a checkpoint folder"),
    (
        ["sample", "tiny-cpu", *P, "--checkpoint", "{tmp}/emptydir"],
        "is not a complete flowrl checkpoint (no state.json)",
    ),
    (["sample", *P, "--checkpoint", "{tmp}/run"], "is a run folder; give one of its checkpoints, e.g. "),
    (["sample", *P, "--checkpoint", f"{CKPT}/iter-000001", "--ema"], "iter-000001 has no ema.safetensors"),
    (
        ["sample", *P, "--checkpoint", f"{CKPT}/iter-000002"],
        "iter-000002: trainable.safetensors is corrupt or truncated (checksum mismatch)",
    ),
    (["sample", *P, "--checkpoint", f"{CKPT}/iter-000003"], "iter-000003: state.json is corrupt or truncated"),
    (["sample", *P, "--checkpoint", f"{CKPT}/iter-000004"], "iter-000004: optimizer.safetensors is missing"),
    (["sample", *P, "--checkpoint", "{tmp}/orphan/iter-000001"], "--checkpoint: no config.yaml in"),
    (["sample", *P, "--checkpoint", f"{CKPT}/iter-000001"], RANK),
    (
        ["sample", "tiny-cpu", *P, "--checkpoint", "{tmp}/full/checkpoints/iter-000001"],
        "holds full-weight tensors but the model trains LoRA ones; check train.lora.enabled",
    ),
    (
        ["sample", "tiny-cpu", *P, "--checkpoint", "{tmp}/other/checkpoints/iter-000001"],
        "check train.lora.target_modules",
    ),
]

MODEL_PATHS = [
    (T + ["model.path={tmp}/no-model"], "model.path: no such file or folder '/"),
    (T + ["model.path=./no-model"], "model.path: no such file or folder './no-model'"),
    (T + ["model.path=~/no-such-flowrl-model"], "model.path: no such file or folder '~/no-such-flowrl-model'"),
    (T + ["model.path=models/sd35/medium"], "model.path: no such file or folder 'models/sd35/medium'"),
    (T + ["model.path=emptydir/sd35"], "model.path: no such file or folder 'emptydir/sd35'"),  # emptydir exists here
    (T + ["model.path=missing.safetensors"], "model.path: no such file or folder 'missing.safetensors'"),
    (T + ["model.path={tmp}/emptydir"], "emptydir' is empty; expected a diffusers pipeline folder"),
    (T + ["model.path={tmp}/noindex"], "noindex' has no model_index.json"),
    (T + ["model.path={tmp}/partial"], "lacks transformer/, which its model_index.json lists"),
    (T + ["model.path={tmp}/badindex"], "model_index.json is not valid JSON"),
    (T + ["model.path={tmp}/noclass"], "model_index.json has no _class_name: not a diffusers pipeline index"),
    (T + ["model.path={tmp}/noweights"], "noweights/transformer/ has a config.json but no weights (*.safetensors"),
    (T + ["model.path={tmp}/weights.bin"], "is a file; expected a diffusers folder, a hub id or a .safetensors"),
    (T + ["model.path={tmp}/garbage.safetensors"], "is not a readable .safetensors checkpoint"),
    (T + ["model.path={tmp}/vae.safetensors"], "holds no SD3 transformer weights"),
    (
        T + ["model.path={tmp}/transformer.safetensors"],
        "lacks text_encoder, text_encoder_2, text_encoder_3, vae; set model.config_path",
    ),
    (T + ["model.path=someone/some-sd3-model"], "not a local folder and the hub is offline"),  # a hub id: allowed
    # a model of another family than the recipe's: refused from model_index.json, before any weight loads
    (
        ["validate", "tiny-flux", "model.path={tmp}/sd3folder"],
        "sd3folder' holds a StableDiffusion3Pipeline (family sd3), but model.pipeline is flux, which loads "
        "FluxPipeline; use a recipe of family sd3 (e.g. tiny-cpu with model.path=",
    ),
    (
        T + ["model.path={tmp}/fluxfolder"],
        "fluxfolder' holds a FluxPipeline (family flux), but model.pipeline is sd3, which loads "
        "StableDiffusion3Pipeline; use a recipe of family flux (e.g. tiny-flux",
    ),
    (
        T + ["model.path={tmp}/sdxl"],
        "sdxl' holds a StableDiffusionXLPipeline (no flowrl family loads it), but model.pipeline is sd3",
    ),
    (["validate", "tiny-qwen-image-edit", "model.path={tmp}/fluxfolder"], "which loads QwenImageEditPipeline or Qwen"),
    # another family's tiny model: named, not sent to the hub
    (
        T + ["model.path=tiny-plus"],
        "model.path: 'tiny-plus' is a tiny model of family qwen_image_edit, not of model.pipeline=sd3, whose tiny "
        "models are tiny; use a recipe of family qwen_image_edit (e.g. tiny-qwen-image-edit",
    ),
    (["validate", "tiny-wan", "model.path=tiny-base"], "'tiny-base' is a tiny model of family stable_audio"),
    (["validate", "tiny-flux", "model.path=tiny-a14b"], "'tiny-a14b' is a tiny model of family wan and wan_i2v"),
]

RESUME = [
    (
        T + [f"resume={CKPT}/iter-000002"],
        "iter-000002: trainable.safetensors is corrupt or truncated (checksum mismatch)",
    ),
    (T + [f"resume={CKPT}/iter-000003"], "iter-000003: state.json is corrupt or truncated (not valid JSON"),
    (T + [f"resume={CKPT}/iter-000004"], "iter-000004: optimizer.safetensors is missing"),
    (T + [f"resume={CKPT}/iter-000001"], RANK),
    (T + ["resume={tmp}/full/checkpoints/iter-000001"], "check train.lora.enabled"),
    # the file inside a checkpoint names its folder: this one then fails as that folder does
    (T + [f"resume={CKPT}/iter-000001/state.json"], RANK),
    # a checkpoint of another family: named as such, not as a LoRA rank that does not fit
    (
        T + ["resume={tmp}/fluxrun/checkpoints/iter-000001"],
        "iter-000001' is of family flux (it trained model.pipeline=flux)",
    ),
    (
        T + ["resume={tmp}/fluxrun/checkpoints/iter-000001", "resume_allow_changes=true"],
        "iter-000001' is of family flux (it trained model.pipeline=flux), but this config's model.pipeline is sd3; "
        "a checkpoint continues only with its own family",
    ),
    (["validate", "resume={tmp}/fluxrun/checkpoints/iter-000001"], "is of family flux"),
    (
        ["sample", "tiny-cpu", "--checkpoint", "{tmp}/fluxrun/checkpoints/iter-000001", "--prompt", "a cat"],
        "iter-000001' is of family flux (it trained model.pipeline=flux), but this config's model.pipeline is sd3",
    ),
    (T + ["resume=latest", "output_dir={tmp}/fluxrun"], "resume=latest: checkpoint '"),  # its newest checkpoint
]

# Trainer._resume_checkpoint logs a warning per corrupt checkpoint before raising when none is intact: two
# stderr lines. It passes once the warnings are logged only when an intact checkpoint was found.
NEEDS_TRAINER_WIRING = [
    (T + ["resume=latest", "output_dir={tmp}/allbad"], "optimizer.safetensors is corrupt or truncated"),
]

assert not any("{tmp}" in message for _, message in SAMPLE + MODEL_PATHS + RESUME + NEEDS_TRAINER_WIRING)
CASES = SAMPLE + MODEL_PATHS + RESUME + NEEDS_TRAINER_WIRING

"""model.path: early checks with one-line errors, and single-file checkpoints through ``from_single_file``."""

from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import save_file

from flowrl.pipelines.base import check_model_path
from flowrl.pipelines.kit.loading import HubUnavailableError, single_file_keys
from flowrl.pipelines.sd3 import SD3Adapter
from flowrl.pipelines.sd3.loading import load_sd3_pipeline


def _cfg(path, **kw):
    return SimpleNamespace(
        pipeline="sd3",
        path=path,
        tiny_size="tiny",
        revision=None,
        dtype="fp32",
        resolution=32,
        max_sequence_length=16,
        prompt_cache=16,
        **kw,
    )


def test_hub_ids_tiny_and_pipeline_folders_pass(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "model_index.json").write_text('{"_class_name": "StableDiffusion3Pipeline"}')
    for path in ("tiny", "stabilityai/stable-diffusion-3.5-medium", "sd3", "model", str(tmp_path / "model")):
        check_model_path(_cfg(path))


# ------------------------------------------------------------------------------------------ single files
def _swap(w):
    shift, scale = w.chunk(2)
    return torch.cat([scale, shift])


def sd3_to_original(sd: dict, num_layers: int) -> dict:
    """A diffusers SD3 transformer state dict in the original (MMDiT) single-file layout: the inverse of
    diffusers' ``convert_sd3_transformer_checkpoint_to_diffusers`` (no qk-norm, no dual attention)."""
    out = {"pos_embed": sd["pos_embed.pos_embed"]}
    pairs = [
        ("x_embedder.proj", "pos_embed.proj"),
        ("context_embedder", "context_embedder"),
        ("t_embedder.mlp.0", "time_text_embed.timestep_embedder.linear_1"),
        ("t_embedder.mlp.2", "time_text_embed.timestep_embedder.linear_2"),
        ("y_embedder.mlp.0", "time_text_embed.text_embedder.linear_1"),
        ("y_embedder.mlp.2", "time_text_embed.text_embedder.linear_2"),
        ("final_layer.linear", "proj_out"),
    ]
    for s in ("weight", "bias"):
        out.update({f"{a}.{s}": sd[f"{b}.{s}"] for a, b in pairs})
        out[f"final_layer.adaLN_modulation.1.{s}"] = _swap(sd[f"norm_out.linear.{s}"])
        for i in range(num_layers):
            d, j, last = f"transformer_blocks.{i}.", f"joint_blocks.{i}.", i == num_layers - 1
            out[f"{j}x_block.attn.qkv.{s}"] = torch.cat([sd[f"{d}attn.to_{c}.{s}"] for c in "qkv"])
            out[f"{j}context_block.attn.qkv.{s}"] = torch.cat([sd[f"{d}attn.add_{c}_proj.{s}"] for c in "qkv"])
            out[f"{j}x_block.attn.proj.{s}"] = sd[f"{d}attn.to_out.0.{s}"]
            out[f"{j}x_block.adaLN_modulation.1.{s}"] = sd[f"{d}norm1.linear.{s}"]
            context = sd[f"{d}norm1_context.linear.{s}"]
            out[f"{j}context_block.adaLN_modulation.1.{s}"] = _swap(context) if last else context
            out[f"{j}x_block.mlp.fc1.{s}"] = sd[f"{d}ff.net.0.proj.{s}"]
            out[f"{j}x_block.mlp.fc2.{s}"] = sd[f"{d}ff.net.2.{s}"]
            if not last:  # the last block's context stream ends after attention
                out[f"{j}context_block.attn.proj.{s}"] = sd[f"{d}attn.to_add_out.{s}"]
                out[f"{j}context_block.mlp.fc1.{s}"] = sd[f"{d}ff_context.net.0.proj.{s}"]
                out[f"{j}context_block.mlp.fc2.{s}"] = sd[f"{d}ff_context.net.2.{s}"]
    return {"model.diffusion_model." + k: v.contiguous() for k, v in out.items()}


@pytest.fixture(scope="module")
def single_file(tmp_path_factory):
    """A tiny SD3 saved as a diffusers folder (the base) and a fine-tuned transformer as an original-layout
    single file (as SD3.5 fine-tunes ship: the transformer only)."""
    from flowrl.pipelines.sd3.tiny import build_tiny_sd3_pipeline

    root = tmp_path_factory.mktemp("single")
    pipe = build_tiny_sd3_pipeline(32, "tiny", seed=0)
    pipe.save_pretrained(root / "base")
    torch.manual_seed(1)
    with torch.no_grad():
        for p in pipe.transformer.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    tuned = {k: v.clone() for k, v in pipe.transformer.state_dict().items()}
    save_file(sd3_to_original(tuned, pipe.transformer.config.num_layers), root / "tuned.safetensors")
    return root, tuned, pipe


def test_a_single_file_loads_through_from_single_file(single_file):
    root, tuned, original = single_file
    pipe = load_sd3_pipeline(str(root / "tuned.safetensors"), config=str(root / "base"))
    got = pipe.transformer.state_dict()
    assert set(got) == set(tuned) and all(torch.equal(got[k], tuned[k]) for k in tuned)
    for name in ("vae", "text_encoder", "text_encoder_2", "text_encoder_3"):  # from the config folder
        want = getattr(original, name).state_dict()
        assert all(torch.equal(v, want[k]) for k, v in getattr(pipe, name).state_dict().items()), name
    assert pipe.tokenizer("a red cat").input_ids == original.tokenizer("a red cat").input_ids


def test_the_adapter_samples_from_a_single_file(single_file):
    root, _, original = single_file
    cfg = _cfg(str(root / "tuned.safetensors"), config_path=str(root / "base"))
    check_model_path(cfg)
    adapter = SD3Adapter.from_config(cfg)
    ref = SD3Adapter(original, 32, 16)
    x = adapter.initial_noise(2, torch.Generator().manual_seed(0))
    with torch.no_grad():
        v = adapter.velocity(x, 0.5, adapter.model_inputs(adapter.encode_prompts(["a cat", "a dog"]), 4.5), 4.5)
        w = ref.velocity(x, 0.5, ref.model_inputs(ref.encode_prompts(["a cat", "a dog"]), 4.5), 4.5)
    assert torch.allclose(v, w, atol=1e-5)


def test_a_single_file_without_config_offline_says_what_it_needs(single_file, tmp_path, monkeypatch):
    _, tuned, original = single_file
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    sd = sd3_to_original(tuned, 2)
    sd.update({f"first_stage_model.{k}": v for k, v in original.vae.state_dict().items()})
    for prefix in ("clip_l", "clip_g", "t5xxl"):
        sd[f"text_encoders.{prefix}.transformer.x"] = torch.zeros(1)  # marks the part as present
    save_file(sd, tmp_path / "all.safetensors")
    check_model_path(_cfg(str(tmp_path / "all.safetensors")))  # every part present: allowed without a config
    with pytest.raises(
        HubUnavailableError,
        match=r"the single file's pipeline configs and tokenizers come from the "
        r"hub id diffusers guessed from its keys, which could not be loaded \(.*set model.config_path",
    ):
        load_sd3_pipeline(str(tmp_path / "all.safetensors"))


def test_single_file_keys_reads_only_the_header(single_file):
    root, _, _ = single_file
    keys = single_file_keys(root / "tuned.safetensors")
    assert "model.diffusion_model.joint_blocks.0.x_block.attn.qkv.weight" in keys


def test_every_family_names_the_pipeline_classes_and_tiny_models_it_loads():
    """The family check (``check_model_family``) reads each adapter's pipeline classes and tiny paths: every family
    declares them, its tiny recipe's model.path is one of its tiny paths, and no two families share a class."""
    from flowrl.pipelines.base import adapter_class, list_pipelines, pipeline_classes_of, tiny_paths_of
    from flowrl.resolve import resolve_config

    owner: dict[str, str] = {}
    for name in list_pipelines():
        adapter = adapter_class(name)
        classes = pipeline_classes_of(adapter)
        assert classes and all(c.endswith("Pipeline") for c in classes), name
        for c in classes:
            assert owner.setdefault(c, name) == name, (c, owner[c], name)
        assert resolve_config(adapter.tiny_recipe).model.path in tiny_paths_of(adapter), name

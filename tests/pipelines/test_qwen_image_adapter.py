"""The qwen_image family's own contract values, beyond the conformance kit (tests/pipelines/test_family_contract.py
runs the shared contract: shapes, the noise-free rollout equal to QwenImagePipeline's own call, on-policy
log-probs, the LoRA export, every method): the tiny tokenizer drops exactly the templates' prefixes, prompt rows
of different lengths padded with a mask give each row's own velocity, true CFG as the pipeline writes it, the
published sizes."""

import pytest
import torch

from flowrl.config import ModelConfig
from flowrl.pipelines.base import adapter_class, list_pipelines, select
from flowrl.pipelines.kit.qwen_vl import make_qwen_tokenizer
from flowrl.pipelines.qwen_image import QwenImageAdapter
from flowrl.resolve import resolve_config

SHORT, LONG = "a red cat", "a small blue dog next to a large white house by the sea"


@pytest.fixture(scope="module")
def adapter():
    return QwenImageAdapter.from_config(resolve_config("tiny-qwen-image").model)


def _noise(adapter, n, seed=0):
    return adapter.initial_noise(n, torch.Generator().manual_seed(seed))


def test_registered_with_its_media_and_tiny_recipe():
    assert "qwen_image" in list_pipelines() and adapter_class("qwen_image") is QwenImageAdapter
    assert QwenImageAdapter.media_kind == "image" and QwenImageAdapter.tiny_recipe == "tiny-qwen-image"


def test_the_tiny_tokenizer_drops_exactly_the_templates_prefixes(adapter):
    """Qwen's BPE makes 34 tokens of the text-to-image template before the prompt and 64 of the edit template
    before its vision tokens (the pipelines' prompt_template_encode_start_idx); the tiny tokenizer makes the
    same counts, so the embeddings start at the user's prompt."""
    tok = make_qwen_tokenizer()
    pipe = adapter.pipe
    ids = tok(pipe.prompt_template_encode.format(SHORT)).input_ids
    assert tok.convert_ids_to_tokens(ids)[pipe.prompt_template_encode_start_idx] == "a"
    from diffusers import QwenImageEditPipeline

    edit = QwenImageEditPipeline.__init__.__code__.co_consts  # the template is a constant of the constructor
    template = next(c for c in edit if isinstance(c, str) and "<|vision_start|>" in c)
    tokens = tok.convert_ids_to_tokens(tok(template.format(SHORT)).input_ids)
    assert tokens.index("<|vision_start|>") == 64
    # "a red cat" + <|im_end|> \n <|im_start|> assistant \n: the pipeline keeps the template's suffix
    embeds, mask = pipe.encode_prompt(SHORT, device="cpu")
    assert embeds.shape[1] == 3 + 5 and mask is None


@torch.no_grad()
def test_rows_of_different_lengths_are_padded_with_a_mask_and_keep_their_own_velocity(adapter):
    cond = adapter.encode_prompts([SHORT, LONG])
    mask = cond["prompt_embeds_mask"]
    assert mask.shape == cond["prompt_embeds"].shape[:2] and mask[1].all() and not mask[0].all()
    assert torch.equal(cond["prompt_embeds"][0, int(mask[0].sum()) :], torch.zeros_like(cond["prompt_embeds"][0, 8:]))
    x = _noise(adapter, 2)
    both = adapter.velocity(x, 0.6, adapter.model_inputs(cond, 1.0), 1.0)
    for i, prompt in enumerate((SHORT, LONG)):
        alone = adapter.encode_prompts([prompt])
        assert "prompt_embeds_mask" not in adapter.model_inputs(alone, 1.0)  # no padding: no mask, as the pipeline
        own = adapter.velocity(x[i : i + 1], 0.6, adapter.model_inputs(alone, 1.0), 1.0)
        torch.testing.assert_close(both[i : i + 1], own, rtol=1e-5, atol=1e-5)
    # selecting rows keeps each with its mask
    assert torch.equal(select(cond, torch.tensor([1]))["prompt_embeds_mask"], mask[1:])


@torch.no_grad()
def test_true_cfg_is_the_pipelines_norm_rescaled_combination(adapter):
    """QwenImagePipeline: v = v_u + w (v_c - v_u), then v * |v_c| / |v| per token over the channels; the negative
    is each row's own, "" standing for the default " "."""
    w, x = 4.0, _noise(adapter, 2, seed=3)
    cond = adapter.encode_prompts([SHORT, LONG], ["a dark photo", ""])
    v = adapter.velocity(x, 0.4, adapter.model_inputs(cond, w), w)

    def alone(prompt, i):
        return adapter.velocity(x[i : i + 1], 0.4, adapter.model_inputs(adapter.encode_prompts([prompt]), 1.0), 1.0)

    for i, (prompt, negative) in enumerate(((SHORT, "a dark photo"), (LONG, " "))):
        v_c, v_u = alone(prompt, i), alone(negative, i)
        guided = v_u + w * (v_c - v_u)
        want = guided * v_c.norm(dim=-1, keepdim=True) / guided.norm(dim=-1, keepdim=True)
        torch.testing.assert_close(v[i : i + 1], want, rtol=1e-4, atol=1e-5)
    default = adapter.velocity(x, 0.4, adapter.model_inputs(adapter.encode_prompts([SHORT, LONG]), w), w)
    torch.testing.assert_close(default[1], v[1], rtol=1e-5, atol=1e-6)  # no negatives: " " for every row
    assert adapter.guidance(w).passes == 2 and adapter.guidance(1.0).passes == 1


def test_bad_inputs_are_refused_in_one_line():
    with pytest.raises(ValueError, match="^model.max_sequence_length: Qwen-Image takes at most 1024 tokens, got 2048$"):
        QwenImageAdapter.from_config(ModelConfig(pipeline="qwen_image", path="tiny", max_sequence_length=2048))
    with pytest.raises(FileNotFoundError, match="^model.path: no such file or folder '/no/such/qwen'$"):
        QwenImageAdapter.check_model_path(ModelConfig(pipeline="qwen_image", path="/no/such/qwen"))


def test_the_published_size():
    """Qwen/Qwen-Image from the built-in table: the 20.43B transformer, Qwen2.5-VL-7B-Instruct (8.29B with its
    vision tower), the 126.9M VAE; 1024 image tokens at 512 px, two rows a sample under true CFG."""
    from flowrl.estimate import model_size

    size = model_size(resolve_config("qwen-image-ocr"))
    assert size.source.startswith("built-in table")
    assert size.transformer_params == pytest.approx(20.43e9, rel=1e-3)
    assert size.text_encoder_params == pytest.approx(8.292e9, rel=1e-3)
    assert size.vae_params == pytest.approx(126.9e6, rel=1e-3)
    assert (size.image_tokens, size.text_tokens, size.hidden, size.layers, size.passes) == (1024, 256, 3072, 60, 2)


def test_the_gpu_stage_builds_the_published_size(tmp_path):
    """What ``--what qwen_image`` builds on the GPU, built here on meta: the 20.43B transformer and Qwen2.5-VL-7B
    (8.29B) in bf16, the VAE in fp32; its saved configs give the estimate the same counts; the stage's settings."""
    from _gpu_stage import published_build

    _, cfg, m = published_build("qwen_image", tmp_path, (20_430_401_088, 8_292_166_656))
    assert (m.image_tokens, m.passes, cfg.sample.num_steps, cfg.train.gradient_checkpointing) == (1024, 2, 10, True)

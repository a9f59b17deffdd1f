"""A tiny Qwen3 text encoder and its chat tokenizer, built in code: the text side of the families that prompt a
Qwen3 model through its chat template (Z-Image: the second-to-last hidden state of ``Qwen3Model``; FLUX.2-klein:
hidden states 9, 18 and 27 of ``Qwen3ForCausalLM``, stacked).

The tokenizer is the kit's word-level one (``kit.tiny.make_word_tokenizer``) with Qwen's chat special tokens
added and a chat template that lays a conversation out as Qwen3's does: ``<|im_start|>user ... <|im_end|>``,
then ``<|im_start|>assistant`` and, with ``enable_thinking=False``, the empty ``<think> </think>`` block. The
pipelines call ``tokenizer.apply_chat_template(..., enable_thinking=...)`` and pad to ``max_length`` with the
pad token (``<|endoftext|>``, as Qwen's), on the right. Nothing downloads; weights come from a fixed seed.
"""

from __future__ import annotations

from flowrl.pipelines.kit.tiny import make_word_tokenizer, seeded

CHAT_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>")

# Qwen3's template reduced to what the pipelines send: user turns, the generation prompt, the thinking switch
QWEN3_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)


def qwen3_tokenizer(max_length: int = 512):
    """A word-level ``PreTrainedTokenizerFast`` with Qwen's chat tokens and a Qwen3-shaped chat template; pads
    with ``<|endoftext|>`` on the right, no BOS/EOS of its own (the template places the chat tokens)."""
    from tokenizers import processors

    tok = make_word_tokenizer(max_length, vocabulary=None)
    tok.add_special_tokens({"additional_special_tokens": list(CHAT_TOKENS)})
    tok.add_tokens(["user", "assistant"])
    tok.pad_token = "<|endoftext|>"
    tok.padding_side = "right"
    tok._tokenizer.post_processor = processors.TemplateProcessing(single="$A", special_tokens=[])
    tok.chat_template = QWEN3_CHAT_TEMPLATE
    return tok


def qwen3_config(vocab: int, hidden: int, layers: int, pad_token_id: int):
    """A ``Qwen3Config`` at toy width: 2 query heads, 1 key/value head (grouped-query attention, as Qwen3's)."""
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=hidden // 2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        pad_token_id=pad_token_id,
    )


def qwen3_encoder(tokenizer, hidden: int, layers: int, *, causal_lm: bool = False, seed: int = 0):
    """A tiny ``Qwen3Model`` (``causal_lm``: ``Qwen3ForCausalLM``, as FLUX.2-klein loads) for ``tokenizer``, in
    eval mode, its weights from ``seed``'s text-encoder stream."""
    from transformers import Qwen3ForCausalLM, Qwen3Model

    config = qwen3_config(len(tokenizer), hidden, layers, tokenizer.pad_token_id)
    with seeded(seed, "text_encoder"):
        model = (Qwen3ForCausalLM if causal_lm else Qwen3Model)(config)
    return model.eval()

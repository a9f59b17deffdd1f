"""The Soft-TIFA judge: the probability of each answer form's first token, from a local or a served VLM.

The official judge is ``Qwen/Qwen3-VL-8B-Instruct`` (dtype "auto", greedy, one new token), asked with the
image first, then the text ``"{question} Answer in one word."`` (``scoring.judge_text``).

* **Local** (``local_judge``): a transformers image-text-to-text model through
  ``flowrl.reward_models.vlm.TransformersChat.next_token_distribution`` (the fp32 softmax of the first
  answer token's logits, as the official ``generate(max_new_tokens=1, output_scores=True)`` gives it); a
  form's id is ``tokenizer.encode(form)[0]`` as in the official code. One request at a time, as the
  official code asks (``--batch-size N`` batches N with left padding: faster, rounded differently in bf16).
* **Served** (``served_judge``): an OpenAI-compatible endpoint (vLLM) asked for a 1-token completion with
  ``top_logprobs`` (``OpenAIChat.first_token_choices``, PNG image, temperature 0) and, for vLLM,
  ``return_tokens_as_token_ids`` so that candidates are matched by id; the ids come from the judge's
  tokenizer (``--judge-tokenizer``, by default the served model's name). A form whose token is not among the
  ``top_logprobs`` candidates counts 0, so the served score is a lower bound that differs from the local
  one by at most the mass below the last candidate (recorded per question as ``floor``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

OFFICIAL_JUDGE = "Qwen/Qwen3-VL-8B-Instruct"


@dataclass
class Reply:
    """One question: the probability of each form's first token (in form order) and the argmax token."""

    probs: list[float]
    argmax: str
    floor: float | None = None  # served: the probability of the last top_logprobs candidate
    ids: list[int] | None = None  # each form's first token id (a repeated id is counted again, as officially)


def first_token_id(tokenizer: Any, form: str) -> int:
    """``tokenizer.encode(form)[0]``, the official rule."""
    ids = tokenizer.encode(form)
    if not ids:
        raise ValueError(f"the judge's tokenizer encodes {form!r} to no token")
    return int(ids[0])


class LocalJudge:
    """A ``TransformersChat`` (or any object with ``next_token_distribution`` and ``tokenizer``)."""

    backend_name = "transformers"

    def __init__(self, chat: Any, info: dict[str, Any]):
        self.chat, self.tokenizer, self.info = chat, chat.tokenizer, info

    def ask(self, images: Sequence[np.ndarray], texts: Sequence[str], forms: Sequence[Sequence[str]]) -> list[Reply]:
        from flowrl.reward_models.vlm import ChatRequest

        dist = self.chat.next_token_distribution([ChatRequest([img], t) for img, t in zip(images, texts)])  # (N, V)
        out = []
        for row, row_forms in zip(dist, forms):
            ids = [first_token_id(self.tokenizer, f) for f in row_forms]
            probs = [float(row[i].item()) for i in ids]
            out.append(Reply(probs, self.tokenizer.decode([int(row.argmax())]), ids=ids))
        return out


def _candidate_id(token: str, by_text: dict[str, int]) -> int | None:
    if token.startswith("token_id:"):
        try:
            return int(token.split(":", 1)[1])
        except ValueError:
            return None
    return by_text.get(token)


class ServedJudge:
    """An ``OpenAIChat`` asked for ``top_logprobs`` of one token; ids from the judge's tokenizer."""

    backend_name = "openai"

    def __init__(self, chat: Any, tokenizer: Any, info: dict[str, Any], token_ids: bool = True):
        self.chat, self.tokenizer, self.info, self.token_ids = chat, tokenizer, info, token_ids

    def _decode(self, token: str) -> str:
        if token.startswith("token_id:"):
            try:
                return self.tokenizer.decode([int(token.split(":", 1)[1])])
            except ValueError:
                return token
        return token

    def ask(self, images: Sequence[np.ndarray], texts: Sequence[str], forms: Sequence[Sequence[str]]) -> list[Reply]:
        from flowrl.reward_models.vlm import ChatRequest

        options = {"return_tokens_as_token_ids": True} if self.token_ids else {}
        choices = self.chat.first_token_choices([ChatRequest([img], t) for img, t in zip(images, texts)], **options)
        out = []
        for choice, row_forms in zip(choices, forms):
            content = ((choice.get("logprobs") or {}).get("content")) or []
            if not content:
                raise RuntimeError("the judge endpoint returned no logprobs; serve the model with logprobs enabled")
            first = content[0]
            candidates = first.get("top_logprobs") or [
                {"token": first.get("token", ""), "logprob": first.get("logprob")}
            ]
            ids = [first_token_id(self.tokenizer, f) for f in row_forms]
            by_text = {self.tokenizer.decode([i]): i for i in ids}
            mass: dict[int, float] = {}
            for cand in candidates:
                cid = _candidate_id(str(cand.get("token", "")), by_text)
                if cid is not None and cid not in mass:
                    mass[cid] = math.exp(float(cand.get("logprob", -math.inf)))
            floor = math.exp(float(candidates[-1].get("logprob", -math.inf)))
            argmax = self._decode(str(first.get("token", "")))
            out.append(Reply([mass.get(i, 0.0) for i in ids], argmax, floor, ids))
        return out


def local_judge(model: str = OFFICIAL_JUDGE, device: str | None = None, dtype: str = "auto", batch_size: int = 1,
                version: str | None = None, chat: Any = None) -> LocalJudge:  # fmt: skip
    """A local judge; ``dtype`` "auto" is bf16 (the official ``dtype="auto"`` for Qwen3-VL's bf16 weights)."""
    import torch

    from flowrl.reward_models.vlm import TransformersChat

    dtypes = {"auto": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    if dtype not in dtypes:
        raise ValueError(f"--judge-dtype {dtype!r}: choose one of {', '.join(dtypes)}")
    if chat is None:
        chat = TransformersChat.from_pretrained(model, device, dtypes[dtype], batch_size, reward="geneval2 judge")
    commit = getattr(getattr(chat.model, "config", None), "_commit_hash", None)
    info = {"model": model, "version": version or commit, "backend": "transformers", "base_url": None,
            "dtype": dtype, "batch_size": chat.batch_size}  # fmt: skip
    return LocalJudge(chat, info)


def served_judge(base_url: str, model: str, tokenizer: Any = None, api_key: str | None = None,
                 top_logprobs: int = 20, token_ids: bool = True, timeout: float = 120.0, retries: int = 3,
                 concurrency: int = 8, version: str | None = None) -> ServedJudge:  # fmt: skip
    """A judge behind an OpenAI-compatible endpoint; ``tokenizer`` a tokenizer object or a name/folder."""
    import os

    from flowrl.reward_models.vlm import OpenAIChat

    if tokenizer is None or isinstance(tokenizer, str):
        from transformers import AutoTokenizer

        from flowrl.reward_models.loading import load_pretrained

        tokenizer = load_pretrained(AutoTokenizer, tokenizer or model, "geneval2 judge", "tokenizer")
    api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
    chat = OpenAIChat(base_url, model, api_key, timeout=timeout, retries=retries, concurrency=concurrency,
                      top_logprobs=top_logprobs)  # fmt: skip
    info = {"model": model, "version": version, "backend": "openai", "base_url": base_url,
            "top_logprobs": top_logprobs, "token_ids": token_ids}  # fmt: skip
    return ServedJudge(chat, tokenizer, info, token_ids)

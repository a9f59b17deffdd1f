"""Tiny stand-ins for every scorer of ``flowrl eval checkpoint``, written to a folder as the real ones are loaded
(real classes, random weights, offline): ``tiny_scorer_options(folder, judge_url)`` returns the ``--option``
values that point the command at them. The UnifiedReward judge is a loopback endpoint (``FinalScoreJudge``)
whose every reply is ``Final Score: 4``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from _loopback import JsonHandler

ASSETS = Path(__file__).parents[1] / "assets" / "rewards"
TINY_OPENCLIP = "flowrl-tiny-openclip"


class FinalScoreJudge(JsonHandler):
    """An OpenAI-compatible chat endpoint that answers every request ``Yes. Final Score: 4`` (UnifiedReward reads
    4, DPG-Bench's first-word rule yes), with the first token's top log-probabilities GenEval 2's served judge
    reads (token ids 0, 10, 1 at 0.5, 0.3, 0.1)."""

    def do_GET(self):  # /models
        self._send(200, {"data": [{"id": "served"}]})

    texts: list = []  # the text of every request's last message part, in order

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        content = body["messages"][-1]["content"]
        FinalScoreJudge.texts.append(content[-1]["text"] if isinstance(content, list) else content)
        top = [{"token": f"token_id:{i}", "logprob": math.log(p)} for i, p in ((0, 0.5), (10, 0.3), (1, 0.1))]
        message = {"role": "assistant", "content": "Yes. Final Score: 4"}
        logprobs = {"content": [{"token": "token_id:0", "top_logprobs": top}]}
        self._send(200, {"choices": [{"message": message, "logprobs": logprobs}]})


def _clip(folder: Path) -> Path:
    from helpers_geneval import saved
    from tiny_clip import tiny_clip

    return saved(folder, *tiny_clip())


def _hpsv2(path: Path) -> Path:
    import open_clip

    open_clip.add_model_config(ASSETS / f"{TINY_OPENCLIP}.json")
    torch.manual_seed(0)
    model = open_clip.create_model(TINY_OPENCLIP, pretrained=None)
    torch.save({"state_dict": model.state_dict()}, path)
    return path


def _imagereward(folder: Path) -> dict:
    """ImageReward's three files (checkpoint in BLIP's key layout, med config, tokenizer) at a tiny size."""
    from transformers import BertTokenizer

    from flowrl.reward_models.imagereward import ImageRewardModel, text_config, vision_config

    folder.mkdir(parents=True, exist_ok=True)
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "cat", "red", "cube", "on", "the", "photo", "of"]
    (folder / "vocab.txt").write_text("\n".join(words) + "\n")
    tokenizer = BertTokenizer(str(folder / "vocab.txt"))
    tokenizer.save_pretrained(folder / "tokenizer")
    med = {"vocab_size": len(tokenizer) + 2, "hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 1,
           "num_attention_heads": 4, "max_position_embeddings": 64, "layer_norm_eps": 1e-12, "hidden_act": "gelu",
           "pad_token_id": 0, "add_cross_attention": True}  # fmt: skip
    (folder / "med_config.json").write_text(json.dumps(med))
    vision = {"hidden_size": 24, "intermediate_size": 40, "num_hidden_layers": 1, "num_attention_heads": 4,
              "image_size": 32, "patch_size": 8}  # fmt: skip
    torch.manual_seed(0)
    model = ImageRewardModel(vision_config(**vision), text_config(med, 24))
    released = {}  # transformers names -> the BLIP names of ImageReward.pt (what convert_imagereward_state_dict reads)
    for key, value in model.state_dict().items():
        if key.startswith("vision."):
            k = key[len("vision.") :]
            for a, b in (("embeddings.class_embedding", "cls_token"), ("embeddings.position_embedding", "pos_embed"),
                         ("embeddings.patch_embedding.", "patch_embed.proj."), ("post_layernorm.", "norm."),
                         ("encoder.layers.", "blocks."), ("layer_norm1", "norm1"), ("layer_norm2", "norm2"),
                         ("self_attn.projection", "attn.proj"), ("self_attn.qkv", "attn.qkv")):  # fmt: skip
                k = k.replace(a, b)
            released["blip.visual_encoder." + k] = value
        elif key.startswith("text."):
            released["blip.text_encoder." + key[len("text.") :]] = value
        else:
            released[key] = value
    torch.save({"state_dict": released}, folder / "ImageReward.pt")
    return {"checkpoint": str(folder / "ImageReward.pt"), "med_config": str(folder / "med_config.json"),
            "tokenizer": str(folder / "tokenizer"), "vision_overrides": vision}  # fmt: skip


def _geneval(folder: Path) -> dict:
    from helpers_geneval import TINY_CLIP, register_tiny_clip, save_tiny_clip_weights, save_tiny_detector

    register_tiny_clip(folder)
    return {"detector": str(save_tiny_detector(folder / "detector")), "clip_arch": TINY_CLIP,
            "clip_pretrained": str(save_tiny_clip_weights(folder / "geneval_clip.pt")), "device": "cpu"}  # fmt: skip


def tiny_scorer_options(folder: Path, judge_url: str) -> list[str]:
    """Write every tiny scorer under ``folder``; the ``--option NAME.key=value`` list that selects them."""
    from flowrl.reward_models.aesthetic import PreferenceMLP

    folder.mkdir(parents=True, exist_ok=True)
    clip = _clip(folder / "clip")
    torch.manual_seed(3)
    torch.save(PreferenceMLP(16).state_dict(), folder / "aesthetic_mlp.pth")
    options = {
        "pickscore": {"model": clip, "processor": clip, "device": "cpu"},
        "clipscore": {"model": clip, "device": "cpu"},
        "aesthetic": {"clip": clip, "predictor": folder / "aesthetic_mlp.pth", "device": "cpu"},
        "hpsv2": {"checkpoint": _hpsv2(folder / "hps.pt"), "arch": TINY_OPENCLIP, "device": "cpu"},
        "imagereward": {**_imagereward(folder / "imagereward"), "device": "cpu"},
        "unifiedreward": {"base_url": judge_url, "model": "served", "api_key": "k", "retries": 0},
        "geneval": _geneval(folder),
    }
    out = []
    for name, values in options.items():
        for key, value in values.items():
            text = json.dumps(value) if isinstance(value, dict) else str(value)
            out += ["--option", f"{name}.{key}={text}"]
    return out

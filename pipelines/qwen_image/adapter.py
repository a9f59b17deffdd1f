"""Qwen-Image text-to-image (``model.pipeline: qwen_image``): ``QwenImagePipeline`` through the Qwen-Image core
(``flowrl.pipelines.kit.qwen_image``, which says what the adapter keeps of the pipeline); this module adds the
loader and the tiny build."""

from __future__ import annotations

import torch

from flowrl.pipelines.kit.loading import check_folder_or_hub, load_pretrained_pipeline
from flowrl.pipelines.kit.qwen_image import QWEN_IMAGE_LORA_TARGETS, QwenImageCore

__all__ = ["QWEN_IMAGE_LORA_TARGETS", "QwenImageAdapter", "check_model_path", "load_qwen_image_pipeline"]


def check_model_path(model_cfg) -> None:
    """Refuse a ``model.path`` that cannot load as a Qwen-Image pipeline before any model is built."""
    if model_cfg.path != "tiny":
        check_folder_or_hub(model_cfg.path, "qwen_image", "Qwen-Image")


def load_qwen_image_pipeline(
    path: str, dtype: str = "fp32", revision: str | None = None, class_name: str = "QwenImagePipeline"
):
    """``<class_name>.from_pretrained`` from a hub id or a local folder, with a one-line error."""
    return load_pretrained_pipeline(class_name, path, dtype, revision)


class QwenImageAdapter(QwenImageCore):
    """Qwen-Image for RL. ``pipe`` is a ``QwenImagePipeline``; the transformer is the policy."""

    check_model_path = staticmethod(check_model_path)
    tiny_recipe = "tiny-qwen-image"
    pipeline_class = "QwenImagePipeline"

    @classmethod
    def build_tiny(cls, seed: int):
        from flowrl.pipelines.qwen_image.tiny import build_tiny_qwen_image

        return build_tiny_qwen_image(seed=seed)

    @classmethod
    def from_config(cls, model_cfg, device: torch.device | str = "cpu", seed: int = 0):
        """Build from ``ModelConfig``: ``path="tiny"`` builds the offline tiny model (``model.tiny_size`` does not
        apply), else ``<pipeline_class>.from_pretrained`` of a hub id or local folder."""
        if model_cfg.path == "tiny":
            pipe = cls.build_tiny(seed)
        else:
            cls.check_model_path(model_cfg)
            pipe = load_qwen_image_pipeline(model_cfg.path, model_cfg.dtype, model_cfg.revision, cls.pipeline_class)
        return cls.from_pipeline(pipe, model_cfg, device)

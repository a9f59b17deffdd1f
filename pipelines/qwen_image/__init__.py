"""Qwen-Image (``model.pipeline: qwen_image``): ``adapter`` (``QwenImageAdapter``), ``layout`` (packed tokens and
the shift ``mu``) and ``tiny`` (the offline tiny Qwen-Image with a tiny Qwen2.5-VL text encoder)."""

from flowrl.pipelines.qwen_image.adapter import QWEN_IMAGE_LORA_TARGETS, QwenImageAdapter, check_model_path

__all__ = ["QWEN_IMAGE_LORA_TARGETS", "QwenImageAdapter", "check_model_path"]

"""Qwen-Image-Edit and Qwen-Image-Edit-Plus (``model.pipeline: qwen_image_edit``): ``adapter``
(``QwenImageEditAdapter``: source images through the VL encoder and as latent tokens), ``layout`` and ``tiny``."""

from flowrl.pipelines.qwen_image_edit.adapter import QwenImageEditAdapter, check_model_path

__all__ = ["QwenImageEditAdapter", "check_model_path"]

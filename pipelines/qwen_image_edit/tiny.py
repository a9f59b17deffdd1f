"""The offline tiny Qwen-Image-Edit and Qwen-Image-Edit-Plus: the real ``QwenImageEditPipeline`` /
``QwenImageEditPlusPipeline`` classes at toy sizes, built in code (the Qwen-Image kit's components plus the
``Qwen2VLProcessor`` through which the tiny Qwen2.5-VL sees the source images)."""

from __future__ import annotations

from flowrl.pipelines.kit.qwen_image import tiny_qwen_image_components
from flowrl.pipelines.kit.qwen_vl import tiny_qwen_processor


def build_tiny_qwen_image_edit(seed: int = 0, plus: bool = False):
    """A tiny ``QwenImageEditPipeline`` (``plus``: ``QwenImageEditPlusPipeline``, 1 to 3 source images), built
    offline: ``tiny_qwen_image_components`` and a ``Qwen2VLProcessor`` on their tokenizer (the tiny vision tower's
    14-pixel patches merged 2x2; it shrinks each source image to at most 56 x 56 pixels, 4 vision tokens)."""
    import diffusers

    components = tiny_qwen_image_components(seed)
    cls = diffusers.QwenImageEditPlusPipeline if plus else diffusers.QwenImageEditPipeline
    pipe = cls(**components, processor=tiny_qwen_processor(components["tokenizer"]))
    pipe.set_progress_bar_config(disable=True)
    return pipe

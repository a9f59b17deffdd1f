"""Wan image-to-video (``model.pipeline: wan_i2v``): Wan 2.1 I2V, Wan 2.2 I2V-A14B and Wan 2.2 TI2V-5B's image mode
on ``WanImageToVideoPipeline``: ``adapter`` (``WanI2VAdapter``), ``layout`` and ``tiny``. It extends the Wan
text-to-video family (``flowrl.pipelines.wan``), whose pieces it reuses."""

from flowrl.pipelines.wan_i2v.adapter import TINY_PATHS, WanI2VAdapter, check_model_path

__all__ = ["TINY_PATHS", "WanI2VAdapter", "check_model_path"]

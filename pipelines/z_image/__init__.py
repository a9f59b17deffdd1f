"""Z-Image and Z-Image-Turbo (``model.pipeline: z_image``): ``adapter`` (``ZImageAdapter``), ``layout`` (the
unpacked 16-channel latent) and ``tiny`` (the offline tiny Z-Image)."""

from flowrl.pipelines.z_image.adapter import Z_IMAGE_LORA_TARGETS, ZImageAdapter, check_model_path

__all__ = ["Z_IMAGE_LORA_TARGETS", "ZImageAdapter", "check_model_path"]

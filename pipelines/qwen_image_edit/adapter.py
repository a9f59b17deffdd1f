"""Qwen-Image-Edit and Qwen-Image-Edit-Plus (``model.pipeline: qwen_image_edit``), built from
``QwenImageEditPipeline`` / ``QwenImageEditPlusPipeline``'s public pieces on the Qwen-Image core
(``flowrl.pipelines.kit.qwen_image``: text, packed latents, sigmas, true CFG, decode).

What the edit pipelines add, and how the adapter keeps it:

* **Source images** (``source_images``: 1 for Edit, 1 to 3 for Edit-Plus; the pipeline class decides) are first
  fitted to the output's size (every row of a batch then shares one source size, as the transformer's RoPE
  needs), then handed to the pipeline's own pieces as PIL images, as its call gets them.
* **The VL encoder sees them**: ``encode_prompt(prompt, image=...)`` runs Qwen2.5-VL over the edit template with
  the vision tokens (Edit: the source at the VAE size; Edit-Plus: each at 384 x 384 area, "Picture i:" before
  each); the negative prompt sees the same images, so every row keeps its own negative rows.
* **Their latents join the sequence**: each source is VAE-encoded at a 1024 x 1024 area (``_encode_vae_image``,
  the distribution's mode, normalised by the VAE's ``latents_mean`` / ``latents_std``) and packed: the row's
  ``image_latents`` (B, N_src, 64) follow the noisy tokens in every forward, ``img_shapes`` lists their grids
  after the output's, and only the first N tokens of the output are the velocity.
* Rows of one call carry the same number of source images (the transformer's RoPE takes one layout a batch).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

import torch

from flowrl.pipelines.base import Conditioning
from flowrl.pipelines.kit.adapter import Draw
from flowrl.pipelines.kit.loading import check_folder_or_hub, load_pretrained_pipeline
from flowrl.pipelines.kit.prompts import cached_rows
from flowrl.pipelines.kit.qwen_image import DEFAULT_NEGATIVE, QwenImageCore, img_shape, pad_rows
from flowrl.pipelines.qwen_image_edit import layout

CONDITION_AREA = 384 * 384  # QwenImageEditPlusPipeline: what the VL encoder sees of each source image


TINY_PATHS = {"tiny": {}, "tiny-plus": {"plus": True}}  # model.path -> the tiny Edit / Edit-Plus builder's keywords


def check_model_path(model_cfg) -> None:
    """Refuse a ``model.path`` that cannot load as a Qwen-Image-Edit pipeline before any model is built."""
    if model_cfg.path not in TINY_PATHS:
        check_folder_or_hub(model_cfg.path, "qwen_image_edit", "Qwen-Image-Edit")


def load_qwen_image_edit_pipeline(path: str, dtype: str = "fp32", revision: str | None = None):
    """The edit pipeline a folder or hub id names in its ``model_index.json`` (``QwenImageEditPipeline`` or
    ``QwenImageEditPlusPipeline``), with a one-line error."""
    return load_pretrained_pipeline("DiffusionPipeline", path, dtype, revision)


def _image_key(images: list[torch.Tensor]) -> str:
    """A content hash of a row's source images (the prompt cache keys a row by its prompt and its images)."""
    digest = hashlib.sha1()
    for image in images:
        data = image.detach().float().cpu().contiguous()
        digest.update(str(tuple(data.shape)).encode() + data.numpy().tobytes())
    return digest.hexdigest()[:20]


class QwenImageEditAdapter(QwenImageCore):
    """Qwen-Image-Edit(-Plus) for RL. ``pipe`` is a ``QwenImageEditPipeline`` or ``QwenImageEditPlusPipeline``."""

    check_model_path = staticmethod(check_model_path)
    source_images = (1, 3)  # Edit-Plus's; an Edit pipeline's adapter takes (1, 1)
    tiny_recipe = "tiny-qwen-image-edit"
    pipeline_classes = ("QwenImageEditPipeline", "QwenImageEditPlusPipeline")  # model_index.json classes it loads
    tiny_paths = TINY_PATHS

    def __init__(self, pipe, *args, source_area: int | None = None, **kwargs):
        super().__init__(pipe, *args, **kwargs)
        self.plus = type(pipe).__name__ == "QwenImageEditPlusPipeline"
        self.source_images = (1, 3) if self.plus else (1, 1)
        area = source_area or layout.VAE_AREA  # model.source_area: flowrl's smaller size for CPU-sized runs
        self.vae_size = layout.condition_size(self.height, self.width, area)  # (h, w) each source is VAE-encoded at
        vl_area = min(CONDITION_AREA, area)
        self.vl_size = layout.condition_size(self.height, self.width, vl_area) if self.plus else self.vae_size
        self._sources = 1  # source images per row of the latest encode_prompts call (the transformer's img_shapes)
        self._latent_cache: OrderedDict[str, Conditioning] = OrderedDict()  # packed source latents by content
        self._pending: dict[str, list] = {}  # the current call's fitted PIL images by content hash

    @classmethod
    def from_config(cls, model_cfg, device: torch.device | str = "cpu", seed: int = 0):
        """Build from ``ModelConfig``: ``path="tiny"`` (Edit) or ``"tiny-plus"`` (Edit-Plus) builds the offline tiny
        model, else the edit pipeline of a hub id or local folder."""
        if model_cfg.path in TINY_PATHS:
            from flowrl.pipelines.qwen_image_edit.tiny import build_tiny_qwen_image_edit

            pipe = build_tiny_qwen_image_edit(seed=seed, **TINY_PATHS[model_cfg.path])
        else:
            cls.check_model_path(model_cfg)
            pipe = load_qwen_image_edit_pipeline(model_cfg.path, model_cfg.dtype, model_cfg.revision)
        return cls.from_pipeline(pipe, model_cfg, device)

    @classmethod
    def options(cls, model_cfg) -> dict:
        return {"source_area": getattr(model_cfg, "source_area", None)}

    # ------------------------------------------------------------------ source images
    def _pil(self, images: list[torch.Tensor]) -> list:
        """A row's source tensors (3, H, W) in [0, 1], fitted to the output's size, as PIL images."""
        fitted = []
        for image in images:
            x = image.float()[None]
            if tuple(x.shape[-2:]) != (self.height, self.width):
                x = torch.nn.functional.interpolate(
                    x, size=(self.height, self.width), mode="bicubic", align_corners=False, antialias=True
                ).clamp(0, 1)
            fitted.append(x)
        processor = self.pipe.image_processor
        return processor.numpy_to_pil(processor.pt_to_numpy(torch.cat(fitted)))

    def _check(self, prompts: list[str], images: list | None) -> None:
        low, high = self.source_images
        if images is None or len(images) != len(prompts):
            raise ValueError(
                f"qwen_image_edit needs {low}..{high} source image(s) for each of the {len(prompts)} prompts"
            )
        counts = {len(row) for row in images}
        if not all(low <= c <= high for c in counts):
            raise ValueError(f"qwen_image_edit takes {low}..{high} source image(s) per prompt; a row has {max(counts)}")
        if len(counts) > 1:
            raise ValueError("qwen_image_edit: the rows of one call must carry the same number of source images")

    @torch.no_grad()
    def _encode_texts(self, keys: list[str]) -> Conditioning:
        """Rows of ``text \x1f images-hash`` keys: Qwen2.5-VL over the edit template, seeing the row's images
        (Edit: the source at the VAE size; Edit-Plus: each at a 384 x 384 area), padded to the longest."""
        rows = []
        for key in keys:
            text, digest = key.split("\x1f")
            seen = [self.pipe.image_processor.resize(p, *self.vl_size) for p in self._pending[digest]]
            embeds, mask = self.pipe.encode_prompt(
                prompt=[text], image=seen, device=self.device, max_sequence_length=self.max_sequence_length
            )
            mask = torch.ones(embeds.shape[:2], dtype=torch.long, device=embeds.device) if mask is None else mask
            rows.append({"prompt_embeds": embeds, "prompt_embeds_mask": mask.long()})
        return pad_rows(rows)

    @torch.no_grad()
    def _encode_latents(self, digests: list[str]) -> Conditioning:
        """The packed, normalised VAE latents of the rows' source images at the 1024 x 1024-area size: the rows'
        i-th images in one VAE batch, as the pipeline encodes its batch."""
        count = len(self._pending[digests[0]])
        packed = []
        for i in range(count):
            pils = [self._pending[d][i] for d in digests]
            pixels = self.pipe.image_processor.preprocess(pils, *self.vae_size).unsqueeze(2)  # (B, 3, 1, h, w)
            z = self.pipe._encode_vae_image(pixels.to(self.device, self.pipe.vae.dtype), generator=None)
            packed.append(self.pipe._pack_latents(z, len(digests), z.shape[1], z.shape[3], z.shape[4]))
        return {"image_latents": torch.cat(packed, dim=1).float()}

    def encode_prompts(
        self, prompts: list[str], negative_prompts: list[str] | None = None, images: list | None = None
    ) -> Conditioning:
        """Each row's VL embeddings (B, L, D) with their mask, its negative's (``negative_prompt_embeds``: the row's
        own negative or the default " ", seeing the same images) and its packed source latents
        ``image_latents`` (B, N_src, 64); cached by prompt and the images' content."""
        self._check(prompts, images)
        if negative_prompts is not None and len(negative_prompts) != len(prompts):
            raise ValueError(f"{len(negative_prompts)} negative prompts for {len(prompts)} prompts")
        digests = [_image_key(row) for row in images]
        self._pending = {d: self._pil(row) for d, row in zip(digests, images)}
        try:
            texts = [f"{p}\x1f{d}" for p, d in zip(prompts, digests)]
            negatives = [
                f"{n or DEFAULT_NEGATIVE}\x1f{d}" for n, d in zip(negative_prompts or [""] * len(prompts), digests)
            ]
            cond = pad_rows(cached_rows(self._cache, self.prompt_cache, texts, self._encode_texts))
            negative = pad_rows(cached_rows(self._cache, self.prompt_cache, negatives, self._encode_texts))
            latents = cached_rows(self._latent_cache, self.prompt_cache, digests, self._encode_latents)
        finally:
            self._pending = {}
        cond["negative_prompt_embeds"] = negative["prompt_embeds"]
        cond["negative_prompt_embeds_mask"] = negative["prompt_embeds_mask"]
        cond["image_latents"] = torch.cat([r["image_latents"] for r in latents])
        self._sources = len(images[0])
        return cond

    def negative_conditioning(self, n: int) -> Conditioning:
        raise NotImplementedError(
            "qwen_image_edit: the negative branch sees each row's source images; encode_prompts gives its rows"
        )

    def clear_cache(self) -> None:
        super().clear_cache()
        self._latent_cache.clear()

    def img_shapes(self, n: int) -> list[list[tuple[int, int, int]]]:
        """The output's packed grid, then each source image's (the transformer's RoPE)."""
        source = img_shape(*self.vae_size, self.pipe.vae_scale_factor)
        return [[img_shape(self.height, self.width, self.pipe.vae_scale_factor), *[source] * self._sources]] * n

    def initial_noise(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """Packed Gaussian latents at sigma = 1 through the edit pipeline's ``prepare_latents`` (no image)."""
        latents, _ = self.pipe.prepare_latents(
            None, n, self.latent_channels, self.height, self.width, torch.float32, self.device, generator
        )
        return latents

    def draw(self, request: Draw) -> torch.Tensor:
        """Edited images (B, 3, H, W) in [0, 1] from the pipeline's own call on the fitted source images, row by
        row (Edit-Plus takes one prompt a call; Edit resizes a single image for its VL encoder but passes a list
        through unresized) from the noise ``initial_noise`` draws for the batch."""
        self._check(request.prompts, request.images)
        negatives = [n or DEFAULT_NEGATIVE for n in request.negative_prompts or [""] * len(request.prompts)]
        kwargs = {"true_cfg_scale": request.guidance_scale, **self.call_options(request)}
        noise = self.initial_noise(len(request.prompts), request.generator)
        out = [
            self.pipe(
                image=row if self.plus else row[0],  # one PIL image: Edit's call resizes it for the VL encoder
                prompt=prompt,
                negative_prompt=negative if request.guidance_scale > 1.0 else None,
                latents=noise[i : i + 1],
                **kwargs,
            ).images
            for i, (prompt, negative, row) in enumerate(
                zip(request.prompts, negatives, (self._pil(r) for r in request.images))
            )
        ]
        return torch.cat(out)

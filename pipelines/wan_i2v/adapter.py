"""Wan image-to-video (``model.pipeline: wan_i2v``): Wan 2.1 I2V 480P / 720P, Wan 2.2 I2V-A14B (two experts) and
Wan 2.2 TI2V-5B's image mode, built from ``WanImageToVideoPipeline``'s public pieces on the Wan text-to-video
adapter (``flowrl.pipelines.wan``: sigmas, CFG, experts, decode and LoRA are the same).

A prompt row carries one source image (``source_images = (1, 1)``), a (3, H, W) tensor in [0, 1]: the first
frame. ``encode_prompts(prompts, negative_prompts, images)`` adds its conditioning rows, each made by the
pipeline's own ``prepare_latents`` (the image resized to ``model.height`` x ``model.width`` by its
``video_processor``, VAE-encoded with the distribution's mode, normalised) and ``encode_image``:

* **Wan 2.1 I2V / 2.2 I2V-A14B**: ``image_condition`` (B, 4 + 16, F', h, w), the first-frame mask (4 channels: one
  per frame of a latent frame) and the latent of the image followed by F - 1 black frames; the transformer
  reads ``cat([x, image_condition], dim=1)`` (36 channels in, 16 out). Wan 2.1 adds ``image_embeds``, the CLIP
  vision encoder's penultimate hidden states (B, 257, 1280), as ``encoder_hidden_states_image`` (diffusers'
  attention takes all but the last 512 context tokens as the image's, so ``model.max_sequence_length`` must be
  512 there); Wan 2.2 I2V-A14B has no image encoder.
* **LoRA** targets Wan's attention projections plus, in Wan 2.1 I2V, the image cross-attention's ``add_k_proj``
  / ``add_v_proj``; the export is the Wan one ``WanImageToVideoPipeline.load_lora_weights`` reads.
* **Wan 2.2 TI2V-5B** (``expand_timesteps``): ``image_latents`` (B, 48, 1, h, w), the image's latent, replaces the
  first latent frame of the transformer's input and those frame's tokens get timestep 0 (the others the row's
  sigma x 1000), as the pipeline's ``first_frame_mask`` does. The state's own first frame is not the model's
  to move: its velocity is the exact flow toward the image's latent, ``(x - c) / sigma`` (no parameter, so it
  carries no policy gradient and adds the same term to every log-prob), so the ODE ends on ``c`` as the
  pipeline's output does (it puts ``c`` back at the end); an SDE step adds its noise there as everywhere.

The state is the noise latent (B, z, F', h, w) as ever, so rollouts, log-probs and methods are the Wan
family's. ``generate(..., images=...)`` calls ``WanImageToVideoPipeline`` once per row (it takes one image a
call) on the noise ``initial_noise`` draws from the generator, so it is flowrl's ODE rollout with the same
generator under a one-step Euler scheduler.

``model.path``: ``tiny`` (Wan 2.1 I2V with a tiny CLIP), ``tiny-a14b`` (Wan 2.2 I2V-A14B, boundary 0.9),
``tiny-ti2v`` (TI2V-5B image mode) build offline (``flowrl.pipelines.wan_i2v.tiny``); else a hub id or a local
diffusers folder (``WanImageToVideoPipeline.from_pretrained``).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

import torch

from flowrl.pipelines.base import Conditioning
from flowrl.pipelines.kit.adapter import Draw
from flowrl.pipelines.kit.loading import load_pretrained_pipeline
from flowrl.pipelines.kit.prompts import cached_rows
from flowrl.pipelines.wan.adapter import WAN_LORA_TARGETS, WanAdapter, check_wan_model

# model.path -> the tiny builder's keywords (``build_tiny_wan_i2v``)
TINY_PATHS = {"tiny": {}, "tiny-a14b": {"two_experts": True}, "tiny-ti2v": {"ti2v": True}}
# Wan's attention projections and Wan 2.1 I2V's image cross-attention keys and values (absent from the other
# models: peft adapts those it finds); without them WanImageToVideoPipeline's loader adds zero LoRAs there
WAN_I2V_LORA_TARGETS = [*WAN_LORA_TARGETS, "attn2.add_k_proj", "attn2.add_v_proj"]
WAN_TEXT_TOKENS = 512  # WanAttnProcessor splits the CLIP states off the text context at this length
IMAGE_KEYS = ("image_condition", "image_latents", "image_embeds")  # the conditioning rows of the source image


def check_model_path(model_cfg) -> None:
    """Refuse, before any model is built, a ``model.path`` that cannot load as ``WanImageToVideoPipeline``, a
    ``model.num_frames`` that is not 4k + 1, and ``model.trained_experts`` other than both for a one-expert
    tiny model."""
    check_wan_model(model_cfg, TINY_PATHS, "wan_i2v", "Wan 2.2 I2V-A14B")


def image_key(image: torch.Tensor) -> str:
    """A content hash of one source image (shape and bytes): the image-conditioning cache's key."""
    image = image.detach().to("cpu", torch.float32).contiguous()
    digest = hashlib.sha1(str(tuple(image.shape)).encode())
    digest.update(image.numpy().tobytes())
    return digest.hexdigest()


def to_pil(image: torch.Tensor):
    """A (3, H, W) [0, 1] tensor as the 8-bit RGB picture the pipeline is given (a file's pixels are unchanged)."""
    from PIL import Image

    if image.ndim != 3 or image.shape[0] != 3:
        raise ValueError(f"a source image must be a (3, H, W) tensor in [0, 1], got shape {tuple(image.shape)}")
    pixels = (image.detach().float().clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0)
    return Image.fromarray(pixels.cpu().numpy())


class WanI2VAdapter(WanAdapter):
    """Wan image-to-video for RL. ``pipe`` is a ``WanImageToVideoPipeline``; the policy is its transformer (or
    the two experts of Wan 2.2 I2V-A14B)."""

    source_images = (1, 1)  # the first frame
    lora_target_modules = WAN_I2V_LORA_TARGETS
    tiny_recipe = "tiny-wan-i2v"
    pipeline_classes = ("WanImageToVideoPipeline",)  # the model_index.json classes it loads
    tiny_paths = tuple(TINY_PATHS)
    check_model_path = staticmethod(check_model_path)

    def __init__(self, pipe, *args, **kwargs):
        super().__init__(pipe, *args, **kwargs)
        self.uses_image_encoder = pipe.transformer.config.image_dim is not None
        if self.uses_image_encoder and getattr(pipe, "image_encoder", None) is None:
            raise ValueError(
                "wan_i2v: the transformer reads CLIP image states (image_dim) but the pipeline has no image_encoder"
            )
        if self.uses_image_encoder and self.max_sequence_length != WAN_TEXT_TOKENS:
            raise ValueError(
                f"model.max_sequence_length: Wan 2.1 I2V needs {WAN_TEXT_TOKENS} (diffusers' attention takes the tokens "
                f"before the last {WAN_TEXT_TOKENS} as the image's), got {self.max_sequence_length}"
            )
        self._image_cache: OrderedDict[str, Conditioning] = OrderedDict()

    @classmethod
    def build_pipeline(cls, model_cfg, seed: int = 0):
        """The tiny ``WanImageToVideoPipeline`` of a tiny ``model.path``, else ``from_pretrained``."""
        if model_cfg.path in TINY_PATHS:
            from flowrl.pipelines.wan_i2v.tiny import build_tiny_wan_i2v

            return build_tiny_wan_i2v(seed=seed, **TINY_PATHS[model_cfg.path])
        check_model_path(model_cfg)
        return load_pretrained_pipeline("WanImageToVideoPipeline", model_cfg.path, model_cfg.dtype, model_cfg.revision)

    # ------------------------------------------------------------------ conditioning
    def encode_prompts(
        self, prompts: list[str], negative_prompts: list[str] | None = None, images: list | None = None
    ) -> Conditioning:
        """The Wan text rows (``prompt_embeds``, ``negative_prompt_embeds``) and each row's source-image rows
        (``IMAGE_KEYS``; cached per image content). ``images``: one list holding one (3, H, W) [0, 1] tensor per
        prompt."""
        cond = super().encode_prompts(prompts, negative_prompts)
        rows = self._image_rows(prompts, images)
        cond.update({key: torch.cat([r[key] for r in rows]) for key in rows[0]})
        return cond

    def _image_rows(self, prompts: list[str], images: list | None) -> list[Conditioning]:
        if images is None:
            raise ValueError(
                "wan_i2v: image-to-video needs one source image per prompt (a data row's 'image'); got none"
            )
        if len(images) != len(prompts):
            raise ValueError(f"wan_i2v: {len(images)} source-image lists for {len(prompts)} prompts")
        for n, row in enumerate(images):
            if len(row) != 1:
                raise ValueError(f"wan_i2v: prompt {n} has {len(row)} source images; image-to-video takes one")
        keys = [image_key(row[0]) for row in images]
        by_key = dict(zip(keys, (row[0] for row in images)))
        return cached_rows(
            self._image_cache, self.prompt_cache, keys, lambda k: self._encode_images([by_key[i] for i in k])
        )

    @torch.no_grad()
    def _encode_images(self, images: list[torch.Tensor]) -> Conditioning:
        """One conditioning row per image through the pipeline's ``prepare_latents`` (and ``encode_image``)."""
        pipe, rows = self.pipe, []
        for image in images:
            picture = to_pil(image)
            pixels = pipe.video_processor.preprocess(picture, height=self.height, width=self.width)
            zeros = torch.zeros(1, *self.latent_shape)  # prepare_latents draws no noise when given latents
            made = pipe.prepare_latents(
                pixels.to(self.device, dtype=torch.float32), 1, self.latent_channels, self.height, self.width,
                self.num_frames, torch.float32, self.device, None, zeros,
            )  # fmt: skip
            row = {"image_latents": made[1]} if self.expand_timesteps else {"image_condition": made[1]}
            if self.uses_image_encoder:
                row["image_embeds"] = pipe.encode_image(picture, self.device).float()
            rows.append(row)
        return {key: torch.cat([r[key] for r in rows]) for key in rows[0]}

    def clear_cache(self) -> None:
        super().clear_cache()
        self._image_cache.clear()

    def model_inputs(self, cond: Conditioning, guidance_scale: float) -> Conditioning:
        """The Wan text inputs and the image rows, repeated for the negative branch with CFG (both branches see
        the source image, as in the pipeline)."""
        inputs = super().model_inputs(cond, guidance_scale)
        for key in IMAGE_KEYS:
            if key in cond:
                value = cond[key]
                value = torch.cat([value, value]) if guidance_scale != 1.0 else value
                inputs[key] = value.to(self.compute_dtype) if key == "image_embeds" else value
        if not any(key in inputs for key in IMAGE_KEYS[:2]):
            raise ValueError(
                "wan_i2v: the conditioning holds no source image; build it with encode_prompts(..., images=...)"
            )
        return inputs

    # ------------------------------------------------------------------ sampling pieces
    def initial_noise(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """Gaussian latents (n, z, F', h, w) fp32, drawn as ``WanImageToVideoPipeline.prepare_latents`` draws them."""
        from diffusers.utils.torch_utils import randn_tensor

        return randn_tensor((n, *self.latent_shape), generator=generator, device=self.device, dtype=torch.float32)

    def _transformer_inputs(self, x_in: torch.Tensor, sigma: torch.Tensor | float, inputs: Conditioning) -> dict:
        if self.expand_timesteps:  # TI2V-5B: the image's latent is the first frame, its tokens at timestep 0
            first = inputs["image_latents"].to(x_in.dtype)
            hidden = torch.cat([first, x_in[:, :, 1:]], dim=2)
            timestep = self._timestep(sigma, x_in, first_frame_fixed=True)
        else:  # Wan 2.1 / 2.2 I2V: the mask and the image's latent as 20 more channels
            hidden = torch.cat([x_in, inputs["image_condition"].to(x_in.dtype)], dim=1)
            timestep = self._timestep(sigma, x_in)
        out = {
            "hidden_states": hidden.to(self.compute_dtype),
            "timestep": timestep,
            "encoder_hidden_states": inputs["prompt_embeds"],
        }
        if "image_embeds" in inputs:
            out["encoder_hidden_states_image"] = inputs["image_embeds"]
        return out

    def velocity(self, x, sigma, inputs, guidance_scale, model=None) -> torch.Tensor:
        """The Wan velocity; with TI2V-5B the first latent frame's is the exact flow toward the source image's
        latent, ``(x - c) / sigma`` (the model does not move it)."""
        v = super().velocity(x, sigma, inputs, guidance_scale, model)
        if not self.expand_timesteps:
            return v
        c = inputs["image_latents"][: x.shape[0]].to(x.device, torch.float32)  # both CFG halves hold the same rows
        s = torch.as_tensor(sigma, dtype=torch.float32, device=x.device).reshape(-1, 1, 1, 1, 1)
        return torch.cat([(x[:, :, :1].float() - c) / s, v[:, :, 1:]], dim=2)

    @torch.no_grad()
    def draw(self, request: Draw) -> dict:
        """``WanImageToVideoPipeline``'s own sampling, one call per row (it takes one image a call), from the
        noise ``initial_noise`` draws: the video mapping."""
        self._image_rows(request.prompts, request.images)  # the same checks as training
        noise = self.initial_noise(
            len(request.prompts), request.generator or torch.Generator(self.device).manual_seed(0)
        )
        videos = []
        for n, (prompt, row) in enumerate(zip(request.prompts, request.images)):
            videos.append(
                self.pipe(
                    image=to_pil(row[0]),
                    prompt=prompt,
                    negative_prompt=request.negative_prompts[n] if request.negative_prompts is not None else None,
                    num_frames=self.num_frames,
                    guidance_scale=request.guidance_scale,
                    latents=noise[n : n + 1],
                    **self.call_options(request),
                ).frames
            )
        return {"video": torch.cat(videos).float(), "fps": self.fps}

"""FLUX.1 adapter, built from ``FluxPipeline``'s public pieces. The FLUX.1 mechanics (packed tokens, the shifted
schedule, embedded guidance, no negative branch; ``flowrl.pipelines.kit.flux1`` says how each keeps the pipeline's
math) are the kit's ``Flux1Adapter``, shared with FLUX.1-Kontext; this family adds its pipeline class, its tiny
model and the pipeline call of ``flowrl sample`` (the kit's, with FLUX.1's embedded guidance)."""

from __future__ import annotations

from flowrl.pipelines.kit.flux1 import FLUX_LORA_TARGETS, Flux1Adapter, check_flux_path
from flowrl.pipelines.kit.loading import load_pretrained_pipeline

__all__ = ["FLUX_LORA_TARGETS", "FluxAdapter", "check_model_path", "load_flux_pipeline"]


def check_model_path(model_cfg) -> None:
    """Refuse a ``model.path`` that cannot load as a FLUX pipeline before any model is built: a missing local
    path, a folder that is not a diffusers pipeline folder, a single file (not supported for FLUX here)."""
    check_flux_path(model_cfg, "flux", "FLUX")


def load_flux_pipeline(path: str, dtype: str = "fp32", revision: str | None = None):
    """``FluxPipeline.from_pretrained`` from a hub id or a local folder, with a one-line error."""
    return load_pretrained_pipeline("FluxPipeline", path, dtype, revision)


class FluxAdapter(Flux1Adapter):
    """FLUX.1 (dev-like, embedded guidance) for RL. ``pipe`` is a ``FluxPipeline``; the transformer is the policy."""

    check_model_path = staticmethod(check_model_path)
    tiny_recipe = "tiny-flux"
    pipeline_class = "FluxPipeline"

    @classmethod
    def build_tiny(cls, seed: int):
        """The offline tiny FLUX.1-dev (``build_tiny_flux``)."""
        from flowrl.pipelines.flux.tiny import build_tiny_flux

        return build_tiny_flux(seed=seed)

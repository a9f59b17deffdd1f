"""``Layout``: what one sample occupies, the shape every family's ``layout`` module computes from the
resolution, frames or duration (and the model's compression factors), once for the adapter, the tiny builder
and the estimate."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    """One sample's latent, batch dimension left out: a shape, or a mapping of modality -> shape (LTX-2);
    ``tokens``: the length of the transformer's own sequence for it (image / video / audio tokens, all
    modalities together)."""

    latent: tuple[int, ...] | Mapping[str, tuple[int, ...]]
    tokens: int

"""Stand-ins for the training loop's objects where a test works a loss out by hand."""

from __future__ import annotations


class FixedVelocity:
    """A stand-in context whose policy velocity is a given tensor (the loss's only forward)."""

    conditional_scale = 1.0

    def __init__(self, v):
        self.v = v

    def velocity(self, x, sigma, cond, *, guidance_scale=None, model=None):
        return self.v

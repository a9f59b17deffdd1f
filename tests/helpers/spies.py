"""Spies on a pipeline's calls for the tests that compare flowrl's loop with the pipeline's own: what a module's
forward was called with, and the shift ``mu`` the pipeline handed its scheduler."""

from __future__ import annotations

import functools


def record_calls(module, with_args: bool = False):
    """Record the kwargs (``with_args``: (args, kwargs)) of every forward call of ``module``; returns
    (calls, handle)."""
    calls = []
    keep = (lambda a, k: (a, k)) if with_args else (lambda a, k: k)
    handle = module.register_forward_pre_hook(lambda m, a, k: calls.append(keep(a, k)), with_kwargs=True)
    return calls, handle


def record_mu(scheduler) -> list:
    """The ``mu`` of each of ``scheduler``'s ``set_timesteps`` calls from now on (the spy keeps the signature the
    pipeline inspects for ``sigmas``)."""
    mus = []
    set_timesteps = scheduler.set_timesteps

    @functools.wraps(set_timesteps)
    def spy(*args, **kwargs):
        mus.append(kwargs.get("mu"))
        return set_timesteps(*args, **kwargs)

    scheduler.set_timesteps = spy
    return mus

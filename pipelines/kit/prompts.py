"""The prompt-embedding cache every family keeps: one row per distinct prompt, least recently used evicted."""

from __future__ import annotations

from collections import OrderedDict

from flowrl.pipelines.base import Conditioning


def cached_rows(cache: OrderedDict, capacity: int, prompts: list[str], encode) -> list[Conditioning]:
    """One-row embeddings of each of ``prompts`` through the LRU ``cache`` (least recently used first): each
    distinct prompt of the call that is not cached is encoded once, in one batch (``encode(prompts)`` ->
    conditioning); the ``capacity`` most recently used ones are kept (0: none)."""
    missing = sorted({p for p in prompts if p not in cache})
    found = {p: cache[p] for p in prompts if p in cache}
    if missing:
        fresh = encode(missing)
        found.update({p: {k: v[i : i + 1].clone() for k, v in fresh.items()} for i, p in enumerate(missing)})
    if capacity:
        for p in dict.fromkeys(prompts):
            cache[p] = found[p]
            cache.move_to_end(p)
        while len(cache) > capacity:
            cache.popitem(last=False)
    return [found[p] for p in prompts]

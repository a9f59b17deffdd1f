"""The prompt-embedding cache every family keeps: one row per distinct prompt (and, for a family that takes source
images, per distinct prompt and images: the key holds their content hash), least recently used evicted."""

from __future__ import annotations

from collections import OrderedDict

from flowrl.pipelines.base import Conditioning
from flowrl.pipelines.kit.images import images_key


def cached_rows(cache: OrderedDict, capacity: int, prompts: list[str], encode, images=None) -> list[Conditioning]:
    """One-row embeddings of each of ``prompts`` through the LRU ``cache`` (least recently used first): each
    distinct prompt of the call that is not cached is encoded once, in one batch (``encode(prompts)`` ->
    conditioning); the ``capacity`` most recently used ones are kept (0: none).

    ``images`` (one list of (3, H, W) tensors per prompt, or None): the rows are keyed by (prompt, the images'
    content hash) and encoded by ``encode(prompts, images)``."""
    if images is None:
        keys = list(prompts)
    else:
        if len(images) != len(prompts):
            raise ValueError(f"{len(images)} source-image lists for {len(prompts)} prompts")
        keys = [(p, images_key(row)) for p, row in zip(prompts, images)]
    missing = sorted({k for k in keys if k not in cache})
    found = {k: cache[k] for k in keys if k in cache}
    if missing and getattr(cache, "closed", False):  # model.text_encoders=cache (kit.text_encoders.HostCache)
        first = missing[0] if images is None else missing[0][0]
        raise RuntimeError(
            f"model.text_encoders=cache: prompt {first[:60]!r} was not encoded before training and the text "
            "encoders are freed; use model.text_encoders=offload"
        )
    if missing:
        if images is None:
            fresh = encode(missing)
        else:
            first = {k: i for i, k in reversed(list(enumerate(keys)))}
            fresh = encode([k[0] for k in missing], [list(images[first[k]]) for k in missing])
        found.update({k: {n: v[i : i + 1].clone() for n, v in fresh.items()} for i, k in enumerate(missing)})
    if capacity:
        for k in dict.fromkeys(keys):
            cache[k] = found[k]
            cache.move_to_end(k)
        while len(cache) > capacity:
            cache.popitem(last=False)
    return [found[k] for k in keys]

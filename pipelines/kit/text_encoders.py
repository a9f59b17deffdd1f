"""Where a family's text encoders live during training (``model.text_encoders``), for every family at once.

* ``device``: on the device, as the adapter put them.
* ``offload``: on the CPU between uses; a forward pre-hook on each encoder moves it to the adapter's device for
  its forward, and a forward hook moves it back, so the device holds at most one encoder, and only while it
  encodes a batch the prompt cache does not hold.
* ``cache``: every prompt the run will condition on (the training prompts with their negatives and source
  images, the evaluation prompts, the empty negative) is encoded before training into the adapter's prompt
  cache, which then keeps its rows on the host (``HostCache``: each row moved to the device when a batch reads
  it) and never evicts; the encoders are then deleted from the pipeline and collected. A prompt outside the
  cache afterwards is a one-line error (``kit.prompts.cached_rows``), never a silent re-encode.

A family's encoders are the pipeline attributes in ``TEXT_ENCODERS`` that it holds (SD3's three, FLUX.1's two,
Wan's UMT5, Qwen-Image's Qwen2.5-VL, LTX-2's Gemma and its frozen text connectors, whose outputs are what the
prompt cache holds), or the adapter's own ``text_encoder_names``. Tokenizers are not modules and stay.
"""

from __future__ import annotations

import gc
import sys
from collections import OrderedDict
from collections.abc import Callable, Iterable

import torch

MODES = ("device", "offload", "cache")
TEXT_ENCODERS = ("text_encoder", "text_encoder_2", "text_encoder_3", "connectors")


def encoder_names(adapter) -> list[str]:
    """The pipeline attributes of ``adapter`` that hold a text encoder (present and not None)."""
    names = getattr(adapter, "text_encoder_names", TEXT_ENCODERS)
    return [n for n in names if getattr(adapter.pipe, n, None) is not None]


def encoder_bytes(adapter) -> int:
    """Bytes of the text encoders' parameters and buffers that ``adapter``'s pipeline still holds."""
    total = 0
    for name in encoder_names(adapter):
        module = getattr(adapter.pipe, name)
        for t in (*module.parameters(), *module.buffers()):
            total += t.numel() * t.element_size()
    return total


def offload(adapter, home: torch.device | str = "cpu") -> list:
    """``offload``: each text encoder moved to ``home`` now, to the adapter's device at the start of each of its
    forwards and back to ``home`` at the end. Returns the hook handles."""
    handles = []
    device = torch.device(adapter.device)
    for name in encoder_names(adapter):
        module = getattr(adapter.pipe, name)
        module.to(home)

        def to_device(mod, args, kwargs, device=device):
            mod.to(device)

        def to_home(mod, args, kwargs, output, home=home):
            mod.to(home)
            return output

        handles.append(module.register_forward_pre_hook(to_device, with_kwargs=True))
        handles.append(module.register_forward_hook(to_home, with_kwargs=True))
    return handles


class HostCache(OrderedDict):
    """A prompt cache (``cached_rows``'s LRU) that keeps each row's tensors on the host and hands them out on
    ``device``. ``closed``: the encoders are gone, so a row that is missing cannot be made."""

    def __init__(self, device: torch.device | str, rows: Iterable = ()):
        super().__init__()
        self.device = torch.device(device)
        self.closed = False
        for key, row in rows:
            self[key] = row

    def __setitem__(self, key, row) -> None:
        if key in self:  # a row read back from this cache (cached_rows stores what it found): already held
            return
        super().__setitem__(key, {n: t.to("cpu") for n, t in row.items()})

    def __getitem__(self, key):
        return {n: t.to(self.device) for n, t in super().__getitem__(key).items()}


def cache_and_free(adapter, encode_all: Callable[[], None]) -> None:
    """``cache``: the adapter's prompt cache becomes a ``HostCache`` without a limit, ``encode_all()`` fills it
    (the caller encodes every prompt the run will use, through the same calls it makes later), the empty
    negative is encoded, and the text encoders are deleted from the pipeline and collected."""
    cache = HostCache(adapter.device, list(adapter._cache.items()))
    adapter._cache = cache
    adapter.prompt_cache = sys.maxsize  # never evict: nothing could encode a row again
    encode_all()
    try:
        adapter.negative_conditioning(1)  # the empty prompt, CFG's negative, kept by the adapter
    except NotImplementedError:  # a family without a CFG negative (FLUX.1's embedded guidance) never asks
        pass
    for name in encoder_names(adapter):
        setattr(adapter.pipe, name, None)
    cache.closed = True
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()

"""The one worker-thread runner: daemon threads running submitted calls, each result in its own future.

The reward phase scores rollout batches on it while later batches sample (``flowrl.scoring``), and the weighted
reward watches each reward call on it for a timeout (``flowrl.reward_models.base.WeightedReward``). Daemon threads,
unlike a ThreadPoolExecutor's workers (joined at exit), so a call left hanging after its timeout cannot keep the
process alive. Each call gets the submitter's grad mode and CUDA device (both are per thread in torch).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import torch


class Workers:
    """Up to ``size`` daemon threads, started as calls arrive, running the calls in the order submitted."""

    def __init__(self, name: str, size: int):
        self.name, self.size = name, size
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        future: Future = Future()
        device = torch.cuda.current_device() if torch.cuda.is_initialized() else None
        self._jobs.put((future, fn, args, torch.is_grad_enabled(), torch.is_inference_mode_enabled(), device))
        if len(self._threads) < self.size:
            thread = threading.Thread(target=self._run, name=f"{self.name}-{len(self._threads)}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return future

    def close(self, timeout: float = 1.0) -> None:
        """Stop the workers once the calls queued before have run: each waits up to ``timeout`` s (a call still
        hanging is left to its daemon thread). A later ``submit`` starts new ones."""
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join(timeout)
        self._threads = []

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:  # close()
                return
            future, fn, args, grad, inference, device = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                if device is not None:
                    torch.cuda.set_device(device)
                with torch.inference_mode(inference), torch.set_grad_enabled(grad):
                    future.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                future.set_exception(exc)

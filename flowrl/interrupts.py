"""SIGINT and SIGTERM during training: never lose a completed iteration, never save a half-updated one.

The trainer marks the part of an iteration that changes state (from the first weight update to the end
of the iteration's logging and checkpoint) with ``hold()`` ... ``release()``:

* a first signal outside a held part raises ``KeyboardInterrupt`` at once: nothing has changed since the
  last completed iteration, so the trainer saves the completed ones and stops;
* a first signal inside a held part is remembered; the iteration finishes, then ``release()`` says so and
  the trainer saves and stops;
* a second signal raises at once wherever it lands (the trainer then says what it abandons).

With several processes every first signal is deferred to the end of the iteration and the processes agree
on stopping there (one all-reduce per iteration), so no process leaves the others waiting in a collective.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """A run stopped by a signal; the message says what was saved and how to continue."""


class StopSignals:
    def __init__(self, defer_always: bool = False):
        self.defer_always = defer_always
        self.requested: str | None = None  # name of the first signal received
        self.held = False
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():  # handlers can only be set there
            for sig in _SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame) -> None:
        name = signal.Signals(signum).name
        if self.requested is not None:
            raise KeyboardInterrupt(f"second signal ({name})")
        self.requested = name
        if not (self.held or self.defer_always):
            raise KeyboardInterrupt(name)

    def hold(self) -> None:
        """From here on the run's state changes: a first signal waits for ``release``."""
        self.held = True

    def release(self, agree: Callable[[bool], bool] | None = None) -> bool:
        """End of the held part; True if the run must now stop. ``agree`` combines the processes' flags
        (any process asked to stop -> all stop)."""
        self.held = False
        stop = self.requested is not None
        if agree is not None:
            stop = agree(stop)
            if stop and self.requested is None:
                self.requested = "a signal on another process"
        return stop

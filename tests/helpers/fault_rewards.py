"""Rewards that misbehave on purpose, for the fault tests (importable as ``fault_rewards:NAME``)."""

import time

import torch

from flowrl.reward_models import RewardOutput


class FailAt:
    """Brightness, except that call number ``at`` (0-based) raises, hangs or returns NaN."""

    def __init__(self, at: int = 1, how: str = "raise", seconds: float = 5.0):
        self.calls, self.at, self.how, self.seconds = 0, at, how, seconds

    def __call__(self, images, prompts, metadata):
        call, self.calls = self.calls, self.calls + 1
        scores = images.mean(dim=(1, 2, 3))
        if call == self.at:
            if self.how == "raise":
                raise ConnectionError("scorer backend went away")
            if self.how == "hang":
                time.sleep(self.seconds)
            if self.how == "nan":
                scores = scores.clone()
                scores[0] = float("nan")
            if self.how == "shape":
                scores = scores[:-1]
        return RewardOutput(scores=scores)


def brightness(images, prompts, metadata):
    return torch.as_tensor(images.mean(dim=(1, 2, 3)))


class Slow:
    """Brightness after ``seconds``; every call's start time and thread name are kept in ``CALLS``."""

    CALLS: list = []

    def __init__(self, seconds: float = 0.2):
        self.seconds = seconds

    def __call__(self, images, prompts, metadata):
        import threading

        Slow.CALLS.append((time.monotonic(), threading.current_thread().name, len(prompts)))
        time.sleep(self.seconds)
        return RewardOutput(scores=images.mean(dim=(1, 2, 3)))

"""The reward contract, the registry of reward names, and the weighted multi-reward.

A reward model is any callable ``reward(media, prompts, metadata) -> RewardOutput`` where ``media`` is a
float tensor of images ``(B, 3, H, W)`` in ``[0, 1]`` (video ``(B, F, 3, H, W)``), ``prompts`` a list of
``B`` strings and ``metadata`` a list of ``B`` dicts (may be empty dicts). ``RewardOutput.scores`` has
shape ``(B,)``; ``details`` holds optional per-sample extras (lists or tensors of length ``B``).

Rewards are named in a registry (``flowrl.registry``). A name maps to a class or to a lazy ``"module:attr"``
string, so that heavy back ends are imported only when chosen; a user may also give ``"module:attr"`` directly,
and an installed package adds names through the entry-point group ``flowrl.reward_models`` (``name =
"module:attr"``), read once, lazily, the first time a name is looked up.

Optional attributes a reward may declare (read by ``flowrl rewards test`` and the reward server):
``modality`` (``"image"`` default, ``"video"``, ``"audio"``, ``"audio_video"``), ``modalities`` (every kind
of media it scores, where more than one: the VLM judges take images and videos; the trainer refuses a reward
whose kinds do not include its pipeline's), ``score_range`` (``(low, high)``, either may be ``None``) and
``pairwise`` (True for rewards built on ``compare``; see ``PairwiseReward``: they score whole prompt groups
at once) and ``reads_prompt`` (False for a score that never looks at the prompt, e.g. pure audio-video sync;
AV-GRPO refuses such audio-video rewards as a phase's only ones).
"""

from __future__ import annotations

import difflib
import inspect
import itertools
import logging
import math
import time
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, Union, runtime_checkable

import numpy as np
import torch

from flowrl.registry import Registry
from flowrl.registry import first_line as _first_line
from flowrl.workers import Workers

logger = logging.getLogger(__name__)


@dataclass
class RewardOutput:
    """Scores of one batch. ``scores``: (B,) float32 on CPU."""

    scores: torch.Tensor
    details: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class RewardModel(Protocol):
    """What the trainer calls. ``name`` is used in error messages and metric names."""

    def __call__(self, media: torch.Tensor, prompts: list[str], metadata: list[dict]) -> RewardOutput: ...


class RewardError(ValueError):
    """A reward returned something unusable (wrong shape, NaN) or could not be built."""


ENTRY_POINT_GROUP = "flowrl.reward_models"
# name -> class, factory or lazy "module:attr" string; a "module:attr" is a name too
REWARDS = Registry("reward", ENTRY_POINT_GROUP, free_targets=True, error=RewardError)


def register_reward(name: str, target: Any | None = None):
    """Register ``target`` (class, factory or ``"module:attr"``) under ``name``; usable as a decorator.

    Duplicate names are refused, so two plug-ins cannot silently shadow each other.
    """
    return REWARDS.register(name, target)


def list_rewards() -> list[str]:
    return REWARDS.names()


def is_known_reward(name: str) -> bool:
    return REWARDS.known(name)


def check_reward_name(name: str) -> None:
    """Raise a one-line error with the closest registered name if ``name`` is unknown."""
    REWARDS.check(name)


def reward_target(name: str) -> Any:
    """The class (or function) registered as ``name`` or named ``module:attr``, imported but not built."""
    return REWARDS.get(name)


def build_reward(name: str, **kwargs: Any) -> RewardModel:
    """Build the reward registered as ``name`` (or a ``module:attr`` callable) with ``kwargs``.

    A ``module:attr`` that names a plain function (not a class) is used as the reward itself; it may
    return a ``RewardOutput``, a tensor, a numpy array or a list of floats.
    """
    target = reward_target(name)
    if isinstance(target, type):
        return target(**kwargs)
    if kwargs:
        return FunctionReward(target, kwargs)
    return FunctionReward(target, {})


def _reward_params(target: Any) -> tuple[dict[str, inspect.Parameter], bool] | None:
    """The keyword arguments ``build_reward`` may pass to ``target`` and whether it takes ``**kwargs``.

    A class takes them in its constructor; a plain function after ``(media, prompts, metadata)``. None when
    the signature cannot be read (a builtin): then nothing is checked.
    """
    try:
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        return None
    if not isinstance(target, type):
        positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        leading = next((i for i, p in enumerate(params) if p.kind not in positional), len(params))
        params = params[min(3, leading) :]  # media, prompts, metadata
    var_keyword = any(p.kind is p.VAR_KEYWORD for p in params)
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {p.name: p for p in params if p.kind in named}, var_keyword


def check_reward_args(name: str, kwargs: Mapping[str, Any], where: str | None = "reward_args") -> None:
    """Refuse arguments that reward ``name`` does not take, and required ones that are missing.

    Imports the reward's class or function but builds nothing, so no weights load: call it before any
    model is built. Each error is one line naming the argument, as ``where`` spells it: by default
    ``reward_args.NAME.KEY: NAME takes no argument 'KEY'; it takes a, b; did you mean 'a'?``; with
    ``where=None`` (the ``key=value`` arguments of ``flowrl rewards test``) without the prefix.
    """
    check_reward_name(name)
    if not isinstance(kwargs, Mapping):
        raise RewardError(f"{where or 'arguments'}.{name}: expected a mapping of arguments, got {kwargs!r}")
    target = reward_target(name)
    found = _reward_params(target)
    if found is None:
        return
    params, var_keyword = found

    def culprit(key: str) -> str:
        return f"{where}.{name}.{key}: " if where else ""

    if not var_keyword:
        for key in kwargs:
            if key not in params:
                known = ", ".join(params) or "no arguments"
                close = difflib.get_close_matches(key, list(params), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise RewardError(f"{culprit(key)}{name} takes no argument {key!r}; it takes {known}{hint}")
    for key, param in params.items():
        if param.default is inspect.Parameter.empty and key not in kwargs:
            setting = f"{where}.{name}.{key}" if where else key
            raise RewardError(f"{culprit(key)}{name} needs argument {key!r}: give {setting}=...")
    hints = _type_hints(target)
    for key, value in kwargs.items():
        expected = _value_problem(value, hints.get(key)) if key in params else None
        if expected is not None:
            raise RewardError(f"{culprit(key)}{name}'s {key} must be {expected}; got {value!r}")


def _type_hints(target: Any) -> dict[str, Any]:
    """The evaluated annotations of a reward class's constructor or a reward function ({} when unreadable)."""
    try:
        return typing.get_type_hints(target.__init__ if isinstance(target, type) else target)
    except Exception:  # noqa: BLE001 - an annotation that cannot be evaluated is simply not checked
        return {}


_SIMPLE_TYPES = {bool: "a bool (true / false)", int: "an integer", float: "a number", type(None): "null"}


def _hint_options(hint: Any) -> list[Any] | None:
    """The members of a hint made only of ``Literal[...]``, bool, int, float and None; None for any other hint."""
    if hint is None:
        return None
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        members = [_hint_options(arg) for arg in typing.get_args(hint)]
        return None if any(m is None for m in members) else [o for m in members for o in m]
    if origin is Literal:
        return [("literal", v) for v in typing.get_args(hint)]
    return [hint] if hint in _SIMPLE_TYPES else None


def _fits(value: Any, option: Any) -> bool:
    if isinstance(option, tuple):  # ("literal", v)
        return type(value) is type(option[1]) and value == option[1]
    if option is bool:
        return isinstance(value, bool)
    if option is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if option is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return value is None


def _value_problem(value: Any, hint: Any) -> str | None:
    """What ``value`` should have been, when it does not fit a simple annotation ``hint``; else None."""
    options = _hint_options(hint)
    if options is None or any(_fits(value, option) for option in options):
        return None
    literals = [repr(o[1]) for o in options if isinstance(o, tuple)]
    words = [f"one of {', '.join(literals)}"] if literals else []
    words += [_SIMPLE_TYPES[o] for o in options if not isinstance(o, tuple)]
    return " or ".join(words)


def check_choice(reward: str, arg: str, value: Any, choices: Sequence[Any]) -> None:
    """One line ``reward: arg='x'; allowed: a, b`` unless ``value`` is one of ``choices`` (same type)."""
    if not any(type(value) is type(c) and value == c for c in choices):
        raise RewardError(f"{reward}: {arg}={value!r}; allowed: {', '.join(str(c) for c in choices)}")


def check_type(reward: str, arg: str, value: Any, kind: type) -> None:
    """One line ``reward: arg=...; expected a bool`` unless ``value`` fits ``kind`` (bool, int or float)."""
    if not _fits(value, kind):
        raise RewardError(f"{reward}: {arg}={value!r}; expected {_SIMPLE_TYPES[kind]}")


class FunctionReward:
    """Adapts a plain function ``fn(media, prompts, metadata, **kwargs)`` to the contract."""

    def __init__(self, fn: Callable, kwargs: dict[str, Any]):
        self.fn = fn
        self.kwargs = kwargs

    def __call__(self, media, prompts, metadata) -> RewardOutput:
        out = self.fn(media, prompts, metadata, **self.kwargs)
        if isinstance(out, RewardOutput):
            return out
        return RewardOutput(scores=torch.as_tensor(out, dtype=torch.float32))


def images_to_uint8(name: str, media: torch.Tensor) -> np.ndarray:
    """Float images (B, 3, H, W) in [0, 1] -> uint8 (B, H, W, 3) via ``clip(round(x * 255), 0, 255)``."""
    if media.ndim != 4 or media.shape[1] != 3:
        raise RewardError(f"reward {name!r} expects images (B, 3, H, W), got shape {tuple(media.shape)}")
    pixels = (media.detach().float() * 255).round().clamp(0, 255).to(torch.uint8)  # (B, 3, H, W)
    return pixels.permute(0, 2, 3, 1).cpu().numpy()  # (B, H, W, 3)


def check_scores(name: str, out: Any, batch: int) -> RewardOutput:
    """Validate one reward's output; errors name the reward."""
    if not isinstance(out, RewardOutput):
        raise RewardError(f"reward {name!r} returned {type(out).__name__}, expected RewardOutput")
    scores = torch.as_tensor(out.scores).detach().float().cpu()
    if scores.shape != (batch,):
        raise RewardError(f"reward {name!r} returned scores of shape {tuple(scores.shape)}, expected ({batch},)")
    if not torch.isfinite(scores).all():
        bad = int((~torch.isfinite(scores)).sum())
        raise RewardError(f"reward {name!r} returned {bad} non-finite score(s) (NaN or inf)")
    return RewardOutput(scores=scores, details=out.details)


class WeightedReward:
    """Weighted sum of named rewards: ``total = sum_k w_k * r_k`` (Flow-GRPO's ``avg``).

    ``rewards`` maps a metric name to ``(reward, weight)``. The output's details hold every component's
    scores under its name, so the trainer logs ``reward/<name>/mean`` for each.

    A call that gives no answer within ``timeout_s`` seconds (0: no limit) raises a ``RewardError`` naming
    the reward, and every ``report_every_s`` seconds (0: never) without an answer a warning says so. The
    calls are then made in a daemon thread: a hung call is left behind and cannot keep the process alive.
    """

    def __init__(
        self,
        rewards: dict[str, tuple[RewardModel, float]],
        timeout_s: float = 0.0,
        report_every_s: float = 60.0,
    ):
        if not rewards:
            raise RewardError("no reward configured: set reward.<name>=<weight>")
        for name, (_, weight) in rewards.items():
            if not math.isfinite(weight):
                raise RewardError(f"reward {name!r} has a non-finite weight {weight}")
        self.rewards = rewards
        self.timeout_s = timeout_s
        self.report_every_s = report_every_s

    @property
    def pairwise(self) -> bool:
        return any(getattr(r, "pairwise", False) for r, _ in self.rewards.values())

    def _call_one(self, name: str, reward: RewardModel, media, prompts, metadata) -> Any:
        """One reward call; exceptions and (with ``timeout_s``) hangs become errors naming the reward."""
        try:
            if self.timeout_s <= 0 and self.report_every_s <= 0:
                return reward(media, prompts, metadata)
            return self._watched(name, lambda: reward(media, prompts, metadata))
        except RewardError:
            raise
        except Exception as exc:
            raise RewardError(f"reward {name!r} raised {_first_line(exc)}") from exc

    def _watched(self, name: str, call: Callable[[], Any]) -> Any:
        """``call()`` on a worker thread of its own (``flowrl.workers``), waited for with reports and the timeout;
        its exception is re-raised. A call still hanging at the timeout is left to its daemon thread."""
        workers = Workers(f"reward-{name}", 1)
        future = workers.submit(call)
        workers.close(timeout=0)  # the thread ends after the call
        start = time.monotonic()
        timeout = self.timeout_s if self.timeout_s > 0 else math.inf
        every = self.report_every_s if self.report_every_s > 0 else math.inf
        next_report = every
        while not futures_wait([future], max(0.0, min(timeout, next_report) - (time.monotonic() - start))).done:
            waited = time.monotonic() - start
            if waited >= timeout:
                raise RewardError(f"reward {name!r} timed out after {self.timeout_s:g} s")
            if waited >= next_report:
                limit = f"timeout {self.timeout_s:g} s" if self.timeout_s > 0 else "no timeout"
                logger.warning("reward %r has given no answer for %g s (%s)", name, round(waited, 1), limit)
                next_report += every
        return future.result()

    def __call__(self, media: torch.Tensor, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        batch = len(prompts)
        total = torch.zeros(batch)
        components: dict[str, torch.Tensor] = {}
        calls: dict[str, int] = {}
        for name, (reward, weight) in self.rewards.items():
            out = check_scores(name, self._call_one(name, reward, media, prompts, metadata), batch)
            components[name] = out.scores
            calls[name] = int(out.details.get("comparisons", batch)) if isinstance(out.details, Mapping) else batch
            total += weight * out.scores
        # calls: each reward's evaluations (its samples, or a pairwise reward's comparisons)
        return RewardOutput(scores=total, details={"components": components, "calls": calls})


# ---------------------------------------------------------------------------------------------- media helpers


def batch_size_of(media: Any) -> int:
    """B of a tensor batch or of a mapping of named tensors (``{"video": ..., "audio": ...}``)."""
    if isinstance(media, Mapping):
        tensors = [v for v in media.values() if isinstance(v, torch.Tensor)]
        if not tensors:
            raise RewardError("media mapping holds no tensor")
        return len(tensors[0])
    return len(media)


def index_media(media: Any, index: Sequence[int] | torch.Tensor) -> Any:
    """Select samples ``index`` of a tensor batch or of every tensor in a mapping (other values are kept)."""
    index = torch.as_tensor(index, dtype=torch.long)
    if isinstance(media, Mapping):
        return {k: v[index] if isinstance(v, torch.Tensor) else v for k, v in media.items()}
    return media[index]


# ---------------------------------------------------------------------------------------------- pairwise rewards


def prompt_groups(prompts: list[str], metadata: list[dict] | None, key: str = "group") -> list[list[int]]:
    """Indices of each prompt group, in order of first appearance.

    Samples are grouped by ``metadata[i][key]`` when every sample has it, else by the prompt string.
    """
    metadata = metadata or [{}] * len(prompts)
    use_key = bool(metadata) and all(isinstance(m, dict) and key in m for m in metadata)
    groups: dict[Any, list[int]] = {}
    for i, prompt in enumerate(prompts):
        groups.setdefault(metadata[i][key] if use_key else prompt, []).append(i)
    return list(groups.values())


def win_rates(num: int, pairs: list[tuple[int, int]], p_first: torch.Tensor) -> torch.Tensor:
    """Pref-GRPO's win rate: ``r_i = sum of i's wins / number of i's comparisons``.

    ``p_first[k]`` is P(``pairs[k][0]`` beats ``pairs[k][1]``): 1 a win, 0 a loss, 0.5 a tie or an
    unparsable verdict; the second sample gets ``1 - p``. A sample with no comparison gets 0.5. (num,).
    """
    wins = torch.zeros(num, dtype=torch.float64)
    count = torch.zeros(num, dtype=torch.float64)
    for (a, b), p in zip(pairs, p_first.double().tolist()):
        wins[a] += p
        wins[b] += 1.0 - p
        count[a] += 1
        count[b] += 1
    rates = torch.where(count > 0, wins / count.clamp(min=1), torch.full_like(wins, 0.5))
    return rates.float()


class PairwiseReward:
    """Base of pairwise rewards: subclasses implement ``compare``; calling scores whole prompt groups.

    ``compare(media_a, media_b, prompts, metadata) -> (K,)`` P(a beats b) in [0, 1]. ``__call__`` judges
    every unordered pair within each prompt group (C(G, 2) comparisons, ``compare_batch`` at a time) and
    returns the win rates (``win_rates``). The trainer must hand over complete groups (gather across
    processes first), or the rates are computed within partial groups (Pref-GRPO issue #18).
    ``both_orders``: judge each pair as (a, b) and as (b, a) and average, P = (P(a > b) + 1 - P(b > a)) / 2,
    which cancels a judge's bias for one position at twice the comparisons.
    """

    name = "pairwise"
    pairwise = True
    score_range = (0.0, 1.0)
    group_key = "group"
    compare_batch = 16
    both_orders = False

    def compare(self, media_a: Any, media_b: Any, prompts: list[str], metadata: list[dict]) -> torch.Tensor:
        raise NotImplementedError

    def __call__(self, media: Any, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        num = batch_size_of(media)
        if num != len(prompts):
            raise RewardError(f"reward {self.name!r}: {num} samples but {len(prompts)} prompts")
        metadata = metadata or [{} for _ in prompts]
        groups = prompt_groups(prompts, metadata, self.group_key)
        pairs = [pair for group in groups for pair in itertools.combinations(group, 2)]
        p_first = self._judge(media, prompts, metadata, pairs)
        if self.both_orders:
            p_swapped = self._judge(media, prompts, metadata, [(b, a) for a, b in pairs])
            p_first = (p_first + (1.0 - p_swapped)) / 2
        scores = win_rates(num, pairs, p_first)
        return RewardOutput(scores=scores, details={"comparisons": len(pairs) * (2 if self.both_orders else 1)})

    def _judge(
        self, media: Any, prompts: list[str], metadata: list[dict], pairs: list[tuple[int, int]]
    ) -> torch.Tensor:
        """P(first beats second) of every pair, ``compare_batch`` pairs a call; (len(pairs),)."""
        probs = []
        for start in range(0, len(pairs), self.compare_batch):
            chunk = pairs[start : start + self.compare_batch]
            first, second = [a for a, _ in chunk], [b for _, b in chunk]
            p = self.compare(
                index_media(media, first),
                index_media(media, second),
                [prompts[a] for a in first],
                [metadata[a] for a in first],
            )
            probs.append(torch.as_tensor(p, dtype=torch.float32).reshape(len(chunk)).clamp(0, 1))
        return torch.cat(probs) if probs else torch.zeros(0)

"""The rewards a training config names (``data.reward``): one registry, read by the trainer's reward adapter
(``train.data.reward_adapter``) and by the tests.

Each name maps to a ``RewardSpec``:

- ``fn``: the function of ``train.rewards`` with its variant bound (``aepo_paper`` is ``aepo_reward`` with
  ``variant="paper"``), called with the ground truth as that function takes it;
- ``answer``: what the reward reads in a response (an ``AnswerKind``), which also says which fields of a prompt's
  ``Target`` (``train.data.prompts``) it is scored against: ``spec.score(target, text, think=..., threshold=...)``;
- ``correct``: what counts as a correct answer in its result (the part ``"correct"`` the curriculum reads).

``get_reward(name)`` returns the spec; an unknown name is an ``UnknownReward`` that lists the known ones and names
the closest.
"""

from __future__ import annotations

import difflib
import enum
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from train.errors import UnknownReward
from train.rewards import BoxXYXY, RewardResult, aepo_reward, distance_reward, guir1_reward

__all__ = ["REWARDS", "AnswerKind", "RewardSpec", "get_reward"]


class AnswerKind(enum.Enum):
    """What a reward reads in a response, and so which fields of a ``Target`` it needs."""

    POINT_LIST = "point_list"
    """InfiGUI-G1's ``[{"point_2d": [x, y]}, ...]``, against ``box`` (None: a negative sample)."""
    POINT_DISTANCE = "point_distance"
    """The first point of such a list, partial credit by its distance to ``box`` in ``coord_size`` (needs a
    threshold)."""
    ACTION_LIST = "action_list"
    """GUI-R1's action list, against ``action``, ``box`` (else ``point``) and ``text``."""


def _box(target: Mapping[str, Any]) -> BoxXYXY | None:
    box = target["box"]
    return None if box is None else (box[0], box[1], box[2], box[3])


def _location(target: Mapping[str, Any]) -> Sequence[float] | None:
    """GUI-R1's ground-truth location: the box, else the point, else None (an action with no location)."""
    box = target.get("box")
    if box is not None:
        return list(box)
    point = target.get("point")
    return list(point) if point is not None else None


def _has_correct(r: RewardResult) -> bool:
    return bool(r.info["has_correct"])


def _guir1_correct(r: RewardResult) -> bool:
    return r.parts["accuracy"] >= 1.0


def _guir1_paper_correct(r: RewardResult) -> bool:
    return all(r.parts[k] >= 1.0 for k in ("action", "point", "text"))


@dataclass(frozen=True, slots=True)
class RewardSpec:
    """One named reward (see the module docstring)."""

    name: str
    fn: Callable[..., RewardResult]
    answer: AnswerKind
    correct: Callable[[RewardResult], bool]

    @property
    def reads_point_list(self) -> bool:
        """Whether it reads InfiGUI-G1 point lists (a prompt of another family gets answers it cannot read)."""
        return self.answer is not AnswerKind.ACTION_LIST

    @property
    def needs_threshold(self) -> bool:
        return self.answer is AnswerKind.POINT_DISTANCE

    def score(self, target: Mapping[str, Any], text: str, *, think: bool,
              threshold: float | None = None) -> RewardResult:
        """``fn`` applied to ``text`` with the ground truth read from ``target``; ``think`` is the think gate of
        the point-list rewards, ``threshold`` the distance reward's."""
        if self.answer is AnswerKind.POINT_LIST:
            return self.fn(text, _box(target), think=think)
        if self.answer is AnswerKind.POINT_DISTANCE:
            if threshold is None:
                raise ValueError(f"reward {self.name!r} needs a threshold")
            w, h = target["coord_size"]
            return self.fn(text, _box(target), threshold=threshold, image_size=(w, h), think=think)
        return self.fn(text, target["action"], _location(target), target.get("text"))


REWARDS: dict[str, RewardSpec] = {spec.name: spec for spec in (
    RewardSpec("aepo", aepo_reward, AnswerKind.POINT_LIST, _has_correct),
    RewardSpec("aepo_paper", functools.partial(aepo_reward, variant="paper"), AnswerKind.POINT_LIST, _has_correct),
    RewardSpec("aepo_no_collinear", functools.partial(aepo_reward, collinear_penalty=False), AnswerKind.POINT_LIST,
               _has_correct),
    RewardSpec("guir1", guir1_reward, AnswerKind.ACTION_LIST, _guir1_correct),
    RewardSpec("guir1_paper", functools.partial(guir1_reward, variant="paper"), AnswerKind.ACTION_LIST,
               _guir1_paper_correct),
    RewardSpec("distance", distance_reward, AnswerKind.POINT_DISTANCE, _has_correct),
)}


def get_reward(name: str) -> RewardSpec:
    """The reward registered as ``name``; ``UnknownReward`` (a ValueError) naming the closest one otherwise."""
    try:
        return REWARDS[name]
    except KeyError:
        close = difflib.get_close_matches(name, REWARDS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UnknownReward(f"unknown reward {name!r}; known rewards: {', '.join(sorted(REWARDS))}{hint}") from None

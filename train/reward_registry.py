"""The rewards a training config names (``data.reward``): one registry that says how each is computed, offline and
online. The trainer's reward adapter (``train.data.reward_adapter``) reads it offline, an online session and a fleet
actor (``agent.online``, ``agent.fleet``) online.

Each name maps to a ``RewardSpec``:

- ``fn``: the offline function of ``train.rewards`` with its variant bound (``aepo_paper`` is ``aepo_reward`` with
  ``variant="paper"``), called with the ground truth as that function takes it;
- ``answer``: what the reward reads in a response (an ``AnswerKind``), which also says which fields of a prompt's
  ``Target`` (``train.data.prompts``) it is scored against: ``spec.score(target, text, think=..., threshold=...)``,
  and which answers it can read (``spec.reads``, a family's ``AnswerForm``);
- ``correct``: what counts as a correct answer in its result (the part ``"correct"`` the curriculum reads);
- ``online``: its online form, the ``StepRule`` by which ``train.step_rewards`` weights the step verifier's verdicts
  (None for ``distance``, which scores how far a point is from a box: a verifier says right or wrong, not how far;
  ``offline_only`` says so).

``get_reward(name)`` returns the spec; an unknown name is an ``UnknownReward`` that lists the known ones and names
the closest. ``online_rule(name)`` is the online form, or a ``NoOnlineForm`` saying why there is none and which
rewards have one. A new reward is its function (``train.rewards``), one ``RewardSpec`` line here, and, for an online
form, a ``StepRule`` (``train.step_rewards``).
"""

from __future__ import annotations

import difflib
import enum
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policy.formats import AnswerForm
from train.errors import NoOnlineForm, UnknownReward
from train.rewards import BoxXYXY, RewardResult, aepo_reward, distance_reward, guir1_reward
from train.step_rewards import StepRule

__all__ = ["REWARDS", "AnswerKind", "RewardSpec", "get_reward", "online_rule"]


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
    online: StepRule | None
    """Its online form (``train.step_rewards.step_reward``'s rule); None when it has none."""
    offline_only: str = ""
    """Why it has no online form (when ``online`` is None), for the message that refuses it online."""

    @property
    def reads(self) -> AnswerForm:
        """The answers it reads (a prompt whose family writes another form gets answers it cannot read)."""
        return AnswerForm.ACTION_LIST if self.answer is AnswerKind.ACTION_LIST else AnswerForm.POINT_LIST

    @property
    def reads_point_list(self) -> bool:
        """Whether it reads InfiGUI-G1 point lists (and so scores against a box: ``ActionSource(need_box=...)``)."""
        return self.reads is AnswerForm.POINT_LIST

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
    RewardSpec("aepo", aepo_reward, AnswerKind.POINT_LIST, _has_correct, StepRule.AEPO),
    RewardSpec("aepo_paper", functools.partial(aepo_reward, variant="paper"), AnswerKind.POINT_LIST, _has_correct,
               StepRule.AEPO),
    RewardSpec("aepo_no_collinear", functools.partial(aepo_reward, collinear_penalty=False), AnswerKind.POINT_LIST,
               _has_correct, StepRule.AEPO_NO_COLLINEAR),
    RewardSpec("guir1", guir1_reward, AnswerKind.ACTION_LIST, _guir1_correct, StepRule.GUIR1),
    RewardSpec("guir1_paper", functools.partial(guir1_reward, variant="paper"), AnswerKind.ACTION_LIST,
               _guir1_paper_correct, StepRule.GUIR1),
    RewardSpec("distance", distance_reward, AnswerKind.POINT_DISTANCE, _has_correct, None,
               offline_only="the step verifier says whether each action is right, not how far it is from a box"),
)}


def get_reward(name: str) -> RewardSpec:
    """The reward registered as ``name``; ``UnknownReward`` (a ValueError) naming the closest one otherwise."""
    try:
        return REWARDS[name]
    except KeyError:
        close = difflib.get_close_matches(name, REWARDS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UnknownReward(f"unknown reward {name!r}; known rewards: {', '.join(sorted(REWARDS))}{hint}") from None


def online_rule(name: str) -> StepRule:
    """The online form of the reward registered as ``name``; ``NoOnlineForm`` (a ValueError) saying why it has
    none and which rewards have one, ``UnknownReward`` for a name that is not registered."""
    spec = get_reward(name)
    if spec.online is None:
        online = ", ".join(n for n, s in REWARDS.items() if s.online is not None)
        raise NoOnlineForm(f"data.reward={name!r} cannot score online answers: {spec.offline_only}; use one of "
                           f"{online} (aepo: AEPO's multi-answer reward, guir1: GUI-R1's single-answer reward)")
    return spec.online

"""The unified action space shared by every device and every policy.

Points are normalized frame coordinates (see docs/actions.md, "coordinate contract"): x = u / W and
y = v / H for a continuous point (u, v) of a W x H frame, origin top-left, each in [0, 1]. A point
outside [0, 1] is an InvalidAction, never silently clamped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Any

from devices.errors import InvalidAction
from devices.keys import normalize_key


class ActionKind(str, Enum):
    CLICK = "click"
    DOUBLE_CLICK = "double_click"
    RIGHT_CLICK = "right_click"
    LONG_PRESS = "long_press"
    HOVER = "hover"
    DRAG = "drag"
    SCROLL = "scroll"
    TYPE = "type"
    KEY = "key"
    HOTKEY = "hotkey"
    OPEN_APP = "open_app"
    OPEN_URL = "open_url"
    BACK = "back"
    HOME = "home"
    WAIT = "wait"
    ASK_USER = "ask_user"
    FINISH = "finish"
    INFEASIBLE = "infeasible"


class ScrollDirection(str, Enum):
    UP = "up"
    DOWN = "down"
    LEFT = "left"
    RIGHT = "right"


#: kinds that end an episode instead of touching the device
TERMINAL_KINDS = frozenset({ActionKind.FINISH, ActionKind.INFEASIBLE})
#: kinds the episode runner handles itself: they never reach a device
RUNNER_KINDS = TERMINAL_KINDS | {ActionKind.ASK_USER}
#: kinds whose ``point`` is required
POINTED_KINDS = frozenset(
    {
        ActionKind.CLICK,
        ActionKind.DOUBLE_CLICK,
        ActionKind.RIGHT_CLICK,
        ActionKind.LONG_PRESS,
        ActionKind.HOVER,
        ActionKind.DRAG,
    }
)
#: kinds that abstain: "the target is not here" or "this cannot be done", said by declaring the task infeasible
#: or by handing it back to the person. A correct abstention (the target really is absent) scores like a hit in
#: every verifier, reward and evaluation; a wrong one like a miss (docs/algorithms.md, "Abstention").
ABSTAIN_KINDS = frozenset({ActionKind.INFEASIBLE, ActionKind.ASK_USER})
#: kinds whose ``text`` is required
TEXT_KINDS = frozenset({ActionKind.TYPE, ActionKind.OPEN_APP, ActionKind.OPEN_URL, ActionKind.INFEASIBLE,
                        ActionKind.ASK_USER})


@dataclass(frozen=True, slots=True)
class Point:
    """A normalized frame point: x = u / W, y = v / H, both in [0, 1]."""

    x: float
    y: float

    def __post_init__(self) -> None:
        for name, value in (("x", self.x), ("y", self.y)):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InvalidAction(f"point {name} must be a number, got {value!r}")
            if not math.isfinite(value) or not 0.0 <= value <= 1.0:
                raise InvalidAction(
                    f"point {name}={value!r} is outside [0, 1]: points are normalized frame coordinates "
                    "(pixel / frame size); convert model-space coordinates with the model's format first"
                )
        object.__setattr__(self, "x", float(self.x))
        object.__setattr__(self, "y", float(self.y))

    @classmethod
    def from_pixels(cls, u: float, v: float, width: int, height: int) -> Point:
        """The normalized point of continuous frame pixel coordinates (u, v) in a width x height frame."""
        return cls(u / width, v / height)

    def to_pixels(self, width: float, height: float) -> tuple[float, float]:
        return self.x * width, self.y * height

    def as_list(self) -> list[float]:
        return [self.x, self.y]


@dataclass(frozen=True, slots=True)
class Action:
    """One step's action. Which fields a kind uses:

    - click, double_click, right_click, hover: ``point``
    - long_press: ``point``, ``duration_s`` (default 1.0)
    - drag: ``point`` (start) and ``end``
    - scroll: ``direction``, ``amount`` (fraction of the screen, default 0.5), ``point`` (default: centre)
    - type: ``text``; optional ``point`` to click first
    - key: ``keys`` with one key; hotkey: ``keys`` pressed together (e.g. ("Control", "a"))
    - open_app: ``text`` (app name or package); open_url: ``text`` (the URL)
    - back, home: nothing
    - wait: ``duration_s`` (default 1.0)
    - ask_user: ``text`` (the question): control goes back to the person, who answers (never a device action)
    - finish: optional ``text`` (the answer); infeasible: ``text`` (the reason)

    ``mask`` is not part of the action space a policy writes (``to_dict`` leaves it out, ``from_dict``
    refuses it): the runner sets it when it substituted a secret into ``text``, and a device then
    keeps the field the text went into masked in every later frame it can.
    """

    kind: ActionKind
    point: Point | None = None
    end: Point | None = None
    text: str | None = None
    keys: tuple[str, ...] = ()
    direction: ScrollDirection | None = None
    amount: float | None = None
    duration_s: float | None = None
    mask: bool = False

    def __post_init__(self) -> None:
        try:
            kind = ActionKind(self.kind)
        except ValueError:
            valid = ", ".join(k.value for k in ActionKind)
            raise InvalidAction(f"unknown action kind {self.kind!r}; valid kinds: {valid}") from None
        object.__setattr__(self, "kind", kind)
        if kind in POINTED_KINDS and self.point is None:
            raise InvalidAction(f"{kind.value} needs a point")
        if kind is ActionKind.DRAG and self.end is None:
            raise InvalidAction("drag needs an end point")
        if kind is not ActionKind.DRAG and self.end is not None:
            raise InvalidAction(f"{kind.value} takes no end point (only drag does)")
        if kind in TEXT_KINDS and not self.text:
            raise InvalidAction(f"{kind.value} needs a non-empty text")
        if self.text is not None and not isinstance(self.text, str):
            raise InvalidAction(f"text must be a string, got {type(self.text).__name__}")
        if kind in (ActionKind.KEY, ActionKind.HOTKEY):
            keys = tuple(normalize_key(k) for k in self.keys)
            if not keys:
                raise InvalidAction(f"{kind.value} needs at least one key in keys")
            if kind is ActionKind.KEY and len(keys) != 1:
                raise InvalidAction(f"key takes exactly one key, got {list(keys)}; use hotkey for combinations")
            object.__setattr__(self, "keys", keys)
        elif self.keys:
            raise InvalidAction(f"{kind.value} takes no keys (only key and hotkey do)")
        if kind is ActionKind.SCROLL:
            if self.direction is None:
                raise InvalidAction("scroll needs a direction: up, down, left or right")
            try:
                object.__setattr__(self, "direction", ScrollDirection(self.direction))
            except ValueError:
                raise InvalidAction(f"scroll direction {self.direction!r} is not up, down, left or right") from None
            amount = 0.5 if self.amount is None else self.amount
            if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not 0 < amount <= 10:
                raise InvalidAction(f"scroll amount {self.amount!r} must be in (0, 10] screens")
            object.__setattr__(self, "amount", float(amount))
        elif self.direction is not None or self.amount is not None:
            raise InvalidAction(f"{kind.value} takes no direction or amount (only scroll does)")
        if kind in (ActionKind.WAIT, ActionKind.LONG_PRESS):
            duration = 1.0 if self.duration_s is None else self.duration_s
            if isinstance(duration, bool) or not isinstance(duration, (int, float)) or not 0 <= duration <= 600:
                raise InvalidAction(f"duration_s {self.duration_s!r} must be between 0 and 600 seconds")
            object.__setattr__(self, "duration_s", float(duration))
        elif self.duration_s is not None:
            raise InvalidAction(f"{kind.value} takes no duration_s (only wait and long_press do)")

    # -- serialisation -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict holding only the fields that are set."""
        out: dict[str, Any] = {"kind": self.kind.value}
        if self.point is not None:
            out["point"] = self.point.as_list()
        if self.end is not None:
            out["end"] = self.end.as_list()
        if self.text is not None:
            out["text"] = self.text
        if self.keys:
            out["keys"] = list(self.keys)
        if self.direction is not None:
            out["direction"] = self.direction.value
        if self.amount is not None:
            out["amount"] = self.amount
        if self.duration_s is not None:
            out["duration_s"] = self.duration_s
        return out

    @classmethod
    def from_dict(cls, data: Any) -> Action:
        """Build an Action from its dict form; every problem is an InvalidAction saying what was wrong."""
        if not isinstance(data, dict):
            raise InvalidAction(f"an action must be a JSON object, got {type(data).__name__}")
        unknown = set(data) - {"kind", "point", "end", "text", "keys", "direction", "amount", "duration_s"}
        if unknown:
            raise InvalidAction(f"unknown action field(s) {sorted(unknown)}")
        if "kind" not in data:
            raise InvalidAction("an action needs a 'kind'")
        kwargs = dict(data)
        for name in ("point", "end"):
            if kwargs.get(name) is not None:
                kwargs[name] = _point(kwargs[name], name)
        if "keys" in kwargs:
            keys = kwargs["keys"]
            if isinstance(keys, str):
                keys = [keys]
            if not isinstance(keys, (list, tuple)) or not all(isinstance(k, str) for k in keys):
                raise InvalidAction(f"keys must be a list of key names, got {keys!r}")
            kwargs["keys"] = tuple(keys)
        return cls(**kwargs)

    def describe(self) -> str:
        """A short human-readable form, for summaries and the policy's history."""
        parts = [self.kind.value]
        if self.point is not None:
            parts.append(f"({self.point.x:.3f}, {self.point.y:.3f})")
        if self.end is not None:
            parts.append(f"-> ({self.end.x:.3f}, {self.end.y:.3f})")
        if self.direction is not None:
            parts.append(f"{self.direction.value} {self.amount:g}")
        if self.keys:
            parts.append("+".join(self.keys))
        if self.text is not None:
            parts.append(repr(self.text if len(self.text) <= 40 else self.text[:37] + "..."))
        if self.duration_s is not None:
            parts.append(f"{self.duration_s:g}s")
        return " ".join(parts)


def is_abstention(action: Action | None) -> bool:
    """Whether ``action`` abstains (``ABSTAIN_KINDS``); None (nothing parsed) does not."""
    return action is not None and action.kind in ABSTAIN_KINDS


def _point(value: Any, name: str) -> Point:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise InvalidAction(f"{name} must be [x, y], got {value!r}")
    return Point(value[0], value[1])

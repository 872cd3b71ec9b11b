"""Raw X input (presses, releases, motion, keys) grouped into the person's actions. Pure: no X, no clock.

    gestures = Gestures(DesktopRecordConfig())
    for raw in inputs:                        # in the order the X server saw them
        done = gestures.feed(raw)             # actions complete with this input
        done += gestures.tick(time.time())    # actions whose waiting time ran out

The rules (``DesktopRecordConfig`` holds the numbers):

- left press and release without moving more than ``drag_px``: a click; two such clicks within
  ``double_click_s`` and ``double_click_px``: one double click (so a click is held back until that
  time has passed); held for ``long_press_s``: a long press; moved further: a drag from the press
  to the release. A right press: a right click at the press point.
- wheel clicks (buttons 4/5 vertical, 6/7 horizontal) in one direction with gaps under
  ``scroll_gap_s``: one scroll of that many clicks, at the first click's point.
- printable key presses into one focused window: one ``type`` of their characters (Backspace takes
  back the last one), committed by Enter, Tab, any other named key, a hotkey, a click, a scroll,
  focus moving to another window, or ``type_idle_s`` without a key. Named keys alone: ``key``;
  with Control, Alt or Meta held (or Shift with a named key): ``hotkey``. The Meta key pressed and
  released alone is ``key Meta`` (it opens desktop menus); other modifiers alone are nothing.
- the pause keys pause: everything until they are pressed again is left out, and one ``wait`` with
  the paused time marks the gap. The stop keys end the recording (``stopped``).

An action starts with the input that began it (``Gesture.first``): its time and pre-action frame.
At most one action is open at a time, so actions come out in the order they began.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from devices.actions import ActionKind, ScrollDirection
from devices.desktop.record_config import Combo, DesktopRecordConfig
from devices.desktop.xkeys import COMMAND_MODIFIERS, HOTKEY_ORDER, META, SHIFT, KeyInfo

WHEEL = {4: ScrollDirection.UP, 5: ScrollDirection.DOWN, 6: ScrollDirection.LEFT, 7: ScrollDirection.RIGHT}
LEFT, MIDDLE, RIGHT = 1, 2, 3


class InputKind(str, Enum):
    BUTTON_DOWN = "button_down"
    BUTTON_UP = "button_up"
    MOTION = "motion"
    KEY_DOWN = "key_down"
    KEY_UP = "key_up"


@dataclass(frozen=True, slots=True)
class RawInput:
    """One input event as the X server saw it."""

    kind: InputKind
    at: float
    """Wall time of the event (seconds since the epoch)."""
    x: int
    """The pointer in root (input) coordinates."""
    y: int
    button: int = 0
    key: KeyInfo | None = None
    modifiers: frozenset[str] = frozenset()
    """Modifiers held just before the event."""
    frame: Any = None
    """The newest captured frame older than the event (presses only; opaque here)."""
    window: int = 0
    """Key presses: the window with the keyboard focus (text groups by it)."""
    target: Any = None
    """What the press went to (opaque here: the recorder looks it up when the press arrives)."""


@dataclass(frozen=True, slots=True)
class Gesture:
    """One action of the person, in root coordinates; the recorder turns it into a DemoEvent."""

    kind: ActionKind
    first: RawInput
    """The input that began it: its time, pre-action frame and target are the action's."""
    start: tuple[int, int] | None = None
    end: tuple[int, int] | None = None
    text: str | None = None
    keys: tuple[str, ...] = ()
    direction: ScrollDirection | None = None
    clicks: int = 0
    """Wheel clicks of a scroll."""
    duration_s: float | None = None
    """long_press: how long it was held; wait: how long the recording was paused."""


@dataclass(slots=True)
class _Open:
    """The action that has begun and may still grow (a click that may become a double, a scroll, text)."""

    kind: ActionKind
    first: RawInput
    last_at: float
    clicks: int = 0
    direction: ScrollDirection | None = None
    text: list[str] = field(default_factory=list)
    second: bool = False
    """A click: its second press has come and qualifies for a double click."""


@dataclass(slots=True)
class _Press:
    first: RawInput
    moved: float = 0.0


class Gestures:
    """The grouping state machine (see the module docstring)."""

    def __init__(self, config: DesktopRecordConfig) -> None:
        self.config = config
        self.pause_combo: Combo = config.pause_combo
        self.stop_combo: Combo = config.stop_combo
        self.stopped = False
        self.paused: RawInput | None = None
        """The pause key's press while paused."""
        self.left_out: Counter[str] = Counter()
        """Inputs with no action in the unified space, and inputs while paused, by kind."""
        self._open: _Open | None = None
        self._press: _Press | None = None
        self._lone_meta: RawInput | None = None

    # -- time ----------------------------------------------------------------------------------------
    def deadline(self) -> float | None:
        """When the open action completes unless more input comes (None: nothing is waiting)."""
        o, c = self._open, self.config
        if o is None or self._press is not None:
            return None
        if o.kind is ActionKind.CLICK:
            return o.first.at + c.double_click_s
        return o.last_at + (c.scroll_gap_s if o.kind is ActionKind.SCROLL else c.type_idle_s)

    def tick(self, now: float) -> list[Gesture]:
        deadline = self.deadline()
        return self.flush() if deadline is not None and now >= deadline else []

    def flush(self) -> list[Gesture]:
        """Complete the open action, if any."""
        o, self._open = self._open, None
        if o is None:
            return []
        if o.kind is ActionKind.CLICK:
            return [Gesture(ActionKind.CLICK, o.first, start=(o.first.x, o.first.y))]
        if o.kind is ActionKind.SCROLL:
            return [Gesture(ActionKind.SCROLL, o.first, start=(o.first.x, o.first.y), direction=o.direction,
                            clicks=o.clicks)]
        text = "".join(o.text)
        return [Gesture(ActionKind.TYPE, o.first, text=text)] if text else []

    # -- input ---------------------------------------------------------------------------------------
    def feed(self, raw: RawInput) -> list[Gesture]:
        if self.stopped:
            return []
        if raw.kind is InputKind.KEY_DOWN and raw.key is not None:
            combo = _combo(raw)
            if combo == self.stop_combo:
                out = self.flush() + self._resume(raw)
                self.stopped = True
                return out
            if combo == self.pause_combo:
                if self.paused is not None:
                    return self._resume(raw)
                out = self.flush()
                self._press = self._lone_meta = None
                self.paused = raw
                return out
        if self.paused is not None:
            if raw.kind is InputKind.BUTTON_DOWN or (raw.kind is InputKind.KEY_DOWN and not _is_modifier(raw)):
                self.left_out["while paused"] += 1
            return []
        if raw.kind is InputKind.KEY_DOWN:
            return self._key_down(raw)
        if raw.kind is InputKind.KEY_UP:
            return self._key_up(raw)
        if raw.kind is InputKind.BUTTON_DOWN:
            return self._button_down(raw)
        if raw.kind is InputKind.BUTTON_UP:
            return self._button_up(raw)
        if self._press is not None:  # motion with a button held
            p = self._press.first
            self._press.moved = max(self._press.moved, math.dist((p.x, p.y), (raw.x, raw.y)))
        return []

    def _resume(self, raw: RawInput) -> list[Gesture]:
        paused, self.paused = self.paused, None
        if paused is None:
            return []
        gap = min(600.0, max(0.0, raw.at - paused.at))
        return [Gesture(ActionKind.WAIT, paused, duration_s=gap)]

    # -- pointer -------------------------------------------------------------------------------------
    def _button_down(self, raw: RawInput) -> list[Gesture]:
        self._lone_meta = None
        if raw.button in WHEEL:
            return self._wheel(raw)
        if raw.button not in (LEFT, MIDDLE, RIGHT):
            self.left_out[f"mouse button {raw.button}"] += 1
            return []
        if self._press is not None:  # a second button while one is held: the first one's action goes on
            self.left_out["chorded mouse button"] += 1
            return []
        o = self._open
        if not (o is not None and o.kind is ActionKind.CLICK and raw.button == LEFT and self._doubles(o.first, raw)):
            out = self.flush()
        else:
            o.second, out = True, []
        self._press = _Press(raw)
        return out

    def _doubles(self, first: RawInput, second: RawInput) -> bool:
        c = self.config
        return (second.at - first.at <= c.double_click_s and abs(second.x - first.x) <= c.double_click_px
                and abs(second.y - first.y) <= c.double_click_px)

    def _button_up(self, raw: RawInput) -> list[Gesture]:
        press = self._press
        if raw.button in WHEEL or press is None or press.first.button != raw.button:
            return []
        self._press = None
        p = press.first
        start = (p.x, p.y)
        if raw.button == RIGHT:
            return [Gesture(ActionKind.RIGHT_CLICK, p, start=start)]
        if raw.button == MIDDLE:
            self.left_out["middle click"] += 1
            return []
        moved = max(press.moved, math.dist(start, (raw.x, raw.y))) > self.config.drag_px
        held = raw.at - p.at
        if moved or held >= self.config.long_press_s:
            out = self.flush()
            if moved:
                return [*out, Gesture(ActionKind.DRAG, p, start=start, end=(raw.x, raw.y))]
            return [*out, Gesture(ActionKind.LONG_PRESS, p, start=start, duration_s=min(600.0, held))]
        o = self._open
        if o is not None and o.kind is ActionKind.CLICK and o.second:
            self._open = None
            return [Gesture(ActionKind.DOUBLE_CLICK, o.first, start=(o.first.x, o.first.y))]
        out = self.flush()
        self._open = _Open(ActionKind.CLICK, p, p.at)
        return out

    def _wheel(self, raw: RawInput) -> list[Gesture]:
        direction = WHEEL[raw.button]
        o = self._open
        if (o is not None and o.kind is ActionKind.SCROLL and o.direction is direction
                and raw.at - o.last_at <= self.config.scroll_gap_s):
            o.clicks += 1
            o.last_at = raw.at
            return []
        out = self.flush()
        self._open = _Open(ActionKind.SCROLL, raw, raw.at, clicks=1, direction=direction)
        return out

    # -- keyboard ------------------------------------------------------------------------------------
    def _key_down(self, raw: RawInput) -> list[Gesture]:
        key = raw.key
        assert key is not None
        if key.modifier is not None:
            self._lone_meta = raw if key.modifier == META else None
            return []
        self._lone_meta = None
        command = raw.modifiers & COMMAND_MODIFIERS
        o = self._open
        if not command and key.char is not None:
            if o is not None and o.kind is ActionKind.TYPE and o.first.window == raw.window:
                o.text.append(key.char)
                o.last_at = raw.at
                return []
            out = self.flush()
            self._open = _Open(ActionKind.TYPE, raw, raw.at, text=[key.char])
            return out
        if not command and key.name == "Backspace" and o is not None and o.kind is ActionKind.TYPE and o.text:
            o.text.pop()
            o.last_at = raw.at
            return []
        name = key.base if command else key.name
        if name is None:
            self.left_out["key without a name"] += 1
            return []
        held = command | (raw.modifiers & {SHIFT})
        keys = tuple(m for m in HOTKEY_ORDER if m in held) + (name,)
        return [*self.flush(), Gesture(ActionKind.HOTKEY if held else ActionKind.KEY, raw, keys=keys)]

    def _key_up(self, raw: RawInput) -> list[Gesture]:
        lone, self._lone_meta = self._lone_meta, None
        if lone is not None and raw.key is not None and raw.key.modifier == META:
            return [*self.flush(), Gesture(ActionKind.KEY, lone, keys=(META,))]
        return []


def _combo(raw: RawInput) -> Combo | None:
    key = raw.key
    if key is None or key.modifier is not None or key.base is None:
        return None
    return Combo(frozenset(raw.modifiers & (COMMAND_MODIFIERS | {SHIFT})), key.base.lower())


def _is_modifier(raw: RawInput) -> bool:
    return raw.key is not None and raw.key.modifier is not None

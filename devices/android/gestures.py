"""Which unified action a person's touch or key press on a phone was: the rules of ``AndroidRecorder``.

Touches (the first finger decides; touch slop as Android's, ``touch_slop_dp``, 8 dp):

- the finger stayed within the slop: ``long_press`` (with its ``duration_s``) when held ``long_press_s`` or
  longer, else ``click``;
- it moved after resting ``long_press_s`` in place (moving an icon, selecting text), or it started on a slider
  (``SeekBar``, ``Slider``, ``RatingBar``): ``drag`` from its start to its end;
- it moved mostly along one axis (``scroll_axis_ratio`` times more along it than across, as a fling or a page
  swipe does): ``scroll``, as GUI-R1 and AndroidControl name vertical and horizontal swipes. The direction is
  the content's, as in ``devices.android.commands``: the finger moving up scrolls *down*; ``amount`` is the
  finger's travel in screens and ``point`` the swipe's midpoint, where a replay centres its swipe;
- any other movement: ``drag``.

Keys (Linux key names from getevent): KEY_BACK is ``back``, KEY_HOME / KEY_HOMEPAGE ``home``, KEY_ENTER ``key
Enter``, KEY_APPSWITCH ``key AppSwitch``, and Tab, Escape, arrows, Delete, Backspace, Space and letters or digits
of a hardware keyboard ``key`` actions with their canonical names (``devices.keys``), except that characters,
space and backspace are typing while a text field has the focus. Volume, power and other keys have no action.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from devices.actions import Action, ActionKind, Point, ScrollDirection

#: keys that are actions of their own
KEY_ACTIONS = {"KEY_BACK": ActionKind.BACK, "KEY_HOME": ActionKind.HOME, "KEY_HOMEPAGE": ActionKind.HOME}
#: keys that are ``key`` actions, by their canonical names (devices.keys)
KEY_NAMES = {
    "KEY_ENTER": "Enter", "KEY_KPENTER": "Enter", "KEY_APPSWITCH": "AppSwitch", "KEY_TAB": "Tab",
    "KEY_ESC": "Escape", "KEY_DELETE": "Delete", "KEY_UP": "ArrowUp", "KEY_DOWN": "ArrowDown",
    "KEY_LEFT": "ArrowLeft", "KEY_RIGHT": "ArrowRight", "KEY_BACKSPACE": "Backspace", "KEY_SPACE": "Space",
}
_TYPING_KEYS = frozenset({"KEY_BACKSPACE", "KEY_SPACE"})
_SLIDERS = ("SeekBar", "Slider", "RatingBar")


@dataclass(frozen=True, slots=True)
class AndroidRecordOptions:
    """How touches are read and how often the phone is captured (``AndroidRecorder``)."""

    long_press_s: float = 0.5
    """A touch held this long in place is a long press (Android's long-press timeout is 0.4-0.5 s)."""
    touch_slop_dp: float = 8.0
    """A finger that moved no further (in density-independent pixels) did not move (Android's touch slop)."""
    scroll_axis_ratio: float = 2.0
    """A swipe this many times longer along one axis than across it is a scroll."""
    frame_interval_s: float = 0.1
    """Least time between the starts of two captures (a phone's screencap is slower anyway)."""
    dump_interval_s: float = 0.2
    """Least time between the starts of two UI hierarchy dumps."""
    keyboard_fraction: float = 0.4
    """The soft keyboard's height as a fraction of the screen, where dumpsys input_method does not say."""
    keep_s: float = 3.0
    """Seconds of frames kept for events still on their way from the phone."""

    def __post_init__(self) -> None:
        for name in ("long_press_s", "touch_slop_dp", "frame_interval_s", "dump_interval_s", "keep_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"{name}={value!r} must be a number of at least 0")
        if not self.scroll_axis_ratio >= 1 or not 0 < self.keyboard_fraction < 1:
            raise ValueError(f"scroll_axis_ratio={self.scroll_axis_ratio!r} must be at least 1 and "
                             f"keyboard_fraction={self.keyboard_fraction!r} within (0, 1)")


def touch_action(path: list[tuple[float, float, float]], duration_s: float, size: tuple[int, int], slop_px: float,
                 options: AndroidRecordOptions, target_class: str = "") -> Action:
    """The action of one touch, from the first finger's path of (seconds since down, x, y) in normalized frame
    coordinates on a frame of ``size`` (W, H) pixels (the rules are in the module docstring)."""
    w, h = size
    _, x0, y0 = path[0]
    _, x1, y1 = path[-1]
    start = Point(x0, y0)
    left = next((t for t, x, y in path if math.hypot((x - x0) * w, (y - y0) * h) > slop_px), None)
    if left is None:
        if duration_s >= options.long_press_s:
            return Action(ActionKind.LONG_PRESS, start, duration_s=round(min(duration_s, 600.0), 3))
        return Action(ActionKind.CLICK, start)
    dx, dy = (x1 - x0) * w, (y1 - y0) * h
    if left >= options.long_press_s or any(s in target_class for s in _SLIDERS):
        return Action(ActionKind.DRAG, start, Point(x1, y1))
    middle = Point((x0 + x1) / 2, (y0 + y1) / 2)
    if abs(dy) >= options.scroll_axis_ratio * abs(dx):
        direction = ScrollDirection.DOWN if dy < 0 else ScrollDirection.UP
        return Action(ActionKind.SCROLL, middle, direction=direction, amount=_screens(abs(dy) / h))
    if abs(dx) >= options.scroll_axis_ratio * abs(dy):
        direction = ScrollDirection.RIGHT if dx < 0 else ScrollDirection.LEFT
        return Action(ActionKind.SCROLL, middle, direction=direction, amount=_screens(abs(dx) / w))
    return Action(ActionKind.DRAG, start, Point(x1, y1))


def _screens(amount: float) -> float:
    return round(min(10.0, max(0.001, amount)), 4)


def is_typing_key(name: str) -> bool:
    """Whether a key edits the focused field's text (a character, space or backspace of a hardware keyboard)."""
    return name in _TYPING_KEYS or _character(name) is not None


def key_action(name: str) -> Action | None:
    """The action of a key press (a Linux key name), None for keys with none (volume, power)."""
    if name in KEY_ACTIONS:
        return Action(KEY_ACTIONS[name])
    key = KEY_NAMES.get(name) or _character(name)
    return Action(ActionKind.KEY, keys=(key,)) if key else None


def _character(name: str) -> str | None:
    """The character of a letter or digit key (KEY_A -> "a"), None for other keys."""
    rest = name.removeprefix("KEY_")
    return rest.lower() if len(rest) == 1 and rest.isalnum() else None

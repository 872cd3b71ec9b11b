"""Raw browser input, as the recorder's page listener reports it, turned into unified actions.

Pure logic (no browser); the rules, listed in ``devices/web/recorder.py``, are tested end to end on a real Chromium
(tests/devices/test_web_recorder.py).

Every report is checked against the shape the listener sends (``check_report``: each field of the right type, every
number finite, a key with a name the action space knows) before a rule reads it. One that is not is refused: logged
(the first ``LOGGED_REFUSALS`` of them, then counted only), counted in ``Interpreter.refused`` by reason, and skipped.
A refusal never ends a recording and never changes what the rules hold (a press waiting for its release, a click
that may become a double click).
"""

from __future__ import annotations

import collections
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

from devices.actions import Action, ActionKind, Point, ScrollDirection
from devices.base import Box, ElementInfo
from devices.errors import DeviceError, RefusedReport
from devices.keys import normalize_key
from devices.recording import MASKED_TEXT

log = logging.getLogger(__name__)

DOUBLE_CLICK_S = 0.45
"""A second click within this many seconds (and ``DRAG_PX``) of the first makes a double click."""
DRAG_PX = 8.0
"""A press that moved further than this (CSS pixels) before its release is a drag."""
WHEEL_GAP_S = 0.5
"""Wheel turns closer together than this are one scroll."""
NAVIGATION_CAUSE_S = 2.0
"""A page load within this long after an action is that action's doing; a later one is an ``open_url``."""
MAX_WAIT_S = 600.0
"""The longest ``wait`` the action space holds (a longer pause keeps its full length in ``info``)."""
PAGE_NAVIGATION_S = 30.0
"""A load within this long after the page's own document asked for a navigation is that navigation (a request the
page cancelled does not take a later load of the person's with it)."""
LOGGED_REFUSALS = 20
"""Refused reports logged one by one; past this many they are only counted (``Interpreter.refused``)."""
RECORDER_KINDS = frozenset({"tab", "closed", "requested"})
"""Reports the recorder itself makes (a tab opened, a page closed, a navigation the page's document started), not
the listener: never checked, and refused when a listener report names them."""


@dataclass(frozen=True, slots=True)
class RawReport:
    """One report of the page listener: its kind, input time (seconds), page, payload and frame offset."""

    kind: str
    at: float
    page: Any
    payload: dict[str, Any]
    offset: tuple[float, float] = (0.0, 0.0)
    frame_url: str = ""


@dataclass(frozen=True, slots=True)
class Made:
    """An interpreted action with what the recorder needs to find its frame."""

    action: Action
    at: float
    page: Any = None
    target: ElementInfo | None = None
    url: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    masked: bool = False
    sensitive_boxes: tuple[Box, ...] = ()


def _combo(text: str) -> frozenset[str]:
    return frozenset(normalize_key(k).lower() for k in text.replace(" ", "").split("+") if k)


class Interpreter:
    """Feeds on ``RawReport``s, hands out ``Made`` actions (some held back a moment: a click that may become a
    double click, wheel turns that may continue)."""

    def __init__(self, *, viewport: tuple[float, float] = (1280, 720), pause_key: str = "Control+Alt+p",
                 stop_key: str = "Control+Alt+s") -> None:
        self.viewport = viewport
        self.pause_key, self.stop_key = pause_key, stop_key
        self._pause, self._stop = _combo(pause_key), _combo(stop_key)
        self.stopped = False
        self.paused_since: float | None = None
        self._held: tuple[str, Made, float, RawReport] | None = None  # (kind, made, release deadline, last report)
        self._down: RawReport | None = None
        self._after_drag = False
        self._pending_down: RawReport | None = None
        self._last_action_at = 0.0
        self._loads = 0
        self._tab_info: dict[str, Any] = {}
        self._page_navigation: tuple[str, float] | None = None
        """Why and when the page's own document asked for a navigation that has not loaded yet."""
        self.page_loads = 0
        """Loads the page made itself (a script, a meta refresh), which are not the person's ``open_url``."""
        self.refused: collections.Counter[str] = collections.Counter()
        """Reports refused, by the kind of report (``unreadable``: one the checks let through that a rule could not
        read; the recorder adds its own, e.g. ``binding`` for a call it could not take)."""

    # -- helpers ----------------------------------------------------------------------------------------------------
    def _point(self, r: RawReport) -> Point:
        w, h = self.viewport
        x = float(r.payload.get("x") or 0.0) + r.offset[0]
        y = float(r.payload.get("y") or 0.0) + r.offset[1]
        return Point(min(max(x / w, 0.0), 1.0), min(max(y / h, 0.0), 1.0))

    def _target(self, r: RawReport) -> ElementInfo | None:
        t = r.payload.get("target")
        if not t:
            return None
        w, h = self.viewport
        ox, oy = r.offset
        x1, y1, x2, y2 = (float(v) for v in t["box"])
        box = Box((x1 + ox) / w, (y1 + oy) / h, (x2 + ox) / w, (y2 + oy) / h).clipped()
        return ElementInfo(text="" if t.get("password") else str(t.get("name") or ""), box=box,
                           role=str(t.get("tag") or ""), password=bool(t.get("password")))

    def _boxes(self, r: RawReport) -> tuple[Box, ...]:
        w, h = self.viewport
        ox, oy = r.offset
        out = []
        for x1, y1, x2, y2 in r.payload.get("pw") or ():
            b = Box((x1 + ox) / w, (y1 + oy) / h, (x2 + ox) / w, (y2 + oy) / h).clipped()
            if b.x2 > b.x1 and b.y2 > b.y1:
                out.append(b)
        return tuple(out)

    def _made(self, action: Action, r: RawReport, at: float | None = None, **info: Any) -> Made:
        t = r.payload.get("target") or {}
        extra = {k: v for k, v in {"selector": t.get("selector"), "name": t.get("name"), "frame": r.frame_url
                                   if r.offset != (0.0, 0.0) else None}.items() if v}
        info = {**extra, **self._tab_info, **info}
        self._tab_info = {}
        return Made(action, r.at if at is None else at, r.page, self._target(r), str(r.payload.get("url") or ""),
                    info, False, self._boxes(r))

    # -- the rules --------------------------------------------------------------------------------------------------
    def hold_s(self) -> float | None:
        """Seconds until a held action must be let go (None: nothing held)."""
        return None if self._held is None else max(0.0, self._held[2] - time.time())

    def flush(self) -> list[Made]:
        """Let go of a held action."""
        if self._held is None:
            return []
        _, made, _, _ = self._held
        self._held = None
        self._last_action_at = made.at
        return [made]

    def _hold(self, kind: str, made: Made, wait_s: float, r: RawReport) -> list[Made]:
        out = self.flush()
        self._held = (kind, made, time.time() + wait_s, r)
        return out

    def _now(self, made: Made) -> list[Made]:
        """``made`` and a held action let go with it, in the order they were done: typing is reported when the person
        leaves the field (from a frame, that report can come after a click in the page that made them leave), but
        its time is its first keystroke."""
        out = sorted([*self.flush(), made], key=lambda m: m.at)
        self._last_action_at = max(m.at for m in out)
        return out

    def feed(self, r: RawReport) -> list[Made]:
        """The actions that ``r`` completes (with any held action it releases first); none for a refused report."""
        if self.stopped:
            return []
        try:
            if r.kind not in RECORDER_KINDS:
                check_report(r.kind, r.payload)
            if r.kind == "key" and self._control(r):
                return self._control_key(r)
            if self.paused_since is not None:
                return []
            handler = getattr(self, f"_on_{r.kind}", None)
            return handler(r) if handler is not None else []
        except (RefusedReport, DeviceError, ValueError, TypeError, KeyError, ArithmeticError) as e:
            # a report the checks let through that a rule still cannot read counts as refused too
            self.refuse(r.kind if isinstance(e, RefusedReport) else "unreadable", f"{r.kind} report: {e}")
            return []

    def refuse(self, reason: str, detail: str) -> None:
        """Count (and, for the first ``LOGGED_REFUSALS``, log) one refused report."""
        self.refused[reason] += 1
        total = sum(self.refused.values())
        if total <= LOGGED_REFUSALS:
            log.warning("refused a recorder report (%s): %s", reason, detail[:300])
        elif total == LOGGED_REFUSALS + 1:
            log.warning("more recorder reports refused: they are only counted from now on")

    @staticmethod
    def _pressed(r: RawReport) -> frozenset[str]:
        """The key and its modifiers, lower-case canonical names."""
        mods = [name for name, key in (("control", "ctrl"), ("alt", "alt"), ("meta", "meta"), ("shift", "shift"))
                if r.payload.get(key)]
        return frozenset({*mods, normalize_key(str(r.payload.get("key") or "")).lower()})

    def _control(self, r: RawReport) -> bool:
        return self._pressed(r) in (self._pause, self._stop)

    def _control_key(self, r: RawReport) -> list[Made]:
        """The stop key ends the recording; the pause key pauses, and again resumes with one ``wait``."""
        if self._pressed(r) == self._stop:
            self.stopped = True
            return self.flush()
        if self.paused_since is None:
            self.paused_since = r.at
            return self.flush()
        paused = r.at - self.paused_since
        self.paused_since = None
        wait = Action(ActionKind.WAIT, duration_s=min(paused, MAX_WAIT_S))
        return self._now(self._made(wait, r, at=r.at, paused_s=round(paused, 3)))

    def _on_tab(self, r: RawReport) -> list[Made]:
        self._tab_info = {"tab": r.payload.get("tab"), "new_tab": True}
        return []

    def _on_requested(self, r: RawReport) -> list[Made]:
        self._page_navigation = (str(r.payload.get("reason") or "the page"), r.at)
        return []

    def _on_loaded(self, r: RawReport) -> list[Made]:
        self._loads += 1
        asked, self._page_navigation = self._page_navigation, None
        if self._loads == 1 or r.at - self._last_action_at <= NAVIGATION_CAUSE_S:
            return []  # the start page, or the doing of the last action
        if asked is not None and r.at - asked[1] <= PAGE_NAVIGATION_S:  # the page's own script, refresh or form
            self.page_loads += 1
            log.info("a load the page made itself (%s) is not recorded: %s", asked[0], str(r.payload.get("url"))[:200])
            return []
        if r.payload.get("how") == "back_forward":
            return self._now(self._made(Action(ActionKind.BACK), r))
        url = str(r.payload.get("url") or "")
        return self._now(self._made(Action(ActionKind.OPEN_URL, text=url), r)) if url else []

    def _on_down(self, r: RawReport) -> list[Made]:
        if r.payload.get("button") == 0:
            self._down = r
        held = self._held
        if held is not None and held[0] == "wheel":
            return self.flush()
        return []

    def _on_up(self, r: RawReport) -> list[Made]:
        down, self._down = self._down, None
        if down is None or r.payload.get("button") != 0:
            return []
        dx = float(r.payload.get("x") or 0) - float(down.payload.get("x") or 0)
        dy = float(r.payload.get("y") or 0) - float(down.payload.get("y") or 0)
        if (dx * dx + dy * dy) ** 0.5 <= DRAG_PX:
            self._pending_down = down
            return []
        self._after_drag = True
        drag = Action(ActionKind.DRAG, self._point(down), end=self._point(r))
        return self._now(self._made(drag, down, at=down.at))

    def _on_click(self, r: RawReport) -> list[Made]:
        if r.payload.get("button") != 0:
            return []
        if self._after_drag:
            self._after_drag = False
            return []
        down = self._pending_down or r
        self._pending_down = None
        held = self._held
        if held is not None and held[0] == "click" and int(r.payload.get("count") or 1) >= 2:
            first = held[1]
            self._held = None
            double = Action(ActionKind.DOUBLE_CLICK, first.action.point)
            return self._now(Made(double, first.at, first.page, first.target, first.url, first.info, False,
                                  first.sensitive_boxes))
        click = self._made(Action(ActionKind.CLICK, self._point(down)), down, at=down.at)
        return self._hold("click", click, DOUBLE_CLICK_S, r)

    def _on_context(self, r: RawReport) -> list[Made]:
        return self._now(self._made(Action(ActionKind.RIGHT_CLICK, self._point(r)), r))

    def _on_wheel(self, r: RawReport) -> list[Made]:
        dy, dx = float(r.payload.get("dy") or 0), float(r.payload.get("dx") or 0)
        unit = {1: 16.0, 2: self.viewport[1]}.get(int(r.payload.get("mode") or 0), 1.0)
        held = self._held
        if held is not None and held[0] == "wheel" and r.at - held[3].at <= WHEEL_GAP_S:
            made = held[1]
            sums = (made.info["dx"] + dx * unit, made.info["dy"] + dy * unit)
            self._held = ("wheel", _with_scroll(made, *sums, self.viewport), time.time() + WHEEL_GAP_S, r)
            return []
        made = _with_scroll(self._made(Action(ActionKind.WAIT, duration_s=0), r), dx * unit, dy * unit, self.viewport,
                            point=self._point(r))
        return self._hold("wheel", made, WHEEL_GAP_S, r)

    def _on_key(self, r: RawReport) -> list[Made]:
        key = normalize_key(str(r.payload.get("key") or ""))
        mods = [name for name, on in (("Control", r.payload.get("ctrl")), ("Alt", r.payload.get("alt")),
                                      ("Meta", r.payload.get("meta"))) if on]
        if mods or (r.payload.get("shift") and len(key) > 1):
            if r.payload.get("shift"):
                mods.append("Shift")
            keys = (*mods, key.lower() if len(key) == 1 else key)
            return self._now(self._made(Action(ActionKind.HOTKEY, keys=keys), r))
        return self._now(self._made(Action(ActionKind.KEY, keys=(key,)), r))

    def _on_char(self, r: RawReport) -> list[Made]:
        return self._now(self._made(Action(ActionKind.KEY, keys=(normalize_key(str(r.payload["key"])),)), r))

    def _on_typed(self, r: RawReport) -> list[Made]:
        target = r.payload.get("target") or {}
        text, before = str(r.payload.get("text") or ""), str(r.payload.get("before") or "")
        info: dict[str, Any] = {"committed_by": r.payload.get("reason")}
        masked = bool(target.get("password"))
        if before:
            info["previous_value"] = MASKED_TEXT if masked else before
        if not text:  # the person emptied the field
            made = self._made(Action(ActionKind.HOTKEY, keys=("Control", "a")), r, cleared_field=True, **info)
            return self._now(made) + self._now(self._made(Action(ActionKind.KEY, keys=("Backspace",)), r,
                                                            cleared_field=True))
        action = Action(ActionKind.TYPE, text=MASKED_TEXT if masked else text)
        made = self._made(action, r, **info)
        if masked:
            made = Made(made.action, made.at, made.page, made.target, made.url, made.info, True, made.sensitive_boxes)
        return self._now(made)

    def _on_select(self, r: RawReport) -> list[Made]:
        target = self._target(r)
        label = str(r.payload.get("label") or r.payload.get("value") or "")
        if target is None or target.box is None or not label:
            return []
        point = Point(*target.box.center)
        return self._now(self._made(Action(ActionKind.TYPE, point=point, text=label), r,
                                    select={"value": r.payload.get("value"), "label": label}))


def _with_scroll(made: Made, dx: float, dy: float, viewport: tuple[float, float], point: Point | None = None) -> Made:
    """``made`` as the scroll that wheel deltas (dx, dy) in CSS pixels add up to."""
    w, h = viewport
    if abs(dy) >= abs(dx):
        direction = ScrollDirection.DOWN if dy >= 0 else ScrollDirection.UP
        amount = abs(dy) / h
    else:
        direction = ScrollDirection.RIGHT if dx >= 0 else ScrollDirection.LEFT
        amount = abs(dx) / w
    at_point = point if point is not None else made.action.point
    action = Action(ActionKind.SCROLL, point=at_point, direction=direction, amount=min(max(amount, 0.01), 10.0))
    return Made(action, made.at, made.page, made.target, made.url, {**made.info, "dx": dx, "dy": dy}, False,
                made.sensitive_boxes)


# -- the shape of a report ------------------------------------------------------------------------------------------
_POINT = {"x": "number", "y": "number"}
_SCHEMA: dict[str, dict[str, str]] = {
    "down": {**_POINT, "button": "int"},
    "up": {**_POINT, "button": "int"},
    "click": {**_POINT, "button": "int", "count": "int"},
    "context": {**_POINT},
    "wheel": {**_POINT, "dx": "number", "dy": "number", "mode": "int"},
    "key": {"key": "key", "ctrl": "bool", "alt": "bool", "meta": "bool", "shift": "bool"},
    "char": {"key": "char"},
    "typed": {"text": "str", "before": "str", "reason": "str", "target": "target"},
    "select": {"label": "str", "value": "str", "target": "target"},
    "loaded": {"url": "str", "how": "str"},
}
"""The fields each kind of listener report must have, and their types (``recorder_script.py`` sends them)."""
_OPTIONAL = {"url": "str", "target": "target?", "pw": "boxes", "vw": "number", "vh": "number"}
"""Fields any report may have."""
_TARGET = {"tag": "str", "role": "str", "name": "str", "selector": "str", "password": "bool", "box": "box"}


def check_report(kind: str, payload: dict[str, Any]) -> None:
    """Raise RefusedReport unless ``payload`` is a report of ``kind`` as the listener sends it: every field of its
    type, every number finite, a key the action space names."""
    schema = _SCHEMA.get(kind)
    if schema is None:
        raise RefusedReport(f"unknown kind {kind!r}; the listener sends {', '.join(sorted(_SCHEMA))}")
    _check_field("t", payload.get("t"), "number")
    for name, kind_of in schema.items():
        _check_field(name, payload.get(name), kind_of)
    for name, kind_of in _OPTIONAL.items():
        if name in payload and name not in schema and payload[name] is not None:
            _check_field(name, payload[name], kind_of)


def _check_field(name: str, value: Any, kind_of: str) -> None:
    if kind_of == "target?":
        if value is not None:
            _check_field(name, value, "target")
        return
    if kind_of == "target":
        if not isinstance(value, dict):
            raise RefusedReport(f"{name} must be an element's description, got {type(value).__name__}")
        for key, sub in _TARGET.items():
            _check_field(f"{name}.{key}", value.get(key), sub)
        return
    if kind_of == "boxes":
        if not isinstance(value, list) or len(value) > 1000:
            raise RefusedReport(f"{name} must be a list of boxes, got {type(value).__name__}")
        for i, box in enumerate(value):
            _check_field(f"{name}[{i}]", box, "box")
        return
    if kind_of == "box":
        if not isinstance(value, list) or len(value) != 4:
            raise RefusedReport(f"{name} must be [left, top, right, bottom], got {_show(value)}")
        for v in value:
            _check_field(name, v, "number")
        return
    if kind_of in ("key", "char"):
        if not isinstance(value, str) or not value or (kind_of == "char" and len(value) != 1):
            raise RefusedReport(f"{name} must be a key's name, got {_show(value)}")
        try:
            normalize_key(value)
        except DeviceError as e:
            raise RefusedReport(f"{name}: a key with no name in the action space ({_show(value)})") from e
        return
    ok = {"number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
          "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
          "bool": lambda v: isinstance(v, bool), "str": lambda v: isinstance(v, str)}[kind_of]
    if not ok(value):
        raise RefusedReport(f"{name} must be {'a finite number' if kind_of == 'number' else 'a ' + kind_of}, "
                            f"got {_show(value)}")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."

"""What ``getevent`` prints, parsed: the input devices (``getevent -p``), event lines (``getevent -lt``) and the
touches they add up to. Pure functions and small state machines, unit-tested without a phone.

``getevent -p`` (``-lp`` with names) lists every ``/dev/input/eventN`` with its name and the codes it can send:
``KEY (0001):`` key names, ``ABS (0003):`` one axis per line with ``min``/``max``. The touchscreen is the device
with ``ABS_MT_POSITION_X`` and ``ABS_MT_POSITION_Y`` (preferring one with ``INPUT_PROP_DIRECT``); its ranges are
in the panel's natural orientation, whatever the display's rotation.

``getevent -lt`` prints one line per kernel event: ``[   SECONDS.MICROS] /dev/input/eventN: TYPE CODE VALUE``,
with names (``EV_ABS ABS_MT_POSITION_X 000001a4``) or, without ``-l``, hex numbers (``0003 0035 000001a4``).
Values are 32-bit hex (``ffffffff`` is -1) except key states (``DOWN``, ``UP``, ``REPEAT``). The timestamps are
the phone's clock, never compared with the computer's (see ``devices.android.recorder``).

Touches follow the Linux multi-touch protocol B: ``ABS_MT_SLOT`` picks a slot, ``ABS_MT_TRACKING_ID`` N starts a
contact in it and -1 ends it, ``ABS_MT_POSITION_X/Y`` move it, ``SYN_REPORT`` closes one frame of changes.
Drivers without tracking ids delimit the one contact with ``BTN_TOUCH`` DOWN/UP. ``TouchTracker`` turns the
events of one touchscreen into ``Touch``es: everything from the first finger down to the last finger up, with the
first finger's path.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

#: numeric codes of the names this module reads (linux/input-event-codes.h), for ``getevent`` without ``-l``
EV_NAMES = {0x00: "EV_SYN", 0x01: "EV_KEY", 0x02: "EV_REL", 0x03: "EV_ABS", 0x04: "EV_MSC"}
SYN_NAMES = {0: "SYN_REPORT", 1: "SYN_CONFIG", 2: "SYN_MT_REPORT", 3: "SYN_DROPPED"}
ABS_NAMES = {
    0x00: "ABS_X", 0x01: "ABS_Y", 0x2F: "ABS_MT_SLOT", 0x30: "ABS_MT_TOUCH_MAJOR", 0x31: "ABS_MT_TOUCH_MINOR",
    0x35: "ABS_MT_POSITION_X", 0x36: "ABS_MT_POSITION_Y", 0x37: "ABS_MT_TOOL_TYPE", 0x39: "ABS_MT_TRACKING_ID",
    0x3A: "ABS_MT_PRESSURE",
}
KEY_NAMES = {
    1: "KEY_ESC", 14: "KEY_BACKSPACE", 15: "KEY_TAB", 28: "KEY_ENTER", 57: "KEY_SPACE", 96: "KEY_KPENTER",
    102: "KEY_HOME", 103: "KEY_UP", 105: "KEY_LEFT", 106: "KEY_RIGHT", 108: "KEY_DOWN", 111: "KEY_DELETE",
    113: "KEY_MUTE", 114: "KEY_VOLUMEDOWN", 115: "KEY_VOLUMEUP", 116: "KEY_POWER", 139: "KEY_MENU",
    143: "KEY_WAKEUP", 158: "KEY_BACK", 172: "KEY_HOMEPAGE", 217: "KEY_SEARCH", 580: "KEY_APPSWITCH",
    0x145: "BTN_TOOL_FINGER", 0x14A: "BTN_TOUCH",
}
_CODE_NAMES = {"EV_SYN": SYN_NAMES, "EV_KEY": KEY_NAMES, "EV_ABS": ABS_NAMES}
_KEY_VALUES = {"UP": 0, "DOWN": 1, "REPEAT": 2}


@dataclass(frozen=True, slots=True)
class AbsAxis:
    minimum: int
    maximum: int

    def fraction(self, raw: int) -> float:
        """Where ``raw`` lies on the axis, in [0, 1): as Android scales a panel to the display,
        (raw - min) / (max - min + 1)."""
        span = self.maximum - self.minimum + 1
        return min(max(raw - self.minimum, 0), span - 1) / span if span > 0 else 0.0


@dataclass(frozen=True, slots=True)
class InputDevice:
    """One ``/dev/input/eventN`` as ``getevent -p`` lists it."""

    path: str
    name: str = ""
    keys: frozenset[str] = frozenset()
    axes: dict[str, AbsAxis] = field(default_factory=dict)
    props: frozenset[str] = frozenset()

    @property
    def is_touchscreen(self) -> bool:
        return "ABS_MT_POSITION_X" in self.axes and "ABS_MT_POSITION_Y" in self.axes

    def describe(self) -> dict[str, object]:
        out: dict[str, object] = {"path": self.path, "name": self.name}
        if self.is_touchscreen:
            x, y = self.axes["ABS_MT_POSITION_X"], self.axes["ABS_MT_POSITION_Y"]
            out["x_range"] = [x.minimum, x.maximum]
            out["y_range"] = [y.minimum, y.maximum]
        return out


def _code_name(kind: str, token: str) -> str:
    """A code as its name: names pass through, hex numbers are looked up (unknown ones stay hex)."""
    token = token.rstrip("*")
    if re.fullmatch(r"[0-9a-fA-F]{4}", token):
        return _CODE_NAMES.get(kind, {}).get(int(token, 16), token.lower())
    return token


def parse_devices(text: str) -> list[InputDevice]:
    """The devices of ``getevent -p`` / ``-lp`` output (lines it cannot place are skipped)."""
    devices: list[InputDevice] = []
    current: dict | None = None
    section = ""
    kind = ""

    def finish() -> None:
        if current is not None:
            devices.append(InputDevice(current["path"], current["name"], frozenset(current["keys"]),
                                       dict(current["axes"]), frozenset(current["props"])))

    for raw_line in text.replace("\r", "").splitlines():
        line = raw_line.rstrip()
        m = re.match(r"add device \d+:\s*(\S+)", line)
        if m:
            finish()
            current = {"path": m.group(1), "name": "", "keys": set(), "axes": {}, "props": set()}
            section = ""
            continue
        if current is None or not line.strip():
            continue
        stripped = line.strip()
        if stripped.startswith("name:"):
            current["name"] = stripped[5:].strip().strip('"')
        elif stripped.startswith("events:"):
            section = "events"
        elif stripped.startswith("input props:"):
            section = "props"
        elif section == "props":
            if not stripped.startswith("<"):
                current["props"].add(stripped)
        elif section == "events":
            m = re.match(r"(\w+)\s*\((\w{4})\):\s*(.*)$", stripped)
            if m:
                kind = EV_NAMES.get(int(m.group(2), 16), m.group(1))
                stripped = m.group(3)
            if kind == "EV_ABS":
                a = re.match(r"(\w+)\*?\s*:\s*value -?\d+, min (-?\d+), max (-?\d+)", stripped)
                if a:
                    current["axes"][_code_name(kind, a.group(1))] = AbsAxis(int(a.group(2)), int(a.group(3)))
            elif kind == "EV_KEY":
                current["keys"].update(_code_name(kind, t) for t in stripped.split())
    finish()
    return devices


def find_touchscreen(devices: list[InputDevice]) -> InputDevice | None:
    """The touchscreen: a device with multi-touch positions, one marked INPUT_PROP_DIRECT first."""
    touch = [d for d in devices if d.is_touchscreen]
    direct = [d for d in touch if "INPUT_PROP_DIRECT" in d.props]
    return (direct or touch or [None])[0]


@dataclass(frozen=True, slots=True)
class RawEvent:
    """One line of ``getevent -t``: the phone's timestamp, the device and the named event."""

    time: float
    device: str
    type: str
    code: str
    value: int


_EVENT_RE = re.compile(r"^\[\s*(\d+)\.(\d+)\]\s+(\S+?):\s+(\S+)\s+(\S+)\s+(\S+)\s*$")


def parse_event_line(line: str) -> RawEvent | None:
    """An event line of ``getevent -t`` / ``-lt``, None for anything else (the device list it prints first,
    "could not open" warnings, blank lines)."""
    m = _EVENT_RE.match(line.strip())
    if not m:
        return None
    secs, micros, device, type_token, code_token, value_token = m.groups()
    hex_type = re.fullmatch(r"[0-9a-fA-F]{4}", type_token)
    kind = EV_NAMES.get(int(type_token, 16), type_token) if hex_type else type_token
    code = _code_name(kind, code_token)
    if value_token in _KEY_VALUES:
        value = _KEY_VALUES[value_token]
    elif re.fullmatch(r"[0-9a-fA-F]{1,8}", value_token):
        value = int(value_token, 16)
        value = value - (1 << 32) if value >= 1 << 31 else value
    else:  # a value label such as MT_TOOL_FINGER: the value itself does not matter here
        value = 0
    return RawEvent(int(secs) + int(micros) / 10 ** len(micros), device, kind, code, value)


def panel_to_frame(panel: InputDevice, rotation: int, x: int, y: int) -> tuple[float, float]:
    """A raw touch position as a normalized frame point (x = u / W, y = v / H) of the display at ``rotation``.

    The panel's axes follow its natural orientation; Android turns them with the display (InputReader's
    rotation of cooked coordinates): 90 degrees puts the panel's y along the frame's x and its x, reversed,
    along the frame's y, and so on. Scaling by the axis ranges first makes the panel's resolution irrelevant.
    """
    nx = panel.axes["ABS_MT_POSITION_X"].fraction(x)
    ny = panel.axes["ABS_MT_POSITION_Y"].fraction(y)
    return {0: (nx, ny), 1: (ny, 1.0 - nx), 2: (1.0 - nx, 1.0 - ny), 3: (1.0 - ny, nx)}[rotation % 4]


# -- touches -------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Touch:
    """One gesture, first finger down to last finger up, in raw panel units and phone seconds.

    ``path`` is the first finger's positions (time, x, y), one per SYN_REPORT it moved in, starting at its down
    point; ``fingers`` counts every contact of the gesture; ``dropped`` says the kernel dropped events in it
    (SYN_DROPPED), so the path may miss some moves.
    """

    down: float
    up: float
    path: tuple[tuple[float, int, int], ...]
    fingers: int = 1
    dropped: bool = False

    @property
    def start(self) -> tuple[int, int]:
        return self.path[0][1], self.path[0][2]

    @property
    def end(self) -> tuple[int, int]:
        return self.path[-1][1], self.path[-1][2]

    @property
    def duration_s(self) -> float:
        return max(0.0, self.up - self.down)


@dataclass(slots=True)
class _Contact:
    tracking_id: int | None = None
    x: int | None = None
    y: int | None = None
    active: bool = False


class TouchTracker:
    """Multi-touch protocol B (with the BTN_TOUCH fallback) for one touchscreen: ``feed`` each of its events, get
    a ``Touch`` when the last finger lifts (see the module docstring)."""

    def __init__(self) -> None:
        self._slots: dict[int, _Contact] = {}
        self._slot = 0
        self._btn_down: bool | None = None
        self._uses_ids = False
        self._primary: int | None = None
        self._path: list[tuple[float, int, int]] = []
        self._down = 0.0
        self._ids: set[tuple[int, int | None]] = set()
        """(slot, tracking id) of every contact of the gesture in progress."""
        self._dropped = False
        self._changed: set[int] = set()

    @property
    def open_since(self) -> float | None:
        """The phone time the gesture in progress began, None when no finger is down."""
        return self._down if self._primary is not None else None

    def feed(self, ev: RawEvent) -> Touch | None:
        if ev.type == "EV_ABS":
            if ev.code == "ABS_MT_SLOT":
                self._slot = ev.value
            elif ev.code == "ABS_MT_TRACKING_ID":
                self._uses_ids = True
                c = self._slots.setdefault(self._slot, _Contact())
                if ev.value < 0:
                    c.active = False
                else:
                    c.tracking_id, c.active = ev.value, True
                self._changed.add(self._slot)
            elif ev.code in ("ABS_MT_POSITION_X", "ABS_MT_POSITION_Y"):
                c = self._slots.setdefault(self._slot, _Contact())
                if ev.code == "ABS_MT_POSITION_X":
                    c.x = ev.value
                else:
                    c.y = ev.value
                self._changed.add(self._slot)
        elif ev.type == "EV_KEY" and ev.code == "BTN_TOUCH":
            self._btn_down = ev.value != 0
        elif ev.type == "EV_SYN" and ev.code == "SYN_DROPPED":
            log.warning("the touchscreen's event buffer overflowed (SYN_DROPPED): moves of this touch were lost")
            self._dropped = True
        elif ev.type == "EV_SYN" and ev.code == "SYN_REPORT":
            return self._report(ev.time)
        return None

    def _report(self, t: float) -> Touch | None:
        if not self._uses_ids and self._btn_down is not None:  # single-contact drivers: BTN_TOUCH is the contact
            c = self._slots.setdefault(0, _Contact())
            c.active = self._btn_down
            self._changed.add(0)
        changed, self._changed = self._changed, set()
        for slot in sorted(changed):
            c = self._slots[slot]
            if not (c.active and c.x is not None and c.y is not None):
                continue
            if self._primary is None:
                self._primary, self._down, self._path = slot, t, [(t, c.x, c.y)]
                self._ids, self._dropped = set(), False
            elif slot == self._primary and (c.x, c.y) != self._path[-1][1:]:
                self._path.append((t, c.x, c.y))
            self._ids.add((slot, c.tracking_id))
        if self._primary is None or any(c.active for c in self._slots.values()):
            return None
        touch = Touch(self._down, t, tuple(self._path), max(1, len(self._ids)), self._dropped)
        self._primary = None
        self._path = []
        return touch

"""Test infrastructure: the fake phone's input devices and a person's finger on them, as ``getevent`` shows them.

NOT part of handeye. ``FakeInput`` belongs to a ``FakePhone`` (``phone.finger``). It lists three input
devices for ``getevent -p`` / ``-lp`` in the layout of toolbox getevent (``/dev/input/event0`` "gpio-keys":
volume and power; ``event1`` "handeye_navkeys": HOMEPAGE, BACK, APPSWITCH, ENTER; ``event2``
"handeye_touchscreen": multi-touch protocol B with ``ABS_MT_POSITION_X/Y`` over ``touch_max`` (default the
physical size minus one, in the panel's natural orientation) and ``INPUT_PROP_DIRECT``), and streams events
to every running ``getevent [-l] [-t]`` (the device list first, then one line per event, with ``\\r\\n`` on a
terminal), stamped with ``time.monotonic()`` as a phone stamps them with its uptime.

The person's side, called from a test thread (each call takes the real time a finger would): ``tap``,
``long_press``, ``swipe`` (optionally resting in place first), ``key`` (a Linux key name), ``type_text`` (one
tap per character on the soft keyboard, the bottom ``KEYBOARD_FRACTION`` of the screen while a field has the
focus). Points are display pixels of the current orientation; the finger turns them into raw panel values as a
panel under a rotated display reports them. Each gesture then happens on the phone as ``input`` would make it
happen (``phone.tap``, ``phone.swipe``, ``phone.key``, ``phone.type_char``), when the finger lifts.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

KEYBOARD_FRACTION = 0.4
TOUCH_PATH = "/dev/input/event2"
NAVKEYS_PATH = "/dev/input/event1"
BUTTONS_PATH = "/dev/input/event0"
_TYPES = {"EV_SYN": 0, "EV_KEY": 1, "EV_ABS": 3}
_CODES = {
    "SYN_REPORT": 0, "ABS_MT_SLOT": 0x2F, "ABS_MT_POSITION_X": 0x35, "ABS_MT_POSITION_Y": 0x36,
    "ABS_MT_TRACKING_ID": 0x39, "BTN_TOUCH": 0x14A, "BTN_TOOL_FINGER": 0x145, "KEY_ENTER": 28, "KEY_HOMEPAGE": 172,
    "KEY_BACK": 158, "KEY_APPSWITCH": 580, "KEY_VOLUMEDOWN": 114, "KEY_VOLUMEUP": 115, "KEY_POWER": 116,
}
#: what each key does on the phone (as ``input keyevent``)
_KEYCODES = {"KEY_BACK": "KEYCODE_BACK", "KEY_HOMEPAGE": "KEYCODE_HOME", "KEY_APPSWITCH": "KEYCODE_APP_SWITCH",
             "KEY_ENTER": "KEYCODE_ENTER", "KEY_VOLUMEUP": "KEYCODE_VOLUME_UP",
             "KEY_VOLUMEDOWN": "KEYCODE_VOLUME_DOWN", "KEY_POWER": "KEYCODE_POWER"}


class FakeInput:
    """The fake phone's input devices and the person's finger (see the module docstring)."""

    def __init__(self, phone: Any) -> None:
        self.phone = phone
        self.touch_max: tuple[int, int] | None = None
        """The panel's ABS_MT_POSITION_X/Y maxima; None: the physical size minus one."""
        self.touchscreen = True
        """False: no touchscreen among the input devices (only keys)."""
        self._streams: list[tuple[queue.Queue[bytes], bool, bool, bool]] = []
        self._lock = threading.Lock()
        self._tracking_id = 100

    # -- what getevent prints ------------------------------------------------------------------------
    def _devices(self) -> list[tuple[str, str, list[str], list[tuple[str, int]], str]]:
        w, h = self.touch_max or (self.phone.physical[0] - 1, self.phone.physical[1] - 1)
        out = [(BUTTONS_PATH, "gpio-keys", ["KEY_VOLUMEDOWN", "KEY_VOLUMEUP", "KEY_POWER"], [], "<none>"),
               (NAVKEYS_PATH, "handeye_navkeys", ["KEY_ENTER", "KEY_BACK", "KEY_HOMEPAGE", "KEY_APPSWITCH"], [],
                "<none>")]
        if self.touchscreen:
            axes = [("ABS_MT_SLOT", 9), ("ABS_MT_POSITION_X", w), ("ABS_MT_POSITION_Y", h),
                    ("ABS_MT_TRACKING_ID", 65535)]
            out.append((TOUCH_PATH, "handeye_touchscreen", ["BTN_TOOL_FINGER", "BTN_TOUCH"], axes,
                        "INPUT_PROP_DIRECT"))
        return out

    def listing(self, labels: bool) -> str:
        """``getevent -p`` (``labels``: ``-lp``)."""
        lines = []
        for i, (path, name, keys, axes, props) in enumerate(self._devices(), 1):
            lines += [f"add device {i}: {path}", f'  name:     "{name}"', "  events:"]
            label = (lambda n: f"{n:<21}") if labels else (lambda n: f"{_CODES[n]:04x} ")
            lines.append("    KEY (0001): " + " ".join(label(k) for k in keys))
            for j, (axis, top) in enumerate(axes):
                lead = "    ABS (0003): " if j == 0 else "                "
                lines.append(f"{lead}{label(axis)} : value 0, min 0, max {top}, fuzz 0, flat 0, resolution 0")
            lines += ["  input props:", f"    {props}"]
        return "".join(line + "\n" for line in lines)

    def subscribe(self, args: list[str], pty: bool) -> tuple[bytes, queue.Queue[bytes]]:
        """A running ``getevent ARGS``: (what it prints first, the queue its event lines arrive on)."""
        labels = any(a.startswith("-") and "l" in a for a in args)
        stamps = any(a.startswith("-") and "t" in a for a in args)
        q: queue.Queue[bytes] = queue.Queue()
        with self._lock:
            self._streams.append((q, labels, stamps, pty))
        header = "".join(f'add device {i}: {path}\n  name:     "{name}"\n'
                         for i, (path, name, *_rest) in enumerate(self._devices(), 1))
        return (header.replace("\n", "\r\n") if pty else header).encode(), q

    def unsubscribe(self, q: queue.Queue[bytes]) -> None:
        with self._lock:
            self._streams = [s for s in self._streams if s[0] is not q]

    @property
    def listeners(self) -> int:
        with self._lock:
            return len(self._streams)

    def _send(self, path: str, events: list[tuple[str, str, int | str]]) -> None:
        """One batch of events (ending with its SYN_REPORT), stamped now, to every running getevent."""
        t = time.monotonic()
        stamp = f"[{int(t):8d}.{int(t % 1 * 1e6):06d}] "
        with self._lock:
            for q, labels, stamps, pty in self._streams:
                out = []
                for kind, code, value in events:
                    if labels:
                        shown = f"{value:<20}" if isinstance(value, str) else f"{value & 0xFFFFFFFF:08x}" + " " * 12
                        body = f"{kind:<12} {code:<20} {shown}"
                    else:
                        number = {"DOWN": 1, "UP": 0}.get(value, value) if isinstance(value, str) else value
                        body = f"{_TYPES[kind]:04x} {_CODES[code]:04x} {int(number) & 0xFFFFFFFF:08x}"
                    out.append((stamp if stamps else "") + f"{path}: {body}" + ("\r\n" if pty else "\n"))
                q.put("".join(out).encode())

    # -- the person ----------------------------------------------------------------------------------
    def to_raw(self, x: float, y: float) -> tuple[int, int]:
        """Display pixels (current orientation) as raw panel values (natural orientation)."""
        w, h = self.phone.display_size
        u, v = x / w, y / h
        nx, ny = {0: (u, v), 1: (1 - v, u), 2: (1 - u, 1 - v), 3: (v, 1 - u)}[self.phone.rotation % 4]
        mx, my = self.touch_max or (self.phone.physical[0] - 1, self.phone.physical[1] - 1)
        return min(int(nx * (mx + 1)), mx), min(int(ny * (my + 1)), my)

    def _down(self, x: float, y: float) -> None:
        self._tracking_id += 1
        rx, ry = self.to_raw(x, y)
        self._send(TOUCH_PATH, [("EV_ABS", "ABS_MT_SLOT", 0), ("EV_ABS", "ABS_MT_TRACKING_ID", self._tracking_id),
                                ("EV_KEY", "BTN_TOUCH", "DOWN"), ("EV_KEY", "BTN_TOOL_FINGER", "DOWN"),
                                ("EV_ABS", "ABS_MT_POSITION_X", rx), ("EV_ABS", "ABS_MT_POSITION_Y", ry),
                                ("EV_SYN", "SYN_REPORT", 0)])

    def _move(self, x: float, y: float) -> None:
        rx, ry = self.to_raw(x, y)
        self._send(TOUCH_PATH, [("EV_ABS", "ABS_MT_POSITION_X", rx), ("EV_ABS", "ABS_MT_POSITION_Y", ry),
                                ("EV_SYN", "SYN_REPORT", 0)])

    def _up(self) -> None:
        self._send(TOUCH_PATH, [("EV_ABS", "ABS_MT_TRACKING_ID", -1), ("EV_KEY", "BTN_TOUCH", "UP"),
                                ("EV_KEY", "BTN_TOOL_FINGER", "UP"), ("EV_SYN", "SYN_REPORT", 0)])

    def tap(self, x: float, y: float, hold_s: float = 0.05) -> None:
        self._down(x, y)
        time.sleep(hold_s)
        self._up()
        with self.phone.lock:
            self.phone.tap(x, y)

    def long_press(self, x: float, y: float, hold_s: float = 0.8) -> None:
        self._down(x, y)
        time.sleep(hold_s)
        self._up()
        with self.phone.lock:
            self.phone.swipe(x, y, x, y, round(hold_s * 1000))

    def swipe(self, x1: float, y1: float, x2: float, y2: float, duration_s: float = 0.3, steps: int = 6,
              rest_s: float = 0.0) -> None:
        """A finger put down at (x1, y1), resting ``rest_s`` there, then moved to (x2, y2) in ``steps``."""
        self._down(x1, y1)
        time.sleep(rest_s)
        for i in range(1, steps + 1):
            time.sleep(duration_s / steps)
            self._move(x1 + (x2 - x1) * i / steps, y1 + (y2 - y1) * i / steps)
        self._up()
        with self.phone.lock:
            self.phone.swipe(x1, y1, x2, y2, round((rest_s + duration_s) * 1000))

    def key(self, name: str, hold_s: float = 0.05) -> None:
        path = BUTTONS_PATH if name in ("KEY_VOLUMEDOWN", "KEY_VOLUMEUP", "KEY_POWER") else NAVKEYS_PATH
        self._send(path, [("EV_KEY", name, "DOWN"), ("EV_SYN", "SYN_REPORT", 0)])
        time.sleep(hold_s)
        self._send(path, [("EV_KEY", name, "UP"), ("EV_SYN", "SYN_REPORT", 0)])
        with self.phone.lock:
            self.phone.key(_KEYCODES[name])

    def keyboard_point(self, index: int) -> tuple[float, float]:
        """Where the ``index``-th keystroke lands on the soft keyboard (display pixels)."""
        w, h = self.phone.display_size
        return w * (0.1 + 0.08 * (index % 10)), h * (1 - KEYBOARD_FRACTION / 2)

    def type_text(self, text: str, hold_s: float = 0.03, gap_s: float = 0.03) -> None:
        """One soft-keyboard tap per character; the character reaches the focused field when the finger lifts."""
        for i, c in enumerate(text):
            x, y = self.keyboard_point(i)
            self._down(x, y)
            time.sleep(hold_s)
            self._up()
            with self.phone.lock:
                self.phone.type_char(c)
            time.sleep(gap_s)

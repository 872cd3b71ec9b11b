"""Global input from the X RECORD extension, on a connection and a thread of its own.

A RECORD context intercepts every device event the server processes (key and button presses and
releases, pointer motion), whichever application gets it, and every ChangeKeyboardMapping request
(see ``devices/desktop/xkeys.py`` for why). ``record_enable_context`` blocks its connection and
calls back once per batch, so it runs on its own thread (``XRecordStream``); the callback does
only what must happen in the server's order (keep the keymap current, read each key with it,
give each press its pre-action frame) and hands ``RawInput``s to an unbounded queue: nothing is
ever dropped; a slow consumer only delays.

Event times are the server's (milliseconds) turned into wall time by ``ServerClock``, so a press
takes the frame grabbed before it happened, not before the recorder heard of it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any

from devices.desktop.capture import FrameRing
from devices.desktop.gestures import InputKind, RawInput
from devices.desktop.xkeys import Keymap, parse_keymap_changes
from devices.errors import DeviceUnavailable

log = logging.getLogger(__name__)

#: core event codes -> input kinds (KeyPress=2 .. MotionNotify=6)
EVENT_KINDS = {2: InputKind.KEY_DOWN, 3: InputKind.KEY_UP, 4: InputKind.BUTTON_DOWN, 5: InputKind.BUTTON_UP,
               6: InputKind.MOTION}
CHANGE_KEYBOARD_MAPPING = 100
END = object()
"""Put on the queue after the last input, when the context is disabled."""


class ServerClock:
    """X server time (milliseconds since the server started, 32 bits) as wall time.

    The offset between the two clocks starts from a measured round trip (``calibrate``) and is
    lowered by every event that arrives sooner after its server time than any before: arrival can
    only be later than the event, so the smallest difference seen is the best bound.
    """

    def __init__(self, offset_s: float) -> None:
        self.offset_s = offset_s
        self._last_ms = -1
        self._wraps = 0

    def wall(self, server_ms: int, arrived: float) -> float:
        if self._last_ms >= 0 and server_ms < self._last_ms - 2**31:
            self._wraps += 1  # the 32-bit millisecond counter wrapped (every 49.7 days)
        self._last_ms = server_ms
        t = (server_ms + self._wraps * 2**32) / 1000.0
        self.offset_s = min(self.offset_s, arrived - t)
        return t + self.offset_s


def calibrate(conn: Any) -> ServerClock:
    """Read the server's time once (a property change on a window of our own: its PropertyNotify carries it)."""
    from Xlib import X, Xatom

    window = conn.screen().root.create_window(0, 0, 1, 1, 0, 0, event_mask=X.PropertyChangeMask,
                                              window_class=X.InputOnly)
    try:
        window.change_property(Xatom.WM_NAME, Xatom.STRING, 8, b"handeye-clock")
        conn.flush()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            event = conn.next_event()
            if event.type == X.PropertyNotify and event.window.id == window.id:
                return ServerClock(time.time() - event.time / 1000.0)
        raise DeviceUnavailable("the X server did not answer a property change within 5 s")
    finally:
        window.destroy()
        conn.flush()


class XRecordStream:
    """Records every input event of ``display`` into ``out`` (see the module docstring)."""

    def __init__(self, display: str, control: Any, keymap: Keymap, clock: ServerClock, frames: FrameRing,
                 out: queue.SimpleQueue) -> None:
        self.display = display
        self.control = control
        """The connection that creates, disables and frees the context (the recording one is blocked)."""
        self.keymap = keymap
        self.clock = clock
        self.frames = frames
        self.out = out
        self.events = 0
        self.error: BaseException | None = None
        self._conn: Any = None
        self._context: Any = None
        self._started = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, timeout_s: float = 5.0) -> None:
        """Create the context and start recording; returns once the server has begun sending."""
        from Xlib import X, display
        from Xlib.ext import record

        self._conn = display.Display(self.display)
        self._context = self.control.record_create_context(0, [record.AllClients], [{
            "core_requests": (CHANGE_KEYBOARD_MAPPING, CHANGE_KEYBOARD_MAPPING), "core_replies": (0, 0),
            "ext_requests": (0, 0, 0, 0), "ext_replies": (0, 0, 0, 0), "delivered_events": (0, 0),
            "device_events": (X.KeyPress, X.MotionNotify), "errors": (0, 0),
            "client_started": False, "client_died": False,
        }])
        self.control.sync()
        self._thread = threading.Thread(target=self._run, name="handeye-record-input", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout_s):
            self.stop()
            why = f"{type(self.error).__name__}: {self.error}" if self.error else f"no answer within {timeout_s:g} s"
            raise DeviceUnavailable(f"the X RECORD context on {self.display} did not start: {why}")

    def _run(self) -> None:
        try:
            self._conn.record_enable_context(self._context, self._on_reply)
        except BaseException as e:  # the display went away: the recorder reports it
            self.error = e
            self._started.set()
            self.out.put(e)
        else:
            self.out.put(END)

    def _on_reply(self, reply: Any) -> None:
        from Xlib.ext import record
        from Xlib.protocol import rq

        if reply.category == record.StartOfData:
            self._started.set()
        elif reply.category == record.FromClient:
            for first, per, syms in parse_keymap_changes(bytes(reply.data), bool(reply.client_swapped)):
                self.keymap.change(first, per, syms)
        elif reply.category == record.FromServer:
            arrived = time.time()
            data = reply.data
            field = rq.EventField(None)
            while len(data) >= 32:
                event, data = field.parse_binary_value(data, self._conn.display, None, None)
                self._on_event(event, arrived)

    def _on_event(self, event: Any, arrived: float) -> None:
        kind = EVENT_KINDS.get(event.type & 0x7F)
        if kind is None:
            return
        self.events += 1
        at = self.clock.wall(event.time, arrived)
        key = self.keymap.resolve(event.detail, event.state) if kind in (InputKind.KEY_DOWN, InputKind.KEY_UP) else None
        down = kind in (InputKind.KEY_DOWN, InputKind.BUTTON_DOWN)
        self.out.put(RawInput(
            kind, at, event.root_x, event.root_y,
            button=event.detail if kind in (InputKind.BUTTON_DOWN, InputKind.BUTTON_UP) else 0,
            key=key, modifiers=self.keymap.held(event.state), frame=self.frames.before(at) if down else None,
        ))

    def stop(self) -> None:
        """Disable and free the context (from the control connection), and wait for the thread."""
        if self._context is not None:
            try:
                self.control.record_disable_context(self._context)
                self.control.sync()
            except Exception as e:  # the display is gone: nothing left to disable
                log.debug("disabling the RECORD context: %s", e)
        if self._thread is not None:
            self._thread.join(timeout=5)
            if self._thread.is_alive():
                log.warning("the X RECORD thread on %s did not end within 5 s", self.display)
            self._thread = None
        if self._context is not None:
            try:
                self.control.record_free_context(self._context)
                self.control.sync()
            except Exception as e:
                log.debug("freeing the RECORD context: %s", e)
            self._context = None
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception as e:
                log.debug("closing the RECORD connection: %s", e)
            self._conn = None

"""DesktopRecorder: a person's input on one monitor of an X display, as unified actions with pre-action frames.

    recorder = DesktopRecorder(DesktopConfig(display=":0"), DesktopRecordConfig())
    await recorder.start()
    while (event := await recorder.next_event()) is not None:   # None: the person pressed the stop keys
        ...
    await recorder.stop()

Three threads of its own, each with its own X connection, so the event loop never waits on X:

    input    (xrecord)  X RECORD: every key, button and motion event of the display, in server order;
                        each press takes its pre-action frame from the ring      -> raw queue (unbounded)
    capture  (capture)  mss grabs of the monitor at ``fps`` into a short ring of timestamped frames
    actions  (here)     looks up what each press went to (targets: the element under the point from AT-SPI,
                        else the window under it; the focused window for keys), groups raw input into
                        actions (gestures), and hands DemoEvents to the event loop          -> asyncio queue

Points are normalized to the monitor's frame through the device's ScreenMap (geometry.py), so a
recorded click replays on ``DesktopDevice`` at the pixel that was clicked. docs/recording.md ("Desktop
(X11)") describes it for users: set-up, keys, what is captured and what is not.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import statistics
import threading
import time
from dataclasses import replace
from typing import Any

from devices.actions import Action, ActionKind, Point, ScrollDirection
from devices.base import Observation
from devices.desktop.accessibility import AccessibilityTree, open_accessibility
from devices.desktop.capture import CapturedFrame, FrameRing
from devices.desktop.config import DesktopConfig
from devices.desktop.display import grab_rgb, monitors_of, open_mss, prepare_display
from devices.desktop.geometry import ScreenMap, screen_map
from devices.desktop.gestures import Gesture, Gestures, InputKind, RawInput
from devices.desktop.record_config import DesktopRecordConfig
from devices.desktop.targets import PressTarget, TargetFinder
from devices.desktop.xkeys import COMMAND_MODIFIERS, HOTKEY_ORDER, SHIFT, Keymap
from devices.desktop.xrecord import END, XRecordStream, calibrate
from devices.errors import DeviceDisconnected, DeviceError, DeviceUnavailable
from devices.recording import LATE_FRAME_S, MASKED_TEXT, DemoEvent

log = logging.getLogger(__name__)

ARRIVAL_MARGIN_S = 0.1
"""An action waiting for more input (a click that may become a double) completes this long after its
time is up, so that input which happened in time but reached the recorder late still joins it."""
RECORDED_KINDS = (ActionKind.CLICK, ActionKind.DOUBLE_CLICK, ActionKind.RIGHT_CLICK, ActionKind.LONG_PRESS, ActionKind.DRAG,
                  ActionKind.SCROLL, ActionKind.TYPE, ActionKind.KEY, ActionKind.HOTKEY, ActionKind.WAIT)
"""The actions a desktop recording can hold."""


def no_record_message(display: str) -> str:
    return (f"recording on {display} needs the X RECORD extension, which this X server does not offer. Xvfb: start "
            "it without `-extension RECORD` (or with `+extension RECORD`); Xorg loads it by default (look for "
            "`Disable \"RECORD\"` in xorg.conf; `xdpyinfo | grep RECORD` shows whether it is there). "
            "`agent run --device desktop` still works on this display: it needs only XTEST")


def _connect(display: str) -> Any:
    """A new connection to ``display``. An X server with no clients left resets itself (Xvfb without
    -noreset does): a connection made while it does is refused, so one refusal is retried."""
    from Xlib import display as xdisplay
    from Xlib import error as xerror

    try:
        return xdisplay.Display(display)
    except xerror.ConnectionClosedError:
        time.sleep(0.2)
        return xdisplay.Display(display)


class DesktopRecorder:
    """Records a person on one monitor of an X display (see the module docstring); a ``devices.recording.Recorder``."""

    name = "desktop"

    def __init__(self, config: DesktopConfig | None = None, record: DesktopRecordConfig | None = None) -> None:
        self.config = config or DesktopConfig()
        self.record = record or DesktopRecordConfig()
        self.display = ""
        self.map: ScreenMap | None = None
        self.accessibility_missing = "not checked yet"
        """Why element boxes come from windows, not the accessibility tree ("" when they come from the tree)."""
        self.lags: list[float] = []
        """Each recorded event's frame lag, in order."""
        self.gestures = Gestures(self.record)
        self.raw_inputs = 0
        """Input events the X server reported (key and button presses and releases, motion), once stopped."""
        self._off_monitor = 0
        self._lock = threading.Lock()
        """Held by the action thread while it changes the counts that ``describe`` reads."""
        self._raw: queue.SimpleQueue = queue.SimpleQueue()
        self._queue: asyncio.Queue | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._capture: FrameRing | None = None
        self._stream: XRecordStream | None = None
        self._control: Any = None
        self._query: Any = None
        self._tree: AccessibilityTree | None = None
        self._targets: TargetFinder | None = None
        self._translator: threading.Thread | None = None
        self._ended = False
        self.started = asyncio.Event()
        """Set once input is being recorded (for a program that plays the person)."""

    # -- life cycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._queue is not None:
            raise DeviceError("the desktop recorder is already started; a recorder records one demonstration")
        self._loop = asyncio.get_running_loop()
        self._queue = asyncio.Queue()
        try:
            await asyncio.to_thread(self._open)
        except BaseException:
            await asyncio.to_thread(self._close)
            raise
        self.started.set()

    def _open(self) -> None:
        cfg = self.config
        try:
            self.display = prepare_display(cfg.display)
        except DeviceUnavailable as e:
            raise DeviceUnavailable(f"desktop recording needs an X display: {e}") from None
        self._control = _connect(self.display)
        if not self._control.has_extension("RECORD"):
            raise DeviceUnavailable(no_record_message(self.display))
        with open_mss(self.display) as sct:
            monitors = monitors_of(sct)
        if cfg.monitor > len(monitors):
            listing = "; ".join(m.describe() for m in monitors) or "none"
            raise DeviceUnavailable(f"display {self.display} has no monitor {cfg.monitor}; its monitors are: "
                                    f"{listing}. Set desktop.monitor to one of these indices")
        monitor = monitors[cfg.monitor - 1]
        self._capture = FrameRing(self.display, monitor, self.record.fps, self.record.ring_frames)
        self._capture.start()
        rgb = self._capture.latest().rgb
        self.map = screen_map(monitor, (rgb.shape[1], rgb.shape[0]), cfg.scale_override)
        info = self._control.display.info
        rows = self._control.get_keyboard_mapping(info.min_keycode, info.max_keycode - info.min_keycode + 1)
        keymap = Keymap.of({info.min_keycode + i: tuple(row) for i, row in enumerate(rows)},
                           [list(m) for m in self._control.get_modifier_mapping()])
        clock = calibrate(self._control)
        self._query = _connect(self.display)
        if self.record.accessibility:
            self._tree, self.accessibility_missing = open_accessibility(self.map)
        else:
            self.accessibility_missing = "turned off (accessibility = false)"
        self._targets = TargetFinder(self._query, self.map, self._tree)
        self._stream = XRecordStream(self.display, self._control, keymap, clock, self._capture, self._raw)
        self._translator = threading.Thread(target=self._translate, name="handeye-record-actions", daemon=True)
        self._translator.start()
        self._stream.start()
        log.info("recording %s of display %s; %s ends, %s pauses", monitor.describe(), self.display,
                 self.record.stop_combo.describe(), self.record.pause_combo.describe())

    async def stop(self) -> None:
        """Stop recording (what was open, such as text being typed, is completed first) and close the connections."""
        if self._queue is None:
            return
        await asyncio.to_thread(self._close)

    def _close(self) -> None:
        if self._stream is not None:
            self._stream.stop()  # the input thread ends, and says so (END)
        self._raw.put(END)  # (again, if it never ran:) the action thread completes what is open and ends
        if self._translator is not None:
            self._translator.join(timeout=5)
            self._translator = None
        if self._capture is not None:
            self._capture.stop()
        for conn in (self._query, self._control):
            if conn is not None:
                try:
                    conn.close()
                except Exception as e:  # closing a dead connection is not worth an error
                    log.debug("ignoring %s while closing the display", type(e).__name__)
        if self._stream is not None:
            self.raw_inputs = self._stream.events
        self._stream = None
        self._query = self._control = None

    # -- events -------------------------------------------------------------------------------------
    async def next_event(self) -> DemoEvent | None:
        """The person's next action; None once they pressed the stop keys (or the recorder was stopped)."""
        if self._queue is None:
            raise DeviceError("the desktop recorder is not started; call `await recorder.start()` first")
        if self._ended:
            return None
        item = await self._queue.get()
        if item is None or isinstance(item, BaseException):
            self._ended = True
            if item is not None:
                raise item
        return item

    def _push(self, item: DemoEvent | BaseException | None) -> None:
        assert self._loop is not None and self._queue is not None
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the event loop is closed: nobody is listening any more
            pass

    def _translate(self) -> None:
        """The action thread: raw input in, DemoEvents out (see the module docstring)."""
        gestures = self.gestures
        try:
            while True:
                deadline = gestures.deadline()
                timeout = None if deadline is None else max(0.0, deadline + ARRIVAL_MARGIN_S - time.time())
                try:
                    item = self._raw.get(timeout=timeout)
                except queue.Empty:
                    with self._lock:
                        done = gestures.tick(time.time() - ARRIVAL_MARGIN_S)
                    self._emit(done)
                    continue
                if item is END:
                    with self._lock:
                        done = gestures.flush()
                    self._emit(done)
                    break
                if isinstance(item, BaseException):
                    raise item
                was_stopped = gestures.stopped
                raw = self._enrich(item, gestures)
                with self._lock:
                    done = gestures.feed(raw)
                self._emit(done)
                if gestures.stopped and not was_stopped:
                    self._push(None)
        except BaseException as e:
            self._push(self._failure(e))
        finally:
            self._push(None)

    def _failure(self, e: BaseException) -> DeviceError:
        from Xlib import error as xerror

        if isinstance(e, DeviceError):
            return e
        if isinstance(e, (xerror.ConnectionClosedError, ConnectionError, BrokenPipeError)):
            return DeviceDisconnected(f"X display {self.display} went away while recording ({e}); the steps "
                                      "recorded so far are kept")
        log.exception("the desktop recorder failed")
        return DeviceError(f"the desktop recorder failed on {self.display}: {type(e).__name__}: {e}")

    def _emit(self, done: list[Gesture]) -> None:
        for gesture in done:
            for event in self._events(gesture):
                with self._lock:
                    self.lags.append(event.frame_lag_s)
                self._push(event)

    # -- what a press went to -----------------------------------------------------------------------
    def _enrich(self, raw: RawInput, gestures: Gestures) -> RawInput:
        """``raw`` with what it went to (targets.py), looked up as soon as it arrives."""
        assert self._targets is not None
        if gestures.paused is not None or gestures.stopped:
            return raw  # nothing is looked up while the person does something private
        if raw.kind is InputKind.BUTTON_DOWN:
            return replace(raw, target=self._targets.at_point(raw.x, raw.y, raw.at))
        if raw.kind is InputKind.KEY_DOWN and raw.key is not None and raw.key.modifier is None:
            window, target = self._targets.focused(raw.at)
            return replace(raw, window=window, target=target)
        return raw

    # -- gestures as DemoEvents -----------------------------------------------------------------------
    def _events(self, g: Gesture) -> list[DemoEvent]:
        """The DemoEvent(s) of one gesture (a scroll over 10 screens is several); none when it was off the monitor."""
        assert self.map is not None and self._capture is not None
        first = g.first
        frame: CapturedFrame = first.frame or self._capture.before(first.at)
        target: PressTarget | None = first.target
        info: dict[str, Any] = {}
        if target is not None and target.window is not None:
            info["window"] = target.window
        element = target.element if target is not None else None
        masked = False
        kind = g.kind
        if kind in (ActionKind.KEY, ActionKind.HOTKEY):
            actions = [Action(kind, keys=g.keys)]
        elif kind is ActionKind.TYPE:
            masked = self.record.mask_text or bool(element is not None and element.password)
            actions = [Action(kind, text=MASKED_TEXT if masked else g.text)]
        elif kind is ActionKind.WAIT:
            info = {"paused_s": round(g.duration_s or 0.0, 3)}
            actions, element = [Action(kind, duration_s=g.duration_s)], None
        else:
            assert g.start is not None
            point = self._point(g.start)
            if point is None:
                with self._lock:
                    self._off_monitor += 1
                log.info("left out a %s at (%s, %s): it is off the recorded monitor", kind.value, *g.start)
                return []
            mods = [m for m in HOTKEY_ORDER if m in first.modifiers & (COMMAND_MODIFIERS | {SHIFT})]
            if mods:
                info["modifiers"] = mods
            actions = self._pointer_actions(g, point, info)
        sensitive = (element.box,) if masked and element is not None and element.box is not None else ()
        meta = {"display": self.display, **self.map.describe(), "frame_source": "rolling"}
        obs = Observation(frame=frame.rgb, timestamp=frame.at, meta=meta, sensitive_boxes=sensitive)
        return [DemoEvent(a, first.at, obs, frame_lag_s=first.at - frame.at, target=element, masked=masked,
                          info=dict(info)) for a in actions]

    def _pointer_actions(self, g: Gesture, point: Point, info: dict[str, Any]) -> list[Action]:
        assert self.map is not None
        if g.kind is ActionKind.DRAG:
            assert g.end is not None
            end = self._point(g.end)
            if end is None:  # the drag ended off the monitor: it is recorded to the monitor's edge
                x, y = self.map.to_frame(g.end[0] + 0.5, g.end[1] + 0.5)
                end = Point(min(1.0, max(0.0, x)), min(1.0, max(0.0, y)))
                info["end_clamped"] = True
            return [Action(ActionKind.DRAG, point=point, end=end)]
        if g.kind is ActionKind.SCROLL:
            vertical = g.direction in (ScrollDirection.UP, ScrollDirection.DOWN)
            size = self.map.input_height if vertical else self.map.input_width
            amount = g.clicks * self.config.scroll_click_px / size  # the inverse of geometry.scroll_clicks
            info["wheel_clicks"] = g.clicks
            parts = [10.0] * int(amount // 10) + ([amount % 10] if amount % 10 > 1e-9 else [])
            return [Action(ActionKind.SCROLL, point=point, direction=g.direction, amount=a) for a in parts]
        if g.kind is ActionKind.LONG_PRESS:
            return [Action(ActionKind.LONG_PRESS, point=point, duration_s=g.duration_s)]
        return [Action(g.kind, point=point)]

    def _point(self, xy: tuple[int, int]) -> Point | None:
        """The normalized point of the centre of input pixel ``xy``, or None off the monitor."""
        assert self.map is not None
        x, y = self.map.to_frame(xy[0] + 0.5, xy[1] + 0.5)
        return Point(x, y) if 0 <= x <= 1 and 0 <= y <= 1 else None

    # -- the rest of the Recorder protocol ----------------------------------------------------------
    async def observe(self) -> Observation:
        """The screen now: the rolling capture's newest frame (a fresh grab when the capture is not running)."""
        if self.map is None:
            raise DeviceError("the desktop recorder is not started; call `await recorder.start()` first")
        capture = self._capture
        if capture is not None and capture.error is None and self._translator is not None:
            frame = capture.latest()
        else:
            frame = await asyncio.to_thread(self._grab_once)
        meta = {"display": self.display, **self.map.describe(), "frame_source": "capture"}
        return Observation(frame=frame.rgb, timestamp=frame.at, meta=meta)

    def _grab_once(self) -> CapturedFrame:
        assert self.map is not None
        with open_mss(self.display) as sct:
            return CapturedFrame(time.time(), grab_rgb(sct, self.map.monitor))

    def describe(self) -> dict[str, Any]:
        """What is recorded and how, what is missing, and the counts so far (for the episode record)."""
        rc = self.record
        missing = [
            "text composed by an input method (IBus, fcitx: Chinese, Japanese) or with dead keys is recorded as the "
            "keys pressed, not the characters committed",
            "middle clicks and extra mouse buttons have no unified action and are left out (counted in left_out)",
        ]
        if self.accessibility_missing:
            missing.insert(0, f"accessibility tree (AT-SPI): {self.accessibility_missing}. Targets are whole windows "
                              "(title, class, box), and password fields cannot be told, so typed text is masked only "
                              "with mask_text; pause recording around private input")
        with self._lock:
            lags = sorted(self.lags)
            left_out = dict(self.gestures.left_out)
            if self._off_monitor:
                left_out["off the monitor"] = self._off_monitor
        out: dict[str, Any] = {
            "kind": "desktop",
            "recorder": "x-record",
            "display": self.display,
            "input": "X RECORD extension: every key and button of the display, whichever application gets it",
            "captures": [k.value for k in RECORDED_KINDS],
            "frames": f"rolling mss capture at {rc.fps:g} fps (ring of {rc.ring_frames}); late past {LATE_FRAME_S} s",
            "targets": ("the element under the point from the accessibility tree (AT-SPI), else the window"
                        if self._tree is not None else "the window under the point; the focused window for keys"),
            "missing": missing,
            "pause_keys": rc.pause_combo.describe(),
            "stop_keys": rc.stop_combo.describe(),
            "mask_text": rc.mask_text,
            "events": len(lags),
            "raw_inputs": self._stream.events if self._stream is not None else self.raw_inputs,
            "left_out": left_out,
        }
        if lags:
            out["frame_lag_s"] = {"median": round(statistics.median(lags), 4),
                                  "p95": round(lags[min(len(lags) - 1, int(0.95 * len(lags)))], 4),
                                  "max": round(lags[-1], 4), "late": sum(lag > LATE_FRAME_S for lag in lags)}
        if self.map is not None:
            out.update(self.map.describe())
        if self._capture is not None and self._capture.grabs:
            out["grab_ms"] = round(1000 * self._capture.grab_s / self._capture.grabs, 2)
        return out

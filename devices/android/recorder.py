"""AndroidRecorder: a person's demonstration on a phone, read from ``getevent`` (``devices.recording.Recorder``).

    recorder = AndroidRecorder(AndroidDevice(config))    # started here unless it already is
    await recorder.start()                               # DeviceUnavailable if the phone cannot record
    while (event := await recorder.next_event()) is not None: ...
    await recorder.stop()

What runs while the person uses the phone, none of it waiting on them:

- ``getevent -lt`` streams every kernel input event through a terminal (``AndroidDevice.open_stream``), read
  by a thread; ``devices.android.getevent`` parses it, the touchscreen and its axis ranges come from ``getevent
  -lp`` at start. Touches become taps, long presses, scrolls and drags, key presses back / home / key actions
  (``devices.android.gestures`` has the rules).
- ``devices.android.capture`` keeps the last seconds of frames and UI dumps coming. An event gets the newest
  frame that ended before the event began (a touch begins at finger down), with ``frame_lag_s``: phones take
  100-500 ms per screencap, so a lag of a few tenths of a second is normal; past ``LATE_FRAME_S`` the step is
  marked late. Events are never dropped for want of a frame. The newest dump that ended before the event gives
  the target element under its point, the display rotation, the password fields whose boxes go into the frame's
  ``sensitive_boxes``, and the typed text (``devices.android.typed_text``). ``info["hierarchy_lag_s"]`` says how
  old the dump is, ``info["hierarchy_stale"]`` that it began before the previous input ended (it may show the
  screen before that input).

Times: getevent stamps events with the phone's clock. The recorder maps them to the computer's clock with the
smallest (arrival - stamp) seen so far, the transport's delay at its quickest, so an event's ``at`` is late by
at most that delay.

Touches on the soft keyboard while a field has the focus are not actions: they become one ``type`` action per
field, committed when focus moves, before the next other input, or at the end, with ``MASKED_TEXT`` and
``masked`` for password fields. Characters deleted from the field's end come first as ``key Backspace``
actions. The keyboard is where ``dumpsys input_method`` says (else its bottom ``keyboard_fraction``); right
after a tap on a text field, before a dump shows the focus, touches there count as keyboard touches too.

The on-screen navigation bar is part of the touchscreen: its buttons are recorded as taps where they are (and
replay as such). Multi-finger gestures are recorded by their first finger (``info["fingers"]``).

Pause and stop come from the terminal (``agent record``: ``p`` and Enter, Enter; the recorder is a
``devices.recording.PausesOnRequest`` and ``StopsOnRequest``): ``pause()`` / ``resume()`` (one ``wait`` action with
``info["paused_s"]``; nothing from the pause is captured, not even frames), ``request_stop()`` (``next_event``
returns None once everything before it is delivered). A phone that goes away ends the recording with
DeviceDisconnected after the events before it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import socket
import threading
import time
from typing import Any

from devices.actions import Action, ActionKind
from devices.android.capture import RollingCapture, rotation_at
from devices.android.device import AndroidDevice
from devices.android.gestures import (KEY_ACTIONS, KEY_NAMES, AndroidRecordOptions, is_typing_key, key_action,
                                      touch_action)
from devices.android.getevent import (InputDevice, RawEvent, Touch, TouchTracker, find_touchscreen, panel_to_frame,
                                      parse_devices, parse_event_line)
from devices.android.typed_text import Snapshot, TextTracker, Typed, edits, element_info, element_under
from devices.base import Box, ElementInfo, Observation
from devices.errors import DeviceDisconnected, DeviceError, DeviceUnavailable
from devices.recording import MASKED_TEXT, DemoEvent

log = logging.getLogger(__name__)

_PERMISSION_HELP = (
    "recording reads the touchscreen with `adb shell getevent`, which needs the shell user's access to /dev/input "
    "(the `input` group; some phones and ROMs deny it). What still works: `agent run --device android` drives the "
    "phone (input, screencap and uiautomator need no such access)"
)


class AndroidRecorder:
    """Records a person using a phone (see the module docstring). ``device`` is started by ``start`` unless it
    already is, and then closed by ``stop``."""

    def __init__(self, device: AndroidDevice, options: AndroidRecordOptions | None = None) -> None:
        self.device = device
        self.options = options or AndroidRecordOptions()
        self.touchscreen: InputDevice | None = None
        self.input_devices: list[InputDevice] = []
        self.ignored_keys = 0
        """Key presses with no action (volume, power)."""
        self.dropped_touches = 0
        """Touches still in progress when the recording stopped."""
        self.capture = RollingCapture(device, self.options, lambda snap: self._post(("snapshot", snap)),
                                      self._horizon)
        self._owns_device = False
        self._text = TextTracker()
        self._touches = TouchTracker()
        self._keys_down: dict[tuple[str, str], float] = {}
        self._offset = math.inf
        """Computer time minus phone time, the smallest seen (see the module docstring)."""
        self._inbox: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
        self._out: asyncio.Queue[DemoEvent | BaseException | None] = asyncio.Queue()
        self._assembler: asyncio.Task[None] | None = None
        self._stream: Any = None
        self._reader: threading.Thread | None = None
        self._closing = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._paused_at: float | None = None
        self._pauses: list[tuple[float, float]] = []
        self._last_input_end = 0.0
        self._editable_clicked_at: float | None = None
        self._ended = False

    # -- life cycle -------------------------------------------------------------------------------------
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        if not self.device.serial:
            await self.device.start()
            self._owns_device = True
        try:
            await self._find_touchscreen()
            await self.capture.start()
            self._text.snapshot(self.capture.snapshots[-1], None)
            self._stream = await asyncio.to_thread(self.device.open_stream, "getevent -lt")
        except BaseException:
            await self.capture.stop()
            await self._release_device()
            raise
        self._reader = threading.Thread(target=self._read_stream, args=(self._stream,), daemon=True,
                                        name="handeye-getevent")
        self._reader.start()
        self._assembler = asyncio.create_task(self._assemble())

    async def _find_touchscreen(self) -> None:
        serial = self.device.serial
        out, rc = await self.device.shell_rc("getevent -lp", "list the input devices")
        if rc == 127 or "not found" in out:
            raise DeviceUnavailable(f"cannot record on {serial}: it has no getevent command ({out.strip()[:200]}); "
                                    + _PERMISSION_HELP)
        self.input_devices = parse_devices(out)
        self.touchscreen = find_touchscreen(self.input_devices)
        if self.touchscreen is not None:
            return
        if "Permission denied" in out or rc != 0 or not self.input_devices:
            raise DeviceUnavailable(f"cannot record on {serial}: `getevent -lp` could not read its input devices "
                                    f"(exit {rc}: {out.strip()[:300]!r}); " + _PERMISSION_HELP)
        found = ", ".join(f"{d.path} {d.name!r}" for d in self.input_devices)
        raise DeviceUnavailable(
            f"cannot record on {serial}: none of its input devices is a touchscreen (one with ABS_MT_POSITION_X and "
            f"ABS_MT_POSITION_Y); found {found}. Recording needs the phone's own touchscreen; "
            "`agent run --device android` still works"
        )

    async def stop(self) -> None:
        self._closing.set()
        if self._assembler is not None:
            self._assembler.cancel()
            await asyncio.gather(self._assembler, return_exceptions=True)
            self._assembler = None
        await self.capture.stop()
        if self._stream is not None:
            await asyncio.to_thread(self._stream.close)
            self._stream = None
        if self._reader is not None:
            await asyncio.to_thread(self._reader.join, 5)
            self._reader = None
        self._out.put_nowait(None)  # a next_event still waiting ends
        await self._release_device()

    async def _release_device(self) -> None:
        if self._owns_device:
            self._owns_device = False
            await self.device.close()

    def describe(self) -> dict[str, Any]:
        keys = [d.path for d in self.input_devices
                if d is not self.touchscreen and d.keys & (set(KEY_ACTIONS) | set(KEY_NAMES))]
        return {
            "kind": "android",
            "source": "getevent",
            "device": self.device.describe(),
            "touchscreen": self.touchscreen.describe() if self.touchscreen else None,
            "key_devices": keys,
            "captured": ["click", "long_press", "scroll", "drag", "type (soft keyboard, read from UI dumps)",
                         "back", "home", "key", "target boxes (uiautomator)", "pre-action frames (screencap)"],
            "missing": ["text typed after the last UI dump before it was committed",
                        "the keyboard's action key (Go, Search) as a key", "gestures of more than one finger"],
            "options": dataclasses.asdict(self.options),
            "ignored_keys": self.ignored_keys,
            "dropped_touches": self.dropped_touches,
            "unread_keyboard_touches": self._text.unread,
        }

    # -- the person's controls --------------------------------------------------------------------------
    def request_stop(self) -> None:
        """End the recording after what the phone already sent (safe from another thread or a signal handler)."""
        self._post(("stop",))

    @property
    def paused(self) -> bool:
        """Between ``pause`` and ``resume``."""
        return self._paused_at is not None

    def pause(self) -> None:
        """Stop capturing until ``resume``: frames, dumps and input of the pause are never recorded."""
        if self._paused_at is None:
            self._paused_at = time.time()
            self.capture.pause()
            self._post(("pause", self._paused_at))

    async def resume(self) -> None:
        """Capture again; returns once a fresh frame and dump exist, so every later event has them."""
        if self._paused_at is None:
            return
        now = time.time()
        self._pauses.append((self._paused_at, now))
        self._paused_at = None
        self._post(("resume", self._pauses[-1]))
        await self.capture.resume(now)

    def _post(self, item: tuple[Any, ...]) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._inbox.put_nowait(item)
        else:
            loop.call_soon_threadsafe(self._inbox.put_nowait, item)

    # -- events -----------------------------------------------------------------------------------------
    async def next_event(self) -> DemoEvent | None:
        if self._ended:
            return None
        item = await self._out.get()
        if item is None or isinstance(item, BaseException):
            self._ended = True
            if item is not None:
                raise item
            return None
        return item

    async def observe(self) -> Observation:
        obs = await self.device.observe()
        try:
            snap = await self.capture.take_snapshot()
        except DeviceError as e:
            log.warning("no UI dump of the final screen (%s); its password fields are masked from the last one", e)
            snap = self.capture.snapshots[-1]
        return dataclasses.replace(obs, sensitive_boxes=_union(obs.sensitive_boxes, snap.password_boxes()))

    async def _assemble(self) -> None:
        """Turns what arrives (getevent lines, dumps, the person's controls) into events, in order."""
        try:
            while True:
                item = await self._inbox.get()
                kind = item[0]
                if kind == "events":
                    for ev in item[2]:
                        self._on_raw(ev, item[1])
                elif kind == "snapshot":
                    self._on_snapshot(item[1])
                elif kind == "pause":
                    self._emit_typed(self._text.commit())
                elif kind == "resume":
                    self._on_resume(*item[1])
                elif kind in ("stop", "end"):
                    await self._finish(item[1] if kind == "end" else None)
                    return
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a bug or the device: end the recording with it, never leave next_event waiting
            log.exception("the recording stopped")
            self._out.put_nowait(e if isinstance(e, DeviceError) else DeviceError(f"the recording stopped: {e!r}"))

    def _on_snapshot(self, snap: Snapshot) -> None:
        previous = self.capture.snapshots[-1]
        after_pause = bool(self._pauses) and previous.start < self._pauses[-1][1]
        self.capture.add_snapshot(snap)
        # after a pause the field's text then is where typing starts: what was typed during it stays private
        self._emit_typed(self._text.snapshot(snap, None if after_pause else previous))

    async def _finish(self, error: BaseException | None) -> None:
        if error is None and self._paused_at is None:
            try:
                self._on_snapshot(await self.capture.take_snapshot())
            except DeviceError as e:
                log.warning("no final UI dump (%s): text typed since the last one is not recorded", e)
        self._emit_typed(self._text.commit())
        if self._touches.open_since is not None:
            self.dropped_touches += 1
        self._out.put_nowait(error)

    def _on_resume(self, paused_at: float, resumed: float) -> None:
        self._emit_typed(self._text.commit())
        self._text.reset()
        self._editable_clicked_at = None
        paused_s = resumed - paused_at
        frame = self.capture.frame_before(paused_at)
        action = Action(ActionKind.WAIT, duration_s=round(min(paused_s, 600.0), 3))
        self._out.put_nowait(DemoEvent(action, paused_at, frame.obs, max(0.0, paused_at - frame.end),
                                       info={"paused_s": round(paused_s, 3)}))

    def _paused(self, *times: float) -> bool:
        if self._paused_at is not None and any(t >= self._paused_at for t in times):
            return True
        return any(p <= t < r for p, r in self._pauses for t in times)

    def _on_raw(self, ev: RawEvent, received: float) -> None:
        self._offset = min(self._offset, received - ev.time)
        assert self.touchscreen is not None
        if ev.device == self.touchscreen.path and not (ev.type == "EV_KEY" and ev.code.startswith("KEY_")):
            touch = self._touches.feed(ev)
            if touch is not None:
                self._on_touch(touch)
        elif ev.type == "EV_KEY" and ev.code.startswith("KEY_"):
            self._on_key(ev)

    def _on_key(self, ev: RawEvent) -> None:
        key = (ev.device, ev.code)
        if ev.value == 1:
            self._keys_down[key] = ev.time + self._offset
            return
        if ev.value != 0 or key not in self._keys_down:
            return  # auto-repeat, or a key already down when the recording began
        down = self._keys_down.pop(key)
        if self._paused(down, ev.time + self._offset):
            return
        if self._text.field is not None and is_typing_key(ev.code):
            self._text.keyboard(down)
            return
        action = key_action(ev.code)
        if action is None:
            self.ignored_keys += 1
            log.info("key %s has no action in the action space; not recorded", ev.code)
            return
        self._emit_typed(self._text.commit())
        snap = self.capture.snapshot_before(down)
        focused = snap.focused
        self._emit(action, down, ev.time + self._offset, snap, element_info(focused) if focused else None, {})

    def _on_touch(self, touch: Touch) -> None:
        down, up = touch.down + self._offset, touch.up + self._offset
        if self._paused(down, up):
            return
        snap = self.capture.snapshot_before(down)
        frame = self.capture.frame_before(down)
        panel, rotation = self.touchscreen, rotation_at(snap, frame)
        assert panel is not None
        path = [(t - touch.down, *panel_to_frame(panel, rotation, x, y)) for t, x, y in touch.path]
        x0, y0 = path[0][1], path[0][2]
        if self._on_keyboard(snap, y0, down):
            self._text.keyboard(down)
            return
        self._emit_typed(self._text.commit())
        node = element_under(snap.elements, x0, y0)
        size = frame.obs.size
        density = self.device.density
        slop = self.options.touch_slop_dp * density / 160 if density else 0.02 * min(size)
        action = touch_action(path, touch.duration_s, size, slop, self.options, node.class_name if node else "")
        info: dict[str, Any] = {"duration_s": round(touch.duration_s, 3)}
        if touch.fingers > 1:
            info["fingers"] = touch.fingers
        if touch.dropped:
            info["events_dropped"] = True
        if action.kind is ActionKind.CLICK and node is not None and "EditText" in node.class_name:
            self._editable_clicked_at = up
        self._emit(action, down, up, snap, element_info(node) if node is not None else None, info)

    def _on_keyboard(self, snap: Snapshot, y: float, at: float) -> bool:
        """Whether a touch at normalized height ``y`` went to the soft keyboard: a field has the focus and the
        keyboard is shown in a dump begun after the last tap on a text field, or that tap came after the dump
        (a quick typist starts before the next dump) and ``y`` is where the keyboard was last seen."""
        clicked = self._editable_clicked_at
        if clicked is not None and snap.start < clicked <= at:
            seen = (s.keyboard_top for s in reversed(self.capture.snapshots) if s.keyboard_top is not None)
            top = next(seen, None)
            return y >= (top if top is not None else 1.0 - self.options.keyboard_fraction)
        return snap.focused is not None and snap.keyboard_top is not None and y >= snap.keyboard_top

    def _emit_typed(self, typed: Typed | None) -> None:
        if typed is None:
            return
        snap = self.capture.snapshot_before(typed.first_key)
        target = element_info(typed.field)
        info: dict[str, Any] = {"typing_s": round(typed.last_key - typed.first_key, 3)}
        if not typed.complete:
            info["text_complete"] = False
            log.warning("typed text was read from a UI dump older than the last keystroke: characters may be missing")
        if typed.field.password:
            self._emit(Action(ActionKind.TYPE, text=MASKED_TEXT), typed.first_key, typed.last_key, snap, target,
                       info, masked=True)
            return
        erased, appended = edits(typed.before, typed.after)
        for _ in range(erased):
            self._emit(Action(ActionKind.KEY, keys=("Backspace",)), typed.first_key, typed.last_key, snap, target,
                       dict(info))
        if appended:
            self._emit(Action(ActionKind.TYPE, text=appended), typed.first_key, typed.last_key, snap, target, info)

    def _emit(self, action: Action, at: float, end: float, snap: Snapshot, target: ElementInfo | None,
              info: dict[str, Any], *, masked: bool = False) -> None:
        frame = self.capture.frame_before(at)
        if frame.end > at:
            info["frame_after_event"] = True
        boxes = _union(frame.obs.sensitive_boxes, snap.password_boxes(),
                       self.capture.snapshot_before(frame.end).password_boxes())
        obs = dataclasses.replace(frame.obs, sensitive_boxes=boxes) if boxes else frame.obs
        info |= {"package": snap.package, "rotation": rotation_at(snap, frame),
                 "hierarchy_lag_s": round(max(0.0, at - snap.end), 3)}
        if snap.start < self._last_input_end:
            info["hierarchy_stale"] = True
        self._last_input_end = max(self._last_input_end, end)
        self._out.put_nowait(DemoEvent(action, at, obs, frame_lag_s=max(0.0, at - frame.end), target=target,
                                       masked=masked, info=info))

    def _horizon(self) -> float:
        """Frames that ended before this may go: nothing still on its way from the phone is older."""
        opens = list(self._keys_down.values())
        if self._touches.open_since is not None:
            opens.append(self._touches.open_since + self._offset)
        if self._text.typing_since is not None:
            opens.append(self._text.typing_since)
        if self._paused_at is not None:
            opens.append(self._paused_at)
        return min([time.time() - self.options.keep_s, *opens])

    # -- the getevent stream --------------------------------------------------------------------------------
    def _read_stream(self, conn: Any) -> None:
        """Reads getevent's lines in a thread and posts them, stamped with their arrival, to the assembler."""
        sock = conn.conn
        sock.settimeout(0.5)
        pending = b""
        while not self._closing.is_set():
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                continue
            except OSError as e:
                if not self._closing.is_set():
                    self._post(("end", DeviceDisconnected(f"the getevent stream of {self.device.serial} broke: {e}")))
                return
            if not chunk:
                if not self._closing.is_set():
                    self._post(("end", DeviceDisconnected(
                        f"getevent on {self.device.serial} stopped (the phone was unplugged, or the command was "
                        "killed); everything recorded before is kept")))
                return
            received = time.time()
            *lines, pending = (pending + chunk).split(b"\n")
            events = []
            for raw in lines:
                line = raw.decode("utf-8", "replace")
                ev = parse_event_line(line)
                if ev is not None:
                    events.append(ev)
                elif "could not open" in line:
                    log.warning("getevent: %s", line.strip())
            if events:
                self._post(("events", received, events))


def _union(*groups: tuple[Box, ...]) -> tuple[Box, ...]:
    out: list[Box] = []
    for group in groups:
        out.extend(b for b in group if b not in out)
    return tuple(out)

"""The phone's recent frames and UI hierarchy dumps, kept coming in the background while a person records.

``RollingCapture`` runs two loops on an ``AndroidDevice``: ``screencap`` (every ``frame_interval_s`` at most)
and ``uiautomator dump`` (every ``dump_interval_s`` at most, with ``dumpsys input_method`` while a field has
the focus, for the soft keyboard). Each frame is stamped with the computer's times its capture began and
*ended*: its content is certainly older than the end, so "the newest frame that ended before an event" is a
screen from before it. Frames are kept back to the recorder's horizon (nothing older is still on its way from
the phone), at least ``keep_s`` seconds; dumps, which are small, the last 64.

A capture or dump that overlapped a pause is dropped: nothing the person did while paused is captured.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from devices.android.device import AndroidDevice
from devices.android.gestures import AndroidRecordOptions
from devices.android.replies import parse_ui_dump
from devices.android.typed_text import Snapshot, parse_input_method, parse_rotation_attr
from devices.base import Observation
from devices.errors import DeviceDisconnected, DeviceError, DeviceTimeout

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Frame:
    """One capture and the computer's times it began and ended."""

    start: float
    end: float
    obs: Observation


def rotation_at(snap: Snapshot, frame: Frame) -> int:
    """The display rotation at an event: the dump's (from its ``<hierarchy rotation>``) or the frame's (from
    ``dumpsys display`` when its size changed), whichever is newer."""
    frame_rotation = frame.obs.meta.get("rotation")
    if snap.rotation is not None and (frame_rotation is None or snap.end >= frame.end):
        return snap.rotation
    return int(frame_rotation or 0)


class RollingCapture:
    """The background capture (see the module docstring). Dumps reach the recorder through ``on_snapshot``, which
    hands them back with ``add_snapshot`` once it has read them in order; ``horizon`` says which frames may go."""

    def __init__(self, device: AndroidDevice, options: AndroidRecordOptions,
                 on_snapshot: Callable[[Snapshot], None], horizon: Callable[[], float]) -> None:
        self.device = device
        self.options = options
        self.frames: deque[Frame] = deque()
        self.snapshots: deque[Snapshot] = deque(maxlen=64)
        self._on_snapshot = on_snapshot
        self._horizon = horizon
        self._dump_lock = asyncio.Lock()
        self._tick = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []
        self.paused = False
        self._valid_from = 0.0
        self._running = False

    async def start(self) -> None:
        """The first frame and dump (a failed dump is logged: steps have no targets until one works), then the
        loops."""
        obs = await self.device.observe()
        self.frames.append(Frame(obs.timestamp, obs.timestamp, obs))
        try:
            snap = await self.take_snapshot()
        except DeviceError as e:
            log.warning("the first UI hierarchy dump failed (%s); steps have no target boxes until one works", e)
            snap = Snapshot(time.time(), time.time(), ())
        self.add_snapshot(snap)
        self._running = True
        self._tasks = [asyncio.create_task(self._frame_loop()), asyncio.create_task(self._dump_loop())]

    async def stop(self) -> None:
        # the flag as well as the cancel: asyncio.wait_for (inside every adb call) can swallow a cancel that
        # arrives as its call completes (Python 3.11), and the loop would go on
        self._running = False
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    def pause(self) -> None:
        self.paused = True

    async def resume(self, at: float) -> None:
        """Capture again from ``at``; returns once a frame and a dump begun after it exist."""
        self._valid_from = at
        self.paused = False
        deadline = time.monotonic() + self.device.config.call_timeout_s * 2
        while not (self.frames[-1].start >= at and self.snapshots[-1].start >= at):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DeviceTimeout("the phone gave no fresh frame and UI dump after the pause; is it still there?")
            try:
                await asyncio.wait_for(self._tick.wait(), remaining)
            except asyncio.TimeoutError:
                pass

    def frame_before(self, at: float) -> Frame:
        """The newest frame that ended before ``at``, else the oldest one kept."""
        return next((f for f in reversed(self.frames) if f.end <= at), self.frames[0])

    def snapshot_before(self, at: float) -> Snapshot:
        """The newest UI dump that ended before ``at``, else the oldest one kept."""
        return next((s for s in reversed(self.snapshots) if s.end <= at), self.snapshots[0])

    def add_snapshot(self, snap: Snapshot) -> None:
        self.snapshots.append(snap)
        self._signal()

    def _signal(self) -> None:
        self._tick.set()
        self._tick = asyncio.Event()

    def _clean(self, start: float) -> bool:
        """Whether a capture begun at ``start`` and ending now overlapped no pause."""
        return not self.paused and start >= self._valid_from

    async def _frame_loop(self) -> None:
        while self._running:
            if self.paused:
                await asyncio.sleep(0.05)
                continue
            start = time.time()
            try:
                obs = await self.device.observe()
            except DeviceDisconnected:
                return  # the getevent stream ends too, and says so
            except DeviceError as e:
                log.warning("a frame could not be captured (%s); trying again", e)
                await asyncio.sleep(0.5)
                continue
            end = time.time()
            if self._clean(start):
                self.frames.append(Frame(start, end, obs))
                horizon = self._horizon()
                while len(self.frames) > 1 and self.frames[1].end <= horizon:
                    self.frames.popleft()
                self._signal()
            await asyncio.sleep(max(0.0, self.options.frame_interval_s - (end - start)))

    async def _dump_loop(self) -> None:
        while self._running:
            if self.paused:
                await asyncio.sleep(0.05)
                continue
            try:
                snap = await self.take_snapshot()
            except DeviceDisconnected:
                return
            except DeviceError as e:
                log.warning("the UI hierarchy could not be dumped (%s); trying again", e)
                await asyncio.sleep(0.5)
                continue
            if self._clean(snap.start):
                self._on_snapshot(snap)
            await asyncio.sleep(max(0.0, self.options.dump_interval_s - (snap.end - snap.start)))

    async def take_snapshot(self) -> Snapshot:
        """One UI dump now, with the rotation it reports and the soft keyboard's top edge."""
        async with self._dump_lock:  # one dump file on the phone
            start = time.time()
            xml_text = await self.device.ui_dump()
            rotation = parse_rotation_attr(xml_text)
            g = self.device.geometry
            size = g.input_size if g is not None else self.frames[-1].obs.size
            if rotation is not None and g is not None and g.rotation is not None and (rotation - g.rotation) % 2:
                size = (size[1], size[0])  # turned since the last frame: the dump's bounds are in the new orientation
            elements = tuple(parse_ui_dump(xml_text, size))
            keyboard_top = None
            if any(e.focused for e in elements):
                out, _ = await self.device.shell_rc("dumpsys input_method", "read the soft keyboard's state")
                shown, top = parse_input_method(out)
                if shown is not False:
                    keyboard_top = top / size[1] if top and 0 < top < size[1] else 1.0 - self.options.keyboard_fraction
            return Snapshot(start, time.time(), elements, rotation, keyboard_top)

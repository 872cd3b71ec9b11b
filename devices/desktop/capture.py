"""The rolling capture: a thread grabbing one monitor with mss into a small ring of timestamped frames.

A recorded action's frame must show the screen just before the action, and input can come faster
than any capture; so the screen is grabbed all the time (``fps``, default 25: an mss grab and its
conversion to RGB take about a millisecond, docs/devices.md) and each press takes the newest frame
whose grab had completed before the press (``before``), a reference, not a copy. The ring only
has to cover the time between an input event and the recorder seeing it, so it is short.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass

import numpy as np

from devices.desktop.display import grab_rgb, open_mss
from devices.desktop.geometry import MonitorGeometry
from devices.errors import DeviceUnavailable

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CapturedFrame:
    """One grab of the monitor."""

    at: float
    """Wall time the grab had completed: the frame shows nothing that happened after it."""
    rgb: np.ndarray


class FrameRing:
    """Grabs ``monitor`` of ``display`` ``fps`` times a second on its own thread (and own mss connection)."""

    def __init__(self, display: str, monitor: MonitorGeometry, fps: float, keep: int) -> None:
        self.display = display
        self.monitor = monitor
        self.period = 1.0 / fps
        self.error: BaseException | None = None
        """Why the capture thread stopped early (the display went away), else None."""
        self.grabs = 0
        self.grab_s = 0.0
        """Total seconds spent grabbing (for the mean grab time)."""
        self._ring: deque[CapturedFrame] = deque(maxlen=keep)
        self._lock = threading.Lock()
        self._first = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, timeout_s: float = 5.0) -> None:
        """Start grabbing; returns once the first frame is in (DeviceUnavailable when none comes)."""
        self._thread = threading.Thread(target=self._run, name="handeye-record-capture", daemon=True)
        self._thread.start()
        if not self._first.wait(timeout_s) or self.error is not None:
            self.stop()
            why = f"{type(self.error).__name__}: {self.error}" if self.error else f"no frame within {timeout_s:g} s"
            raise DeviceUnavailable(f"cannot capture {self.monitor.describe()} of display {self.display}: {why}")

    def _run(self) -> None:
        try:
            with open_mss(self.display) as sct:
                while not self._stop.is_set():
                    began = time.perf_counter()
                    rgb = grab_rgb(sct, self.monitor)
                    took = time.perf_counter() - began
                    frame = CapturedFrame(time.time(), rgb)
                    with self._lock:
                        self._ring.append(frame)
                    self.grabs += 1
                    self.grab_s += took
                    self._first.set()
                    self._stop.wait(max(0.0, self.period - (time.perf_counter() - began)))
        except BaseException as e:  # the display went away, or mss failed: the recorder reports it
            self.error = e
            self._first.set()
            log.debug("the rolling capture of %s stopped: %s", self.display, e)

    def before(self, at: float) -> CapturedFrame:
        """The newest frame grabbed before ``at``; the oldest one kept if all are newer (input that reached
        the recorder later than the ring reaches back: its step records a negative lag)."""
        with self._lock:
            frames = list(self._ring)
        for frame in reversed(frames):
            if frame.at <= at:
                return frame
        return frames[0]

    def latest(self) -> CapturedFrame:
        with self._lock:
            return self._ring[-1]

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._thread = None

"""Monitor geometry: how the frames of one monitor map to the input space pyautogui / XTest move in.

Coordinate contract (docs/coordinates.md, docs/devices.md "Desktop"): the frame is one monitor
grabbed by mss. Per monitor, scale = frame pixels / logical input size, and a normalized point
(x, y) maps to the input point X = input_left + x * input_width, Y = input_top + y * input_height
(``ScreenMap.to_input``). pyautogui and XTest take integers, so the device sends
``ScreenMap.to_input_px``: input_left + min(floor(x * input_width), input_width - 1), the same for
y. On X11 the input space *is* the X screen, so logical == physical and the scale is 1, unless
``scale_override`` declares a uniformly scaled desktop (input = physical / scale). Xvfb shows one
monitor at scale 1; multi-monitor layouts, negative offsets and scales 1.25 / 1.5 / 2 are covered
only by tests with injected geometry. Everything here is pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class MonitorGeometry:
    """A monitor's rectangle as mss reports it: physical pixels in the virtual screen (X11, Windows)."""

    index: int
    """mss monitor index: 1 is the first monitor (0, all monitors together, is not a device)."""
    left: int
    top: int
    width: int
    height: int

    def describe(self) -> str:
        return f"monitor {self.index}: {self.width}x{self.height} at ({self.left}, {self.top})"


@dataclass(frozen=True, slots=True)
class ScreenMap:
    """How frames of one monitor map to input coordinates (the space pyautogui / XTest move in).

    Built by ``screen_map``; pure, so layouts that Xvfb cannot show (several monitors side by side or
    stacked, negative offsets, HiDPI scales) are tested with injected geometry.
    """

    monitor: MonitorGeometry
    frame_width: int
    """Width of the frames this monitor yields, in pixels."""
    frame_height: int
    input_left: int
    """The monitor's left edge in input (logical) coordinates."""
    input_top: int
    input_width: int
    """The monitor's width in input (logical) units."""
    input_height: int

    @property
    def scale(self) -> tuple[float, float]:
        """Frame pixels per logical input unit, (x, y): 1 on plain X11, 2 on a 2x HiDPI desktop."""
        return self.frame_width / self.input_width, self.frame_height / self.input_height

    def to_input(self, x: float, y: float) -> tuple[float, float]:
        """The continuous input point of a normalized frame point (for input APIs that take floats)."""
        return self.input_left + x * self.input_width, self.input_top + y * self.input_height

    def to_input_px(self, x: float, y: float) -> tuple[int, int]:
        """The integer input point of a normalized frame point: left + min(floor(x * width), width - 1).

        The offset is added after flooring so that a point on the monitor never lands on its
        neighbour, and x = 1 (the right edge of the last pixel) is the last input column.
        """
        return (
            self.input_left + min(math.floor(x * self.input_width), self.input_width - 1),
            self.input_top + min(math.floor(y * self.input_height), self.input_height - 1),
        )

    def to_frame(self, X: float, Y: float) -> tuple[float, float]:
        """The normalized frame point of an input point (may fall outside [0, 1] off the monitor)."""
        return (X - self.input_left) / self.input_width, (Y - self.input_top) / self.input_height

    def describe(self) -> dict[str, Any]:
        return {
            "monitor": [self.monitor.left, self.monitor.top, self.monitor.width, self.monitor.height],
            "monitor_index": self.monitor.index,
            "frame_size": [self.frame_width, self.frame_height],
            "input_rect": [self.input_left, self.input_top, self.input_width, self.input_height],
            "scale": list(self.scale),
        }


def screen_map(
    monitor: MonitorGeometry, frame_size: tuple[int, int] | None = None, scale_override: float | None = None
) -> ScreenMap:
    """The frame-to-input mapping of ``monitor``.

    - ``scale_override`` s (not None): the desktop is scaled uniformly by s (a HiDPI desktop whose input
      API works in logical units): every coordinate of the physical rectangle is divided by s and
      rounded, e.g. a 2560x1600 panel at s = 1.25 takes input in 2048x1280.
    - otherwise the input rectangle is mss's rectangle, and the scale is measured as frame size /
      that size: 1 on X11 (input is the X screen); 2 where a grab returns twice the pixels of the
      monitor's rectangle (a Retina display, whose rectangles are in points).

    ``frame_size`` defaults to the monitor's own size (what mss grabs on X11).
    """
    fw, fh = frame_size or (monitor.width, monitor.height)
    if fw <= 0 or fh <= 0 or monitor.width <= 0 or monitor.height <= 0:
        raise ValueError(f"empty monitor or frame: {monitor.describe()}, frame {fw}x{fh}")
    if scale_override is not None:
        s = scale_override
        left, top = round(monitor.left / s), round(monitor.top / s)
        width, height = max(1, round(monitor.width / s)), max(1, round(monitor.height / s))
    else:
        left, top, width, height = monitor.left, monitor.top, monitor.width, monitor.height
    return ScreenMap(monitor, fw, fh, left, top, width, height)


def scroll_clicks(amount: float, input_height: int, click_px: float) -> int:
    """Wheel clicks for a scroll of ``amount`` screens: round(amount * height / click_px), at least 1."""
    return max(1, round(amount * input_height / click_px))

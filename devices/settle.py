"""Screen settling: after an action, wait until consecutive downscaled frames stop changing.

Fixed sleeps are either too long (a static page is ready in tens of milliseconds) or too short (a
transition takes longer than the sleep). Instead a device hands ``wait_until_settled`` a function
that grabs a small grayscale frame; frames are grabbed back to back until ``stable_frames``
consecutive pairs differ in at most ``max_changed_fraction`` of their pixels, after at least
``min_s`` and before ``deadline_s``. A pixel counts as changed when its value moved by more than
``pixel_delta`` levels, so compression noise and a blinking caret do not keep the screen "busy".
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class SettleConfig:
    min_s: float = 0.05
    """Never report settled before this many seconds after the action."""
    deadline_s: float = 3.0
    """Give up waiting after this many seconds; the step goes on with settled = false."""
    interval_s: float = 0.0
    """Extra pause between two grabs (the grab itself already takes a frame's time)."""
    stable_frames: int = 2
    """How many consecutive unchanged frame pairs mean the screen has settled."""
    max_changed_fraction: float = 0.0025
    """A frame pair is unchanged when at most this fraction of its pixels changed."""
    pixel_delta: int = 16
    """A pixel changed when its gray level moved by more than this (0-255)."""
    width: int = 160
    """Frames are compared at this width (aspect kept)."""

    def __post_init__(self) -> None:
        if not 0 <= self.min_s <= self.deadline_s:
            raise ValueError(
                f"settle: need 0 <= min_s <= deadline_s, got min_s={self.min_s}, deadline_s={self.deadline_s}"
            )
        if self.stable_frames < 1:
            raise ValueError(f"settle: stable_frames must be >= 1, got {self.stable_frames}")
        if not 0 <= self.max_changed_fraction < 1:
            raise ValueError(f"settle: max_changed_fraction must be in [0, 1), got {self.max_changed_fraction}")
        if not 0 <= self.pixel_delta <= 255:
            raise ValueError(f"settle: pixel_delta must be a gray-level step in 0..255, got {self.pixel_delta}")
        if self.interval_s < 0:
            raise ValueError(f"settle: interval_s must be >= 0, got {self.interval_s}")
        if self.width < 8:
            raise ValueError(f"settle: width must be at least 8 pixels, got {self.width}")


@dataclass(frozen=True, slots=True)
class SettleResult:
    settled: bool
    """True when the screen stopped changing before the deadline."""
    elapsed_s: float
    frames: int
    """How many frames were grabbed."""
    last_changed_fraction: float


def changed_fraction(a: np.ndarray, b: np.ndarray, pixel_delta: int) -> float:
    """Fraction of pixels whose gray level differs by more than ``pixel_delta`` (shapes must match)."""
    if a.shape != b.shape:
        return 1.0
    diff = np.abs(a.astype(np.int16) - b.astype(np.int16))
    return float(np.count_nonzero(diff > pixel_delta)) / diff.size


async def wait_until_settled(
    grab: Callable[[], Awaitable[np.ndarray]],
    config: SettleConfig,
    clock: Callable[[], float] = time.perf_counter,
) -> SettleResult:
    """Grab small gray frames until the screen is still; see the module docstring."""
    start = clock()
    previous = await grab()
    frames, stable, fraction = 1, 0, 1.0
    while True:
        if config.interval_s:
            await asyncio.sleep(config.interval_s)
        current = await grab()
        frames += 1
        fraction = changed_fraction(previous, current, config.pixel_delta)
        stable = stable + 1 if fraction <= config.max_changed_fraction else 0
        previous = current
        elapsed = clock() - start
        if stable >= config.stable_frames and elapsed >= config.min_s:
            return SettleResult(True, elapsed, frames, fraction)
        if elapsed >= config.deadline_s:
            return SettleResult(False, elapsed, frames, fraction)

"""What the guard may learn about the screen an action was chosen on: the element under a point and the focused
element, from the device where it can tell (``devices.base.Inspectable``: the web page's DOM, the phone's UI
hierarchy), else the text at the point read off the frame by OCR (the desktop), else nothing. Answers are kept for
the step, so several guards asking about one point cost one question to the device.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from devices.actions import Point
from devices.base import Box, ElementInfo, Inspectable, Observation
from devices.errors import DeviceError

log = logging.getLogger(__name__)

OCR_WINDOW = (0.25, 0.08)
"""The part of the frame (width, height, as fractions) read around a point when only OCR can tell what is there."""


class Probe:
    """One step's questions about the screen (see the module docstring)."""

    def __init__(self, device: Any, observation: Observation, ocr: Any = None) -> None:
        self.device = device if isinstance(device, Inspectable) else None
        self.observation = observation
        self.ocr = ocr
        """An object with ``read(frame) -> list[OcrLine]`` (the OCR policy), for devices that cannot tell."""
        self._elements: dict[tuple[float, float], ElementInfo | None] = {}
        self._focused: tuple[ElementInfo | None] | None = None

    async def element_at(self, point: Point) -> ElementInfo | None:
        key = (point.x, point.y)
        if key not in self._elements:
            self._elements[key] = await self._element_at(point)
        return self._elements[key]

    async def _element_at(self, point: Point) -> ElementInfo | None:
        if self.device is not None:
            try:
                return await self.device.element_at(point)
            except DeviceError as e:  # the question failed; the guard then judges without it
                log.warning("could not tell what is under (%.3f, %.3f): %s", point.x, point.y, e)
                return None
        if self.ocr is not None:
            return await asyncio.to_thread(self._ocr_at, point)
        return None

    def _ocr_at(self, point: Point) -> ElementInfo | None:
        frame = self.observation.frame
        h, w = frame.shape[:2]
        half_w, half_h = OCR_WINDOW[0] * w / 2, OCR_WINDOW[1] * h / 2
        x0, y0 = max(0, int(point.x * w - half_w)), max(0, int(point.y * h - half_h))
        x1, y1 = min(w, int(point.x * w + half_w) + 1), min(h, int(point.y * h + half_h) + 1)
        try:
            lines = self.ocr.read(frame[y0:y1, x0:x1])
        except Exception as e:  # OCR is a best-effort reading here, never worth the episode
            log.warning("OCR at the point failed: %s: %s", type(e).__name__, e)
            return None
        if not lines:
            return None
        px, py = point.x * w - x0, point.y * h - y0
        nearest = min(lines, key=lambda ln: _distance(ln.box, px, py))
        r = nearest.box
        box = Box((r.left + x0) / w, (r.top + y0) / h, (r.right + x0) / w, (r.bottom + y0) / h).clipped()
        return ElementInfo(text=nearest.text, box=box, role="ocr")

    async def focused_element(self) -> ElementInfo | None:
        """The element holding the keyboard focus, as the device tells it; None where it cannot (the desktop)."""
        if self._focused is None:
            element = None
            if self.device is not None:
                try:
                    element = await self.device.focused_element()
                except DeviceError as e:
                    log.warning("could not tell which element has the focus: %s", e)
            self._focused = (element,)
        return self._focused[0]

    async def focused_box(self) -> Box | None:
        element = await self.focused_element()
        return element.box if element is not None else None


def _distance(r: Any, x: float, y: float) -> float:
    """Squared distance from (x, y) to the rectangle ``r`` (a ``policy.grounding.Rect``); 0 inside it."""
    dx = max(r.left - x, 0.0, x - r.right)
    dy = max(r.top - y, 0.0, y - r.bottom)
    return dx * dx + dy * dy

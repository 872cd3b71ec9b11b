"""What a person's press went to: the element under the point, the focused window for keys.

The element comes from the accessibility tree where the desktop has one (``accessibility.py``), else
it is the top-level window under the point (its title, class and box, ``display.window_at``); keys
and typed text go to the window with the keyboard focus. Lookups happen when the press reaches the
recorder, before the action's effect can close or retitle the window, on the recorder's action
thread and its own X connection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from devices.base import ElementInfo
from devices.desktop.accessibility import AccessibilityTree
from devices.desktop.display import focused_window, window_at, window_info
from devices.desktop.geometry import ScreenMap

REUSE_S = 0.5
"""A lookup at the same point (or in the same focused window) within this long is reused: wheel clicks,
double clicks and typing ask many times in a row."""


@dataclass(frozen=True, slots=True)
class PressTarget:
    """The element a press went to, and the top-level window it is in (X id, name, class)."""

    element: ElementInfo | None
    window: dict[str, Any] | None


class TargetFinder:
    """Looks up targets on ``conn`` (an X connection of the calling thread's own)."""

    def __init__(self, conn: Any, screen: ScreenMap, tree: AccessibilityTree | None) -> None:
        self.conn = conn
        self.screen = screen
        self.tree = tree
        self._last_point: tuple[int, int, float, PressTarget] | None = None
        self._last_focus: tuple[int, float, PressTarget] | None = None
        self._clicked: dict[str, ElementInfo] = {}
        """Per window: the accessibility element last clicked in it."""

    def at_point(self, x: int, y: int, at: float) -> PressTarget:
        """The element under input point (x, y) at wall time ``at``."""
        last = self._last_point
        if last is not None and last[:2] == (x, y) and at - last[2] < REUSE_S:
            return last[3]
        element = self.tree.element_at(x, y) if self.tree is not None else None
        window, box = window_at(self.conn, self.screen, (x, y))
        if element is not None and window is not None:
            self._clicked[window["window"]] = element
        elif window is not None:
            element = ElementInfo(text=window["name"] or "", box=box, role="window")
        target = PressTarget(element, window)
        self._last_point = (x, y, at, target)
        return target

    def focused(self, at: float) -> tuple[int, PressTarget | None]:
        """The X id of the top-level window with the keyboard focus (0: none) and its target."""
        focus = focused_window(self.conn)
        if focus is None:
            return 0, None
        last = self._last_focus
        if last is not None and last[0] == focus.id and at - last[1] < REUSE_S:
            return focus.id, last[2]
        window, box = window_info(self.conn, self.screen, focus)
        if window is None:
            return focus.id, None
        # The focused element itself is not known without listening to the accessibility bus; the one last
        # clicked in this window stands for it (the field the person clicked into before typing).
        element = self._clicked.get(window["window"]) or ElementInfo(text=window["name"] or "", box=box, role="window")
        target = PressTarget(element, window)
        self._last_focus = (focus.id, at, target)
        return focus.id, target

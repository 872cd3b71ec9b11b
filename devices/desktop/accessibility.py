"""The element under a point, from the accessibility tree (AT-SPI over D-Bus), where a desktop has one.

GTK and Qt applications publish their widgets to the AT-SPI registry when the accessibility bus
runs (at-spi2-core; Qt also wants QT_ACCESSIBILITY=1). Through the ``Atspi`` GObject bindings
(``python3-gi`` and ``gir1.2-atspi-2.0``) the recorder asks each application's windows for the
deepest element at a screen point, with its name, role and extents; a password field is told by its
role. ``open_accessibility`` says why not where that is impossible, and the recorder falls back to
the window under the point. This path needs a desktop session with those packages: it does not run
in the test suite (Xvfb has no accessibility bus), so it is written defensively: any failure of a
lookup is "no element".
"""

from __future__ import annotations

import logging
from typing import Any

from devices.base import Box, ElementInfo
from devices.desktop.geometry import ScreenMap

log = logging.getLogger(__name__)

MAX_DEPTH = 40
"""How deep a lookup descends before it settles for the element it has (a cycle guard)."""


class AccessibilityTree:
    """Element lookups through ``Atspi`` (see the module docstring)."""

    def __init__(self, atspi: Any, screen: ScreenMap) -> None:
        self.atspi = atspi
        self.screen = screen

    def element_at(self, x: int, y: int) -> ElementInfo | None:
        """The deepest element at input point (x, y), or None."""
        try:
            return self._element_at(x, y)
        except Exception as e:  # D-Bus timeouts, dead applications: the recorder falls back to the window
            log.debug("AT-SPI lookup at (%s, %s) failed: %s", x, y, e)
            return None

    def _element_at(self, x: int, y: int) -> ElementInfo | None:
        screen_coords = self.atspi.CoordType.SCREEN
        desktop = self.atspi.get_desktop(0)
        for a in range(desktop.get_child_count()):
            app = desktop.get_child_at_index(a)
            for w in range(app.get_child_count() if app else 0):
                window = app.get_child_at_index(w)
                node = _descend(window, x, y, screen_coords)
                if node is not None and node is not window:
                    return self._info(node, screen_coords)
        return None

    def _info(self, node: Any, coords: Any) -> ElementInfo:
        ext = node.get_extents(coords)
        x1, y1 = self.screen.to_frame(ext.x, ext.y)
        x2, y2 = self.screen.to_frame(ext.x + ext.width, ext.y + ext.height)
        role = node.get_role()
        password = role == self.atspi.Role.PASSWORD_TEXT
        return ElementInfo(text="" if password else (node.get_name() or ""), box=Box(x1, y1, x2, y2).clipped(),
                           role=node.get_role_name() or "", password=password)


def _descend(node: Any, x: int, y: int, coords: Any) -> Any:
    """The deepest showing descendant of ``node`` containing the point (``node`` itself if none), None if
    ``node`` does not contain it."""
    if not node.contains(x, y, coords):
        return None
    for _ in range(MAX_DEPTH):
        child = node.get_accessible_at_point(x, y, coords)
        if child is None or child == node:
            break
        node = child
    return node


def open_accessibility(screen: ScreenMap) -> tuple[AccessibilityTree | None, str]:
    """The accessibility tree of this desktop, or None and why (for ``describe``)."""
    try:
        import gi

        gi.require_version("Atspi", "2.0")
        from gi.repository import Atspi
    except (ImportError, ValueError) as e:
        return None, (f"the AT-SPI bindings are not installed ({e}); install python3-gi and gir1.2-atspi-2.0 "
                      "into the Python that records")
    try:
        if Atspi.get_desktop(0).get_child_count() == 0:
            return None, ("no application publishes an accessibility tree (is at-spi2-core running? Qt "
                          "applications also need QT_ACCESSIBILITY=1)")
    except Exception as e:  # no accessibility bus
        return None, f"the accessibility bus does not answer ({type(e).__name__}: {e})"
    return AccessibilityTree(Atspi, screen), ""

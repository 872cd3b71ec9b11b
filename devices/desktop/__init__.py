"""The desktop device: one monitor of an X11 display, seen through mss and driven through pyautogui.

    config    DesktopConfig: the ``[desktop]`` settings
    geometry  how a monitor's frames map to input points (pure: ScreenMap, screen_map, scroll_clicks)
    display   connecting to X, its monitors, grabbing frames, the window under a point
    keyboard  text and keys through pyautogui, xdotool or the clipboard
    device    DesktopDevice: the X thread, observing, settling and the pointer actions

docs/devices.md (Desktop) describes set-up, coordinates and what was tested how.
"""

from devices.desktop.config import DesktopConfig
from devices.desktop.device import DESKTOP_ACTIONS, DesktopDevice
from devices.desktop.display import list_monitors, prepare_display
from devices.desktop.geometry import MonitorGeometry, ScreenMap, screen_map

__all__ = [
    "DESKTOP_ACTIONS", "DesktopConfig", "DesktopDevice", "MonitorGeometry", "ScreenMap", "list_monitors",
    "prepare_display", "screen_map",
]

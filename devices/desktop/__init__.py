"""The desktop device: one monitor of an X11 display, seen through mss and driven through pyautogui.

    config    DesktopConfig: the ``[desktop]`` settings
    geometry  how a monitor's frames map to input points (pure: ScreenMap, screen_map, scroll_clicks)
    display   connecting to X, its monitors, grabbing frames, the window under a point
    keyboard  text and keys through pyautogui, xdotool or the clipboard
    device    DesktopDevice: the X thread, observing, settling and the pointer actions

Recording a person (docs/recording.md, "Desktop (X11)"):

    recorder       DesktopRecorder: the threads below, and gestures as DemoEvents
    record_config  DesktopRecordConfig: frame rate, click/drag/scroll/typing timings, the pause and stop keys
    xrecord        the X RECORD extension: every input event of the display, in server order
    xkeys          keycodes to characters and key names, with the keymap kept current (pure)
    gestures       raw input grouped into clicks, drags, scrolls, typed text, keys and hotkeys (pure)
    capture        the rolling mss capture that pre-action frames come from
    targets        what a press went to: the element (accessibility) or the window under it, the focused window
    accessibility  the AT-SPI accessibility tree, where the desktop has one

docs/devices.md (Desktop) describes set-up, coordinates and what was tested how.
"""

from devices.desktop.config import DesktopConfig
from devices.desktop.device import DESKTOP_ACTIONS, DesktopDevice
from devices.desktop.display import list_monitors, prepare_display
from devices.desktop.geometry import MonitorGeometry, ScreenMap, screen_map
from devices.desktop.record_config import DesktopRecordConfig
from devices.desktop.recorder import DesktopRecorder

__all__ = [
    "DESKTOP_ACTIONS", "DesktopConfig", "DesktopDevice", "DesktopRecordConfig", "DesktopRecorder", "MonitorGeometry",
    "ScreenMap", "list_monitors", "prepare_display", "screen_map",
]

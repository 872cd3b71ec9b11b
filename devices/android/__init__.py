"""The Android device: one phone (or emulator) driven over ADB through an adb server, with adbutils.

    config    AndroidConfig: the ``[android]`` settings
    adb       the adb server, the phone's serial, calls with their timeouts and offline retries
    replies   parsers of what the phone answers (raw screencap, wm size, dumpsys display, uiautomator)
    commands  the shell commands each action becomes (key codes, input text, scroll swipes)
    device    AndroidDevice: frames, geometry and actions, built on the four above
    recorder  AndroidRecorder: a person's demonstration, from getevent (parsed by getevent, turned into actions
              by gestures), a rolling capture of frames and UI dumps (capture) and typed text (typed_text)

docs/devices.md (Android) describes set-up, frames, coordinates and actions for users.
"""

from devices.android.adb import AndroidDeviceInfo, list_devices
from devices.android.config import AndroidConfig
from devices.android.device import ANDROID_ACTIONS, AndroidDevice
from devices.android.replies import Geometry, UiElement

__all__ = [
    "ANDROID_ACTIONS", "AndroidConfig", "AndroidDevice", "AndroidDeviceInfo", "Geometry", "UiElement", "list_devices",
]

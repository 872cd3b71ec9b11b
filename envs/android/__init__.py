"""Android tasks with checkers that read the phone's state; importing this registers "android/*".

Registration connects to nothing: the environment reaches its phone on the first ``reset``
(pass ``serial=`` and ``adb_port=`` to ``make``).
"""

from envs.android.env import AndroidTaskEnv
from envs.android.tasks import TASKS, AndroidTask, PhoneStep, StepKind
from envs.registry import register

_ENTRY = "envs.android.env:AndroidTaskEnv"
_ENVS = {
    "android/wifi": ("turn Wi-Fi on or off in Settings (checked: settings global wifi_on)", "wifi"),
    "android/bluetooth": ("turn Bluetooth on or off in Settings (checked: settings global bluetooth_on)",
                          "bluetooth"),
    "android/brightness": ("set the brightness to its maximum or minimum (checked: system screen_brightness)",
                           "brightness"),
    "android/open-app": ("open a named app (checked: the resumed activity's package)", "open-app"),
    "android/create-note": ("create a named note in the test device's notes app (checked: its file in /sdcard/Notes)",
                            "create-note"),
}

for _name, (_description, _task) in _ENVS.items():
    register(_name, _ENTRY, "android", _description, device_kind="android", env_name=_name, task=_task, max_steps=TASKS[_task].max_steps)

__all__ = ["TASKS", "AndroidTask", "AndroidTaskEnv", "PhoneStep", "StepKind"]

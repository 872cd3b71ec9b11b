"""Environments on the desktop device; importing this registers the "desktop/*" environments.

The generated screens of ``envs.generated`` in a full-screen Chromium window on an X display, driven through the
desktop device (mss frames, X pointer and keys) and checked through the page's state (``envs.desktop.env``). They
need an X display the size of the screen (``Xvfb :N -screen 0 1280x800x24``) of their own.
"""

from envs.desktop.env import DesktopGeneratedEnv
from envs.registry import register

_ENTRY = "envs.desktop.env:DesktopGeneratedEnv"

register("desktop/click", _ENTRY, "desktop", "click a named widget in a full-screen browser on the X display",
         env_name="desktop/click", max_steps=3, device_kind="desktop")
register("desktop/form", _ENTRY, "desktop", "type into fields, then click Submit, in a full-screen browser on the "
         "X display", env_name="desktop/form", task_kind="form", max_steps=8, device_kind="desktop")

__all__ = ["DesktopGeneratedEnv"]

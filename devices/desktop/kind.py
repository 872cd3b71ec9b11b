"""The desktop device kind: one monitor of an X11 display (``devices.registry``'s entry)."""

from __future__ import annotations

import shutil
from typing import Any

from dataclasses import replace

from devices.desktop.config import DesktopConfig
from devices.desktop.record_config import DesktopRecordConfig
from devices.desktop.device import DESKTOP_ACTIONS
from devices.registry import DeviceKindSpec, RecordOptions, Requirement, command_version, register_kind
from devices.settle import SettleConfig

DESKTOP_SUMMARY = "The desktop device (mss capture, pyautogui / xdotool input; X11)."


def _build(section: DesktopConfig, settle: SettleConfig, *, url: str = "") -> Any:
    from devices.desktop.device import DesktopDevice

    return DesktopDevice(section, settle)


def _recorder(section: DesktopConfig, settle: SettleConfig, options: RecordOptions) -> Any:
    from devices.desktop.recorder import DesktopRecorder

    record = options.settings or DesktopRecordConfig()
    record = replace(record, pause_keys=options.pause_key or record.pause_keys,
                     stop_keys=options.stop_key or record.stop_keys)
    return DesktopRecorder(section, record)


def _screens(section: DesktopConfig) -> list[str]:
    from devices.desktop.display import list_monitors

    return [f"monitor {m.index}: {m.width}x{m.height} at ({m.left}, {m.top})  (desktop.monitor = {m.index})"
            for m in list_monitors(section.display)]


def _requirements() -> list[Requirement]:
    """xdotool, which typing and keys go through (optional: only ``--device desktop`` needs it)."""
    exe = shutil.which("xdotool")
    version = command_version([exe, "--version"]) if exe else ""
    if not version:
        return [Requirement("xdotool", False, "needed for --device desktop: apt-get install xdotool "
                                              "(scripts/setup.sh)")]
    return [Requirement("xdotool", True, f"{version} ({exe})")]


DESKTOP = register_kind(DeviceKindSpec(
    name="desktop", summary=DESKTOP_SUMMARY, config=DesktopConfig, build=_build, actions=DESKTOP_ACTIONS,
    screens=_screens, requirements=_requirements, recorder=_recorder, record_config=DesktopRecordConfig,
    one_per_process=True, reads_elements=False,
    start_hint="Open the settings"))

"""The Android device kind: a phone over the adb server (``devices.registry``'s entry)."""

from __future__ import annotations

import shutil
from typing import Any

from devices.android.config import AndroidConfig
from devices.android.device import ANDROID_ACTIONS
from devices.android.gestures import AndroidRecordOptions
from devices.registry import DeviceKindSpec, RecordOptions, Requirement, command_version, register_kind
from devices.settle import SettleConfig

ANDROID_SUMMARY = "The Android device: a phone over the adb server (adbutils)."


def _build(section: AndroidConfig, settle: SettleConfig, *, url: str = "") -> Any:
    from devices.android.device import AndroidDevice

    return AndroidDevice(section, settle)


def _recorder(section: AndroidConfig, settle: SettleConfig, options: RecordOptions) -> Any:
    """The phone's recorder (its getevent stream and UI dumps). A phone has no key to spare: the terminal pauses,
    resumes and ends the recording, so pause and stop keys are refused."""
    from devices.android.device import AndroidDevice
    from devices.android.recorder import AndroidRecorder

    if options.pause_key or options.stop_key:
        raise ValueError("a phone is recorded without pause and stop keys (it has none to spare): pause and resume "
                         "with p and Enter in the terminal, end with Enter; leave out --pause-key and --stop-key")
    return AndroidRecorder(AndroidDevice(section, settle), options.settings)


def _screens(section: AndroidConfig) -> list[str]:
    from devices.android.adb import list_devices

    phones = [f"{phone}  (--device android:{phone.serial})" for phone in list_devices(section.adb_host,
                                                                                      section.adb_port)]
    return phones or ["none connected (adb devices is empty)"]


def _requirements() -> list[Requirement]:
    """adbutils and an adb binary (optional: only ``--device android`` needs them)."""
    hint = "needed for --device android: apt-get install adb (or the Android SDK platform-tools)"
    try:
        import adbutils
    except ImportError:
        return [Requirement("adb", False, f"pip install 'handeye[android]'; {hint}")]
    try:
        exe = adbutils.adb_path()
    except Exception:  # adbutils raises its own error types when no adb binary is found
        exe = shutil.which("adb")
    version = command_version([exe, "version"]) if exe else ""
    if not version:
        return [Requirement("adb", False, hint)]
    return [Requirement("adb", True, f"{version.removeprefix('Android Debug Bridge ')} ({exe})")]


ANDROID = register_kind(DeviceKindSpec(
    name="android", summary=ANDROID_SUMMARY, config=AndroidConfig, build=_build, actions=ANDROID_ACTIONS,
    screens=_screens, requirements=_requirements, recorder=_recorder, record_config=AndroidRecordOptions,
    address="SERIAL", address_field="serial",
    address_noun="phone serial", start_hint="Turn on Wi-Fi", screen="phone"))

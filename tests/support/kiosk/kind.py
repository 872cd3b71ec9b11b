"""The kiosk's registry entry: what handeye needs to know about the kind."""

from __future__ import annotations

from typing import Any

from devices.registry import DeviceKindSpec, Requirement, register_kind
from tests.support.kiosk.config import KioskConfig
from tests.support.kiosk.device import KIOSK_ACTIONS


def _build(section: KioskConfig, settle: Any, *, url: str = "") -> Any:
    from tests.support.kiosk.device import KioskDevice

    return KioskDevice(section, settle)


def _screens(section: KioskConfig) -> list[str]:
    return [f"terminal {section.terminal or 'lobby'}: {section.width}x{section.height}"]


def _requirements() -> list[Requirement]:
    return [Requirement("kiosk firmware", True, "v1 (built in)")]


KIOSK = register_kind(DeviceKindSpec(
    name="kiosk", summary="A touch-screen kiosk (a test device kind).", config=KioskConfig, build=_build,
    actions=KIOSK_ACTIONS, screens=_screens, requirements=_requirements, address="TERMINAL",
    address_field="terminal", address_noun="terminal", start_hint="Tap the button"))

"""Devices: the unified action space, observations, and the drivers that act on real screens.

Drivers import their heavy libraries lazily: ``from devices.web import PlaywrightDevice``.
"""

from devices.actions import Action, ActionKind, Point, ScrollDirection
from devices.base import ActionResult, Box, Device, Observation
from devices.errors import (
    DeviceDisconnected,
    DeviceError,
    DeviceTimeout,
    DeviceUnavailable,
    InvalidAction,
    NavigationError,
    UnsupportedAction,
)
from devices.settle import SettleConfig, SettleResult

__all__ = [
    "Action", "ActionKind", "ActionResult", "Box", "Device", "DeviceDisconnected", "DeviceError",
    "DeviceTimeout", "DeviceUnavailable", "InvalidAction", "NavigationError", "Observation", "Point",
    "ScrollDirection", "SettleConfig", "SettleResult", "UnsupportedAction",
]

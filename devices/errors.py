"""Errors raised by devices.

    DeviceError                 base class; every device failure is one of these
    ├── InvalidAction           an Action that breaks the action contract (bad point, missing field)
    ├── UnsupportedAction       a valid Action this device cannot perform
    ├── DeviceUnavailable       the device (browser, phone, display) could not be found or started
    ├── DeviceDisconnected      the device went away mid-episode (browser killed, phone unplugged)
    ├── DeviceTimeout           the device did not answer in time
    ├── NavigationError         a URL could not be opened
    ├── UnknownDeviceKind       a device kind (or ``--device`` form) no entry of ``devices.registry`` registers
    ├── RefusedReport           a report of the web recorder's listener that is not one it sends (refused,
    │                           counted and skipped: never the end of a recording)
    └── UnknownPixelFormat      a raw Android ``screencap`` in a pixel format the driver does not decode (the
                                device falls back to ``screencap -p``)

Messages say what failed, with which values, and what to do next.
"""

from __future__ import annotations


class DeviceError(Exception):
    """Base class for every device failure."""


class InvalidAction(DeviceError, ValueError):
    """An Action breaks the action contract (see docs/actions.md)."""


class UnsupportedAction(DeviceError):
    """A valid Action that this device does not support."""


class DeviceUnavailable(DeviceError):
    """The device could not be found or started."""


class DeviceDisconnected(DeviceError):
    """The device went away while in use."""


class DeviceTimeout(DeviceError, TimeoutError):
    """The device did not answer within its timeout."""


class NavigationError(DeviceError):
    """A URL could not be opened."""


class RefusedReport(DeviceError, ValueError):
    """A report of the web recorder's page listener that is not one the listener sends (a field of the wrong type,
    a number that is not finite, a key with no name): refused, counted and skipped, never the end of a recording."""


class UnknownPixelFormat(DeviceError):
    """A raw ``screencap`` in a pixel format this driver does not decode (``screencap -p`` still works)."""

    def __init__(self, fmt: int) -> None:
        super().__init__(f"screencap uses pixel format {fmt}, which this driver does not decode")


class UnknownDeviceKind(DeviceError, ValueError):
    """A device kind, or a ``--device NAME[:ADDRESS]`` form, that ``devices.registry`` has no entry for."""

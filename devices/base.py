"""Observation, ActionResult and the async Device protocol that every driver implements, and the checks every
driver's ``act`` starts with (``check_act``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol, Self, runtime_checkable

import numpy as np

from devices.actions import TERMINAL_KINDS, Action, ActionKind
from devices.errors import DeviceError, InvalidAction, UnsupportedAction
from devices.keys import PHONE_ONLY_KEYS
from devices.settle import SettleResult


@dataclass(frozen=True, slots=True)
class Box:
    """A normalized frame box (x1, y1, x2, y2), each in [0, 1], x1 <= x2, y1 <= y2."""

    x1: float
    y1: float
    x2: float
    y2: float

    def clipped(self) -> Box:
        c = lambda v: min(1.0, max(0.0, v))  # noqa: E731 - a box partly off screen is shown by its visible part
        return Box(c(self.x1), c(self.y1), c(self.x2), c(self.y2))

    def contains(self, x: float, y: float) -> bool:
        return self.x1 <= x <= self.x2 and self.y1 <= y <= self.y2

    def to_pixels(self, width: int, height: int) -> tuple[int, int, int, int]:
        """The pixel rectangle covering the box: [left, top, right, bottom) in a width x height frame."""
        return (
            int(self.x1 * width),
            int(self.y1 * height),
            min(width, int(np.ceil(self.x2 * width))),
            min(height, int(np.ceil(self.y2 * height))),
        )

    def as_list(self) -> list[float]:
        return [self.x1, self.y1, self.x2, self.y2]

    @property
    def center(self) -> tuple[float, float]:
        return (self.x1 + self.x2) / 2, (self.y1 + self.y2) / 2


@dataclass(frozen=True, slots=True)
class Observation:
    """One screen capture.

    ``frame`` is RGB uint8, H x W x 3. ``encoded`` is the frame exactly as the device delivered it
    (``encoding`` says the format) so a recorder can store it without encoding again; it decodes to
    exactly ``frame`` when the encoding is lossless. ``sensitive_boxes`` are regions (password fields)
    that must be blurred before the frame is stored.
    """

    frame: np.ndarray
    timestamp: float = field(default_factory=time.time)
    meta: dict[str, Any] = field(default_factory=dict)
    encoded: bytes | None = None
    encoding: str | None = None
    sensitive_boxes: tuple[Box, ...] = ()

    def __post_init__(self) -> None:
        f = self.frame
        if not isinstance(f, np.ndarray) or f.dtype != np.uint8 or f.ndim != 3 or f.shape[2] != 3:
            raise ValueError(
                "Observation.frame must be an RGB uint8 array of shape (H, W, 3), got "
                f"{getattr(f, 'dtype', type(f).__name__)} {getattr(f, 'shape', '')}"
            )

    @property
    def width(self) -> int:
        return int(self.frame.shape[1])

    @property
    def height(self) -> int:
        return int(self.frame.shape[0])

    @property
    def size(self) -> tuple[int, int]:
        """(W, H) of the frame in pixels."""
        return self.width, self.height


@dataclass(frozen=True, slots=True)
class ActionResult:
    """What happened when a device performed an action.

    ``target_box`` is the box of the element under the action's point where the device can tell
    (web: the DOM element), normalized to the frame. ``sensitive`` is true when text went into a
    password field, so the recorder masks it.
    """

    action: Action
    ok: bool = True
    detail: str = ""
    target_box: Box | None = None
    target: dict[str, Any] | None = None
    sensitive: bool = False


@dataclass(frozen=True, slots=True)
class ElementInfo:
    """What a device can tell about one element on its screen (for the guard and the recorder)."""

    text: str
    """Its visible text or accessible name; never a password field's value."""
    box: Box | None = None
    """Normalized to the frame."""
    role: str = ""
    """Tag (web) or class (Android)."""
    password: bool = False


@runtime_checkable
class Inspectable(Protocol):
    """A device that can tell which element lies under a point and which one has the keyboard focus (web: the DOM;
    Android: the UI hierarchy, one ``uiautomator dump`` per question). Devices that cannot (the X11 desktop without
    an accessibility tree) do not implement it."""

    async def element_at(self, point: Any) -> ElementInfo | None: ...

    async def focused_element(self) -> ElementInfo | None: ...


@runtime_checkable
class Device(Protocol):
    """An async screen: observe it, act on it, wait for it to settle.

    Life cycle: ``await start()`` (or ``async with``), any number of observe / act / settle calls,
    then ``await close()``. A device that died raises DeviceDisconnected from every call.
    """

    name: str

    @property
    def supported_actions(self) -> frozenset[ActionKind]: ...

    async def start(self) -> None: ...

    async def observe(self) -> Observation: ...

    async def act(self, action: Action) -> ActionResult: ...

    async def settle(self) -> SettleResult: ...

    async def close(self) -> None: ...

    def describe(self) -> dict[str, Any]:
        """Facts about the device for the episode record (kind, size, versions)."""
        ...


def check_act(device: Device, action: Action, *, started: bool, phone_keys: bool = False, lacking: str = "") -> None:
    """Refuse, before anything is done, what ``device.act(action)`` cannot do; every driver's ``act`` starts here.

    ``finish`` and ``infeasible`` are InvalidAction (they end the episode in the runner and never reach a device); a
    kind outside ``device.supported_actions``, or a key only phones have (``devices.keys.PHONE_ONLY_KEYS``) on a
    device without ``phone_keys``, is UnsupportedAction naming what the device supports (``lacking`` says why it
    lacks the others); a device not ``started`` is a DeviceError saying to start it.
    """
    kind, name, supported = action.kind, device.name, device.supported_actions
    if kind not in supported:
        if kind in TERMINAL_KINDS:
            raise InvalidAction(f"{kind.value} ends the episode and is not sent to a device")
        why = f" ({lacking})" if lacking else ""
        raise UnsupportedAction(f"the {name} device cannot {kind.value}{why}; it supports "
                                f"{', '.join(sorted(k.value for k in supported))}")
    if not phone_keys and set(action.keys) & PHONE_ONLY_KEYS:
        raise UnsupportedAction(f"the {name} device has no {'+'.join(action.keys)} key (it is a phone key)")
    if not started:
        raise DeviceError(f"cannot {kind.value}: the {name} device is not started; call `await device.start()` first")


class AsyncContextDevice:
    """``async with Driver(...) as device:`` starts the device and always closes it."""

    async def start(self) -> None:  # pragma: no cover - every driver defines it
        raise NotImplementedError

    async def close(self) -> None:  # pragma: no cover - every driver defines it
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

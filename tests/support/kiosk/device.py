"""A touch-screen kiosk: a grey screen with one button that turns green once tapped; it remembers every tap."""

from __future__ import annotations

from typing import Any

import numpy as np

from devices.actions import Action, ActionKind
from devices.base import ActionResult, Box, Observation, check_act
from devices.errors import DeviceError
from devices.settle import SettleConfig, SettleResult
from tests.support.kiosk.config import KioskConfig

KIOSK_ACTIONS = frozenset({ActionKind.CLICK, ActionKind.WAIT})
BUTTON = Box(0.25, 0.25, 0.75, 0.75)
TERMINALS: dict[str, "KioskDevice"] = {}
"""Every kiosk built, by terminal: what the tests read back."""


class KioskDevice:
    name = "kiosk"

    def __init__(self, config: KioskConfig, settle: SettleConfig | None = None) -> None:
        self.config = config
        self.taps: list[tuple[float, float]] = []
        self.started = self.closed = False
        TERMINALS[config.terminal or "lobby"] = self

    @property
    def supported_actions(self) -> frozenset[ActionKind]:
        return KIOSK_ACTIONS

    async def start(self) -> None:
        self.started = True

    def _frame(self) -> np.ndarray:
        frame = np.full((self.config.height, self.config.width, 3), 128, np.uint8)
        x1, y1 = int(BUTTON.x1 * self.config.width), int(BUTTON.y1 * self.config.height)
        x2, y2 = int(BUTTON.x2 * self.config.width), int(BUTTON.y2 * self.config.height)
        frame[y1:y2, x1:x2] = (0, 200, 0) if self.taps else (200, 0, 0)
        return frame

    async def observe(self) -> Observation:
        if not self.started:
            raise DeviceError("the kiosk is not started")
        return Observation(self._frame(), meta={"kind": self.name})

    async def act(self, action: Action) -> ActionResult:
        check_act(self, action, started=self.started)
        if action.kind is ActionKind.CLICK and action.point is not None:
            self.taps.append((action.point.x * self.config.width, action.point.y * self.config.height))
        return ActionResult(action)

    async def settle(self) -> SettleResult:
        return SettleResult(True, 0.0, 1, 0.0)

    async def close(self) -> None:
        self.closed = True

    def describe(self) -> dict[str, Any]:
        return {"kind": self.name, "terminal": self.config.terminal or "lobby",
                "size": [self.config.width, self.config.height]}

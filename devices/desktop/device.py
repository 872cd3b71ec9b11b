"""The desktop device: one monitor of an X11 display, seen through mss and driven through pyautogui.

The parts: ``geometry`` (how a monitor's frames map to input points), ``display`` (connecting to
X, monitors, grabbing frames, the window under a point), ``keyboard`` (text and keys through
pyautogui, xdotool or the clipboard) and ``config``. This module runs them on the device's own X
thread and performs the pointer actions. docs/devices.md (Desktop) describes it for users.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

from devices.actions import Action, ActionKind, ScrollDirection
from devices.base import ActionResult, AsyncContextDevice, Box, Observation, check_act
from devices.desktop.config import DesktopConfig
from devices.desktop.display import grab_rgb, monitors_of, open_mss, prepare_display, same_display, socket_path, window_at
from devices.desktop.geometry import MonitorGeometry, ScreenMap, screen_map, scroll_clicks
from devices.desktop.keyboard import Keyboard, resolve_typing
from devices.errors import DeviceDisconnected, DeviceError, DeviceTimeout, DeviceUnavailable
from devices.frames import small_gray
from devices.settle import SettleConfig, SettleResult, wait_until_settled

log = logging.getLogger(__name__)
T = TypeVar("T")

DESKTOP_ACTIONS = frozenset(
    {
        ActionKind.CLICK,
        ActionKind.DOUBLE_CLICK,
        ActionKind.RIGHT_CLICK,
        ActionKind.LONG_PRESS,
        ActionKind.HOVER,
        ActionKind.DRAG,
        ActionKind.SCROLL,
        ActionKind.TYPE,
        ActionKind.KEY,
        ActionKind.HOTKEY,
        ActionKind.WAIT,
    }
)


class DesktopDevice(AsyncContextDevice):
    """One monitor of an X11 display. Use as ``async with DesktopDevice(cfg) as dev:``.

    All X calls run on one worker thread of the device's own (mss and python-xlib connections are
    not shared across threads), so the event loop never blocks on the X server. pyautogui binds to
    one display per process when first imported: two devices on different displays in one process
    are refused with DeviceUnavailable.
    """

    name = "desktop"

    def __init__(self, config: DesktopConfig | None = None, settle_config: SettleConfig | None = None) -> None:
        self.config = config or DesktopConfig()
        self.settle_config = settle_config or SettleConfig()
        self.display = ""
        self.map: ScreenMap | None = None
        self.monitors: list[MonitorGeometry] = []
        self.screen_size: tuple[int, int] = (0, 0)
        """pyautogui.size(): the whole X screen in input units."""
        self._executor: ThreadPoolExecutor | None = None
        self._sct: Any = None
        self._pg: Any = None
        self._x: Any = None
        self._keyboard: Keyboard | None = None
        self._last_pointer: tuple[int, int] | None = None
        self._last_frame: np.ndarray | None = None
        self._fresh: np.ndarray | None = None
        self._next_grab = 0.0
        self._disconnected = False

    @property
    def supported_actions(self) -> frozenset[ActionKind]:
        return DESKTOP_ACTIONS

    @property
    def typing(self) -> str:
        """The typing method in use, once started ("auto" resolved); "" before."""
        return self._keyboard.method if self._keyboard is not None else ""

    # -- life cycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._executor is not None:
            raise DeviceError("the desktop device is already started")
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="handeye-desktop")
        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._start)
        except BaseException:
            await self.close()
            raise

    def _start(self) -> None:
        cfg = self.config
        self.display = prepare_display(cfg.display)
        loaded = sys.modules.get("pyautogui._pyautogui_x11")
        if loaded is not None and not same_display(loaded._display.get_display_name(), self.display):
            raise DeviceUnavailable(
                f"pyautogui in this process is bound to display {loaded._display.get_display_name()!r} and cannot "
                f"drive {self.display!r}; run one desktop device per process"
            )
        self._sct = open_mss(self.display)
        self.monitors = monitors_of(self._sct)
        if cfg.monitor > len(self.monitors):
            listing = "; ".join(m.describe() for m in self.monitors) or "none"
            raise DeviceUnavailable(
                f"display {self.display} has no monitor {cfg.monitor}; its monitors are: {listing}. "
                "Set desktop.monitor to one of these indices"
            )
        monitor = self.monitors[cfg.monitor - 1]
        try:
            import pyautogui
        except Exception as e:  # pyautogui connects to the display when imported
            raise DeviceUnavailable(f"pyautogui cannot start on display {self.display}: {e}") from e
        from Xlib import display as xdisplay

        self._pg = pyautogui
        pyautogui.FAILSAFE = cfg.failsafe
        pyautogui.PAUSE = 0  # its default sleeps 0.1 s after every call; settling is our job
        self._x = xdisplay.Display(self.display)
        self.screen_size = tuple(pyautogui.size())  # type: ignore[assignment]
        frame = self._grab()
        self.map = screen_map(monitor, (frame.shape[1], frame.shape[0]), cfg.scale_override)
        right = self.map.input_left + self.map.input_width
        bottom = self.map.input_top + self.map.input_height
        if right > self.screen_size[0] or bottom > self.screen_size[1] or min(self.map.input_left, self.map.input_top) < 0:
            log.warning(
                "monitor %s maps to input %s, outside the %sx%s screen pyautogui reports; check desktop.scale_override",
                monitor.describe(), self.map.describe()["input_rect"], *self.screen_size,
            )
        self._keyboard = Keyboard(pyautogui, self.display, cfg, resolve_typing(cfg.typing))

    async def close(self) -> None:
        executor, self._executor = self._executor, None
        if executor is None:
            return

        def shut() -> None:
            for obj in (self._keyboard, self._sct, self._x):
                if obj is not None:
                    try:
                        obj.close()
                    except Exception as e:  # closing a dead connection is not worth an error
                        log.debug("ignoring %s while closing the display", type(e).__name__)

        try:
            await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(executor, shut), timeout=5)
        except asyncio.TimeoutError:
            log.warning("the X connection did not close within 5 s")
        executor.shutdown(wait=False)
        self._sct = self._x = None
        self._fresh = self._last_frame = None

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "desktop",
            "display": self.display,
            "monitors": [[m.index, m.left, m.top, m.width, m.height] for m in self.monitors],
            "screen_size": list(self.screen_size),
            "typing": self.typing or self.config.typing,
            "failsafe": self.config.failsafe,
        }
        if self.map is not None:
            out.update(self.map.describe())
        return out

    # -- running calls on the X thread ------------------------------------------------------------
    async def _run(self, what: str, fn: Callable[[], T], timeout_s: float | None = None) -> T:
        if self._executor is None:
            raise DeviceError(f"cannot {what}: the desktop device is not started; call `await device.start()` first")
        if self._disconnected:
            raise DeviceDisconnected(f"cannot {what}: X display {self.display} has gone away")
        limit = timeout_s or self.config.action_timeout_s
        future = asyncio.get_running_loop().run_in_executor(self._executor, fn)
        try:
            return await asyncio.wait_for(future, timeout=limit)
        except asyncio.TimeoutError as e:
            raise DeviceTimeout(f"{what} took longer than {limit:g} s; is X display {self.display} hung?") from e
        except DeviceError:
            raise
        except Exception as e:
            if self._is_gone(e):
                self._disconnected = True
                raise DeviceDisconnected(f"cannot {what}: X display {self.display} has gone away ({e})") from e
            raise DeviceError(f"{what} failed on display {self.display}: {type(e).__name__}: {e}") from e

    def _is_gone(self, e: BaseException) -> bool:
        from Xlib import error as xerror

        if isinstance(e, (xerror.ConnectionClosedError, BrokenPipeError, ConnectionError)):
            return True
        return type(e).__name__ == "ScreenShotError" and not os.path.exists(socket_path(self.display))

    # -- observing ----------------------------------------------------------------------------------
    def _grab(self) -> np.ndarray:
        """The monitor as an RGB frame (kept for a settled observe)."""
        frame = grab_rgb(self._sct, self.monitors[self.config.monitor - 1])
        self._last_frame = frame
        return frame

    async def observe(self) -> Observation:
        fresh, self._fresh = self._fresh, None
        if fresh is not None:
            frame, source = fresh, "settle"
        else:
            frame, source = await self._run("grab the screen", self._grab), "capture"
        assert self.map is not None
        meta = {"display": self.display, **self.map.describe(), "frame_source": source}
        return Observation(frame=frame, meta=meta)

    async def grab_small(self) -> np.ndarray:
        """A small gray frame of the monitor (``settle_config.width`` wide) for frame differencing."""
        wait = self._next_grab - time.perf_counter()
        if wait > 0:
            await asyncio.sleep(wait)
        self._next_grab = time.perf_counter() + self.config.settle_grab_interval_s
        frame = await self._run("grab the screen", self._grab)
        return small_gray(frame, self.settle_config.width)

    async def settle(self) -> SettleResult:
        self._fresh = None
        result = await wait_until_settled(self.grab_small, self.settle_config)
        # A screen that stopped changing looks like its last grab: the next observe can use it.
        if result.settled:
            self._fresh = self._last_frame
        return result

    # -- acting -------------------------------------------------------------------------------------
    async def act(self, action: Action) -> ActionResult:
        self._fresh = None
        check_act(self, action, started=self._executor is not None,
                  lacking="no app launcher, URL handler or back/home button on a bare X display")
        kind = action.kind
        if kind is ActionKind.WAIT:
            await asyncio.sleep(action.duration_s or 0.0)
            return ActionResult(action=action)
        if kind is ActionKind.TYPE and self._keyboard is not None:
            self._keyboard.check_typable(action.text or "")
        timeout = self.config.action_timeout_s
        if kind is ActionKind.TYPE:
            timeout += len(action.text or "") * (self.config.type_delay_ms / 1000 + 0.02)
        if kind is ActionKind.LONG_PRESS:
            timeout += action.duration_s or 0.0
        return await self._run(kind.value.replace("_", " "), lambda: self._act(action), timeout)

    def _point(self, action: Action, which: str = "point") -> tuple[int, int]:
        assert self.map is not None
        p = getattr(action, which)
        return self.map.to_input_px(p.x, p.y)

    def _act(self, action: Action) -> ActionResult:
        pg = self._pg
        self._failsafe_check()
        # Our own moves may pass through or end in a corner (a click at x = 0); pyautogui would then
        # refuse the next call of this action, so its check is ours (``_failsafe_check``).
        pg.FAILSAFE = False
        try:
            result = self._perform(action)
        finally:
            pg.FAILSAFE = self.config.failsafe
            self._last_pointer = tuple(pg.position())  # type: ignore[assignment]
        return result

    def _failsafe_check(self) -> None:
        """pyautogui's fail-safe, minus false alarms: the pointer in a screen corner stops the device,
        unless it is exactly where the device's own last action left it (nobody moved it since)."""
        pg = self._pg
        if not self.config.failsafe:
            return
        here = tuple(pg.position())
        if here in [tuple(p) for p in pg.FAILSAFE_POINTS] and here != self._last_pointer:
            raise DeviceError(
                f"pyautogui's fail-safe fired: the mouse is in the corner {here} of display {self.display} "
                "(a person moved it there to stop the device). Move it away to continue, or set "
                "desktop.failsafe = false on a display nobody uses"
            )

    def _perform(self, action: Action) -> ActionResult:
        pg, cfg, kind, keyboard = self._pg, self.config, action.kind, self._keyboard
        assert keyboard is not None
        detail = ""
        xy = self._point(action) if action.point is not None else None
        if xy is not None:
            pg.moveTo(*xy, duration=cfg.move_duration_s)
        if kind is ActionKind.CLICK:
            pg.click(*xy)
        elif kind is ActionKind.DOUBLE_CLICK:
            pg.doubleClick(*xy)
        elif kind is ActionKind.RIGHT_CLICK:
            pg.rightClick(*xy)
        elif kind is ActionKind.LONG_PRESS:
            pg.mouseDown(*xy)
            try:
                time.sleep(action.duration_s or 0.0)
            finally:
                pg.mouseUp(*xy)
        elif kind is ActionKind.DRAG:
            end = self._point(action, "end")
            pg.mouseDown(*xy)
            try:
                pg.moveTo(*end, duration=cfg.drag_duration_s)
            finally:
                pg.mouseUp(*end)
        elif kind is ActionKind.SCROLL:
            assert self.map is not None
            if xy is None:
                xy = self.map.to_input_px(0.5, 0.5)
                pg.moveTo(*xy)
            vertical = action.direction in (ScrollDirection.UP, ScrollDirection.DOWN)
            size = self.map.input_height if vertical else self.map.input_width
            clicks = scroll_clicks(action.amount or 0.5, size, cfg.scroll_click_px)
            # X11 wheel buttons: 4 up, 5 down, 6 left, 7 right; pyautogui's sign: positive = up / right
            sign = 1 if action.direction in (ScrollDirection.UP, ScrollDirection.RIGHT) else -1
            (pg.vscroll if vertical else pg.hscroll)(sign * clicks, *xy)
            detail = f"{clicks} wheel clicks"
        elif kind is ActionKind.TYPE:
            if xy is not None:
                pg.click(*xy)
            keyboard.type_text(action.text or "")
            detail = f"typed with {self.typing}"
        elif kind is ActionKind.KEY:
            keyboard.press(action.keys, hotkey=False)
        elif kind is ActionKind.HOTKEY:
            keyboard.press(action.keys, hotkey=True)
        target, box = self._under(xy) if xy is not None else (None, None)
        return ActionResult(action=action, detail=detail, target=target, target_box=box)

    def _under(self, xy: tuple[int, int]) -> tuple[dict[str, Any] | None, Box | None]:
        """The top-level window under an input point and its box in the frame."""
        assert self.map is not None
        return window_at(self._x, self.map, xy)

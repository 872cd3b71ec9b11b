"""The desktop device: one monitor of an X11 display, seen through mss and driven through pyautogui.

Coordinate contract (DESIGN.md, "Coordinates"): the frame is one monitor grabbed by mss. Per
monitor, scale = frame pixels / logical input size, and a normalized point (x, y) maps to the input
point X = input_left + x * input_width, Y = input_top + y * input_height (``ScreenMap.to_input``).
pyautogui and XTest take integers, so the device sends ``ScreenMap.to_input_px``: input_left +
min(floor(x * input_width), input_width - 1), the same for y. On X11 the input space *is* the X
screen, so logical == physical and the scale is 1, unless ``scale_override`` declares a uniformly
scaled desktop (input = physical / scale). Xvfb shows one monitor at scale 1; multi-monitor layouts,
negative offsets and scales 1.25 / 1.5 / 2 are covered only by tests with injected geometry.

Frames come from ``mss`` (XShmGetImage) as BGRA and become RGB in one ``cv2.cvtColor`` over a
zero-copy view of mss's buffer (bench/capture.py on Xvfb: grab + convert 0.3-0.8 ms at 1280x800 and
~0.8 ms at 1920x1080, against 3.5 / 7.4 ms for numpy channel slicing with a copy and 52 / 102 ms for
``pyautogui.screenshot``, which goes through scrot and a PNG file). Observations carry no encoded
bytes: the recorder encodes the frame.

Text is typed by ``xdotool type`` (any Unicode, Chinese included: xdotool maps each character to a
spare keycode), by pasting through the clipboard (``xclip``, then Ctrl+V), or by pyautogui key
presses (ASCII only). The X-specific set-up pitfalls are handled in ``prepare_display``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import cv2
import numpy as np

from devices.actions import Action, ActionKind, ScrollDirection
from devices.base import ActionResult, AsyncContextDevice, Box, Observation
from devices.errors import (
    DeviceDisconnected,
    DeviceError,
    DeviceTimeout,
    DeviceUnavailable,
    InvalidAction,
    UnsupportedAction,
)
from devices.frames import small_gray
from devices.keys import PHONE_ONLY_KEYS
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
TYPING_METHODS = ("auto", "xdotool", "clipboard", "keys")

#: canonical key names (devices/keys.py) -> pyautogui's names; single characters pass through
PYAUTOGUI_KEYS = {
    "Enter": "enter", "Tab": "tab", "Escape": "esc", "Backspace": "backspace", "Delete": "delete",
    "Insert": "insert", "Home": "home", "End": "end", "PageUp": "pageup", "PageDown": "pagedown",
    "ArrowUp": "up", "ArrowDown": "down", "ArrowLeft": "left", "ArrowRight": "right", "Space": "space",
    "Control": "ctrl", "Shift": "shift", "Alt": "alt", "Meta": "win", "CapsLock": "capslock",
    **{f"F{i}": f"f{i}" for i in range(1, 13)},
}
#: canonical key names -> X keysym names, as ``xdotool key`` takes them
XDOTOOL_KEYS = {
    "Enter": "Return", "Tab": "Tab", "Escape": "Escape", "Backspace": "BackSpace", "Delete": "Delete",
    "Insert": "Insert", "Home": "Home", "End": "End", "PageUp": "Prior", "PageDown": "Next",
    "ArrowUp": "Up", "ArrowDown": "Down", "ArrowLeft": "Left", "ArrowRight": "Right", "Space": "space",
    "Control": "ctrl", "Shift": "shift", "Alt": "alt", "Meta": "super", "CapsLock": "Caps_Lock",
    **{f"F{i}": f"F{i}" for i in range(1, 13)},
}


def pyautogui_key(name: str) -> str:
    """pyautogui's name for a canonical key name ("Control" -> "ctrl", "a" -> "a")."""
    return PYAUTOGUI_KEYS.get(name, name)


def xdotool_key(name: str) -> str:
    """``xdotool key``'s name for a canonical key name ("PageDown" -> "Next", "é" -> "U00E9")."""
    if name in XDOTOOL_KEYS:
        return XDOTOOL_KEYS[name]
    if len(name) == 1 and (name.isascii() and name.isalnum()):
        return name
    return f"U{ord(name):04X}"  # xdotool looks keysyms up by name; Unnnn names any Unicode character


# -- geometry ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MonitorGeometry:
    """A monitor's rectangle as mss reports it: physical pixels in the virtual screen (X11, Windows)."""

    index: int
    """mss monitor index: 1 is the first monitor (0, all monitors together, is not a device)."""
    left: int
    top: int
    width: int
    height: int

    def describe(self) -> str:
        return f"monitor {self.index}: {self.width}x{self.height} at ({self.left}, {self.top})"


@dataclass(frozen=True, slots=True)
class ScreenMap:
    """How frames of one monitor map to input coordinates (the space pyautogui / XTest move in).

    Built by ``screen_map``; pure, so layouts that Xvfb cannot show (several monitors side by side or
    stacked, negative offsets, HiDPI scales) are tested with injected geometry.
    """

    monitor: MonitorGeometry
    frame_width: int
    """Width of the frames this monitor yields, in pixels."""
    frame_height: int
    input_left: int
    """The monitor's left edge in input (logical) coordinates."""
    input_top: int
    input_width: int
    """The monitor's width in input (logical) units."""
    input_height: int

    @property
    def scale(self) -> tuple[float, float]:
        """Frame pixels per logical input unit, (x, y): 1 on plain X11, 2 on a 2x HiDPI desktop."""
        return self.frame_width / self.input_width, self.frame_height / self.input_height

    def to_input(self, x: float, y: float) -> tuple[float, float]:
        """The continuous input point of a normalized frame point (for input APIs that take floats)."""
        return self.input_left + x * self.input_width, self.input_top + y * self.input_height

    def to_input_px(self, x: float, y: float) -> tuple[int, int]:
        """The integer input point of a normalized frame point: left + min(floor(x * width), width - 1).

        The offset is added after flooring so that a point on the monitor never lands on its
        neighbour, and x = 1 (the right edge of the last pixel) is the last input column.
        """
        return (
            self.input_left + min(math.floor(x * self.input_width), self.input_width - 1),
            self.input_top + min(math.floor(y * self.input_height), self.input_height - 1),
        )

    def to_frame(self, X: float, Y: float) -> tuple[float, float]:
        """The normalized frame point of an input point (may fall outside [0, 1] off the monitor)."""
        return (X - self.input_left) / self.input_width, (Y - self.input_top) / self.input_height

    def describe(self) -> dict[str, Any]:
        return {
            "monitor": [self.monitor.left, self.monitor.top, self.monitor.width, self.monitor.height],
            "monitor_index": self.monitor.index,
            "frame_size": [self.frame_width, self.frame_height],
            "input_rect": [self.input_left, self.input_top, self.input_width, self.input_height],
            "scale": list(self.scale),
        }


def screen_map(
    monitor: MonitorGeometry, frame_size: tuple[int, int] | None = None, scale_override: float = 0.0
) -> ScreenMap:
    """The frame-to-input mapping of ``monitor``.

    - ``scale_override`` s > 0: the desktop is scaled uniformly by s (a HiDPI desktop whose input
      API works in logical units): every coordinate of the physical rectangle is divided by s and
      rounded, e.g. a 2560x1600 panel at s = 1.25 takes input in 2048x1280.
    - otherwise the input rectangle is mss's rectangle, and the scale is measured as frame size /
      that size: 1 on X11 (input is the X screen); 2 where a grab returns twice the pixels of the
      monitor's rectangle (a Retina display, whose rectangles are in points).

    ``frame_size`` defaults to the monitor's own size (what mss grabs on X11).
    """
    fw, fh = frame_size or (monitor.width, monitor.height)
    if fw <= 0 or fh <= 0 or monitor.width <= 0 or monitor.height <= 0:
        raise ValueError(f"empty monitor or frame: {monitor.describe()}, frame {fw}x{fh}")
    if scale_override > 0:
        s = scale_override
        left, top = round(monitor.left / s), round(monitor.top / s)
        width, height = max(1, round(monitor.width / s)), max(1, round(monitor.height / s))
    else:
        left, top, width, height = monitor.left, monitor.top, monitor.width, monitor.height
    return ScreenMap(monitor, fw, fh, left, top, width, height)


# -- configuration --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DesktopConfig:
    display: str = ""
    """X display to drive, e.g. ":99"; empty = $DISPLAY."""
    monitor: int = 1
    """mss monitor index: 1 = the first (primary) monitor, 2 = the next; 0 (all monitors) is not allowed."""
    failsafe: bool = True
    """Keep pyautogui's fail-safe: a person moving the mouse into a screen corner stops the device."""
    typing: str = "auto"
    """How text is typed: "xdotool", "clipboard" (xclip + Ctrl+V), "keys" (ASCII key presses), or
    "auto" = xdotool when installed, else the clipboard, else keys."""
    type_delay_ms: int = 12
    """Milliseconds between characters typed by xdotool (its own default; lower drops characters)."""
    paste_keys: tuple[str, ...] = ("Control", "v")
    """Hotkey that pastes when typing goes through the clipboard (terminals want Control+Shift+v)."""
    move_duration_s: float = 0.0
    """Seconds each pointer move takes (0 = jump; pyautogui treats anything under 0.1 as a jump)."""
    drag_duration_s: float = 0.25
    """Seconds the pointer takes from a drag's start to its end, with the button held."""
    scroll_click_px: float = 120.0
    """Logical pixels one wheel click is taken to scroll: clicks = round(amount * monitor height / this),
    at least 1. Applications differ (GTK and Chromium scroll roughly 50-120 px, a Tk list 5 lines)."""
    scale_override: float = 0.0
    """Frame pixels per input unit for a uniformly scaled (HiDPI) desktop; 0 = measured (1 on X11)."""
    settle_grab_interval_s: float = 0.04
    """Least seconds between two settle grabs. A grab takes about a millisecond, so back-to-back grabs
    would call a screen still after 2 ms; apps redraw at 60 Hz or slower and animate in steps of up to
    ~50 ms, so with settle.stable_frames = 2 the screen must stay still for at least 80 ms."""
    action_timeout_s: float = 30.0
    """Seconds one action (typing excluded: it gets this plus its own time) may take before DeviceTimeout."""

    def __post_init__(self) -> None:
        if isinstance(self.monitor, bool) or not isinstance(self.monitor, int) or self.monitor < 1:
            raise ValueError(
                f"desktop.monitor={self.monitor!r} must be an mss monitor index >= 1 (1 = primary); "
                "0 means all monitors together, which cannot be one device"
            )
        if self.typing not in TYPING_METHODS:
            raise ValueError(f"desktop.typing={self.typing!r} must be one of {', '.join(TYPING_METHODS)}")
        if self.scale_override < 0 or (self.scale_override and not 0.5 <= self.scale_override <= 4):
            raise ValueError(f"desktop.scale_override={self.scale_override} must be 0 (measured) or in 0.5..4")
        if self.move_duration_s < 0 or self.drag_duration_s < 0 or self.type_delay_ms < 0:
            raise ValueError("desktop durations and delays must be >= 0")
        if self.settle_grab_interval_s < 0:
            raise ValueError("desktop.settle_grab_interval_s must be >= 0")
        if self.scroll_click_px <= 0 or self.action_timeout_s <= 0:
            raise ValueError("desktop.scroll_click_px and desktop.action_timeout_s must be positive")
        if not self.paste_keys:
            raise ValueError("desktop.paste_keys must name at least one key")


def scroll_clicks(amount: float, input_height: int, click_px: float) -> int:
    """Wheel clicks for a scroll of ``amount`` screens: round(amount * height / click_px), at least 1."""
    return max(1, round(amount * input_height / click_px))


# -- the display ----------------------------------------------------------------------------------


def prepare_display(display: str = "") -> str:
    """Make this process ready to talk to ``display`` (default $DISPLAY) and return its name.

    Raises DeviceUnavailable naming the display when there is none or it does not answer. Sets, for
    this process only: DISPLAY (pyautogui reads it when imported); XAUTHORITY to an empty file when
    it is unset and ~/.Xauthority is missing (python-xlib raises XauthError otherwise); and
    XDG_SESSION_TYPE=x11 (pyscreeze refuses to screenshot under any other value).
    """
    name = display or os.environ.get("DISPLAY", "")
    if not name:
        wayland = os.environ.get("WAYLAND_DISPLAY")
        hint = (
            f" This is a Wayland session ({wayland}): log into an X11 session, or drive XWayland by setting "
            "desktop.display (usually :0)."
            if wayland
            else ""
        )
        raise DeviceUnavailable(
            "no X display: DISPLAY is not set and desktop.display is empty. Run under Xvfb "
            "(`Xvfb :99 -screen 0 1280x800x24 -nolisten tcp &` then DISPLAY=:99, or `xvfb-run agent ...`) "
            "or set desktop.display." + hint
        )
    if not os.environ.get("XAUTHORITY") and not os.path.exists(os.path.expanduser("~/.Xauthority")):
        fd, path = tempfile.mkstemp(prefix="handeye-xauth-")
        os.close(fd)
        os.environ["XAUTHORITY"] = path
    if os.environ.get("XDG_SESSION_TYPE") != "x11":
        os.environ["XDG_SESSION_TYPE"] = "x11"
    try:
        from Xlib import display as xdisplay
    except ImportError as e:  # pragma: no cover - depends on the install
        raise DeviceUnavailable("python-xlib is not installed; run `make setup` or `pip install 'handeye[desktop]'`") from e
    try:
        conn = xdisplay.Display(name)
    except Exception as e:  # Xlib raises DisplayError, XauthError or OSError variants: all mean "no display"
        raise DeviceUnavailable(
            f"cannot connect to X display {name!r} ({type(e).__name__}: {e}). Is the X server running? Start "
            f"Xvfb (`Xvfb {name} -screen 0 1280x800x24 -nolisten tcp &`) or point desktop.display / DISPLAY at "
            "a running one; on Wayland use an X11 session or XWayland."
        ) from e
    conn.close()
    os.environ["DISPLAY"] = name
    return name


def _monitors(sct: Any) -> list[MonitorGeometry]:
    return [
        MonitorGeometry(i, int(m["left"]), int(m["top"]), int(m["width"]), int(m["height"]))
        for i, m in enumerate(sct.monitors)
        if i > 0
    ]


def _open_mss(display: str) -> Any:
    try:
        import mss
    except ImportError as e:  # pragma: no cover - depends on the install
        raise DeviceUnavailable("mss is not installed; run `make setup` or `pip install 'handeye[desktop]'`") from e
    try:
        return mss.MSS(display=display)
    except Exception as e:  # mss raises ScreenShotError for any X failure
        raise DeviceUnavailable(f"mss cannot open X display {display!r}: {e}") from e


def list_monitors(display: str = "") -> list[MonitorGeometry]:
    """The monitors of ``display`` (default $DISPLAY), index 1 first, for ``agent devices``."""
    name = prepare_display(display)
    with _open_mss(name) as sct:
        return _monitors(sct)


def _same_display(a: str, b: str) -> bool:
    """Whether two display names denote the same display (":1" is ":1.0")."""
    norm = lambda s: s if "." in s.rsplit(":", 1)[-1] else s + ".0"  # noqa: E731
    return norm(a) == norm(b)


# -- the device -----------------------------------------------------------------------------------


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
        self.typing = ""
        """The typing method in use, once started ("auto" resolved)."""
        self.map: ScreenMap | None = None
        self.monitors: list[MonitorGeometry] = []
        self.screen_size: tuple[int, int] = (0, 0)
        """pyautogui.size(): the whole X screen in input units."""
        self._executor: ThreadPoolExecutor | None = None
        self._sct: Any = None
        self._pg: Any = None
        self._x: Any = None
        self._last_pointer: tuple[int, int] | None = None
        self._last_frame: np.ndarray | None = None
        self._fresh: np.ndarray | None = None
        self._next_grab = 0.0
        self._disconnected = False

    @property
    def supported_actions(self) -> frozenset[ActionKind]:
        return DESKTOP_ACTIONS

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
        if loaded is not None and not _same_display(loaded._display.get_display_name(), self.display):
            raise DeviceUnavailable(
                f"pyautogui in this process is bound to display {loaded._display.get_display_name()!r} and cannot "
                f"drive {self.display!r}; run one desktop device per process"
            )
        self._sct = _open_mss(self.display)
        self.monitors = _monitors(self._sct)
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
        self.typing = self._resolve_typing()

    def _resolve_typing(self) -> str:
        method = self.config.typing
        if method == "auto":
            if shutil.which("xdotool"):
                return "xdotool"
            if shutil.which("xclip"):
                return "clipboard"
            log.warning("neither xdotool nor xclip is installed: only ASCII text can be typed")
            return "keys"
        tool = {"xdotool": "xdotool", "clipboard": "xclip"}.get(method)
        if tool and not shutil.which(tool):
            raise DeviceUnavailable(
                f"desktop.typing={method!r} needs {tool}, which is not installed; "
                f"`apt-get install {tool}` or choose another desktop.typing"
            )
        return method

    async def close(self) -> None:
        executor, self._executor = self._executor, None
        if executor is None:
            return

        def shut() -> None:
            for obj in (self._sct, self._x):
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
        return type(e).__name__ == "ScreenShotError" and not os.path.exists(_socket_path(self.display))

    # -- observing ----------------------------------------------------------------------------------
    def _grab(self) -> np.ndarray:
        """The monitor as an RGB frame: one cvtColor over a zero-copy view of mss's BGRA buffer."""
        mon = self.monitors[self.config.monitor - 1]
        shot = self._sct.grab({"left": mon.left, "top": mon.top, "width": mon.width, "height": mon.height})
        bgra = np.frombuffer(shot.raw, np.uint8).reshape(shot.height, shot.width, 4)
        frame = cv2.cvtColor(bgra, cv2.COLOR_BGRA2RGB)
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
        kind = action.kind
        if kind not in DESKTOP_ACTIONS:
            if kind in (ActionKind.FINISH, ActionKind.INFEASIBLE):
                raise InvalidAction(f"{kind.value} ends the episode and is not sent to a device")
            raise UnsupportedAction(
                f"the desktop device cannot {kind.value} (no app launcher, URL handler or back/home button on a "
                f"bare X display); it supports {', '.join(sorted(k.value for k in DESKTOP_ACTIONS))}"
            )
        if kind is ActionKind.WAIT:
            await asyncio.sleep(action.duration_s or 0.0)
            return ActionResult(action=action)
        if kind is ActionKind.TYPE:
            self._check_typable(action.text or "")
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
        pg, cfg, kind = self._pg, self.config, action.kind
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
            self._type(action.text or "")
            detail = f"typed with {self.typing}"
        elif kind is ActionKind.KEY:
            self._keys(action.keys, hotkey=False)
        elif kind is ActionKind.HOTKEY:
            self._keys(action.keys, hotkey=True)
        target, box = self._window_at(xy) if xy is not None else (None, None)
        return ActionResult(action=action, detail=detail, target=target, target_box=box)

    # -- text and keys -----------------------------------------------------------------------------
    def _check_typable(self, text: str) -> None:
        if self.typing != "keys":
            return
        from pyautogui import _pyautogui_x11 as x11

        bad = sorted({c for c in text if not x11.keyboardMapping.get(c)})
        if bad:
            raise DeviceError(
                f"the desktop device types with pyautogui key presses (desktop.typing={self.config.typing!r}), which "
                f"cannot type {''.join(bad)!r} on display {self.display}; install xdotool (any Unicode) or xclip "
                "(clipboard paste) and set desktop.typing to 'auto', 'xdotool' or 'clipboard'"
            )

    def _type(self, text: str) -> None:
        env = {**os.environ, "DISPLAY": self.display}
        limit = self.config.action_timeout_s + len(text) * (self.config.type_delay_ms / 1000 + 0.02)
        if self.typing == "xdotool":
            cmd = ["xdotool", "type", "--clearmodifiers", "--delay", str(self.config.type_delay_ms), "--", text]
            proc = subprocess.run(cmd, env=env, capture_output=True, timeout=limit)
            if proc.returncode != 0:
                raise DeviceError(
                    f"xdotool could not type on {self.display}: {proc.stderr.decode(errors='replace').strip()}; "
                    "try desktop.typing = 'clipboard'"
                )
        elif self.typing == "clipboard":
            # xclip forks a child that serves the selection until another client takes it; that child
            # inherits stdout/stderr, so they must not be pipes we wait on.
            proc = subprocess.run(
                ["xclip", "-selection", "clipboard", "-in"],
                input=text.encode(), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10,
            )
            if proc.returncode != 0:
                raise DeviceError(
                    f"xclip could not set the clipboard on {self.display} (exit {proc.returncode}); "
                    "try desktop.typing = 'xdotool'"
                )
            self._keys(self.config.paste_keys, hotkey=True)
        else:
            self._pg.write(text)

    def _keys(self, keys: tuple[str, ...], hotkey: bool) -> None:
        if set(keys) & PHONE_ONLY_KEYS:
            raise UnsupportedAction(f"the desktop device has no {'+'.join(keys)} key (it is a phone key)")
        from pyautogui import _pyautogui_x11 as x11

        names = [pyautogui_key(k) for k in keys]
        if all(x11.keyboardMapping.get(n) for n in names):
            if hotkey:
                self._pg.hotkey(*names)
            else:
                self._pg.press(names[0])
            return
        # pyautogui silently ignores keys it has no keycode for (any non-ASCII character): xdotool
        # maps a spare keycode to the keysym instead.
        if not shutil.which("xdotool"):
            missing = [k for k, n in zip(keys, names) if not x11.keyboardMapping.get(n)]
            raise DeviceError(
                f"pyautogui has no key for {missing} on display {self.display}; install xdotool to press it"
            )
        combo = "+".join(xdotool_key(k) for k in keys)
        env = {**os.environ, "DISPLAY": self.display}
        proc = subprocess.run(["xdotool", "key", "--clearmodifiers", combo], env=env, capture_output=True, timeout=10)
        if proc.returncode != 0:
            raise DeviceError(f"xdotool could not press {combo}: {proc.stderr.decode(errors='replace').strip()}")

    # -- what is under the pointer ----------------------------------------------------------------
    def _window_at(self, xy: tuple[int, int]) -> tuple[dict[str, Any] | None, Box | None]:
        """The top-level window under the input point: its X id, name and class, and its box in the frame."""
        from Xlib import X
        from Xlib import error as xerror

        root = self._x.screen().root
        try:
            child = root.translate_coords(root, *xy).child
            if not child or child == X.NONE:
                return None, None
            name = child.get_wm_name()
            if not name:
                prop = child.get_full_property(self._x.intern_atom("_NET_WM_NAME"), X.AnyPropertyType)
                name = prop.value.decode(errors="replace") if prop is not None else None
            wm_class = child.get_wm_class()
            geo = child.get_geometry()
            origin = child.translate_coords(root, 0, 0)
        except xerror.XError:
            return None, None  # the window went away in between: not worth failing the action for
        assert self.map is not None
        x1, y1 = self.map.to_frame(-origin.x, -origin.y)
        x2, y2 = self.map.to_frame(-origin.x + geo.width, -origin.y + geo.height)
        target = {
            "window": hex(child.id),
            "name": name.decode(errors="replace") if isinstance(name, bytes) else name,
            "class": list(wm_class) if wm_class else None,
        }
        return target, Box(x1, y1, x2, y2).clipped()


def _socket_path(display: str) -> str:
    number = display.rsplit(":", 1)[-1].split(".")[0]
    return f"/tmp/.X11-unix/X{number}"

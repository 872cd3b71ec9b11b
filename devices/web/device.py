"""The web device: one Chromium page driven through Playwright.

Coordinate contract (docs/actions.md): the frame shows the browser's visual viewport; an action
point (x, y) maps to the CSS point X = vv.offsetLeft + x * vv.width, Y = vv.offsetTop + y * vv.height
of the layout viewport (the space of ``clientX`` and ``elementFromPoint``), where vv is
``window.visualViewport`` as of the last observation. Device pixel ratio, scrolling and CSS zoom
therefore change nothing, and pinch zoom is followed through the visual viewport's offset and size.
Input events (``Input.dispatchMouseEvent``, which Playwright's mouse uses) take CSS pixels relative
to the *visual* viewport, so the mouse gets (x * vv.width, y * vv.height): the browser adds the
offset itself. Playwright takes floats, so the point is passed unrounded.

Frames come from the DevTools protocol (``Page.captureScreenshot``, PNG with ``optimizeForSpeed``):
lossless, about as fast as JPEG in Chromium (the time goes into producing the frame, not encoding
it; see docs/benchmarks.md), and the PNG bytes are stored as they are, so the recorded frame is the
exact frame the policy saw.

The capture goes through a CDP session of our own, and Chromium renders a session's screenshot with
*that session's* device-metrics emulation: a session without one captures CSS-sized frames, and a
clipped capture restores the session's own (empty) emulation afterwards, which silently drops the
device pixel ratio and viewport that Playwright set on its session. So the device mirrors
Playwright's metrics on its session (``_sync_emulation``) before capturing.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
from typing import Any

import numpy as np

from devices.actions import Action, ActionKind, Point, ScrollDirection
from devices.base import ActionResult, AsyncContextDevice, Box, ElementInfo, Observation, check_act
from devices.errors import (
    DeviceDisconnected,
    DeviceError,
    DeviceTimeout,
    DeviceUnavailable,
    NavigationError,
)
from devices.frames import decode, small_gray
from devices.settle import SettleConfig, SettleResult, wait_until_settled
from devices.web.browser import find_browser, has_cjk_font
from devices.web.config import WebConfig, check_url
from devices.web.processes import CLOSE_STEP_S, BrowserProcesses, drivers, find_processes
from devices.web.scripts import (ELEMENT_JS, FOCUS_IS_PASSWORD_JS, FOCUSED_JS, MASK_FOCUSED_JS, TWO_FRAMES_JS,
                                  VIEW_JS)

log = logging.getLogger(__name__)


WEB_ACTIONS = frozenset(
    {
        ActionKind.CLICK,
        ActionKind.DOUBLE_CLICK,
        ActionKind.RIGHT_CLICK,
        ActionKind.HOVER,
        ActionKind.DRAG,
        ActionKind.SCROLL,
        ActionKind.TYPE,
        ActionKind.KEY,
        ActionKind.HOTKEY,
        ActionKind.OPEN_URL,
        ActionKind.BACK,
        ActionKind.WAIT,
    }
)

#: lower-case pieces of Playwright messages that mean the page or browser is gone for good
_GONE_MARKERS = (
    "target page, context or browser has been closed",
    "browser has been closed",
    "target closed",
    "target crashed",
    "page crashed",
    "browser closed",
    "connection closed",
)
#: lower-case pieces of Playwright messages that mean a navigation replaced the document mid-call
_NAVIGATION_RACE_MARKERS = (
    "execution context was destroyed",
    "cannot find context with specified id",
    "frame was detached",
)
_NAVIGATION_RETRIES = 5
_CAPTURE_RETRIES = 6
_CAPTURE_TRY_S = 5.0
#: lower-case pieces of CDP messages that mean the session lost its document to a navigation
_DETACHED_MARKERS = ("not attached to an active page", "session closed", "target closed", "no target with given id",
                     "unable to capture screenshot", "cannot find context")
#: how far inside the viewport's far edge a point at x or y = 1 is sent (input) or looked up (DOM)
_INPUT_EDGE_PX = 1 / 32
_LOOKUP_EDGE_PX = 0.5 + 1 / 64

class PlaywrightDevice(AsyncContextDevice):
    """A Chromium page. Use as ``async with PlaywrightDevice(cfg, url=...) as dev:``."""

    name = "web"
    close_step_s = CLOSE_STEP_S
    """Seconds the browser's close, then the driver's stop, may each take (``close``)."""

    def __init__(
        self,
        config: WebConfig | None = None,
        settle_config: SettleConfig | None = None,
        url: str | None = None,
    ) -> None:
        self.config = config or WebConfig()
        self.settle_config = settle_config or SettleConfig()
        self.start_url = check_url(url) if url else None
        self._pw: Any = None
        self._browser: Any = None
        self._context: Any = None
        self._page: Any = None
        self._cdp: Any = None
        self._view: dict[str, Any] | None = None
        self._last_grab: tuple[bytes, np.ndarray] | None = None
        self._fresh: tuple[bytes, np.ndarray] | None = None
        """The last settle capture, valid until anything may change the page (act, goto, evaluate)."""
        self._emulated: tuple[int, int, float] | None = None
        self._disconnected = False
        self._processes: BrowserProcesses | None = None
        self._executable = ""
        self.browser_version = ""

    # -- life cycle -----------------------------------------------------------------------------
    @property
    def supported_actions(self) -> frozenset[ActionKind]:
        return WEB_ACTIONS

    @property
    def page(self) -> Any:
        """The Playwright page, for environments that read page state to check a task."""
        if self._page is None:
            raise DeviceError("the web device is not started; call `await device.start()` first")
        return self._page

    @property
    def context(self) -> Any:
        """The Playwright browser context (every page and frame of this device), for the recorder's listeners."""
        if self._context is None:
            raise DeviceError("the web device is not started; call `await device.start()` first")
        return self._context

    @property
    def processes(self) -> BrowserProcesses | None:
        """The browser's process group and Playwright's driver, as seen at start; None before the start, after the
        close, or when the browser did not tell its pid (``devices.web.processes``)."""
        return self._processes

    @property
    def cdp_session(self) -> Any:
        """The DevTools session the device captures frames through (for benchmarks that compare capture methods);
        a new one after the device re-attached to the page."""
        if self._cdp is None:
            raise DeviceError("the web device is not started; call `await device.start()` first")
        return self._cdp

    def forget_frame(self) -> None:
        """Drop the settled frame kept for the next ``observe``, which then captures anew: for callers that
        changed the page behind the device's back (a benchmark driving the page itself)."""
        self._fresh = None

    async def start(self) -> None:
        if self._page is not None:
            raise DeviceError("the web device is already started")
        try:
            from playwright.async_api import async_playwright
        except ImportError as e:  # pragma: no cover - depends on the install
            raise DeviceUnavailable(
                "Playwright is not installed; run `make setup` or `pip install 'handeye[web]'`"
            ) from e
        cfg = self.config
        if not cfg.headless and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
            # Chromium would start and die at once, and Playwright say only that the browser was closed.
            raise DeviceUnavailable("--headed needs a display (web.headless = false): set DISPLAY or run under "
                                    "xvfb-run (xvfb-run -a agent run ... --headed)")
        self._disconnected = False  # a device closed after its browser went away may start again
        before = drivers()
        self._pw = await async_playwright().start()
        self._processes = BrowserProcesses.new_driver(before)  # killed if the start is cancelled before the launch
        try:
            self._executable = find_browser(cfg.browser_path, _playwright_browser(self._pw))
            args = [
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--disable-quic",
                *cfg.extra_args,
            ]
            if hasattr(os, "geteuid") and os.geteuid() == 0:
                args.append("--no-sandbox")  # Chromium refuses to run as root with its sandbox on
            try:
                self._browser = await self._pw.chromium.launch(
                    executable_path=self._executable, headless=cfg.headless, args=args, timeout=60_000
                )
            except Exception as e:
                raise DeviceUnavailable(f"could not launch {self._executable}: {_first_line(e)}") from e
            self._browser.on("disconnected", lambda _b: self._mark_disconnected())
            self._processes = await find_processes(self._browser, self._processes)
            self.browser_version = self._browser.version
            self._context = await self._browser.new_context(
                viewport={"width": cfg.viewport_width, "height": cfg.viewport_height},
                device_scale_factor=cfg.device_scale_factor,
                locale=cfg.locale,
            )
            self._context.set_default_timeout(cfg.action_timeout_s * 1000)
            self._context.set_default_navigation_timeout(cfg.navigation_timeout_s * 1000)
            self._page = await self._context.new_page()
            self._cdp = await self._context.new_cdp_session(self._page)
            await self._sync_emulation()
        except BaseException:
            await self.close()
            raise
        if has_cjk_font() is False:
            log.warning("no font covering Chinese was found: CJK text will render as boxes; install fonts-noto-cjk")
        if self.start_url:
            await self.goto(self.start_url)

    async def close(self) -> None:
        """Close the browser, then Playwright's driver, each within ``close_step_s``; one that does not finish in
        time, or a close cancelled by the caller's own bound, kills the browser's process group and the driver
        (``devices.web.processes``). Nothing of the device is left running after it."""
        processes, self._processes = self._processes, None
        steps = [(obj, method) for obj, method in ((self._browser, "close"), (self._pw, "stop")) if obj is not None]
        self._pw = self._browser = self._context = self._page = self._cdp = None
        self._emulated = None
        clean = True
        try:
            for obj, method in steps:
                try:
                    await asyncio.wait_for(getattr(obj, method)(), timeout=self.close_step_s)
                except TimeoutError:
                    clean = False
                    log.warning("the browser's %s took more than %.0f s", method, self.close_step_s)
                except Exception as e:  # closing a dead browser is not worth an error
                    log.debug("ignoring %s while closing the browser", type(e).__name__)
        finally:  # cancelled too: a close the caller gave up on still leaves no process
            if processes is not None and (not clean or processes.alive()):
                killed = processes.kill()
                if killed:
                    log.log(logging.DEBUG if clean else logging.WARNING, "killed what the web device left running: "
                            "%s", ", ".join(killed))

    def _mark_disconnected(self) -> None:
        self._disconnected = True

    def describe(self) -> dict[str, Any]:
        cfg = self.config
        return {
            "kind": "web",
            "browser": self._executable,
            "browser_version": self.browser_version,
            "viewport": [cfg.viewport_width, cfg.viewport_height],
            "device_scale_factor": cfg.device_scale_factor,
            "frame_scale": cfg.frame_scale,
        }

    # -- the calls ------------------------------------------------------------------------------
    async def _call(self, what: str, coro: Any) -> Any:
        """Await a Playwright call, turning its errors into DeviceErrors that say what to do."""
        if self._page is None:
            coro.close()
            raise DeviceError(f"cannot {what}: the web device is not started")
        if self._disconnected:
            coro.close()
            raise DeviceDisconnected(f"cannot {what}: the browser has gone away (crashed or was killed)")
        from playwright.async_api import Error as PlaywrightError
        from playwright.async_api import TimeoutError as PlaywrightTimeout

        try:
            return await asyncio.wait_for(coro, timeout=self.config.action_timeout_s + 5)
        except (PlaywrightTimeout, asyncio.TimeoutError) as e:
            if self._disconnected:
                raise DeviceDisconnected(f"cannot {what}: the browser has gone away") from e
            raise DeviceTimeout(
                f"{what} took longer than {self.config.action_timeout_s} s; the page may be hung "
                "(raise web.action_timeout_s if it is only slow)"
            ) from e
        except PlaywrightError as e:
            message = _first_line(e)
            # Match Playwright's own "gone" messages, not any "closed": a server that drops the
            # connection (net::ERR_CONNECTION_CLOSED) is a navigation error, not a dead browser.
            gone = any(marker in message.lower() for marker in _GONE_MARKERS)
            if self._disconnected or gone or not self._browser.is_connected() or self._page.is_closed():
                self._disconnected = True
                raise DeviceDisconnected(f"cannot {what}: the browser has gone away ({message})") from e
            raise DeviceError(f"{what} failed: {message}") from e

    async def _evaluate_readonly(self, what: str, script: str, arg: Any = None) -> Any:
        """Evaluate a side-effect-free script, asking again when a navigation replaced the document
        under it (right after a click on a link, or while a failed load shows its error page)."""
        for attempt in range(_NAVIGATION_RETRIES + 1):
            try:
                return await self._call(what, self.page.evaluate(script, arg))
            except (DeviceDisconnected, DeviceTimeout):
                raise
            except DeviceError as e:
                if attempt == _NAVIGATION_RETRIES or not any(m in str(e).lower() for m in _NAVIGATION_RACE_MARKERS):
                    raise
                await asyncio.sleep(0.05 * (attempt + 1))
        raise AssertionError("unreachable")  # pragma: no cover

    async def goto(self, url: str) -> None:
        check_url(url)
        self._fresh = None
        from playwright.async_api import Error as PlaywrightError

        try:
            await self._call(f"open {url}", self.page.goto(url, wait_until="load"))
        except DeviceDisconnected:
            raise
        except DeviceTimeout as e:
            raise NavigationError(
                f"{url} did not finish loading within {self.config.navigation_timeout_s} s; "
                "check that the server answers, or raise web.navigation_timeout_s"
            ) from e
        except DeviceError as e:
            cause = e.__cause__
            detail = _first_line(cause) if isinstance(cause, PlaywrightError) else str(e)
            raise NavigationError(
                f"could not open {url}: {detail}; check the address and that the server is running"
            ) from e
        self._view = None

    async def evaluate(self, expression: str, arg: Any = None) -> Any:
        """Run JavaScript in the page (environments use this to check a task from page state)."""
        self._fresh = None
        return await self._call("evaluate JavaScript", self.page.evaluate(expression, arg))

    async def _read_view(self) -> dict[str, Any]:
        view = await self._evaluate_readonly("read the viewport", VIEW_JS)
        self._view = view
        return view

    def _metrics(self) -> tuple[int, int, float]:
        """(width, height, device scale factor) that Playwright emulates on the page."""
        size = self.page.viewport_size or {"width": self.config.viewport_width, "height": self.config.viewport_height}
        return int(size["width"]), int(size["height"]), float(self.config.device_scale_factor)

    async def _sync_emulation(self) -> None:
        """Give our CDP session the same device metrics as Playwright's (see the module docstring)."""
        metrics = self._metrics()
        if metrics == self._emulated:
            return
        width, height, dpr = metrics
        params = {
            "width": width,
            "height": height,
            "deviceScaleFactor": dpr,
            "mobile": False,
            "screenWidth": width,
            "screenHeight": height,
            "screenOrientation": {"angle": 0, "type": "landscapePrimary"},
        }
        await self._call("mirror the viewport emulation", self._cdp.send("Emulation.setDeviceMetricsOverride", params))
        self._emulated = metrics

    async def _capture(self, params: dict[str, Any]) -> bytes:
        """A CDP screenshot. A navigation (a link clicked just before) can leave the CDP session attached to the
        document it replaced ("Not attached to an active page"): the session is then made again and the capture
        retried, each try bounded, so a capture never hangs on a page in transit."""
        for attempt in range(_CAPTURE_RETRIES + 1):
            try:
                await self._sync_emulation()
                reply = await self._call("take a screenshot", self._screenshot(params))
                return base64.b64decode(reply["data"])
            except (DeviceDisconnected, DeviceTimeout):
                if attempt == _CAPTURE_RETRIES or self._disconnected:
                    raise
            except DeviceError as e:
                if attempt == _CAPTURE_RETRIES or not any(m in str(e).lower() for m in _DETACHED_MARKERS):
                    raise
            await asyncio.sleep(0.05 * (attempt + 1))
            await self._reattach()
        raise AssertionError("unreachable")  # pragma: no cover

    async def _screenshot(self, params: dict[str, Any]) -> Any:
        # The CDP call is made here, inside the awaited coroutine, so a call refused up front leaves none behind.
        return await asyncio.wait_for(self._cdp.send("Page.captureScreenshot", params), _CAPTURE_TRY_S)

    async def _reattach(self) -> None:
        """A new CDP session on the page (the old one may belong to a document a navigation replaced)."""
        try:
            old, self._cdp = self._cdp, await self._call("attach to the page", self.context.new_cdp_session(self.page))
            self._emulated = None  # the new session has no emulation yet
            if old is not None:
                asyncio.ensure_future(_quietly(old.detach()))
        except DeviceError as e:
            log.debug("re-attaching to the page failed (will retry): %s", e)

    async def observe(self) -> Observation:
        view = await self._read_view()
        params: dict[str, Any] = {"format": "png", "optimizeForSpeed": True}
        if self.config.frame_scale == "css" and abs(view["dpr"] - 1) > 1e-6:
            # An unclipped capture is the visual viewport in device pixels. For CSS-sized frames,
            # clip exactly the visual viewport (page coordinates) and scale it so that its
            # vv.width * scale * dpr device pixels come out as the layout viewport's CSS size.
            params["clip"] = {
                "x": view["px"],
                "y": view["py"],
                "width": view["w"],
                "height": view["h"],
                "scale": view["scale"] / view["dpr"],
            }
        fresh, self._fresh = self._fresh, None
        if fresh is not None and "clip" not in params:
            data, frame = fresh
            source = "settle"
        else:
            data = await self._capture(params)
            frame = decode(data)
            source = "capture"
        boxes = tuple(
            b
            for b in (self._css_box_to_frame(r, view) for r in view["pw"])
            if b.x2 > b.x1 and b.y2 > b.y1
        )
        meta = {
            "url": view["url"],
            "title": view["title"],
            "viewport_css": [view["w"], view["h"]],
            "viewport_offset_css": [view["ox"], view["oy"]],
            "page_scale": view["scale"],
            "device_pixel_ratio": view["dpr"],
            "scroll": [view["sx"], view["sy"]],
            "frame_source": source,
        }
        return Observation(frame=frame, meta=meta, encoded=data, encoding="png", sensitive_boxes=boxes)

    def _css_box_to_frame(self, rect: list[float], view: dict[str, Any]) -> Box:
        left, top, right, bottom = rect
        return Box(
            (left - view["ox"]) / view["w"],
            (top - view["oy"]) / view["h"],
            (right - view["ox"]) / view["w"],
            (bottom - view["oy"]) / view["h"],
        ).clipped()

    def to_visual(self, x: float, y: float, view: dict[str, Any]) -> tuple[float, float]:
        """Map a normalized frame point to CSS pixels relative to the visual viewport (what input takes)."""
        # x = 1 is the right edge of the last pixel; nudge it inside so the event lands on the page.
        # Blink hit-tests input at LayoutUnit precision (1/64 px, rounded), so the nudge must be
        # larger than that: 1e-3 px rounds back onto the edge and the event misses the page.
        return min(x * view["w"], view["w"] - _INPUT_EDGE_PX), min(y * view["h"], view["h"] - _INPUT_EDGE_PX)

    def to_css(self, x: float, y: float, view: dict[str, Any]) -> tuple[float, float]:
        """Map a normalized frame point to the layout-viewport CSS point (clientX/Y, elementFromPoint)."""
        # elementFromPoint rounds the point before checking it is inside the viewport, so a point in
        # the right half of the last CSS pixel finds nothing; look up that pixel's left half instead.
        return (
            view["ox"] + min(x * view["w"], view["w"] - _LOOKUP_EDGE_PX),
            view["oy"] + min(y * view["h"], view["h"] - _LOOKUP_EDGE_PX),
        )

    async def element_at(self, point: Point) -> ElementInfo | None:
        """The DOM element under a normalized frame point: the text of the control it lies in (a button's whole
        label, with its aria-label, title and alt; never a password's value), its tag and box."""
        view = self._view or await self._read_view()
        cx, cy = self.to_css(point.x, point.y, view)
        found = await self._evaluate_readonly("find the element under the point", ELEMENT_JS, [cx, cy])
        if not isinstance(found, dict):
            return None
        # the control the point lies in, with all its names (the guard's reading), else the element's own text
        return ElementInfo(text=str(found.get("label") or found.get("text") or ""),
                           box=self._css_box_to_frame(found["box"], view), role=str(found.get("tag") or ""))

    async def focused_element(self) -> ElementInfo | None:
        """The element holding the keyboard focus (inside shadow roots too), or None when it is the page itself."""
        view = self._view or await self._read_view()
        found = await self._evaluate_readonly("find the focused element", FOCUSED_JS)
        if not isinstance(found, dict):
            return None
        return ElementInfo(text=str(found.get("label") or found.get("text") or ""),
                           box=self._css_box_to_frame(found["box"], view), role=str(found.get("tag") or ""),
                           password=bool(found.get("password")))

    async def act(self, action: Action) -> ActionResult:
        self._fresh = None
        check_act(self, action, started=self._page is not None)
        kind = action.kind
        view = self._view or await self._read_view()
        page = self.page
        mouse, keyboard = page.mouse, page.keyboard
        target: dict[str, Any] | None = None
        target_box: Box | None = None
        if action.point is not None:
            px, py = self.to_visual(action.point.x, action.point.y, view)
            cx, cy = self.to_css(action.point.x, action.point.y, view)
            target = await self._evaluate_readonly("find the element under the point", ELEMENT_JS, [cx, cy])
            if target is not None:
                target_box = self._css_box_to_frame(target.pop("box"), view)
                target.pop("label", None)  # the guard's reading; the record keeps the element's own text
        detail = ""
        sensitive = False
        if kind is ActionKind.CLICK:
            await self._call("click", mouse.click(px, py))
        elif kind is ActionKind.DOUBLE_CLICK:
            await self._call("double-click", mouse.dblclick(px, py))
        elif kind is ActionKind.RIGHT_CLICK:
            await self._call("right-click", mouse.click(px, py, button="right"))
        elif kind is ActionKind.HOVER:
            await self._call("hover", mouse.move(px, py))
        elif kind is ActionKind.DRAG:
            assert action.end is not None
            ex, ey = self.to_visual(action.end.x, action.end.y, view)
            await self._call("drag", self._drag(px, py, ex, ey))
        elif kind is ActionKind.SCROLL:
            mx, my = (px, py) if action.point is not None else self.to_visual(0.5, 0.5, view)
            amount = action.amount or 0.5
            dx = dy = 0.0
            if action.direction in (ScrollDirection.UP, ScrollDirection.DOWN):
                dy = amount * view["h"] * (1 if action.direction is ScrollDirection.DOWN else -1)
            else:
                dx = amount * view["w"] * (1 if action.direction is ScrollDirection.RIGHT else -1)
            await self._call("move the mouse", mouse.move(mx, my))
            await self._call("scroll", mouse.wheel(dx, dy))
            # The wheel returns before the page scrolled; two animation frames later it has.
            await self._evaluate_readonly("wait for the scroll", TWO_FRAMES_JS)
        elif kind is ActionKind.TYPE:
            if action.point is not None:
                await self._call("click before typing", mouse.click(px, py))
            sensitive = bool(await self._evaluate_readonly("check the focused field", FOCUS_IS_PASSWORD_JS))
            await self._call("type", keyboard.type(action.text or ""))
            if action.mask and not sensitive:
                await self._evaluate_readonly("mask the field a secret went into", MASK_FOCUSED_JS)
        elif kind is ActionKind.KEY:
            await self._call("press a key", keyboard.press(action.keys[0]))
        elif kind is ActionKind.HOTKEY:
            await self._call("press a hotkey", keyboard.press("+".join(action.keys)))
        elif kind is ActionKind.OPEN_URL:
            await self.goto(action.text or "")
        elif kind is ActionKind.BACK:
            response = await self._call("go back", page.go_back(wait_until="load"))
            detail = "" if response is not None else "no earlier page in history"
        elif kind is ActionKind.WAIT:
            await asyncio.sleep(action.duration_s or 0.0)
        self._view = None
        return ActionResult(action=action, detail=detail, target=target, target_box=target_box, sensitive=sensitive)

    async def _drag(self, x0: float, y0: float, x1: float, y1: float) -> None:
        mouse = self.page.mouse
        await mouse.move(x0, y0)
        await mouse.down()
        await mouse.move(x1, y1, steps=12)
        await mouse.up()

    async def grab_small(self) -> np.ndarray:
        """A small gray frame of the visible viewport, ``settle_config.width`` pixels wide, so that
        the changed-pixel threshold means the same share of the screen at any size and pixel ratio.

        It is a full-resolution fast-PNG capture (on simple pages cheaper than a low-quality JPEG
        one, and decoding it costs ~9 ms at 1280x720); the full frame is kept so that, once the
        screen has settled, the next ``observe`` can use the last capture instead of taking another.
        """
        data = await self._capture({"format": "png", "optimizeForSpeed": True})
        frame = decode(data)
        self._last_grab = (data, frame)
        return small_gray(frame, self.settle_config.width)

    async def settle(self) -> SettleResult:
        self._fresh = None
        result = await wait_until_settled(self.grab_small, self.settle_config)
        # A settled screen did not change over the last frames, so its last capture is what a new
        # capture would show. Reused only where observe would capture unclipped (the same frame).
        if result.settled and self._last_grab is not None and self._unclipped_frames():
            self._fresh = self._last_grab
        self._last_grab = None
        return result

    def _unclipped_frames(self) -> bool:
        return self.config.frame_scale == "device" or abs(self.config.device_scale_factor - 1) < 1e-6


async def _quietly(coro: Any) -> None:
    try:
        await coro
    except Exception:  # detaching a session whose document is gone may fail; nothing depends on it
        pass


def _playwright_browser(pw: Any) -> str | None:
    try:
        return pw.chromium.executable_path
    except Exception:  # Playwright without its own browser download
        return None


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    # Playwright appends a call log after a blank line; the first line is the message.
    return text.splitlines()[0].removeprefix("Error: ").strip()

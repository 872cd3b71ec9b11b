"""Generated tasks on the desktop device: the generated screens (``envs.generated``) in a full-screen Chromium
window on an X display, seen through mss and driven through pyautogui / xdotool like any desktop application,
and checked through the page's own record of clicks and typed values.

The browser is only the application on the screen: every observation is a grab of the monitor
(``devices.desktop.DesktopDevice``), every action a real X pointer or key event. Playwright starts the browser
(headed, on ``$DISPLAY`` or ``desktop.display``), loads each task's page and reads the page's state for the checker
and the step verifier. The window is put in full screen (DevTools ``Browser.setWindowBounds``), so the page fills
the monitor and a point in the frame is the same normalized point on the page: the generator's boxes are the
screen's. The monitor must therefore be the screen's size (1280 x 800 for the desktop form factor: run
``Xvfb :N -screen 0 1280x800x24``); another size is refused with that advice. Start it on a display of its own:
the browser takes the whole screen.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np

from devices.base import Observation
from devices.web import PlaywrightDevice, WebConfig
from envs.errors import EnvError
from envs.generated.env import GeneratedEnv

FULLSCREEN_WAIT_S = 8.0
"""Chromium shows "press Esc to exit full screen" for a few seconds after entering it; the first reset waits until
the screen shows the page alone (or this long)."""


class DesktopGeneratedEnv(GeneratedEnv):
    """A generated task on the desktop device (see the module docstring)."""

    def __init__(self, display: str = "", device: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._adopt_device(device)  # a started desktop device lent by the caller (who closes it), or one of its own
        self.display = display
        self._web: PlaywrightDevice | None = None

    async def _ensure_device(self) -> PlaywrightDevice:  # type: ignore[override]
        """The browser the page is loaded into (``GeneratedEnv.reset`` loads it); the desktop device (lent, or
        started here) is this environment's ``device``."""
        if self._web is not None and self._device is not None:
            return self._web
        from devices.desktop import DesktopConfig, DesktopDevice

        width, height = self.params.size
        if self._device is None:
            own = DesktopDevice(DesktopConfig(display=self.display))
            await own.start()
            self._device = own
        desktop = self._device
        shown = (desktop.map.frame_width, desktop.map.frame_height) if desktop.map is not None else None
        if shown != (width, height):
            await self.close()
            raise EnvError(f"{self.name}: the monitor is {shown[0] if shown else '?'}x{shown[1] if shown else '?'}, "
                           f"the task's screen {width}x{height}; run it on a display of that size (Xvfb :N -screen 0 "
                           f"{width}x{height}x24) so the page fills the monitor")
        web = PlaywrightDevice(WebConfig(headless=False, viewport_width=width, viewport_height=height,
                                         extra_args=("--window-position=0,0", f"--window-size={width},{height}")))
        await web.start()
        self._web = web
        cdp = await web.context.new_cdp_session(web.page)
        window = await cdp.send("Browser.getWindowForTarget")
        await cdp.send("Browser.setWindowBounds", {"windowId": window["windowId"],
                                                   "bounds": {"windowState": "fullscreen"}})
        return web

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
                    ) -> tuple[Observation, dict[str, Any]]:
        fresh = self._web is None
        _, info = await super().reset(seed=seed, options=options)
        if fresh:
            await self._wait_for_page()
        await self.device.settle()
        return await self.device.observe(), info

    async def _wait_for_page(self) -> None:
        """Until the monitor shows what the page renders (the full-screen notice gone), at most
        ``FULLSCREEN_WAIT_S``."""
        assert self._web is not None
        end = time.monotonic() + FULLSCREEN_WAIT_S
        while time.monotonic() < end:
            screen, page = await self.device.observe(), await self._web.observe()
            if screen.frame.shape == page.frame.shape:
                differ = np.any(np.abs(screen.frame.astype(np.int16) - page.frame.astype(np.int16)) > 24, axis=2)
                if differ.mean() < 0.002:
                    return
            await asyncio.sleep(0.25)

    async def _state(self) -> dict[str, Any]:
        if self._web is None:
            raise EnvError(f"{self.name}: call `await env.reset()` before stepping")
        state = await self._web.evaluate(
            "() => { const s = window.handeye || {clicks: [], values: {}, checked: {}};"
            " const a = document.activeElement;"
            " return {clicks: s.clicks, values: s.values, checked: s.checked,"
            " focused: (a && a.dataset && a.dataset.wid) || null}; }")
        if not isinstance(state, dict):
            raise EnvError(f"{self.name}: the page returned {state!r} instead of its state")
        return state

    async def close(self) -> None:
        web, self._web = self._web, None
        try:
            await self._close_owned_device()
        finally:
            if web is not None:
                await web.close()

"""The desktop/* environments: generated screens in a full-screen Chromium on a private Xvfb, driven through the
desktop device and checked through the page's state. Each check runs in a process of its own with its own display
(pyautogui binds a process to one display), as a fleet's desktop actor does."""

from __future__ import annotations

import os
import sys
import textwrap

import pytest

from tests.conftest import REPO
from tests.support import procs
from tests.support.xvfb import start_xvfb

SCRIPT = textwrap.dedent("""
    import asyncio
    from devices.actions import Action, ActionKind, Point
    from envs.conformance import check_env
    from envs.registry import make

    async def main():
        await check_env(make("desktop/click"))
        env = make("desktop/click")
        obs, info = await env.reset(seed=4)
        assert obs.frame.shape == (800, 1280, 3), obs.frame.shape
        x1, y1, x2, y2 = info["target_boxes"][0]
        target = Action(ActionKind.CLICK, point=Point((x1 + x2) / 2, (y1 + y2) / 2))
        miss = Action(ActionKind.CLICK, point=Point(0.99, 0.99))
        assert [v.correct for v in await env.verify([target, miss])] == [True, False]
        _, reward, terminated, _, step_info = await env.step(target)  # a real X click on the screen's pixels
        assert (reward, terminated) == (1.0, True), step_info
        await env.close()
        print("OK")

    asyncio.run(main())
""")




@pytest.mark.parametrize("size, expect", [("1280x800", "OK"), ("1024x768", "run it on a display of that size")])
def test_desktop_click_conforms_and_a_click_on_the_target_succeeds(size, expect):
    proc, display = start_xvfb(size)
    try:
        out = procs.run([sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True, text=True, timeout=240,
                        env={**os.environ, "DISPLAY": display, "XDG_SESSION_TYPE": "x11"})
    finally:
        proc.terminate()
        proc.wait(10)
    assert expect in out.stdout + out.stderr, out.stdout + out.stderr[-3000:]

"""A web demonstration recorded with the real recorder: Playwright plays the person with trusted input (the browser's
own mouse and keyboard pipeline) on a small form while ``agent.record.record_demonstration`` writes the episode.
Shared by the replay, training, report and data tests."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

W, H = 800, 600

FORM = """<!doctype html><html><head><meta charset="utf-8"><title>Sign up</title></head>
<body style="margin:0;font:16px sans-serif;background:#fff">
<h1 style="position:absolute;left:40px;top:0px;margin:8px 0;font-size:22px">Sign up</h1>
<button id="ok" style="position:absolute;left:{ok_left}px;top:60px;width:160px;height:40px">{ok_label}</button>
<input id="name" aria-label="Name" style="position:absolute;left:40px;top:120px;width:240px;height:30px">
<input id="pw" type="password" aria-label="Password" style="position:absolute;left:40px;top:170px;width:240px;height:30px">
<label style="position:absolute;left:40px;top:220px"><input id="agree" type="checkbox"> I agree</label>
<div id="out" style="position:absolute;left:40px;top:280px;width:500px;height:40px"></div>
<script>
document.getElementById('ok').addEventListener('click', () => {
  document.getElementById('out').textContent = 'Pressed ' + document.getElementById('ok').textContent; });
</script></body></html>"""


def form_page(ok_left: int = 40, ok_label: str = "OK") -> str:
    """The form; ``ok_left`` moves the OK button, ``ok_label`` renames it (a page that changed since the recording)."""
    return FORM.replace("{ok_left}", str(ok_left)).replace("{ok_label}", ok_label)


async def _centre(page: Any, selector: str) -> tuple[float, float]:
    box = await page.locator(selector).bounding_box()
    return box["x"] + box["width"] / 2, box["y"] + box["height"] / 2


async def fill_the_form(page: Any) -> None:
    """Click OK, type a name (with CJK), type a password, press Enter, tick the box: the person's task."""
    await page.wait_for_selector("#agree")
    await asyncio.sleep(0.3)
    for selector, text in (("#ok", None), ("#name", "Zoë 张伟"), ("#pw", "s3cret-pass")):
        await page.mouse.click(*await _centre(page, selector))
        await asyncio.sleep(0.6)  # past the double-click window
        if text:
            await page.keyboard.type(text)
    await page.keyboard.press("Enter")
    await asyncio.sleep(0.3)
    await page.mouse.click(*await _centre(page, "#agree"))
    await asyncio.sleep(0.6)


def record_web_demo(runs_dir: Path, url: str, task: str = "Sign up as Zoë",
                    play: Callable[[Any], Awaitable[None]] = fill_the_form) -> Path:
    """Record ``play`` (given the Playwright page) as a demonstration in a new run under ``runs_dir``; the episode
    folder."""
    from agent.record import record_demonstration
    from devices.web import PlaywrightDevice, WebConfig
    from devices.web.recorder import WebRecorder
    from envs.records import Actor
    from envs.recording import RecordingEnv
    from envs.trajectory import RunWriter

    device = PlaywrightDevice(WebConfig(viewport_width=W, viewport_height=H))
    recorder = WebRecorder(device, url)
    writer = RunWriter(runs_dir, config={"kind": "record"}).episode(task=task, actor=Actor.HUMAN)
    env = RecordingEnv(recorder, task)

    async def main() -> None:
        recording = asyncio.create_task(record_demonstration(env, writer))
        try:
            await asyncio.wait_for(recorder.started.wait(), 30)
            await play(device.page)
            await device.page.keyboard.press("Control+Alt+s")
            await asyncio.wait_for(recording, 30)
        finally:
            await env.close()

    asyncio.run(main())
    return writer.path

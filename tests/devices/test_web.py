"""The web device on local pages: every action kind, observations, sensitive fields and errors.

Pages are written into tmp_path and served by LocalSite. Most tests use a 400 x 300 CSS viewport at
device pixel ratio 1, so a point (x, y) is the CSS pixel (400 x, 300 y) and expected values can be
worked out by hand. These tests need Chromium; without it they fail with DeviceUnavailable, whose
message says how to install it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from devices import (
    Action,
    Box,
    DeviceDisconnected,
    DeviceError,
    DeviceUnavailable,
    InvalidAction,
    NavigationError,
    Point,
    UnsupportedAction,
)
from devices.web import PlaywrightDevice, WebConfig
from envs.site import LocalSite

W, H = 400, 300
SMALL = {"viewport_width": W, "viewport_height": H}


def serve(tmp_path: Path, **pages: str) -> LocalSite:
    for name, html in pages.items():
        (tmp_path / f"{name}.html").write_text(html, encoding="utf-8")
    return LocalSite(tmp_path)


def on_device(url: str | None, scenario: Callable[[PlaywrightDevice], Awaitable[Any]], **web: Any) -> Any:
    """Start a device on ``url``, run ``scenario(device)``, close it; returns what the scenario returns."""

    async def main() -> Any:
        async with PlaywrightDevice(WebConfig(**web), url=url) as device:
            return await scenario(device)

    return asyncio.run(main())


def at(x_css: float, y_css: float) -> Point:
    """The normalized point of a CSS pixel position in the 400 x 300 viewport."""
    return Point(x_css / W, y_css / H)


def assert_box(box: Box | None, left: float, top: float, right: float, bottom: float) -> None:
    """``box`` is the normalized form of a CSS rectangle of the 400 x 300 viewport."""
    assert box is not None
    assert box.as_list() == pytest.approx([left / W, top / H, right / W, bottom / H], abs=1e-6)


# -- pointer actions -----------------------------------------------------------------------------

CLICKS = """<!doctype html><meta charset="utf-8">
<style>body { margin: 0 } .t { position: absolute; width: 100px; height: 40px; background: #ccc; }</style>
<div id="one" class="t" style="left: 20px; top: 20px">one</div>
<button id="two" class="t" style="left: 200px; top: 100px; border: 0">two</button>
<script>
  window.log = [];
  for (const type of ['mousedown', 'mouseup', 'click', 'dblclick', 'contextmenu'])
    document.addEventListener(type, e => {
      log.push({type, id: e.target.id, button: e.button, detail: e.detail, x: e.clientX, y: e.clientY});
      if (type === 'contextmenu') e.preventDefault();
    });
</script>"""


def test_click_double_click_and_right_click(tmp_path):
    async def scenario(device):
        take = lambda: device.evaluate("log.splice(0)")  # noqa: E731 - read and clear the event log

        result = await device.act(Action("click", point=at(70, 40)))  # the centre of #one
        events = await take()
        assert [e["type"] for e in events] == ["mousedown", "mouseup", "click"]
        assert {e["id"] for e in events} == {"one"}
        assert events[-1]["button"] == 0
        assert (events[-1]["x"], events[-1]["y"]) == pytest.approx((70, 40), abs=1)
        assert result.ok and result.target == {"tag": "div", "id": "one", "role": None, "text": "one"}
        assert_box(result.target_box, 20, 20, 120, 60)

        result = await device.act(Action("double_click", point=at(250, 120)))  # the centre of #two
        events = await take()
        types = [e["type"] for e in events]
        assert types.count("click") == 2 and types[-1] == "dblclick"
        assert events[-1]["id"] == "two" and events[-1]["detail"] == 2
        assert result.target["tag"] == "button" and result.target["id"] == "two"
        assert_box(result.target_box, 200, 100, 300, 140)

        result = await device.act(Action("right_click", point=at(30, 50)))  # inside #one, off centre
        events = await take()
        # contextmenu comes with the press on Linux and with the release on Windows: order is the platform's
        assert sorted(e["type"] for e in events) == ["contextmenu", "mousedown", "mouseup"]
        assert all(e["button"] == 2 and e["id"] == "one" for e in events)
        assert result.target["id"] == "one"

        result = await device.act(Action("click", point=at(390, 290)))  # empty page
        assert (await take())[-1]["id"] == ""
        assert result.target["tag"] in ("html", "body") and result.target["id"] is None

    with serve(tmp_path, clicks=CLICKS) as site:
        on_device(site.url("clicks.html"), scenario, **SMALL)


HOVER = """<!doctype html>
<style>
  body { margin: 0; background: #fff; }
  #h { position: absolute; left: 100px; top: 100px; width: 100px; height: 100px; background: rgb(0, 0, 255); }
  #h:hover { background: rgb(255, 0, 0); }
</style>
<div id="h"></div>
<script>
  window.over = [];
  document.getElementById('h').addEventListener('mouseover', e => over.push(e.target.id));
</script>"""


def test_hover_moves_the_pointer_without_clicking(tmp_path):
    async def scenario(device):
        before = await device.observe()
        assert before.frame[150, 150].tolist() == [0, 0, 255]
        result = await device.act(Action("hover", point=at(150, 150)))
        assert result.target["id"] == "h"
        assert await device.evaluate("over") == ["h"]
        assert await device.evaluate("document.getElementById('h').matches(':hover')") is True
        await device.settle()
        hovered = await device.observe()
        assert hovered.frame[150, 150].tolist() == [255, 0, 0], "the :hover style is not on the frame"
        await device.act(Action("hover", point=at(350, 250)))
        assert await device.evaluate("document.getElementById('h').matches(':hover')") is False
        await device.settle()
        assert (await device.observe()).frame[150, 150].tolist() == [0, 0, 255]

    with serve(tmp_path, hover=HOVER) as site:
        on_device(site.url("hover.html"), scenario, **SMALL)


DRAG = """<!doctype html>
<style>body { margin: 0 }
  #box { position: absolute; left: 80px; top: 55px; width: 40px; height: 40px; background: #08f; }</style>
<div id="box"></div>
<script>
  window.drag = {down: null, up: null, moves: 0, downId: null};
  const box = document.getElementById('box');
  let grab = null;
  document.addEventListener('mousedown', e => {
    drag.down = [e.clientX, e.clientY]; drag.downId = e.target.id;
    if (e.target === box) grab = [e.clientX - box.offsetLeft, e.clientY - box.offsetTop];
  });
  document.addEventListener('mousemove', e => {
    if (!(e.buttons & 1)) return;
    drag.moves++;
    if (grab) { box.style.left = (e.clientX - grab[0]) + 'px'; box.style.top = (e.clientY - grab[1]) + 'px'; }
  });
  document.addEventListener('mouseup', e => { drag.up = [e.clientX, e.clientY]; grab = null; });
</script>"""


def test_drag_presses_at_the_start_and_releases_at_the_end(tmp_path):
    async def scenario(device):
        result = await device.act(Action("drag", point=at(100, 75), end=at(300, 150)))
        drag = await device.evaluate("drag")
        assert drag["downId"] == "box" and result.target["id"] == "box"
        assert drag["down"] == pytest.approx([100, 75], abs=1)
        assert drag["up"] == pytest.approx([300, 150], abs=1)
        assert drag["moves"] >= 2, "the drag should move in steps with the button held"
        # the page dragged its box by the same offset
        assert await device.evaluate("[box.offsetLeft, box.offsetTop]") == pytest.approx([280, 130], abs=1)

    with serve(tmp_path, drag=DRAG) as site:
        on_device(site.url("drag.html"), scenario, **SMALL)


SCROLL = """<!doctype html>
<style>body { margin: 0; width: 3000px; height: 3000px; }
  #inner { position: absolute; left: 0; top: 0; width: 200px; height: 200px; overflow: auto; background: #eee; }
</style>
<div id="inner"><div id="content" style="width: 2000px; height: 2000px">inner</div></div>"""


def test_scroll_at_a_point(tmp_path):
    state = "[scrollX, scrollY, inner.scrollLeft, inner.scrollTop]"

    async def scenario(device):
        # over the inner div: it scrolls by half the viewport height (0.5 x 300), the window does not
        result = await device.act(Action("scroll", direction="down", point=at(100, 100)))
        assert result.target["id"] == "content"  # the innermost element under the point
        assert await device.evaluate(state) == pytest.approx([0, 0, 0, 150], abs=1)
        # outside it: the window scrolls
        await device.act(Action("scroll", direction="down", point=at(300, 250)))
        assert await device.evaluate(state) == pytest.approx([0, 150, 0, 150], abs=1)
        # without a point, at the centre (200, 150), now below the inner div (it moved up by 150)
        await device.act(Action("scroll", direction="down"))
        assert await device.evaluate(state) == pytest.approx([0, 300, 0, 150], abs=1)
        await device.act(Action("scroll", direction="up", amount=0.25, point=at(300, 250)))
        assert await device.evaluate(state) == pytest.approx([0, 225, 0, 150], abs=1)
        await device.act(Action("scroll", direction="right", amount=1.0, point=at(300, 250)))
        assert await device.evaluate(state) == pytest.approx([400, 225, 0, 150], abs=1)
        await device.act(Action("scroll", direction="left", amount=0.5, point=at(300, 250)))
        assert await device.evaluate(state) == pytest.approx([200, 225, 0, 150], abs=1)
        observation = await device.observe()
        assert observation.meta["scroll"] == pytest.approx([200, 225], abs=1)

    with serve(tmp_path, scroll=SCROLL) as site:
        on_device(site.url("scroll.html"), scenario, **SMALL)


# -- keyboard ---------------------------------------------------------------------------------------

FORM = """<!doctype html><meta charset="utf-8">
<style>body { margin: 0 }
  input { position: absolute; left: 20px; width: 200px; height: 30px; box-sizing: border-box; }</style>
<form id="f" onsubmit="event.preventDefault(); window.submitted = document.getElementById('name').value;">
  <input id="name" style="top: 20px">
  <input id="pw" type="password" style="top: 80px">
  <input id="hidden-pw" type="password" style="display: none">
  <button type="submit" style="position: absolute; left: 300px; top: 20px">Go</button>
</form>
<script>
  window.submitted = null;
  window.keys = [];
  document.addEventListener('keydown', e => keys.push(e.key));
</script>"""


def test_type_unicode_and_password_fields(tmp_path):
    text = "你好, wörld ✓"

    async def scenario(device):
        result = await device.act(Action("type", text=text, point=at(120, 35)))  # clicks #name first
        assert await device.evaluate("document.getElementById('name').value") == text
        assert result.sensitive is False
        assert result.target["tag"] == "input" and result.target["id"] == "name"
        assert_box(result.target_box, 20, 20, 220, 50)

        result = await device.act(Action("type", text="s3cret!", point=at(120, 95)))
        assert result.sensitive is True, "text typed into a password field must be marked sensitive"
        assert await device.evaluate("document.getElementById('pw').value") == "s3cret!"
        result = await device.act(Action("type", text="?"))  # no point: into the focused field
        assert result.sensitive is True
        assert await device.evaluate("document.getElementById('pw').value") == "s3cret!?"
        assert await device.evaluate("document.getElementById('name').value") == text

        observation = await device.observe()
        assert len(observation.sensitive_boxes) == 1, "only the visible password field is sensitive"
        assert_box(observation.sensitive_boxes[0], 20, 80, 220, 110)

    with serve(tmp_path, form=FORM) as site:
        on_device(site.url("form.html"), scenario, **SMALL)


def test_the_focused_element_is_read_with_the_control_it_lies_in(tmp_path):
    """What the guard asks when a key or typing presses whatever has the focus: the focused control with every name
    it has (a label split across spans, an icon named only by aria-label), a password field as such, none when the
    page itself has the focus."""
    site = serve(tmp_path, page="""<button id=split><span>De</span><span>lete</span></button>
        <button id=icon aria-label="Remove account"><svg width=10 height=10></svg></button>
        <input id=pw type=password value=hunter2>""")

    async def scenario(device):
        seen = [await device.focused_element()]
        for element in ("split", "icon", "pw"):
            await device.evaluate(f"document.getElementById('{element}').focus()")
            seen.append(await device.focused_element())
        return seen

    with site:
        nothing, split, icon, pw = on_device(site.url("page.html"), scenario, **SMALL)
    assert nothing is None
    assert (split.text, split.role, split.password) == ("Delete", "button", False)
    assert icon.text == "Remove account" and pw.password and "hunter2" not in pw.text
    assert split.box is not None and split.box.x1 < split.box.x2


def test_key_and_hotkey(tmp_path):
    field = "document.getElementById('name')"

    async def scenario(device):
        await device.act(Action("type", text="hello world", point=at(120, 35)))
        assert await device.evaluate(f"[{field}.selectionStart, {field}.selectionEnd]") == [11, 11]
        await device.evaluate("keys.length = 0")

        await device.act(Action("hotkey", keys=("ctrl", "a")))
        assert await device.evaluate(f"[{field}.selectionStart, {field}.selectionEnd]") == [0, 11]
        assert await device.evaluate("keys") == ["Control", "a"]
        await device.act(Action("type", text="bye"))  # replaces the selection
        assert await device.evaluate(f"{field}.value") == "bye"

        await device.act(Action("key", keys=("return",)))
        assert await device.evaluate("submitted") == "bye", "Enter did not submit the form"
        assert (await device.evaluate("keys"))[-1] == "Enter"

        await device.act(Action("key", keys=("Space",)))
        assert await device.evaluate(f"{field}.value") == "bye "
        await device.act(Action("key", keys=("Backspace",)))
        await device.act(Action("hotkey", keys=("shift", "Home")))
        assert await device.evaluate(f"[{field}.selectionStart, {field}.selectionEnd]") == [0, 3]
        await device.act(Action("key", keys=("esc",)))
        assert (await device.evaluate("keys"))[-1] == "Escape"

    with serve(tmp_path, form=FORM) as site:
        on_device(site.url("form.html"), scenario, **SMALL)


# -- navigation, wait and kinds the web device does not do ------------------------------------------

PAGE_A = "<!doctype html><title>A</title><body><a id='link' href='b.html'>to B</a></body>"
PAGE_B = "<!doctype html><title>B</title><body>B</body>"


def test_open_url_back_wait_and_unsupported_kinds(tmp_path):
    async def scenario(device, site):
        assert (await device.observe()).meta["title"] == "A"
        result = await device.act(Action("open_url", text=site.url("b.html")))
        assert result.ok and result.detail == ""
        observation = await device.observe()
        assert observation.meta["url"] == site.url("b.html") and observation.meta["title"] == "B"

        result = await device.act(Action("back"))
        assert result.detail == ""
        observation = await device.observe()
        assert observation.meta["url"] == site.url("a.html") and observation.meta["title"] == "A"

        started = time.perf_counter()
        await device.act(Action("wait", duration_s=0.3))
        assert 0.29 <= time.perf_counter() - started < 1.5

        for action in (
            Action("long_press", point=Point(0.5, 0.5)),
            Action("home"),
            Action("open_app", text="Settings"),
        ):
            with pytest.raises(UnsupportedAction) as info:
                await device.act(action)
            assert f"cannot {action.kind.value}" in str(info.value) and "click" in str(info.value)
        for action in (Action("finish", text="done"), Action("infeasible", text="no such button")):
            with pytest.raises(InvalidAction, match="ends the episode"):
                await device.act(action)
        with pytest.raises(NavigationError, match="schemes"):
            await device.act(Action("open_url", text="ftp://example.com/file"))
        assert (await device.observe()).meta["title"] == "A"  # none of that touched the page
        assert device.supported_actions >= {"click", "scroll", "type", "back", "wait"}
        assert "home" not in device.supported_actions

    with serve(tmp_path, a=PAGE_A, b=PAGE_B) as site:
        on_device(site.url("a.html"), lambda device: scenario(device, site), **SMALL)


# -- observations -----------------------------------------------------------------------------------

COLOURS = """<!doctype html>
<style>html, body { margin: 0; height: 100%; background: rgb(10, 200, 30); }
  #corner { position: absolute; left: 0; top: 0; width: 10px; height: 10px; background: rgb(250, 20, 120); }
</style><div id="corner"></div>"""


def _png_decodes_to_frame(observation) -> None:
    assert observation.encoding == "png"
    assert observation.encoded[:8] == b"\x89PNG\r\n\x1a\n"
    bgr = cv2.imdecode(np.frombuffer(observation.encoded, np.uint8), cv2.IMREAD_COLOR)
    assert np.array_equal(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), observation.frame)


def test_observation_at_pixel_ratio_1(tmp_path):
    async def scenario(device):
        observation = await device.observe()
        frame = observation.frame
        assert frame.dtype == np.uint8 and frame.shape == (720, 1280, 3)
        assert observation.size == (1280, 720)
        # RGB order, and the 10 x 10 CSS corner block is 10 x 10 pixels
        assert frame[360, 640].tolist() == [10, 200, 30]
        assert frame[0, 0].tolist() == frame[9, 9].tolist() == [250, 20, 120]
        assert frame[10, 10].tolist() == [10, 200, 30]
        _png_decodes_to_frame(observation)
        meta = observation.meta
        assert meta["viewport_css"] == [1280, 720] and meta["device_pixel_ratio"] == 1 and meta["page_scale"] == 1
        assert device.describe()["viewport"] == [1280, 720]
        assert device.describe()["browser_version"]

    with serve(tmp_path, colours=COLOURS) as site:
        on_device(site.url("colours.html"), scenario)


@pytest.mark.parametrize("frame_scale, size, block", [("device", (1280, 720), 20), ("css", (640, 360), 10)])
def test_observation_at_pixel_ratio_2(tmp_path, frame_scale, size, block):
    async def scenario(device):
        for _ in range(2):  # the second capture must match the first: capturing must not undo the emulation
            observation = await device.observe()
            frame = observation.frame
            assert observation.size == size
            assert frame[block - 1, block - 1].tolist() == [250, 20, 120]
            assert frame[block, block].tolist() == [10, 200, 30]
            _png_decodes_to_frame(observation)
            assert observation.meta["device_pixel_ratio"] == 2
        await device.settle()
        assert (await device.observe()).size == size
        assert await device.evaluate("[devicePixelRatio, innerWidth, innerHeight]") == [2, 640, 360]
        # an environment resizing the viewport through Playwright: frames follow, and capturing keeps it
        await device.page.set_viewport_size({"width": 500, "height": 200})
        scale = size[0] // 640
        assert (await device.observe()).size == (500 * scale, 200 * scale)
        assert (await device.observe()).size == (500 * scale, 200 * scale)
        assert await device.evaluate("[devicePixelRatio, innerWidth, innerHeight]") == [2, 500, 200]
        # scroll amounts are fractions of the viewport in CSS pixels, whatever the pixel ratio
        await device.evaluate("document.body.style.height = '3000px'")
        await device.act(Action("scroll", direction="down", amount=0.5))
        assert await device.evaluate("scrollY") == pytest.approx(100, abs=1)  # half of the 200 px viewport

    with serve(tmp_path, colours=COLOURS) as site:
        on_device(
            site.url("colours.html"), scenario,
            viewport_width=640, viewport_height=360, device_scale_factor=2, frame_scale=frame_scale,
        )


# -- errors -------------------------------------------------------------------------------------------


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_navigation_errors_name_the_url_and_leave_the_device_usable(tmp_path):
    url = f"http://127.0.0.1:{_closed_port()}/nothing.html"

    async def scenario(device, site):
        with pytest.raises(NavigationError) as info:
            await device.act(Action("open_url", text=url))
        assert url in str(info.value) and "ERR_CONNECTION_REFUSED" in str(info.value)
        # the error page loads right after the failure; observing then must not trip over it
        observation = await device.observe()
        assert observation.size == (W, H)
        with pytest.raises(NavigationError, match="javascript:void"):
            await device.goto("javascript:void(0)")
        # a server dropping the connection is a navigation problem, not a dead browser
        from playwright.async_api import Error as PlaywrightError

        async def dropped():
            raise PlaywrightError("net::ERR_CONNECTION_CLOSED at http://127.0.0.1:1/")

        with pytest.raises(DeviceError) as info:
            await device._call("open http://127.0.0.1:1/", dropped())
        assert not isinstance(info.value, DeviceDisconnected)
        await device.act(Action("open_url", text=site.url("a.html")))
        assert (await device.observe()).meta["title"] == "A"

    with serve(tmp_path, a=PAGE_A) as site:
        on_device(None, lambda device: scenario(device, site), **SMALL)


def test_bad_url_scheme_is_refused_up_front():
    with pytest.raises(NavigationError, match="schemes http, https"):
        PlaywrightDevice(WebConfig(), url="example.com")


def test_missing_browser_path_says_how_to_install(tmp_path):
    missing = str(tmp_path / "no-such-chromium")

    async def main():
        device = PlaywrightDevice(WebConfig(browser_path=missing))
        with pytest.raises(DeviceUnavailable) as info:
            await device.start()
        message = str(info.value)
        assert missing in message
        assert "playwright install" in message and "browser_path" in message
        with pytest.raises(DeviceError, match="not started"):
            await device.observe()

    asyncio.run(main())


def _browser_pids(tag: str) -> list[int]:
    """Processes whose command line carries ``tag``: Chromium's main process (its helpers do not)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if tag.encode() in argv:
            found.append(int(entry.name))
    return found


def test_killed_browser_raises_device_disconnected():
    tag = f"--handeye-test-{uuid.uuid4().hex}"  # an unknown switch Chromium ignores; it marks our process

    async def scenario(device):
        assert (await device.observe()).size == (W, H)
        pids = _browser_pids(tag)
        assert len(pids) == 1, f"expected one Chromium process launched with {tag}, found {pids}"
        os.kill(pids[0], signal.SIGKILL)
        with pytest.raises(DeviceDisconnected, match="gone away"):
            await device.observe()
        with pytest.raises(DeviceDisconnected):
            await device.act(Action("click", point=Point(0.5, 0.5)))
        with pytest.raises(DeviceDisconnected):
            await device.settle()

    on_device("data:text/html,<p>doomed</p>", scenario, extra_args=(tag,), **SMALL)
    deadline = time.monotonic() + 5
    while _browser_pids(tag) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _browser_pids(tag) == []


# -- reusing the settled frame ---------------------------------------------------------------------

REUSE = """<!doctype html><meta charset="utf-8"><body style="margin:0">
<button id="b" style="position:absolute;left:20px;top:20px;width:120px;height:40px"
  onclick="document.body.style.background='rgb(10, 200, 30)'">go</button></body>"""


@pytest.mark.parametrize("dpr, frame_scale, reused", [(1, "device", True), (2, "device", True), (2, "css", False)])
def test_observe_after_settle_reuses_the_settled_capture(tmp_path, dpr, frame_scale, reused):
    async def scenario(device: PlaywrightDevice) -> None:
        first = await device.observe()
        assert first.meta["frame_source"] == "capture"
        await device.act(Action("click", at(80, 40)))
        result = await device.settle()
        assert result.settled
        after = await device.observe()
        assert after.meta["frame_source"] == ("settle" if reused else "capture")
        # Whatever its source, the frame shows the page after the click, at the configured size...
        assert after.size == ((W * dpr, H * dpr) if frame_scale == "device" else (W, H))
        assert tuple(after.frame[-2, -2]) == (10, 200, 30)
        assert cv2.imdecode(np.frombuffer(after.encoded, np.uint8), cv2.IMREAD_COLOR_RGB).tolist() == after.frame.tolist()
        # ...identical to a new capture of the static page.
        again = await device.observe()
        assert again.meta["frame_source"] == "capture"
        assert np.array_equal(again.frame, after.frame)
        # Anything that may change the page drops the kept frame.
        await device.settle()
        await device.evaluate("document.body.style.background = 'rgb(200, 10, 30)'")
        changed = await device.observe()
        assert changed.meta["frame_source"] == "capture" and tuple(changed.frame[-2, -2]) == (200, 10, 30)

    with serve(tmp_path, reuse=REUSE) as site:
        on_device(site.url("reuse.html"), scenario, device_scale_factor=dpr, frame_scale=frame_scale, **SMALL)


def test_a_missing_cjk_font_is_reported_with_what_to_install(monkeypatch, caplog):
    import devices.web.device

    monkeypatch.setattr(devices.web.device, "has_cjk_font", lambda: False)

    async def scenario(device: PlaywrightDevice) -> None:
        return None

    with caplog.at_level("WARNING", logger="devices.web.device"):
        on_device(None, scenario, **SMALL)
    assert any("fonts-noto-cjk" in r.getMessage() for r in caplog.records)


def test_a_link_click_then_settle_and_observe_capture_the_new_page(tmp_path):
    # The click navigates the tab: the CDP session can be left on the document it replaced ("Not attached to an
    # active page"); the capture attaches again instead of failing or hanging until its timeout.
    site = serve(tmp_path, **{
        "nav": '<a id="go" href="done.html" style="position:absolute;left:10px;top:10px;font-size:40px">Go</a>',
        "done": '<h1 id="done" style="margin:0;background:#c00;height:100vh">Done</h1>'})

    async def scenario(device):
        for _ in range(3):
            await device.goto(site.url("nav.html"))
            await device.settle()
            t0 = time.monotonic()
            await device.act(Action("click", at(30, 30)))
            settled = await device.settle()
            await device.page.wait_for_url("**/done.html")
            obs = await device.observe()
            assert time.monotonic() - t0 < 10 and settled.frames >= 1
            assert obs.meta["url"].endswith("done.html") and obs.frame[150, 200, 0] > 150  # the red page

    try:
        on_device(None, scenario, **SMALL)
    finally:
        site.close()

"""The web recorder on a real Chromium: Playwright plays the person with trusted input (the browser's own mouse and
keyboard pipeline), and the recording must equal what was done, action by action, with the elements' boxes."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np
import pytest

from agent.record import record_demonstration
from devices.actions import ActionKind
from devices.recording import MASKED_TEXT
from devices.web import PlaywrightDevice, WebConfig
from devices.web.recorder import WebRecorder
from envs.records import Actor, Outcome
from envs.recording import RecordingEnv
from envs.trajectory import RunWriter, read_episode

W, H = 800, 600

MAIN = """<!doctype html><html><head><meta charset="utf-8"></head><body style="margin:0;font:16px sans-serif">
<button id="ok" style="position:absolute;left:40px;top:40px;width:160px;height:40px">OK</button>
<input id="name" aria-label="Name" style="position:absolute;left:40px;top:100px;width:240px;height:30px">
<input id="pw" type="password" aria-label="Password" style="position:absolute;left:40px;top:150px;width:240px;height:30px">
<label style="position:absolute;left:40px;top:200px"><input id="agree" type="checkbox"> I agree</label>
<select id="city" style="position:absolute;left:40px;top:240px;width:160px;height:28px">
  <option>Berlin</option><option>北京</option><option>Paris</option></select>
<a id="more" href="second.html" target="_blank" style="position:absolute;left:40px;top:290px">More</a>
<iframe id="frame" src="frame.html" style="position:absolute;left:320px;top:40px;width:400px;height:200px;border:4px solid #888"></iframe>
<shadow-widget id="widget" style="position:absolute;left:320px;top:300px"></shadow-widget>
<div id="log" style="position:absolute;left:40px;top:400px;width:700px;height:1200px;background:#f4f4f4">log</div>
<script>
customElements.define('shadow-widget', class extends HTMLElement {
  constructor() { super(); const r = this.attachShadow({mode: 'open'});
    r.innerHTML = '<button id="inner" style="width:180px;height:40px">Shadow go</button>'; }
});
</script></body></html>"""

FRAME = """<!doctype html><html><body style="margin:0">
<button id="fbtn" style="position:absolute;left:20px;top:20px;width:140px;height:40px">In frame</button>
<input id="finput" aria-label="Frame field" style="position:absolute;left:20px;top:90px;width:200px;height:30px">
</body></html>"""

SECOND = """<!doctype html><html><body style="margin:0">
<button id="second" style="position:absolute;left:100px;top:100px;width:200px;height:50px">Second tab</button>
</body></html>"""


@pytest.fixture
def pages(site, pages_dir: Path):
    (pages_dir / "main.html").write_text(MAIN, encoding="utf-8")
    (pages_dir / "frame.html").write_text(FRAME)
    (pages_dir / "second.html").write_text(SECOND)
    return site


def _centre(box):
    return box["x"] + box["width"] / 2, box["y"] + box["height"] / 2


async def _box(page, selector):
    return await page.locator(selector).bounding_box()


async def play_the_person(recorder: WebRecorder) -> list[tuple]:
    """Do a task with trusted input; returns what was done: (kind, x, y, extra) in CSS pixels of the viewport."""
    page = recorder.device.page
    await page.wait_for_selector("#frame")
    done = []

    async def click(selector, kind="click", frame_page=None):
        box = await _box(frame_page or page, selector)
        x, y = _centre(box)
        if kind == "double_click":
            await page.mouse.dblclick(x, y)
        elif kind == "right_click":
            await page.mouse.click(x, y, button="right")
        else:
            await page.mouse.click(x, y)
        done.append((kind, x, y, selector))
        await asyncio.sleep(0.6)  # past the double-click window: each click stands alone

    await click("#ok")
    await click("#ok", "double_click")
    await click("#name")
    await page.keyboard.type("Zoë 张伟")
    done.append(("type", None, None, "Zoë 张伟"))
    await click("#pw")
    await page.keyboard.type("s3cret-pass")
    done.append(("type", None, None, MASKED_TEXT))
    await page.keyboard.press("Enter")
    done.append(("key", None, None, "Enter"))
    await click("#agree")
    await page.focus("#city")
    await page.keyboard.type("Pa")  # typeahead in a select: the choice is one type of its label
    await page.keyboard.press("Tab")
    done.append(("select", None, None, "Paris"))
    done.append(("key", None, None, "Tab"))
    # in the iframe (its border is 4 px): a click and typing
    frame = page.frame_locator("#frame")
    fbox = await frame.locator("#fbtn").bounding_box()
    await page.mouse.click(*_centre(fbox))
    done.append(("click", *_centre(fbox), "#fbtn"))
    await asyncio.sleep(0.6)
    ibox = await frame.locator("#finput").bounding_box()
    await page.mouse.click(*_centre(ibox))
    done.append(("click", *_centre(ibox), "#finput"))
    await page.keyboard.type("framed")
    await click("#widget", "click")  # its shadow button; the click commits the frame's typing first
    done.insert(-1, ("type", None, None, "framed"))
    await click("#ok", "right_click")
    await page.mouse.move(400, 500)
    await page.mouse.wheel(0, 200)
    await asyncio.sleep(0.05)
    await page.mouse.wheel(0, 100)
    done.append(("scroll", 400, 500, 300))
    await asyncio.sleep(0.7)
    await page.mouse.move(100, 450)
    await page.mouse.down()
    await page.mouse.move(300, 520, steps=6)
    await page.mouse.up()
    done.append(("drag", 100, 450, (300, 520)))
    await page.keyboard.press("Control+b")
    done.append(("hotkey", None, None, ("Control", "b")))
    await page.evaluate("() => window.scrollTo(0, 0)")
    await asyncio.sleep(0.3)
    async with page.context.expect_page() as opened:
        await click("#more")
    second = await opened.value
    await second.wait_for_load_state()
    await recorder.listening(second)  # the recorder takes a new tab in as it opens; a person is never faster
    box = await _box(second, "#second")
    await second.mouse.click(*_centre(box))
    done.append(("click", *_centre(box), "#second"))
    await asyncio.sleep(0.6)
    await second.keyboard.press("Control+Alt+s")
    return done


def test_the_recording_equals_what_was_done(tmp_path, pages):
    device = PlaywrightDevice(WebConfig(viewport_width=W, viewport_height=H))
    recorder = WebRecorder(device, pages.url("main.html"))
    writer = RunWriter(tmp_path / "runs", config={}).episode(task="fill the form", actor=Actor.HUMAN)
    env = RecordingEnv(recorder, "fill the form")

    async def main():
        task = asyncio.create_task(record_demonstration(env, writer))
        await asyncio.wait_for(recorder.started.wait(), 30)
        done = await play_the_person(recorder)
        result = await asyncio.wait_for(task, 30)
        await env.close()
        return done, result

    done, result = asyncio.run(main())
    assert result.record.outcome is Outcome.CLAIMED and result.record.actor is Actor.HUMAN
    episode = read_episode(writer.path)
    steps = episode.steps[:-1]  # the last is the finish the stop key made
    assert episode.steps[-1].action["kind"] == "finish"
    kinds = [s.action["kind"] for s in steps]
    expected = [d[0] if d[0] != "select" else "type" for d in done]
    assert kinds == expected, " | ".join(f"{a}/{b}" for a, b in zip(kinds, expected))
    for step, (kind, x, y, extra) in zip(steps, done):
        action = step.action
        if x is not None and kind not in ("scroll", "drag"):
            assert action["point"] == pytest.approx([x / W, y / H], abs=1.5 / W), (kind, extra)
        if kind in ("click", "double_click", "right_click"):
            box = step.target_box
            assert box is not None and box[0] <= x / W <= box[2] and box[1] <= y / H <= box[3], (kind, extra, box)
        if kind == "type":
            assert action["text"] == extra
        if kind == "select":
            assert action["text"] == extra and step.info["env_info"]["demo"]["select"]["label"] == "Paris"
        if kind == "scroll":
            assert action["direction"] == "down" and action["amount"] == pytest.approx(300 / H, abs=1e-6)
        if kind == "drag":
            assert action["point"] == pytest.approx([x / W, y / H], abs=2 / W)
            assert action["end"] == pytest.approx([extra[0] / W, extra[1] / H], abs=2 / W)
        if kind in ("key", "hotkey"):
            assert action["keys"] == ([extra] if kind == "key" else list(extra))
    by_selector = {s.info["env_info"]["demo"].get("selector"): s for s in steps if s.action["kind"] == "click"}
    assert by_selector["#widget >>> #inner"].target["text"] == "Shadow go"  # into the shadow root
    assert by_selector["#fbtn"].info["env_info"]["demo"]["frame"].endswith("frame.html")
    assert by_selector["#second"].info["env_info"]["demo"]["new_tab"] is True
    # the password: never in clear, its box flat in the stored frames
    masked = next(s for s in steps if s.sensitive)
    assert masked.action["text"] == MASKED_TEXT
    on_disk = "".join(p.read_text(encoding="utf-8") for p in episode.path.glob("*.json*"))
    assert "s3cret-pass" not in on_disk
    after = episode.frame(episode.steps[masked.index + 1])  # the field holds the password now
    field = after[153:177, 43:277]  # inside #pw (40, 150, 240 x 30)
    assert np.ptp(field.reshape(-1, 3), axis=0).max() == 0
    name_field = after[103:127, 43:277]  # the plain field next to it shows its text
    assert np.ptp(name_field.reshape(-1, 3), axis=0).max() > 0
    # every stored frame is the screen before its action: the typed name is not in the field yet
    assert all((episode.path / s.frame_path).exists() for s in episode.steps)


def test_a_pause_is_marked_and_what_happens_in_it_is_not_recorded(tmp_path, pages):
    device = PlaywrightDevice(WebConfig(viewport_width=W, viewport_height=H))
    recorder = WebRecorder(device, pages.url("main.html"))

    async def main():
        await recorder.start()
        page = device.page
        events = []

        async def consume():
            while (e := await recorder.next_event()) is not None:
                events.append(e)

        task = asyncio.create_task(consume())
        ok = _centre(await _box(page, "#ok"))
        await page.mouse.click(*ok)
        await asyncio.sleep(0.6)
        await page.keyboard.press("Control+Alt+p")
        t0 = time.time()
        await page.mouse.click(*ok)  # private: not recorded
        await asyncio.sleep(0.8)
        await page.keyboard.press("Control+Alt+p")
        paused = time.time() - t0
        await page.mouse.click(*ok)
        await asyncio.sleep(0.6)
        recorder.request_stop()
        await asyncio.wait_for(task, 10)
        await recorder.stop()
        return events, paused

    events, paused = asyncio.run(main())
    assert [e.action.kind for e in events] == [ActionKind.CLICK, ActionKind.WAIT, ActionKind.CLICK]
    assert events[1].info["paused_s"] == pytest.approx(paused, abs=0.3)


def test_events_faster_than_frames_are_never_dropped(tmp_path, pages):
    device = PlaywrightDevice(WebConfig(viewport_width=W, viewport_height=H))
    recorder = WebRecorder(device, pages.url("main.html"))

    async def main():
        await recorder.start()
        page = device.page
        events = []

        async def consume():
            while (e := await recorder.next_event()) is not None:
                events.append(e)

        task = asyncio.create_task(consume())
        for _ in range(40):
            await page.keyboard.press("F2")  # 40 keys as fast as the browser takes them
        await asyncio.sleep(0.5)
        recorder.request_stop()
        await asyncio.wait_for(task, 20)
        await recorder.stop()
        return events

    events = asyncio.run(main())
    assert len(events) == 40 and all(e.action.keys == ("F2",) for e in events)
    assert all(e.frame.frame.shape == (H, W, 3) for e in events)
    assert [e.at for e in events] == sorted(e.at for e in events)


def test_closing_the_browser_ends_the_recording_as_done(tmp_path, pages):
    recorder = WebRecorder(PlaywrightDevice(WebConfig(viewport_width=W, viewport_height=H)), pages.url("main.html"))
    env = RecordingEnv(recorder, "click OK and close")
    writer = RunWriter(tmp_path / "runs", config={}).episode(task="t", actor=Actor.HUMAN)

    async def main():
        task = asyncio.create_task(record_demonstration(env, writer))
        await asyncio.wait_for(recorder.started.wait(), 30)
        page = recorder.device.page
        await page.mouse.click(*_centre(await _box(page, "#ok")))
        await asyncio.sleep(0.6)
        await page.close()  # the person closes the window
        result = await asyncio.wait_for(task, 30)
        await env.close()
        return result

    result = asyncio.run(main())
    assert result.record.outcome is Outcome.CLAIMED
    episode = read_episode(writer.path)
    assert [s.action["kind"] for s in episode.steps] == ["click", "finish"]
    assert episode.frame(episode.steps[-1]).shape == (H, W, 3)  # the last screen the page showed


def test_agent_record_takes_the_web_record_section_and_its_flags(tmp_path, pages, monkeypatch, capsys):
    """`--set web_record.pause_key=...` reaches the WebRecorder of `agent record`, and --stop-key wins over the
    section's stop key: the default stop key is then an ordinary hotkey, the given one ends the recording as claimed;
    a key that is not modifiers and one key is refused before the browser opens."""
    from agent.cli import main as agent_main
    from envs.trajectory import iter_episodes
    from tests.support.person import play_once_started

    keys: list[tuple[str, str]] = []

    async def play(recorder: WebRecorder) -> None:
        keys.append((recorder.interpreter.pause_key, recorder.interpreter.stop_key))
        page = recorder.device.page
        ok = _centre(await _box(page, "#ok"))
        await page.mouse.click(*ok)
        await asyncio.sleep(0.6)
        await page.keyboard.press("Control+Shift+y")  # the section's pause key
        await page.mouse.click(*ok)  # private
        await asyncio.sleep(0.5)
        await page.keyboard.press("Control+Shift+y")
        await page.keyboard.press("Control+Alt+s")  # not the stop key here
        await asyncio.sleep(0.3)
        await page.keyboard.press("Control+Shift+x")

    errors = play_once_started(monkeypatch, play)
    code = agent_main(["record", "Press OK", "--url", pages.url("main.html"), "--headless", "--runs-dir", str(tmp_path),
                       "--stop-key", "Control+Shift+x", "--set", 'web_record.pause_key="Control+Shift+y"', "--set",
                       'web_record.stop_key="Control+Shift+z"'])
    out = capsys.readouterr().out
    assert not errors and code == 0, (errors, out)
    assert keys == [("Control+Shift+y", "Control+Shift+x")]
    (run_dir,) = [d for d in tmp_path.iterdir() if (d / "run.json").exists()]  # the pages fixture shares tmp_path
    (episode,) = iter_episodes(run_dir)
    assert episode.record.outcome is Outcome.CLAIMED
    assert [s.action["kind"] for s in episode.steps] == ["click", "wait", "hotkey", "finish"]
    assert episode.steps[2].action["keys"] == ["Control", "Alt", "s"]

    assert agent_main(["record", "Press OK", "--headless", "--set", 'web_record.pause_key="p"']) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "[web_record] pause_key='p' must be modifiers (Control, Alt, Shift, Meta) and one key" in out, out

"""Derived tasks (envs/derived): recorded through the real web recorder with Playwright playing the person (trusted
input, as in tests/devices/test_web_recorder.py), derived, written, registered, and then the checker must pass on
the demonstration's own final state and fail on its start state (a fresh load of the start page), both through the
real environment; the recorded actions replayed through the environment end the episode with reward 1. Also the
loader's errors and conformance; Android and desktop tasks are in test_derived_devices.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from agent.record import record_demonstration
from devices.actions import Action, ActionKind, Point
from devices.web import PlaywrightDevice, WebConfig
from devices.web.recorder import WebRecorder
from envs.conformance import check_env
from envs.derived import derive_task, load_task, register_tasks, wanted_for_derive
from envs.derived.env import open_fresh
from envs.derived.spec import (ElementCondition, TextMatch, TextVisibleCondition, UrlCondition, condition_dict,
                               write_task)
from envs.derived.states import read_web_state
from envs.errors import TaskFileError
from envs.records import Actor, Outcome
from envs.recording import RecordingEnv
from envs.registry import all_specs, make
from envs.trajectory import RunWriter, read_episode

W, H = 800, 600
HEAD = '<!doctype html><html><head><meta charset="utf-8"><title>{title}</title></head>' \
       '<body style="margin:0;font:16px sans-serif">'

PAGES = {
    "form.html": HEAD.format(title="Sign up") + """<h1 style="margin:8px 40px">Sign up</h1>
<input id="name" aria-label="Name" style="position:absolute;left:40px;top:80px;width:240px;height:30px">
<input id="email" aria-label="Email" style="position:absolute;left:40px;top:130px;width:240px;height:30px">
<input id="pw" type="password" aria-label="Password"
  style="position:absolute;left:40px;top:180px;width:240px;height:30px">
<button id="send" style="position:absolute;left:40px;top:230px;width:120px;height:36px">Send</button>
</body></html>""",
    "check.html": HEAD.format(title="Settings") + """
<label style="position:absolute;left:40px;top:60px"><input id="agree" type="checkbox"> I agree to the terms</label>
<label style="position:absolute;left:40px;top:110px"><input id="news" type="checkbox" checked> Send me news</label>
</body></html>""",
    "select.html": HEAD.format(title="City") + """
<select id="city" aria-label="City" style="position:absolute;left:40px;top:60px;width:160px;height:28px">
  <option>Berlin</option><option>北京</option><option>Paris</option></select>
</body></html>""",
    "nav.html": HEAD.format(title="Start") + """<p style="margin:20px 40px">Welcome</p>
<a id="go" href="done.html" style="position:absolute;left:40px;top:80px;font-size:20px">Continue</a>
</body></html>""",
    "done.html": HEAD.format(title="Done") + """<h1 style="margin:20px 40px">All done</h1>
<p style="margin:0 40px">Your order is on its way.</p></body></html>""",
    "zh.html": HEAD.format(title="提交") + """<p style="margin:20px 40px">请点击按钮提交表单。</p>
<button id="submit" style="position:absolute;left:40px;top:80px;width:120px;height:40px"
  onclick="setTimeout(() => { document.getElementById('msg').textContent = '提交成功！'; }, 150)">提交</button>
<div id="msg" style="position:absolute;left:40px;top:140px"></div>
</body></html>""",
    "frames.html": HEAD.format(title="Widgets") + """
<iframe id="frame" src="inner.html"
  style="position:absolute;left:40px;top:40px;width:400px;height:160px;border:4px solid #888"></iframe>
<toggle-widget id="widget" style="position:absolute;left:40px;top:260px"></toggle-widget>
<script>
customElements.define('toggle-widget', class extends HTMLElement {
  constructor() { super(); const r = this.attachShadow({mode: 'open'});
    r.innerHTML = '<button id="inner" style="width:180px;height:40px">Lamp Off</button>';
    const b = r.getElementById('inner');
    b.addEventListener('click', () => { b.textContent = b.textContent === 'Lamp Off' ? 'Lamp On' : 'Lamp Off'; }); }
});
</script></body></html>""",
    "inner.html": """<!doctype html><html><body style="margin:0">
<input id="finput" aria-label="Frame field" style="position:absolute;left:20px;top:40px;width:200px;height:30px">
</body></html>""",
}


@pytest.fixture(scope="module")
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="module")
def shared(loop):
    """One browser for the environments that check the start states (a fresh page per reset)."""
    device = PlaywrightDevice(WebConfig(viewport_width=W, viewport_height=H))
    loop.run_until_complete(device.start())
    yield device
    loop.run_until_complete(device.close())


@pytest.fixture(scope="module")
def web_site(tmp_path_factory):
    from envs.site import LocalSite

    root = tmp_path_factory.mktemp("pages")
    for name, html in PAGES.items():
        (root / name).write_text(html, encoding="utf-8")
    with LocalSite(root) as site:
        yield site


@pytest.fixture
def tasks(tmp_path, monkeypatch):
    folder = tmp_path / "tasks"
    monkeypatch.setenv("HANDEYE_TASKS_DIR", str(folder))
    yield folder
    register_tasks(tmp_path / "nowhere")  # leave no tasks of this test registered


# -- playing the person (trusted input through the browser's pipeline) --------------------------------------------
async def click(page: Any, selector: str, frame: str | None = None) -> None:
    where = page.frame_locator(frame) if frame else page
    box = await where.locator(selector).bounding_box()
    await page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    await asyncio.sleep(0.6)  # past the double-click window


async def fill_form(page: Any) -> None:
    await click(page, "#name")
    await page.keyboard.type("Zoë Müller")
    await click(page, "#email")
    await page.keyboard.type("zoe@example.com")
    await click(page, "#pw")
    await page.keyboard.type("s3cret-pass")
    await click(page, "#send")


async def tick_boxes(page: Any) -> None:
    await click(page, "#agree")
    await click(page, "#news")


async def choose_city(page: Any) -> None:
    await page.focus("#city")
    await page.keyboard.type("Pa")  # typeahead: the choice is one type of its label
    await page.keyboard.press("Tab")


async def follow_link(page: Any) -> None:
    async with page.expect_navigation():
        await click(page, "#go")


async def submit_zh(page: Any) -> None:
    await click(page, "#submit")
    await page.wait_for_selector("text=提交成功")


async def use_widgets(page: Any) -> None:
    await click(page, "#finput", frame="#frame")
    await page.keyboard.type("framed text")
    await click(page, "#widget")  # its shadow button; the click also commits the frame's typing


Play = Callable[[Any], Awaitable[None]]


async def record_task(site: Any, runs: Path, folder: Path, page_name: str, instruction: str, play: Play,
                      name: str, shared: PlaywrightDevice) -> dict[str, Any]:
    """Record ``play`` on ``page_name``, derive the task, and judge it on the live final page; the facts."""
    device = PlaywrightDevice(WebConfig(viewport_width=W, viewport_height=H))
    recorder = WebRecorder(device, site.url(page_name))
    writer = RunWriter(runs, config={}).episode(task=instruction, actor=Actor.HUMAN)
    env = RecordingEnv(recorder, instruction)
    try:
        running = asyncio.ensure_future(record_demonstration(env, writer))
        await asyncio.wait_for(recorder.started.wait(), 30)
        await play(device.page)
        await asyncio.sleep(0.3)
        await (recorder.active or device.page).keyboard.press("Control+Alt+s")
        result = await asyncio.wait_for(running, 30)
        assert result.record.outcome is Outcome.CLAIMED
        episode = read_episode(writer.path)
        wanted = wanted_for_derive(episode.steps)
        final = await read_web_state(recorder.active or device.page, wanted)
        # the start state: the start page opened afresh, as the environment opens it
        await open_fresh(shared, recorder.url, (W, H))
        start = await read_web_state(shared.page, wanted)
        spec = derive_task(episode, start, final, name)
        path = write_task(spec, folder)
        register_tasks(folder)
        live = make(f"tasks/{name}", device=device)  # borrows the recorder's browser: its final page as it is
        on_final = await live.unwrapped.check()
        await live.close()
    finally:
        await env.close()
    return {"spec": load_task(path), "episode": episode, "final": on_final, "path": path}


async def judge_start_and_replay(name: str, episode: Any, shared: PlaywrightDevice, replay: bool = True
                                 ) -> dict[str, Any]:
    env = make(f"tasks/{name}", device=shared)
    try:
        await env.reset(seed=0)
        on_start = await env.unwrapped.check()
        _, reward, terminated, _, info = await env.step(Action(ActionKind.FINISH))
        out: dict[str, Any] = {"start": on_start, "finish_at_start": (reward, terminated, info["success"])}
        if replay:
            await env.reset(seed=1)
            for step in episode.steps:
                action = Action.from_dict(step.action)
                if action.kind in (ActionKind.FINISH, ActionKind.WAIT):
                    continue
                _, reward, terminated, _, info = await env.step(action)
                if terminated:
                    break
            else:  # an effect that shows a moment after the last action: a policy would wait, then finish
                _, reward, terminated, _, info = await env.step(Action(ActionKind.WAIT, duration_s=0.5))
                if not terminated:
                    _, reward, terminated, _, info = await env.step(Action(ActionKind.FINISH))
            out["replay"] = (reward, terminated, info.get("success"))
        return out
    finally:
        await env.close()


CASES = {
    # name: (page, instruction, play, replay)
    "form": ("form.html", "Sign up as Zoë Müller, zoe@example.com", fill_form, True),
    "checkbox": ("check.html", "Accept the terms and stop the news", tick_boxes, True),
    "select": ("select.html", "Choose Paris as the city", choose_city, False),
    "navigate": ("nav.html", "Continue to the next page", follow_link, False),
    "zh-submit": ("zh.html", "点击“提交”按钮，等待提交成功的提示", submit_zh, True),
    "widgets": ("frames.html", "Type 'framed text' in the framed field, then switch the lamp on", use_widgets, True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_recorded_web_task_passes_on_its_final_state_and_fails_at_its_start(loop, shared, web_site, tasks,
                                                                               tmp_path, name):
    page, instruction, play, replay = CASES[name]
    made = loop.run_until_complete(record_task(web_site, tmp_path / "runs", tasks, page, instruction, play, name,
                                               shared))
    spec = made["spec"]
    conditions = [condition_dict(c) for c in spec.conditions]
    assert made["final"].success, made["final"].details
    judged = loop.run_until_complete(judge_start_and_replay(name, made["episode"], shared, replay))
    assert not judged["start"].success and judged["start"].details["failed"] >= 1, conditions
    assert judged["finish_at_start"] == (0.0, True, False)
    if replay:
        assert judged["replay"] == (1.0, True, True), conditions
    assert spec.instruction == instruction and spec.start.viewport == (W, H)
    assert spec.start.url == web_site.url(page) and spec.max_steps >= 5
    EXPECTED[name](spec, conditions)


def _expect_form(spec, conditions):
    assert ElementCondition("#name", value="Zoë Müller") in spec.conditions
    assert ElementCondition("#email", value="zoe@example.com") in spec.conditions
    assert not any(c.get("selector") == "#pw" for c in conditions)  # password fields are never conditions
    assert "s3cret-pass" not in spec.to_json()


def _expect_checkbox(spec, conditions):
    assert ElementCondition("#agree", checked=True) in spec.conditions
    assert ElementCondition("#news", checked=False) in spec.conditions


def _expect_select(spec, conditions):
    assert spec.conditions == (ElementCondition("#city", selected=("Paris",)),)


def _expect_navigate(spec, conditions):
    assert UrlCondition("/done.html", TextMatch.PATH_EQUALS) in spec.conditions
    assert TextVisibleCondition("All done") in spec.conditions
    assert not any(isinstance(c, ElementCondition) for c in spec.conditions)  # the link is gone from the page


def _expect_zh(spec, conditions):
    assert spec.language == "zh"
    assert TextVisibleCondition("提交成功！") in spec.conditions
    assert json.loads(made_json(spec))["instruction"] == spec.instruction  # written as text, not escapes


def _expect_widgets(spec, conditions):
    framed = [c for c in spec.conditions if isinstance(c, ElementCondition) and c.frame]
    assert len(framed) == 1 and framed[0].selector == "#finput" and framed[0].value == "framed text"
    assert framed[0].frame.endswith("/inner.html")
    assert ElementCondition("#widget >>> #inner", text_contains="Lamp On") in spec.conditions


def made_json(spec) -> str:
    text = spec.to_json()
    assert spec.instruction in text
    return text


EXPECTED = {"form": _expect_form, "checkbox": _expect_checkbox, "select": _expect_select,
            "navigate": _expect_navigate, "zh-submit": _expect_zh, "widgets": _expect_widgets}


# -- a task whose page ships with it; conformance ------------------------------------------------------------------
def _write(folder: Path, name: str, data: dict[str, Any] | str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def _web_task(name: str = "t", **changes: Any) -> dict[str, Any]:
    task = {"format": "handeye-task/1", "name": name, "instruction": "Tick the box", "device": "web",
            "start": {"page": "site/check.html", "viewport": [W, H]},
            "conditions": [{"kind": "element", "selector": "#agree", "checked": True}]}
    task.update(changes)
    return task


def test_a_task_with_its_own_page_conforms_and_is_checked(loop, shared, tasks):
    (tasks / "site").mkdir(parents=True)
    (tasks / "site" / "check.html").write_text(PAGES["check.html"], encoding="utf-8")
    _write(tasks, "tick", _web_task("tick"))
    assert register_tasks() == ["tasks/tick"]  # $HANDEYE_TASKS_DIR
    (spec,) = all_specs("tasks")
    assert spec.device_kind == "web" and spec.description == "web: Tick the box"
    loop.run_until_complete(check_env(make("tasks/tick", device=shared)))

    async def tick() -> tuple[float, bool, bool]:
        env = make("tasks/tick", device=shared)
        try:
            obs, info = await env.reset(seed=3)
            assert info["instruction"] == "Tick the box" and obs.frame.shape == (H, W, 3)
            box = await shared.page.locator("#agree").bounding_box()
            point = Point((box["x"] + box["width"] / 2) / W, (box["y"] + box["height"] / 2) / H)
            _, reward, terminated, _, info = await env.step(Action(ActionKind.CLICK, point=point))
            return reward, terminated, info["success"]
        finally:
            await env.close()

    assert loop.run_until_complete(tick()) == (1.0, True, True)


# -- the loader ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("change, message", [
    ({"colour": "red"}, "t.json: colour is not a field of the task"),
    ({"max_steps": "ten"}, "t.json: max_steps must be a whole number"),
    ({"device": "fridge"}, "t.json: device is 'fridge'"),
    ({"format": "handeye-task/9"}, "format is 'handeye-task/9'"),
    ({"name": "other"}, "name is 'other' but the file is t.json"),
    ({"conditions": []}, "conditions must be a non-empty list"),
    ({"conditions": [{"kind": "element", "selector": "#a", "checked": "yes"}]},
     "conditions[0].checked must be true or false, got a string"),
    ({"conditions": [{"kind": "element", "selector": "#a", "checked": True, "colour": 1}]},
     "conditions[0].colour is not a field of conditions[0]"),
    ({"conditions": [{"kind": "element", "selector": "#a"}]}, "needs at least one of value, checked"),
    ({"conditions": [{"kind": "activity", "package": "com.example.notes"}]},
     "conditions[0].kind activity is not checked on the web device"),
    ({"conditions": [{"kind": "url", "value": "/x", "match": "starts"}]}, "conditions[0].match is 'starts'"),
    ({"start": {"page": "../../etc/passwd"}}, "start.page: '../../etc/passwd' is outside the task's folder"),
    ({"start": {"page": "/etc/passwd"}}, "start.page: '/etc/passwd' is outside the task's folder"),
    ({"start": {"page": "missing.html"}}, "does not exist"),
    ({"start": {"url": "ftp://example.com/"}}, "start.url 'ftp://example.com/' is not an http or https address"),
    ({"start": {"url": "http://a/", "page": "b.html"}}, "give exactly one of url"),
    ({"start": {"url": "http://a/", "viewport": [10, 10]}}, "start.viewport must be [width, height]"),
])
def test_the_loader_names_the_file_and_the_field(tmp_path, change, message):
    path = _write(tmp_path, "t", _web_task(**change))
    with pytest.raises(TaskFileError) as info:
        load_task(path)
    assert message in str(info.value) and str(path.parent) in str(info.value)


def test_the_loader_refuses_huge_deep_and_broken_files(tmp_path):
    huge = tmp_path / "huge.json"
    with huge.open("w") as f:
        f.write('{"name": "huge", "pad": "' + "x" * (1024 * 1024) + '"}')
    with pytest.raises(TaskFileError, match=r"huge.json is 1,048,6\d\d bytes, more than 1,048,576"):
        load_task(huge)
    deep = _write(tmp_path, "deep", "[" * 5000 + "]" * 5000)
    with pytest.raises(TaskFileError, match="deep.json: cannot read it as JSON: .*nested more than 64"):
        load_task(deep)
    with pytest.raises(TaskFileError, match="broken.json: cannot read it as JSON"):
        load_task(_write(tmp_path, "broken", '{"format": '))
    with pytest.raises(TaskFileError, match="list.json: the task must be a JSON object, got a list"):
        load_task(_write(tmp_path, "list", "[]"))


def test_a_broken_file_is_listed_and_make_says_why(tasks):
    _write(tasks, "good", _web_task("good", start={"url": "http://127.0.0.1:1/x.html"}))
    _write(tasks, "bad", _web_task("bad", conditions=[{"kind": "element", "selector": "#a", "checkd": True}]))
    assert register_tasks(tasks) == ["tasks/bad", "tasks/good"]
    bad = next(s for s in all_specs("tasks") if s.name == "tasks/bad")
    assert bad.description.startswith("cannot be loaded:") and "checkd is not a field" in bad.description
    with pytest.raises(TaskFileError, match=r"bad.json: conditions\[0\].checkd is not a field"):
        make("tasks/bad")
    assert make("tasks/good").max_steps == 10


def test_every_condition_kind_round_trips(tmp_path):
    conditions = {
        "web": [{"kind": "url", "value": "/done.html", "match": "path_equals"},
                {"kind": "element", "selector": "#w >>> #b", "frame": "http://h/f.html", "value": "x",
                 "checked": False, "selected": ["北京"], "text_contains": "On"},
                {"kind": "text_visible", "text": "提交成功", "frame": "http://h/f.html"}],
        "android": [{"kind": "activity", "package": "com.example.notes", "activity": ".MainActivity"},
                    {"kind": "hierarchy_text", "text": "buy milk", "resource_id": "com.example.notes:id/field"}],
        "desktop": [{"kind": "window_title", "value": "Saved - Editor", "match": "equals"},
                    {"kind": "ocr_text", "text": "Saved", "box": [0.1, 0.2, 0.5, 0.4]}],
    }
    starts = {"web": {"url": "http://h/a.html"},
              "android": {"package": "com.example.notes", "commands": ["am force-stop com.example.list"]},
              "desktop": {"command": ["gedit", "--new-window"], "wait_s": 3}}
    for device, listed in conditions.items():
        task = {"format": "handeye-task/1", "name": device, "instruction": "做这个", "device": device,
                "start": starts[device], "conditions": listed}
        spec = load_task(_write(tmp_path, device, task))
        assert spec.language == "zh"
        again = load_task(_write(tmp_path / "again", device, spec.to_json()))
        assert again == spec and [condition_dict(c) for c in spec.conditions] == listed

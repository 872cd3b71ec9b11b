"""Derived tasks (envs/derived): recorded through the real web recorder with Playwright playing the person (trusted
input, as in tests/devices/test_web_recorder.py), derived, written, registered, and then the checker must pass on
the demonstration's own final state and fail on its start state (a fresh load of the start page), both through the
real environment; the recorded actions replayed through the environment end the episode with reward 1. Also: an
Android task on the protocol-level test phone, the loader's errors, and conformance."""

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
from devices.web_recorder import WebRecorder
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
from tests.envs.test_android_tasks import adb_port  # noqa: F401 - the private adb server fixture

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
        on_final = await live.check()
        await live.close()
    finally:
        await env.close()
    return {"spec": load_task(path), "episode": episode, "final": on_final, "path": path}


async def judge_start_and_replay(name: str, episode: Any, shared: PlaywrightDevice, replay: bool = True
                                 ) -> dict[str, Any]:
    env = make(f"tasks/{name}", device=shared)
    try:
        await env.reset(seed=0)
        on_start = await env.check()
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
    ({"start": {"url": "ftp://example.com/"}}, "start.url 'ftp://example.com/' needs one of the schemes"),
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
    with pytest.raises(TaskFileError, match=r"huge.json: 1,048,6\d\d bytes, more than 1,048,576"):
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


# -- Android, on the protocol-level test phone ---------------------------------------------------------------------
class ScriptedPhoneRecorder:
    """Stands in for the person and devices/android/recorder.py: does each scripted action on the phone and reports
    it as that recorder does (the pre-action frame, the target element from the UI hierarchy, ``info["package"]``).
    Like that recorder it reads no start state of its own: ``agent record --make-task`` does (``TaskMaker.watch``)."""

    def __init__(self, device: Any, actions: list[Action]) -> None:
        self.device, self.actions = device, list(actions)

    async def start(self) -> None:
        pass

    async def next_event(self) -> Any:
        from devices.recording import DemoEvent
        from envs.android.tasks import foreground_activity

        if not self.actions:
            return None
        action = self.actions.pop(0)
        frame = await self.device.observe()
        if action.point is not None:
            target = await self.device.element_at(action.point)
        else:
            target = await self.device.focused_element()
        package, _ = await foreground_activity(self.device)
        await self.device.act(action)
        await self.device.settle()
        return DemoEvent(action, 0.0, frame, target=target, info={"package": package})

    async def observe(self) -> Any:
        return await self.device.observe()

    async def stop(self) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {"kind": "android"}


class Quiet:
    def print(self, *args: Any, **kwargs: Any) -> None:
        pass


NOTE = [Action(ActionKind.CLICK, point=Point(0.5, 0.2)),  # the Notes button on the home screen
        Action(ActionKind.CLICK, point=Point(0.5, 0.19)),  # its text field
        Action(ActionKind.TYPE, text="buy milk")]


def test_an_android_task_fails_at_its_start_and_passes_after_the_demonstration_is_replayed(adb_port, tmp_path,
                                                                                           tasks):
    from agent.derived_tasks import TaskMaker
    from devices.android import AndroidConfig, AndroidDevice
    from envs.derived.spec import ActivityCondition, AndroidStart, HierarchyTextCondition
    from tests.devices.test_android import _connect, _disconnect
    from tests.support.fake_adbd import FakeAdbd, FakePhone

    phone = FakePhone(physical=(360, 800))
    phone.text = "left-over draft"  # the notes app's unsaved draft: the start recipe must drop it

    async def record(serial: str, maker: TaskMaker) -> tuple[Any, Path]:
        """The demonstration, as `agent record --device android --make-task note` runs it."""
        device = AndroidDevice(AndroidConfig(serial=serial, adb_port=adb_port))
        await device.start()
        try:
            await device.shell("am force-stop com.example.notes", "drop the draft")
            recorder = ScriptedPhoneRecorder(device, NOTE)
            maker.watch(recorder)
            writer = RunWriter(tmp_path / "runs", config={}).episode(task="Write 'buy milk' in Notes",
                                                                      actor=Actor.HUMAN)
            env = RecordingEnv(recorder, "Write 'buy milk' in Notes")
            await record_demonstration(env, writer)
            await maker.read_final(recorder, writer.path)
        finally:
            await device.close()
        return recorder, writer.path

    async def judge(serial: str, episode_path: Path) -> dict[str, Any]:
        out: dict[str, Any] = {}
        task_env = make("tasks/note", serial=serial, adb_port=adb_port)
        try:
            phone.text = "buy milk"  # what a previous episode left behind
            await task_env.reset(seed=0)
            out["start"] = await task_env.check()
            out["finish_at_start"] = (await task_env.step(Action(ActionKind.FINISH)))[1:3]
            await task_env.reset(seed=1)
            for action in [Action.from_dict(s.action) for s in read_episode(episode_path).steps][:-1]:
                _, reward, terminated, _, info = await task_env.step(action)
            out["replay"] = (reward, terminated, info.get("success"))
        finally:
            await task_env.close()
        await check_env(make("tasks/note", serial=serial, adb_port=adb_port))
        return out

    with FakeAdbd(phone) as adbd:
        _connect(adb_port, adbd)
        try:
            maker = TaskMaker("note", tasks, kind="android")
            recorder, episode_path = asyncio.run(record(adbd.address, maker))
            assert recorder.start_state["activity"] == "com.example.launcher/.MainActivity"
            assert maker.finish(Quiet(), recorder, episode_path, None, ask=lambda prompt: "y")
            register_tasks(tasks)
            out = asyncio.run(judge(adbd.address, episode_path))
            out["spec"] = load_task(tasks / "note.json")
        finally:
            _disconnect(adb_port, adbd)
    spec = out["spec"]
    assert spec.conditions == (ActivityCondition("com.example.notes", ".MainActivity"),
                               HierarchyTextCondition("buy milk", "com.example.notes:id/field"))
    assert spec.start == AndroidStart("com.example.launcher", ".MainActivity", ("am force-stop com.example.notes",))
    assert not out["start"].success and out["finish_at_start"] == (0.0, True)
    assert out["replay"] == (1.0, True, True)


# -- the desktop, on states as its recorder and OCR give them ------------------------------------------------------
class ListRecorder:
    """Replays prepared DemoEvents (the desktop recorder's form: a target box, ``info["window"]``)."""

    def __init__(self, events: list[Any]) -> None:
        self.events = list(events)

    async def start(self) -> None:
        pass

    async def next_event(self) -> Any:
        return self.events.pop(0) if self.events else None

    async def observe(self) -> Any:
        from devices.base import Observation
        import numpy as np

        return Observation(frame=np.zeros((60, 80, 3), np.uint8))

    async def stop(self) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {"kind": "desktop"}


def test_a_desktop_task_is_derived_from_the_title_and_the_text_near_the_last_target(tmp_path):
    import numpy as np

    from devices.base import Box, ElementInfo, Observation
    from devices.recording import DemoEvent
    from envs.derived import check
    from envs.derived.env import DerivedTaskEnv
    from envs.derived.spec import OcrTextCondition, WindowTitleCondition
    from envs.errors import EnvError

    frame = Observation(frame=np.zeros((60, 80, 3), np.uint8))
    window = {"window": "0x1", "name": "notes.txt - Editor", "class": ["editor", "Editor"]}
    events = [DemoEvent(Action(ActionKind.TYPE, text="hello"), 1.0, frame, target=ElementInfo("", None, "window"),
                        info={"window": window}),
              DemoEvent(Action(ActionKind.CLICK, point=Point(0.5, 0.1)), 2.0, frame,
                        target=ElementInfo("Save", Box(0.45, 0.05, 0.55, 0.15), "push button"),
                        info={"window": window})]
    writer = RunWriter(tmp_path / "runs", config={}).episode(task="Save the note", actor=Actor.HUMAN)
    asyncio.run(record_demonstration(RecordingEnv(ListRecorder(events), "Save the note"), writer))
    start = {"window_title": "notes.txt - Editor", "ocr": [{"text": "Unsaved", "box": [0.4, 0.2, 0.6, 0.25]}]}
    final = {"window_title": "notes.txt (saved) - Editor",
             "ocr": [{"text": "hello", "box": [0.1, 0.5, 0.2, 0.55]},         # what was typed: not a condition
                     {"text": "Saved to disk", "box": [0.4, 0.2, 0.6, 0.25]},  # near the Save button: one
                     {"text": "Status: ok", "box": [0.0, 0.9, 0.2, 0.95]}]}   # far from it: not
    spec = derive_task(read_episode(writer.path), start, final, "save")
    assert spec.conditions[0] == WindowTitleCondition("notes.txt (saved) - Editor", TextMatch.EQUALS)
    assert [c.text for c in spec.conditions[1:]] == ["Saved to disk"]
    assert isinstance(spec.conditions[1], OcrTextCondition) and spec.conditions[1].box.contains(0.5, 0.22)
    assert all(r.holds for r in check(spec.conditions, final))
    assert not any(r.holds for r in check(spec.conditions, start))
    path = write_task(spec, tmp_path / "tasks")
    with pytest.raises(EnvError, match="OCR"):
        DerivedTaskEnv(path)  # ocr_text conditions need a text reader, which environments cannot build


EDITOR_APP = """
import tkinter as tk
root = tk.Tk()
root.title("Editor")
root.geometry("300x200+0+0")
tk.Button(root, text="Save", command=lambda: root.title("Editor - saved")).place(x=50, y=50, width=100, height=40)
root.after(200, root.focus_force)
root.mainloop()
"""

DESKTOP_SCENARIO = """
import asyncio, json
from devices.actions import Action, ActionKind, Point
from envs.registry import make

async def main():
    env = make("tasks/save")
    try:
        await env.reset()
        first = await env.check()
        clicked = await env.step(Action(ActionKind.CLICK, point=Point(100 / 640, 70 / 480)))
        await env.reset()  # the app starts again, unsaved
        again = await env.check()
    finally:
        await env.close()
    print(json.dumps({"first": [first.success, first.details], "clicked": list(clicked[1:4]) + [clicked[4]["success"]],
                      "again": again.success}))

asyncio.run(main())
"""


def test_a_desktop_task_starts_its_app_and_reads_the_focused_window_title(tmp_path):
    """On a private Xvfb, in a process of its own (pyautogui binds a process to one display)."""
    import os
    import subprocess
    import sys
    import time

    from tests.conftest import REPO
    from tests.devices.test_desktop import _free_display, _need

    task = {"format": "handeye-task/1", "name": "save", "instruction": "Save the document", "device": "desktop",
            "start": {"command": [sys.executable, "-c", EDITOR_APP], "wait_s": 1.5},
            "conditions": [{"kind": "window_title", "value": "Editor - saved", "match": "equals"}]}
    folder = _write(tmp_path / "tasks", "save", task).parent
    number = _free_display()
    xvfb = subprocess.Popen([_need("Xvfb"), f":{number}", "-screen", "0", "640x480x24", "-nolisten", "tcp"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        env = {**os.environ, "DISPLAY": f":{number}", "HANDEYE_TASKS_DIR": str(folder),
               "XAUTHORITY": str(tmp_path / "xauth")}
        (tmp_path / "xauth").touch()
        deadline = time.monotonic() + 10
        while not os.path.exists(f"/tmp/.X11-unix/X{number}"):
            assert xvfb.poll() is None and time.monotonic() < deadline, f"Xvfb :{number} did not start"
            time.sleep(0.02)
        proc = subprocess.run([sys.executable, "-c", DESKTOP_SCENARIO], cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=120)
    finally:
        xvfb.terminate()
        xvfb.wait(10)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["first"][0] is False and out["first"][1]["conditions"][0]["actual"] == "Editor"
    assert out["clicked"] == [1.0, True, False, True]
    assert out["again"] is False

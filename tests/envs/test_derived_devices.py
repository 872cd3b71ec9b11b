"""Derived tasks on a phone and a desktop: an Android task recorded on the protocol-level test phone
(tests/support/fake_adbd.py) and derived as `agent record --make-task` does fails at its start and passes when the
demonstration is replayed; desktop tasks are derived from the window title and OCR lines, and a desktop task starts
its app on Xvfb and reads the focused window's title."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agent.record import record_demonstration
from devices.actions import Action, ActionKind, Point
from envs.conformance import check_env
from envs.derived import derive_task, load_task, register_tasks
from envs.derived.spec import TextMatch, write_task
from envs.records import Actor
from envs.recording import RecordingEnv
from envs.registry import make
from envs.trajectory import RunWriter, read_episode
from tests.envs.test_android_tasks import adb_port  # noqa: F401 - the private adb server fixture
from tests.envs.test_derived import _write
from tests.support import procs


@pytest.fixture
def tasks(tmp_path, monkeypatch):
    folder = tmp_path / "tasks"
    monkeypatch.setenv("HANDEYE_TASKS_DIR", str(folder))
    yield folder
    register_tasks(tmp_path / "nowhere")  # leave no tasks of this test registered


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
            out["start"] = await task_env.unwrapped.check()
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
import asyncio, json, os
from devices.actions import Action, ActionKind, Point
from envs.derived import trust_tasks
from envs.registry import make

trust_tasks(os.environ["HANDEYE_TASKS_DIR"])  # the task starts its app: a command (--trust-tasks)

async def main():
    env = make("tasks/save")
    try:
        await env.reset()
        first = await env.unwrapped.check()
        clicked = await env.step(Action(ActionKind.CLICK, point=Point(100 / 640, 70 / 480)))
        await env.reset()  # the app starts again, unsaved
        again = await env.unwrapped.check()
    finally:
        await env.close()
    print(json.dumps({"first": [first.success, first.details], "clicked": list(clicked[1:4]) + [clicked[4]["success"]],
                      "again": again.success}))

asyncio.run(main())
"""


def test_a_desktop_task_starts_its_app_and_reads_the_focused_window_title(tmp_path):
    """On a private Xvfb, in a process of its own (pyautogui binds a process to one display)."""
    import os
    import sys

    from tests.conftest import REPO
    from tests.support.xvfb import start_xvfb, stop_xvfb

    task = {"format": "handeye-task/1", "name": "save", "instruction": "Save the document", "device": "desktop",
            "start": {"command": [sys.executable, "-c", EDITOR_APP], "wait_s": 1.5},
            "conditions": [{"kind": "window_title", "value": "Editor - saved", "match": "equals"}]}
    folder = _write(tmp_path / "tasks", "save", task).parent
    xvfb, display = start_xvfb("640x480")
    try:
        env = {**os.environ, "DISPLAY": display, "HANDEYE_TASKS_DIR": str(folder),
               "XAUTHORITY": str(tmp_path / "xauth")}
        (tmp_path / "xauth").touch()
        proc = procs.run([sys.executable, "-c", DESKTOP_SCENARIO], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=120)
    finally:
        stop_xvfb(xvfb)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["first"][0] is False and out["first"][1]["conditions"][0]["actual"] == "Editor"
    assert out["clicked"] == [1.0, True, False, True]
    assert out["again"] is False

"""``check_env`` on every registered environment (``envs.registry.all_specs()``), each on what it runs on here:

- web environments (generated screens, MiniWoB++, the benchmark's shape screens, a derived web task) on one shared
  Chromium;
- Android environments (the Android tasks, a derived Android task) on the protocol-level test phone
  (tests/support/fake_adbd.py) through a private adb server;
- desktop environments (the generated screens in a full-screen browser, a derived desktop task that starts a Tk
  app) each in a process of its own on a private Xvfb (pyautogui binds a process to one display).

The derived tasks ("tasks/*") are this module's own task files, one per device kind. A suite registered without a
way to check it here fails ``test_every_registered_environment_is_checked``: give it one below.

Run time: ``check_env`` on all 130 MiniWoB++ tasks took 153 s on the 2-core development machine, so the default run
checks a spread of them (every tenth in registry order, and those that once broke the contract: the natural-language
tasks and the ones whose frames move), which covers every environment class; ``make test-all`` (``-m slow``)
checks every one.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys

import miniwob  # noqa: F401 - installed by scripts/setup.sh: MiniWoB++ is checked, never skipped
import pytest

import bench.online.shapes  # noqa: F401 - registers "bench/*": registered environments are all checked
from devices.web import PlaywrightDevice, WebConfig
from envs.conformance import check_env
from envs.derived import register_tasks
from envs.miniwob.tasks import UNSTEADY_FRAMES
from envs.registry import all_specs
from tests.conftest import REPO
from tests.envs.test_android_tasks import adb_port, on_env  # noqa: F401 - the private adb server fixture
from tests.support.xvfb import start_xvfb, stop_xvfb

PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>Terms</title></head><body style="margin:0">
<label style="position:absolute;left:40px;top:60px"><input id="agree" type="checkbox"> I agree to the terms</label>
</body></html>"""

TK_APP = """
import tkinter as tk
root = tk.Tk()
root.title("Editor")
root.geometry("300x200+0+0")
tk.Button(root, text="Save", command=lambda: root.title("Editor - saved")).place(x=50, y=50, width=100, height=40)
root.mainloop()
"""

TASK_FILES = {
    "web-tick": {"instruction": "Tick the box", "device": "web",
                 "start": {"page": "site/terms.html", "viewport": [640, 400]},
                 "conditions": [{"kind": "element", "selector": "#agree", "checked": True}]},
    "android-notes": {"instruction": "Open the notes app", "device": "android",
                      "start": {"package": "com.example.launcher", "activity": ".MainActivity",
                                "commands": ["am force-stop com.example.notes"]},
                      "conditions": [{"kind": "activity", "package": "com.example.notes"}]},
    "desktop-save": {"instruction": "Save the document", "device": "desktop",
                     "start": {"command": [sys.executable, "-c", TK_APP], "wait_s": 1.5},
                     "conditions": [{"kind": "window_title", "value": "Editor - saved", "match": "equals"}]},
}
"""This module's derived tasks, one per device kind."""

NL_TASKS = ("email-inbox-forward-nl", "email-inbox-forward-nl-turk", "email-inbox-nl-turk")
"""MiniWoB++ tasks whose utterance comes with its parsed answer (``{utterance, fields}``)."""


def _names(suite: str) -> list[str]:
    return [s.name for s in all_specs(suite)]


MINIWOB = _names("miniwob")
MINIWOB_SPREAD = set(MINIWOB[::10]) | {f"miniwob/{t}" for t in (*UNSTEADY_FRAMES, *NL_TASKS)}

WEB = [*_names("generated"), *_names("bench"), "tasks/web-tick",
       *[n if n in MINIWOB_SPREAD else pytest.param(n, marks=pytest.mark.slow) for n in MINIWOB]]
ANDROID = [*_names("android"), "tasks/android-notes"]
DESKTOP = [*_names("desktop"), "tasks/desktop-save"]


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    """This module's task files, registered as "tasks/*" (and named by $HANDEYE_TASKS_DIR for the desktop's
    processes); no task of this module stays registered afterwards."""
    folder = tmp_path_factory.mktemp("tasks")
    (folder / "site").mkdir()
    (folder / "site" / "terms.html").write_text(PAGE, encoding="utf-8")
    for name, task in TASK_FILES.items():
        (folder / f"{name}.json").write_text(json.dumps({"format": "handeye-task/1", "name": name, **task}),
                                             encoding="utf-8")
    assert register_tasks(folder) == sorted(f"tasks/{n}" for n in TASK_FILES)
    yield folder
    register_tasks(folder / "nowhere")


@pytest.fixture(scope="module")
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="module")
def browser(loop):
    """One Chromium for every web environment (each borrows it: ``device=``)."""
    device = PlaywrightDevice(WebConfig())
    loop.run_until_complete(device.start())
    yield device
    loop.run_until_complete(device.close())


def _spec(name: str):
    (spec,) = [s for s in all_specs() if s.name == name]
    return spec


def test_every_registered_environment_is_checked(tasks):
    checked = {p if isinstance(p, str) else p.values[0] for p in (*WEB, *ANDROID, *DESKTOP)}
    registered = {s.name for s in all_specs()}
    assert registered - checked == set(), "registered environments this module does not check: give them a set-up"
    assert checked - registered == set()
    assert {"generated", "miniwob", "bench", "android", "desktop", "tasks"} == {s.suite for s in all_specs()}


@pytest.mark.parametrize("name", WEB)
def test_every_web_environment_conforms(loop, browser, tasks, name):
    same_frames = name.removeprefix("miniwob/") not in UNSTEADY_FRAMES
    loop.run_until_complete(check_env(_spec(name).make(device=browser), same_frames=same_frames))


def test_a_natural_language_miniwob_task_is_instructed_by_its_utterance_alone(loop, browser):
    """Outside its test mode such a page answers its utterance with the answer parsed from it, which the instruction
    must not carry (it was the whole ``{utterance, fields}`` object before)."""
    env = _spec("miniwob/email-inbox-nl-turk").make(device=browser)
    try:
        _, info = loop.run_until_complete(env.reset(seed=0))
    finally:
        loop.run_until_complete(env.close())
    assert isinstance(info["instruction"], str) and "fields" not in info["instruction"]
    assert len(info["instruction"]) > 10


@pytest.mark.parametrize("name", ANDROID)
def test_every_android_environment_conforms(adb_port, tasks, name):  # noqa: F811 - the fixture imported above
    on_env(adb_port, name, lambda env, phone: check_env(env))


DESKTOP_CHECK = """
import asyncio, os, sys
from envs.conformance import check_env
from envs.derived import trust_tasks
from envs.registry import make

trust_tasks(os.environ["HANDEYE_TASKS_DIR"])  # tasks/desktop-save starts its app: a command (--trust-tasks)
asyncio.run(check_env(make(sys.argv[1])))
print("CONFORMS")
"""


@pytest.mark.parametrize("name", DESKTOP)
def test_every_desktop_environment_conforms(tasks, tmp_path, name):
    xvfb, display = start_xvfb("1280x800")  # the generated desktop screens' size
    (tmp_path / "xauth").touch()
    env = {**os.environ, "DISPLAY": display, "XDG_SESSION_TYPE": "x11", "HANDEYE_TASKS_DIR": str(tasks),
           "XAUTHORITY": str(tmp_path / "xauth")}
    try:
        proc = subprocess.Popen([sys.executable, "-c", DESKTOP_CHECK, name], cwd=REPO, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=240)
        finally:
            try:  # whatever it left running (Chromium, the Tk app), and itself when it timed out
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            if proc.poll() is None:
                proc.communicate()
    finally:
        stop_xvfb(xvfb)
    assert proc.returncode == 0 and "CONFORMS" in out, err[-3000:]

"""``agent record --make-task``: the command records a demonstration (Playwright plays the person with trusted input
inside the command's own event loop), derives the task, writes it where --tasks-dir says, and ``agent eval --suite
tasks`` then runs it: the recorded actions as a script succeed. The review at a terminal keeps, edits or drops it."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from agent.cli import main as agent_main
from agent.cli import record as record_command
from agent.derived_tasks import TaskMaker, review
from envs.derived import load_task
from envs.derived.spec import ElementCondition, TextVisibleCondition, write_task
from envs.errors import TaskFileError
from envs.trajectory import iter_episodes
from tests.conftest import REPO
from tests.support import procs

PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>Newsletter</title></head>
<body style="margin:0;font:16px sans-serif">
<input id="email" aria-label="Email" style="position:absolute;left:40px;top:40px;width:240px;height:30px">
<button id="join" style="position:absolute;left:40px;top:90px;width:120px;height:36px"
  onclick="document.getElementById('msg').textContent = 'Welcome aboard!'">Join</button>
<div id="msg" style="position:absolute;left:40px;top:150px"></div>
</body></html>"""


async def play(page) -> None:
    async def click(selector: str) -> None:
        box = await page.locator(selector).bounding_box()
        await page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        await asyncio.sleep(0.6)

    await click("#email")
    await page.keyboard.type("zoe@example.com")
    await click("#join")
    await page.keyboard.press("Control+Alt+s")


@pytest.fixture
def played(monkeypatch):
    """``agent record`` builds its recorder as usual; a player starts on the page once the recorder is ready."""
    made = record_command.make_recorder

    def make_recorder(cfg, args):
        recorder, site = made(cfg, args)
        start = recorder.start

        async def start_and_play():
            await start()
            asyncio.ensure_future(play(recorder.device.page))

        recorder.start = start_and_play
        return recorder, site

    monkeypatch.setattr(record_command, "make_recorder", make_recorder)


def test_record_make_task_then_eval_runs_it(tmp_path, site, pages_dir, played, capsys):
    (pages_dir / "join.html").write_text(PAGE, encoding="utf-8")
    tasks, runs = tmp_path / "my-tasks", tmp_path / "runs"
    code = agent_main(["record", "Join the newsletter as zoe@example.com", "--url", site.url("join.html"),
                       "--headless", "--make-task", "join", "--tasks-dir", str(tasks), "--runs-dir", str(runs)])
    out = capsys.readouterr().out
    assert code == 0, out
    path = tasks / "join.json"
    assert f"task written: {path}" in " ".join(out.split()) and "agent eval --suite tasks --tasks join" in out
    spec = load_task(path)
    assert ElementCondition("#email", value="zoe@example.com") in spec.conditions
    assert TextVisibleCondition("Welcome aboard!") in spec.conditions
    assert spec.start.url == site.url("join.html") and spec.source.startswith(str(runs))
    # the name is taken now: refused before anyone records anything
    assert agent_main(["record", "again", "--url", site.url("join.html"), "--headless", "--make-task", "join",
                       "--tasks-dir", str(tasks)]) == 2
    assert "exists" in capsys.readouterr().out

    # the recorded actions, replayed by `agent eval` as a script, do the task: success
    episode = next(iter_episodes(next(runs.iterdir())))
    script = tmp_path / "script.json"
    script.write_text(json.dumps([s.action for s in episode.steps if s.action["kind"] != "finish"]))
    env = {**os.environ, "HANDEYE_TASKS_DIR": str(tasks), "HF_HUB_OFFLINE": "1"}
    proc = procs.run([sys.executable, "-m", "agent", "eval", "--suite", "tasks", "--tasks", "join",
                      "--episodes", "1", "--policy", "scripted", "--script", str(script), "--runs-dir",
                      str(tmp_path / "eval")], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    scores = json.loads(next((tmp_path / "eval").glob("*/eval.json")).read_text())
    assert scores["envs"]["tasks/join"]["success_rate"] == 1.0, scores
    assert scores["episodes"][0]["outcome"] == "success"


def test_bad_names_are_refused_before_recording(tmp_path):
    with pytest.raises(TaskFileError, match="lowercase"):
        TaskMaker("Bad Name!", tmp_path)
    (tmp_path / "taken.json").write_text("{}")
    with pytest.raises(TaskFileError, match="exists"):
        TaskMaker("taken", tmp_path)


class Console:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def print(self, text: str = "", **_: object) -> None:
        self.lines.append(text)


def _task(tmp_path: Path) -> Path:
    from envs.derived.spec import DeviceKind, TaskSpec, WebStart

    spec = TaskSpec("join", "Join", DeviceKind.WEB, WebStart("http://127.0.0.1:1/join.html"),
                    (ElementCondition("#email", value="zoe@example.com"),))
    return write_task(spec, tmp_path)


def test_review_keeps_edits_and_drops(tmp_path, monkeypatch):
    path = _task(tmp_path)
    answers = iter(["e", "y"])
    monkeypatch.setenv("VISUAL", "sed -i s/zoe@example.com/zoé@example.com/")
    kept = review(Console(), path, ask=lambda prompt: next(answers))
    assert kept is not None and kept.conditions == (ElementCondition("#email", value="zoé@example.com"),)
    assert load_task(path) == kept

    # an edit that breaks the file is shown, and the person may drop it
    console, answers = Console(), iter(["e", "n"])
    monkeypatch.setenv("VISUAL", "sed -i s/value/valeur/")
    assert review(console, path, ask=lambda prompt: next(answers)) is None
    assert not path.exists() and any("valeur is not a field" in line for line in console.lines)

    path = _task(tmp_path)
    assert review(Console(), path, ask=lambda prompt: "n") is None and not path.exists()


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_a_derived_web_task_runs_in_an_online_session_with_episode_groups(tmp_path, monkeypatch):
    """The session's actors reset the task to its start page, play it with the tiny model and report episodes."""
    from agent.online import OnlineConfig, OnlineSession
    from envs.derived import register_tasks
    from tests.agent.test_online import config, until

    tasks = tmp_path / "tasks"
    (tasks / "site").mkdir(parents=True)
    (tasks / "site" / "join.html").write_text(PAGE, encoding="utf-8")
    (tasks / "join.json").write_text(json.dumps({
        "format": "handeye-task/1", "name": "join", "instruction": "Join the newsletter", "device": "web",
        "start": {"page": "site/join.html", "viewport": [640, 360]}, "max_steps": 2,
        "conditions": [{"kind": "text_visible", "text": "Welcome aboard!"}]}))
    register_tasks(tasks)
    try:
        session = OnlineSession(config(tmp_path / "run", "train.steps=100"),
                                OnlineConfig(env="tasks/join", actors=1, group_level="episode",
                                             progress_every_s=1000.0))

        async def scenario():
            running = asyncio.create_task(session.run())
            await until(lambda: session.actors and session.actors[0].episodes >= 3, timeout=240)
            session.request_stop("test")
            return await running

        asyncio.run(scenario())
    finally:
        register_tasks(tmp_path / "nowhere")
    episodes = [e for e in iter_episodes(next(p for p in (tmp_path / "run").rglob("run.json")).parent)]
    assert len(episodes) >= 3 and all(e.record.env["name"] == "tasks/join" for e in episodes)


def test_a_task_recorded_on_the_built_in_page_carries_its_page(tmp_path, monkeypatch, capsys):
    """Without --url the recording starts on the built-in demo page, served only while `agent record` runs: the page
    is copied next to the task, which starts from it."""
    made = record_command.make_recorder

    async def subscribe(page) -> None:
        box = await page.locator("#subscribe").bounding_box()
        await page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        await asyncio.sleep(0.6)
        await page.keyboard.press("Control+Alt+s")

    def make_recorder(cfg, args):
        recorder, site = made(cfg, args)
        start = recorder.start

        async def start_and_play():
            await start()
            asyncio.ensure_future(subscribe(recorder.device.page))

        recorder.start = start_and_play
        return recorder, site

    monkeypatch.setattr(record_command, "make_recorder", make_recorder)
    monkeypatch.setenv("HANDEYE_TASKS_DIR", str(tmp_path / "tasks"))
    code = agent_main(["record", "Click Subscribe", "--headless", "--make-task", "subscribe", "--runs-dir",
                       str(tmp_path / "runs")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "HANDEYE_TASKS_DIR" not in out  # the default folder: `agent eval --suite tasks` finds it as is
    spec = load_task(tmp_path / "tasks" / "subscribe.json")
    assert spec.start.page == "demo.html" and not spec.start.url and (tmp_path / "tasks" / "demo.html").is_file()
    assert TextVisibleCondition("Subscribed, thank you!") in spec.conditions


def test_no_task_when_the_recording_is_interrupted(tmp_path, site, pages_dir, monkeypatch, capsys):
    """Ctrl-C (here SIGINT) keeps the demonstration, marked interrupted, and derives nothing from it."""
    import signal

    (pages_dir / "join.html").write_text(PAGE, encoding="utf-8")
    made = record_command.make_recorder

    async def interrupt(page) -> None:
        box = await page.locator("#join").bounding_box()
        await page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        await asyncio.sleep(0.6)
        os.kill(os.getpid(), signal.SIGINT)

    def make_recorder(cfg, args):
        recorder, site_ = made(cfg, args)
        start = recorder.start

        async def start_and_play():
            await start()
            asyncio.ensure_future(interrupt(recorder.device.page))

        recorder.start = start_and_play
        return recorder, site_

    monkeypatch.setattr(record_command, "make_recorder", make_recorder)
    code = agent_main(["record", "Join", "--url", site.url("join.html"), "--headless", "--make-task", "join",
                       "--tasks-dir", str(tmp_path / "tasks"), "--runs-dir", str(tmp_path / "runs")])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 128 + signal.SIGINT, out
    assert not (tmp_path / "tasks" / "join.json").exists() and "no task made: the recording was interrupted" in out

"""The attacks of tests/envs/test_files_on_disk.py through the commands a person types: ``agent envs`` on a task
whose instruction is rich markup, ``agent eval`` on a task that runs a command (refused, naming the flag; run with
``--trust-tasks``), ``agent data show`` on a pixel bomb and on a dataset naming an absolute image path, ``agent data
export`` on a run whose ``frame_path`` names a file outside it."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from agent.cli import main
from envs.derived import register_tasks
from envs.errors import TaskFileError
from tests.conftest import REPO
from tests.envs.test_files_on_disk import RUN, _parquet, _png, png_bomb, task_file


@pytest.fixture
def tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    folder = tmp_path / "downloaded" / "tasks"
    folder.mkdir(parents=True)
    monkeypatch.setenv("HANDEYE_TASKS_DIR", str(folder))
    yield folder
    register_tasks(tmp_path / "nowhere")


@pytest.mark.parametrize("instruction", ["[/bold] Tick the box", "Save [red]now[/", "[link=file:///etc/passwd]x[/link]",
                                         "[/]"])
def test_agent_envs_shows_a_markup_instruction_as_text(tasks, capsys, instruction):
    task_file(tasks, "markup", instruction=instruction)
    task_file(tasks, "plain")
    register_tasks(tasks)
    assert main(["envs", "--suite", "tasks"]) == 0
    out = capsys.readouterr().out
    assert f"desktop: {instruction}" in out and "tasks/plain" in out  # every task listed, the text as written


def test_agent_eval_refuses_a_task_that_runs_a_command_and_names_the_flag(tasks, tmp_path, capsys):
    marker = tmp_path / "ran"
    task_file(tasks, "evil", start={"command": [sys.executable, "-c", f"open({str(marker)!r}, 'w')"], "wait_s": 0})
    register_tasks(tasks)
    code = main(["eval", "--suite", "tasks", "--tasks", "evil", "--policy", "scripted", "--script", "[]",
                 "--runs-dir", str(tmp_path / "runs")])
    captured = capsys.readouterr()
    err = captured.out + captured.err
    assert code == 2, err
    assert "start.command runs" in err and f"--trust-tasks {tasks.resolve()}" in err
    assert not marker.exists() and not (tmp_path / "runs").exists()  # refused before any device or run started


def test_agent_eval_runs_the_command_of_a_folder_named_by_trust_tasks(tasks, tmp_path):
    from tests.agent.test_cli import agent
    from tests.support.xvfb import start_xvfb, stop_xvfb

    marker = tmp_path / "ran"
    task_file(tasks, "mine", start={"command": [sys.executable, "-c", f"open({str(marker)!r}, 'w').write('ok')"],
                                    "wait_s": 0.5})
    script = tmp_path / "finish.json"
    script.write_text(json.dumps([{"kind": "finish"}]), encoding="utf-8")
    xvfb, display = start_xvfb("640x480")
    old = os.environ.get("DISPLAY")
    try:
        os.environ["DISPLAY"] = display
        result = agent("eval", "--suite", "tasks", "--tasks", "mine", "--episodes", "1", "--policy", "scripted",
                       "--script", str(script), "--runs-dir", str(tmp_path / "runs"), "--trust-tasks", str(tasks),
                       cwd=REPO, timeout=180)
    finally:
        os.environ.pop("DISPLAY") if old is None else os.environ.__setitem__("DISPLAY", old)
        stop_xvfb(xvfb)
    assert marker.read_text() == "ok", result.stdout[-2000:] + result.stderr[-3000:]


def test_agent_data_show_refuses_a_pixel_bomb_and_an_image_outside_its_folder(tmp_path, capsys):
    pytest.importorskip("pyarrow")
    outside = tmp_path / "private.png"
    outside.write_bytes(_png(200))
    folder = tmp_path / "data"
    folder.mkdir()
    data = _parquet(folder / "guiodyssey_test.parquet", [
        {"bytes": png_bomb(20000, 20000), "path": "bomb.png"}, {"bytes": None, "path": str(outside)},
        {"bytes": None, "path": "../private.png"}])
    code = main(["data", "show", str(data), "--out", str(tmp_path / "drawn")])
    captured = capsys.readouterr()
    logged = captured.out + captured.err  # the CLI's warnings go to the terminal
    assert code == 2 and "no record of" in logged
    assert not list((tmp_path / "drawn").glob("*.png"))
    assert "declares 20000x20000 pixels" in logged and "is absolute or leaves its folder" in logged


def test_agent_data_export_copies_no_file_a_record_names_outside_its_run(tmp_path, capsys):
    pq = pytest.importorskip("pyarrow.parquet")
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"root:x:0:0:the secret\n")
    run = tmp_path / "runs" / "run"
    shutil.copytree(RUN, run)
    steps_file = run / "ep0000" / "steps.jsonl"
    steps = [json.loads(line) for line in steps_file.read_text(encoding="utf-8").splitlines()]
    steps[1]["frame_path"], steps[2]["frame_path"] = "/etc/passwd", "../../../../../../../../" + str(secret)
    steps_file.write_text("".join(json.dumps(s) + "\n" for s in steps), encoding="utf-8")
    out = tmp_path / "steps.parquet"
    assert main(["data", "export", str(run), "--out", str(out)]) == 0
    assert "exported 1 steps" in capsys.readouterr().out
    images = [row["bytes"] for row in pq.read_table(out, columns=["image"]).column(0).to_pylist()]
    assert images == [(RUN / "ep0000" / "frames" / "0000.png").read_bytes()]


def test_a_demonstration_recorded_at_a_file_page_makes_a_task_that_loads(tmp_path):
    """``agent record --url file:///...`` is the person's own URL; the task it makes starts at a copy of the page
    next to the task file (task files start only at http(s) addresses)."""
    from agent.derived_tasks import TaskMaker
    from envs.derived import load_task
    from envs.derived.spec import DeviceKind, TaskSpec, TextVisibleCondition, WebStart, write_task

    page = tmp_path / "site" / "form page.html"
    page.parent.mkdir()
    page.write_text("<p>Thanks</p>", encoding="utf-8")
    folder = tmp_path / "tasks"
    maker = TaskMaker("form", folder, kind="web")
    spec = TaskSpec("form", "Send the form", DeviceKind.WEB, WebStart(page.as_uri(), viewport=(800, 600)),
                    (TextVisibleCondition("Thanks"),))
    made = maker.with_local_page(spec)
    loaded = load_task(write_task(made, folder))
    assert loaded.start.page == "form page.html" and loaded.start.url == ""
    assert (folder / "form page.html").read_text(encoding="utf-8") == "<p>Thanks</p>"
    with pytest.raises(TaskFileError, match="is not a file here"):
        maker.with_local_page(TaskSpec("form", "x", DeviceKind.WEB, WebStart("file:///nowhere/x.html"),
                                       (TextVisibleCondition("x"),)))

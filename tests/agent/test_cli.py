"""The `agent` command end to end, as a user runs it: a real subprocess, real Chromium, real OCR."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from envs.records import Outcome
from envs.trajectory import iter_episodes
from tests.conftest import REPO
from tests.support import procs


def agent(*args: str, cwd: Path = REPO, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return procs.run([sys.executable, "-m", "agent", *args], cwd=cwd, env=env, capture_output=True,
                     text=True, timeout=timeout)


def only_episode(runs: Path):
    (run_dir,) = list(runs.iterdir())
    (episode,) = list(iter_episodes(run_dir))
    return run_dir, episode


def test_run_on_the_builtin_page_succeeds_and_leaves_a_readable_trajectory(tmp_path):
    runs = tmp_path / "runs"
    result = agent("run", "--runs-dir", str(runs))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
    run_dir, episode = only_episode(runs)
    assert str(episode.path) in result.stdout.replace("\n", "")
    assert episode.record.outcome is Outcome.SUCCESS
    assert episode.record.verifier["clicked"] == "subscribe"
    assert [s.action["kind"] for s in episode.steps] == ["click", "finish"]
    assert episode.steps[0].target["id"] == "subscribe"
    run_json = json.loads((run_dir / "run.json").read_text())
    assert run_json["config"]["agent"]["max_steps"] == 15
    assert run_json["config"]["record"]["runs_dir"] == str(runs)
    assert "playwright" in run_json["versions"]
    shown = agent("show", str(run_dir))
    assert shown.returncode == 0 and "success" in shown.stdout and "click" in shown.stdout


def test_chinese_builtin_task(tmp_path):
    result = agent("run", "点击“订阅”", "--runs-dir", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    _, episode = only_episode(tmp_path)
    assert episode.record.outcome is Outcome.SUCCESS
    assert episode.steps[0].target["id"] == "zh-subscribe"


def test_dry_run_does_nothing_to_the_page(tmp_path):
    result = agent("run", "Click Save", "--dry-run", "--runs-dir", str(tmp_path))
    _, episode = only_episode(tmp_path)
    # Its own outcome, exit 0: a dry run that planned its actions did what was asked.
    assert episode.record.dry_run and episode.record.outcome is Outcome.PLANNED, result.stdout
    assert result.returncode == 0, result.stdout + result.stderr
    assert episode.record.verifier is None  # the checker never judged the untouched page
    click = episode.steps[0]
    assert click.action["kind"] == "click" and not click.executed and click.guard["dry_run"]
    assert click.target is None  # nothing was clicked, so no element reported being under the point
    assert "PLANNED" in result.stdout and "FAILURE" not in result.stdout
    assert "dry run: 1 action would have been performed" in result.stdout
    assert "0  click (" in result.stdout


def test_scripted_policy_from_a_file(tmp_path):
    script = tmp_path / "s.json"
    script.write_text(json.dumps([{"kind": "scroll", "direction": "down"}, "not json", {"kind": "finish", "text": "ok"}]))
    result = agent("run", "look around", "--policy", "scripted", "--script", str(script), "--runs-dir", str(tmp_path / "r"),
                   "--set", "settle.deadline_s=1")
    assert result.returncode == 0, result.stdout + result.stderr
    _, episode = only_episode(tmp_path / "r")
    # "look around" is not one of the demo page's tasks, so no checker can verify it: claimed.
    assert episode.record.outcome is Outcome.CLAIMED and episode.record.answer == "ok"
    assert episode.record.env == {"name": "url", "url": episode.steps[0].info["url"], "seed": None, "max_steps": 15}
    assert [s.parse_error is None for s in episode.steps] == [True, False, True]


def test_ctrl_c_keeps_finished_steps_and_records_interrupted(tmp_path):
    script = tmp_path / "s.json"
    script.write_text(json.dumps([{"kind": "wait", "duration_s": 0.2}] * 200))
    runs = tmp_path / "runs"
    with procs.running([sys.executable, "-m", "agent", "run", "wait a lot", "--policy", "scripted", "--script",
                        str(script), "--runs-dir", str(runs), "--max-steps", "200"],
                       cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        deadline = time.monotonic() + 60
        steps_file = None
        while time.monotonic() < deadline:
            found = list(runs.glob("*/ep0000/steps.jsonl"))
            if found and found[0].read_text().count("\n") >= 3:
                steps_file = found[0]
                break
            time.sleep(0.1)
        assert steps_file is not None, "the run never wrote 3 steps"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "INTERRUPTED" in out
    _, episode = only_episode(runs)
    assert episode.record.outcome is Outcome.INTERRUPTED
    assert len(episode.steps) >= 3 and not episode.truncated_tail
    assert all((episode.path / s.frame_path).exists() for s in episode.steps)


def test_unreachable_url_is_recorded_as_aborted(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = agent("run", "click OK", "--url", f"http://127.0.0.1:{port}/", "--runs-dir", str(tmp_path))
    assert result.returncode == 1
    assert "ABORTED" in result.stdout and "NavigationError" in result.stdout
    _, episode = only_episode(tmp_path)
    assert episode.record.reason["type"] == "NavigationError"


def test_bad_input_gives_clear_messages_and_exit_code_2(tmp_path):
    r = agent("run", "--max-steps", "0")
    assert r.returncode == 2 and "must be at least 1" in r.stderr
    r = agent("run", "--set", "agent.max_step=3", "--runs-dir", str(tmp_path))
    assert r.returncode == 2 and "did you mean 'max_steps'" in r.stdout
    r = agent("run", "click", "--url", "ftp://example.com")
    assert r.returncode == 2 and "needs one of the schemes" in r.stdout
    r = agent("run", "--url", "http://127.0.0.1:9/")
    assert r.returncode == 2 and "give the task" in r.stdout
    r = agent("run", "--policy", "scripted", "--runs-dir", str(tmp_path))
    assert r.returncode == 2 and "needs a script" in r.stdout
    r = agent("run", "--policy", "scripted", "--script", str(tmp_path / "missing.json"), "--runs-dir", str(tmp_path))
    assert r.returncode == 2 and "does not exist" in r.stdout
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    r = agent("run", "--runs-dir", str(blocker / "runs"))
    assert r.returncode == 2 and "cannot write trajectories" in r.stdout and "--runs-dir" in r.stdout
    r = agent("run", "--config", str(tmp_path / "nope.toml"))
    assert r.returncode == 2 and "does not exist" in r.stdout
    r = agent("run", "--set", "web.browser_path=/nonexistent/chrome", "--runs-dir", str(tmp_path / "b"))
    assert r.returncode == 1 and "DeviceUnavailable" in r.stdout and "make setup" in r.stdout.replace("\n", " ")


def test_help_stays_light():
    code = "import sys; from agent.cli import main\ntry: main(['--help'])\nexcept SystemExit: pass\n" \
           "heavy = [m for m in ('playwright', 'torch', 'rapidocr', 'onnxruntime', 'cv2') if m in sys.modules]\n" \
           "print('HEAVY', heavy)"
    r = procs.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert "HEAVY []" in r.stdout, r.stdout + r.stderr
    assert "run" in r.stdout and "show" in r.stdout


def test_doctor_reports_each_component():
    r = agent("doctor")
    assert r.returncode == 0, r.stdout
    for what in ("playwright", "browser", "CJK font", "OCR engine", "run folder"):
        assert what in r.stdout
    assert "missing" not in r.stdout


def test_envs_lists_the_registry():
    r = agent("envs")
    assert r.returncode == 0 and "generated/click" in r.stdout and "generated/absent" in r.stdout
    r = agent("envs", "--suite", "nope")
    assert r.returncode == 2 and "no environments in suite 'nope'" in r.stdout


def test_eval_with_the_oracle_writes_trajectories_a_table_and_a_report(tmp_path):
    r = agent("eval", "--suite", "generated", "--tasks", "click", "absent", "--policy", "oracle", "--episodes", "2",
              "--parallel", "2", "--runs-dir", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2/2" in r.stdout and "report.html" in r.stdout
    (run_dir,) = tmp_path.iterdir()
    assert (run_dir / "report.html").exists() and (run_dir / "eval.json").exists()
    assert len([e for e in iter_episodes(run_dir)]) == 4
    r = agent("report", str(run_dir))
    assert r.returncode == 0 and "report.html" in r.stdout
    r = agent("eval", "--suite", "generated", "--tasks", "clik", "--runs-dir", str(tmp_path))
    assert r.returncode == 2 and "did you mean generated/click" in r.stdout
    r = agent("eval", "--suite", "nope", "--runs-dir", str(tmp_path))
    assert r.returncode == 2 and "no suite 'nope'" in r.stdout
    r = agent("eval", "--suite", "miniwob", "--tasks", "enter-text", "--policy", "oracle", "--episodes", "1",
              "--runs-dir", str(tmp_path / "mw"))
    # An environment without an oracle: the episode is aborted with the reason, the evaluation still ends.
    assert r.returncode == 0 and "aborted" in r.stdout, r.stdout
    assert "has no oracle" in (r.stdout + r.stderr).replace("\n", " ")


def test_data_show_draws_boxes_and_lists_rejected_records(tmp_path):
    import cv2
    import numpy as np

    images = tmp_path / "screenspot_imgs"
    images.mkdir()
    cv2.imwrite(str(images / "a.png"), np.full((100, 200, 3), 255, np.uint8))
    records = [
        {"img_filename": "a.png", "bbox": [20, 10, 40, 30], "instruction": "the box", "data_type": "icon",
         "data_source": "web"},
        {"img_filename": "../../etc/passwd", "bbox": [1, 1, 2, 2], "instruction": "escape", "data_type": "text",
         "data_source": "web"},
    ]
    (tmp_path / "screenspot_web.json").write_text(json.dumps(records))
    r = agent("data", "show", str(tmp_path / "screenspot_web.json"), "--out", str(tmp_path / "out"), "-n", "4")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 samples loaded, 1 rejected" in r.stdout and "unsafe" in r.stdout, r.stdout
    assert len(list((tmp_path / "out").glob("*.png"))) == 1
    r = agent("data", "show", str(tmp_path / "missing.json"))
    assert r.returncode == 2 and "missing.json" in r.stdout


def test_grounding_eval_counts_bad_records_and_lists_them_in_its_report(tmp_path):
    import cv2
    import numpy as np

    images = tmp_path / "screenspot_imgs"
    images.mkdir()
    image = np.full((120, 320, 3), 255, np.uint8)
    cv2.putText(image, "Save", (40, 70), cv2.FONT_HERSHEY_SIMPLEX, 1.2, (0, 0, 0), 2)
    cv2.imwrite(str(images / "a.png"), image)
    records = [
        {"img_filename": "a.png", "bbox": [30, 35, 100, 50], "instruction": "click Save", "data_type": "text",
         "data_source": "web"},
        {"img_filename": "a.png", "bbox": [300, 100, 50, 50], "instruction": "outside", "data_type": "icon",
         "data_source": "web"},
    ]
    (tmp_path / "screenspot_web.json").write_text(json.dumps(records))
    r = agent("eval", "--suite", "screenspot", "--data", str(tmp_path / "screenspot_web.json"), "--policy", "ocr",
              "--runs-dir", str(tmp_path / "runs"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 samples loaded, 1 rejected" in r.stdout and "top-1 accuracy 1.000" in r.stdout
    (out,) = (tmp_path / "runs").iterdir()
    page = (out / "report.html").read_text()
    assert "records rejected at load (1)" in page and "box_outside" in page
    assert json.loads((out / "results.json").read_text())["correct"] == 1


class ClosingBackend:
    """A model backend reduced to what the CLI must do with it at the end: close it."""

    def __init__(self) -> None:
        self.closed = 0

    async def close(self) -> None:
        self.closed += 1


class CornerModel:
    """Clicks the top-left corner; holds a backend, as a model policy does."""

    name = "corner"

    def __init__(self) -> None:
        self.backend = ClosingBackend()

    async def decide(self, task, history, observation, n=1):
        from devices.actions import Action, ActionKind, Point
        from policy.base import Decision

        a = Action(ActionKind.CLICK, point=Point(0.0, 0.0))
        return Decision(a, raw_output='{"kind": "click", "point": [0, 0]}', candidates=(a,))

    def describe(self):
        return {"policy": self.name}


def shared_model(monkeypatch) -> CornerModel:
    """Make `agent eval` build a CornerModel where it would build the model of --policy openai:URL."""
    from agent.cli import eval_grounding
    from agent.cli import evaluate as eval_command

    policy = CornerModel()
    monkeypatch.setattr(eval_command, "build_policy", lambda cfg: policy)
    monkeypatch.setattr(eval_grounding, "build_policy", lambda cfg: policy)  # --suite screenspot's
    return policy


def test_eval_closes_the_shared_model_backend(tmp_path, monkeypatch):
    from agent.cli import main

    policy = shared_model(monkeypatch)
    code = main(["eval", "--suite", "generated", "--tasks", "click", "--episodes", "1", "--policy",
                 "openai:http://127.0.0.1:9", "--model", "m", "--runs-dir", str(tmp_path)])
    assert code == 0
    assert policy.backend.closed == 1


def test_eval_closes_the_shared_model_backend_on_ctrl_c(tmp_path, monkeypatch, capsys):
    import asyncio

    import agent.eval
    from agent.cli import main

    async def interrupted(*args, **kwargs):
        asyncio.get_running_loop().call_later(0.1, signal.raise_signal, signal.SIGINT)
        await asyncio.sleep(30)

    policy = shared_model(monkeypatch)
    monkeypatch.setattr(agent.eval, "evaluate", interrupted)
    code = main(["eval", "--suite", "generated", "--policy", "openai:http://127.0.0.1:9", "--model", "m",
                 "--runs-dir", str(tmp_path)])
    assert code == 130 and "interrupted" in capsys.readouterr().out
    assert policy.backend.closed == 1


def test_grounding_eval_closes_the_model_backend(tmp_path, monkeypatch):
    import cv2
    import numpy as np

    from agent.cli import main

    (tmp_path / "screenspot_imgs").mkdir()
    cv2.imwrite(str(tmp_path / "screenspot_imgs" / "a.png"), np.full((100, 200, 3), 255, np.uint8))
    (tmp_path / "screenspot_web.json").write_text(json.dumps([
        {"img_filename": "a.png", "bbox": [0, 0, 20, 20], "instruction": "the corner", "data_type": "icon",
         "data_source": "web"}]))
    policy = shared_model(monkeypatch)
    code = main(["eval", "--suite", "screenspot", "--data", str(tmp_path / "screenspot_web.json"), "--policy",
                 "openai:http://127.0.0.1:9", "--model", "m", "--runs-dir", str(tmp_path / "runs")])
    assert code == 0
    assert policy.backend.closed == 1


@pytest.mark.parametrize("command", ["run", "replay", "record", "eval"])
def test_headed_and_headless_mean_the_same_on_every_command(command):
    """One pair of window flags wherever a browser opens; ``record`` shows the window unless told not to (a person
    does the task), the others follow ``web.headless``."""
    from agent.cli import build_parser
    from agent.cli.common import window_overrides

    parser = build_parser()
    first = {"run": ["run"], "replay": ["replay", "runs/x/ep0000"], "record": ["record", "Do it"],
             "eval": ["eval", "--suite", "generated"]}[command]
    assert window_overrides(parser.parse_args([*first, "--headed"])) == ["web.headless=false"]
    assert window_overrides(parser.parse_args([*first, "--headless"])) == ["web.headless=true"]
    assert parser.parse_args(first).headless is None
    with pytest.raises(SystemExit):
        parser.parse_args([*first, "--headed", "--headless"])

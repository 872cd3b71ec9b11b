"""What a run leaves on disk when it is stopped or killed: SIGTERM and SIGHUP end the episode as interrupted (like
Ctrl-C), kill -9 leaves a crashed episode with every finished step, a live run reads as running. Real `agent run`
processes on the built-in page with the scripted policy, stopped at a step boundary found by polling steps.jsonl."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from envs.records import Outcome
from envs.trajectory import LOCK_FILE, EpisodeState, read_episode
from tests.conftest import REPO
from tests.support import procs

ENV = {**os.environ, "COLUMNS": "200"}


def agent(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return procs.run([sys.executable, "-m", "agent", *args], cwd=REPO, env=ENV, capture_output=True, text=True,
                     timeout=timeout)


def start_long_run(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    """``agent run`` with 200 scripted waits (about two minutes) in its own process group (``procs.stop`` ends it);
    returns it and the episode folder once 3 steps are on disk (a step boundary: the next line is not written yet,
    or only just)."""
    script = tmp_path / "s.json"
    script.write_text(json.dumps([{"kind": "wait", "duration_s": 0.2}] * 200))
    runs = tmp_path / "runs"
    proc = procs.start([sys.executable, "-m", "agent", "run", "等一等 wait", "--policy", "scripted", "--script",
                        str(script), "--runs-dir", str(runs), "--max-steps", "200"],
                       cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            found = list(runs.glob("*/ep0000/steps.jsonl"))
            if found and found[0].read_bytes().count(b"\n") >= 3:
                return proc, found[0].parent
            time.sleep(0.05)
    except BaseException:
        procs.stop(proc)
        raise
    procs.stop(proc)
    out, err = proc.communicate(timeout=30)
    raise AssertionError(f"the run never wrote 3 steps:\n{out}\n{err}")


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_and_sighup_end_the_episode_as_interrupted(tmp_path, signum, code):
    proc, episode_dir = start_long_run(tmp_path)
    try:
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        procs.stop(proc)  # whatever the run started (the browser) goes too
    assert proc.returncode == code, out + err
    assert "INTERRUPTED" in out
    episode = read_episode(episode_dir)
    assert episode.record.outcome is Outcome.INTERRUPTED and episode.state is EpisodeState.FINISHED
    assert len(episode.steps) >= 3 and not episode.truncated_tail and episode.record.num_steps == len(episode.steps)
    assert all((episode.path / s.frame_path).is_file() for s in episode.steps)
    assert not (episode_dir / LOCK_FILE).exists()
    run_json = json.loads((episode_dir.parent / "run.json").read_text(encoding="utf-8"))
    assert run_json["config"]["record"]["fsync"] is True  # durable by default


def test_a_live_run_reads_as_running_and_a_killed_one_as_crashed_with_its_finished_steps(tmp_path):
    proc, episode_dir = start_long_run(tmp_path)
    try:
        shown = agent("show", str(episode_dir))
        assert shown.returncode == 0 and "running" in shown.stdout, shown.stdout + shown.stderr
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        procs.stop(proc)  # whatever the run started (the browser) goes too
    assert proc.returncode == -signal.SIGKILL
    episode = read_episode(episode_dir)
    assert episode.state is EpisodeState.CRASHED and episode.record.outcome is None
    assert len(episode.steps) >= 3 and all((episode.path / s.frame_path).is_file() for s in episode.steps)
    run_dir = episode_dir.parent
    shown = agent("show", str(run_dir))
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "crashed" in shown.stdout and f"{len(episode.steps)} finished steps kept" in shown.stdout
    assert shown.stdout.count("wait 0.2s") == len(episode.steps)  # every finished step is listed
    report = agent("report", str(run_dir))
    assert report.returncode == 0, report.stdout + report.stderr
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    assert 'data-outcome="crashed"' in page and "crashed 1" in page


def test_eval_stops_on_sigterm_like_ctrl_c(tmp_path, monkeypatch, capsys):
    import agent.eval
    from agent.cli import main

    async def stopped(*args, **kwargs):
        asyncio.get_running_loop().call_later(0.1, signal.raise_signal, signal.SIGTERM)
        await asyncio.sleep(30)

    monkeypatch.setattr(agent.eval, "evaluate", stopped)
    code = main(["eval", "--suite", "generated", "--policy", "oracle", "--runs-dir", str(tmp_path)])
    assert code == 143 and "interrupted" in capsys.readouterr().out


def test_train_online_stops_cleanly_on_sigterm_like_ctrl_c(tmp_path, monkeypatch):
    import agent.online
    from agent.cli import train_online
    from agent.online import OnlineResult
    from agent.online import session as online_session

    class Session:
        """Just the part of OnlineSession that meets signals: its handlers and request_stop."""

        def __init__(self, *args, **kwargs):
            self.stop_signal, self.stopped_by = None, ""

        def request_stop(self, reason):
            self.stopped_by = reason
            self.stop.set()

        async def run(self):
            loop, self.stop = asyncio.get_running_loop(), asyncio.Event()
            remove = online_session._install_sigint(loop, self)
            loop.call_later(0.1, signal.raise_signal, signal.SIGTERM)
            await asyncio.wait_for(self.stop.wait(), 30)
            remove()
            return OnlineResult(run_dir=tmp_path, stopped_by=self.stopped_by)

    monkeypatch.setattr(agent.online, "OnlineSession", Session)
    config = SimpleNamespace(train=SimpleNamespace(run_dir=str(tmp_path)))
    assert train_online.run_session(SimpleNamespace(resume=None), config, SimpleNamespace(remote_actors=0)) == 143


def test_stop_signals_leave_ignored_signals_alone_and_hand_over_the_first():
    from agent.signals import StopSignals, exit_code

    assert (exit_code(signal.SIGINT), exit_code(signal.SIGTERM), exit_code(signal.SIGHUP)) == (130, 143, 129)
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    got: list[int] = []

    async def main() -> StopSignals:
        stops = StopSignals(got.append).install()
        assert signal.SIGHUP not in stops._installed and signal.SIGTERM in stops._installed
        signal.raise_signal(signal.SIGTERM)
        await asyncio.sleep(0.1)
        return stops

    try:
        stops = asyncio.run(main())
    finally:
        signal.signal(signal.SIGHUP, previous)
    assert got == [signal.SIGTERM] and stops.received == signal.SIGTERM and not stops._installed
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # a second SIGTERM ends the process at once


def test_fsync_is_on_by_default():
    from agent.config import Config, load_config

    assert Config().record.fsync is True and load_config(None, []).record.fsync is True
    assert load_config(None, ["record.fsync=false"]).record.fsync is False

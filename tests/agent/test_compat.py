"""Trajectories written by earlier versions of handeye are read, shown and reported by this one."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from envs.records import Outcome
from envs.trajectory import iter_episodes
from tests.support import procs

REPO = Path(__file__).resolve().parent.parent.parent
FIXTURE_V1 = REPO / "tests" / "fixtures" / "run-v1"


def test_a_run_written_before_the_episode_runner_is_read_the_same(tmp_path):
    # tests/fixtures/run-v1 was written by `agent run` before the two episode loops became one runner (a scripted
    # click, an output that does not parse, a finish judged by the demo page's checker): the format is unchanged.
    (episode,) = iter_episodes(FIXTURE_V1)
    record = episode.record
    assert record.outcome is Outcome.FAILURE and record.answer == "done" and record.num_steps == 3
    assert record.env["name"] == "demo-subscribe" and "start" in record.timings  # the old phase names stay readable
    click, unparsed, finish = episode.steps
    assert click.executed and click.action["kind"] == "click" and click.frame_size == (320, 240)
    assert unparsed.action is None and unparsed.parse_error and not unparsed.executed
    assert finish.verifier["success"] is False and episode.frame(click).shape == (240, 320, 3)
    run = tmp_path / "run-v1"
    shutil.copytree(FIXTURE_V1, run)
    for command in (["show", str(run)], ["report", str(run)]):
        r = procs.run([sys.executable, "-m", "agent", *command], cwd=REPO, capture_output=True, text=True,
                      timeout=120)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert "unparsed" in procs.run([sys.executable, "-m", "agent", "show", str(run)], cwd=REPO,
                                   capture_output=True, text=True, timeout=120).stdout
    assert (run / "report.html").is_file()


def test_the_report_and_the_summary_show_phases_in_one_order(tmp_path):
    # The old run's episode timed "start" (the device's start, before the one runner); with a "reset" added, both
    # views show start, then reset, then the step's phases: the one agent.summary.PHASE_ORDER (the report once had
    # an order of its own, reset first).
    import io
    import json
    import re

    from rich.console import Console

    from agent.report import build_report
    from agent.summary import PHASE_ORDER, print_summary

    assert PHASE_ORDER[:3] == ("start", "reset", "observe")
    run = tmp_path / "run-v1"
    shutil.copytree(FIXTURE_V1, run)
    record = run / "ep0000" / "episode.json"
    data = json.loads(record.read_text(encoding="utf-8"))
    data["timings"]["reset"] = 0.5
    record.write_text(json.dumps(data), encoding="utf-8")
    build_report(run)
    bars = re.findall(r'<g class="bar" data-phase="([^"]+)"', (run / "report.html").read_text(encoding="utf-8"))
    assert bars[:2] == ["start", "reset"] and {"observe", "decide", "act"} <= set(bars)
    assert bars == sorted(bars, key=PHASE_ORDER.index)
    (episode,) = iter_episodes(run)
    out = io.StringIO()
    print_summary(Console(file=out, width=120), episode.record, episode.path)
    lines = out.getvalue().splitlines()
    table = lines[next(i for i, line in enumerate(lines) if line.split()[:2] == ["phase", "total"]) + 1:]
    rows = [line.split()[0] for line in table if re.match(r"^\S+\s+[\d.]+ s", line)]
    assert rows[:2] == ["start", "reset"] and "decide" in rows and rows == sorted(rows, key=PHASE_ORDER.index)

"""Trajectories written by earlier versions of handeye are read, shown and reported by this one."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from envs.records import Outcome
from envs.trajectory import iter_episodes

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
        r = subprocess.run([sys.executable, "-m", "agent", *command], cwd=REPO, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert "unparsed" in subprocess.run([sys.executable, "-m", "agent", "show", str(run)], cwd=REPO,
                                        capture_output=True, text=True, timeout=120).stdout
    assert (run / "report.html").is_file()

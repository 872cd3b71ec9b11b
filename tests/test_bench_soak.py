"""bench/soak.py at a tiny scale: the harness runs a real ``agent eval`` (three environments, two slots), samples its
processes from outside, writes its JSON and prints its table; its verdicts catch growth, a third browser and a
process left behind (the full soak takes 15 minutes and more: docs/benchmarks.md, "Soak")."""

from __future__ import annotations

import json
import sys
import time

from bench import soak
from tests.conftest import REPO
from tests.support import procs
from tests.support.browsers import alive


def test_the_soak_harness_runs_an_evaluation_and_reports_it(tmp_path):
    out = tmp_path / "soak.json"
    # flatness is not judged on a run of seconds (the warm-up is the whole run): --tolerance 100 lets it exit 0
    done = procs.run([sys.executable, str(REPO / "bench/soak.py"), "--parts", "eval", "--envs", "3", "--episodes",
                      "1", "--interval", "0.2", "--tolerance", "100", "--out", str(out)], cwd=REPO,
                     capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    (part,) = json.loads(out.read_text())["parts"]
    assert part["part"] == "eval" and part["exit"] == 0 and part["episodes"] == 3 and part["envs"] == 3
    assert part["peak"]["browsers"] == 2 and part["peak"]["drivers"] == 2 and part["bounded"]
    assert part["clean"] and part["left"] == []
    assert len(part["samples"]) >= 5 and max(s["rss_mb"] for s in part["samples"]) > 100
    assert "| eval | 3 | 3 |" in done.stdout and "bounded, clean" in done.stdout


def _samples(rss: list[float], browsers: int = 2) -> list[soak.Sample]:
    return [soak.Sample(float(i), r, r / 2, 80.0, 9, 2, browsers, 6) for i, r in enumerate(rss)]


def test_the_verdicts_catch_growth_a_third_browser_and_a_process_left():
    flat = [1000.0] * 10 + [800.0 + (i % 3) for i in range(90)]  # warm-up, then steady
    growing = [800.0 + 4 * i for i in range(100)]  # +50 % from after the warm-up to the end
    assert soak.verdict(_samples(flat), [], 2, 0.2, 0.10)["flat"]
    judged = soak.verdict(_samples(growing), [], 2, 0.2, 0.10)
    assert not judged["flat"] and judged["memory"]["rss_mb"]["growth"] > 0.3
    assert not soak.verdict(_samples(flat, browsers=3), [], 2, 0.2, 0.10)["bounded"]
    assert not soak.verdict(_samples(flat), ["123 (chromium)"], 2, 0.2, 0.10)["clean"]


def test_a_process_the_run_left_behind_is_found_by_its_mark_and_ended(tmp_path):
    """The child starts a process in a session of its own (as Playwright starts Chromium) and exits: it is no longer
    in the child's tree or session, but it carries the mark, so the harness finds it, names it and kills it."""
    script = "import subprocess, sys; subprocess.Popen(['sleep', '300'], start_new_session=True)"
    rc, _, left, _ = soak.watch([sys.executable, "-c", script], 0.05, tmp_path / "log")
    assert rc == 0 and len(left) == 1 and "sleep 300" in left[0], left
    pid = int(left[0].split()[0])
    for _ in range(200):  # SIGKILL was sent: the process is gone within moments
        if not alive(pid):
            break
        time.sleep(0.05)
    assert not alive(pid)

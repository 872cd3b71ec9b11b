"""tests/support/procs.py and the suite's check for processes left behind (tests/conftest.py): a command that times
out, fails or is interrupted is ended with everything it started, grandchildren included; a test or a session
that leaves a process running fails, naming it; a missing installed part fails, never skips."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.support import procs
from tests.support.installed import need_module, need_program

GRANDCHILDREN = """
import subprocess, sys, time
stays = subprocess.Popen(["sleep", "600"])                          # in the group
leaves = subprocess.Popen(["sleep", "600"], start_new_session=True)  # in a session of its own, still below
print(stays.pid, leaves.pid, flush=True)
time.sleep(600)
"""


def alive(pid: int) -> bool:
    info = procs.table().get(pid)
    return info is not None and info.alive


def wait_for_line(path: Path, timeout: float = 30) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_text() if path.is_file() else ""
        if text.endswith("\n"):
            return [int(x) for x in text.split()]
        time.sleep(0.05)
    raise AssertionError(f"{path} was not written within {timeout} s")


def test_run_ends_the_grandchildren_of_a_command_that_times_out():
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as caught:
        procs.run([sys.executable, "-c", GRANDCHILDREN], timeout=5, capture_output=True, text=True)
    stays, leaves = (int(x) for x in caught.value.output.split())  # what it printed comes with the timeout
    group = procs.STARTED[-1]
    assert procs.in_groups([group]) == []
    assert not alive(stays) and not alive(leaves)
    assert time.monotonic() - started < 5 + procs.GRACE_S  # sleep ends at SIGTERM: no wait for the SIGKILL


def test_run_ends_the_group_when_interrupted():
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGUSR1, interrupt)  # stands in for Ctrl-C (SIGINT may be ignored here)
    timer = threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGUSR1))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            procs.run([sys.executable, "-c", GRANDCHILDREN], timeout=120, stdout=subprocess.DEVNULL)
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)
    assert procs.in_groups([procs.STARTED[-1]]) == []


def test_running_ends_the_group_when_the_block_fails(tmp_path):
    out = tmp_path / "pids"
    with pytest.raises(RuntimeError, match="the test failed"):
        with procs.running([sys.executable, "-c", GRANDCHILDREN], stdout=out.open("w")):
            pids = wait_for_line(out)
            assert all(alive(pid) for pid in pids)
            raise RuntimeError("the test failed")
    assert not any(alive(pid) for pid in pids) and procs.in_groups([procs.STARTED[-1]]) == []


def test_a_command_that_exits_and_leaves_a_process_running_fails():
    with pytest.raises(procs.LeftBehind, match=r"exited with 0 and left \d+ \(sleep 600\) running") as caught:
        procs.run(["sh", "-c", "sleep 600 >/dev/null 2>&1 & echo started"], timeout=60, capture_output=True,
                  text=True)
    assert "started" in str(caught.value) and procs.in_groups([procs.STARTED[-1]]) == []
    done = procs.run(["sh", "-c", "echo fine; exit 3"], timeout=60, capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (3, "fine\n")
    with pytest.raises(subprocess.CalledProcessError):
        procs.run(["false"], timeout=60, check=True)


def test_a_strangers_group_with_a_reused_id_is_never_counted_or_signalled():
    """Group ids are PIDs, and PIDs are reused: a process of another suite whose group id is one this suite once
    started (here: put in ``STARTED`` by hand) is not this suite's, so it is neither counted nor signalled."""
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        procs.STARTED.append(stranger.pid)
        assert procs.in_groups([stranger.pid]) == []
        procs.end_processes([], pgids=[stranger.pid], grace=0.5)
        assert stranger.poll() is None  # alive: nothing was sent to it
    finally:
        procs.STARTED.remove(stranger.pid)
        stranger.kill()
        stranger.wait()


def test_stop_sends_sigkill_to_what_ignores_sigterm(tmp_path):
    code = ("import signal, sys, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\n"
            "time.sleep(600)")
    out = tmp_path / "ready"
    proc = procs.start([sys.executable, "-c", code], stdout=out.open("w"))
    deadline = time.monotonic() + 30
    while "ready" not in out.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    started = time.monotonic()
    assert procs.stop(proc, grace=1.0) == -signal.SIGKILL
    assert 1.0 <= time.monotonic() - started < 1.0 + 5


LEAKY_TESTS = '''
import os, subprocess, pytest
from pathlib import Path
from tests.support import procs

PIDS = Path(os.environ["PIDS_FILE"])


def note(pid):
    with PIDS.open("a") as f:
        f.write(f"{pid}\\n")


def test_leaves_a_sleeper():
    note(subprocess.Popen(["sleep", "600"]).pid)


def test_leaves_an_orphan_in_its_group():
    proc = procs.start(["sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $!"], stdout=subprocess.PIPE, text=True)
    note(int(proc.stdout.readline()))
    proc.wait()


def test_cleans_up():
    with procs.running(["sleep", "600"]) as proc:
        note(proc.pid)


@pytest.fixture(scope="module")
def shared():
    proc = subprocess.Popen(["sleep", "600"])
    note(proc.pid)
    yield proc
    proc.kill()
    proc.wait()


def test_uses_a_shared_process(shared):
    assert shared.poll() is None


def test_uses_it_again(shared):
    assert shared.poll() is None


@pytest.fixture(scope="module")
def shared_and_forgotten():
    note(subprocess.Popen(["sleep", "600"]).pid)


def test_sets_up_a_shared_process_nobody_ends(shared_and_forgotten):
    pass
'''


def test_the_suite_fails_a_test_or_a_session_that_leaves_a_process_running(tmp_path):
    (tmp_path / "test_leaky.py").write_text(LEAKY_TESTS)
    pids = tmp_path / "pids"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PIDS_FILE": str(pids)}
    r = procs.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-q",
                   "-rE", "--timeout=120", str(tmp_path / "test_leaky.py")],
                  cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "6 passed, 2 errors" in out, out  # each leaky test passed, then failed at its teardown
    for test in ("test_leaves_a_sleeper", "test_leaves_an_orphan_in_its_group"):
        assert re.search(rf"LeftBehind: test_leaky.py::{test} left processes running after it ended \(now ended\): "
                         rf"\d+ \(sleep 600\)\n", out), out
    assert "processes left running when the session ended (now ended): " in out and "(sleep 600)" in out, out
    noted = [int(x) for x in pids.read_text().split()]
    assert len(noted) == 5 and not any(alive(pid) for pid in noted)
    # The session check on its own: every test passes, the session fails.
    r = procs.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-q",
                   "--timeout=120", "-k", "nobody", str(tmp_path / "test_leaky.py")],
                  cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 1 and "1 passed" in out and "when the session ended (now ended)" in out, out


def test_a_missing_part_fails_the_test_and_says_how_to_install_it():
    with pytest.raises(pytest.fail.Exception,
                       match=r"^handeye-no-such-tool is not installed; run scripts/setup.sh \(apt-get install x y\)$"):
        need_program("handeye-no-such-tool", "x y")
    with pytest.raises(pytest.fail.Exception, match=r"handeye_no_such_module is not installed; run scripts/setup.sh "
                                                    r"\(pip install 'handeye\[envs\]'\)"):
        need_module("handeye_no_such_module", "handeye[envs]")
    assert need_program("sh", "dash") and need_module("json", "-") is None

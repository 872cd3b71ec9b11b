"""Shared test helpers: local pages, browser-process lookup, environment isolation, and the check that no test leaves
a process behind.

Processes left behind: after each test (its fixtures torn down), a process that the test started, directly or
through what it started, and that is still alive after ``procs.GRACE_S`` fails the test (it is ended first); so does a
process of a group that ``tests.support.procs`` started during the test, though its parent is gone. A test that set
up a module- or session-scoped fixture is not judged alone (that fixture's processes rightly outlive the test), nor
are processes that a longer-lived one started (a shared browser's renderers): at the end of the session, every
process below pytest and in any group ``procs`` started must be gone, or the session fails, naming them."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.support import procs

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent
PYTEST_PID = os.getpid()


def _ignore(signum: int, frame: object) -> None:
    """Stands in for SIG_IGN in the test process (see below)."""


# A suite started in the background (``nohup make test &`` from a script) inherits SIGINT and SIGHUP ignored, and an
# ignored signal stays ignored across exec: every `agent` process a test starts would then ignore the Ctrl-C or
# hang-up the test sends it, and the tests of interruption fail. A handler, unlike SIG_IGN, is reset to the default
# in a child at exec, so this process still ignores them while its children get the default a user's shell gives.
for _sig in (signal.SIGINT, signal.SIGHUP):
    if signal.getsignal(_sig) == signal.SIG_IGN:
        signal.signal(_sig, _ignore)


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (read from /proc)."""
    return [p.pid for p in procs.below(pid)]


def kill_browsers(parent: int | None = None) -> int:
    """SIGKILL every Chromium process started below ``parent`` (default: this test process)."""
    killed = 0
    for pid in descendants(parent or os.getpid()):
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if "chrom" in name:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
    return killed


@pytest.fixture
def pages_dir(tmp_path: Path) -> Path:
    d = tmp_path / "pages"
    d.mkdir()
    return d


@pytest.fixture
def site(pages_dir: Path):
    from envs.site import LocalSite

    with LocalSite(pages_dir) as s:
        yield s


# -- processes left behind (see the module docstring) ----------------------------------------------------------------
class _Watch:
    """What was running when a test began, and whether it set up a fixture that outlives it."""

    def __init__(self) -> None:
        self.before = {(p.pid, p.start) for p in procs.below(PYTEST_PID)}
        self.groups_from = len(procs.STARTED)
        self.shared_fixture = False


_watching: _Watch | None = None


def _started_by_test(watch: _Watch) -> list[procs.ProcInfo]:
    """Live processes the test started (every process between it and pytest is new), and live members of groups
    ``procs`` started during the test."""
    table = procs.table()
    mine = {}
    for p in procs.below(PYTEST_PID, table):
        chain, q = [], p
        while q.pid != PYTEST_PID and q.ppid in table:
            chain.append((q.pid, q.start))
            q = table[q.ppid]
        if not any(link in watch.before for link in chain):
            mine[(p.pid, p.start)] = p
    for p in procs.in_groups(procs.STARTED[watch.groups_from:], table):
        mine[(p.pid, p.start)] = p
    return list(mine.values())


def _left_by_test(watch: _Watch) -> list[procs.ProcInfo]:
    """``_started_by_test`` once they had ``procs.GRACE_S`` to exit (a closed browser's last processes take a
    moment)."""
    deadline = time.monotonic() + procs.GRACE_S
    while (left := _started_by_test(watch)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


class LeftProcesses:
    """The hooks of the check (see the module docstring), registered as a plugin of their own: hooks of a conftest
    are not called for a session-scoped fixture, whose node (the session) lies above tests/."""

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item):
        global _watching
        _watching = _Watch()
        return (yield)

    @pytest.hookimpl(tryfirst=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest) -> None:
        if _watching is not None and fixturedef.scope != "function":
            _watching.shared_fixture = True

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None):
        global _watching
        watch, _watching = _watching, None
        result = yield  # every fixture of the test is torn down
        if watch is not None and not watch.shared_fixture and (left := _left_by_test(watch)):
            names = ", ".join(p.describe() for p in left)
            procs.end_processes(left, pgids=procs.STARTED[watch.groups_from:])
            raise procs.LeftBehind(f"{item.nodeid} left processes running after it ended (now ended): {names}")
        return result

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if os.getpid() != PYTEST_PID:
            return
        deadline = time.monotonic() + procs.GRACE_S
        while (left := procs.below(PYTEST_PID) + procs.in_groups(procs.STARTED)) and time.monotonic() < deadline:
            time.sleep(0.05)
        if left:
            names = ", ".join(p.describe() for p in left)
            procs.end_processes(left, pgids=procs.STARTED)
            reporter = session.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(f"processes left running when the session ended (now ended): {names}", red=True)
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("handeye-left-processes"):
        config.pluginmanager.register(LeftProcesses(), "handeye-left-processes")

"""Shared test helpers: local pages, browser-process lookup, and environment isolation."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent


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
    """Every process below ``pid`` (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


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

"""Counting the Chromium browsers (and their Playwright drivers) below this test process, from /proc.

A browser is a Chromium process that is neither a helper (zygotes, renderers, the GPU and network services carry a
``--type=`` switch in their command line, which Chromium rewrites into one string; the crash handler is named so)
nor a process the browser is forking at that moment (its parent is Chromium). Its driver is its parent.
``counting_browsers()`` samples the count every few milliseconds for a ``with`` block, so a browser alive only for
a moment between two episodes is seen too."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support import procs


def _comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def browser_pids(tag: str = "") -> list[int]:
    """The browsers below this test (only those launched with the switch ``tag``, when given)."""
    found = []
    for p in procs.below(os.getpid()):
        try:
            name = _comm(p.pid)
            args = Path(f"/proc/{p.pid}/cmdline").read_bytes()
            parent = _comm(p.ppid)
        except OSError:
            continue
        if (name.startswith("chrom") and "crashpad" not in name and b"--type=" not in args
                and not parent.startswith("chrom") and tag.encode() in args):
            found.append(p.pid)
    return found


def browsers() -> int:
    return len(browser_pids())


def drivers(tag: str = "") -> list[int]:
    """The Playwright drivers of the browsers below this test (those launched with ``tag``, when given)."""
    table = procs.table()
    return sorted({table[pid].ppid for pid in browser_pids(tag) if pid in table})


def alive(pid: int) -> bool:
    """Whether ``pid`` is running (a zombie is not)."""
    seen = procs.table().get(pid)
    return seen is not None and seen.alive


@contextmanager
def counting_browsers() -> Iterator[list[int]]:
    """The number of browsers below this test, read every few milliseconds for the ``with`` block."""
    seen: list[int] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            seen.append(browsers())
            done.wait(0.01)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        done.set()
        thread.join()

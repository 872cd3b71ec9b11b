"""The processes behind one web device, so that closing it is bounded and leaves none of them.

A started ``PlaywrightDevice`` is two kinds of process: Playwright's driver (a Node process, a child of this one)
and the Chromium it launched. Playwright starts Chromium detached, so the browser is a session leader and every
process of the browser (zygotes, renderers, the GPU, network and storage services) is in one process group whose id
is the browser's pid. The browser tells its own pid (``SystemInfo.getProcessInfo`` on a browser-level DevTools
session); the driver is its parent. Before the browser has launched (a start cancelled mid-launch), the driver is
the one child of this process that started with the device, when only one did.

``PlaywrightDevice.close`` asks the browser, then the driver, to close, each within ``CLOSE_STEP_S``. When either
does not finish in time (a hung driver, a browser stopped by a debugger or starved of memory), or the caller's own
bound cancels the close, ``BrowserProcesses.kill`` ends them by signal: SIGKILL to the browser's process group, then
to the driver. A close that finished leaves nothing either: a process of the group still alive after it is killed
too.

Pids are checked before a signal: the browser's group is signalled only while it has running members and its
leader is the process seen at start (same start time) or gone (the kernel gives no new process a pid still in use
as a group id); the driver only while it is the same process and still this process's child. Zombies (a helper
whose parent died and whose new parent does not reap it) count as gone. Linux
only (``/proc``); elsewhere nothing is recorded and a close is as bounded as Playwright's own.
"""

from __future__ import annotations

import logging
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

CLOSE_STEP_S = 5.0
"""Seconds the browser's close, then the driver's stop, may each take before the processes are killed."""


def _stat(pid: int) -> tuple[int, int, int, str] | None:
    """(parent pid, process group, start time in clock ticks, state) of ``pid`` from ``/proc``; None when there is
    no such process (or no ``/proc``)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (name) ": state, ppid, pgrp, ... starttime (22nd)
    return int(fields[1]), int(fields[2]), int(fields[19]), fields[0]


def _pids() -> list[int]:
    """Every process id in ``/proc``; none without it (not Linux)."""
    try:
        return [int(entry.name) for entry in os.scandir("/proc") if entry.name.isdigit()]
    except OSError:
        return []


def _members(group: int) -> list[int]:
    """The running (not zombie) processes of process group ``group``."""
    found = []
    for pid in _pids():
        seen = _stat(pid)
        if seen is not None and seen[1] == group and seen[3] != "Z":
            found.append(pid)
    return found


def drivers() -> dict[int, int]:
    """This process's Playwright drivers now: pid -> start time."""
    found = {}
    for pid in _pids():
        seen = _stat(pid)
        if seen is not None and seen[0] == os.getpid() and seen[3] != "Z":
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"run-driver" in cmdline:
                found[pid] = seen[2]
    return found


@dataclass(frozen=True, slots=True)
class BrowserProcesses:
    """The browser (its pid is its process group's id) and the driver of one device, as seen when it started; the
    browser is None until it has launched."""

    browser: int | None
    browser_started: int | None
    driver: int | None
    driver_started: int | None

    @classmethod
    def new_driver(cls, before: dict[int, int]) -> BrowserProcesses | None:
        """The driver that started since ``before`` (``drivers()``), when exactly one did (devices starting at the
        same moment each learn theirs from their browser instead: ``find_processes``)."""
        new = [(pid, t) for pid, t in drivers().items() if before.get(pid) != t]
        return cls(None, None, *new[0]) if len(new) == 1 else None

    def _group_alive(self) -> bool:
        if self.browser is None:
            return False
        leader = _stat(self.browser)
        if leader is not None and leader[1] == self.browser and leader[2] != self.browser_started:
            return False  # another process with that pid leads its own group: ours is gone
        return bool(_members(self.browser))

    def _driver_alive(self) -> bool:
        if self.driver is None:
            return False
        seen = _stat(self.driver)
        return (seen is not None and seen[0] == os.getpid() and seen[2] == self.driver_started and seen[3] != "Z")

    def alive(self) -> bool:
        """Whether a process of the browser's group, or the driver, is still running."""
        return self._group_alive() or self._driver_alive()

    def kill(self) -> list[str]:
        """SIGKILL the browser's process group and the driver (each only while it is the one seen at start); returns
        what was signalled ("browser group 123", "driver 122")."""
        done = []
        if self._group_alive():
            assert self.browser is not None
            try:
                os.killpg(self.browser, signal.SIGKILL)
                done.append(f"browser group {self.browser}")
            except (ProcessLookupError, PermissionError):
                pass
        if self._driver_alive():
            assert self.driver is not None
            try:
                os.kill(self.driver, signal.SIGKILL)
                done.append(f"driver {self.driver}")
            except (ProcessLookupError, PermissionError):
                pass
        return done


async def find_processes(browser: Any, known: BrowserProcesses | None = None) -> BrowserProcesses | None:
    """The processes of a launched Playwright ``browser``: its pid from the browser itself, the driver as its
    parent; ``known`` (the driver alone) when the browser does not say (not Chromium) or there is no ``/proc``."""
    try:
        session = await browser.new_browser_cdp_session()
        try:
            info = await session.send("SystemInfo.getProcessInfo")
        finally:
            await session.detach()
        pid = next(int(p["id"]) for p in info.get("processInfo", []) if p.get("type") == "browser")
    except Exception as e:  # a browser that cannot say is closed the way Playwright closes it
        log.debug("the browser did not tell its process id: %s: %s", type(e).__name__, e)
        return known
    seen = _stat(pid)
    if seen is None or seen[1] != pid:
        return known
    parent = _stat(seen[0])
    ours = parent is not None and parent[0] == os.getpid()
    return BrowserProcesses(pid, seen[2], seen[0] if ours else None, parent[2] if ours and parent else None)

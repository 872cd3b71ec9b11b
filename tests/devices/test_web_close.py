"""Closing the web device is bounded and leaves no process: a hung Playwright driver, a stopped browser, or a close
the caller gives up on (its own ``wait_for``) still ends with the browser's whole process group and the driver gone.

The processes are found from the outside (``/proc``): the browser by a switch only this test's Chromium was started
with, its group by the browser's pid, the driver as the browser's parent; the device's own record of them is not
what is checked. Before, a hung driver made ``close`` take 20 s and leave the driver and every Chromium process
running, and a cancelled close left whatever it had not closed yet."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from pathlib import Path

import pytest

from devices.web import PlaywrightDevice, WebConfig
from tests.support import procs


def _launched_with(tag: str) -> list[procs.ProcInfo]:
    found = []
    for p in procs.table().values():
        try:
            cmdline = Path(f"/proc/{p.pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if tag.encode() in cmdline and "--type=" not in b" ".join(cmdline).decode(errors="replace"):
            found.append(p)
    return found


def _alive(pids: set[int]) -> list[procs.ProcInfo]:
    return [p for p in procs.table().values() if p.pid in pids and p.alive]


async def _started(tag: str) -> tuple[PlaywrightDevice, procs.ProcInfo, set[int]]:
    """A started device (each close step bounded at 1 s), its browser, and every pid of its browser's group and
    its driver."""
    device = PlaywrightDevice(WebConfig(viewport_width=320, viewport_height=240, extra_args=(tag,)))
    device.close_step_s = 1.0
    await device.start()
    await device.goto("data:text/html,<p>hello</p>")
    (browser,) = [p for p in _launched_with(tag) if p.pid == p.pgid]
    group = {p.pid for p in procs.table().values() if p.pgid == browser.pgid and p.alive}
    assert len(group) >= 3, group  # the browser and its helpers
    assert browser.ppid != os.getpid()  # the driver (a Node process) launched it
    return device, browser, group | {browser.ppid}


def test_a_hung_driver_does_not_keep_the_browser_alive():
    """The driver stops answering (SIGSTOP: as a driver deadlocked or swapped out): the close still returns and
    kills the browser's group and the driver."""

    async def main() -> list[procs.ProcInfo]:
        device, browser, pids = await _started(f"--handeye-close-{uuid.uuid4().hex}")
        os.kill(browser.ppid, signal.SIGSTOP)
        await asyncio.wait_for(device.close(), timeout=60)  # the test's own guard: the close never needs it
        await asyncio.sleep(0.2)  # the killed driver is reaped by the event loop's child watcher
        return _alive(pids)

    assert asyncio.run(main()) == []


def test_a_stopped_browser_is_killed():
    async def main() -> list[procs.ProcInfo]:
        device, browser, pids = await _started(f"--handeye-close-{uuid.uuid4().hex}")
        for p in _alive(pids - {browser.ppid}):
            os.kill(p.pid, signal.SIGSTOP)
        await asyncio.wait_for(device.close(), timeout=60)
        await asyncio.sleep(0.2)
        return _alive(pids)

    assert asyncio.run(main()) == []


@pytest.mark.parametrize("hung", ["driver", "browser"])
def test_a_close_the_caller_gives_up_on_leaves_no_process(hung):
    """The caller bounds the close more tightly than the device does (0.3 s) and cancels it mid-way: the browser
    and the driver are killed on the way out all the same."""

    async def main() -> list[procs.ProcInfo]:
        device, browser, pids = await _started(f"--handeye-close-{uuid.uuid4().hex}")
        stopped = [browser.ppid] if hung == "driver" else [p.pid for p in _alive(pids - {browser.ppid})]
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(device.close(), timeout=0.3)
        await asyncio.sleep(0.2)
        return _alive(pids)

    assert asyncio.run(main()) == []


def test_a_close_leaves_nothing_and_the_device_can_start_again():
    async def main() -> tuple[list[procs.ProcInfo], list[procs.ProcInfo]]:
        device, _, pids = await _started(f"--handeye-close-{uuid.uuid4().hex}")
        await device.close()
        left = _alive(pids)
        await device.start()  # a closed device starts anew (an evaluation slot after a failure does this)
        assert device.processes is not None and device.processes.alive()
        second = {device.processes.browser}
        await device.close()
        return left, _alive(second)

    assert asyncio.run(main()) == ([], [])

"""Processes a test starts: each in a process group (a session) of its own, ended with everything it started.

``subprocess.run(timeout=...)`` kills only the process it started: when a test timed out, whatever that process had
started went on running (a ``ddp_worker.py`` rank under ``accelerate launch`` was alive 21 minutes after its test
gave up). Here:

- ``start(cmd, ...)``: ``subprocess.Popen`` in a new session (``start_new_session=True``: its own process group),
  recorded in ``STARTED`` for the suite's checks (tests/conftest.py);
- ``stop(proc)``: ends the whole group and every process below ``proc`` (some leave the group: Chromium starts in a
  session of its own): SIGTERM to each (``first``), SIGKILL to what is left after ``grace`` seconds; returns once
  none of them is alive;
- ``stop_all(procs)``: ``stop`` for several at once (SIGTERM to all, then one grace);
- ``running(cmd, ...)``: ``start`` as a context manager that ``stop``s on the way out, on failure and on Ctrl-C too;
- ``run(cmd, timeout=..., ...)``: ``subprocess.run``'s arguments and result; on a timeout, a failure or Ctrl-C the
  group is ended before the exception goes on (``subprocess.TimeoutExpired`` with what the command printed). A
  command that exits and leaves a process of its group running fails the test (``LeftBehind``) after that process
  has been ended: a command a user runs must not leave anything behind either.

Nothing here looks beyond the processes a test started: "alive" reads ``/proc`` (a zombie, already dead and waiting
for its parent to read its status, is not alive). A group counts a process only when it carries this suite's mark
(``MARK``, an environment variable every process ``start`` starts inherits): a group id is a PID, and PIDs are
reused, so a group id of a process long gone may belong to a stranger's process by now (another suite on the same
machine); no signal is sent to a group as a whole for the same reason.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GRACE_S = 5.0
"""How long a process has between SIGTERM and SIGKILL (``stop``), and a command's group to empty after it exits."""
STARTED: list[int] = []
"""Process group ids (each the PID of the process ``start`` started), in order: the suite checks that none of them
has a process left when a test (or the session) ends."""
MARK_VARIABLE = "HANDEYE_TEST_PROCESSES"
MARK = f"{os.getpid()}-{time.time_ns()}"
"""This suite's mark, in the environment of every process ``start`` starts and everything they start."""


@dataclass(frozen=True, slots=True)
class ProcInfo:
    pid: int
    ppid: int
    pgid: int
    state: str
    start: int
    """Start time in clock ticks since boot: with the PID, it names one process (PIDs are reused)."""

    @property
    def alive(self) -> bool:
        return self.state not in "ZX"

    def describe(self) -> str:
        try:
            cmd = Path(f"/proc/{self.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            cmd = ""
        return f"{self.pid} ({cmd.strip()[:200] or '?'})"


class LeftBehind(AssertionError):
    """A command exited and left processes of its group running (they have been ended)."""


def table() -> dict[int, ProcInfo]:
    """Every process on the machine, from /proc."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # the name, in parentheses, may hold spaces
        out[int(entry.name)] = ProcInfo(int(entry.name), int(fields[1]), int(fields[2]), fields[0], int(fields[19]))
    return out


def below(pid: int, procs: dict[int, ProcInfo] | None = None) -> list[ProcInfo]:
    """Every live process below ``pid`` (its children, theirs, ...)."""
    procs = table() if procs is None else procs
    children: dict[int, list[ProcInfo]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p)
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child.pid)
    return [p for p in out if p.alive]


def marked(p: ProcInfo) -> bool:
    """Whether ``p`` carries this suite's mark (it, or a process above it, was started by ``start``)."""
    try:
        environ = Path(f"/proc/{p.pid}/environ").read_bytes()
    except OSError:
        return False
    return f"{MARK_VARIABLE}={MARK}".encode() in environ.split(b"\0")


def in_groups(pgids: Iterable[int], procs: dict[int, ProcInfo] | None = None) -> list[ProcInfo]:
    """Every live process of this suite (``marked``) whose process group is one of ``pgids``."""
    wanted = set(pgids)
    procs = table() if procs is None else procs
    return [p for p in procs.values() if p.pgid in wanted and p.alive and marked(p)]


def _still(known: Iterable[tuple[int, int]], pgids: Sequence[int]) -> dict[tuple[int, int], ProcInfo]:
    """Those of ``known`` (PID, start time) still alive, the live members of the groups ``pgids``, and every live
    process below any of them (one read of /proc)."""
    procs = table()
    alive = [procs[pid] for pid, begun in known if pid in procs and procs[pid].start == begun]
    out: dict[tuple[int, int], ProcInfo] = {}
    for p in [*alive, *in_groups(pgids, procs)]:
        for q in [p, *below(p.pid, procs)]:
            if q.alive:
                out[(q.pid, q.start)] = q
    return out


def _signal(targets: Iterable[ProcInfo], signum: int) -> None:
    """``signum`` once to each target (the live members of the groups are among them: ``_still``), never to a
    group id as a whole, which may name a stranger's group by now (see the module docstring). Once each: a second
    SIGTERM tells ``agent`` to stop at once instead of cleanly."""
    for p in targets:
        try:
            os.kill(p.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def end_processes(found: Iterable[ProcInfo], *, pgids: Sequence[int] = (), grace: float = GRACE_S,
                  first: int = signal.SIGTERM) -> list[ProcInfo]:
    """End ``found``, every process below them and every member of the groups ``pgids``: ``first`` to each,
    SIGKILL after ``grace`` seconds to what is left (and to what they started meanwhile). Returns the processes
    that needed the SIGKILL."""
    targets = _still([(p.pid, p.start) for p in found], pgids)
    _signal(targets.values(), first)
    deadline = time.monotonic() + grace
    while (targets := _still(targets, pgids)) and time.monotonic() < deadline:
        time.sleep(0.02)
    killed = list(targets.values())
    deadline = time.monotonic() + 10
    while targets and time.monotonic() < deadline:  # SIGKILL cannot be refused: this ends within moments
        _signal(targets.values(), signal.SIGKILL)
        time.sleep(0.02)
        targets = _still(targets, pgids)
    return killed


def end_group(pid: int, *, grace: float = GRACE_S, first: int = signal.SIGTERM) -> list[ProcInfo]:
    """End the process group ``pid`` leads and every process below ``pid`` (``end_processes``)."""
    procs = table()
    return end_processes([procs[pid]] if pid in procs else [], pgids=[pid], grace=grace, first=first)


def start(cmd: Sequence[str | os.PathLike[str]], **popen: Any) -> subprocess.Popen:
    """``subprocess.Popen(cmd, **popen)`` in a session of its own, recorded in ``STARTED``."""
    popen["env"] = {**(popen.get("env") or os.environ), MARK_VARIABLE: MARK}
    proc = subprocess.Popen(cmd, start_new_session=True, **popen)
    STARTED.append(proc.pid)
    return proc


def stop(proc: subprocess.Popen, *, grace: float = GRACE_S, first: int = signal.SIGTERM) -> int:
    """End ``proc``'s group and everything below it (``end_group``), and reap ``proc``; its exit status."""
    end_group(proc.pid, grace=grace, first=first)
    return proc.wait()


def stop_all(started: Sequence[subprocess.Popen], *, grace: float = GRACE_S) -> None:
    """``stop`` for several processes at once: SIGTERM to all of them together, SIGKILL after one ``grace`` to what
    is left."""
    table_now = table()
    leaders = [table_now[p.pid] for p in started if p.pid in table_now]
    end_processes(leaders, pgids=[p.pid for p in started], grace=grace)
    for proc in started:
        proc.wait()


@contextmanager
def running(cmd: Sequence[str | os.PathLike[str]], *, grace: float = GRACE_S, **popen: Any
            ) -> Iterator[subprocess.Popen]:
    """A process for the ``with`` block; its group is ended on the way out, however the block ends."""
    proc = start(cmd, **popen)
    try:
        yield proc
    finally:
        stop(proc, grace=grace)


def run(cmd: Sequence[str | os.PathLike[str]], *, timeout: float, input: str | bytes | None = None,
        capture_output: bool = False, check: bool = False, grace: float = GRACE_S,
        **popen: Any) -> subprocess.CompletedProcess:
    """``subprocess.run`` with the command in its own group, ended with everything it started on a timeout
    (``subprocess.TimeoutExpired``), on any other exception (Ctrl-C) and when it exits leaving processes
    (``LeftBehind``). ``timeout`` is required: a command that hangs must not hang the suite."""
    if capture_output:
        popen["stdout"] = popen["stderr"] = subprocess.PIPE
    if input is not None:
        popen["stdin"] = subprocess.PIPE
    proc = start(cmd, **popen)
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        stop(proc, grace=grace)
        try:  # a process outside the group (it left it) may still hold the pipes: read what came, within a bound
            out, err = proc.communicate(timeout=grace)
        except subprocess.TimeoutExpired as late:
            out, err = late.output, late.stderr
        raise subprocess.TimeoutExpired(proc.args, timeout, output=out, stderr=err) from None
    except BaseException:
        stop(proc, grace=grace)
        raise
    deadline = time.monotonic() + grace
    while (left := in_groups([proc.pid])) and time.monotonic() < deadline:
        time.sleep(0.02)
    if left:
        names = ", ".join(p.describe() for p in left)
        end_group(proc.pid, grace=grace)
        tail = "".join(x.decode(errors="replace") if isinstance(x, bytes) else x for x in (out, err) if x)[-2000:]
        raise LeftBehind(f"{' '.join(map(str, proc.args))!r} exited with {proc.returncode} and left {names} "
                         f"running (now ended); it printed:\n{tail}")
    result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if check:
        result.check_returncode()
    return result

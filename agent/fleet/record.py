"""What a fleet learner says about itself: ``fleet.json`` in its run folder, across restarts, and its retained
status on the bus.

``fleet.json`` holds one segment per learner process of the run (``processes``: pid, host, when it started, when it
was last written, how it ended, its counts: refusals, reconnections, messages published) and ``counts``, the sums
over all of them. Each process adds its segment to what the file holds and rewrites it every ``every_s`` seconds
from the moment its session opened the run folder (atomically: a temporary file renamed), so a process killed with ``kill -9`` leaves counts at most that old, and the
next one marks it ``ended: "killed"`` (it never wrote its end).

The learner's status (``PREFIX/learner/status``, retained, JSON: state, host, pid, since, at, version, step,
pending) is published at the same pace, and ``PREFIX/learner/alive`` says ``up`` while it is connected; the broker
replaces that with ``down`` (the learner's last will) when its connection dies, and a learner that stops cleanly
says ``stopped``. ``agent fleet status`` shows both (``learner_row``): up, or down since its last status.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MAX_STATUS_BYTES = 4096
"""A learner status longer than this is not read (it is a few hundred bytes)."""


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("%s cannot be read (%s); the counts of earlier learner processes are not in the new one", path,
                    exc)
        return {}
    return data if isinstance(data, dict) else {}


class FleetRecord:
    """``fleet.json`` and the learner's status (see the module docstring). ``counts()`` gives this process's counts,
    ``status()`` the changing part of its status; ``publish(dict)`` puts a status on the bus."""

    def __init__(self, run_dir: str | Path, counts: Callable[[], dict[str, int]], *,
                 status: Callable[[], dict[str, Any]] | None = None,
                 publish: Callable[[dict[str, Any]], None] | None = None, every_s: float = 5.0) -> None:
        self.path = Path(run_dir) / "fleet.json"
        self.counts, self.status, self.publish, self.every_s = counts, status, publish, every_s
        self.since = time.time()
        self.me = {"pid": os.getpid(), "host": socket.gethostname(), "started_at": self.since}
        old = _read(self.path)
        earlier = [p for p in old.get("processes", []) if isinstance(p, dict)]
        if not earlier and isinstance(old.get("counts"), dict):  # a fleet.json of one process, from before segments
            earlier = [{"pid": None, "ended": "unknown", "counts": old["counts"]}]
        for p in earlier:
            if p.get("ended") in (None, "running"):
                p["ended"] = "killed"  # it never wrote its end: killed, or its machine went away
        self.earlier = earlier
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> FleetRecord:
        self.write("running")
        self._thread = threading.Thread(target=self._loop, name="fleet-record", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s if (self.path.parent / "inbox").is_dir() else 0.5):
            try:
                self.write("running")
            except OSError as exc:
                log.warning("cannot write %s: %s", self.path, exc)

    def stop(self, how: str = "stopped") -> None:
        """The last write, saying how this process ended; the status ``stopped``."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.write(how)

    def write(self, ended: str) -> None:
        """Rewrite ``fleet.json`` (once the session has opened its run folder: its inbox log is there) and publish
        the status."""
        if (self.path.parent / "inbox").is_dir():
            self._write_file(ended)
        if self.publish is not None:
            extra = self.status() if self.status is not None else {}
            state = "up" if ended == "running" else ended
            self.publish({"state": state, "host": self.me["host"], "pid": self.me["pid"], "since": self.since,
                          "at": time.time(), **extra})

    def _write_file(self, ended: str) -> None:
        mine = {**self.me, "written_at": time.time(), "ended": ended, "counts": dict(self.counts())}
        total: Counter[str] = Counter()
        for p in [*self.earlier, mine]:
            total.update({k: int(v) for k, v in (p.get("counts") or {}).items() if isinstance(v, (int, float))})
        data = {"processes": [*self.earlier, mine], "counts": dict(sorted(total.items()))}
        tmp = self.path.with_name(".fleet.json.tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)


def parse_learner_status(payload: bytes) -> dict[str, Any] | None:
    """A learner status from the bus, or None when it is not one (too long, not a JSON object)."""
    if not payload or len(payload) > MAX_STATUS_BYTES:
        return None
    try:
        data = json.loads(payload)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def learner_row(status: dict[str, Any] | None, alive: str, *, now: float) -> dict[str, Any]:
    """The learner's line of ``agent fleet status``: state up, stopped or down (with since when), its version."""
    status = status or {}
    at = status.get("at")
    at = float(at) if isinstance(at, (int, float)) else None
    said = str(status.get("state", "")) if status else ""
    if said and said != "up" and alive != "up":
        state = said  # it stopped cleanly and said so first (a will that fired after a goodbye cut short changes nothing)
    else:
        state = alive or said or "unknown"
    row: dict[str, Any] = {"state": state, "host": str(status.get("host", "")), "version": status.get("version"),
                           "step": status.get("step"), "pending": status.get("pending"),
                           "last_seen_s": None if at is None else round(max(0.0, now - at), 1)}
    if state == "down":
        row["down_since"] = at  # its last status: it died after that, before the next one was due
    return row

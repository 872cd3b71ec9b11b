"""Versions on the actors' side: loading each announced version (an adapter, or full weights copied into the model in
place; after its checksum) between two steps, and timing "vN written" -> "vN loaded" -> "every actor acting with vN"."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from train.adapters import AdapterError, AdapterRef, load_verified
from train.transport import Transport

log = logging.getLogger(__name__)


@dataclass
class _VersionRecord:
    version: str
    step: int
    written_at: float
    loaded_at: float | None = None
    verify_s: float | None = None
    load_s: float | None = None
    acting: dict[str, float] = field(default_factory=dict)
    """Actor -> wall time its first decision with this version (or a newer one) was made."""
    all_acting_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "step": self.step, "written_at": self.written_at,
                "loaded_at": self.loaded_at, "verify_s": self.verify_s, "load_s": self.load_s,
                "all_acting_at": self.all_acting_at,
                "load_delay_s": None if self.loaded_at is None else self.loaded_at - self.written_at,
                "propagation_s": None if self.all_acting_at is None else self.all_acting_at - self.written_at,
                "actors": dict(self.acting)}


class VersionClock:
    """When each version was written, loaded, and first used by each actor: "vN written" to "every actor acting
    with vN" (an actor that jumps straight to a newer version counts as acting with vN then)."""

    def __init__(self, path: Path) -> None:
        self.records: dict[int, _VersionRecord] = {}
        self.path = path
        self._lock = threading.Lock()

    def published(self, ref: AdapterRef) -> None:
        with self._lock:
            self.records.setdefault(ref.step, _VersionRecord(ref.version, ref.step, ref.written_at))

    def loaded(self, ref: AdapterRef, verify_s: float, load_s: float) -> None:
        with self._lock:
            rec = self.records.setdefault(ref.step, _VersionRecord(ref.version, ref.step, ref.written_at))
            rec.loaded_at, rec.verify_s, rec.load_s = time.time(), verify_s, load_s

    def acted(self, actor: str, step: int | None, at: float, alive: Sequence[str]) -> None:
        if step is None:
            return
        done = []
        with self._lock:
            for s, rec in self.records.items():
                if s <= step and actor not in rec.acting and rec.all_acting_at is None:
                    rec.acting[actor] = at
            for rec in self.records.values():
                if rec.all_acting_at is None and rec.acting and all(a in rec.acting for a in alive):
                    rec.all_acting_at = max(rec.acting[a] for a in alive)
                    done.append(rec)
        for rec in done:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(rec.to_json()) + "\n")
            log.info("every actor acts with %s, %.2f s after it was written", rec.version,
                     rec.all_acting_at - rec.written_at)

    def rows(self) -> list[dict[str, Any]]:
        with self._lock:
            return [self.records[s].to_json() for s in sorted(self.records)]


class AdapterFollower:
    """Keeps the actors' backend on the newest announced version (an adapter or full weights, ``ref.kind``): checks
    each version's bytes, loads it between two steps (one load at a time), and refuses a version whose files do not
    match its sha256 or whose announcement points outside ``root``, the version store of this run (the only folder
    it reads versions from). A refused version is recorded in ``refused`` (what sessions and fleet statuses count)
    and never retried; the actors keep the version they have.

    A fleet actor passes ``fetch``, which brings an announced version from another machine into ``root`` and returns
    its local ref (``agent.fleet.versions.fetch_version``); a fetch that fails with ``OSError`` (the learner's server
    unreachable) is tried again ``retry_s`` later, the actors keeping their version meanwhile. ``load`` loads a
    checked version into the backend (default ``train.adapters.load_verified``; a policy server has its own)."""

    def __init__(self, backend: Any, transport: Transport, clock: VersionClock, *, root: Path,
                 fetch: Callable[[AdapterRef], AdapterRef] | None = None,
                 load: Callable[..., Any] | None = None, retry_s: float = 2.0) -> None:
        self.backend, self.transport, self.clock = backend, transport, clock
        self.root = root
        self.fetch, self.load, self.retry_s = fetch, load or load_verified, retry_s
        self.current: AdapterRef | None = None
        self.refused: dict[str, str] = {}
        """"<step>:<sha256>" -> why, for versions that failed the check (never retried)."""
        self.fetch_errors = 0
        self._retry_at = 0.0
        self._loading: asyncio.Future[None] | None = None
        """The load in flight, shared by every actor that asks meanwhile. An actor cancelled while waiting (a
        restart, the session stopping) leaves it running: a load cut short would leave the version in the backend
        but not in ``current``, and the next actor would load it a second time."""
        self.ready = asyncio.Event()

    def _wanted(self) -> AdapterRef | None:
        ref = self.transport.policy()
        if ref is None or _refusal_key(ref) in self.refused or time.monotonic() < self._retry_at:
            return None
        if self.current is not None and (ref.step, ref.sha256) == (self.current.step, self.current.sha256):
            return None
        return ref

    async def sync(self) -> None:
        """Load the newest announced version if it is not the active one (called by actors between steps)."""
        if self._wanted() is None:
            return
        if self._loading is None or self._loading.done():
            self._loading = asyncio.ensure_future(self._load_newest())
        await asyncio.shield(self._loading)

    async def drain(self) -> None:
        """Wait for a load in flight (before the backend closes)."""
        if self._loading is not None:
            await asyncio.gather(self._loading, return_exceptions=True)

    async def _load_newest(self) -> None:
        ref = self._wanted()
        while ref is not None:
            try:
                local = await asyncio.to_thread(self.fetch, ref) if self.fetch is not None else ref
                times = await asyncio.to_thread(self.load, self.backend, local, root=self.root)
            except OSError as exc:  # the version's server is unreachable: keep the version we have, ask again later
                self.fetch_errors += 1
                self._retry_at = time.monotonic() + self.retry_s
                log.warning("cannot fetch %s (%s); keeping %s, trying again in %.0f s", ref.title, exc,
                            self.current.version if self.current else "the base weights", self.retry_s)
                return
            except AdapterError as exc:  # a checksum mismatch or a path outside the store: refused, never retried
                newer = self.transport.policy()
                if newer is not None and newer.sha256 != ref.sha256:
                    log.info("%s was superseded while loading (%s); loading %s", ref.title, exc, newer.version)
                else:
                    self.refused[_refusal_key(ref)] = str(exc)
                    log.error("refused %s: %s; the actors keep %s", ref.title, exc,
                              self.current.version if self.current else "the base weights")
                ref = self._wanted()
                continue
            self.current = ref
            self.clock.loaded(ref, times.verify_s, times.load_s)
            self.ready.set()
            log.info("actors switched to %s (verify %.3f s, load %.3f s)", ref.title, times.verify_s, times.load_s)
            ref = self._wanted()


def _refusal_key(ref: AdapterRef) -> str:
    return f"{ref.step}:{ref.sha256}"

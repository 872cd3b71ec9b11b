"""An actor's disk spool: every outgoing message waits here until the broker acknowledges it.

``put`` writes the message to its own file (``000000000042.msg``: a 4-byte topic length, the topic, the payload)
under a temporary name and renames it into place, so a killed process leaves whole messages or none; ``ack`` removes
it once the broker's PUBACK came. An actor that restarts with the same spool folder finds what was not acknowledged
and sends it again, in order, with the same bytes and so the same message ids (the learner drops a second
delivery). ``produced.log`` lists every message ever put, one ``id topic`` line each: the audit trail that
nothing was lost.

The spool is bounded (``max_bytes``, ``max_messages``): past either, ``put`` raises ``SpoolFull`` saying how
much is waiting and why (the broker has been unreachable). Actors pause before that (``pending`` is their
backpressure), so a full spool means the broker was away for long. Files are not fsynced unless ``fsync``: a
killed process loses nothing (the kernel has the pages), a power cut may lose the newest messages.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from agent.errors import SpoolFull

log = logging.getLogger(__name__)

_TOPIC_LEN = struct.Struct(">I")
_SUFFIX = ".msg"


@dataclass(slots=True)
class Entry:
    """One spooled message."""

    seq: int
    topic: str
    path: Path
    size: int
    payload: bytes | None = None
    """Kept in memory while the spool's memory budget allows; read back from ``path`` otherwise."""


class Spool:
    """Messages not yet acknowledged by the broker (see the module docstring). Thread-safe."""

    def __init__(self, folder: str | Path, *, max_bytes: int = 2 << 30, max_messages: int = 100_000,
                 memory_bytes: int = 256 << 20, fsync: bool = False) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.max_bytes, self.max_messages, self.memory_bytes, self.fsync = max_bytes, max_messages, memory_bytes, fsync
        self._lock = threading.Lock()
        self._entries: OrderedDict[int, Entry] = OrderedDict()
        self._bytes = 0
        self._memory = 0
        for stale in self.folder.glob(".*.tmp"):  # a put cut short by a kill: never renamed, never acknowledged
            stale.unlink(missing_ok=True)
        for path in sorted(self.folder.glob(f"*{_SUFFIX}")):
            try:
                seq = int(path.stem)
                with open(path, "rb") as f:
                    (n,) = _TOPIC_LEN.unpack(f.read(_TOPIC_LEN.size))
                    topic = f.read(n).decode("utf-8")
                size = path.stat().st_size - _TOPIC_LEN.size - n
            except (ValueError, OSError, struct.error, UnicodeDecodeError) as exc:
                log.warning("spool %s: %s cannot be read (%s); moved aside as %s.bad", self.folder, path.name, exc,
                            path.name)
                path.rename(path.with_name(path.name + ".bad"))
                continue
            self._entries[seq] = Entry(seq, topic, path, size)
            self._bytes += size
        self._next = max(self._entries, default=0) + 1
        if self._entries:
            log.info("spool %s: %d messages (%.1f MB) from before were not acknowledged; sending them again",
                     self.folder, len(self._entries), self._bytes / 1e6)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def bytes(self) -> int:
        with self._lock:
            return self._bytes

    def put(self, topic: str, payload: bytes, key: str = "") -> Entry:
        """Spool one message (``key``, its id, goes to ``produced.log``); ``SpoolFull`` past the limits."""
        with self._lock:
            if len(self._entries) >= self.max_messages or self._bytes + len(payload) > self.max_bytes:
                raise SpoolFull(
                    f"the spool {self.folder} holds {len(self._entries)} messages ({self._bytes / 1e6:.0f} MB) the "
                    f"broker has not acknowledged, its limit is {self.max_messages} messages / "
                    f"{self.max_bytes / 1e6:.0f} MB: the broker has been unreachable for long. Nothing was lost: "
                    f"restart this actor once the broker is back (it sends the spool first), or raise --spool-mb")
            seq = self._next
            self._next += 1
        path = self.folder / f"{seq:012d}{_SUFFIX}"
        tmp = self.folder / f".{seq:012d}.tmp"
        raw = topic.encode("utf-8")
        with open(tmp, "wb") as f:
            f.write(_TOPIC_LEN.pack(len(raw)) + raw)
            f.write(payload)
            if self.fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
        entry = Entry(seq, topic, path, len(payload))
        with self._lock:
            if self._memory + len(payload) <= self.memory_bytes:
                entry.payload = payload
                self._memory += len(payload)
            self._entries[seq] = entry
            self._bytes += len(payload)
            with open(self.folder / "produced.log", "a", encoding="utf-8") as f:
                f.write(f"{key or seq} {topic}\n")
        return entry

    def entries(self) -> list[Entry]:
        """The messages waiting, oldest first."""
        with self._lock:
            return list(self._entries.values())

    def read(self, entry: Entry) -> bytes:
        """The payload of ``entry``."""
        if entry.payload is not None:
            return entry.payload
        data = entry.path.read_bytes()
        (n,) = _TOPIC_LEN.unpack_from(data)
        return data[_TOPIC_LEN.size + n:]

    def ack(self, entry: Entry) -> None:
        """The broker has the message: forget it."""
        with self._lock:
            if self._entries.pop(entry.seq, None) is None:
                return
            self._bytes -= entry.size
            if entry.payload is not None:
                self._memory -= entry.size
                entry.payload = None
        entry.path.unlink(missing_ok=True)


def produced_ids(folder: str | Path) -> list[str]:
    """The ids of every message a spool folder ever took, in order (its ``produced.log``)."""
    path = Path(folder) / "produced.log"
    if not path.is_file():
        return []
    return [line.split(" ", 1)[0] for line in path.read_text(encoding="utf-8").splitlines() if line]


def produced_count(folder: str | Path, kind: str) -> int:
    """How many messages of ``kind`` (samples, episodes) a spool folder ever took, over every process that used it."""
    path = Path(folder) / "produced.log"
    if not path.is_file():
        return 0
    with open(path, encoding="utf-8", errors="replace") as f:
        return sum(1 for line in f if f"/{kind}/" in line)

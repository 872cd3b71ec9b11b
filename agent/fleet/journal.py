"""The fleet learner's inbox log: every sample message is on disk before the broker hears it was received.

A learner that acknowledged a message on arrival and was then killed lost it: the broker had forgotten it, the
learner had not trained on it yet. So the learner's transport (``agent.fleet.mqtt``, manual acknowledgements)
acknowledges a group message only after ``InboxLog.append`` returned, which writes it to ``<run>/inbox/`` and fsyncs
it; and the learner records, before each checkpoint, which messages the update consumed (``consumed``). A learner
started with ``--resume`` opens the log at the step it resumes from and is handed every message that is logged but
was not consumed by that step (``pending``), in the order they came; a second delivery of a logged message (the
broker resends what it had not seen acknowledged) is recognised by its id and dropped.

On disk (``<run>/inbox/``):

- ``messages-000001.log``, ...: records ``HEJ1``, topic, id and payload lengths, a CRC-32 of the three, then the
  three. A record cut short by a kill fails its length or CRC and is cut off when the log is opened (it was never
  acknowledged, so the broker sends it again). A new segment starts past ``segment_bytes``; a closed segment whose
  messages were all consumed before the previous update is deleted, so the log holds about what is pending.
- ``consumed.log``: one JSON line per update, ``{"step": N, "trained": [ids], "dropped": [ids]}`` (dropped: the
  difficulty filter, staleness, a group too small), fsynced before checkpoint N is written. Lines of steps after the
  resumed checkpoint belong to updates that were lost with the killed process: they are cut off, and their messages
  are pending again.

What this does not cover: episode reports (statistics, not training data) are acknowledged on arrival; ids of every
message consumed stay in memory for the run (about 100 bytes each); a disk that lies about fsync.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

_MAGIC = b"HEJ1"
_HEAD = struct.Struct(">4sIIQI")
"""magic, topic length, id length, payload length, CRC-32 of topic + id + payload."""
_SEGMENT = "messages-{:06d}.log"


@dataclass(frozen=True, slots=True)
class Logged:
    """One logged message."""

    topic: str
    id: str
    payload: bytes


def _segment_number(path: Path) -> int:
    try:
        return int(path.stem.split("-", 1)[1])
    except (IndexError, ValueError):
        return -1


class InboxLog:
    """The inbox log of a run (see the module docstring). ``resume_step``: the checkpoint step the learner resumes
    from (None: a fresh run, which must not find a log). Thread-safe."""

    def __init__(self, folder: str | Path, *, resume_step: int | None = None, segment_bytes: int = 64 << 20) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.segment_bytes = segment_bytes
        self._lock = threading.Lock()
        self.consumed_at: dict[str, int] = {}
        """Message id -> the step whose update consumed it (trained or dropped)."""
        self.trained: list[str] = []
        """Ids trained, in order, over the whole run (from ``consumed.log``)."""
        self._segments: dict[int, list[str]] = {}
        """Segment number -> the ids it holds."""
        self._logged: set[str] = set()
        self.step = 0 if resume_step is None else resume_step
        self.cut = 0
        """Update lines cut off at open (updates lost with the killed process)."""
        self._read_consumed()
        records = self._read_segments()
        self.pending: list[Logged] = [r for r in records if r.id not in self.consumed_at]
        """Logged and not consumed by the resumed step: what the learner is handed first, in arrival order."""
        self._current = max(self._segments, default=0) + 1
        self._out = open(self.folder / _SEGMENT.format(self._current), "ab")  # noqa: SIM115 - closed by close()
        self._segments[self._current] = []
        self._out_bytes = 0
        if records or self.consumed_at:
            log.info("inbox log %s: %d messages logged, %d consumed by step %d, %d pending (replayed first)%s",
                     self.folder, len(self._logged), len(self.consumed_at), self.step, len(self.pending),
                     f"; {self.cut} updates after it were lost with the stopped process" if self.cut else "")

    # -- opening ---------------------------------------------------------------------------------------------------

    def _read_consumed(self) -> None:
        path = self.folder / "consumed.log"
        if not path.is_file():
            return
        keep: list[bytes] = []
        for raw in path.read_bytes().splitlines(keepends=True):
            try:
                line = json.loads(raw)
                step, trained, dropped = int(line["step"]), list(line["trained"]), list(line["dropped"])
            except (ValueError, KeyError, TypeError):  # a line cut short by a kill: its checkpoint never followed
                break
            if step > self.step:
                self.cut += 1
                continue
            keep.append(raw if raw.endswith(b"\n") else raw + b"\n")
            for i in trained + dropped:
                self.consumed_at[str(i)] = step
            self.trained.extend(str(i) for i in trained)
        tmp = path.with_name(".consumed.tmp")
        with open(tmp, "wb") as f:
            f.write(b"".join(keep))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def _read_segments(self) -> list[Logged]:
        records: list[Logged] = []
        for path in sorted(self.folder.glob("messages-*.log"), key=_segment_number):
            number, ids = _segment_number(path), []
            data = path.read_bytes()
            at = 0
            while at + _HEAD.size <= len(data):
                magic, nt, ni, npay, crc = _HEAD.unpack_from(data, at)
                end = at + _HEAD.size + nt + ni + npay
                body = data[at + _HEAD.size:end]
                if magic != _MAGIC or end > len(data) or zlib.crc32(body) != crc:
                    break
                topic, mid = body[:nt].decode("utf-8", "replace"), body[nt:nt + ni].decode("utf-8", "replace")
                if mid not in self._logged:
                    self._logged.add(mid)
                    ids.append(mid)
                    records.append(Logged(topic, mid, bytes(body[nt + ni:])))
                at = end
            if at < len(data):  # a record cut short by a kill: never acknowledged, the broker sends it again
                log.warning("inbox log %s: %d bytes at the end cut short (a kill mid-write); cut off", path.name,
                            len(data) - at)
                with open(path, "r+b") as f:
                    f.truncate(at)
            if ids:
                self._segments[number] = ids
            else:
                path.unlink(missing_ok=True)
        return records

    # -- the learner's calls ---------------------------------------------------------------------------------------

    def seen(self, message_id: str) -> bool:
        """Whether a message with this id was logged before (a second delivery)."""
        with self._lock:
            return message_id in self._logged or message_id in self.consumed_at

    def was_consumed(self, message_id: str) -> bool:
        with self._lock:
            return message_id in self.consumed_at

    def append(self, topic: str, message_id: str, payload: bytes) -> bool:
        """Log one message and fsync it; False (nothing written) when its id was logged before."""
        t, i = topic.encode("utf-8"), message_id.encode("utf-8")
        body = t + i + payload
        with self._lock:
            if message_id in self._logged or message_id in self.consumed_at:
                return False
            self._out.write(_HEAD.pack(_MAGIC, len(t), len(i), len(payload), zlib.crc32(body)) + body)
            self._out.flush()
            os.fsync(self._out.fileno())
            self._logged.add(message_id)
            self._segments[self._current].append(message_id)
            self._out_bytes += _HEAD.size + len(body)
            if self._out_bytes >= self.segment_bytes:
                self._rotate()
        return True

    def consumed(self, step: int, trained: list[str], dropped: list[str]) -> None:
        """Update ``step`` consumed these messages (called before its checkpoint is written); fsynced."""
        line = json.dumps({"step": step, "trained": trained, "dropped": dropped}) + "\n"
        with self._lock:
            with open(self.folder / "consumed.log", "a", encoding="utf-8") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
            for i in trained + dropped:
                self.consumed_at[i] = step
            self.trained.extend(trained)
            self.step = step
            self._compact(step - 1)

    def close(self) -> None:
        with self._lock:
            self._out.close()

    # -- segments --------------------------------------------------------------------------------------------------

    def _rotate(self) -> None:
        self._out.close()
        self._current += 1
        self._out = open(self.folder / _SEGMENT.format(self._current), "ab")  # noqa: SIM115
        self._segments[self._current] = []
        self._out_bytes = 0

    def _compact(self, through: int) -> None:
        """Delete closed segments whose messages were all consumed by step ``through`` (a resume goes back at most
        to the previous checkpoint, so the messages of the newest update stay)."""
        for number, ids in list(self._segments.items()):
            if number == self._current:
                continue
            if all(self.consumed_at.get(i, through + 1) <= through for i in ids):
                (self.folder / _SEGMENT.format(number)).unlink(missing_ok=True)
                del self._segments[number]


def read_consumed(folder: str | Path) -> list[dict[str, object]]:
    """The whole lines of ``consumed.log`` (read only: for audits and tests), in order."""
    path = Path(folder) / "consumed.log"
    out: list[dict[str, object]] = []
    if not path.is_file():
        return out
    for raw in path.read_bytes().splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            break
        if isinstance(line, dict):
            out.append(line)
    return out


def logged_ids(folder: str | Path) -> list[str]:
    """The ids of the whole records in the log's segments now (read only), in order."""
    ids: list[str] = []
    for path in sorted(Path(folder).glob("messages-*.log"), key=_segment_number):
        data, at = path.read_bytes(), 0
        while at + _HEAD.size <= len(data):
            magic, nt, ni, npay, crc = _HEAD.unpack_from(data, at)
            end = at + _HEAD.size + nt + ni + npay
            if magic != _MAGIC or end > len(data) or zlib.crc32(data[at + _HEAD.size:end]) != crc:
                break
            ids.append(data[at + _HEAD.size + nt:at + _HEAD.size + nt + ni].decode("utf-8", "replace"))
            at = end
    return ids

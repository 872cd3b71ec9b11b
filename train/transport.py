"""Between actors and the learner: the messages of an online session and the small interface they travel through.

Four kinds of traffic, named after the topics of the fleet bus (docs/design.md, "The transport"):

- ``GroupMessage`` (actor -> learner, ``samples/<actor>``): scored training samples. A group is all messages with
  the same ``group`` key; ``parts`` says how many make it whole (1 for a step-level group: the n candidates of one
  screen; n for an episode-level group: one message per episode of the same task seed).
- ``EpisodeMessage`` (actor -> learner, ``episodes/<actor>``): how an episode ended, for progress and curves.
- ``AdapterRef`` (learner -> actors, ``policy``, retained): the newest adapter version, its folder and sha256.
- ``ActorStatus`` (actor -> all, ``status/<actor>``, retained): what each actor is doing.

``Transport`` is the interface actors and learner use; ``InProcessTransport`` implements it with thread-safe
queues for one process (asyncio actors, a learner thread). A bus implementation (MQTT) implements the same
methods; actors and learner do not change. Its payloads are ``encode_message``/``decode_message``'s: a
schema-versioned JSON header plus binary image parts, with a size limit, never pickle.
``InProcessTransport(wire=True)`` sends every message through that codec, so a session can prove it carries nothing
a bus could not.

``GroupAssembler`` is the learner's side of groups: it joins the parts of each group, drops duplicate message ids
(a bus may deliver twice), and gives up on groups that stay incomplete too long.

Errors (``train.errors``): ``TransportError`` for a message that cannot be encoded, decoded or sent, and its
subclass ``TransportClosed`` once the transport was closed (the session is ending).
"""

from __future__ import annotations

import json
import logging
import queue
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

import numpy as np

from train.adapters import AdapterRef
from train.errors import AdapterError, TransportClosed, TransportError
from train.samples import TrainSample

log = logging.getLogger(__name__)

__all__ = [
    "ActorStatus", "EpisodeMessage", "GroupAssembler", "GroupMessage", "InProcessTransport", "Transport",
    "TransportClosed", "TransportError", "decode_message", "encode_message",
]

SCHEMA = 1
MAX_BYTES = 16 * 1024 * 1024
"""Default size limit of one encoded message (MQTT brokers commonly cap payloads near this)."""
_LEN = struct.Struct(">I")
_CLOSED = object()


# -- messages -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupMessage:
    """Scored samples for one group, or one part of it (see the module docstring)."""

    id: str
    """Unique message id; the learner drops a second delivery of the same id."""
    actor: str
    group: str
    """Group key: the messages with this key form one group."""
    parts: int
    """Messages that make the group whole."""
    level: str
    """"step" (n candidates for one screen) or "episode" (the steps of n episodes of one task seed)."""
    samples: tuple[TrainSample, ...]
    """May be empty: an episode that aborted still counts as a part, so that its group can complete."""
    created_at: float = 0.0

    def __post_init__(self) -> None:
        if self.level not in ("step", "episode"):
            raise ValueError(f"level must be 'step' or 'episode', got {self.level!r}")
        if self.parts < 1:
            raise ValueError(f"parts must be at least 1, got {self.parts}")


@dataclass(frozen=True, slots=True)
class EpisodeMessage:
    """How one episode ended."""

    id: str
    actor: str
    env: str
    seed: int
    episode_id: str
    outcome: str
    """An ``envs.records.Outcome`` value."""
    reward: float | None
    """The task checker's reward (None when the episode aborted or was interrupted)."""
    steps: int
    versions: tuple[str, ...] = ()
    """Adapter versions that decided its steps, in order of first use."""
    started_at: float = 0.0
    ended_at: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds per phase over the episode (reset, decide, verify, step, act, observe, record, ...)."""
    group: str = ""
    """The group key for episode-level groups."""


@dataclass(frozen=True, slots=True)
class ActorStatus:
    """What one actor is doing (retained: the latest per actor)."""

    actor: str
    state: str
    """starting, waiting (for the first adapter), running, restarting, dropped, stopped."""
    version: str | None = None
    episodes: int = 0
    steps: int = 0
    restarts: int = 0
    error: str = ""
    at: float = 0.0


Message = GroupMessage | EpisodeMessage | ActorStatus | AdapterRef


# -- the interface --------------------------------------------------------------------------------------------------


@runtime_checkable
class Transport(Protocol):
    """How actors and the learner talk. Methods never block for long: ``send`` queues (or spools), the receivers
    take a timeout. Thread-safe: actors may run in an event loop and the learner in a thread."""

    def send(self, message: GroupMessage | EpisodeMessage) -> None:
        """Actor -> learner: a group (part) or an episode outcome."""
        ...

    def set_status(self, status: ActorStatus) -> None:
        """An actor's retained status."""
        ...

    def policy(self) -> AdapterRef | None:
        """The newest announced adapter version (retained), None before the first."""
        ...

    def pending_groups(self) -> int:
        """Group messages sent and not yet received by the learner (actors slow down when it grows)."""
        ...

    def announce(self, ref: AdapterRef) -> None:
        """Learner -> actors: a new adapter version (replaces the retained one)."""
        ...

    def receive_group(self, timeout: float | None = None) -> GroupMessage | None:
        """The next group message, waiting up to ``timeout`` seconds (None when none came)."""
        ...

    def receive_episodes(self) -> list[EpisodeMessage]:
        """Every episode message that arrived since the last call (never waits)."""
        ...

    def statuses(self) -> dict[str, ActorStatus]:
        """The latest status of every actor."""
        ...

    def close(self) -> None:
        """Stop: later sends raise ``TransportClosed``; receivers get what is queued, then ``TransportClosed``."""
        ...


class InProcessTransport:
    """``Transport`` over in-process queues (one machine: asyncio actors and a learner thread).

    With ``wire=True`` every message is encoded and decoded on the way (the bus codec), with ``max_bytes`` as the
    size limit."""

    def __init__(self, *, wire: bool = False, max_bytes: int = MAX_BYTES) -> None:
        self.wire = wire
        self.max_bytes = max_bytes
        self._groups: queue.Queue[Any] = queue.Queue()
        self._episodes: queue.Queue[Any] = queue.Queue()
        self._lock = threading.Lock()
        self._policy: AdapterRef | None = None
        self._statuses: dict[str, ActorStatus] = {}
        self._closed = False
        self.sent_bytes = 0
        """Bytes encoded so far (``wire=True`` only)."""

    @property
    def closed(self) -> bool:
        return self._closed

    def _carry(self, message: Any) -> Any:
        if not self.wire:
            return message
        data = encode_message(message, max_bytes=self.max_bytes)
        with self._lock:
            self.sent_bytes += len(data)
        return decode_message(data, max_bytes=self.max_bytes)

    def _check_open(self) -> None:
        if self._closed:
            raise TransportClosed("the transport is closed: the session is ending")

    def send(self, message: GroupMessage | EpisodeMessage) -> None:
        self._check_open()
        if isinstance(message, GroupMessage):
            self._groups.put(self._carry(message))
        elif isinstance(message, EpisodeMessage):
            self._episodes.put(self._carry(message))
        else:
            raise TransportError(f"send takes a GroupMessage or an EpisodeMessage, not {type(message).__name__}")

    def set_status(self, status: ActorStatus) -> None:
        status = self._carry(status)
        with self._lock:
            self._statuses[status.actor] = status

    def policy(self) -> AdapterRef | None:
        with self._lock:
            return self._policy

    def pending_groups(self) -> int:
        return max(0, self._groups.qsize() - self._closed)

    def announce(self, ref: AdapterRef) -> None:
        self._check_open()
        ref = self._carry(ref)
        with self._lock:
            self._policy = ref

    def receive_group(self, timeout: float | None = None) -> GroupMessage | None:
        try:
            msg = self._groups.get(timeout=timeout) if timeout is None or timeout > 0 else self._groups.get_nowait()
        except queue.Empty:
            if self._closed:
                raise TransportClosed("the transport is closed and no group is left") from None
            return None
        if msg is _CLOSED:
            self._groups.put(_CLOSED)  # for the next receiver
            raise TransportClosed("the transport is closed and no group is left")
        return msg

    def receive_episodes(self) -> list[EpisodeMessage]:
        out = []
        while True:
            try:
                out.append(self._episodes.get_nowait())
            except queue.Empty:
                return out

    def statuses(self) -> dict[str, ActorStatus]:
        with self._lock:
            return dict(self._statuses)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._groups.put(_CLOSED)  # wakes a receiver blocked without a timeout


# -- the learner's side of groups -------------------------------------------------------------------------------------


@dataclass
class _Open:
    parts: int
    level: str
    messages: list[GroupMessage] = field(default_factory=list)
    first_at: float = field(default_factory=time.monotonic)


class GroupAssembler:
    """Joins group parts into whole groups (see the module docstring).

    ``add(message)`` returns the groups it completed (lists of samples); a duplicate message id is counted and
    ignored. ``expire()`` returns groups open longer than ``timeout_s`` with the parts they have (an actor that
    died mid-episode never sends its part). Groups with fewer than ``min_samples`` samples are dropped and counted,
    as are episode-level groups with fewer than two episodes: neither has a baseline to compare with."""

    def __init__(self, *, timeout_s: float = 600.0, min_samples: int = 2, remember: int = 100_000) -> None:
        self.timeout_s = timeout_s
        self.min_samples = min_samples
        self._open: dict[str, _Open] = {}
        self._seen: dict[str, None] = {}
        self._remember = remember
        self.duplicates = 0
        self.too_small = 0
        self.expired = 0

    def add(self, message: GroupMessage) -> list[list[TrainSample]]:
        if message.id in self._seen:
            self.duplicates += 1
            return []
        self._seen[message.id] = None
        if len(self._seen) > self._remember:  # ids are unique per session; only recent repeats matter
            for key in list(self._seen)[: self._remember // 2]:
                del self._seen[key]
        entry = self._open.setdefault(message.group, _Open(message.parts, message.level))
        entry.messages.append(message)
        if len(entry.messages) < entry.parts:
            return []
        del self._open[message.group]
        return self._finish(entry)

    def expire(self, now: float | None = None) -> list[list[TrainSample]]:
        now = time.monotonic() if now is None else now
        out = []
        for key, entry in list(self._open.items()):
            if now - entry.first_at > self.timeout_s:
                del self._open[key]
                self.expired += 1
                out.extend(self._finish(entry))
        return out

    @property
    def open_groups(self) -> int:
        return len(self._open)

    def _finish(self, entry: _Open) -> list[list[TrainSample]]:
        samples = [s for m in entry.messages for s in m.samples]
        units = sum(1 for m in entry.messages if m.samples) if entry.level == "episode" else len(samples)
        if len(samples) < self.min_samples or units < 2:
            self.too_small += 1
            return []
        return [samples]


# -- the wire codec ---------------------------------------------------------------------------------------------------


def _sample_json(s: TrainSample, parts: list[np.ndarray], index: dict[int, int]) -> dict[str, Any]:
    if isinstance(s.image, np.ndarray):
        key = id(s.image)
        if key not in index:  # the n samples of a step share one image: send it once
            index[key] = len(parts)
            parts.append(np.ascontiguousarray(s.image))
        row = s.to_json(image_path="")
        row["image"] = None
        row["image_part"] = index[key]
        return row
    return s.to_json()


def _body(message: Message, parts: list[np.ndarray]) -> tuple[str, dict[str, Any]]:
    if isinstance(message, GroupMessage):
        index: dict[int, int] = {}
        return "group", {"id": message.id, "actor": message.actor, "group": message.group, "parts": message.parts,
                         "level": message.level, "created_at": message.created_at,
                         "samples": [_sample_json(s, parts, index) for s in message.samples]}
    if isinstance(message, EpisodeMessage):
        return "episode", {"id": message.id, "actor": message.actor, "env": message.env, "seed": message.seed,
                           "episode_id": message.episode_id, "outcome": message.outcome, "reward": message.reward,
                           "steps": message.steps, "versions": list(message.versions),
                           "started_at": message.started_at, "ended_at": message.ended_at,
                           "timings": dict(message.timings), "group": message.group}
    if isinstance(message, ActorStatus):
        return "status", {"actor": message.actor, "state": message.state, "version": message.version,
                          "episodes": message.episodes, "steps": message.steps, "restarts": message.restarts,
                          "error": message.error, "at": message.at}
    if isinstance(message, AdapterRef):
        return "policy", message.to_json()
    raise TransportError(f"no wire format for {type(message).__name__}")


def encode_message(message: Message, *, max_bytes: int = MAX_BYTES) -> bytes:
    """``message`` as bytes: a 4-byte header length, the JSON header, then the image parts (raw uint8)."""
    parts: list[np.ndarray] = []
    kind, body = _body(message, parts)
    layout, offset = [], 0
    for p in parts:
        if p.dtype != np.uint8:
            raise TransportError(f"image parts must be uint8 arrays, got {p.dtype}")
        layout.append({"shape": list(p.shape), "offset": offset, "length": p.nbytes})
        offset += p.nbytes
    try:
        header = json.dumps({"schema": SCHEMA, "type": kind, "body": body, "parts": layout},
                            ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise TransportError(f"cannot encode a {kind} message as JSON: {exc}") from exc
    size = _LEN.size + len(header) + offset
    if size > max_bytes:
        raise TransportError(f"a {kind} message of {size} bytes exceeds the limit of {max_bytes} bytes; send fewer "
                             f"samples per message or smaller images (model.max_pixels)")
    return b"".join([_LEN.pack(len(header)), header, *(p.tobytes() for p in parts)])


def decode_message(data: bytes, *, max_bytes: int = MAX_BYTES) -> Message:
    """Inverse of ``encode_message``; ``TransportError`` for anything malformed, oversized or of another schema."""
    if len(data) > max_bytes:
        raise TransportError(f"a message of {len(data)} bytes exceeds the limit of {max_bytes} bytes")
    if len(data) < _LEN.size:
        raise TransportError(f"a message of {len(data)} bytes is too short to hold a header")
    (n,) = _LEN.unpack_from(data)
    if _LEN.size + n > len(data):
        raise TransportError(f"the header claims {n} bytes, the message holds {len(data) - _LEN.size}")
    try:
        header = json.loads(data[_LEN.size:_LEN.size + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise TransportError(f"the message header is not JSON: {exc}") from exc
    if not isinstance(header, dict) or header.get("schema") != SCHEMA:
        raise TransportError(f"message schema {header.get('schema') if isinstance(header, dict) else None!r}; "
                             f"this handeye reads schema {SCHEMA}")
    blob = memoryview(data)[_LEN.size + n:]
    try:
        arrays = []
        for p in header["parts"]:
            shape, offset, length = tuple(int(d) for d in p["shape"]), int(p["offset"]), int(p["length"])
            if offset < 0 or offset + length > len(blob) or int(np.prod(shape)) != length:
                raise TransportError(f"image part {p} does not fit the {len(blob)} bytes of parts")
            arrays.append(np.frombuffer(blob[offset:offset + length], dtype=np.uint8).reshape(shape).copy())
        return _message(header["type"], header["body"], arrays)
    except TransportError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, AdapterError) as exc:
        raise TransportError(f"malformed {header.get('type')} message: {type(exc).__name__}: {exc}") from exc


def _message(kind: str, body: dict[str, Any], arrays: list[np.ndarray]) -> Message:
    if kind == "group":
        samples = []
        for row in body["samples"]:
            part = row.pop("image_part", None)
            s = TrainSample.from_json(row)
            samples.append(replace(s, image=arrays[int(part)]) if part is not None else s)
        return GroupMessage(id=str(body["id"]), actor=str(body["actor"]), group=str(body["group"]),
                            parts=int(body["parts"]), level=str(body["level"]), samples=tuple(samples),
                            created_at=float(body["created_at"]))
    if kind == "episode":
        return EpisodeMessage(id=str(body["id"]), actor=str(body["actor"]), env=str(body["env"]),
                              seed=int(body["seed"]), episode_id=str(body["episode_id"]), outcome=str(body["outcome"]),
                              reward=None if body["reward"] is None else float(body["reward"]),
                              steps=int(body["steps"]), versions=tuple(str(v) for v in body["versions"]),
                              started_at=float(body["started_at"]), ended_at=float(body["ended_at"]),
                              timings={str(k): float(v) for k, v in body["timings"].items()},
                              group=str(body.get("group", "")))
    if kind == "status":
        return ActorStatus(actor=str(body["actor"]), state=str(body["state"]), version=body["version"],
                           episodes=int(body["episodes"]), steps=int(body["steps"]), restarts=int(body["restarts"]),
                           error=str(body["error"]), at=float(body["at"]))
    if kind == "policy":
        return AdapterRef.from_json(body)
    raise TransportError(f"unknown message type {kind!r}")


def drain(transport: Transport, timeout: float = 0.0) -> Iterator[GroupMessage]:
    """Every group message queued now (for tests and shutdown)."""
    while True:
        try:
            msg = transport.receive_group(timeout=timeout)
        except TransportClosed:
            return
        if msg is None:
            return
        yield msg

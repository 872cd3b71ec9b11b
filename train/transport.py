"""Between actors and the learner: the small interface the messages of an online session travel through.

The messages are ``train.messages``' (``GroupMessage``, ``EpisodeMessage``, ``ActorStatus``; ``AdapterRef`` from
``train.adapters``) and their bytes ``train.wire``'s (a schema-versioned JSON header plus binary image parts, with
size limits, never pickle). ``Transport`` is the interface actors and learner use; ``InProcessTransport``
implements it with thread-safe queues for one process (asyncio actors, a learner thread); the fleet's MQTT
transport (``agent.fleet.mqtt``) implements the same methods across machines, and actors and learner do not change.
``InProcessTransport(wire=True)`` sends every message through the codec, so a session can prove it carries nothing
a bus could not.

``GroupAssembler`` is the learner's side of groups: it joins the parts of each group, drops duplicate message ids
(a bus may deliver twice), and gives up on groups that stay incomplete too long.

Errors (``train.errors``): ``TransportError`` for a message that cannot be encoded, decoded or sent, and its
subclass ``TransportClosed`` once the transport was closed (the session is ending).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from train.adapters import AdapterRef
from train.errors import TransportClosed, TransportError
from train.messages import ActorStatus, EpisodeMessage, GroupMessage
from train.samples import TrainSample
from train.wire import MAX_BYTES, decode_message, encode_message

log = logging.getLogger(__name__)

__all__ = ["GroupAssembler", "InProcessTransport", "Transport", "drain"]

_CLOSED = object()


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
    size limit and ``compress`` as the image parts' encoding ("" raw, "png")."""

    def __init__(self, *, wire: bool = False, max_bytes: int = MAX_BYTES, compress: str = "") -> None:
        self.wire = wire
        self.max_bytes = max_bytes
        self.compress = compress
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
        data = encode_message(message, max_bytes=self.max_bytes, compress=self.compress)
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
    as are episode-level groups with fewer than two episodes: neither has a baseline to compare with.
    ``on_finish(ids, group)``, when given, is called with the message ids of every group that completed or expired
    and the group returned (None when it was dropped): what a fleet learner records as consumed."""

    def __init__(self, *, timeout_s: float = 600.0, min_samples: int = 2, remember: int = 100_000,
                 on_finish: Callable[[list[str], list[TrainSample] | None], None] | None = None) -> None:
        self.timeout_s = timeout_s
        self.on_finish = on_finish
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
        ids = [m.id for m in entry.messages]
        if len(samples) < self.min_samples or units < 2:
            self.too_small += 1
            if self.on_finish is not None:
                self.on_finish(ids, None)
            return []
        if self.on_finish is not None:
            self.on_finish(ids, samples)
        return [samples]


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

"""What a fleet learner (or observer) accepts from the bus, and what it refuses.

Every payload is data from another machine. Before anything is decoded the topic must belong to the session and
name an actor, and the payload must be within the size limit; then it must decode (``train.wire``: schema,
shapes, fields), be the kind its topic says, and name the actor its topic names (an actor cannot speak for
another; the broker's ACL lets it publish only under its own name). Samples and episodes must come from a known
actor: one named in the learner's allow list (``--actors``) or, without a list, one that has published its status.
An actor's first messages may arrive before its status (a learner that reconnects gets its queued messages before
the retained statuses), so those are held for ``hold_s`` seconds and accepted when the status comes, refused after.

A refusal is counted (``counts``: ``oversize``, ``malformed``, ``unknown_actor``, ``bad_topic``, ``impersonation``),
logged once per actor and kind, and never fatal. A second delivery of an episode message is dropped
(``duplicate_episodes``); a second delivery of a group message goes on to the ``GroupAssembler``, which drops it.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from agent.fleet.settings import Topics
from train.errors import TransportError
from train.messages import ActorStatus, Announcement, EpisodeMessage, GroupMessage
from train.wire import MAX_BYTES, decode_message

log = logging.getLogger(__name__)

_EXPECTED = {"samples": GroupMessage, "episodes": EpisodeMessage, "status": ActorStatus, "policy": Announcement}


class Inbox:
    """Checks incoming payloads (see the module docstring) and hands on what passes.

    ``deliver(kind, message)`` is called with each accepted sample, episode, status or announcement message;
    ``on_hold(kind, message)`` with each message held for its actor's status (a learner logs it before it
    acknowledges it: ``agent.fleet.journal``)."""

    def __init__(self, topics: Topics, deliver: Callable[[str, Any], None], *, allow: Iterable[str] = (),
                 max_bytes: int = MAX_BYTES, hold_s: float = 30.0, hold_max: int = 2000,
                 on_hold: Callable[[str, Any], None] | None = None) -> None:
        self.topics, self.deliver, self.on_hold = topics, deliver, on_hold
        self.allow = frozenset(allow)
        self.max_bytes, self.hold_s, self.hold_max = max_bytes, hold_s, hold_max
        self.counts: collections.Counter[str] = collections.Counter()
        self.known: set[str] = set(self.allow)
        self._held: dict[str, collections.deque[tuple[float, str, Any]]] = {}
        self._episodes_seen: dict[str, None] = {}
        self._logged: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def counts_now(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)

    def _refuse(self, why: str, actor: str, detail: str) -> None:
        with self._lock:
            self.counts[why] += 1
            first = (why, actor) not in self._logged
            self._logged.add((why, actor))
        if first:
            log.warning("refused a message from %r (%s): %s; further ones like it are only counted", actor or "?",
                        why, detail)

    def take(self, topic: str, payload: bytes) -> None:
        """One message from the bus."""
        kind, actor = self.topics.parse(topic)
        if not kind:
            self._refuse("bad_topic", "", f"topic {topic!r} is not one of this session's")
            return
        if len(payload) > self.max_bytes:
            self._refuse("oversize", actor, f"{len(payload)} bytes on {topic}, the limit is {self.max_bytes}")
            return
        try:
            message = decode_message(payload, max_bytes=self.max_bytes)
        except TransportError as exc:
            self._refuse("malformed", actor, f"on {topic}: {exc}")
            return
        if not isinstance(message, _EXPECTED[kind]):
            self._refuse("malformed", actor, f"a {type(message).__name__} on {topic}")
            return
        if kind != "policy" and message.actor != actor:
            self._refuse("impersonation", actor, f"a message of actor {message.actor!r} on {topic}")
            return
        if kind == "status":
            self._status(actor, message)
        elif kind == "policy":
            self.deliver(kind, message)
        elif actor in self.known:
            self._accept(kind, message)
        elif self.allow:
            self._refuse("unknown_actor", actor, f"{actor!r} is not in the learner's --actors list")
        else:
            self._hold(kind, actor, message)

    def _status(self, actor: str, status: ActorStatus) -> None:
        released: list[tuple[float, str, Any]] = []
        with self._lock:
            if not self.allow and actor not in self.known:
                self.known.add(actor)
                released = list(self._held.pop(actor, ()))
        self.deliver("status", status)
        for _, kind, message in released:
            self._accept(kind, message)

    def _hold(self, kind: str, actor: str, message: Any) -> None:
        with self._lock:
            queue = self._held.setdefault(actor, collections.deque())
            full = len(queue) >= self.hold_max
            if not full:
                queue.append((time.monotonic(), kind, message))
        if not full and self.on_hold is not None:
            self.on_hold(kind, message)
        if full:
            self._refuse("unknown_actor", actor, f"{self.hold_max} messages from {actor!r}, which has published no "
                                                 f"status")

    def expire(self, now: float | None = None) -> None:
        """Refuse held messages of actors whose status did not come within ``hold_s``."""
        now = time.monotonic() if now is None else now
        dropped: list[str] = []
        with self._lock:
            for actor, queue in self._held.items():
                while queue and now - queue[0][0] > self.hold_s:
                    queue.popleft()
                    dropped.append(actor)
        for actor in dropped:
            self._refuse("unknown_actor", actor, f"{actor!r} published no status within {self.hold_s:.0f} s")

    def _accept(self, kind: str, message: Any) -> None:
        if kind == "episodes":
            with self._lock:
                if message.id in self._episodes_seen:
                    self.counts["duplicate_episodes"] += 1
                    return
                self._episodes_seen[message.id] = None
                if len(self._episodes_seen) > 200_000:  # ids are unique per session; only recent repeats matter
                    for key in list(self._episodes_seen)[:100_000]:
                        del self._episodes_seen[key]
        self.deliver(kind, message)

"""What a fleet learner (or observer) accepts from the bus, and what it refuses.

Every payload is data from another machine, and the checks run cheapest first, so that a message is refused before
it costs anything:

1. the topic must belong to the session and name an actor, and the payload must be within the size limit;
2. the sender: with an allow list (``--actors``), samples and episodes of an actor not on it are refused on the
   topic alone, before a byte of the payload is read;
3. the envelope (``train.wire.open_envelope``: the header's JSON, schema and image parts, nothing inflated): it
   must be the kind its topic says, name the actor its topic names (an actor cannot speak for another; the
   broker's ACL lets it publish only under its own name), and declare no more pixels than the per-message budget
   (``max_inflated``);
4. only then is it decoded (``train.wire``: inflated to at most the declared sizes, every field checked, numbers
   finite, images as image parts, never paths).

Samples and episodes must come from a known actor: one named in the allow list or, without a list, one that has
published its status. An actor's first messages may arrive before its status (a learner that reconnects gets its
queued messages before the retained statuses), so those are held, as the bytes that came (not decoded), for
``hold_s`` seconds and decoded and accepted when the status comes, refused after. What is held is capped in total,
over every unknown actor together (``hold_max`` messages and ``hold_bytes`` bytes), so inventing actor names buys
nothing: past the cap a message of an unknown actor is refused at once.

A refusal is counted (``counts``: ``oversize``, ``malformed`` (over the pixel budget included), ``unknown_actor``,
``bad_topic``, ``impersonation``) and never fatal; it is logged rate-limited (``note``): the first of each kind at once, then at most
one line per kind every ``LOG_EVERY_S`` seconds saying how many came since, never a traceback per message. A
second delivery of an episode message is dropped (``duplicate_episodes``); a second delivery of a group message goes
on to the ``GroupAssembler``, which drops it.
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
from train.wire import MAX_BYTES, MAX_INFLATED, Envelope, decode_message, open_envelope

log = logging.getLogger(__name__)

_EXPECTED = {"samples": GroupMessage, "episodes": EpisodeMessage, "status": ActorStatus, "policy": Announcement}
_HEADER_TYPE = {"samples": "group", "episodes": "episode", "status": "status", "policy": "announcement"}
LOG_EVERY_S = 60.0
"""At most one log line per kind of refusal this often (the first at once)."""


class Inbox:
    """Checks incoming payloads (see the module docstring) and hands on what passes.

    ``deliver(kind, message)`` is called with each accepted sample, episode, status or announcement message;
    ``on_hold(kind, actor, payload, message_id)`` with each message held for its actor's status, still undecoded
    (a learner logs it before it acknowledges it: ``agent.fleet.journal``); ``on_expire(ids)`` with the ids of held
    sample messages refused because their actor's status never came (the learner marks them dropped in its log)."""

    def __init__(self, topics: Topics, deliver: Callable[[str, Any], None], *, allow: Iterable[str] = (),
                 max_bytes: int = MAX_BYTES, max_inflated: int = MAX_INFLATED, hold_s: float = 30.0,
                 hold_max: int = 2000, hold_bytes: int = 64 << 20,
                 on_hold: Callable[[str, str, bytes, str], None] | None = None,
                 on_expire: Callable[[list[str]], None] | None = None) -> None:
        self.topics, self.deliver, self.on_hold, self.on_expire = topics, deliver, on_hold, on_expire
        self.allow = frozenset(allow)
        self.max_bytes, self.max_inflated = max_bytes, max_inflated
        self.hold_s, self.hold_max, self.hold_bytes = hold_s, hold_max, hold_bytes
        self.counts: collections.Counter[str] = collections.Counter()
        self.known: set[str] = set(self.allow)
        self._held: dict[str, collections.deque[tuple[float, str, bytes, str]]] = {}
        """Actor -> (when, kind, payload, message id) of each message held for its status."""
        self._held_n = self._held_size = 0
        self._episodes_seen: dict[str, None] = {}
        self._logged: dict[str, tuple[float, int]] = {}
        """Kind of refusal -> (when its last line was logged, how many came since)."""
        self._lock = threading.Lock()

    def counts_now(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)

    @property
    def held(self) -> tuple[int, int]:
        """(messages, bytes) held for actors that have published no status yet, over all of them."""
        with self._lock:
            return self._held_n, self._held_size

    def note(self, why: str, detail: str, exc_info: BaseException | None = None) -> None:
        """Log ``detail`` under the kind ``why``, rate-limited (module docstring); ``exc_info``'s traceback goes
        with the first line of a kind only."""
        now = time.monotonic()
        with self._lock:
            last, since = self._logged.get(why, (None, 0))
            due = last is None or now - last >= LOG_EVERY_S
            self._logged[why] = (now, 0) if due else (last, since + 1)  # type: ignore[assignment]
        if due:
            more = f" ({since} more like it in the last {LOG_EVERY_S:.0f} s, only counted)" if since else ""
            log.warning("%s: %s%s; further ones are counted and logged at most once a minute", why, detail, more,
                        exc_info=exc_info if last is None else None)

    def _refuse(self, why: str, actor: str, detail: str) -> None:
        with self._lock:
            self.counts[why] += 1
        self.note(why, f"refused a message from {actor or '?'!r}: {detail}")

    def take(self, topic: str, payload: bytes) -> None:
        """One message from the bus; never raises for what the message holds."""
        kind, actor = self.topics.parse(topic)
        if not kind:
            self._refuse("bad_topic", "", f"topic {topic[:200]!r} is not one of this session's")
            return
        if len(payload) > self.max_bytes:
            self._refuse("oversize", actor, f"{len(payload)} bytes on {topic}, the limit is {self.max_bytes}")
            return
        if kind in ("samples", "episodes") and self.allow and actor not in self.allow:
            self._refuse("unknown_actor", actor, f"{actor!r} is not in the learner's --actors list (not decoded)")
            return
        try:
            envelope = open_envelope(payload, max_bytes=self.max_bytes, max_inflated=self.max_inflated)
        except TransportError as exc:
            self._refuse("malformed", actor, f"on {topic}: {exc}")
            return
        if envelope.kind != _HEADER_TYPE[kind]:
            self._refuse("malformed", actor, f"a {envelope.kind} message on {topic}")
            return
        if kind != "policy" and envelope.actor != actor:
            self._refuse("impersonation", actor, f"a message of actor {envelope.actor[:80]!r} on {topic}")
            return
        if kind in ("samples", "episodes") and actor not in self.known:
            self._hold(kind, actor, payload, _message_id(envelope))
            return
        self._decoded(kind, actor, topic, payload, envelope)

    def _decoded(self, kind: str, actor: str, topic: str, payload: bytes, envelope: Any = None) -> None:
        try:
            message = decode_message(payload, max_bytes=self.max_bytes, max_inflated=self.max_inflated,
                                     envelope=envelope)
        except TransportError as exc:
            self._refuse("malformed", actor, f"on {topic}: {exc}")
            return
        if not isinstance(message, _EXPECTED[kind]):  # cannot happen past the envelope's kind; kept as a guard
            self._refuse("malformed", actor, f"a {type(message).__name__} on {topic}")
        elif kind == "status":
            self._status(actor, message)
        elif kind == "policy":
            self.deliver(kind, message)
        else:
            self._accept(kind, message)

    def _status(self, actor: str, status: ActorStatus) -> None:
        released: list[tuple[float, str, bytes, str]] = []
        with self._lock:
            if not self.allow and actor not in self.known:
                self.known.add(actor)
                released = list(self._held.pop(actor, ()))
                self._held_n -= len(released)
                self._held_size -= sum(len(p) for _, _, p, _ in released)
        self.deliver("status", status)
        for _, kind, payload, _ in released:
            topic = self.topics.samples(actor) if kind == "samples" else self.topics.episodes(actor)
            self._decoded(kind, actor, topic, payload)

    def _hold(self, kind: str, actor: str, payload: bytes, message_id: str) -> None:
        with self._lock:
            full = self._held_n >= self.hold_max or self._held_size + len(payload) > self.hold_bytes
            if not full:
                entry = (time.monotonic(), kind, payload, message_id)
                self._held.setdefault(actor, collections.deque()).append(entry)
                self._held_n += 1
                self._held_size += len(payload)
        if not full and self.on_hold is not None:
            self.on_hold(kind, actor, payload, message_id)
        if full:
            self._refuse("unknown_actor", actor, f"{actor!r} has published no status, and the messages held for "
                                                 f"such actors are at their cap ({self.hold_max} messages, "
                                                 f"{self.hold_bytes >> 20} MiB, over all of them)")

    def expire(self, now: float | None = None) -> None:
        """Refuse held messages of actors whose status did not come within ``hold_s``."""
        now = time.monotonic() if now is None else now
        dropped: list[str] = []
        expired: list[str] = []
        with self._lock:
            for actor, queue in list(self._held.items()):
                while queue and now - queue[0][0] > self.hold_s:
                    _, kind, payload, message_id = queue.popleft()
                    self._held_n -= 1
                    self._held_size -= len(payload)
                    dropped.append(actor)
                    if kind == "samples":
                        expired.append(message_id)
                if not queue:
                    del self._held[actor]
        for actor in dropped:
            self._refuse("unknown_actor", actor, f"{actor!r} published no status within {self.hold_s:.0f} s")
        if expired and self.on_expire is not None:
            self.on_expire(expired)

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



def _message_id(envelope: Envelope) -> str:
    """The id an opened envelope's header names ("" when it has none that is a string)."""
    body = envelope.header.get("body")
    message_id = body.get("id") if isinstance(body, dict) else None
    return message_id if isinstance(message_id, str) else ""

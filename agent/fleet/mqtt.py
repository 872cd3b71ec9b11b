"""``MqttTransport``: the ``train.transport.Transport`` of a fleet, over an MQTT 3.1.1 broker (aiomqtt).

One object per process, in one of three roles:

- ``actor``: ``send`` encodes a message (``train.wire``) into the actor's disk spool (``agent.fleet.spool``) and
  returns; a publisher sends the spool in order with QoS 1 and forgets each message when the broker acknowledges
  it, so messages put while the broker is away wait on disk and go out, with the same bytes and ids, after the
  reconnection (the learner drops a second delivery). ``set_status`` publishes the actor's retained status; the
  broker publishes the actor's last will (state ``offline``) when its connection dies. ``policy()`` is the newest
  announcement whose signature checks out under the fleet key for this session (``agent.fleet.keys``); one not
  newer than the one it holds (a replay) is refused and counted (``stale_announcement``).
- ``learner``: a persistent session (a fixed client id, clean session off), so what actors publish while the learner
  is away is queued by the broker and delivered when it comes back. Incoming payloads pass ``agent.fleet.inbox``
  (size, schema, topic, known actors). Acknowledgements are manual: a message is acknowledged only after the inbox
  took it, and a group message only once it is in the inbox log (``agent.fleet.journal``, written and fsynced), so a
  learner killed at any moment loses nothing the broker has forgotten; a resumed learner is first handed the
  log's pending messages, and drops second deliveries of logged ones. ``announce`` signs the version for the
  session (the topic prefix) with its files' sizes and the time, and publishes it retained, its folder replaced by
  the URL the learner serves it from (``agent.fleet.versions``); ``set_learner_status`` publishes the learner's own
  status (``agent.fleet.record``), and its last will says ``down`` on ``PREFIX/learner/alive``.
- ``observer`` (``agent fleet status``): reads the retained statuses, the learner's and the announcement.

The MQTT client runs in a thread of its own with its own event loop, so the interface is the same plain,
thread-safe calls as ``InProcessTransport``'s: actors call it from their event loop, the learner from its thread. The
connection is retried forever with a backoff (0.2 s doubling to 5 s) until ``close``. A broker that refuses the client
(a wrong user name or password, a user it does not know) or whose certificate does not verify against the CA is
named as such (``refusal``, the log), and ``wait_admitted`` turns that answer to a first attempt into a
``FleetError``: the commands stop at start with what to fix instead of retrying something that cannot work.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import logging
import queue
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from agent.errors import BadSignature, FleetError
from agent.fleet.inbox import Inbox
from agent.fleet.journal import InboxLog
from agent.fleet.keys import newer, sign, verify
from agent.fleet.settings import BrokerConfig, Topics, refusal
from agent.fleet.spool import Spool
from agent.fleet.versions import sized
from train.adapters import AdapterRef
from train.errors import TransportClosed, TransportError
from train.messages import ActorStatus, Announcement, EpisodeMessage, GroupMessage
from train.wire import MAX_BYTES, decode_message, encode_message

log = logging.getLogger(__name__)

_CLOSED = object()
ROLES = ("actor", "learner", "observer")
class MqttTransport:
    """A transport over MQTT (see the module docstring). ``start()`` before use; ``close()`` when done."""

    def __init__(self, broker: BrokerConfig, *, role: str, key: bytes | None = None, actor: str = "",
                 spool: Spool | None = None, allow: tuple[str, ...] = (), announce_url: str = "",
                 max_bytes: int = MAX_BYTES, window: int = 32, max_buffered: int = 64,
                 status_extras: Callable[[], dict[str, Any]] | None = None, compress: str = "zlib",
                 journal_dir: str | Path | None = None) -> None:
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        if role == "actor" and (not actor or spool is None):
            raise ValueError("an actor's transport needs its name and its spool")
        self.broker, self.role, self.key, self.actor, self.spool = broker, role, key, actor, spool
        self.topics = Topics(broker.prefix)
        self.announce_url = announce_url.rstrip("/")
        self.max_bytes, self.window, self.max_buffered = max_bytes, window, max_buffered
        self.compress = compress
        """How image parts travel (``train.wire``): "zlib" (lossless, 10-30x fewer bytes for screens) or ""."""
        self.status_extras = status_extras
        """Fields every status of this actor adds (device, host, steps/s, refused versions)."""
        self.inbox = Inbox(self.topics, self._deliver, allow=allow, max_bytes=max_bytes,
                           on_hold=self._keep_held, on_expire=self._held_expired)
        self.journal_dir = Path(journal_dir) if journal_dir is not None else None
        self.journal: InboxLog | None = None
        """The learner's inbox log (``agent.fleet.journal``), from ``open_journal``: messages are acknowledged once
        they are in it. Until it is open, samples and episodes wait unacknowledged (the broker holds the rest)."""
        self._journal_open = threading.Event()
        if self.journal_dir is None:
            self._journal_open.set()
        self._taking: tuple[str, bytes] = ("", b"")
        """The topic and payload the inbox is taking now (what the journal writes)."""
        self._learner: dict[str, Any] = {}
        self._alive = ""
        self._status_spooled: int | None = None
        self.counts: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        self._groups: queue.Queue[Any] = queue.Queue()
        self._episodes: queue.Queue[Any] = queue.Queue()
        self._statuses: dict[str, ActorStatus] = {}
        self._policy: AdapterRef | None = None
        self._announcement: Announcement | None = None
        """The verified announcement ``_policy`` came from (what a new one must be newer than)."""
        self._retained: dict[str, bytes] = {}
        self._closed = False
        self._connected = threading.Event()
        self._answered = threading.Event()
        """Set when a connection attempt has ended, either way."""
        self._refusal: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._stop: asyncio.Event | None = None
        self._inflight: set[int] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._thread: threading.Thread | None = None
        tag = hashlib.sha256(broker.prefix.encode()).hexdigest()[:8]
        self.client_id = {"actor": f"handeye-{tag}-actor-{actor}", "learner": f"handeye-{tag}-learner",
                          "observer": f"handeye-{tag}-observer-{socket.gethostname()}-{id(self):x}"}[role][:128]

    # -- life cycle ----------------------------------------------------------------------------------------------------

    def start(self) -> MqttTransport:
        """Start the client thread (the connection is made, and remade, in the background)."""
        ready = threading.Event()
        self._thread = threading.Thread(target=self._thread_main, args=(ready,), name=f"mqtt-{self.role}",
                                        daemon=True)
        self._thread.start()
        ready.wait()
        return self

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    def wait_connected(self, timeout: float) -> bool:
        return self._connected.wait(timeout)

    @property
    def refusal(self) -> str | None:
        """What the broker's last refusal says to fix (module docstring); None while connected, or when the last
        failure was one retrying may cure."""
        with self._lock:
            return self._refusal

    def wait_admitted(self, timeout: float = 15.0) -> None:
        """Wait for the first connection attempt's answer (at most ``timeout`` seconds); ``FleetError`` saying what
        to fix when the broker refused the client or its certificate did not verify. A broker that cannot be reached
        is not an error here: the connection is retried in the background, and an actor spools meanwhile."""
        self._answered.wait(timeout)
        why = self.refusal
        if why and not self.connected:
            raise FleetError(why)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, flush_s: float = 10.0) -> None:
        """Stop. An actor first gives the broker up to ``flush_s`` seconds to take its spool (reconnecting if it
        must; what is left stays on disk for the next start) and its last status; then the client says goodbye, so no
        last will is published."""
        if self._closed:
            return
        if self.role == "learner" and self._learner:  # said before the goodbye (after which no will comes)
            self.set_learner_status({**self._learner, "state": "stopped", "at": time.time()})
        self._closed = True
        end = time.monotonic() + flush_s
        while time.monotonic() < end and (self.spool is not None and len(self.spool) or self._retained):
            self._poke()
            time.sleep(0.02)
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout=15)
        self._groups.put(_CLOSED)

    def _poke(self) -> None:
        if self._loop is not None and self._wake is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake.set)

    # -- the Transport interface -----------------------------------------------------------------------------------

    def send(self, message: GroupMessage | EpisodeMessage) -> None:
        if self._closed:
            raise TransportClosed("the transport is closed: the session is ending")
        if self.spool is None:
            raise TransportError(f"a {self.role}'s transport does not send samples or episodes")
        if isinstance(message, GroupMessage):
            topic = self.topics.samples(self.actor)
        elif isinstance(message, EpisodeMessage):
            topic = self.topics.episodes(self.actor)
        else:
            raise TransportError(f"send takes a GroupMessage or an EpisodeMessage, not {type(message).__name__}")
        self.spool.put(topic, encode_message(message, max_bytes=self.max_bytes, compress=self.compress), message.id)
        self._poke()

    def set_status(self, status: ActorStatus) -> None:
        if status.actor != self.actor and self.role == "actor":
            raise TransportError(f"actor {self.actor!r} cannot publish the status of {status.actor!r}")
        if self.status_extras is not None:
            status = replace(status, **self.status_extras())
        if self.spool is not None:
            status = replace(status, spooled=len(self.spool))
        with self._lock:
            self._status_spooled = status.spooled
            self._statuses[status.actor] = status
            self._retained[self.topics.status(status.actor)] = encode_message(status, max_bytes=self.max_bytes)
        self._poke()

    def policy(self) -> AdapterRef | None:
        with self._lock:
            return self._policy

    def open_journal(self, step: int) -> InboxLog:
        """Learner: open the inbox log at the step the learner starts from (0, or the checkpoint resumed), queue
        its pending messages first, then take what the broker delivers."""
        if self.journal_dir is None:
            raise TransportError("this transport has no inbox log folder")
        journal = InboxLog(self.journal_dir, resume_step=step)
        for logged in journal.pending:
            self._replay(logged.topic, logged.payload)
        self.journal = journal
        self._journal_open.set()
        return journal

    def set_learner_status(self, status: dict[str, Any]) -> None:
        """The learner's own status (``agent.fleet.record``), retained; a state other than ``up`` (stopped, failed)
        also goes to the alive topic."""
        import json

        if self._closed:
            return
        with self._lock:
            self._learner = dict(status)
            self._retained[self.topics.learner] = json.dumps(status).encode("utf-8")
            if status.get("state") != "up":  # stopped or failed: said before the goodbye, so no will follows
                self._retained[self.topics.learner_alive] = str(status.get("state"))[:16].encode("ascii", "replace")
        self._poke()

    def learner_status(self) -> tuple[dict[str, Any] | None, str]:
        """Observer: the learner's retained status (None when it published none) and its alive word (up, down,
        stopped; "" when none)."""
        with self._lock:
            return (dict(self._learner) if self._learner else None), self._alive

    def pending_groups(self) -> int:
        """Actor: messages in the spool not yet acknowledged by the broker; learner: group messages received and not
        yet taken."""
        return len(self.spool) if self.spool is not None else self._groups.qsize()

    def announce(self, ref: AdapterRef) -> None:
        if self._closed:
            raise TransportClosed("the transport is closed: the session is ending")
        if self.key is None:
            raise TransportError("announcing a version needs the fleet key (HANDEYE_FLEET_KEY or --fleet-key)")
        ref = sized(ref)  # what a download may read of each file (agent.fleet.versions)
        if self.announce_url:
            ref = replace(ref, path=f"{self.announce_url}/{Path(ref.path).name}")
        payload = encode_message(sign(ref, self.key, self.broker.prefix), max_bytes=self.max_bytes)
        with self._lock:
            self._policy = ref
            self._retained[self.topics.policy] = payload
        self._poke()

    def receive_group(self, timeout: float | None = None) -> GroupMessage | None:
        try:
            msg = self._groups.get(timeout=timeout) if timeout is None or timeout > 0 else self._groups.get_nowait()
        except queue.Empty:
            if self._closed:
                raise TransportClosed("the transport is closed and no group is left") from None
            return None
        if msg is _CLOSED:
            self._groups.put(_CLOSED)
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

    def counts_now(self) -> dict[str, int]:
        """Refusals (``agent.fleet.inbox``), bad signatures, reconnections, messages published."""
        with self._lock:
            return {**self.inbox.counts_now(), **self.counts}

    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.counts[key] += n

    def _deliver(self, kind: str, message: Any) -> None:
        """Called by the inbox with each accepted message (in the client thread)."""
        if kind == "samples":
            if self.journal is not None:
                if self.journal.was_consumed(message.id):  # trained (or dropped) before a restart: sent again
                    self._count("duplicates_after_restart")
                    return
                self._keep(kind, message)
            self._groups.put(message)
        elif kind == "episodes":
            self._episodes.put(message)
        elif kind == "status":
            with self._lock:
                self._statuses[message.actor] = message
        elif kind == "policy" and self.role != "learner":
            self._take_announcement(message)

    def _keep(self, kind: str, message: Any) -> None:
        """Into the inbox log, before the message is acknowledged: a group message the inbox accepted as it came. One
        released from the hold by its actor's status was logged when it was held (``_keep_held``)."""
        if self.journal is None or kind != "samples":
            return
        topic, payload = self._taking
        if self.topics.parse(topic)[0] == "samples":
            self.journal.append(topic, message.id, payload)

    def _keep_held(self, kind: str, actor: str, payload: bytes, message_id: str) -> None:
        """Into the inbox log, undecoded, before it is acknowledged: a group message held for its actor's status."""
        if self.journal is not None and kind == "samples" and message_id:
            self.journal.append(self.topics.samples(actor), message_id, payload)

    def _held_expired(self, ids: list[str]) -> None:
        """Held group messages whose actor never published a status: dropped in the log, never replayed."""
        if self.journal is not None and ids:
            self.journal.consumed(self.journal.step, [], ids)

    def _replay(self, topic: str, payload: bytes) -> None:
        """A pending message of the inbox log: checked when it first came, handed to the learner again."""
        try:
            message = decode_message(payload, max_bytes=self.max_bytes)
        except TransportError as exc:
            log.error("inbox log: a pending message on %s no longer decodes (%s); skipped", topic, exc)
            return
        if isinstance(message, GroupMessage):
            self._groups.put(message)
            self._count("replayed")

    def _take_announcement(self, announcement: Any) -> None:
        if self.key is None:  # an observer without the key shows the version, unverified
            with self._lock:
                self._policy = announcement.ref
            return
        try:
            ref = verify(announcement, self.key, self.broker.prefix)
        except BadSignature as exc:
            self._count("bad_signature")
            self.inbox.note("bad_signature", f"{exc}; keeping {self._policy.version if self._policy else 'no version'}")
            return
        with self._lock:
            current = self._announcement
            if current is not None and announcement.signature == current.signature:
                return  # the retained announcement again (a reconnection)
            stale = not newer(announcement, current)
            if not stale:
                self._policy, self._announcement = ref, announcement
        if stale:
            assert current is not None
            self._count("stale_announcement")
            self.inbox.note("stale_announcement", f"an announcement of {ref.version} (step {ref.step}) is not newer "
                                                  f"than {current.ref.version} (step {current.ref.step}), which this "
                                                  f"actor runs: a replay; ignored")

    # -- the client thread ---------------------------------------------------------------------------------------

    def _thread_main(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        self._wake, self._stop = asyncio.Event(), asyncio.Event()
        ready.set()
        try:
            loop.run_until_complete(self._main())
        finally:
            loop.close()

    def _client(self, aiomqtt: Any) -> Any:
        b = self.broker
        will = None
        if self.role == "actor":
            last = ActorStatus(self.actor, "offline", error="the connection to the broker was lost (last will)",
                               at=time.time(), host=socket.gethostname())
            if self.status_extras is not None:
                last = replace(last, **self.status_extras())
            will = aiomqtt.Will(self.topics.status(self.actor), encode_message(last), qos=1, retain=True)
        elif self.role == "learner":
            will = aiomqtt.Will(self.topics.learner_alive, b"down", qos=1, retain=True)
        tls = ssl.create_default_context(cafile=b.ca_file or None) if b.tls else None
        client = aiomqtt.Client(b.host, b.port, username=b.username, password=b.password, identifier=self.client_id,
                                clean_session=self.role != "learner", keepalive=b.keepalive, will=will,
                                tls_context=tls, max_inflight_messages=self.window, timeout=10,
                                logger=logging.getLogger("agent.fleet.paho"))
        client.pending_calls_threshold = self.window + 16  # a full publishing window is normal, not a warning
        if self.role == "learner":  # acknowledged by _read once taken (and logged): aiomqtt has no option for it
            client._client.manual_ack_set(True)
        return client

    async def _main(self) -> None:
        import aiomqtt

        backoff, ever, told = 0.2, False, ""
        assert self._stop is not None
        while not self._stop.is_set():
            try:
                async with self._client(aiomqtt) as client:
                    with self._lock:
                        self._refusal = None
                    self._connected.set()
                    self._answered.set()
                    self._count("reconnects" if ever else "connects")
                    if ever:
                        log.info("%s reconnected to %s", self.client_id, self.broker.url)
                    ever, backoff = True, 0.2
                    await self._subscribe(client)
                    if self.role == "learner":
                        await client.publish(self.topics.learner_alive, b"up", qos=1, retain=True, timeout=30)
                    await self._serve(client)
            except aiomqtt.MqttError as exc:
                self._connected.clear()
                self._cancel_publishes()
                if self._stop.is_set():
                    break
                self._count("connection_errors")
                why = refusal(exc, self.broker)
                with self._lock:
                    self._refusal = why
                first = not self._answered.is_set()
                self._answered.set()
                spooled = f" ({len(self.spool)} messages spooled)" if self.spool is not None else ""
                if why:  # said once, from the second try: the first is wait_admitted's to tell
                    if not first and why != told:
                        log.error("%s: %s; retrying (up to every 5 s)%s", self.client_id, why, spooled)
                        told = why
                else:
                    log.warning("%s: broker %s unreachable (%s); retrying in %.1f s%s", self.client_id,
                                self.broker.url, exc, backoff, spooled)
                try:
                    await asyncio.wait_for(self._stop.wait(), timeout=backoff)
                except asyncio.TimeoutError:
                    pass
                backoff = min(backoff * 2, 5.0)
            finally:
                self._connected.clear()

    async def _subscribe(self, client: Any) -> None:
        if self.role == "learner":
            for topic in (self.topics.status(), self.topics.samples(), self.topics.episodes()):
                await client.subscribe(topic, qos=1)
        elif self.role == "observer":
            await client.subscribe(self.topics.status(), qos=1)
            await client.subscribe(self.topics.policy, qos=1)
            await client.subscribe(f"{self.broker.prefix}/learner/+", qos=1)
        else:
            await client.subscribe(self.topics.policy, qos=1)

    async def _serve(self, client: Any) -> None:
        """Read and write until ``close`` (returns) or the connection drops (raises ``MqttError``)."""
        assert self._stop is not None
        reader = asyncio.create_task(self._read(client))
        writer = asyncio.create_task(self._write(client))
        stop = asyncio.create_task(self._stop.wait())
        done, _ = await asyncio.wait({reader, writer, stop}, return_when=asyncio.FIRST_COMPLETED)
        for task in (reader, writer):
            if task not in done:
                task.cancel()
        await asyncio.gather(reader, writer, return_exceptions=True)
        stop.cancel()
        for task in done:
            if task is not stop and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
        await self._publish_retained(client)  # the actor's last status before its goodbye

    async def _read(self, client: Any) -> None:
        async for message in client.messages:
            payload = message.payload if isinstance(message.payload, (bytes, bytearray)) else b""
            topic = str(message.topic)
            if self.role == "observer" and topic in (self.topics.learner, self.topics.learner_alive):
                self._learner_message(topic, bytes(payload))
                continue
            while not self._journal_open.is_set() and self.topics.parse(topic)[0] in ("samples", "episodes"):
                await asyncio.sleep(0.05)  # not acknowledged meanwhile: the broker sends no more than its window
            try:
                self._taking = (topic, bytes(payload))
                self.inbox.take(topic, bytes(payload))
            except OSError:  # the inbox log cannot be written: not acknowledged, the broker sends it again
                self._count("journal_errors")
                log.exception("a message on %s could not be logged; not acknowledged", topic)
                continue
            except Exception as exc:  # a message the checks missed must not end the client: counted, skipped
                self._count("errors")
                self.inbox.note("errors", f"a message on {topic} could not be taken ({type(exc).__name__}: {exc}); "
                                          f"skipped", exc_info=exc)
            finally:
                self._taking = ("", b"")
            if self.role == "learner" and message.qos:
                client._client.ack(message.mid, message.qos)
            while self.role == "learner" and self._groups.qsize() >= self.max_buffered:
                await asyncio.sleep(0.02)  # the learner is behind: let the broker hold the rest

    def _learner_message(self, topic: str, payload: bytes) -> None:
        from agent.fleet.record import parse_learner_status

        with self._lock:
            if topic == self.topics.learner_alive:
                self._alive = payload[:16].decode("ascii", "replace")
            else:
                self._learner = parse_learner_status(payload) or {}

    def _refresh_spooled(self) -> None:
        """An actor's retained status says how many messages its spool holds now, not when it was last set."""
        if self.spool is None:
            return
        with self._lock:
            mine = self._statuses.get(self.actor)
            if mine is None or self._status_spooled == len(self.spool):
                return
        self.set_status(mine)

    async def _write(self, client: Any) -> None:
        assert self._wake is not None
        window = asyncio.Semaphore(self.window)
        while True:
            self._wake.clear()
            self._refresh_spooled()
            await self._publish_retained(client)
            if self.spool is not None:
                for entry in self.spool.entries():
                    if entry.seq in self._inflight:
                        continue
                    await window.acquire()
                    self._inflight.add(entry.seq)
                    task = asyncio.create_task(self._publish(client, entry, window))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
            self.inbox.expire()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=0.5)
            except asyncio.TimeoutError:
                pass

    async def _publish(self, client: Any, entry: Any, window: asyncio.Semaphore) -> None:
        import aiomqtt

        assert self.spool is not None
        try:
            await client.publish(entry.topic, self.spool.read(entry), qos=1, timeout=60)
            self.spool.ack(entry)
            self._count("published")
        except aiomqtt.MqttError:
            pass  # the connection is gone: the entry stays in the spool and goes out after the reconnection
        finally:
            self._inflight.discard(entry.seq)
            window.release()

    async def _publish_retained(self, client: Any) -> None:
        with self._lock:
            pending, self._retained = self._retained, {}
        try:
            for topic, payload in pending.items():
                await client.publish(topic, payload, qos=1, retain=True, timeout=30)
        except BaseException:
            with self._lock:  # not sent: put back unless something newer replaced it meanwhile
                for topic, payload in pending.items():
                    self._retained.setdefault(topic, payload)
            raise

    def _cancel_publishes(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        self._inflight.clear()

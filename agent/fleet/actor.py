"""``agent actor``: one device on the bus. The same ``OnlineActor`` as in one process, given a context whose
transport is MQTT, whose versions come over HTTP, and whose task seeds are its own.

What the process holds (``FleetActor``): its run folder (``runs/actor-<name>``: episodes as in any run, ``spool/``
with the messages the broker has not acknowledged and ``produced.log``, ``adapters/`` with the versions it fetched),
an ``MqttTransport`` in the actor role, the model (in this process, or a policy server through ``ServedAdapters``),
an ``AdapterFollower`` that fetches each signed announcement's files from the learner and loads them between two
steps, and the task stream: the actor draws seeds from the environment's seeds in its own seeded order (the
session's ``data.seeds``), and at episode level runs the ``rl.group_size`` episodes of a group itself. The
curriculum's hard-task replay is an in-process feature; a fleet learner does not steer actors.

Backpressure: the actor pauses while ``max_pending`` messages wait in its spool (the broker is away or slow),
so a long outage fills the spool slowly, not at full speed; a full spool stops the actor with ``SpoolFull``.
Every status it publishes says which device it drives, on which host, its steps/s, refused versions (a checksum or
size that does not match, a bad signature, another session's, or an announcement not newer than the one it runs)
and spool size.
A broker that refuses its user or password, or whose certificate does not verify, stops it at start, before the
model loads (``MqttTransport.wait_admitted``); one that cannot be reached is retried while the actor spools.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import time
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agent.errors import OnlineError
from agent.fleet.mqtt import MqttTransport
from agent.fleet.settings import BrokerConfig, check_actor_name
from agent.fleet.spool import Spool, produced_count
from agent.fleet.versions import fetch_version
from agent.online.actors import OnlineActor, step_rule
from agent.online.context import ActorContext, ActorSettings, Counters
from agent.online.settings import env_device_kind
from agent.online.tasks import Jobs, TaskSampler
from agent.online.versions import AdapterFollower, VersionClock
from agent.signals import StopSignals
from devices.registry import DEFAULT_KIND
from envs.trajectory import RunWriter

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ActorOptions:
    """One fleet actor's settings (the model and group size come from the training config)."""

    name: str
    env: str
    device: str = DEFAULT_KIND
    """The device kind it drives (``devices.registry``)."""
    address: str = ""
    """The device's address, for kinds that take one (android: the phone's adb serial); "" for the kind's
    default."""
    policy_url: str = ""
    """An OpenAI-compatible server (vLLM) to act with, instead of the model in this process."""
    run_dir: str = ""
    """Default: runs/actor-<name> (continued when it exists: its spool is sent first)."""
    group_level: str = "step"
    max_steps: int | None = None
    """Step budget per episode; None = the environment's."""
    max_restarts: int = 2
    max_pending: int = 256
    """Spooled messages at which the actor pauses until the broker has taken some."""
    spool_mb: int = 2048
    fsync: bool = False
    compress: str = "zlib"
    """How frames travel: "zlib" (lossless, 10-30x fewer bytes) or "" (raw pixels: less CPU, more bandwidth)."""
    max_episodes: int | None = None
    """Stop after this many episodes; None = never."""
    max_wall_s: float | None = None
    """Stop after this many seconds; None = never."""

    def __post_init__(self) -> None:
        check_actor_name(self.name)
        from devices.registry import device_kind

        kind = device_kind(self.device)  # UnknownDeviceKind (a ValueError) naming the closest kind
        if self.address and not kind.address:
            raise ValueError(f"the {kind.name} device takes no address; use --device {kind.name}")
        if self.group_level not in ("step", "episode"):
            raise ValueError(f"group_level {self.group_level!r} is not step or episode")


class ReportingClock(VersionClock):
    """The actor's ``VersionClock``; when the actor first decides with a newer version it says so at once (its
    status, with the time), so the learner can time "every actor acting with vN"."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.on_new_version: Any = None
        self._step: int | None = None

    def acted(self, actor: str, step: int | None, at: float, alive: Any) -> None:
        super().acted(actor, step, at, alive)
        if step is not None and step != self._step:
            self._step = step
            if self.on_new_version is not None:
                self.on_new_version()


class FleetActor:
    """One actor process (see the module docstring). ``await run()`` until ``stop()`` or a limit."""

    def __init__(self, config: Any, options: ActorOptions, broker: BrokerConfig, key: bytes) -> None:
        runs_on = env_device_kind(options.env)
        if runs_on != options.device:
            raise OnlineError(f"{options.env} runs on a {runs_on or 'unknown'} device, not --device {options.device}")
        if options.policy_url and config.model.finetune == "full":
            from agent.fleet.served import SERVED_FULL_WEIGHTS

            raise OnlineError(SERVED_FULL_WEIGHTS.format(what="model.finetune=full"))
        self.step_rule = step_rule(config.data.reward)  # data.reward without an online form: refused at start
        self.config, self.options, self.broker, self.key = config, options, broker, key
        self.run_dir = Path(options.run_dir or f"runs/actor-{options.name}")
        self.stopping = False
        self.counters = Counters()
        self._warned: set[str] = set()
        self._fatal: BaseException | None = None
        self._t0 = time.monotonic()
        self._earlier_episodes = 0
        """Episodes earlier processes with this run folder sent (its spool's produced.log): the status counts all."""
        self.actor: OnlineActor | None = None
        self.transport: MqttTransport | None = None
        self.follower: AdapterFollower | None = None
        self.backend: Any = None

    def stop(self, reason: str = "") -> None:
        if not self.stopping:
            log.info("actor %s stopping%s", self.options.name, f" ({reason})" if reason else "")
        self.stopping = True

    def _fatal_error(self, error: BaseException) -> None:
        self._fatal = self._fatal or error
        log.error("%s", error)
        self.stop("error")

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message)

    def _status_extras(self) -> dict[str, Any]:
        o, a = self.options, self.actor
        elapsed = time.monotonic() - self._t0
        counts = self.transport.counts_now() if self.transport else {}
        refused = (len(self.follower.refused) if self.follower else 0) + counts.get("bad_signature", 0) + \
            counts.get("stale_announcement", 0)  # forged, of another session, or a replay of an older one
        from devices.registry import device_kind

        return {"device": device_kind(o.device).selector(o.address),
                "host": socket.gethostname(), "refused": refused,
                "episodes": self._earlier_episodes + (a.episodes if a is not None else 0),
                "steps_per_s": round(a.decisions / elapsed, 3) if a is not None and elapsed > 0 else 0.0}

    def _build_model(self) -> tuple[Any, Any, Any]:
        """(backend, model policy, the follower's load function)."""
        from policy.model import ModelPolicy
        from policy.presets import Decoding
        from train.adapters import load_verified
        from train.build import build_backend, model_preset

        cfg = replace(self.config, model=replace(self.config.model, adapter=""))
        if self.options.policy_url:
            from agent.fleet.served import ServedAdapters, load_served

            _, preset = model_preset(cfg)  # the server serves model.id under that name (vllm serve MODEL)
            backend: Any = ServedAdapters(self.options.policy_url, cfg.model.id, folder_root=self.run_dir / "served")
            load: Any = load_served
        else:
            backend = build_backend(cfg)
            preset, load = backend.preset, load_verified
        preset = replace(preset, decoding=Decoding(temperature=1.0, top_p=1.0, max_new_tokens=cfg.rl.max_new_tokens))
        if not cfg.model.variant:  # the device picks the prompt (a phone's on Android)
            from devices.registry import device_kind
            from policy.formats import on_screen

            preset = on_screen(preset, device_kind(self.options.device).screen)
        return backend, ModelPolicy(backend, preset, n=cfg.rl.group_size), load

    def _context(self, run: RunWriter, model_policy: Any, clock: VersionClock) -> ActorContext:
        o, cfg = self.options, self.config
        session_id = f"{o.name}-{int(time.time()):x}"
        settings = ActorSettings(env=o.env, device_kind=o.device, addresses=(o.address,) if o.address else (),
                                 max_steps=o.max_steps, group_level=o.group_level, group_size=cfg.rl.group_size,
                                 max_restarts=o.max_restarts, session_id=session_id, reward=self.step_rule)
        seed = cfg.train.seed * 1_000_003 + zlib.crc32(o.name.encode())  # each actor its own order of the seeds
        jobs = Jobs(TaskSampler(o.env, cfg.data.seeds, seed), None, level=o.group_level, n=cfg.rl.group_size,
                    batch=1, prefix=f"{session_id}/")
        return ActorContext(
            settings=settings, run=run, jobs=jobs, policy=model_policy, follower=self.follower, versions=clock,
            transport=self.transport, generate=self._generate, wait_for_room=self._wait_for_room,
            wait_ready=self._wait_ready, stopping=lambda: self.stopping, alive_actors=lambda: [o.name],
            counters=self.counters, warn_once=self._warn_once, fatal=self._fatal_error)

    async def _generate(self, request: Any) -> Any:
        (generation,) = await self.backend.generate([request])
        return generation

    async def _wait_for_room(self) -> None:
        while not self.stopping and self.transport is not None and len(self.transport.spool) >= \
                self.options.max_pending:
            await asyncio.sleep(0.05)

    async def _wait_ready(self) -> None:
        assert self.follower is not None
        while not self.stopping:
            await self.follower.sync()
            if self.follower.ready.is_set():
                return
            await asyncio.sleep(0.05)

    def _open_run(self) -> RunWriter:
        if (self.run_dir / "run.json").is_file():
            return RunWriter.reopen(self.run_dir)
        self.run_dir.parent.mkdir(parents=True, exist_ok=True)
        return RunWriter(self.run_dir.parent, {"kind": "fleet-actor", "actor": self.options.name,
                                               "env": self.options.env, "broker": self.broker.url},
                         run_id=self.run_dir.name)

    async def run(self) -> int:
        """Act until stopped; returns the episodes run. Raises the error that stopped it, if one did."""
        o = self.options
        run = self._open_run()
        spool = Spool(self.run_dir / "spool", max_bytes=o.spool_mb << 20, fsync=o.fsync)
        self._earlier_episodes = produced_count(spool.folder, "episodes")  # the status counts the whole run's
        self.transport = MqttTransport(self.broker, role="actor", key=self.key, actor=o.name, spool=spool,
                                       status_extras=self._status_extras, compress=o.compress).start()
        signals = StopSignals(lambda signum: self.stop("signal")).install()
        try:
            await asyncio.to_thread(self.transport.wait_admitted)  # a refusal stops it before the model loads
            self.backend, model_policy, load = await asyncio.to_thread(self._build_model)
            clock = ReportingClock(self.run_dir / "adapters.jsonl")
            self.follower = AdapterFollower(self.backend, self.transport, clock, root=self.run_dir / "adapters",
                                            fetch=functools.partial(fetch_version, root=self.run_dir / "adapters"),
                                            load=load)
            self.actor = OnlineActor(self._context(run, model_policy, clock), 0, name=o.name)
            clock.on_new_version = self.actor.status
            log.info("actor %s on %s (%s) joins %s", o.name, o.env, o.device, self.broker.url)
            task = asyncio.create_task(self.actor.run())
            while not task.done() and not self.stopping and not self._limit_reached():
                await asyncio.sleep(0.1)
            self.stop("limit" if self._limit_reached() else "")
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        finally:
            signals.remove()
            if self.follower is not None:
                await self.follower.drain()
            if self.backend is not None:
                await self.backend.close()
            await asyncio.to_thread(self.transport.close)
        if self._fatal is not None:
            raise self._fatal
        if self.actor is not None and self.actor.state == "dropped":
            raise OnlineError(f"actor {o.name} stopped after {self.actor.failures} device failures in a row; last: "
                              f"{self.actor.error}. Fix the device, then start it again (its spool is kept)")
        return self.actor.episodes if self.actor else 0

    def _limit_reached(self) -> bool:
        o, a = self.options, self.actor
        return bool((o.max_episodes is not None and a is not None and a.episodes >= o.max_episodes)
                    or (o.max_wall_s is not None and time.monotonic() - self._t0 >= o.max_wall_s))


"""The online session: actors and a learner in one process (see ``agent.online``)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import shutil
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from agent.online.actors import OnlineActor, step_rule
from agent.online.batcher import Batcher
from agent.online.context import ActorContext, ActorSettings, Counters, LearnerContext
from agent.online.curve import plot_online_curve
from agent.online.demos import session_replay
from agent.online.learner import LearnerLoop
from agent.online.results import EpisodeStats, OnlineResult, finite, previous_curve
from agent.online.settings import (SESSION_FILE, OnlineConfig, OnlineError, check_actors, config_overrides,
                                   online_json)
from agent.online.tasks import Jobs, LockedCurriculum, TaskSampler
from agent.online.versions import AdapterFollower, VersionClock
from agent.signals import StopSignals, signal_name
from envs.trajectory import RunWriter
from train.adapters import AdapterStore
from train.config import with_run_dir
from train.transport import InProcessTransport, Transport

log = logging.getLogger(__name__)


class OnlineSession:
    """Actors and a learner in one process (see ``agent.online``).

    Args:
        config: the training config (model, RL update, outputs in ``train.run_dir``); stage rl, LoRA or full
            fine-tuning (versions of full weights, copied into the actors' model in place: docs/online.md).
        online: the session's settings (default: ``config.online``, the ``[online]`` section); given, they replace
            that section.
        resume: continue the run in ``train.run_dir`` from its last checkpoint.
        transport: how actors and learner talk (default: in-process queues).
        progress: called with each progress line (default: logged).
        logits_processor_factory: constrained decoding for the actors' backend (``TransformersBackend``'s).
    """

    def __init__(self, config: Any, online: OnlineConfig | None = None, *, resume: bool = False,
                 transport: Transport | None = None, progress: Callable[[str], None] | None = None,
                 logits_processor_factory: Callable[[Any], Any] | None = None) -> None:
        if config.train.stage != "rl":
            raise OnlineError(f"online sessions train with RL; train.stage is {config.train.stage!r}: set it to rl")
        self.step_rule = step_rule(config.data.reward)  # data.reward without an online form: refused before anything
        online = config.online if online is None else online
        if not online.env:
            raise OnlineError("online.env is empty: name the environment the actors run (--env ENV; agent envs lists "
                              "them)")
        if not online.remote_actors:  # a fleet's actors check their own device
            check_actors(online.env, online.device_kind, online.actors, online.serials)
        self.online = online
        self.resume = resume
        config = with_run_dir(config, "online")  # an empty train.run_dir: a new runs/online-<time>
        overrides: dict[str, Any] = {"resume": "auto" if resume else ""}
        self.config = replace(
            config, train=replace(config.train, **overrides), log=replace(config.log, progress=False), online=online,
            rl=replace(config.rl, max_staleness=online.max_policy_lag))
        self.run_dir = Path(self.config.train.run_dir)
        if resume:  # a checkpoint of another model is refused now, before any model, actor or browser starts
            from train.model_identity import check_resume

            check_resume(self.config, self.run_dir)
        self.transport: Transport = transport or InProcessTransport(wire=online.wire)
        self.progress = progress
        self.logits_processor_factory = logits_processor_factory
        self.session_id = f"s{int(time.time()):x}"
        self.clock = VersionClock(self.run_dir / "adapters.jsonl")
        self.stats = EpisodeStats()
        self.stopping = False
        self.stopped_by = ""
        self.stop_signal: int | None = None
        """The signal (Ctrl-C, SIGTERM, SIGHUP) that stopped the session, if one did (``agent.signals``)."""
        self._fatal: BaseException | None = None
        self._warned: set[str] = set()
        self._stop: asyncio.Event | None = None
        self.counters = Counters()
        self._t0: float | None = None
        self._offset_s = 0.0
        self._episode_offset = 0
        self.actors: list[OnlineActor] = []
        self._batcher: Batcher | None = None
        self.trainer: Any = None
        self.learner: LearnerLoop | None = None
        self.backend: Any = None
        self.follower: AdapterFollower | None = None
        self._acting: dict[str, int] = {}
        """Remote actors: the adapter step each was last seen acting with (from its status)."""
        self.result = OnlineResult(self.run_dir)

    # -- small helpers used by actors ---------------------------------------------------------------------------------

    def alive_actors(self) -> list[str]:
        if self.online.remote_actors:
            return sorted(name for name, st in self.transport.statuses().items()
                          if st.state in ("starting", "waiting", "running", "restarting"))
        return [a.name for a in self.actors if a.state not in ("dropped", "stopped")]

    def warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message)

    def fatal(self, error: BaseException) -> None:
        """Stop the session because of ``error`` (raised from ``run``)."""
        if self._fatal is None:
            self._fatal = error
            log.error("%s", error)
        self.request_stop("error")

    def counts(self) -> dict[str, int]:
        return self.counters.snapshot()

    async def wait_for_room(self) -> None:
        """Backpressure: wait while the learner's backlog (messages queued plus groups waiting in its feed) is at
        ``max_pending``. Past it, samples would wait for more than ``max_policy_lag`` updates and be dropped as
        stale, so making more of them would only waste the devices' time."""
        per_message = self.config.rl.group_size if self.online.group_level == "episode" else 1
        lag = self.online.max_policy_lag
        limit = self.online.max_pending or self.config.rl.prompts_per_batch * per_message * (
            4 if lag is None else max(1, lag))
        while not self.stopping and self.transport.pending_groups() + self._learner_backlog(per_message) >= limit:
            await asyncio.sleep(0.02)

    def _learner_backlog(self, per_message: int) -> int:
        return self.learner.buffered * per_message if self.learner is not None else 0

    async def wait_ready(self) -> None:
        """Wait for the learner's first adapter version (every sample then carries a version)."""
        assert self.follower is not None
        while not self.stopping:
            await self.follower.sync()
            if self.follower.ready.is_set():
                if self._t0 is None:
                    self._t0 = time.perf_counter()
                return
            await asyncio.sleep(0.05)

    async def generate(self, request: Any) -> Any:
        if self._batcher is not None:
            return await self._batcher.generate(request)
        (gen,) = await self.backend.generate([request])
        return gen

    def request_stop(self, reason: str) -> None:
        if not self.stopping:
            self.stopping = True
            self.stopped_by = self.stopped_by or reason
            log.info("stopping the online session (%s)", reason)
        if self._stop is not None:
            self._stop.set()

    # -- set-up --------------------------------------------------------------------------------------------------------

    def _setup(self) -> None:
        """Heavy set-up (models, the trainer), in a worker thread."""
        from policy.model import ModelPolicy
        from policy.presets import Decoding
        from train.build import build_reward
        from train.trainer import Trainer, build_backend

        cfg, online = self.config, self.online
        if online.torch_threads is not None:
            import torch

            torch.set_num_threads(online.torch_threads)
        self.tasks = TaskSampler(online.env, cfg.data.seeds, cfg.train.seed)
        learner_backend = build_backend(cfg)
        # The actors score the samples (the step reward); the trainer holds data.reward's own offline form, so a
        # prompt it would ever score gets the real reward, never a stand-in 0.
        self.trainer = Trainer(cfg, backend=learner_backend, prompts=self.tasks,
                               reward_fn=build_reward(cfg, learner_backend.preset))
        if not cfg.model.variant:  # the actors' prompts, local or remote, are their screen's: the run records it
            from devices.registry import device_kind
            from policy.formats import on_screen

            self.trainer.prompt_preset = on_screen(learner_backend.preset, device_kind(online.device_kind).screen)
        if self.trainer.curriculum is not None:
            self.trainer.curriculum = LockedCurriculum(self.trainer.curriculum)
        self.demos = session_replay(online, learner_backend, self.trainer.curriculum,  # None unless demo_share
                                    rule=self.step_rule)
        if not online.remote_actors:
            # The actors' model: the same base weights, no adapter until the learner's first version arrives.
            self.backend = build_backend(replace(cfg, model=replace(cfg.model, adapter="")))
            self.backend.logits_processor_factory = self.logits_processor_factory
            preset = replace(self.backend.preset, decoding=Decoding(temperature=1.0, top_p=1.0,
                                                                     max_new_tokens=cfg.rl.max_new_tokens))
            # Temperature 1, top-p 1, no penalties: the behaviour log-probs are the model's own.
            if not cfg.model.variant:  # the actors' device picks the prompt (a phone's on Android)
                from devices.registry import device_kind
                from policy.formats import on_screen

                preset = on_screen(preset, device_kind(online.device_kind).screen)
            self.model_policy = ModelPolicy(self.backend, preset, n=cfg.rl.group_size)
        store = AdapterStore(self.run_dir / "adapters", keep=online.keep_adapters)
        self.learner = LearnerLoop(self._learner_context(), self.trainer, store)

    def _learner_context(self) -> LearnerContext:
        return LearnerContext(
            transport=self.transport, versions=self.clock, filter=self.config.filter,
            max_policy_lag=self.online.max_policy_lag, prompts_per_batch=self.config.rl.prompts_per_batch,
            stopping=lambda: self.stopping, request_stop=self.request_stop, counters=self.counters,
            episode_stats=self.stats.snapshot, alive_actors=self.alive_actors, elapsed=self.elapsed,
            journal=self.run_dir / "received.log" if self.online.remote_actors else None,
            group_timeout_s=self.online.group_timeout_s,
            open_inbox_log=getattr(self.transport, "open_journal", None),
            demos=getattr(self, "demos", None))

    def _actor_context(self) -> ActorContext:
        o = self.online
        settings = ActorSettings(env=o.env, device_kind=o.device_kind, addresses=tuple(o.serials),
                                 max_steps=o.max_steps, group_level=o.group_level,
                                 group_size=self.config.rl.group_size, max_restarts=o.max_restarts,
                                 session_id=self.session_id, reward=self.step_rule)
        return ActorContext(
            settings=settings, run=self.run_writer, jobs=self.jobs, policy=self.model_policy, follower=self.follower,
            versions=self.clock, transport=self.transport, generate=self.generate, wait_for_room=self.wait_for_room,
            wait_ready=self.wait_ready, stopping=lambda: self.stopping, alive_actors=self.alive_actors,
            counters=self.counters, warn_once=self.warn_once, fatal=self.fatal)

    def _open_run(self) -> RunWriter:
        run_config = {"kind": "online", "online": dataclasses.asdict(self.online), "train": self.config.to_dict()}
        if not self.resume:
            if self.run_dir.exists() and any(self.run_dir.iterdir()):
                raise OnlineError(f"{self.run_dir} is not empty: leave --run-dir out for a new folder, or continue "
                                  f"that run with agent train --online --resume {self.run_dir}")
            self.run_dir.parent.mkdir(parents=True, exist_ok=True)
            return RunWriter(self.run_dir.parent, run_config, run_id=self.run_dir.name)
        if not (self.run_dir / SESSION_FILE).is_file():
            raise OnlineError(f"{self.run_dir} is not an online run (no {SESSION_FILE}); pass the run folder of an "
                              f"earlier agent train --online")
        return RunWriter.reopen(self.run_dir)

    def _save_session(self) -> None:
        path = self.run_dir / SESSION_FILE
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"sessions": []}
        data["online"] = online_json(self.online)
        data["train"] = self.config.to_dict()
        data["train_overrides"] = config_overrides(self.config)
        data["sessions"].append({"id": self.session_id, "started_at": time.time(), "resume": self.resume})
        path.write_text(json.dumps(data, indent=1), encoding="utf-8")

    def elapsed(self) -> float:
        """Acting wall time of the run, earlier sessions of a resumed run included."""
        return self._offset_s + (time.perf_counter() - self._t0 if self._t0 is not None else 0.0)

    # -- the run ------------------------------------------------------------------------------------------------------

    async def run(self) -> OnlineResult:
        """Run until the learner has done ``train.steps`` updates (or a limit, Ctrl-C, an error); returns what
        happened. Raises ``OnlineError`` when a learner error, every actor's device, or a setting stopped it."""
        created = not self.run_dir.exists()
        self.run_writer = self._open_run()
        try:
            return await self._run()
        except BaseException:
            self._discard(created)
            raise

    def _discard(self, created: bool) -> None:
        """A new session that failed before its first update leaves nothing behind: no checkpoint means nothing to
        continue, and a half-made folder would only refuse the next start (``_open_run``)."""
        from train.checkpoint import latest_checkpoint

        if self.resume or latest_checkpoint(self.run_dir) is not None or not self.run_dir.is_dir():
            return
        if created:
            shutil.rmtree(self.run_dir, ignore_errors=True)
        else:  # the folder was there (empty) before: keep it, empty again
            for child in self.run_dir.iterdir():
                if child.is_dir():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)
        log.warning("removed %s: the session stopped before its first update, so there is nothing to resume",
                    self.run_dir)

    async def _run(self) -> OnlineResult:
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        await asyncio.to_thread(self._setup)
        if self.resume:  # the curve goes on from where the earlier sessions of this run left it
            self._offset_s, self._episode_offset = previous_curve(self.run_dir / "online.jsonl")
            self._tell_when_no_checkpoint()
        self._save_session()
        if self.online.remote_actors:  # the actors are other processes: they act as soon as a version is out
            self._t0 = time.perf_counter()
        else:
            self._local_actors()
        sigint = _install_sigint(loop, self)
        self.learner.start(loop)
        tasks = [asyncio.create_task(a.run(), name=a.name) for a in self.actors]
        monitor = asyncio.create_task(self._monitor(tasks), name="monitor")
        try:
            await self._stop.wait()
        except asyncio.CancelledError:
            self.request_stop("interrupted")
            raise
        finally:
            await self._shutdown(tasks, monitor, sigint)
        return self._finish()

    def _local_actors(self) -> None:
        self.follower = AdapterFollower(self.backend, self.transport, self.clock, root=self.run_dir / "adapters")
        self._batcher = Batcher(self.backend, self.online.actors) if self.online.batch_decode else None
        self.jobs = Jobs(self.tasks, self.trainer.curriculum, level=self.online.group_level,
                         n=self.config.rl.group_size, batch=self.config.rl.prompts_per_batch,
                         prefix=f"{self.session_id}/")
        actor_context = self._actor_context()
        self.actors = [OnlineActor(actor_context, i) for i in range(self.online.actors)]

    def _remote_acting(self) -> None:
        """Remote actors say in their status which version they act with since when: the propagation clock's
        "acting with vN" (``VersionClock.acted``), as local actors report it directly."""
        from train.learner import version_step

        alive = self.alive_actors()
        for name, status in self.transport.statuses().items():
            step = version_step(status.version)
            if step is not None and step != self._acting.get(name):
                self._acting[name] = step
                self.clock.acted(name, step, status.at, alive)

    def _tell_when_no_checkpoint(self) -> None:
        """A resumed run without a checkpoint starts from the base model again (v0): said, not silent."""
        from train.checkpoint import latest_checkpoint

        if latest_checkpoint(self.run_dir) is None:
            line = (f"{self.run_dir} holds no checkpoint yet (its earlier sessions stopped before the first update): "
                    f"the learner starts from the base model, version 0")
            if self.progress is not None:
                self.progress(line)
            else:
                log.warning("%s", line)

    async def _monitor(self, actor_tasks: list[asyncio.Task[None]]) -> None:
        """Episode outcomes in, progress out, and the session's own stop conditions."""
        curve = open(self.run_dir / "online.jsonl", "a", encoding="utf-8")
        last_line = 0.0
        try:
            while True:
                for m in self.transport.receive_episodes():
                    self.stats.add(m)
                    snap = self.stats.snapshot()
                    curve.write(json.dumps({
                        "t": round(self.elapsed(), 3), "time": m.ended_at,
                        "episode": self._episode_offset + snap["episodes"],
                        "actor": m.actor, "seed": m.seed, "episode_id": m.episode_id, "outcome": m.outcome,
                        "reward": m.reward, "steps": m.steps, "versions": list(m.versions),
                        "update": self.trainer.step, "success_rate": finite(snap["success_rate"]),
                        "group": m.group, "session": self.session_id}) + "\n")
                    curve.flush()
                now = time.perf_counter()
                if now - last_line >= self.online.progress_every_s:
                    last_line = now
                    self._progress_line()
                o = self.online
                snap = self.stats.snapshot()
                if o.max_episodes is not None and snap["episodes"] >= o.max_episodes:
                    self.request_stop("max-episodes")
                if o.max_wall_s is not None and self._t0 is not None and time.perf_counter() - self._t0 >= o.max_wall_s:
                    self.request_stop("max-wall")
                if self.online.remote_actors:
                    self._remote_acting()
                elif all(t.done() for t in actor_tasks) and not self.stopping:
                    errors = [a.error for a in self.actors if a.state == "dropped"]
                    self.fatal(OnlineError(f"every actor was dropped (last error: {errors[-1] if errors else '?'})"
                                           + (f"; the learner's checkpoints are in {self.run_dir}/checkpoints"
                                              if self.trainer is not None and self.trainer.step else "")))
                await asyncio.sleep(0.1)
        finally:
            for m in self.transport.receive_episodes():
                self.stats.add(m)
            curve.close()

    def _progress_line(self) -> str:
        snap = self.stats.snapshot()
        samples = self.counters.snapshot().get("samples_received" if self.online.remote_actors else "samples_sent", 0)
        elapsed = time.perf_counter() - self._t0 if self._t0 else 0.0
        rate = f"{snap['success_rate']:.0%}" if math.isfinite(snap["success_rate"]) else "-"
        reward = f"{snap['reward_mean']:.2f}" if math.isfinite(snap["reward_mean"]) else "-"
        current = self.follower.current if self.follower is not None else self.transport.policy()
        version = current.version if current else "-"
        per_s = (lambda n: n / elapsed) if elapsed else (lambda n: 0.0)
        updates = self.trainer.step if self.trainer else 0
        line = (f"{elapsed:6.0f}s  episodes {snap['episodes']}  success {rate} (last 50)  reward {reward}  "
                f"samples/s {per_s(samples):.1f}  steps/s {per_s(snap['steps']):.2f}  version {version}  "
                f"updates {updates}/{self.config.train.steps}  actors {len(self.alive_actors())}/{self.online.actors}")
        if self.progress is not None:
            self.progress(line)
        else:
            log.info("%s", line)
        return line

    async def _shutdown(self, tasks: list[asyncio.Task[None]], monitor: asyncio.Task[None],
                        sigint: Callable[[], None]) -> None:
        self.stopping = True
        wall = time.perf_counter() - self._t0 if self._t0 is not None else 0.0
        for t in tasks:
            t.cancel()  # an episode in flight is recorded as interrupted; devices close in the actors' finally
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._batcher is not None:
            await self._batcher.close()
        # The learner finishes its update, sees the stream end, writes its checkpoint and the final adapter.
        await asyncio.to_thread(self.learner.join)
        self.transport.close()
        await asyncio.sleep(0)
        monitor.cancel()
        await asyncio.gather(monitor, return_exceptions=True)
        sigint()
        self.result.wall_s = wall
        if self.follower is not None:
            await self.follower.drain()
        if self.backend is not None:
            await self.backend.close()
        if self.trainer is not None:
            await self.trainer.backend.close()

    def _finish(self) -> OnlineResult:
        from train.checkpoint import latest_checkpoint

        r, snap = self.result, self.stats.snapshot()
        r.updates = self.trainer.step if self.trainer else r.updates
        r.episodes, r.successes, r.steps = int(snap["episodes"]), int(snap["successes"]), int(snap["steps"])
        r.stopped_by = self.stopped_by
        counts = self.counters.snapshot()
        r.samples, r.stale_dropped = counts.get("samples_received", 0), counts.get("stale_dropped", 0)
        r.no_signal = counts.get("groups_no_signal", 0)
        r.restarts = sum(a.restarts for a in self.actors)
        r.dropped_actors = [a.name for a in self.actors if a.state == "dropped"]
        r.refused_adapters = (len(self.follower.refused) if self.follower is not None
                              else sum(st.refused for st in self.transport.statuses().values()))
        r.versions = self.clock.rows()
        r.timings = {k: round(v, 4) for k, v in self.stats.timings.items()}
        r.learn_s = self.learner.learn_s if self.learner else 0.0
        r.checkpoint = latest_checkpoint(self.run_dir)
        (self.run_dir / "online_summary.json").write_text(json.dumps(r.to_dict(), indent=1, default=str) + "\n",
                                                          encoding="utf-8")
        try:
            plot_online_curve(self.run_dir / "online.jsonl", self.run_dir / "online_curve.png")
        except ImportError:
            log.warning("matplotlib is missing: no online_curve.png")
        if self.online.report:
            from agent.report import build_report

            r.report = build_report(self.run_dir)
        self._progress_line()
        if self.learner is not None and self.learner.error is not None:
            e = self.learner.error
            r.error = f"{type(e).__name__}: {e}"
            then = (f"checkpoint {r.checkpoint}; after fixing the cause, continue with agent train --online --resume "
                    f"{self.run_dir}" if r.checkpoint else "it failed before the first update, so there is no "
                    "checkpoint to continue from: after fixing the cause, start again")
            raise OnlineError(f"the learner failed at update {self.trainer.step + 1}: {type(e).__name__}: {e}. The run "
                              f"stopped; {then}") from e
        if self._fatal is not None:
            r.error = str(self._fatal)
            raise self._fatal
        return r


def _install_sigint(loop: asyncio.AbstractEventLoop, session: OnlineSession) -> Callable[[], None]:
    """First Ctrl-C, SIGTERM or SIGHUP: a clean stop (checkpoint, devices closed), the signal kept in
    ``session.stop_signal``; a second one: the default (Ctrl-C aborts, SIGTERM and SIGHUP end the process at once).
    Returns what removes the handlers."""

    def first(signum: int) -> None:
        name = signal_name(signum)
        log.warning("%s: stopping cleanly (the learner checkpoints, devices close); %s again to abort", name, name)
        session.stop_signal = signum
        session.request_stop("interrupted")

    return StopSignals(first).install(loop).remove

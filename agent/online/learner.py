"""The learner side of an online session: ``Trainer.run_stream`` in a thread, fed from the transport, publishing
adapter vN after every update.

The feed joins group parts (``GroupAssembler``), adds a recorded success to groups of tasks the policy keeps failing
when success replay is on (``agent.online.demos``), leaves out groups with nothing to learn from (the difficulty
filter; equal rewards when there is no KL term), and hands the trainer a batch only when it has
``rl.batch_prompts`` groups whose samples are at most ``max_policy_lag`` versions behind, judged right before the update that uses them (the
learner's own ``max_staleness`` is set to the same lag as a backstop). The trainer's ``on_start`` hook, called after
resuming from a checkpoint, publishes the version the actors start with.

A fleet learner (``ctx.open_inbox_log``, ``agent.fleet.journal``) also keeps account of every group message: the ids
each update trained and those it dropped (filtered, stale, a group too small) are recorded, then the update's
checkpoint is written, and only then is its version announced. So a version that actors act with can always be
reproduced by ``--resume`` (never a second, different vN), and a resumed learner knows which logged messages are
still to be trained. A run whose store holds a version newer than the checkpoint it resumes from (from before
this rule, or resumed from an older checkpoint by hand) is refused instead of announcing that name again.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Iterator
from typing import Any

from agent.errors import OnlineError
from agent.online.context import LearnerContext
from train.adapters import AdapterRef, AdapterStore
from train.samples import TrainSample
from train.transport import GroupAssembler, TransportClosed

log = logging.getLogger(__name__)


class LearnerLoop:
    """The learner thread of a session, which it sees through ``ctx`` (see the module docstring)."""

    def __init__(self, ctx: LearnerContext, trainer: Any, store: AdapterStore) -> None:
        self.ctx, self.trainer, self.store = ctx, trainer, store
        self.assembler = GroupAssembler(timeout_s=ctx.group_timeout_s, on_finish=self._finished)
        self.inbox_log: Any = None
        """A fleet learner's inbox log, opened at the start (``ctx.open_inbox_log``)."""
        self._ids_of: dict[int, list[str]] = {}
        """id() of a group the assembler just returned -> its message ids (taken by ``feed`` at once)."""
        self._trained: list[str] = []
        self._dropped: list[str] = []
        """Message ids consumed since the last update (recorded in the inbox log before its checkpoint)."""
        self.error: BaseException | None = None
        self.learn_s = 0.0
        """Seconds spent in updates (with their hooks: publishing, metrics, checkpoints)."""
        self.buffered = 0
        """Whole groups waiting in the feed for the next update (part of the backlog actors pace themselves by)."""
        self._thread: threading.Thread | None = None
        trainer.on_start.append(self._started)  # the version the actors start with (after a resume)
        trainer.on_update.append(self.after_update)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._thread = threading.Thread(target=self._main, args=(loop,), name="learner", daemon=True)
        self._thread.start()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def _main(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            self.trainer.run_stream(self.feed())
        except BaseException as exc:  # noqa: BLE001 - reported to the session, which stops the run
            self.error = exc
            log.error("the learner failed: %s: %s", type(exc).__name__, exc, exc_info=exc)
            self._emergency_checkpoint()
        finally:
            loop.call_soon_threadsafe(self.ctx.request_stop, "learner-error" if self.error else "learner-done")

    def _emergency_checkpoint(self) -> None:
        """After an error: the last completed update's state, unless a checkpoint of it exists already."""
        try:
            self.trainer.checkpoint_unless_saved()
        except Exception as exc:  # the run is failing already; say so and keep the first error
            log.error("writing a checkpoint after the learner error failed too: %s: %s", type(exc).__name__, exc)

    def publish(self) -> AdapterRef:
        ref = self.store.publish(self.trainer.learner)
        self.ctx.versions.published(ref)
        self.ctx.transport.announce(ref)
        return ref

    def _started(self, step: int) -> None:
        """After the resume: announce the version the actors start with. A fleet learner announces the stored
        version of its checkpoint's step as it is (the same name, the same bytes), and refuses a store that holds a
        newer one (see the module docstring)."""
        if self.ctx.open_inbox_log is None:
            self.publish()
            return
        steps = self.trainer.learner.steps
        latest = self.store.latest()
        if latest is not None and latest.step > steps:
            raise OnlineError(
                f"{self.store.root} holds version {latest.version}, newer than the checkpoint resumed from (step "
                f"{step}, version @{steps}): resuming would announce a second, different version under names the "
                f"actors already acted with. Resume from the newest checkpoint, or start a new run (--run-dir)")
        self.inbox_log = self.ctx.open_inbox_log(step)
        if latest is not None and latest.step == steps and step:
            self.ctx.versions.published(latest)
            self.ctx.transport.announce(latest)
            return
        self.publish()

    def _finished(self, ids: list[str], group: list[TrainSample] | None) -> None:
        if group is None:
            self._dropped.extend(ids)
        else:
            self._ids_of[id(group)] = ids

    def feed(self) -> Iterator[list[TrainSample]]:
        """Scored groups for ``Trainer.run_stream``, a batch at a time (see the module docstring)."""
        from train.curriculum import Correctness

        ctx = self.ctx
        flt, lag, count = ctx.filter, ctx.max_policy_lag, ctx.counters.add
        learner = self.trainer.learner
        correct = Correctness()
        no_kl = learner.kl_coef == 0
        per_batch = ctx.prompts_per_batch
        batch: list[list[TrainSample]] = []
        batch_ids: list[list[str]] = []
        while not ctx.stopping():
            try:
                msg = ctx.transport.receive_group(timeout=0.2)
            except TransportClosed:
                return
            groups = self._assemble(msg) if msg is not None else []
            groups += self.assembler.expire()
            for g in groups:
                ids = self._ids_of.pop(id(g), [])
                count("samples_received", len(g))
                count("groups_received")
                if ctx.demos is not None:  # success replay: before the filter, which would drop an all-wrong group
                    room = sum(any(x.origin.get("demo") for x in b) for b in batch) < ctx.demos.per_batch(per_batch)
                    mixed = ctx.demos.mix(g, room=room)
                    if len(mixed) > len(g):
                        count("demo_groups")
                        count("demo_samples", len(mixed) - len(g))
                    g = mixed
                n_ok = sum(correct(x) for x in g)
                if (flt.drop_all_correct and n_ok == len(g)) or (flt.drop_all_wrong and n_ok == 0):
                    count("groups_filtered")
                    self._dropped.extend(ids)
                    continue
                if no_kl and len({x.reward for x in g}) < 2:
                    # equal rewards: every advantage is 0 and there is no KL term, so nothing to learn from it
                    count("groups_no_signal")
                    self._dropped.extend(ids)
                    continue
                batch.append(g)
                batch_ids.append(ids)
            self.buffered = len(batch)
            if len(batch) < per_batch:
                continue
            if lag is not None:  # staleness is judged now, right before the update that would use them
                fresh, fresh_ids = [], []
                for g, ids in zip(batch, batch_ids):
                    kept = [x for x in g if learner.staleness(x) <= lag]
                    count("stale_dropped", len(g) - len(kept))
                    if len(kept) >= 2 and (kept[0].origin.get("level") != "episode"
                                           or len({x.origin.get("episode") for x in kept}) >= 2):
                        fresh.append(kept)
                        fresh_ids.append(ids)
                    else:
                        self._dropped.extend(ids)
                batch, batch_ids = fresh, fresh_ids
                if len(batch) < per_batch:
                    continue
            out, batch = batch[:per_batch], batch[per_batch:]
            self._trained.extend(i for ids in batch_ids[:per_batch] for i in ids)
            batch_ids = batch_ids[per_batch:]
            self.buffered = len(batch)
            yield from out[:-1]
            t_last = time.perf_counter()
            yield out[-1]
            # resumed when the trainer asks for the next batch: the update (and its hooks) ran in between
            self.learn_s += time.perf_counter() - t_last

    def _assemble(self, msg: Any) -> list[list[TrainSample]]:
        """``GroupAssembler.add``, and the message's id in the journal when it was a first delivery."""
        duplicates = self.assembler.duplicates
        groups = self.assembler.add(msg)
        if self.ctx.journal is not None and self.assembler.duplicates == duplicates:
            with open(self.ctx.journal, "a", encoding="utf-8") as f:
                f.write(f"{msg.id} {msg.actor}\n")
        return groups

    def after_update(self, step: int, metrics: dict[str, float]) -> None:
        """After every update (learner thread): publish vN, add the session's numbers to the metrics."""
        ctx = self.ctx
        if self.inbox_log is not None:  # what this update consumed, then its checkpoint, then its announcement
            self.inbox_log.consumed(step, self._trained, self._dropped)
            self._trained, self._dropped = [], []
            self.trainer.checkpoint()
        published = ctx.transport.policy()
        if published is None or published.step != self.trainer.learner.steps:
            t0 = time.perf_counter()
            ref = self.publish()
            metrics["time/publish_s"] = time.perf_counter() - t0
            metrics["online/version"] = float(ref.step)
        snap = ctx.episode_stats()
        counts = ctx.counters.snapshot()
        done = [r for r in ctx.versions.rows() if r["propagation_s"] is not None]
        metrics.update({k: v for k, v in (("online/success_rate", snap["success_rate"]),
                                          ("online/reward_mean", snap["reward_mean"])) if math.isfinite(v)})
        metrics.update({
            "online/episodes": float(snap["episodes"]), "online/steps": float(snap["steps"]),
            "online/samples_received": float(counts.get("samples_received", 0)),
            "online/stale_dropped": float(counts.get("stale_dropped", 0)),
            "online/groups_filtered": float(counts.get("groups_filtered", 0)),
            "online/groups_no_signal": float(counts.get("groups_no_signal", 0)),
            "online/demo_groups": float(counts.get("demo_groups", 0)),
            "online/duplicates": float(self.assembler.duplicates),
            "online/groups_expired": float(self.assembler.expired),
            "online/actors_alive": float(len(ctx.alive_actors())),
            "online/wall_s": ctx.elapsed(),
        })
        if done:
            metrics["online/propagation_s"] = float(done[-1]["propagation_s"])

"""Actors: each drives its own device through the environment with the agent's environment loop, samples from the
session's shared backend, scores the answers and sends the samples."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from agent.eval import run_env_episode
from agent.online.settings import OnlineError
from agent.online.tasks import Job
from envs.records import Outcome
from policy.base import Decision, HistoryEntry
from policy.backends.hf import split_images
from policy.errors import FormatParseError
from train.rewards import is_collinear
from train.samples import TrainSample
from train.transport import ActorStatus, EpisodeMessage, GroupMessage

if TYPE_CHECKING:
    from agent.online.session import OnlineSession

log = logging.getLogger(__name__)


class Batcher:
    """Joins the actors' concurrent generate calls into one backend call (one batched ``generate``)."""

    def __init__(self, backend: Any, max_batch: int) -> None:
        self.backend, self.max_batch = backend, max_batch
        self._pending: list[tuple[Any, asyncio.Future[Any]]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def generate(self, request: Any) -> Any:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="generate-batcher")
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append((request, fut))
        self._wake.set()
        return await fut

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await asyncio.sleep(0)  # let actors that are about to ask join this batch
            while self._pending:
                batch, self._pending = self._pending[:self.max_batch], self._pending[self.max_batch:]
                batch = [(r, f) for r, f in batch if not f.done()]
                if not batch:
                    continue
                try:
                    gens = await self.backend.generate([r for r, _ in batch])
                except Exception as exc:  # every waiting actor sees the backend's error
                    for _, f in batch:
                        if not f.done():
                            f.set_exception(exc)
                    continue
                for (_, f), g in zip(batch, gens):
                    if not f.done():
                        f.set_result(g)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


class TimedDevice:
    """A device proxy that adds the seconds spent in observe, act and settle to ``clock`` (the environment calls
    them inside its own reset and step)."""

    def __init__(self, inner: Any, clock: dict[str, float]) -> None:
        self._inner, self._clock = inner, clock

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def _timed(self, phase: str, coro: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return await coro
        finally:
            self._clock[phase] = self._clock.get(phase, 0.0) + time.perf_counter() - t0

    async def observe(self) -> Any:
        return await self._timed("observe", self._inner.observe())

    async def act(self, action: Any) -> Any:
        return await self._timed("act", self._inner.act(action))

    async def settle(self) -> Any:
        return await self._timed("settle", self._inner.settle())


def step_reward(hits: Sequence[bool] | None, *, collinear: bool = False) -> tuple[float, dict[str, float]]:
    """(reward, parts) of one answer from the step verifier's verdicts on its actions, in order.

    AEPO's released reward (shared/research/algorithms.md §1.3) with the environment's verifier in place of the box
    test: an answer that does not parse scores -1; N actions (points) of which the first correct one is the k-th
    score 1 + 1/sqrt(N k); none correct, 1 - 1/N; three collinear points, -1. With one action per answer (the
    other families) that is 2 for a right action, 0 for a wrong one and -1 for no parsable answer.
    ``parts["correct"]`` is 1 when some action is right (what the curriculum and the filters count)."""
    if hits is None:
        return -1.0, {"format": 0.0, "accuracy": -1.0, "correct": 0.0, "answers": 0.0}
    n = len(hits)
    if n == 0 or collinear:
        return -1.0, {"format": 0.0, "accuracy": -1.0, "correct": 0.0, "answers": float(n)}
    k = next((i + 1 for i, h in enumerate(hits) if h), None)
    accuracy = 1.0 / math.sqrt(n * k) if k else -1.0 / n
    return 1.0 + accuracy, {"format": 1.0, "accuracy": accuracy, "correct": 1.0 if k else 0.0, "answers": float(n)}


class ActorPolicy:
    """The policy of one episode of one actor: the session's model policy, plus what online learning needs
    (adapter sync between steps, backpressure, scoring the answers, the samples)."""

    name = "online"

    def __init__(self, actor: Actor, env: Any, job: Job) -> None:
        self.actor, self.env, self.job = actor, env, job
        self.session = actor.session
        self.episode_samples: list[TrainSample] = []
        self.versions: list[str] = []
        self.index = 0

    def describe(self) -> dict[str, Any]:
        s = self.session
        return {**s.model_policy.describe(), "name": self.name, "actor": self.actor.name,
                "group_level": s.online.group_level, "adapter_version": s.follower.current.version
                if s.follower.current else None}

    async def decide(self, task: str, history: Sequence[HistoryEntry], observation: Any, n: int = 0) -> Decision:
        s, clock = self.session, self.actor.clock
        t0 = time.perf_counter()
        await s.wait_for_room()
        t1 = time.perf_counter()
        await s.follower.sync()
        t2 = time.perf_counter()
        n_answers = s.config.rl.group_size if s.online.group_level == "step" else 1
        request, space = s.model_policy.request(task, history, observation, n_answers)
        generation = await s.generate(request)
        t3 = time.perf_counter()
        decision = s.model_policy.decision(generation, space, history)
        version = generation.adapter_version
        if version and (not self.versions or self.versions[-1] != version):
            self.versions.append(version)
        s.clock.acted(self.actor.name, _version_step(version), time.time(), s.alive_actors())
        messages, images = split_images(request.messages)
        info = dict(decision.info)
        if len(images) > 1:
            s.warn_once("images", f"the {s.model_policy.preset.family} prompt shows {len(images)} images; training "
                                  "samples hold one, so steps with several are not trained on")
        elif s.online.group_level == "step":
            rewards = await self._score(generation, space, history)
            info["sample_rewards"] = [r for r, _ in rewards]
            self._send_step_group(messages, images[0] if images else None, observation.size, space.input_size,
                                  generation, rewards, version)
        else:
            sample = generation.samples[0] if generation.samples else None
            if sample is not None and sample.token_ids:
                self.episode_samples.append(self._sample(messages, images[0] if images else None, observation.size,
                                                         space.input_size, sample, 0.0, {}, version, 0))
        t4 = time.perf_counter()
        for phase, dt in (("wait", t1 - t0), ("adapter_sync", t2 - t1), ("generate", t3 - t2), ("score", t4 - t3)):
            clock[phase] = clock.get(phase, 0.0) + dt
        self.index += 1
        self.actor.decisions += 1
        return replace(decision, info=info)

    async def _score(self, generation: Any, space: Any, history: Sequence[HistoryEntry]
                     ) -> list[tuple[float, dict[str, float]]]:
        """Each answer's reward from the step verifier (``step_reward``); every action of every answer is checked in
        one ``env.verify`` call."""
        s = self.session
        fmt, preset = s.model_policy.format, s.model_policy.preset
        answers: list[Any] = []
        for sample in generation.samples:
            try:
                answers.append(fmt.parse(sample.text, space, preset, history=history))
            except FormatParseError:
                answers.append(None)
        flat = [a for p in answers if p is not None for a in p.actions]
        found = await self.env.verify(flat) if flat else []
        if found is None:
            s.fatal(OnlineError(f"{s.online.env} has no step verifier, so step-level groups cannot be scored: "
                                f"use --group-level episode"))
            found = [None] * len(flat)
        verdicts = iter(found)
        out = []
        for p in answers:
            if p is None:
                out.append(step_reward(None))
                continue
            hits = [bool(v is not None and v.correct) for _, v in zip(p.actions, verdicts)]
            out.append(step_reward(hits, collinear=is_collinear(p.model_points)))
        return out

    def _sample(self, messages: list[dict[str, Any]], image: Any, frame_size: tuple[int, int],
                input_size: tuple[int, int], sample: Any, reward: float, parts: dict[str, float], version: str | None,
                i: int, **origin: Any) -> TrainSample:
        job = self.job
        return TrainSample(
            messages=messages, image=image, frame_size=tuple(frame_size), input_size=tuple(input_size),
            response_text=sample.text, response_ids=tuple(sample.token_ids), behaviour_logprobs=sample.logprobs,
            reward=reward, reward_parts=parts, adapter_version=version,
            origin={"id": job.task_id, "env": self.session.online.env, "seed": job.seed, "actor": self.actor.name,
                    "step": self.index, "sample": i, **origin},
            id=f"{self.actor.episode_key}/{self.index}/{i}")

    def _send_step_group(self, messages: list[dict[str, Any]], image: Any, frame_size: tuple[int, int],
                         input_size: tuple[int, int], generation: Any, rewards: list[tuple[float, dict[str, float]]],
                         version: str | None) -> None:
        samples = tuple(
            self._sample(messages, image, frame_size, input_size, smp, r, parts, version, i,
                         trajectory=self.actor.episode_key, level="step")
            for i, (smp, (r, parts)) in enumerate(zip(generation.samples, rewards)) if smp.token_ids)
        key = f"{self.actor.episode_key}/{self.index}"
        self.session.send(GroupMessage(id=key, actor=self.actor.name, group=key, parts=1, level="step",
                                       samples=samples, created_at=time.time()))

    def scored_steps(self, reward: float) -> tuple[TrainSample, ...]:
        """Episode level: this episode's steps, each with the episode's checker reward."""
        correct = 1.0 if reward > 0 else 0.0
        return tuple(replace(smp, reward=reward, reward_parts={"correct": correct},
                             origin={**smp.origin, "episode": self.actor.episode_key, "level": "episode"})
                     for smp in self.episode_samples)


class Actor:
    """One actor: its own device, episode after episode, until the session stops or the actor is dropped."""

    def __init__(self, session: OnlineSession, index: int) -> None:
        self.session = session
        self.index = index
        self.name = f"actor-{index}"
        self.device: Any = None
        self.env: Any = None
        self.clock: dict[str, float] = {}
        self.episodes = 0
        self.steps = 0
        """Steps of finished episodes."""
        self.decisions = 0
        """Decisions made (steps in flight included)."""
        self.restarts = 0
        self.failures = 0
        self.state = "starting"
        self.episode_key = ""
        self.error = ""

    def status(self, state: str | None = None) -> None:
        if state is not None:
            self.state = state
        s = self.session
        s.transport.set_status(ActorStatus(self.name, self.state, s.follower.current.version if s.follower.current
                                           else None, self.episodes, self.steps, self.restarts, self.error,
                                           time.time()))

    async def _ensure_env(self) -> Any:
        if self.env is not None:
            return self.env
        from envs.registry import make

        s, kwargs = self.session, {}
        if s.online.max_steps:
            kwargs["max_steps"] = s.online.max_steps
        if s.online.device_kind == "web":
            from devices.web import PlaywrightDevice, WebConfig

            device = PlaywrightDevice(WebConfig())
            await asyncio.wait_for(device.start(), timeout=60)
            self.device = device
            kwargs["device"] = TimedDevice(device, self.clock)
        elif s.online.device_kind == "android" and s.online.serials:
            kwargs["serial"] = s.online.serials[self.index]
        self.env = make(s.online.env, **kwargs)
        return self.env

    async def _close_env(self) -> None:
        env, device, self.env, self.device = self.env, self.device, None, None
        for what in (env, device):
            if what is None:
                continue
            try:
                await asyncio.wait_for(what.close(), timeout=15)
            except (Exception, asyncio.CancelledError) as exc:  # closing is best effort
                log.warning("%s: closing %s failed: %s: %s", self.name, type(what).__name__, type(exc).__name__, exc)

    def _failed(self, why: str) -> bool:
        """A device or environment failure; returns True when the actor is dropped."""
        self.failures += 1
        self.error = why
        if self.failures > self.session.online.max_restarts:
            log.error("%s dropped after %d failures in a row; last: %s (the other actors go on)", self.name,
                      self.failures, why)
            self.status("dropped")
            return True
        self.restarts += 1
        log.warning("%s: device failed (%s); restarting it (%d/%d)", self.name, why, self.failures,
                    self.session.online.max_restarts)
        self.status("restarting")
        return False

    async def run(self) -> None:
        s = self.session
        try:
            self.status("waiting")
            await s.wait_ready()
            self.status("running")
            while not s.stopping:
                job = s.jobs.next()
                try:
                    env = await self._ensure_env()
                except Exception as exc:  # the device would not start: the same as dying
                    await self._close_env()
                    if self._failed(f"{type(exc).__name__}: {exc}"):
                        return
                    continue
                broken = await self._episode(job, env)
                if broken:
                    await self._close_env()
                    if self._failed(self.error):
                        return
                else:
                    self.failures = 0
                self.status("running")
        finally:
            await self._close_env()
            if self.state != "dropped":
                self.status("stopped")

    async def _episode(self, job: Job, env: Any) -> bool:
        s = self.session
        writer = s.run_writer.episode(task="", env={"name": s.online.env, "seed": job.seed})
        self.episode_key = f"{s.session_id}/{writer.episode_id}"
        self.clock.clear()
        holder: list[ActorPolicy] = []

        def factory(e: Any) -> ActorPolicy:
            holder.append(ActorPolicy(self, e, job))
            return holder[-1]

        started = time.time()
        try:
            result, broken = await run_env_episode(s.online.env, job.seed, env, factory, writer,
                                                   s.online.max_steps or None)
        finally:  # interrupted episodes too: the record says which actor ran it and with which versions
            writer.update(env={**(writer.record.env or {}), "actor": self.name, "group": job.group, "hard": job.hard,
                               "versions": holder[-1].versions if holder else []})
        record = result.record
        policy = holder[-1] if holder else None
        outcome = record.outcome or Outcome.ABORTED
        reward = None if outcome in (Outcome.ABORTED, Outcome.INTERRUPTED) else float(record.return_ or 0.0)
        if s.online.group_level == "episode":
            # An episode with nothing to learn from (aborted, interrupted) is an empty part: its group still completes.
            samples = policy.scored_steps(reward) if policy is not None and reward is not None else ()
            s.send(GroupMessage(id=self.episode_key, actor=self.name, group=job.group, parts=job.parts,
                                level="episode", samples=samples, created_at=time.time()))
        self.episodes += 1
        self.steps += record.num_steps
        if broken:
            reason = record.reason or {}
            self.error = f"{reason.get('type', 'Error')}: {reason.get('message', '')}"
        timings = {**{k: float(v) for k, v in record.timings.items()}, **self.clock}
        s.send(EpisodeMessage(id=self.episode_key, actor=self.name, env=s.online.env, seed=job.seed,
                              episode_id=record.episode_id, outcome=outcome.value, reward=reward,
                              steps=record.num_steps, versions=tuple(policy.versions if policy else ()),
                              started_at=started, ended_at=time.time(), timings=timings, group=job.group))
        return broken


def _version_step(version: str | None) -> int | None:
    from train.learner import version_step

    return version_step(version)

"""Actors: each drives its own device through an environment with the one episode runner (``agent/runner.py``),
samples from the session's shared backend, scores the answers and sends the samples. An actor sees its session only
through an ``ActorContext`` (``agent/online/context.py``). How an answer is scored is the step reward's
(``train.step_rewards``, the rule ``train.reward_registry`` names for ``data.reward``)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from agent.online.context import ActorContext
from agent.online.settings import OnlineError
from agent.online.tasks import Job
from agent.runner import TYPED_ERRORS, run_episode
from envs.records import Outcome
from policy.base import Decision, HistoryEntry
from policy.backends.hf import split_images
from train.errors import NoOnlineForm, TransportClosed, UnknownReward
from train.messages import ActorStatus, EpisodeMessage, GroupMessage
from train.reward_registry import online_rule
from train.samples import TrainSample
from train.step_rewards import StepRule, answer_reward, read_answer

log = logging.getLogger(__name__)

DEVICE_START_TIMEOUT_S = 60.0
"""Seconds an actor's device may take to start (a browser's launch, a phone's first frame) before it counts as a
failed start."""

DEVICE_EPISODES = 100
"""Episodes an actor runs on one device and environment before it closes them and starts new ones: a browser page
kept for ever keeps what every episode's page left behind (Playwright holds each request and response of a page
until the page closes), so a session of thousands of episodes would grow without end (``agent.eval`` does the
same per slot)."""


def step_rule(reward: str) -> StepRule:
    """The online step reward's rule for ``data.reward`` (``train.reward_registry.online_rule``); an ``OnlineError``
    with the registry's reason when it has none (asked before a session or an actor starts anything)."""
    try:
        return online_rule(reward)
    except (NoOnlineForm, UnknownReward) as exc:
        raise OnlineError(str(exc)) from None


class ActorPolicy:
    """The policy of one episode of one actor: the session's model policy, plus what online learning needs
    (adapter sync between steps, backpressure, scoring the answers, the samples)."""

    name = "online"

    def __init__(self, actor: OnlineActor, env: Any, job: Job) -> None:
        self.actor, self.env, self.job = actor, env, job
        self.ctx = actor.ctx
        self.episode_samples: list[TrainSample] = []
        self.versions: list[str] = []
        self.index = 0

    def describe(self) -> dict[str, Any]:
        ctx = self.ctx
        return {**ctx.policy.describe(), "name": self.name, "actor": self.actor.name,
                "group_level": ctx.settings.group_level,
                "adapter_version": ctx.follower.current.version if ctx.follower.current else None}

    async def decide(self, task: str, history: Sequence[HistoryEntry], observation: Any, n: int = 0) -> Decision:
        ctx, clock, step_level = self.ctx, self.actor.clock, self.ctx.settings.group_level == "step"
        t0 = time.perf_counter()
        await ctx.wait_for_room()
        t1 = time.perf_counter()
        await ctx.follower.sync()
        t2 = time.perf_counter()
        request, space = ctx.policy.request(task, history, observation, ctx.settings.group_size if step_level else 1)
        generation = await ctx.generate(request)
        t3 = time.perf_counter()
        decision = ctx.policy.decision(generation, space, history)
        version = generation.adapter_version
        if version and (not self.versions or self.versions[-1] != version):
            self.versions.append(version)
        self.actor.acting = version
        ctx.versions.acted(self.actor.name, _version_step(version), time.time(), ctx.alive_actors())
        messages, images = split_images(request.messages)
        image = images[0] if images else None
        info = dict(decision.info)
        if len(images) > 1:
            ctx.warn_once("images", f"the {ctx.policy.preset.family} prompt shows {len(images)} images; training "
                                    "samples hold one, so steps with several are not trained on")
        elif step_level:
            rewards = await self._score(generation, space, history)
            info["sample_rewards"] = [r for r, _ in rewards]
            self._send_step_group(messages, image, observation.size, space.input_size, generation, rewards, version)
        else:
            sample = generation.samples[0] if generation.samples else None
            if sample is not None and sample.token_ids:
                self.episode_samples.append(self._sample(messages, image, observation.size, space.input_size, sample,
                                                         0.0, {}, version, 0))
        t4 = time.perf_counter()
        for phase, dt in (("wait", t1 - t0), ("adapter_sync", t2 - t1), ("generate", t3 - t2), ("score", t4 - t3)):
            clock[phase] = clock.get(phase, 0.0) + dt
        self.index += 1
        self.actor.decisions += 1
        return replace(decision, info=info)

    async def _score(self, generation: Any, space: Any, history: Sequence[HistoryEntry]
                     ) -> list[tuple[float, dict[str, float]]]:
        """Each answer's reward from the step verifier (``train.step_rewards``, by the session's rule); every action of
        every answer is checked in one ``env.verify`` call. An answer cut off at ``rl.max_new_tokens``, or one the
        family's reward-side reading refuses, scores as one that does not parse (``read_answer``)."""
        ctx = self.ctx
        fmt, preset = ctx.policy.format, ctx.policy.preset
        answers = [read_answer(sample, fmt, space, preset, history) for sample in generation.samples]
        flat = [a for p in answers if p is not None for a in p.actions]
        found = await self.env.verify(flat) if flat else []
        if found is None:
            ctx.fatal(OnlineError(f"{ctx.settings.env} has no step verifier, so step-level groups cannot be scored: "
                                  f"use --group-level episode"))
            found = [None] * len(flat)
        verdicts = iter(found)
        out = []
        for p in answers:
            hits = [bool(v is not None and v.correct) for _, v in zip(p.actions, verdicts)] if p is not None else []
            out.append(answer_reward(p, hits, ctx.settings.reward))
        return out

    def _sample(self, messages: list[dict[str, Any]], image: Any, frame_size: tuple[int, int],
                input_size: tuple[int, int], sample: Any, reward: float, parts: dict[str, float], version: str | None,
                i: int, **origin: Any) -> TrainSample:
        job = self.job
        return TrainSample(
            messages=messages, image=image, frame_size=tuple(frame_size), input_size=tuple(input_size),
            response_text=sample.text, response_ids=tuple(sample.token_ids), behaviour_logprobs=sample.logprobs,
            reward=reward, reward_parts=parts, adapter_version=version,
            origin={"id": job.task_id, "env": self.ctx.settings.env, "seed": job.seed, "actor": self.actor.name,
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
        self.actor.send(GroupMessage(id=key, actor=self.actor.name, group=key, parts=1, level="step",
                                     samples=samples, created_at=time.time()))

    def scored_steps(self, reward: float) -> tuple[TrainSample, ...]:
        """Episode level: this episode's steps, each with the episode's checker reward."""
        correct = 1.0 if reward > 0 else 0.0
        return tuple(replace(smp, reward=reward, reward_parts={"correct": correct},
                             origin={**smp.origin, "episode": self.actor.episode_key, "level": "episode"})
                     for smp in self.episode_samples)


class OnlineActor:
    """One actor: its own device, episode after episode, until the session stops or the actor is dropped. The device
    and its environment are closed and made anew after a failure and every ``DEVICE_EPISODES`` episodes; each close is
    bounded (15 s, and the web device kills its browser's processes when its own close hangs)."""

    def __init__(self, ctx: ActorContext, index: int, name: str = "") -> None:
        self.ctx = ctx
        self.index = index
        self.name = name or f"actor-{index}"
        self.device: Any = None
        self.env: Any = None
        self.clock: dict[str, float] = {}
        """Seconds of this episode's decisions spent waiting, syncing adapters, generating and scoring."""
        self.episodes = 0
        self.steps = 0
        """Steps of finished episodes."""
        self.decisions = 0
        """Decisions made (steps in flight included)."""
        self.restarts = 0
        self.failures = 0
        self.on_device = 0
        """Episodes run on the current device (``DEVICE_EPISODES``)."""
        self.state = "starting"
        self.episode_key = ""
        self.error = ""
        self.acting: str | None = None
        """The adapter version of this actor's latest decision (what its status reports)."""

    def status(self, state: str | None = None) -> None:
        if state is not None:
            self.state = state
        self.ctx.transport.set_status(ActorStatus(self.name, self.state, self.acting, self.episodes, self.steps,
                                                  self.restarts, self.error, time.time()))

    def send(self, message: GroupMessage | EpisodeMessage) -> None:
        """To the learner; nothing is sent once the transport is closed (the session is stopping)."""
        try:
            self.ctx.transport.send(message)
        except TransportClosed:
            return
        if isinstance(message, GroupMessage):
            self.ctx.counters.add("samples_sent", len(message.samples))

    async def _ensure_env(self) -> Any:
        if self.env is not None:
            return self.env
        from devices.registry import device_kind
        from devices.settle import SettleConfig
        from envs.registry import make

        settings = self.ctx.settings
        kind = device_kind(settings.device_kind)
        address = settings.addresses[self.index] if self.index < len(settings.addresses) else ""
        device = kind.build(kind.configured(kind.config(), address), SettleConfig())
        self.device, self.on_device = device, 0
        await asyncio.wait_for(device.start(), timeout=DEVICE_START_TIMEOUT_S)
        self.env = make(settings.env, max_steps=settings.max_steps, device=device)  # lent: the actor closes it
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
        limit = self.ctx.settings.max_restarts
        if self.failures > limit:
            log.error("%s dropped after %d failures in a row; last: %s (the other actors go on)", self.name,
                      self.failures, why)
            self.status("dropped")
            return True
        self.restarts += 1
        log.warning("%s: device failed (%s); restarting it (%d/%d)", self.name, why, self.failures, limit)
        self.status("restarting")
        return False

    async def run(self) -> None:
        """Episodes until the session stops. A bug (an error that is not a device, environment or policy failure)
        stops the whole session with that error."""
        ctx = self.ctx
        try:
            self.status("waiting")
            await ctx.wait_ready()
            self.status("running")
            while not ctx.stopping():
                job = ctx.jobs.next()
                try:
                    env = await self._ensure_env()
                except (*TYPED_ERRORS, OSError, asyncio.TimeoutError) as exc:  # would not start: the same as dying
                    await self._close_env()
                    if self._failed(f"{type(exc).__name__}: {exc}"):
                        return
                    continue
                broken = await self._episode(job, env)
                self.on_device += 1
                if broken:
                    await self._close_env()
                    if self._failed(self.error):
                        return
                else:
                    self.failures = 0
                    if self.on_device >= DEVICE_EPISODES:  # a new browser for the next ones
                        await self._close_env()
                self.status("running")
        except Exception as exc:
            ctx.fatal(exc)
            raise
        finally:
            await self._close_env()
            if self.state != "dropped":
                self.status("stopped")

    async def _episode(self, job: Job, env: Any) -> bool:
        """One episode of ``job``; returns whether the device or environment failed (it is then replaced)."""
        ctx = self.ctx
        writer = ctx.run.episode(task="", env={"name": ctx.settings.env, "seed": job.seed})
        self.episode_key = f"{ctx.settings.session_id}/{writer.episode_id}"
        self.clock.clear()
        policy = ActorPolicy(self, env, job)
        started = time.time()
        try:
            result = await run_episode(env, policy, writer, seed=job.seed)
        finally:  # interrupted episodes too: the record says which actor ran it and with which versions
            writer.update(env={**(writer.record.env or {}), "actor": self.name, "group": job.group, "hard": job.hard,
                               "versions": policy.versions})
        record = result.record
        outcome = record.outcome or Outcome.ABORTED
        reward = None if outcome in (Outcome.ABORTED, Outcome.INTERRUPTED) else float(record.return_ or 0.0)
        if ctx.settings.group_level == "episode":
            # An episode with nothing to learn from (aborted, interrupted) is an empty part: its group still completes.
            samples = policy.scored_steps(reward) if reward is not None else ()
            self.send(GroupMessage(id=self.episode_key, actor=self.name, group=job.group, parts=job.parts,
                                   level="episode", samples=samples, created_at=time.time()))
        self.episodes += 1
        self.steps += record.num_steps
        broken = result.error is not None
        if broken:
            reason = record.reason or {}
            self.error = f"{reason.get('type', 'Error')}: {reason.get('message', '')}"
        timings = {**{k: float(v) for k, v in record.timings.items()}, **self.clock}
        self.send(EpisodeMessage(id=self.episode_key, actor=self.name, env=ctx.settings.env, seed=job.seed,
                                 episode_id=record.episode_id, outcome=outcome.value, reward=reward,
                                 steps=record.num_steps, versions=tuple(policy.versions), started_at=started,
                                 ended_at=time.time(), timings=timings, group=job.group))
        return broken


def _version_step(version: str | None) -> int | None:
    from train.learner import version_step

    return version_step(version)

"""The closed loop: observe, decide, guard, act, settle, record; until the episode ends.

Only this loop catches device, policy and environment errors: it records the episode as aborted
with the error's type and message. Every finished step is on disk before the next one starts, so
a crash, a dead browser or Ctrl-C loses at most the step in flight.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from agent.guard import AllowAll, Guard, GuardDecision, GuardVerdict as Verdict
from agent.secrets import MASK, PLACEHOLDER, Secrets
from devices.actions import Action, ActionKind, TERMINAL_KINDS
from devices.base import ActionResult, Device, Observation
from devices.errors import DeviceError, UnsupportedAction
from envs.errors import EnvError
from envs.records import EpisodeRecord, Outcome, StepRecord
from envs.tasks import TaskVerdict
from envs.trajectory import EpisodeWriter
from policy.base import Decision, HistoryEntry, Policy
from policy.errors import PolicyError, PolicyParseError

log = logging.getLogger(__name__)

KEEP_FRAMES = 8
"""Past observations kept in the history handed to the policy."""

PHASES = ("start", "observe", "decide", "guard", "act", "settle", "verify", "record")

Checker = Callable[[Device], Awaitable[TaskVerdict]]


@dataclass(slots=True)
class LoopOptions:
    max_steps: int = 15
    max_parse_retries: int = 3
    dry_run: bool = False


@dataclass(slots=True)
class _Clock:
    """Seconds spent per phase, over the episode and for the current step."""

    totals: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    step: dict[str, float] = field(default_factory=dict)

    async def timed(self, phase: str, awaitable: Awaitable[Any]) -> Any:
        t0 = time.perf_counter()
        try:
            return await awaitable
        finally:
            self.add(phase, time.perf_counter() - t0)

    def add(self, phase: str, seconds: float) -> None:
        self.totals[phase] += seconds
        self.step[phase] = self.step.get(phase, 0.0) + seconds


StepCallback = Callable[[StepRecord], None]


async def run_episode(
    task: str,
    device: Device,
    policy: Policy,
    writer: EpisodeWriter,
    *,
    options: LoopOptions | None = None,
    guard: Guard | None = None,
    checker: Checker | None = None,
    secrets: Secrets | None = None,
    on_step: StepCallback | None = None,
    stop: asyncio.Event | None = None,
) -> EpisodeRecord:
    """Run one episode on an unstarted device; the device is started here and always closed.

    Returns the finished EpisodeRecord. Ctrl-C (task cancellation) is recorded as interrupted and
    then re-raised, so the caller still sees it. ``stop``, when set, is honoured the same way at the
    next step boundary: the caller's Ctrl-C handler sets it as well as cancelling, so the episode
    ends even if a library on the way swallowed the cancellation.
    """
    opts = options or LoopOptions()
    guard = guard or AllowAll()
    secrets = secrets or Secrets()
    clock = _Clock()
    frame_job: asyncio.Future[str] | None = None
    history: list[HistoryEntry] = []
    index = 0  # steps written
    acted = 0  # steps that count against the budget
    parse_failures = 0
    outcome: Outcome | None = None
    finish: dict[str, Any] = {}
    step_reward_total: float | None = None

    def remember(entry: HistoryEntry) -> None:
        history.append(entry)
        # Frames are kept for the last few steps only (families show at most 5 screenshots).
        if len(history) > KEEP_FRAMES:
            old = history[-KEEP_FRAMES - 1]
            if old.observation is not None:
                history[-KEEP_FRAMES - 1] = replace(old, observation=None)

    async def record(step: StepRecord) -> None:
        nonlocal index
        t0 = time.perf_counter()
        step = replace(step, frame_path=await frame_job)
        writer.write_step(step)
        clock.add("record", time.perf_counter() - t0)
        index += 1
        if on_step is not None:
            on_step(step)

    try:
        await clock.timed("start", device.start())
        writer.update(device=device.describe())
        while True:
            if stop is not None and stop.is_set():
                raise asyncio.CancelledError("stop requested")
            if acted >= opts.max_steps:
                outcome = Outcome.TRUNCATED
                finish["reason"] = {"type": "StepBudget", "message": f"{opts.max_steps} steps used without finishing"}
                break
            clock.step = {}
            started = time.time()
            obs: Observation = await clock.timed("observe", device.observe())
            # The frame goes to disk in a worker thread while the policy decides and the device
            # acts (PNG encoding of a blurred frame takes ~15 ms); each step waits for its frame
            # before its line is written, so no line ever points at a missing frame.
            frame_job = asyncio.ensure_future(asyncio.to_thread(writer.write_frame, index, obs))
            try:
                decision: Decision = await clock.timed("decide", policy.decide(task, tuple(history), obs))
            except BaseException:
                await _drain(frame_job)
                raise
            base = _step_base(writer, index, started, obs, "", decision, secrets)

            if decision.action is None:
                parse_failures += 1
                note = f"output did not parse: {decision.parse_error}"
                remember(HistoryEntry(None, decision.raw_output, executed=False, note=note, observation=obs))
                await record(replace(base, ended_at=time.time(), latency=dict(clock.step)))
                if parse_failures > opts.max_parse_retries:
                    outcome = Outcome.ABORTED
                    finish["reason"] = {
                        "type": PolicyParseError.__name__,
                        "message": f"{parse_failures} outputs in a row did not parse; last: {decision.parse_error}",
                    }
                    break
                continue
            parse_failures = 0
            action = decision.action

            if action.kind in TERMINAL_KINDS:
                verdict_info: dict[str, Any] | None = None
                reward: float | None = None
                if action.kind is ActionKind.FINISH:
                    finish["answer"] = action.text
                    if checker is None:
                        outcome = Outcome.CLAIMED
                    else:
                        verdict = await clock.timed("verify", checker(device))
                        outcome = Outcome.SUCCESS if verdict.success else Outcome.FAILURE
                        reward = verdict.reward
                        verdict_info = {"success": verdict.success, "reward": verdict.reward, **verdict.details}
                        finish["verifier"] = verdict_info
                        step_reward_total = verdict.reward
                else:
                    outcome = Outcome.INFEASIBLE
                    finish["reason"] = {"type": "Infeasible", "message": action.text or ""}
                await record(replace(base, ended_at=time.time(), reward=reward, verifier=verdict_info, latency=dict(clock.step)))
                break

            if action.kind not in device.supported_actions:
                parse_failures += 1
                note = f"{device.name} device cannot {action.kind.value}"
                remember(HistoryEntry(action, decision.raw_output, executed=False, note=note, observation=obs))
                await record(replace(base, ended_at=time.time(), error={"type": "UnsupportedAction", "message": note},
                               latency=dict(clock.step)))
                if parse_failures > opts.max_parse_retries:
                    outcome = Outcome.ABORTED
                    finish["reason"] = {"type": "UnsupportedAction", "message": note}
                    break
                continue

            t0 = time.perf_counter()
            verdict_g: GuardDecision = guard.check(action, obs)
            clock.add("guard", time.perf_counter() - t0)
            guard_info = {"verdict": verdict_g.verdict.value, "reason": verdict_g.reason}
            acted += 1
            if verdict_g.verdict is not Verdict.ALLOW:
                note = f"refused: {verdict_g.reason}"
                remember(HistoryEntry(action, decision.raw_output, executed=False, note=note, observation=obs))
                await record(replace(base, ended_at=time.time(), guard=guard_info, latency=dict(clock.step)))
                continue
            if opts.dry_run:
                guard_info["dry_run"] = True
                # The policy goes on as if the action happened, to show the whole plan.
                remember(HistoryEntry(action, decision.raw_output, executed=True, note="dry run: not performed", observation=obs))
                await record(replace(base, ended_at=time.time(), guard=guard_info, latency=dict(clock.step)))
                continue

            try:
                result: ActionResult = await clock.timed("act", device.act(secrets.resolve(action)))
            except UnsupportedAction as e:
                # A valid action this device cannot do (a phone key on a desktop): the policy's
                # mistake, recorded and told, like an unsupported kind; nothing happened on screen.
                parse_failures += 1
                error = {"type": type(e).__name__, "message": str(e)}
                remember(HistoryEntry(action, decision.raw_output, executed=False, note=str(e), observation=obs))
                await record(replace(base, ended_at=time.time(), guard=guard_info, error=error, latency=dict(clock.step)))
                if parse_failures > opts.max_parse_retries:
                    outcome = Outcome.ABORTED
                    finish["reason"] = error
                    break
                continue
            except DeviceError as e:
                error = {"type": type(e).__name__, "message": str(e)}
                await record(replace(base, ended_at=time.time(), guard=guard_info, error=error, latency=dict(clock.step)))
                raise
            settled = await clock.timed("settle", device.settle())
            remember(HistoryEntry(action, decision.raw_output, executed=True, note=result.detail, observation=obs))
            await record(
                replace(
                    base,
                    action=_recorded_action(action, result.sensitive),
                    raw_output=_mask_typed(base.raw_output, action, result.sensitive),
                    executed=True,
                    ended_at=time.time(),
                    guard=guard_info,
                    target_box=tuple(result.target_box.as_list()) if result.target_box else None,
                    target=result.target,
                    settled=settled.settled,
                    sensitive=result.sensitive,
                    info={**base.info, "settle": {"elapsed_s": settled.elapsed_s, "frames": settled.frames},
                          **({"detail": result.detail} if result.detail else {})},
                    latency=dict(clock.step),
                )
            )
    except (DeviceError, PolicyError, EnvError) as e:
        await _drain(frame_job)
        outcome = Outcome.ABORTED
        finish["reason"] = {"type": type(e).__name__, "message": str(e)}
        log.error("episode aborted: %s: %s", type(e).__name__, e)
    except (asyncio.CancelledError, KeyboardInterrupt):
        outcome = Outcome.INTERRUPTED
        finish["reason"] = {"type": "Interrupted", "message": "stopped by the user (Ctrl-C)"}
        await _drain(frame_job)
        await _finalize(writer, device, outcome, finish, clock, step_reward_total)
        raise
    except Exception as e:
        # A bug, not an expected failure: record it, then let it surface with its traceback.
        outcome = Outcome.ABORTED
        finish["reason"] = {"type": type(e).__name__, "message": str(e)}
        await _finalize(writer, device, outcome, finish, clock, step_reward_total)
        raise
    return await _finalize(writer, device, outcome, finish, clock, step_reward_total)


async def _drain(job: asyncio.Future[str] | None) -> None:
    """Let a frame write in flight finish (its step may never be written, but the file is whole)."""
    if job is not None and not job.done():
        try:
            await asyncio.shield(job)
        except (Exception, asyncio.CancelledError):
            pass


async def _finalize(
    writer: EpisodeWriter,
    device: Device,
    outcome: Outcome | None,
    finish: dict[str, Any],
    clock: _Clock,
    episode_return: float | None,
) -> EpisodeRecord:
    try:
        await asyncio.shield(asyncio.wait_for(device.close(), timeout=15))
    except (Exception, asyncio.CancelledError) as e:
        log.warning("closing the device failed: %s: %s", type(e).__name__, e)
    return writer.finish(
        outcome or Outcome.ABORTED,
        timings={k: round(v, 6) for k, v in clock.totals.items()},
        return_=episode_return,
        **finish,
    )


def _step_base(
    writer: EpisodeWriter,
    index: int,
    started: float,
    obs: Observation,
    frame_path: str,
    decision: Decision,
    secrets: Secrets,
) -> StepRecord:
    return StepRecord(
        step_id=writer.step_id(index),
        index=index,
        started_at=started,
        ended_at=started,
        frame_path=frame_path,
        frame_size=obs.size,
        model_input_size=decision.model_input_size or obs.size,
        action=decision.action.to_dict() if decision.action is not None else None,
        executed=False,
        raw_output=secrets.redact(decision.raw_output),
        parse_error=decision.parse_error,
        candidates=tuple(c.to_dict() for c in decision.candidates),
        target_box=None,
        info={
            **({"policy_box": decision.target_box.as_list()} if decision.target_box else {}),
            **({"policy": _jsonable(decision.info)} if decision.info else {}),
            **({"url": obs.meta["url"]} if "url" in obs.meta else {}),
        },
    )


def _recorded_action(action: Action, sensitive: bool) -> dict[str, Any]:
    data = action.to_dict()
    if sensitive and action.text is not None and not PLACEHOLDER.fullmatch(action.text):
        data["text"] = MASK  # typed into a password field: never stored in clear
    return data


def _mask_typed(raw_output: str, action: Action, sensitive: bool) -> str:
    if sensitive and action.text and not PLACEHOLDER.fullmatch(action.text):
        return raw_output.replace(action.text, MASK)
    return raw_output


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)

"""The bookkeeping of one episode for the runner (``agent/runner.py``): the history the policy sees,
the phase clock, the step records and how the episode ends.

Nothing here decides what happens next: the runner reads top to bottom, and each of its steps calls
one method here to turn what happened into a record.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agent.guard import GuardDecision, GuardVerdict
from agent.person import Person
from agent.secrets import MASK, PLACEHOLDER, Secrets
from devices.actions import RUNNER_KINDS, TERMINAL_KINDS, Action, ActionKind
from devices.base import Device, Observation
from envs.base import Env, StepEffect, StepResult, StepVerdict
from envs.records import EpisodeRecord, Outcome, StepRecord, json_safe
from envs.trajectory import EpisodeWriter
from policy.base import Decision, HistoryEntry, Policy

log = logging.getLogger(__name__)

KEEP_FRAMES = 8
"""Past observations kept in the history handed to the policy (families show at most 5 screenshots)."""

PHASES = ("reset", "observe", "decide", "verify", "guard", "ask", "act", "settle", "check", "step", "record")
"""Phases of an episode, timed per step and in total: ``step`` is what ``env.step`` spent beyond the
phases it reported itself (``act``, ``settle``, ``observe``; see ``envs.base.StepEffect``)."""


@dataclass(frozen=True, slots=True)
class RunOptions:
    max_parse_retries: int = 3
    """Decisions in a row that cannot be executed (no parse, a kind the device lacks, refused by the
    guard) before the episode is aborted."""
    assume_yes: bool = False
    """Say yes to every action the guard wants confirmed, without asking (``agent run --yes``)."""


@dataclass(frozen=True, slots=True)
class EpisodeResult:
    """A finished episode: its record, folder, per-step phase seconds, and the typed error that ended it."""

    env: str
    seed: int | None
    record: EpisodeRecord
    path: Path
    step_latency: tuple[dict[str, float], ...] = ()
    error: BaseException | None = None

    @property
    def success(self) -> bool:
        return self.record.outcome is Outcome.SUCCESS


@dataclass(slots=True)
class PhaseClock:
    """Seconds spent per phase, over the episode and for the current step."""

    totals: dict[str, float] = field(default_factory=dict)
    step: dict[str, float] = field(default_factory=dict)

    async def timed(self, phase: str, awaitable: Awaitable[Any]) -> Any:
        t0 = time.perf_counter()
        try:
            return await awaitable
        finally:
            self.add(phase, time.perf_counter() - t0)

    def timed_call(self, phase: str, fn: Callable[..., Any], *args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.add(phase, time.perf_counter() - t0)

    def add(self, phase: str, seconds: float) -> None:
        self.totals[phase] = self.totals.get(phase, 0.0) + seconds
        self.step[phase] = self.step.get(phase, 0.0) + seconds

    def split_step(self, effect: StepEffect | None) -> None:
        """Move the phases the environment timed inside ``env.step`` out of this step's ``step`` phase."""
        if effect is None:
            return
        for phase, seconds in effect.timings.items():
            seconds = min(seconds, self.step.get("step", 0.0))
            self.add(phase, seconds)
            self.add("step", -seconds)


class EpisodeBook:
    """What the runner knows about the episode in progress (see the module docstring)."""

    def __init__(self, env: Env, writer: EpisodeWriter, options: RunOptions, secrets: Secrets,
                 on_step: Callable[[StepRecord], None] | None) -> None:
        self.env, self.writer, self.options, self.secrets, self.on_step = env, writer, options, secrets, on_step
        self.clock = PhaseClock()
        self.history: list[HistoryEntry] = []
        self.outcome: Outcome | None = None
        self.finish_fields: dict[str, Any] = {}
        self.step_latency: list[dict[str, float]] = []
        self.total: float | None = None
        self.rejected = 0
        self.error: BaseException | None = None
        self.seed: int | None = None
        self._frame_job: asyncio.Future[str] | None = None
        self._decision: Decision | None = None
        self._started_at = 0.0
        self.device: Device | None = None
        """The environment's device, once reset (None when it acts on none, as a recording)."""

    # -- the start ------------------------------------------------------------------------------------------------
    def start(self, info: dict[str, Any], seed: int | None, policy: Policy) -> str:
        """After reset: the episode's record gets its task, environment, device and policy; returns the task."""
        self.seed = seed
        task = str(info.get("instruction", ""))
        self.device = self.env.device
        env_fields: dict[str, Any] = {"name": self.env.name, "seed": seed}
        if self.env.max_steps is not None:
            env_fields["max_steps"] = self.env.max_steps
        self.writer.update(**self.secrets.redact_value({
            "task": task, "policy": _describe(policy), "device": _describe(self.device) if self.device else {},
            "env": {**env_fields, **jsonable({k: v for k, v in info.items() if k != "instruction"})}}))
        return task

    def begin_step(self, obs: Observation) -> None:
        """A new step on ``obs``: its clock starts, and its frame goes to disk in a worker thread while the policy
        decides (PNG encoding of a blurred frame takes ~15 ms); the step's line waits for it, so no line ever
        points at a missing frame."""
        self.clock.step = {}
        self._started_at = time.time()
        self._frame_job = asyncio.ensure_future(asyncio.to_thread(self.writer.write_frame, self.writer.num_steps, obs))

    def base(self, decision: Decision, obs: Observation) -> StepRecord:
        """The step's record as far as the decision goes (nothing executed yet)."""
        self._decision = decision
        index = self.writer.num_steps
        return StepRecord(
            step_id=self.writer.step_id(index), index=index, started_at=self._started_at, ended_at=self._started_at,
            frame_path="", frame_size=obs.size, model_input_size=decision.model_input_size or obs.size,
            action=decision.action.to_dict() if decision.action is not None else None, executed=False,
            raw_output=self.secrets.redact(decision.raw_output), parse_error=decision.parse_error,
            candidates=tuple(c.to_dict() for c in decision.candidates),
            info={**({"policy_box": decision.target_box.as_list()} if decision.target_box else {}),
                  **({"policy": jsonable(decision.info)} if decision.info else {}),
                  **({"url": obs.meta["url"]} if "url" in obs.meta else {})},
        )

    # -- decisions that are not executed --------------------------------------------------------------------------
    def unexecutable(self, decision: Decision) -> tuple[str, str, bool] | None:
        """(error type, note, is it an error of the step) when the decision cannot be executed, else None."""
        action = decision.action
        if action is None:
            return "PolicyParseError", f"output did not parse: {decision.parse_error}", False
        device = self.device
        if action.kind not in RUNNER_KINDS and device is not None and action.kind not in device.supported_actions:
            return "UnsupportedAction", f"{device.name} device cannot {action.kind.value}", True
        return None

    async def reject(self, step: StepRecord, obs: Observation, kind: str, note: str, is_error: bool) -> None:
        """Record a decision that was not executed, tell the policy why, and end the episode after too many."""
        assert self._decision is not None
        self._remember(HistoryEntry(self._decision.action, self._decision.raw_output, executed=False, note=note,
                                    observation=obs))
        error = {"type": kind, "message": note} if is_error else None
        await self.record(replace(step, ended_at=time.time(), error=error))
        self.rejected += 1
        if self.rejected > self.options.max_parse_retries:
            self.outcome = Outcome.ABORTED
            message = (f"{self.rejected} outputs in a row did not parse; last: {step.parse_error}"
                       if kind == "PolicyParseError" else
                       f"{self.rejected} actions in a row could not be executed; last: {note}")
            self.finish_fields["reason"] = {"type": kind, "message": message}

    # -- verdicts and the guard -----------------------------------------------------------------------------------
    @staticmethod
    def add_verdicts(step: StepRecord, verdicts: list[StepVerdict] | None) -> StepRecord:
        """The step verifier's judgement of the action (the first verdict) and of every candidate."""
        if not verdicts:
            return step
        listed = [{"correct": v.correct, "reward": v.reward, "reason": v.reason, "details": jsonable(v.details)}
                  for v in verdicts]
        return replace(step, reward=float(listed[0]["reward"]), verifier={**listed[0], "verdicts": listed})

    @staticmethod
    def add_guard(step: StepRecord, checked: GuardDecision) -> StepRecord:
        return replace(step, guard={"verdict": checked.verdict.value, "reason": checked.reason})

    async def settle_guard(self, checking: Awaitable[GuardDecision], person: Person | None) -> GuardDecision:
        """The guard's decision, with a request for a yes settled: by ``assume_yes``, by the person, or refused
        when nobody is there to ask."""
        decision = await checking
        if decision.verdict is not GuardVerdict.CONFIRM:
            return decision
        if self.options.assume_yes:
            return GuardDecision(GuardVerdict.ALLOW, f"{decision.reason}: allowed by --yes (agent.assume_yes)")
        if person is None:
            return GuardDecision(GuardVerdict.REFUSE, f"{decision.reason}; it needs a yes and nobody is there to "
                                                      "ask (run on a terminal, or pass --yes)")
        if await person.confirm(self.secrets.redact(decision.reason)):
            return GuardDecision(GuardVerdict.ALLOW, f"{decision.reason}: confirmed by the user")
        return GuardDecision(GuardVerdict.REFUSE, f"{decision.reason}: the user said no")

    async def asked(self, step: StepRecord, obs: Observation, action: Action, person: Person | None) -> None:
        """``ask_user``: the question goes to the person and the answer to the policy's history; with nobody to
        ask, the episode ends as infeasible."""
        question = action.text or ""
        self.rejected = 0
        if person is None:
            await self.record(replace(step, ended_at=time.time(), info={**step.info, "asked": question}))
            self.outcome = Outcome.INFEASIBLE
            self.finish_fields["reason"] = {"type": "AskedUser", "message": f"the agent asked {question!r} and "
                                                                            "nobody is there to answer"}
            return
        answer = await self.clock.timed("ask", person.answer(self.secrets.redact(question)))
        await self.record(replace(step, executed=True, ended_at=time.time(),
                                  info={**step.info, "asked": question, "answer": answer}))
        raw = self._decision.raw_output if self._decision is not None else step.raw_output
        self._remember(HistoryEntry(action, raw, executed=True, note=f"the user answered: {answer}",
                                    observation=obs))

    # -- executed steps -------------------------------------------------------------------------------------------
    async def stepped(self, step: StepRecord, obs: Observation, action: Action, result: StepResult) -> Observation:
        """Record a step the environment took; decide the outcome if the episode ended. Returns the next screen."""
        next_obs, reward, terminated, truncated, info = result
        info = dict(info)
        effect: StepEffect | None = info.pop("effect", None)
        dry_run = bool(info.pop("dry_run", False))
        self.clock.split_step(effect)
        self.total = (self.total or 0.0) + float(reward)
        self.rejected = 0
        done = effect.result if effect is not None else None
        sensitive = bool(done and done.sensitive)
        guard = {**(step.guard or {}), **({"dry_run": True} if dry_run else {})}
        checker = self._checker_verdict(float(reward), info)
        if step.verifier is None and checker is not None:  # no step verifier: the checker judged this step
            step = replace(step, reward=float(reward), verifier=checker)
        step = replace(
            step, action=_recorded_action(action, sensitive), raw_output=_mask_typed(step.raw_output, action, sensitive),
            executed=not dry_run and action.kind not in TERMINAL_KINDS, ended_at=time.time(), guard=guard or None,
            target_box=tuple(done.target_box.as_list()) if done and done.target_box else None,
            target=done.target if done else None, sensitive=sensitive,
            settled=effect.settle.settled if effect is not None and effect.settle is not None else None,
            info={**step.info, "env_reward": float(reward), "terminated": bool(terminated),
                  "truncated": bool(truncated), **_effect_info(effect), **({"env_info": jsonable(info)} if info else {})},
        )
        note = "dry run: not performed" if dry_run else (done.detail if done else "")
        raw = self._decision.raw_output if self._decision is not None else step.raw_output
        self._remember(HistoryEntry(action, raw, executed=True, note=note, observation=obs))
        await self.record(step)
        if terminated:
            self._terminated(action, checker, info)
        elif truncated:
            self.outcome = Outcome.TRUNCATED
            budget = self.env.max_steps
            self.finish_fields["reason"] = {"type": "StepBudget", "message": (
                f"{budget} steps used without finishing" if budget else "the environment truncated the episode")}
        return next_obs

    def failed(self, step: StepRecord, error: BaseException) -> StepRecord:
        """The step in flight when the environment failed, with its error."""
        return replace(step, ended_at=time.time(), error={"type": type(error).__name__, "message": str(error)})

    @staticmethod
    def _checker_verdict(reward: float, info: dict[str, Any]) -> dict[str, Any] | None:
        if "success" not in info:
            return None
        return {"success": bool(info["success"]), "reward": reward, **jsonable(dict(info.get("verdict") or {}))}

    def _terminated(self, action: Action, checker: dict[str, Any] | None, info: dict[str, Any]) -> None:
        if action.kind is ActionKind.FINISH:
            self.finish_fields["answer"] = action.text
        if info.get("planned"):  # a dry run's finish (envs.wrappers.DryRun): the plan is complete, nothing was checked
            self.outcome = Outcome.PLANNED
        elif checker is not None:
            self.outcome = Outcome.SUCCESS if checker["success"] else Outcome.FAILURE
            self.finish_fields["verifier"] = checker
        elif action.kind is ActionKind.INFEASIBLE:
            self.outcome = Outcome.INFEASIBLE
        elif action.kind is ActionKind.FINISH:
            self.outcome = Outcome.CLAIMED
        else:  # the environment ended the episode on its own, without a verdict
            self.outcome = Outcome.SUCCESS if (self.total or 0.0) > 0 else Outcome.FAILURE
        if action.kind is ActionKind.INFEASIBLE:
            self.finish_fields["reason"] = {"type": "Infeasible", "message": action.text or ""}

    # -- writing --------------------------------------------------------------------------------------------------
    async def record(self, step: StepRecord) -> None:
        """Wait for the step's frame, write its line, tell the caller."""
        t0 = time.perf_counter()
        frame_path = await self._frame_job if self._frame_job is not None else ""
        self._frame_job = None
        self.clock.add("record", time.perf_counter() - t0)
        latency = {k: round(v, 6) for k, v in self.clock.step.items()}
        t0 = time.perf_counter()
        step = self.secrets.redact_value(replace(step, frame_path=frame_path, latency=latency))
        self.writer.write_step(step)
        self.clock.totals["record"] = self.clock.totals.get("record", 0.0) + time.perf_counter() - t0
        self.step_latency.append(latency)
        if self.on_step is not None:
            self.on_step(step)

    def _remember(self, entry: HistoryEntry) -> None:
        # The history goes back into the model's prompt (to a remote server, maybe): secrets stay placeholders there.
        entry = replace(entry, raw_output=self.secrets.redact(entry.raw_output), note=self.secrets.redact(entry.note))
        self.history.append(entry)
        if len(self.history) > KEEP_FRAMES:  # frames are kept for the last few steps only
            old = self.history[-KEEP_FRAMES - 1]
            if old.observation is not None:
                self.history[-KEEP_FRAMES - 1] = replace(old, observation=None)

    # -- the end --------------------------------------------------------------------------------------------------
    async def abort(self, error: BaseException) -> EpisodeResult:
        """A typed error (or a bug, which the runner re-raises after this) ended the episode."""
        await self._drain()
        self.error = error
        self.outcome = Outcome.ABORTED
        self.finish_fields["reason"] = {"type": type(error).__name__, "message": str(error)}
        log.error("episode aborted: %s: %s", type(error).__name__, error)
        return await self.finish()

    async def interrupt(self) -> None:
        await self._drain()
        self.outcome = Outcome.INTERRUPTED
        self.finish_fields["reason"] = {"type": "Interrupted",
                                        "message": "stopped: Ctrl-C, SIGTERM, SIGHUP or a cancellation"}
        await self.finish()

    async def finish(self) -> EpisodeResult:
        rewarded = self.env.rewarded
        record: EpisodeRecord = self.writer.finish(
            self.outcome or Outcome.ABORTED, timings={k: round(v, 6) for k, v in self.clock.totals.items()},
            return_=self.total if rewarded else None, **self.secrets.redact_value(self.finish_fields))
        return EpisodeResult(record.env.get("name", "") if record.env else "", self.seed, record, self.writer.path,
                             tuple(self.step_latency), self.error)

    async def _drain(self) -> None:
        """Let a frame write in flight finish (its step may never be written, but the file is whole)."""
        job, self._frame_job = self._frame_job, None
        if job is not None and not job.done():
            try:
                await asyncio.shield(job)
            except (Exception, asyncio.CancelledError):
                pass


def _describe(thing: Policy | Device) -> dict[str, Any]:
    try:
        return jsonable(thing.describe())
    except Exception:  # describing is for the record only; never worth an episode
        return {"name": thing.name}


def _effect_info(effect: StepEffect | None) -> dict[str, Any]:
    if effect is None:
        return {}
    out: dict[str, Any] = {}
    if effect.settle is not None:
        out["settle"] = {"elapsed_s": effect.settle.elapsed_s, "frames": effect.settle.frames}
    if effect.result.detail:
        out["detail"] = effect.result.detail
    return out


def _recorded_action(action: Action, sensitive: bool) -> dict[str, Any]:
    data = action.to_dict()
    if sensitive and action.text is not None and not PLACEHOLDER.fullmatch(action.text):
        data["text"] = MASK  # typed into a password field: never stored in clear
    return data


def _mask_typed(raw_output: str, action: Action, sensitive: bool) -> str:
    if sensitive and action.text and not PLACEHOLDER.fullmatch(action.text):
        return raw_output.replace(action.text, MASK)
    return raw_output


def jsonable(value: Any) -> Any:
    """``value`` if it can be written as JSON (after ``json_safe``), else its repr."""
    try:
        json.dumps(json_safe(value))
        return value
    except (TypeError, ValueError):
        return repr(value)

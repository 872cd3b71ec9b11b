"""Evaluation: run a policy over registered environments, many episodes at once, and score it.

    result = await evaluate(["generated/click", "generated/form"], lambda env: OraclePolicy(env),
                            episodes=20, parallel=4, runs_dir="runs")
    console.print(format_table(result))

Each environment name gets ``episodes`` episodes with seeds ``seed .. seed + episodes - 1``. At most
``parallel`` episodes run at once, each on its own environment instance (an environment owns its
device); up to ``parallel`` instances per name are created and reused across that name's episodes.

One step: the policy decides on the current screen; the step's frame, action, raw output, parse
error, candidates and model input size are recorded, with the step reward and verdicts from
``env.verify([action, *candidates])`` taken *before* the action runs (the first verdict is the
executed action's). An output that does not parse is recorded, never executed, and still counts
against the step budget. Outcomes: success (terminated with reward > 0), failure (terminated with
reward 0), truncated (budget spent), aborted (an environment, device or policy error: recorded,
and the other episodes go on).

The whole run is one ordinary run folder (docs/trajectories.md) plus ``eval.json``, the scores.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agent.loop import KEEP_FRAMES
from devices.actions import Action, TERMINAL_KINDS
from devices.base import Observation
from envs.records import EpisodeRecord, Outcome, StepRecord, json_safe
from envs.registry import make
from envs.trajectory import EpisodeWriter, RunWriter
from policy.base import Decision, HistoryEntry, Policy

log = logging.getLogger(__name__)

EVAL_PHASES = ("reset", "decide", "verify", "step", "record")
"""Latency phases of an evaluation step (``reset`` once per episode)."""

Z95 = 1.959963984540054

PolicyFactory = Callable[[Any], Policy]
EpisodeCallback = Callable[["EpisodeResult"], None]


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval for a binomial proportion (95% by default); (0, 1) when n = 0."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True, slots=True)
class EpisodeResult:
    env: str
    seed: int
    record: EpisodeRecord
    path: Path
    step_latency: tuple[dict[str, float], ...] = ()

    @property
    def success(self) -> bool:
        return self.record.outcome is Outcome.SUCCESS


@dataclass(frozen=True, slots=True)
class EnvStats:
    """Scores of one environment (or of all of them: ``env == "overall"``)."""

    env: str
    episodes: int
    successes: int
    success_rate: float
    ci95: tuple[float, float]
    mean_steps: float
    latency: dict[str, float]
    """Median seconds per phase: per step for decide/verify/step/record, per episode for reset."""
    outcomes: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {"env": self.env, "episodes": self.episodes, "successes": self.successes,
                "success_rate": self.success_rate, "ci95": list(self.ci95), "mean_steps": self.mean_steps,
                "latency": self.latency, "outcomes": self.outcomes}


@dataclass(slots=True)
class EvalResult:
    run_dir: Path
    run_id: str
    envs: dict[str, EnvStats]
    overall: EnvStats
    episodes: list[EpisodeResult] = field(default_factory=list)
    wall_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "wall_s": self.wall_s, "overall": self.overall.to_dict(),
                "envs": {k: v.to_dict() for k, v in self.envs.items()},
                "episodes": [{"env": e.env, "seed": e.seed, "episode_id": e.record.episode_id,
                              "outcome": e.record.outcome.value if e.record.outcome else None,
                              "steps": e.record.num_steps} for e in self.episodes]}


def compute_stats(name: str, results: Sequence[EpisodeResult]) -> EnvStats:
    n = len(results)
    wins = sum(r.success for r in results)
    latency: dict[str, float] = {}
    reset = [r.record.timings["reset"] for r in results if "reset" in r.record.timings]
    if reset:
        latency["reset"] = statistics.median(reset)
    for phase in EVAL_PHASES[1:]:
        values = [s[phase] for r in results for s in r.step_latency if phase in s]
        if values:
            latency[phase] = statistics.median(values)
    outcomes = Counter(r.record.outcome.value if r.record.outcome else "unfinished" for r in results)
    return EnvStats(
        env=name, episodes=n, successes=wins, success_rate=wins / n if n else 0.0, ci95=wilson_interval(wins, n),
        mean_steps=statistics.fmean(r.record.num_steps for r in results) if n else 0.0,
        latency=latency, outcomes=dict(outcomes),
    )


class _Pool:
    """Environment instances of one name: created on demand, reused, dropped when they break."""

    def __init__(self, name: str, kwargs: dict[str, Any]) -> None:
        self.name = name
        self.kwargs = kwargs
        self.idle: list[Any] = []
        self.all: list[Any] = []

    def take(self) -> Any:
        if self.idle:
            return self.idle.pop()
        env = make(self.name, **self.kwargs)
        self.all.append(env)
        return env

    def give(self, env: Any) -> None:
        self.idle.append(env)

    async def drop(self, env: Any) -> None:
        if env in self.all:
            self.all.remove(env)
        await _close(env)

    async def close(self) -> None:
        envs, self.all, self.idle = self.all, [], []
        for env in envs:
            await _close(env)


async def _close(env: Any) -> None:
    try:
        await asyncio.wait_for(env.close(), timeout=15)
    except (Exception, asyncio.CancelledError) as e:  # closing is best effort
        log.warning("closing %s failed: %s: %s", getattr(env, "name", env), type(e).__name__, e)


async def evaluate(
    env_names: Sequence[str],
    policy_factory: PolicyFactory,
    *,
    episodes: int = 10,
    parallel: int = 1,
    runs_dir: str | Path = "runs",
    seed: int = 0,
    max_steps: int | None = None,
    on_episode: EpisodeCallback | None = None,
    run_id: str | None = None,
    config: dict[str, Any] | None = None,
) -> EvalResult:
    """Run ``episodes`` episodes of every environment in ``env_names``, ``parallel`` at once.

    ``policy_factory(env)`` is called for every episode with the environment instance it runs on
    (an oracle reads its env; share heavy state such as a loaded model through the closure).
    ``max_steps`` overrides each environment's step budget. ``on_episode`` is called as each
    episode ends. ``config`` is stored in run.json. Writes one run folder under ``runs_dir``
    (``eval.json`` holds the scores) and returns the scores.
    """
    if episodes < 1:
        raise ValueError(f"episodes={episodes} must be at least 1")
    if parallel < 1:
        raise ValueError(f"parallel={parallel} must be at least 1")
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"max_steps={max_steps} must be at least 1")
    names = list(dict.fromkeys(env_names))
    for name in names:
        from envs.registry import spec

        spec(name)  # unknown names fail before anything starts
    run = RunWriter(runs_dir, config={"kind": "eval", "envs": names, "episodes": episodes, "parallel": parallel,
                                      "seed": seed, "max_steps": max_steps, **(config or {})}, run_id=run_id)
    env_kwargs = {"max_steps": max_steps} if max_steps is not None else {}
    pools = {name: _Pool(name, env_kwargs) for name in names}
    gate = asyncio.Semaphore(parallel)
    results: list[EpisodeResult] = []
    t0 = time.perf_counter()

    async def one(name: str, ep_seed: int) -> EpisodeResult:
        async with gate:
            pool = pools[name]
            writer = run.episode(task="", env={"name": name, "seed": ep_seed})
            env = None
            try:
                env = pool.take()
                result, broken = await run_env_episode(name, ep_seed, env, policy_factory, writer, max_steps)
            except Exception as e:  # building the env or the policy failed
                log.error("%s seed %d: %s: %s", name, ep_seed, type(e).__name__, e)
                record = writer.finish(Outcome.ABORTED, reason={"type": type(e).__name__, "message": str(e)})
                result, broken = EpisodeResult(name, ep_seed, record, writer.path), True
            if env is not None:
                if broken:
                    await pool.drop(env)
                else:
                    pool.give(env)
            results.append(result)
            if on_episode is not None:
                on_episode(result)
            return result

    try:
        await asyncio.gather(*(one(name, seed + i) for name in names for i in range(episodes)))
    finally:
        await asyncio.gather(*(pool.close() for pool in pools.values()), return_exceptions=True)
    results.sort(key=lambda r: (names.index(r.env), r.seed))
    result = EvalResult(
        run_dir=run.path, run_id=run.run_id,
        envs={name: compute_stats(name, [r for r in results if r.env == name]) for name in names},
        overall=compute_stats("overall", results), episodes=results, wall_s=time.perf_counter() - t0,
    )
    (run.path / "eval.json").write_text(json.dumps(json_safe(result.to_dict()), indent=2) + "\n", encoding="utf-8")
    return result


async def run_env_episode(
    name: str, seed: int, env: Any, policy_factory: PolicyFactory, writer: EpisodeWriter, max_steps: int | None,
) -> tuple[EpisodeResult, bool]:
    """One episode on ``env``; returns the result and whether the env broke (must not be reused)."""
    totals: dict[str, float] = {}
    step_latency: list[dict[str, float]] = []
    history: list[HistoryEntry] = []
    finish: dict[str, Any] = {}
    outcome: Outcome | None = None
    episode_return: float | None = None
    broken = False
    frame_job: asyncio.Future[str] | None = None
    index = 0

    def add(phase: str, seconds: float, step: dict[str, float] | None) -> None:
        totals[phase] = totals.get(phase, 0.0) + seconds
        if step is not None:
            step[phase] = step.get(phase, 0.0) + seconds

    def remember(entry: HistoryEntry) -> None:
        history.append(entry)
        if len(history) > KEEP_FRAMES:
            old = history[-KEEP_FRAMES - 1]
            if old.observation is not None:
                history[-KEEP_FRAMES - 1] = replace(old, observation=None)

    try:
        t = time.perf_counter()
        obs, info = await env.reset(seed=seed)
        add("reset", time.perf_counter() - t, None)
        task = str(info.get("instruction", ""))
        policy = policy_factory(env)
        budget = max_steps if max_steps is not None else int(env.max_steps)
        writer.update(task=task, policy=_describe(policy),
                      env={"name": name, "seed": seed, "max_steps": budget,
                           **{k: v for k, v in info.items() if k != "instruction"}})
        while True:
            if index >= budget:
                outcome = Outcome.TRUNCATED
                finish["reason"] = {"type": "StepBudget", "message": f"{budget} steps used without finishing"}
                break
            lat: dict[str, float] = {}
            started = time.time()
            frame_job = asyncio.ensure_future(asyncio.to_thread(writer.write_frame, index, obs))
            t = time.perf_counter()
            try:
                decision: Decision = await policy.decide(task, tuple(history), obs)
            finally:
                add("decide", time.perf_counter() - t, lat)
            base = _step_base(writer, index, started, obs, decision)
            action = decision.action
            if action is None:
                note = f"output did not parse: {decision.parse_error}"
                remember(HistoryEntry(None, decision.raw_output, executed=False, note=note, observation=obs))
                await _record(writer, frame_job, replace(base, ended_at=time.time()), lat, add)
                frame_job = None
                step_latency.append(lat)
                index += 1
                continue
            t = time.perf_counter()
            verdicts = await env.verify([action, *decision.candidates])
            add("verify", time.perf_counter() - t, lat)
            reward, verifier = _verdict_fields(verdicts)
            t = time.perf_counter()
            try:
                next_obs, env_reward, terminated, truncated, step_info = await env.step(action)
            except BaseException as e:
                add("step", time.perf_counter() - t, lat)
                error = {"type": type(e).__name__, "message": str(e)}
                await _record(writer, frame_job, replace(base, ended_at=time.time(), reward=reward, verifier=verifier,
                                                         error=error), lat, add)
                frame_job = None
                raise
            add("step", time.perf_counter() - t, lat)
            executed = action.kind not in TERMINAL_KINDS
            remember(HistoryEntry(action, decision.raw_output, executed=executed, observation=obs))
            await _record(writer, frame_job, replace(
                base, executed=executed, ended_at=time.time(), reward=reward, verifier=verifier,
                info={**base.info, "env_reward": float(env_reward), "terminated": bool(terminated),
                      "truncated": bool(truncated), **({"env_info": step_info} if step_info else {})},
            ), lat, add)
            frame_job = None
            step_latency.append(lat)
            index += 1
            obs = next_obs
            episode_return = (episode_return or 0.0) + float(env_reward)
            if terminated:
                outcome = Outcome.SUCCESS if env_reward > 0 else Outcome.FAILURE
                if isinstance(step_info, dict) and "verdict" in step_info:
                    finish["verifier"] = {"success": bool(step_info.get("success", env_reward > 0)),
                                          "reward": float(env_reward), **dict(step_info["verdict"])}
                if action.text and action.kind in TERMINAL_KINDS:
                    finish["answer"] = action.text
                break
            if truncated:
                outcome = Outcome.TRUNCATED
                finish["reason"] = {"type": "StepBudget", "message": f"the environment truncated after {index} steps"}
                break
    except asyncio.CancelledError:
        await _drain(frame_job)
        writer.finish(Outcome.INTERRUPTED, reason={"type": "Interrupted", "message": "evaluation cancelled"},
                      timings=_round(totals))
        raise
    except Exception as e:
        await _drain(frame_job)
        outcome = Outcome.ABORTED
        broken = True
        finish["reason"] = {"type": type(e).__name__, "message": str(e)}
        log.error("%s seed %d aborted: %s: %s", name, seed, type(e).__name__, e)
    record = writer.finish(outcome or Outcome.ABORTED, timings=_round(totals), return_=episode_return, **finish)
    return EpisodeResult(name, seed, record, writer.path, tuple(step_latency)), broken


async def _record(writer: EpisodeWriter, frame_job: asyncio.Future[str] | None, step: StepRecord,
                  lat: dict[str, float], add: Callable[..., None]) -> None:
    t = time.perf_counter()
    frame_path = await frame_job if frame_job is not None else ""
    add("record", time.perf_counter() - t, lat)
    t = time.perf_counter()
    # The record phase covers the wait for the frame and the line itself; both are in the line.
    lat_final = {k: round(v, 6) for k, v in lat.items()}
    writer.write_step(replace(step, frame_path=frame_path, latency=lat_final))
    add("record", time.perf_counter() - t, lat)


async def _drain(job: asyncio.Future[str] | None) -> None:
    if job is not None and not job.done():
        try:
            await asyncio.shield(job)
        except (Exception, asyncio.CancelledError):
            pass


def _verdict_fields(verdicts: Any) -> tuple[float | None, dict[str, Any] | None]:
    if not verdicts:
        return None, None
    listed = [{"correct": v.correct, "reward": v.reward, "reason": v.reason, "details": _jsonable(v.details)}
              for v in verdicts]
    first = listed[0]
    return float(first["reward"]), {**first, "verdicts": listed}


def _step_base(writer: EpisodeWriter, index: int, started: float, obs: Observation, decision: Decision) -> StepRecord:
    return StepRecord(
        step_id=writer.step_id(index), index=index, started_at=started, ended_at=started, frame_path="",
        frame_size=obs.size, model_input_size=decision.model_input_size or obs.size,
        action=decision.action.to_dict() if decision.action is not None else None, executed=False,
        raw_output=decision.raw_output, parse_error=decision.parse_error,
        candidates=tuple(c.to_dict() for c in decision.candidates),
        info={**({"policy_box": decision.target_box.as_list()} if decision.target_box else {}),
              **({"policy": _jsonable(decision.info)} if decision.info else {})},
    )


def _describe(policy: Any) -> dict[str, Any]:
    try:
        return _jsonable(policy.describe())
    except Exception:
        return {"name": getattr(policy, "name", type(policy).__name__)}


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(json_safe(value))
        return value
    except (TypeError, ValueError):
        return repr(value)


def _round(d: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 6) for k, v in d.items()}


# -- the table ------------------------------------------------------------------------------------
def _ms(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds * 1000:.0f}"


def format_table(result: EvalResult) -> Any:
    """A rich Table: one row per environment and an overall row."""
    from rich.table import Table

    table = Table(title=f"eval {result.run_id}", header_style="bold")
    table.add_column("env")
    table.add_column("episodes", justify="right")
    table.add_column("success", justify="right")
    table.add_column("95% CI", justify="right")
    table.add_column("steps", justify="right")
    for phase in EVAL_PHASES:
        table.add_column(f"{phase} ms", justify="right")
    for stats in (*result.envs.values(), result.overall):
        style = "bold" if stats is result.overall else None
        table.add_row(
            stats.env, str(stats.episodes), f"{stats.successes}/{stats.episodes} {stats.success_rate:.0%}",
            f"{stats.ci95[0]:.0%}–{stats.ci95[1]:.0%}", f"{stats.mean_steps:.1f}",
            *(_ms(stats.latency.get(p)) for p in EVAL_PHASES), style=style,
            end_section=stats is not result.overall and stats is list(result.envs.values())[-1],
        )
    return table

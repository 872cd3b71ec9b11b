"""Evaluation: run a policy over registered environments, many episodes at once, and score it.

    result = await evaluate(["generated/click", "generated/form"], lambda env: OraclePolicy(env),
                            episodes=20, parallel=4, runs_dir="runs")
    console.print(format_table(result))

Each environment name gets ``episodes`` episodes with seeds ``seed .. seed + episodes - 1``. At most
``parallel`` episodes run at once, each on its own environment instance (an environment owns its
device); up to ``parallel`` instances per name are created and reused across that name's episodes.

Each episode runs through the one episode runner (``agent/runner.py``): the step's frame, action,
raw output, parse error, candidates and model input size are recorded, with the step reward and
verdicts from ``env.verify([action, *candidates])`` taken *before* the action runs (the first
verdict is the executed action's). An output that does not parse is recorded and never executed;
``max_parse_retries`` of them in a row abort the episode. Outcomes: success or failure (the task's
checker), truncated (the environment's step budget, ``max_steps`` overriding it), aborted (a typed
device, policy or environment error: recorded, the environment is replaced, and the other episodes
go on). Environments are sandboxes: evaluation runs unattended, with no guard in between. A bug
(any other exception) stops the evaluation with its traceback.

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

from agent.runner import TYPED_ERRORS, EpisodeResult, RunOptions, run_episode
from envs.base import Env
from envs.records import Outcome, json_safe
from envs.registry import make
from envs.trajectory import RunWriter
from policy.base import Policy

log = logging.getLogger(__name__)

EVAL_PHASES = ("reset", "decide", "verify", "act", "settle", "record")
"""Latency phases shown for an evaluation (``reset`` once per episode, the others per step)."""

Z95 = 1.959963984540054

PolicyFactory = Callable[[Env], Policy]
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
class EnvStats:
    """Scores of one environment (or of all of them: ``env == "overall"``)."""

    env: str
    episodes: int
    successes: int
    success_rate: float
    ci95: tuple[float, float]
    mean_steps: float
    latency: dict[str, float]
    """Median seconds per phase: per episode for reset, per step for the others."""
    outcomes: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {"env": self.env, "episodes": self.episodes, "successes": self.successes,
                "success_rate": self.success_rate, "ci95": list(self.ci95), "mean_steps": self.mean_steps,
                "latency": self.latency, "outcomes": self.outcomes}


ABSTAINED = ("Infeasible", "AskedUser")
"""The episode reasons of an abstention: the policy declared the task infeasible, or asked the user (and nobody was
there to answer): ``devices.actions.ABSTAIN_KINDS`` as the runner records them."""


@dataclass(frozen=True, slots=True)
class AbstentionStats:
    """Abstentions of one environment (or ``overall``), apart from success: on episodes whose target is absent
    (generated ``absent`` tasks, ``info["task_kind"] == "absent"``) abstaining is right; anywhere else it is wrong."""

    env: str
    absent: int
    """Episodes whose target was absent."""
    abstained_correctly: int
    present: int
    """Episodes whose target was on the screen (every other task)."""
    abstained_wrongly: int

    def to_dict(self) -> dict[str, Any]:
        return {"env": self.env, "absent": self.absent, "abstained_correctly": self.abstained_correctly,
                "abstention_rate": self.abstained_correctly / self.absent if self.absent else None,
                "ci95": list(wilson_interval(self.abstained_correctly, self.absent)) if self.absent else None,
                "present": self.present, "abstained_wrongly": self.abstained_wrongly}


def abstained(result: EpisodeResult) -> bool:
    """Whether the episode ended with an abstention (infeasible, or a question nobody was there to answer)."""
    return (result.record.reason or {}).get("type") in ABSTAINED


def abstention_stats(name: str, results: Sequence[EpisodeResult]) -> AbstentionStats:
    absent = [r for r in results if (r.record.env or {}).get("task_kind") == "absent"]
    present = [r for r in results if (r.record.env or {}).get("task_kind") != "absent"]
    return AbstentionStats(name, len(absent), sum(abstained(r) for r in absent), len(present),
                           sum(abstained(r) for r in present))


@dataclass(slots=True)
class EvalResult:
    run_dir: Path
    run_id: str
    envs: dict[str, EnvStats]
    overall: EnvStats
    episodes: list[EpisodeResult] = field(default_factory=list)
    wall_s: float = 0.0
    abstention: dict[str, AbstentionStats] = field(default_factory=dict)
    """Per environment and ``overall``: abstentions counted apart from success (``AbstentionStats``)."""

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "wall_s": self.wall_s, "overall": self.overall.to_dict(),
                "envs": {k: v.to_dict() for k, v in self.envs.items()},
                "abstention": {k: v.to_dict() for k, v in self.abstention.items()},
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

    def __init__(self, name: str, max_steps: int | None) -> None:
        self.name = name
        self.max_steps = max_steps
        self.idle: list[Env] = []
        self.all: list[Env] = []

    def take(self) -> Env:
        if self.idle:
            return self.idle.pop()
        env: Env = make(self.name, max_steps=self.max_steps)
        self.all.append(env)
        return env

    def give(self, env: Env) -> None:
        self.idle.append(env)

    async def drop(self, env: Env) -> None:
        if env in self.all:
            self.all.remove(env)
        await _close(env)

    async def close(self) -> None:
        envs, self.all, self.idle = self.all, [], []
        for env in envs:
            await _close(env)


async def _close(env: Env) -> None:
    try:
        await asyncio.wait_for(env.close(), timeout=15)
    except (Exception, asyncio.CancelledError) as e:  # closing is best effort
        log.warning("closing %s failed: %s: %s", env.name, type(e).__name__, e)


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
    options: RunOptions | None = None,
) -> EvalResult:
    """Run ``episodes`` episodes of every environment in ``env_names``, ``parallel`` at once.

    ``policy_factory(env)`` is called for every episode with the environment instance it runs on
    (an oracle reads its env; share heavy state such as a loaded model through the closure).
    ``max_steps`` overrides each environment's step budget. ``on_episode`` is called as each
    episode ends. ``config`` is stored in run.json; ``options`` go to the episode runner. Writes one
    run folder under ``runs_dir`` (``eval.json`` holds the scores) and returns the scores.
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
    pools = {name: _Pool(name, max_steps) for name in names}
    gate = asyncio.Semaphore(parallel)
    results: list[EpisodeResult] = []
    t0 = time.perf_counter()

    async def one(name: str, ep_seed: int) -> EpisodeResult:
        async with gate:
            pool = pools[name]
            writer = run.episode(task="", env={"name": name, "seed": ep_seed})
            env: Env | None = None
            try:
                env = pool.take()
                policy = policy_factory(env)
            except TYPED_ERRORS as e:  # building the env or the policy failed
                log.error("%s seed %d: %s: %s", name, ep_seed, type(e).__name__, e)
                record = writer.finish(Outcome.ABORTED, reason={"type": type(e).__name__, "message": str(e)})
                result = EpisodeResult(name, ep_seed, record, writer.path, error=e)
            else:
                result = await run_episode(env, policy, writer, seed=ep_seed, options=options)
                result = replace(result, env=name)
            if env is not None:
                if result.error is not None:  # a device or environment that failed is not reused
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
        abstention={**{name: abstention_stats(name, [r for r in results if r.env == name]) for name in names},
                    "overall": abstention_stats("overall", results)},
    )
    (run.path / "eval.json").write_text(json.dumps(json_safe(result.to_dict()), indent=2) + "\n", encoding="utf-8")
    return result


# -- the table ------------------------------------------------------------------------------------
def _ms(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds * 1000:.0f}"


def format_table(result: EvalResult, console: Any = None) -> Any:
    """A rich Table: one row per environment and an overall row, with the mean ms per step of each phase.

    Given the ``console`` it is printed on, and too wide for it (an 80-column terminal), it is two tables instead:
    the scores, then the ms per step, each with the environment's whole name (names are never cut with "…")."""
    from rich.console import Group
    from rich.measure import Measurement

    full = _table(result, ("episodes", "success", "95% CI", "steps", *(f"{p} ms" for p in EVAL_PHASES)))
    wide = console.options.update(max_width=10_000) if console is not None else None  # the width it wants
    if console is None or Measurement.get(console, wide, full).maximum <= console.width:
        return full
    scores = _table(result, ("episodes", "success", "95% CI", "steps"))
    latency = _table(result, EVAL_PHASES, title="ms per step")
    return Group(scores, latency)


def format_abstention(result: EvalResult) -> Any:
    """A rich Table of abstentions, apart from success: per environment, correct abstentions on absent targets and
    wrong ones elsewhere; None when no episode had an absent target and none abstained."""
    from rich import box
    from rich.table import Table

    rows = [a for a in result.abstention.values() if a.env != "overall" and (a.absent or a.abstained_wrongly)]
    if not rows:
        return None
    table = Table(title="abstention: right where the target is absent, wrong where it is present",
                  header_style="bold", box=box.SIMPLE_HEAD)
    table.add_column("env", no_wrap=True, min_width=max(len(a.env) for a in rows))
    for col in ("absent", "abstained", "95% CI", "present", "abstained"):
        table.add_column(col, justify="right", overflow="fold")
    for a in rows:
        low, high = wilson_interval(a.abstained_correctly, a.absent)
        share = f"{a.abstained_correctly}/{a.absent} {a.abstained_correctly / a.absent:.0%}" if a.absent else "-"
        table.add_row(a.env, str(a.absent), share, f"{low:.0%}–{high:.0%}" if a.absent else "-", str(a.present),
                      str(a.abstained_wrongly))
    return table


def _table(result: EvalResult, columns: tuple[str, ...], title: str | None = None) -> Any:
    from rich import box
    from rich.table import Table

    rows = (*result.envs.values(), result.overall)
    table = Table(title=title or f"eval {result.run_id}", header_style="bold", box=box.SIMPLE_HEAD)
    table.add_column("env", no_wrap=True, min_width=max(len(s.env) for s in rows), overflow="fold")
    for col in columns:
        table.add_column(col, justify="right", overflow="fold")
    for stats in rows:
        cells = {"episodes": str(stats.episodes), "success": f"{stats.successes}/{stats.episodes} {stats.success_rate:.0%}",
                 "95% CI": f"{stats.ci95[0]:.0%}–{stats.ci95[1]:.0%}", "steps": f"{stats.mean_steps:.1f}",
                 **{f"{p} ms": _ms(stats.latency.get(p)) for p in EVAL_PHASES},
                 **{p: _ms(stats.latency.get(p)) for p in EVAL_PHASES}}
        table.add_row(stats.env, *(cells[c] for c in columns), style="bold" if stats is result.overall else None,
                      end_section=stats is not result.overall and stats is rows[-2])
    return table

"""Evaluation: run a policy over registered environments, many episodes at once, and score it.

    result = await evaluate(["generated/click", "generated/form"], lambda env: OraclePolicy(env),
                            episodes=20, parallel=4, runs_dir="runs")
    console.print(format_table(result))

Each environment name gets ``episodes`` episodes with seeds ``seed .. seed + episodes - 1``. At most
``parallel`` episodes run at once, each in one of ``parallel`` slots: a slot holds one device per device kind
(built through ``devices.registry`` on first use) and lends it to an environment made for the episode and closed
after it. However many environments a suite has, at most ``parallel`` devices are alive; a slot replaces its device
every ``DEVICE_EPISODES`` episodes (a long-lived browser keeps what every page left behind), and a device's close
is bounded (the web device kills its browser's process group when its close hangs: ``devices.web.processes``).

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
from agent.terminal import plain
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


DeviceFactory = Callable[[str, int], Any]
"""``(device kind, slot index)`` -> a device of that kind, not started: what an evaluation slot lends its
environments (``agent.cli.evaluate`` builds them from the config's sections and the ``--device`` addresses)."""

DEVICE_START_TIMEOUT_S = 60.0
"""Seconds a slot's device may take to start (a browser's launch, a phone's first frame)."""

DEVICE_EPISODES = 100
"""Episodes a slot's device is lent for before the slot closes it and starts a new one: a browser page kept for
ever keeps what every page it showed left behind (Playwright holds each request and response object of a page
until the page closes, about 15 KB an episode in this process alone, more in the driver and the browser), so a
suite of thousands of episodes would grow without end. One launch per 100 episodes costs about 1 %."""


def default_devices(kind: str, slot: int) -> Any:
    """A device of ``kind`` at its section's defaults (``devices.registry``), whatever the slot."""
    from devices.registry import device_kind
    from devices.settle import SettleConfig

    spec = device_kind(kind)
    return spec.build(spec.config(), SettleConfig())


class _Slot:
    """One of ``parallel`` places an episode runs. It holds one started device per device kind, built on first use
    and lent to every environment that runs there: each environment is made for its episode and closed after it,
    the device stays. So an evaluation of any number of environments keeps at most ``parallel`` devices (and their
    browsers) alive. A device that failed is closed, and the slot's next episode on that kind gets a new one; so is
    one lent for ``DEVICE_EPISODES`` episodes (what a long-lived browser keeps grows with every page it showed)."""

    def __init__(self, index: int, factory: DeviceFactory, episodes_per_device: int = DEVICE_EPISODES) -> None:
        self.index = index
        self.factory = factory
        self.devices: dict[str, Any] = {}
        self.episodes_per_device = episodes_per_device
        self.lent: dict[str, int] = {}
        """Episodes each kind's device has been lent for."""

    async def device(self, kind: str) -> Any:
        if self.lent.get(kind, 0) >= self.episodes_per_device:
            await self.drop(kind)  # closed before the next one starts: never two browsers in one slot
        if kind not in self.devices:
            device = self.factory(kind, self.index)
            try:
                await asyncio.wait_for(device.start(), timeout=DEVICE_START_TIMEOUT_S)
            except BaseException:
                await _close(device, f"slot {self.index}'s {kind} device")
                raise
            self.devices[kind] = device
            self.lent[kind] = 0
        self.lent[kind] += 1
        return self.devices[kind]

    async def drop(self, kind: str) -> None:
        self.lent.pop(kind, None)
        device = self.devices.pop(kind, None)
        if device is not None:
            await _close(device, f"slot {self.index}'s {kind} device")

    async def close(self) -> None:
        for kind in list(self.devices):
            await self.drop(kind)


async def _close(thing: Any, what: str) -> None:
    """Close an environment or a device, best effort and bounded: a hung close never stalls the evaluation."""
    try:
        await asyncio.wait_for(thing.close(), timeout=15)
    except (Exception, asyncio.CancelledError) as e:
        log.warning("closing %s failed: %s: %s", what, type(e).__name__, e)


def _check_slots(names: Sequence[str], parallel: int) -> dict[str, str | None]:
    """Each environment's device kind; ``ValueError`` when ``parallel`` slots cannot hold a kind's devices (two
    desktops in one process would share one screen)."""
    from devices.registry import device_kind
    from envs.registry import spec

    kinds = {name: spec(name).device_kind for name in names}  # unknown names fail before anything starts
    for kind in {k for k in kinds.values() if k}:
        if parallel > 1 and device_kind(kind).one_per_process:
            raise ValueError(f"--parallel {parallel}: the {kind} device is one per process (two would share one "
                             f"screen); evaluate its environments with --parallel 1")
    return kinds


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
    devices: DeviceFactory = default_devices,
    episodes_per_device: int = DEVICE_EPISODES,
) -> EvalResult:
    """Run ``episodes`` episodes of every environment in ``env_names``, ``parallel`` at once.

    ``policy_factory(env)`` is called for every episode with the environment instance it runs on
    (an oracle reads its env; share heavy state such as a loaded model through the closure).
    ``max_steps`` overrides each environment's step budget. ``on_episode`` is called as each
    episode ends. ``config`` is stored in run.json; ``options`` go to the episode runner. ``devices`` builds the
    device each of the ``parallel`` slots lends to its environments (``_Slot``), for ``episodes_per_device`` episodes
    before the slot starts a new one. Writes one run folder under
    ``runs_dir`` (``eval.json`` holds the scores) and returns the scores.
    """
    if episodes < 1:
        raise ValueError(f"episodes={episodes} must be at least 1")
    if parallel < 1:
        raise ValueError(f"parallel={parallel} must be at least 1")
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"max_steps={max_steps} must be at least 1")
    names = list(dict.fromkeys(env_names))
    kinds = _check_slots(names, parallel)
    run = RunWriter(runs_dir, config={"kind": "eval", "envs": names, "episodes": episodes, "parallel": parallel,
                                      "seed": seed, "max_steps": max_steps, **(config or {})}, run_id=run_id)
    slots: asyncio.Queue[_Slot] = asyncio.Queue()
    if episodes_per_device < 1:
        raise ValueError(f"episodes_per_device={episodes_per_device} must be at least 1")
    every = [_Slot(i, devices, episodes_per_device) for i in range(parallel)]
    for slot in every:
        slots.put_nowait(slot)
    results: list[EpisodeResult] = []
    t0 = time.perf_counter()

    async def one(name: str, ep_seed: int) -> EpisodeResult:
        slot = await slots.get()
        try:
            result = await _episode(slot, name, kinds[name], ep_seed)
        finally:
            slots.put_nowait(slot)
        results.append(result)
        if on_episode is not None:
            on_episode(result)
        return result

    async def _episode(slot: _Slot, name: str, kind: str | None, ep_seed: int) -> EpisodeResult:
        writer = run.episode(task="", env={"name": name, "seed": ep_seed})
        env: Env | None = None
        try:
            lent = {"device": await slot.device(kind)} if kind else {}
            env = make(name, max_steps=max_steps, **lent)
            policy = policy_factory(env)
        except (*TYPED_ERRORS, asyncio.TimeoutError) as e:  # the device, the env or the policy would not start
            log.error("%s seed %d: %s: %s", name, ep_seed, type(e).__name__, e)
            record = writer.finish(Outcome.ABORTED, reason={"type": type(e).__name__, "message": str(e)})
            result = EpisodeResult(name, ep_seed, record, writer.path, error=e)
        else:
            result = await run_episode(env, policy, writer, seed=ep_seed, options=options)
            result = replace(result, env=name)
        if env is not None:
            await _close(env, name)
        if result.error is not None and kind:  # a device that failed is not lent again
            await slot.drop(kind)
        return result

    try:
        await asyncio.gather(*(one(name, seed + i) for name in names for i in range(episodes)))
    finally:
        await asyncio.gather(*(slot.close() for slot in every), return_exceptions=True)
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
        table.add_row(plain(a.env), str(a.absent), share, f"{low:.0%}–{high:.0%}" if a.absent else "-", str(a.present),
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
        table.add_row(plain(stats.env), *(cells[c] for c in columns), style="bold" if stats is result.overall else None,
                      end_section=stats is not result.overall and stats is rows[-2])
    return table

"""What the CLI prints: a line per step while running, and a one-screen summary at the end."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent.episode import PHASES
from agent.terminal import plain
from envs.records import EpisodeRecord, Outcome, StepRecord
from envs.trajectory import Episode, EpisodeState

OUTCOME_STYLE = {
    Outcome.SUCCESS: "bold green", Outcome.CLAIMED: "green", Outcome.FAILURE: "bold red",
    Outcome.INFEASIBLE: "yellow", Outcome.TRUNCATED: "yellow", Outcome.ABORTED: "bold red",
    Outcome.INTERRUPTED: "yellow", Outcome.PLANNED: "bold cyan",
}
PHASE_ORDER = ("start", *PHASES)
"""The order phases are shown in (the summary's table, the report's latency chart): ``start`` (the device's start,
in runs recorded before the one runner; still read), then the runner's phases in the order a step runs them."""


def describe_action(data: dict[str, Any] | None) -> str:
    if data is None:
        return "(no action)"
    from devices.actions import Action

    try:
        return Action.from_dict(data).describe()
    except ValueError:
        return str(data)


def print_step(console: Any, step: StepRecord) -> None:
    if step.parse_error:
        what = f"[red]unparsed[/] {plain(step.parse_error)}"
    else:
        what = plain(describe_action(step.action))
        if step.error:
            what += f" [red]{plain(step.error['type'])}[/]"
        elif step.guard and step.guard.get("verdict") == "refuse":
            what += f" [yellow]refused[/] ({plain(step.guard.get('reason', ''))})"
        elif step.guard and step.guard.get("dry_run"):
            what += " [dim](dry run)[/]"
        if step.target and step.target.get("text"):
            what += f" [dim]→ {plain(step.target.get('tag'))} “{plain(step.target['text'][:40])}”[/]"
    total = sum(step.latency.values())
    console.print(f"  step {step.index:>3}  {what}  [dim]{total * 1000:.0f} ms[/]", soft_wrap=True)


def print_summary(console: Any, record: EpisodeRecord, episode_path: Path,
                  steps: Sequence[StepRecord] = ()) -> None:
    """The outcome, why, the checker's verdict or the answer, time per phase and where the trajectory is. A dry run
    (outcome ``planned``) lists the actions it would have performed, from ``steps``."""
    from rich.table import Table

    outcome = record.outcome
    style = OUTCOME_STYLE.get(outcome, "bold red") if outcome else "bold red"
    table = Table(title=None, show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("phase")
    table.add_column("total", justify="right")
    table.add_column("per step", justify="right")
    count = max(record.num_steps, 1)
    for phase in PHASE_ORDER:
        seconds = record.timings.get(phase, 0.0)
        if seconds or phase in ("observe", "decide", "act", "settle", "record"):
            per = "" if phase in ("start", "reset") else f"{seconds / count * 1000:.0f} ms"
            table.add_row(phase, f"{seconds:.2f} s", per)
    wall = (record.ended_at or record.started_at) - record.started_at
    console.print()
    console.print(f"[{style}]{(outcome.value if outcome else 'unfinished').upper()}[/]  "
                  f"{record.num_steps} step{'s' if record.num_steps != 1 else ''} in {wall:.1f} s   task: "
                  f"{plain(record.task)}")
    if record.reason:
        console.print(f"  reason: {plain(record.reason.get('type'))}: {plain(record.reason.get('message'))}",
                      soft_wrap=True)
    if record.verifier:
        console.print(f"  checker: {'passed' if record.verifier.get('success') else 'failed'} "
                      f"(expected {plain(record.verifier.get('expected'))}, page says "
                      f"{plain(record.verifier.get('clicked'))})")
    if record.answer:
        console.print(f"  answer: {plain(record.answer)}")
    if record.outcome is Outcome.PLANNED or (record.dry_run and steps):
        _print_plan(console, steps)
    console.print(table)
    # Two lines: each path fits an 80-column terminal on its own.
    console.print(f"  trajectory: [bold]{plain(episode_path)}[/]", soft_wrap=True)
    console.print(f"  read it:    agent show {plain(episode_path)}", soft_wrap=True)


def _print_plan(console: Any, steps: Sequence[StepRecord]) -> None:
    """A dry run's plan: the actions it chose, in order (none was performed)."""
    planned = [s for s in steps if s.action is not None and s.guard and s.guard.get("dry_run")
               and s.action.get("kind") not in ("finish", "infeasible")]
    if not planned:
        console.print("  dry run: no action would have been performed")
        return
    console.print(f"  dry run: {len(planned)} action{'s' if len(planned) != 1 else ''} would have been performed:")
    for s in planned:
        console.print(f"    {s.index:>3}  {plain(describe_action(s.action))}", soft_wrap=True)


def print_episode(console: Any, episode: Episode) -> None:
    record = episode.record
    outcome = record.outcome.value if record.outcome else episode.state.value  # running or crashed
    console.print(f"[bold]{plain(record.run_id)}/{plain(record.episode_id)}[/]  {plain(outcome)}  task: "
                  f"{plain(record.task)}", soft_wrap=True)
    if record.reason:
        console.print(f"  reason: {plain(record.reason.get('type'))}: {plain(record.reason.get('message'))}",
                      soft_wrap=True)
    for step in episode.steps:
        print_step(console, step)
    done = f"{len(episode.steps)} finished step{'s' if len(episode.steps) != 1 else ''}"
    if episode.state is EpisodeState.RUNNING:
        console.print(f"  [cyan]running[/]: a live process is still writing this episode ({done} so far)",
                      soft_wrap=True)
    elif episode.state is EpisodeState.CRASHED:
        console.print(f"  [bold red]crashed[/]: the process writing this episode died before it ended; {done} kept",
                      soft_wrap=True)
    if episode.truncated_tail and episode.state is not EpisodeState.RUNNING:
        console.print("  [yellow]the last step was cut off when the process died[/]")
    decide = [s.latency.get("decide", 0.0) for s in episode.steps]
    if decide:
        console.print(f"  median decide {statistics.median(decide) * 1000:.0f} ms, frames in "
                      f"{plain(episode.path / 'frames')}")

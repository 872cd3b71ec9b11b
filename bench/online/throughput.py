"""Throughput of the whole online loop with the tiny model: steps per second with 1, 2 and 4 browser actors, where
the time goes, and how long a new adapter version takes to reach every actor.

Each run is a fresh ``OnlineSession`` on generated/click (step-level groups of 4 answers, 2 groups per update, the
learner running alongside), stopped after ``seconds`` of acting. Per run:

- steps/s: steps recorded in the run folder (those of interrupted episodes too) over the acting wall time;
- per step, seconds of each phase summed over actors, divided by the steps: reset (per episode, spread over its
  steps), decide (= wait for the learner's queue + adapter sync + generate + scoring the answers), verify (the
  executed action), step (the environment's step: act + observe + its checker), act, observe, settle, record;
  with several actors these overlap in wall time, so a phase's share of one actor's time is what they show;
- learn: the learner's share of wall time in updates, updates/s, seconds per update;
- propagation: "adapter vN written" to "every actor acting with vN" (the end of each actor's first decision made
  with vN or newer), median over the versions of the run (v0, the start, left out), and its load part.

Medians over ``runs`` runs. Writes ``bench/results/online_throughput.json`` and prints a table.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from pathlib import Path
from typing import Any

from bench.online.common import force_first_answer, tiny_config

log = logging.getLogger(__name__)

PHASES = ("reset", "decide", "wait", "adapter_sync", "generate", "score", "verify", "step", "act", "observe",
          "settle", "record")


def one_run(devices: int, seconds: float, work: Path, run: int) -> dict[str, Any]:
    from agent.online import OnlineConfig, OnlineSession
    from envs.trajectory import iter_episodes

    run_dir = work / f"d{devices}-r{run}"
    cfg = tiny_config(str(run_dir), f"train.seed={run}")
    holder: list[Any] = []
    session = OnlineSession(cfg, OnlineConfig(env="generated/click", actors=devices, max_wall_s=seconds,
                                              torch_threads=1, progress_every_s=1e9, report=False),
                            logits_processor_factory=lambda r: force_first_answer(holder[0])(r))
    holder.append(session)
    t0 = time.perf_counter()
    result = asyncio.run(session.run())
    total_s = time.perf_counter() - t0
    steps = sum(len(e.steps) for e in iter_episodes(run_dir))
    per_step = {p: result.timings.get(p, 0.0) / steps for p in PHASES} if steps else {}
    # versions the actors loaded (a version superseded before any actor asked for it is skipped, not measured)
    props = [v for v in result.versions
             if v["step"] >= 1 and v["propagation_s"] is not None and v["load_delay_s"] is not None]
    skipped = sum(1 for v in result.versions if v["step"] >= 1 and v["loaded_at"] is None)
    return {
        "devices": devices, "run": run, "wall_s": result.wall_s, "total_s": total_s, "steps": steps,
        "episodes": result.episodes, "steps_per_s": steps / result.wall_s if result.wall_s else 0.0,
        "per_step_s": per_step, "updates": result.updates, "learn_s": result.learn_s,
        "learn_share": result.learn_s / result.wall_s if result.wall_s else 0.0,
        "s_per_update": result.learn_s / result.updates if result.updates else None,
        "versions_reached": len(props), "versions_skipped": skipped,
        "propagation_s": statistics.median(v["propagation_s"] for v in props) if props else None,
        "propagation_max_s": max(v["propagation_s"] for v in props) if props else None,
        "load_delay_s": statistics.median(v["load_delay_s"] for v in props) if props else None,
        "load_s": statistics.median(v["load_s"] for v in props) if props else None,
        "stale_dropped": result.stale_dropped, "samples": result.samples,
    }


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for d in sorted({r["devices"] for r in runs}):
        rs = [r for r in runs if r["devices"] == d]

        def med(key: str) -> float | None:
            vals = [r[key] for r in rs if r[key] is not None]
            return statistics.median(vals) if vals else None

        out.append({
            "devices": d, "runs": len(rs), "steps_per_s": med("steps_per_s"),
            "steps_per_s_all": [round(r["steps_per_s"], 3) for r in rs],
            "per_step_ms": {p: 1000 * statistics.median(r["per_step_s"].get(p, 0.0) for r in rs) for p in PHASES},
            "learn_share": med("learn_share"), "s_per_update": med("s_per_update"),
            "updates_per_min": statistics.median(60 * r["updates"] / r["wall_s"] for r in rs if r["wall_s"]),
            "propagation_s": med("propagation_s"), "propagation_max_s": max(
                (r["propagation_max_s"] for r in rs if r["propagation_max_s"] is not None), default=None),
            "load_delay_s": med("load_delay_s"), "load_s": med("load_s"),
            "versions_measured": sum(r["versions_reached"] for r in rs),
            "versions_skipped": sum(r["versions_skipped"] for r in rs),
        })
    return out


def table(summary: list[dict[str, Any]]) -> str:
    cols = ("generate", "score", "wait", "adapter_sync", "reset", "verify", "act", "observe", "record")
    head = ("| actors | steps/s | decide ms | " + " | ".join(f"{c} ms" for c in cols)
            + " | learner busy | s/update | vN to all actors s (median, max) | load s |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for s in summary:
        ms = s["per_step_ms"]
        prop = "-" if s["propagation_s"] is None else f"{s['propagation_s']:.2f}, {s['propagation_max_s']:.2f}"
        lines.append(
            f"| {s['devices']} | {s['steps_per_s']:.2f} | {ms['decide']:.0f} | "
            + " | ".join(f"{ms[c]:.0f}" for c in cols)
            + f" | {s['learn_share']:.0%} | {s['s_per_update'] or 0:.2f} | {prop} | "
            f"{(s['load_s'] or 0):.3f} |")
    return "\n".join(lines)


def main(devices: list[int], runs: int, seconds: float, work: Path, out: Path) -> dict[str, Any]:
    results = []
    for r in range(runs):  # interleaved, so that drift in the machine's load hits every actor count alike
        for d in devices:
            res = one_run(d, seconds, work, r)
            log.info("%d actors, run %d: %.2f steps/s, %d updates, propagation %s s", d, r, res["steps_per_s"],
                     res["updates"], None if res["propagation_s"] is None else round(res["propagation_s"], 2))
            results.append(res)
    summary = summarize(results)
    return {"runs": results, "summary": summary, "table": table(summary), "seconds_per_run": seconds}

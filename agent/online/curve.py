"""The learning curve of an online run: success rate over wall time from ``online.jsonl``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envs.records import Outcome


def curve_points(rows: Sequence[dict[str, Any]], bins: int = 10) -> list[dict[str, float]]:
    """Success rate over wall time: episodes grouped into ``bins`` equal stretches of wall time, each with its
    Wilson 95% interval (aborted and interrupted episodes left out)."""
    from agent.eval import wilson_interval

    rows = [r for r in rows if r.get("outcome") not in (Outcome.ABORTED.value, Outcome.INTERRUPTED.value)]
    if not rows:
        return []
    end = max(float(r["t"]) for r in rows) or 1.0
    out = []
    for b in range(bins):
        lo, hi = end * b / bins, end * (b + 1) / bins
        part = [r for r in rows if lo <= float(r["t"]) < hi or (b == bins - 1 and float(r["t"]) == hi)]
        if not part:
            continue
        wins = sum(r["outcome"] == Outcome.SUCCESS.value for r in part)
        ci = wilson_interval(wins, len(part))
        out.append({"t_mid": (lo + hi) / 2, "episodes": len(part), "successes": wins,
                    "success_rate": wins / len(part), "ci_low": ci[0], "ci_high": ci[1],
                    "episodes_total": len(rows) if b == bins - 1 else sum(1 for r in rows if float(r["t"]) < hi)})
    return out


def plot_online_curve(jsonl: Path, png: Path, bins: int = 10) -> Path:
    """Draw success rate over wall time (with 95% intervals) from ``online.jsonl``. A run with no finished episode
    to show (none yet, or only aborted and interrupted ones) still gets its figure, saying so."""
    rows = []
    lines = jsonl.read_text(encoding="utf-8").splitlines() if jsonl.is_file() else []
    for line in lines:
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    points = curve_points(rows, bins)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    xs = [p["t_mid"] / 60 for p in points]
    ax.plot(xs, [p["success_rate"] for p in points], marker="o")
    ax.fill_between(xs, [p["ci_low"] for p in points], [p["ci_high"] for p in points], alpha=0.2)
    ax.set_xlabel("wall time (min)")
    ax.set_ylabel("success rate")
    ax.set_ylim(0, 1)
    if not points:
        ax.text(0.5, 0.5, "no finished episode to show\n(aborted and interrupted ones are left out)",
                ha="center", va="center", transform=ax.transAxes)
    ax.set_title(f"online: {len(rows)} episodes")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return png

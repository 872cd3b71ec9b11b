"""What an online session did (``OnlineResult``) and the episode statistics its monitor keeps."""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import statistics
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envs.records import Outcome
from train.messages import EpisodeMessage


@dataclass
class OnlineResult:
    """What a session did."""

    run_dir: Path
    updates: int = 0
    episodes: int = 0
    successes: int = 0
    steps: int = 0
    wall_s: float = 0.0
    """From the first actor step to the stop."""
    stopped_by: str = ""
    """learner-done, max-episodes, max-wall, interrupted, learner-error, or error (every actor dropped; an
    environment without a step verifier under step-level groups)."""
    samples: int = 0
    """Samples the learner received."""
    stale_dropped: int = 0
    no_signal: int = 0
    """Groups the learner dropped because every answer scored the same (nothing to learn from)."""
    restarts: int = 0
    dropped_actors: list[str] = field(default_factory=list)
    refused_adapters: int = 0
    versions: list[dict[str, Any]] = field(default_factory=list)
    """Per published version: written_at, loaded_at, all_acting_at, propagation_s, verify_s, load_s."""
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds per phase, summed over all actors' episodes."""
    learn_s: float = 0.0
    """Seconds the learner spent in updates."""
    checkpoint: Path | None = None
    report: Path | None = None
    error: str | None = None

    @property
    def success_rate(self) -> float:
        return self.successes / self.episodes if self.episodes else 0.0

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.wall_s if self.wall_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["run_dir"] = str(self.run_dir)
        out["checkpoint"] = str(self.checkpoint) if self.checkpoint else None
        out["report"] = str(self.report) if self.report else None
        out["success_rate"] = self.success_rate
        out["steps_per_s"] = self.steps_per_s
        return out


@dataclass
class EpisodeStats:
    """Episode outcomes as they arrive (the monitor's view), for the progress line, metrics and the curve."""

    episodes: int = 0
    successes: int = 0
    steps: int = 0
    outcomes: collections.Counter = field(default_factory=collections.Counter)
    recent: collections.deque = field(default_factory=lambda: collections.deque(maxlen=50))
    """The last 50 decided episodes' success (the progress line's rate)."""
    rewards: collections.deque = field(default_factory=lambda: collections.deque(maxlen=50))
    timings: dict[str, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, m: EpisodeMessage) -> None:
        with self.lock:
            self.episodes += 1
            self.steps += m.steps
            self.outcomes[m.outcome] += 1
            if m.outcome not in (Outcome.ABORTED.value, Outcome.INTERRUPTED.value):
                ok = m.outcome == Outcome.SUCCESS.value
                self.successes += ok
                self.recent.append(ok)
                self.rewards.append(m.reward or 0.0)
            for k, v in m.timings.items():
                self.timings[k] = self.timings.get(k, 0.0) + v

    def snapshot(self) -> dict[str, float]:
        with self.lock:
            return {"episodes": self.episodes, "successes": self.successes, "steps": self.steps,
                    "success_rate": sum(self.recent) / len(self.recent) if self.recent else math.nan,
                    "reward_mean": statistics.fmean(self.rewards) if self.rewards else math.nan}


def finite(x: float) -> float | None:
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None


def previous_curve(path: Path) -> tuple[float, int]:
    """(wall time, episodes) where the earlier sessions of this run left the curve."""
    last, episodes = 0.0, 0
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
                last, episodes = max(last, float(row["t"])), max(episodes, int(row["episode"]))
            except (ValueError, KeyError, TypeError):
                continue
    return last, episodes

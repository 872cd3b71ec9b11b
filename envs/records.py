"""Episode and step records: what every run writes and what training reads (docs/trajectories.md)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import Any

from envs.errors import RecordFormatError

FORMAT_VERSION = 1


class Outcome(str, Enum):
    """How an episode ended."""

    SUCCESS = "success"
    """A checker verified the task."""
    CLAIMED = "claimed"
    """The policy said it finished and no checker exists."""
    FAILURE = "failure"
    """A checker said the task was not done."""
    INFEASIBLE = "infeasible"
    """The policy declared the task impossible."""
    TRUNCATED = "truncated"
    """The step budget ran out."""
    ABORTED = "aborted"
    """An error stopped the episode (``reason`` has its type and message)."""
    INTERRUPTED = "interrupted"
    """The run was asked to stop: Ctrl-C, SIGTERM or SIGHUP (or its task was cancelled)."""
    PLANNED = "planned"
    """A dry run ended: the policy said it finished, and its steps are the plan (none was performed, no checker ran)."""


class Actor(str, Enum):
    POLICY = "policy"
    HUMAN = "human"


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One line of steps.jsonl. Sizes are (width, height) in pixels; boxes are normalized frames."""

    step_id: str
    """Stable id: "<run_id>/<episode_id>/<index>"; training samples point back to it."""
    index: int
    started_at: float
    ended_at: float
    frame_path: str
    """Relative to the episode folder."""
    frame_size: tuple[int, int]
    model_input_size: tuple[int, int]
    """The image size the policy's model saw (after its own resizing)."""
    action: dict[str, Any] | None
    """Action.to_dict(), typed text masked when it went into a password field; None if nothing parsed."""
    executed: bool
    """False for parse failures, refused or dry-run actions, and finish / infeasible."""
    raw_output: str = ""
    parse_error: str | None = None
    candidates: tuple[dict[str, Any], ...] = ()
    target_box: tuple[float, float, float, float] | None = None
    """Box of the element under the action's point, where the device can tell."""
    target: dict[str, Any] | None = None
    guard: dict[str, Any] | None = None
    reward: float | None = None
    verifier: dict[str, Any] | None = None
    latency: dict[str, float] = field(default_factory=dict)
    settled: bool | None = None
    error: dict[str, str] | None = None
    sensitive: bool = False
    info: dict[str, Any] = field(default_factory=dict)

    def to_json_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["frame_size"] = list(self.frame_size)
        out["model_input_size"] = list(self.model_input_size)
        out["candidates"] = list(self.candidates)
        out["target_box"] = list(self.target_box) if self.target_box is not None else None
        return out

    @classmethod
    def from_json_dict(cls, data: dict[str, Any], where: str = "") -> StepRecord:
        known = {f.name for f in fields(cls)}
        try:
            kwargs = {k: v for k, v in data.items() if k in known}
            kwargs["frame_size"] = _size(kwargs["frame_size"])
            kwargs["model_input_size"] = _size(kwargs["model_input_size"])
            kwargs["candidates"] = tuple(kwargs.get("candidates") or ())
            if kwargs.get("target_box") is not None:
                kwargs["target_box"] = tuple(float(v) for v in kwargs["target_box"])
            return cls(**kwargs)
        except (KeyError, TypeError, ValueError) as e:
            raise RecordFormatError(f"{where}: not a step record ({type(e).__name__}: {e})") from e


@dataclass(frozen=True, slots=True)
class EpisodeRecord:
    """episode.json. Written when the episode starts (outcome None) and rewritten when it ends; an episode without
    an outcome is running or crashed (``envs.trajectory.EpisodeState`` tells which)."""

    episode_id: str
    run_id: str
    task: str
    started_at: float
    env: dict[str, Any] | None = None
    device: dict[str, Any] = field(default_factory=dict)
    policy: dict[str, Any] = field(default_factory=dict)
    actor: Actor = Actor.POLICY
    outcome: Outcome | None = None
    reason: dict[str, str] | None = None
    """For aborted episodes: {"type": error class, "message": what happened}; for others a short note."""
    answer: str | None = None
    return_: float | None = None
    num_steps: int = 0
    ended_at: float | None = None
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds spent per phase over the episode: observe, decide, guard, act, settle, record, verify."""
    verifier: dict[str, Any] | None = None
    dry_run: bool = False
    format_version: int = FORMAT_VERSION

    def to_json_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["return"] = out.pop("return_")
        out["actor"] = self.actor.value
        out["outcome"] = self.outcome.value if self.outcome is not None else None
        return out

    @classmethod
    def from_json_dict(cls, data: dict[str, Any], where: str = "") -> EpisodeRecord:
        try:
            version = data.get("format_version")
            if version != FORMAT_VERSION:
                raise ValueError(f"format_version {version!r}, this handeye reads {FORMAT_VERSION}")
            kwargs = {k: v for k, v in data.items() if k in {f.name for f in fields(cls)}}
            kwargs["return_"] = data.get("return")
            kwargs["actor"] = Actor(data.get("actor", "policy"))
            kwargs["outcome"] = Outcome(data["outcome"]) if data.get("outcome") is not None else None
            return cls(**kwargs)
        except (KeyError, TypeError, ValueError) as e:
            raise RecordFormatError(f"{where}: not an episode record ({e})") from e


def _size(value: Any) -> tuple[int, int]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ValueError(f"a size must be [width, height], got {value!r}")
    w, h = int(value[0]), int(value[1])
    if w <= 0 or h <= 0:
        raise ValueError(f"a size must be positive, got {value!r}")
    return w, h


def json_safe(value: Any) -> Any:
    """Replace NaN and infinities (which JSON cannot hold) by None, recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    return value

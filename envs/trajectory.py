"""Writing and reading trajectories on disk.

    runs/<run_id>/run.json                   resolved config, versions, start time
    runs/<run_id>/<episode_id>/episode.json  the EpisodeRecord (rewritten atomically when it changes)
    runs/<run_id>/<episode_id>/steps.jsonl   one StepRecord per line, appended and flushed per step
    runs/<run_id>/<episode_id>/frames/NNNN.png

Steps are append-only and flushed after every step, so a crash loses at most the step in flight.
The frame is written before its step line, so every line that exists points at a frame that does.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from devices.base import Observation
from devices.frames import blur_boxes, decode, encode
from envs.errors import RecordError, RecordFormatError
from envs.records import FORMAT_VERSION, EpisodeRecord, Outcome, StepRecord, json_safe

log = logging.getLogger(__name__)

FRAME_FORMATS = ("png", "jpeg")


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def _dump(data: Any) -> str:
    return json.dumps(json_safe(data), ensure_ascii=False, allow_nan=False)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        raise RecordError(f"could not write {path}: {e.strerror or e}") from e


def check_writable(runs_dir: Path) -> None:
    """Make sure trajectories can be written under ``runs_dir``, or say what to do."""
    try:
        runs_dir.mkdir(parents=True, exist_ok=True)
        probe = runs_dir / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise RecordError(
            f"cannot write trajectories to {runs_dir}: {e.strerror or e}; "
            "choose a writable folder with --runs-dir DIR or --set record.runs_dir=DIR"
        ) from e


class RunWriter:
    """One run folder: ``run.json`` and any number of episodes."""

    def __init__(self, runs_dir: str | Path, config: dict[str, Any], run_id: str | None = None,
                 frame_format: str = "png", fsync: bool = False) -> None:
        if frame_format not in FRAME_FORMATS:
            raise ValueError(f"record.frame_format={frame_format!r} must be one of {FRAME_FORMATS}")
        self.runs_dir = Path(runs_dir)
        check_writable(self.runs_dir)
        self.run_id = run_id or new_run_id()
        self.path = self.runs_dir / self.run_id
        try:
            self.path.mkdir(parents=True, exist_ok=False)
        except FileExistsError:
            raise RecordError(f"run folder {self.path} already exists; pick another run id") from None
        except OSError as e:
            raise RecordError(f"could not create {self.path}: {e.strerror or e}") from e
        self.frame_format = frame_format
        self.fsync = fsync
        self._episodes = 0
        _write_atomic(
            self.path / "run.json",
            _dump({"run_id": self.run_id, "started_at": time.time(), "format_version": FORMAT_VERSION, **config}),
        )

    @classmethod
    def reopen(cls, path: str | Path, frame_format: str = "png", fsync: bool = False) -> RunWriter:
        """An existing run folder, continued (a resumed session): ``run.json`` is kept and new episodes are
        numbered after the ones already there."""
        path = Path(path)
        if not (path / "run.json").is_file():
            raise RecordError(f"{path} is not a run folder (no run.json); pass the folder of an earlier run")
        if frame_format not in FRAME_FORMATS:
            raise ValueError(f"record.frame_format={frame_format!r} must be one of {FRAME_FORMATS}")
        run = cls.__new__(cls)
        run.runs_dir, run.run_id, run.path = path.parent, path.name, path
        run.frame_format, run.fsync = frame_format, fsync
        existing = [int(p.name[2:]) for p in path.glob("ep*") if p.name[2:].isdigit()]
        run._episodes = max(existing) + 1 if existing else 0
        return run

    def episode(self, record: EpisodeRecord | None = None, **fields: Any) -> EpisodeWriter:
        episode_id = f"ep{self._episodes:04d}"
        self._episodes += 1
        if record is None:
            record = EpisodeRecord(episode_id=episode_id, run_id=self.run_id, started_at=time.time(), **fields)
        else:
            record = replace(record, episode_id=episode_id, run_id=self.run_id)
        return EpisodeWriter(self.path / episode_id, record, self.frame_format, self.fsync)


class EpisodeWriter:
    """Appends steps of one episode; ``finish`` writes the outcome."""

    def __init__(self, path: Path, record: EpisodeRecord, frame_format: str = "png", fsync: bool = False) -> None:
        self.path = path
        self.record = record
        self.frame_format = frame_format
        self.fsync = fsync
        self.num_steps = 0
        try:
            (path / "frames").mkdir(parents=True)
            self._steps = open(path / "steps.jsonl", "a", encoding="utf-8")
        except OSError as e:
            raise RecordError(f"could not create the episode folder {path}: {e.strerror or e}") from e
        self._write_episode()

    @property
    def episode_id(self) -> str:
        return self.record.episode_id

    def step_id(self, index: int) -> str:
        return f"{self.record.run_id}/{self.record.episode_id}/{index}"

    def _write_episode(self) -> None:
        _write_atomic(self.path / "episode.json", _dump(self.record.to_json_dict()) + "\n")

    def update(self, **changes: Any) -> None:
        """Change fields of the episode record (device facts known after start, say) and rewrite it."""
        self.record = replace(self.record, **changes)
        self._write_episode()

    def write_frame(self, index: int, obs: Observation) -> str:
        """Store the observation's frame (password fields blurred); returns its path in the episode."""
        ext = "png" if self.frame_format == "png" else "jpg"
        rel = f"frames/{index:04d}.{ext}"
        if obs.sensitive_boxes:
            w, h = obs.size
            frame = blur_boxes(obs.frame, [b.to_pixels(w, h) for b in obs.sensitive_boxes])
            data = encode(frame, self.frame_format)
        elif obs.encoded is not None and obs.encoding == self.frame_format:
            data = obs.encoded  # already encoded by the device: store the exact bytes the policy decoded
        else:
            data = encode(obs.frame, self.frame_format)
        try:
            with open(self.path / rel, "wb") as f:
                f.write(data)
                if self.fsync:
                    f.flush()
                    os.fsync(f.fileno())
        except OSError as e:
            raise RecordError(f"could not write frame {self.path / rel}: {e.strerror or e}") from e
        return rel

    def write_step(self, step: StepRecord) -> None:
        try:
            self._steps.write(_dump(step.to_json_dict()) + "\n")
            self._steps.flush()
            if self.fsync:
                os.fsync(self._steps.fileno())
        except (OSError, ValueError) as e:
            raise RecordError(f"could not append to {self.path / 'steps.jsonl'}: {e}") from e
        self.num_steps += 1

    def finish(self, outcome: Outcome, **changes: Any) -> EpisodeRecord:
        self.record = replace(self.record, outcome=outcome, ended_at=time.time(), num_steps=self.num_steps, **changes)
        self._write_episode()
        self.close()
        return self.record

    def close(self) -> None:
        if not self._steps.closed:
            self._steps.close()


# -- reading ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Episode:
    path: Path
    record: EpisodeRecord
    steps: tuple[StepRecord, ...]
    truncated_tail: bool = False
    """True when the last line of steps.jsonl was cut off (the process died while writing it)."""

    @property
    def finished(self) -> bool:
        return self.record.outcome is not None

    def frame(self, step: StepRecord) -> np.ndarray:
        """The step's stored frame as RGB uint8."""
        path = self.path / step.frame_path
        try:
            return decode(path.read_bytes())
        except OSError as e:
            raise RecordFormatError(f"frame {path} of step {step.step_id} cannot be read: {e.strerror or e}") from e


def read_episode(path: str | Path) -> Episode:
    """Read one episode folder. A cut-off last line is skipped (it was the step in flight)."""
    path = Path(path)
    ep_file = path / "episode.json"
    try:
        record = EpisodeRecord.from_json_dict(json.loads(ep_file.read_text(encoding="utf-8")), str(ep_file))
    except FileNotFoundError:
        raise RecordFormatError(f"{path} is not an episode folder: it has no episode.json") from None
    except json.JSONDecodeError as e:
        raise RecordFormatError(f"{ep_file} is not valid JSON: {e}") from e
    steps: list[StepRecord] = []
    truncated = False
    steps_file = path / "steps.jsonl"
    lines = steps_file.read_text(encoding="utf-8").split("\n") if steps_file.exists() else []
    if lines and lines[-1] == "":
        lines.pop()
    for n, line in enumerate(lines, 1):
        try:
            data = json.loads(line)
        except json.JSONDecodeError as e:
            if n == len(lines):
                log.warning("%s: last line is cut off (the step in flight when the process died); skipped", steps_file)
                truncated = True
                break
            raise RecordFormatError(f"{steps_file}:{n} is not valid JSON: {e}") from e
        steps.append(StepRecord.from_json_dict(data, f"{steps_file}:{n}"))
    return Episode(path, record, tuple(steps), truncated)


def iter_episodes(run_dir: str | Path) -> Iterator[Episode]:
    """Every episode of a run folder, in order."""
    run_dir = Path(run_dir)
    if not (run_dir / "run.json").exists():
        raise RecordFormatError(f"{run_dir} is not a run folder: it has no run.json")
    for child in sorted(run_dir.iterdir()):
        if child.is_dir() and (child / "episode.json").exists():
            yield read_episode(child)

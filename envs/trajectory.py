"""Writing and reading trajectories on disk.

    runs/<run_id>/run.json                   resolved config, versions, start time
    runs/<run_id>/<episode_id>/episode.json  the EpisodeRecord (rewritten atomically when it changes)
    runs/<run_id>/<episode_id>/steps.jsonl   one StepRecord per line, appended and flushed per step
    runs/<run_id>/<episode_id>/frames/NNNN.png
    runs/<run_id>/<episode_id>/writing.lock  locked by the writer while the episode is open

Steps are append-only and flushed after every step, so a crash loses at most the step in flight.
The frame is written before its step line, so every line that exists points at a frame that does.
With ``fsync`` (the default) each frame, its folder and each line reach the disk before the next step, and
every folder is fsynced after a file is created or renamed in it, so that holds after a power loss too.

An open episode's writer holds an ``flock`` on ``writing.lock``; the OS releases it when the process
ends, however it ends. A reader that finds no outcome tells a running episode (the lock is held) from a
crashed one (nobody holds it): ``Episode.state``. The lock file is removed when the episode finishes.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import IO, Any

import numpy as np

from devices.base import Observation
from devices.errors import DeviceError
from devices.files import confined, read_regular
from devices.frames import blur_boxes, decode, encode
from envs.errors import RecordError, RecordFormatError
from envs.records import FORMAT_VERSION, EpisodeRecord, Outcome, StepRecord, json_safe

log = logging.getLogger(__name__)

FRAME_FORMATS = ("png", "jpeg")
MAX_FRAME_BYTES = 64 * 1024 * 1024
"""The largest stored frame read (a 4K PNG screenshot is a few MB)."""
LOCK_FILE = "writing.lock"
"""In the episode folder: its writer holds an exclusive ``flock`` on it while the episode is open."""


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def _dump(data: Any) -> str:
    return json.dumps(json_safe(data), ensure_ascii=False, allow_nan=False)


def fsync_dir(path: Path) -> None:
    """Make the entries of folder ``path`` (files created, renamed or removed in it) durable.

    A file's own fsync does not cover its name in the folder: after a power loss, a file created or renamed
    since the folder's last fsync may be missing or carry its old content. Filesystems that cannot fsync a
    folder (EINVAL, ENOTSUP) are skipped: there is nothing more to do on them."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        if e.errno in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
            return
        raise RecordError(f"could not fsync the folder {path}: {e.strerror or e}") from e


def _write_atomic(path: Path, text: str, fsync_folder: bool = True) -> None:
    """Write, fsync, rename over ``path``; then fsync the folder so that the rename itself is durable."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        raise RecordError(f"could not write {path}: {e.strerror or e}") from e
    if fsync_folder:
        fsync_dir(path.parent)


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
    """One run folder: ``run.json`` and any number of episodes.

    ``fsync`` (default on; ``record.fsync``): every frame, step line and folder entry reaches the disk before the
    next step (about 1 ms per step; docs/benchmarks.md). Off, a crash of the process still loses at most
    the step in flight, but a power loss may lose the last seconds of steps."""

    def __init__(self, runs_dir: str | Path, config: dict[str, Any], run_id: str | None = None,
                 frame_format: str = "png", fsync: bool = True) -> None:
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
            fsync_folder=fsync,
        )
        if fsync:
            fsync_dir(self.runs_dir)  # the run folder's own name

    @classmethod
    def reopen(cls, path: str | Path, frame_format: str = "png", fsync: bool = True) -> RunWriter:
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
    """Appends steps of one episode; ``finish`` writes the outcome.

    From creation to ``finish`` (or ``close``) it holds an exclusive ``flock`` on ``writing.lock``, which tells
    readers the episode is running; the OS drops the lock when the process dies (``Episode.state``)."""

    def __init__(self, path: Path, record: EpisodeRecord, frame_format: str = "png", fsync: bool = True) -> None:
        self.path = path
        self.record = record
        self.frame_format = frame_format
        self.fsync = fsync
        self.num_steps = 0
        try:
            path.mkdir(parents=True)
            self._lock: IO[bytes] | None = _hold_lock(path / LOCK_FILE)
            (path / "frames").mkdir()
            self._steps = open(path / "steps.jsonl", "a", encoding="utf-8")
        except OSError as e:
            raise RecordError(f"could not create the episode folder {path}: {e.strerror or e}") from e
        self._write_episode()  # with fsync, also makes the lock file, frames/ and steps.jsonl durable
        if fsync:
            fsync_dir(path.parent)  # the episode folder's own name

    @property
    def episode_id(self) -> str:
        return self.record.episode_id

    def step_id(self, index: int) -> str:
        return f"{self.record.run_id}/{self.record.episode_id}/{index}"

    def _write_episode(self) -> None:
        _write_atomic(self.path / "episode.json", _dump(self.record.to_json_dict()) + "\n", fsync_folder=self.fsync)

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
        if self.fsync:
            fsync_dir(self.path / "frames")  # the frame's name, before any line can point at it
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
        self.close(finished=True)
        return self.record

    def close(self, finished: bool = False) -> None:
        """Close the steps file and release the lock. ``finished`` (after the outcome is on disk): the lock file
        is removed too, so a finished episode's folder holds just what earlier versions wrote. Closed without an
        outcome, the episode reads as crashed."""
        if not self._steps.closed:
            self._steps.close()
        if finished:
            try:
                (self.path / LOCK_FILE).unlink(missing_ok=True)
            except OSError as e:  # a leftover lock file is harmless: the outcome is on disk
                log.debug("could not remove %s: %s", self.path / LOCK_FILE, e)
        if self._lock is not None:
            self._lock.close()  # releases the flock
            self._lock = None


def _hold_lock(path: Path) -> IO[bytes] | None:
    """Create ``path`` and hold an exclusive ``flock`` on it until the returned file is closed (or the process
    ends). A filesystem without locks gets a warning and no lock: its running episodes read as crashed."""
    f = open(path, "wb")  # not inherited by child processes (PEP 446): a surviving browser does not keep it locked
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
    except OSError as e:
        log.warning("cannot lock %s (%s): while it runs, this episode will read as crashed", path, e.strerror or e)
        f.close()
        return None
    return f


# -- reading ------------------------------------------------------------------------------------------------------
class EpisodeState(str, Enum):
    """Where an episode stands, as a reader sees it."""

    FINISHED = "finished"
    """It has an outcome."""
    RUNNING = "running"
    """No outcome yet, and its writer holds ``writing.lock``: a live process is still writing it."""
    CRASHED = "crashed"
    """No outcome, and nobody holds the lock: the process writing it died (killed, power loss, a bug that
    skipped the runner). Episodes written before the lock file existed read so too when they have no outcome."""


@dataclass(frozen=True, slots=True)
class Episode:
    path: Path
    record: EpisodeRecord
    steps: tuple[StepRecord, ...]
    state: EpisodeState
    truncated_tail: bool = False
    """True when the last line of steps.jsonl was cut off (the process died while writing it, or, while the
    episode runs, the line is being written)."""

    @property
    def finished(self) -> bool:
        return self.record.outcome is not None

    def frame_file(self, step: StepRecord) -> Path:
        """The file of the step's ``frame_path``, under the episode's folder; RecordFormatError when the path is
        absolute, has ``..`` or leads out of the folder through a symlink (a record may come from anywhere)."""
        try:
            return confined(self.path, step.frame_path, f"step {step.step_id}'s frame_path")
        except ValueError as e:
            raise RecordFormatError(f"{self.path}: {e}; the step's frame is not read") from None

    def frame_bytes(self, step: StepRecord) -> bytes:
        """The step's stored frame as encoded (PNG or JPEG): a regular file under the episode's folder of at most
        ``MAX_FRAME_BYTES``; RecordFormatError saying why otherwise."""
        path = self.frame_file(step)
        try:
            return read_regular(path, MAX_FRAME_BYTES, "frame")
        except ValueError as e:
            raise RecordFormatError(f"frame of step {step.step_id}: {e}") from None
        except OSError as e:
            raise RecordFormatError(f"frame {path} of step {step.step_id} cannot be read: {e.strerror or e}") from e

    def frame(self, step: StepRecord) -> np.ndarray:
        """The step's stored frame as RGB uint8 (``frame_bytes``, decoded within ``MAX_IMAGE_PIXELS``)."""
        data = self.frame_bytes(step)
        try:
            return decode(data)
        except DeviceError as e:
            raise RecordFormatError(f"frame of step {step.step_id} in {self.path}: {e}") from None


def read_episode(path: str | Path) -> Episode:
    """Read one episode folder. A cut-off last line is skipped (it was the step in flight)."""
    path = Path(path)
    record = _read_record(path)
    state = EpisodeState.FINISHED
    if record.outcome is None and not writer_alive(path):
        record = _read_record(path)  # the writer may have finished between the two looks
        state = EpisodeState.FINISHED if record.outcome is not None else EpisodeState.CRASHED
    elif record.outcome is None:
        state = EpisodeState.RUNNING
    steps, truncated = _read_steps(path / "steps.jsonl")
    return Episode(path, record, steps, state, truncated)


def writer_alive(path: str | Path) -> bool:
    """Whether a live process holds the episode folder's ``writing.lock`` (False when there is none)."""
    try:
        fd = os.open(Path(path) / LOCK_FILE, os.O_RDONLY)
    except OSError:  # no lock file: finished, or written before lock files existed
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # never blocks, and never bothers another reader
    except BlockingIOError:
        return True
    except OSError as e:  # a filesystem without locks: its writers could not lock either
        log.debug("cannot probe %s: %s", Path(path) / LOCK_FILE, e)
        return False
    finally:
        os.close(fd)  # also drops the shared lock, if taken
    return False


def _read_record(path: Path) -> EpisodeRecord:
    ep_file = path / "episode.json"
    try:
        return EpisodeRecord.from_json_dict(json.loads(ep_file.read_bytes().decode("utf-8")), str(ep_file))
    except FileNotFoundError:
        raise RecordFormatError(f"{path} is not an episode folder: it has no episode.json") from None
    except UnicodeDecodeError as e:
        raise RecordFormatError(f"{ep_file} is not UTF-8 text: {e}") from e
    except json.JSONDecodeError as e:
        raise RecordFormatError(f"{ep_file} is not valid JSON: {e}") from e


def _read_steps(steps_file: Path) -> tuple[tuple[StepRecord, ...], bool]:
    """(the steps, whether the last line was cut off). Works on bytes: a line cut inside a multi-byte UTF-8
    character must not make the whole file unreadable. Each complete line is decoded on its own; the last line
    (with or without its newline) that does not decode or parse was the step in flight and is skipped; any other
    bad line is an error naming its number."""
    try:
        data = steps_file.read_bytes()
    except FileNotFoundError:
        return (), False
    except OSError as e:
        raise RecordFormatError(f"{steps_file} cannot be read: {e.strerror or e}") from e
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    steps: list[StepRecord] = []
    for n, line in enumerate(lines, 1):
        try:
            row = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            if n == len(lines):
                log.warning("%s: last line is cut off (the step in flight); skipped", steps_file)
                return tuple(steps), True
            raise RecordFormatError(f"{steps_file}:{n} is not valid JSON: {e}") from e
        steps.append(StepRecord.from_json_dict(row, f"{steps_file}:{n}"))
    return tuple(steps), False


def iter_episodes(run_dir: str | Path) -> Iterator[Episode]:
    """Every episode of a run folder, in order."""
    run_dir = Path(run_dir)
    if not (run_dir / "run.json").exists():
        raise RecordFormatError(f"{run_dir} is not a run folder: it has no run.json")
    for child in sorted(run_dir.iterdir()):
        if child.is_dir() and (child / "episode.json").exists():
            yield read_episode(child)

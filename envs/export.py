"""Trajectories out as datasets: ``agent data export RUN_DIR --format parquet|hf``.

Every recorded run (``agent run``, ``agent eval``, an online session's actors, ``agent record`` demonstrations) is
the same folder format (docs/trajectories.md), so one exporter serves them all. It writes one row per step that has
a stored frame, as a Parquet file or a Hugging Face ``datasets`` folder (``Dataset.save_to_disk``), with an image
column (the frame's bytes as stored, a ``datasets.Image``). Frames are read through ``Episode.frame_bytes``: a
regular file under the episode's folder, so a record whose ``frame_path`` names ``/etc/passwd`` or ``../../x``
exports nothing of it (the step is left out with a warning).

Columns: first GUI-R1's (``envs.action_bench.records``), so an export is read back as action records, as training
data (``data.source = "actions"``) or as an action benchmark (``agent eval --suite actions --benchmark ...``):

    image, instruction (the episode's task), history ("Step 1: <action>; ..." of the steps executed before it, or
    "None"), task_type ("high"), gt_action (the step's action in the benchmarks' names, ``mapping.from_action``;
    "" when nothing parsed), gt_bbox (the action's point [x, y], normalized; [-100, -100] without one),
    gt_input_text, group (the device: web, desktop or android)

then handeye's own: run_id, episode_id, step_id, step_index, env, actor (policy or human), outcome and
episode_return of the episode, action (``Action.to_dict`` as JSON), executed, raw_output, parse_error,
frame_width, frame_height, target_box ([x1, y1, x2, y2] normalized, or null), reward (the step reward, or null),
verifier (JSON), samples (the policy's sampled answers with token ids and log-probabilities, as JSON; "[]" when
the policy recorded none).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from devices.actions import Action
from devices.errors import InvalidAction
from envs.action_bench.mapping import from_action
from envs.errors import EnvError, RecordFormatError
from envs.trajectory import Episode, iter_episodes, read_episode

log = logging.getLogger(__name__)

__all__ = ["FORMATS", "export_run", "step_rows"]

FORMATS = ("parquet", "hf")
INSTALL_HINT = "pip install 'handeye[data]' (pyarrow, datasets)"


def _episodes(path: Path) -> list[Episode]:
    if (path / "episode.json").is_file():
        return [read_episode(path)]
    if (path / "run.json").is_file():
        return list(iter_episodes(path))
    raise EnvError(f"{path} is neither a run folder (run.json) nor an episode folder (episode.json)")


def _action(data: dict[str, Any] | None) -> Action | None:
    try:
        return Action.from_dict(data) if data else None
    except InvalidAction:
        return None


def step_rows(path: str | Path) -> Iterator[dict[str, Any]]:
    """One row per step with a frame of the run (or episode) folder ``path``, in order (see the module docstring)."""
    for episode in _episodes(Path(path)):
        rec = episode.record
        history: list[str] = []
        device = str(rec.device.get("name") or rec.device.get("kind") or "")
        for step in episode.steps:
            action = _action(step.action)
            mapped = from_action(action)
            if step.frame_path:
                try:
                    image = episode.frame_bytes(step)  # under the episode's folder, a regular file, bounded
                except RecordFormatError as e:
                    log.warning("step %s: %s; left out", step.step_id, e)
                else:
                    yield _row(episode, step, action, mapped, image, history, device)
            if step.executed and action is not None:
                history.append(f"Step {len(history) + 1}: {action.describe()}")


def _row(episode: Episode, step: Any, action: Action | None, mapped: Any, image: bytes, history: list[str],
         device: str) -> dict[str, Any]:
    rec = episode.record
    policy = step.info.get("policy") or {}
    return {
        "image": {"bytes": image, "path": f"{episode.path.name}/{step.frame_path}"},
        "instruction": rec.task, "history": "; ".join(history) or "None", "task_type": "high",
        "gt_action": mapped.action or "", "gt_bbox": list(mapped.point) if mapped.point else [-100.0, -100.0],
        "gt_input_text": mapped.text, "group": device,
        "run_id": rec.run_id, "episode_id": rec.episode_id, "step_id": step.step_id, "step_index": step.index,
        "env": str((rec.env or {}).get("name", "")), "actor": rec.actor.value,
        "outcome": rec.outcome.value if rec.outcome else "", "episode_return": rec.return_,
        "action": json.dumps(action.to_dict(), ensure_ascii=False) if action else "", "executed": step.executed,
        "raw_output": step.raw_output, "parse_error": step.parse_error or "",
        "frame_width": step.frame_size[0], "frame_height": step.frame_size[1],
        "target_box": list(step.target_box) if step.target_box is not None else None, "reward": step.reward,
        "verifier": json.dumps(step.verifier, ensure_ascii=False) if step.verifier else "",
        "samples": json.dumps(policy.get("samples", []), ensure_ascii=False),
    }


def _features() -> Any:
    import datasets

    text = datasets.Value("string")
    floats = datasets.Sequence(datasets.Value("float64"))
    return datasets.Features({
        "image": datasets.Image(), "instruction": text, "history": text, "task_type": text, "gt_action": text,
        "gt_bbox": floats, "gt_input_text": text, "group": text, "run_id": text, "episode_id": text,
        "step_id": text, "step_index": datasets.Value("int64"), "env": text, "actor": text, "outcome": text,
        "episode_return": datasets.Value("float64"), "action": text, "executed": datasets.Value("bool"),
        "raw_output": text, "parse_error": text, "frame_width": datasets.Value("int64"),
        "frame_height": datasets.Value("int64"), "target_box": floats, "reward": datasets.Value("float64"),
        "verifier": text, "samples": text,
    })


def export_run(path: str | Path, out: str | Path, fmt: str = "parquet") -> int:
    """Write the steps of ``path`` to ``out`` as ``fmt`` (parquet: one file; hf: a ``save_to_disk`` folder); the
    number of rows written. EnvError when the folder holds no step with a frame or the packages are missing."""
    if fmt not in FORMATS:
        raise EnvError(f"format {fmt!r} is not one of {', '.join(FORMATS)}")
    try:
        import datasets
    except ImportError as e:
        raise EnvError(f"exporting needs the datasets package ({e}); {INSTALL_HINT}") from e
    try:
        rows = list(step_rows(path))
    except RecordFormatError as e:
        raise EnvError(str(e)) from e
    if not rows:
        raise EnvError(f"{path} holds no recorded step with a frame to export")
    table = {key: [r[key] for r in rows] for key in rows[0]}
    data = datasets.Dataset.from_dict(table, features=_features())
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "parquet":
        data.to_parquet(str(out))
    else:
        data.save_to_disk(str(out))
    return len(rows)

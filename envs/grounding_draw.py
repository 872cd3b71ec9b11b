"""Draw grounding samples and recorded steps for a look by eye (``agent data show FILE_OR_RUN``).

Each PNG is the screenshot with the target box outlined in green (the outline's outer edge is the
box's pixel rectangle, ``Box.to_pixels``), prediction points as crosses (the first red, the others
orange) and a strip below the image with the sample id, element type and instruction. A box that sits
beside its element in every picture is the sign of a systematic offset (xywh read as xyxy, a wrong
image size).

A recorded run (an agent's or a demonstration, ``agent record``) is drawn step by step the same way
(``draw_run``): each step's stored frame with its ``target_box`` in green, the action's point as a red
cross (a drag's end in orange, joined by a line), and a strip with the step, its action and who acted.
"""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import cv2
import numpy as np

from devices.actions import Action
from devices.base import Box
from devices.errors import InvalidAction
from envs.errors import EnvError, RecordFormatError
from envs.grounding import GroundingSample, read_rgb
from envs.grounding_score import GroundingPrediction
from envs.records import StepRecord
from envs.trajectory import Episode, iter_episodes, read_episode

log = logging.getLogger(__name__)

BOX_RGB = (0, 255, 0)
FIRST_POINT_RGB = (255, 0, 0)
OTHER_POINT_RGB = (255, 160, 0)
STRIP_RGB = (32, 32, 32)


def draw_sample(sample: GroundingSample, prediction: GroundingPrediction | None = None,
                thickness: int = 2) -> np.ndarray:
    """The annotated picture of one sample, RGB uint8; the screenshot keeps its pixel coordinates
    (the text strip is added below it)."""
    try:
        image = read_rgb(sample.image_path)
    except EnvError as e:
        raise EnvError(f"sample {sample.id}: {e}") from None
    height, width = image.shape[:2]
    if sample.box is not None:
        left, top, right, bottom = sample.box.to_pixels(width, height)
        # to_pixels' right/bottom are exclusive; inset the stroke so the outline lies on the box's own pixels
        for k in range(thickness):
            cv2.rectangle(image, (left + k, top + k), (right - 1 - k, bottom - 1 - k), BOX_RGB, 1)
    if prediction is not None:
        size = max(6, min(width, height) // 60)
        for i, (x, y) in enumerate(prediction.points):
            colour = FIRST_POINT_RGB if i == 0 else OTHER_POINT_RGB
            cv2.drawMarker(image, (int(x * width), int(y * height)), colour, cv2.MARKER_CROSS, size * 2, 2)
    return _with_caption(image, sample, prediction)


def _with_caption(image: np.ndarray, sample: GroundingSample, prediction: GroundingPrediction | None) -> np.ndarray:
    kind = "NEGATIVE (target absent)" if sample.negative else sample.element_type or "?"
    text = f"{sample.id} [{sample.platform}/{sample.application} {kind}] {sample.instruction}"
    if prediction is not None:
        said = "parse error" if prediction.parse_error else "absent" if prediction.absent else len(prediction.points)
        text += f" | pred: {said}"
    return with_caption(image, text)


def with_caption(image: np.ndarray, text: str) -> np.ndarray:
    """``image`` with a dark strip below it holding ``text`` (up to four lines; non-ASCII shown as ``?``)."""
    width = image.shape[1]
    scale = max(0.35, min(1.0, width / 1600))
    line_h = int(22 * scale) + 6
    text = text.encode("ascii", "replace").decode()  # Hershey fonts draw ASCII only
    per_line = max(20, int(width / (11 * scale)))
    lines = [text[i:i + per_line] for i in range(0, len(text), per_line)][:4]
    strip = np.full((line_h * len(lines) + 6, width, 3), STRIP_RGB, dtype=np.uint8)
    for i, line in enumerate(lines):
        cv2.putText(strip, line, (4, line_h * (i + 1)), cv2.FONT_HERSHEY_SIMPLEX, scale, (255, 255, 255), 1,
                    cv2.LINE_AA)
    return np.concatenate([image, strip], axis=0)


def draw_samples(samples: Sequence[GroundingSample], out_dir: str | Path, n: int = 16, seed: int = 0,
                 predictions: Mapping[str, GroundingPrediction] | None = None) -> list[Path]:
    """Draw ``n`` samples chosen at random (reproducibly, by ``seed``) into ``out_dir`` as PNGs.

    Returns the written paths, in dataset order. A sample whose image cannot be read is skipped with
    a warning.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    chosen = sorted(random.Random(seed).sample(range(len(samples)), min(n, len(samples))))
    paths = []
    for index in chosen:
        sample = samples[index]
        prediction = predictions.get(sample.id) if predictions is not None else None
        try:
            picture = draw_sample(sample, prediction)
        except EnvError as e:
            log.warning("skipped drawing: %s", e)
            continue
        path = out / f"{index:05d}_{re.sub(r'[^A-Za-z0-9_.-]+', '_', sample.id)}.png"
        if not cv2.imwrite(str(path), cv2.cvtColor(picture, cv2.COLOR_RGB2BGR)):
            raise EnvError(f"could not write {path}; is {out} writable?")
        paths.append(path)
    return paths


# -- recorded runs ----------------------------------------------------------------------------------------------------
def _point(data: dict, key: str) -> tuple[float, float] | None:
    p = data.get(key)
    if isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(v, (int, float)) for v in p):
        return float(p[0]), float(p[1])
    return None


def draw_step(frame: np.ndarray, step: StepRecord, who: str = "", thickness: int = 2) -> np.ndarray:
    """One recorded step's frame with its target box, its action's point (and a drag's end), and a caption."""
    image = frame.copy()
    height, width = image.shape[:2]
    if step.target_box is not None:
        left, top, right, bottom = Box(*step.target_box).clipped().to_pixels(width, height)
        for k in range(thickness):
            cv2.rectangle(image, (left + k, top + k), (right - 1 - k, bottom - 1 - k), BOX_RGB, 1)
    action = step.action or {}
    size = max(6, min(width, height) // 60)
    start, end = _point(action, "point"), _point(action, "end")
    if start is not None and end is not None:
        cv2.line(image, (int(start[0] * width), int(start[1] * height)), (int(end[0] * width), int(end[1] * height)),
                 OTHER_POINT_RGB, 2)
        cv2.drawMarker(image, (int(end[0] * width), int(end[1] * height)), OTHER_POINT_RGB, cv2.MARKER_CROSS,
                       size * 2, 2)
    if start is not None:
        cv2.drawMarker(image, (int(start[0] * width), int(start[1] * height)), FIRST_POINT_RGB, cv2.MARKER_CROSS,
                       size * 2, 2)
    try:
        described = Action.from_dict(action).describe() if action else "(no action)"
    except InvalidAction:
        described = str(action)
    return with_caption(image, f"{step.step_id} [{who}] {described}")


def draw_run(path: str | Path, out_dir: str | Path) -> list[Path]:
    """Draw every step with a stored frame of the run folder (or the one episode folder) ``path`` into ``out_dir``
    (``<episode>_<step>.png``); returns the written paths. A frame that cannot be read is skipped with a warning."""
    path = Path(path)
    episodes: list[Episode] = [read_episode(path)] if (path / "episode.json").is_file() else list(iter_episodes(path))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for episode in episodes:
        who = "human" if episode.record.actor.value == "human" else "policy"
        for step in episode.steps:
            if not step.frame_path:
                continue
            try:
                picture = draw_step(episode.frame(step), step, who)
            except (RecordFormatError, ValueError) as e:
                log.warning("skipped drawing step %s: %s", step.step_id, e)
                continue
            target = out / f"{episode.path.name}_{step.index:04d}.png"
            if not cv2.imwrite(str(target), cv2.cvtColor(picture, cv2.COLOR_RGB2BGR)):
                raise EnvError(f"could not write {target}; is {out} writable?")
            paths.append(target)
    return paths

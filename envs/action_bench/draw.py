"""Drawing action records for a look by eye (``agent data show`` on an action benchmark, GUI-R1-style training
data or an exported run): the screenshot with the true point as a green cross inside its 0.14 GR ellipse, a four-
number ``gt_bbox`` as a green rectangle, and a strip with the record's id, action, text and instruction. A point
that sits beside its element in every picture shows a systematic offset (pixels read as normalized, a box read as
a point)."""

from __future__ import annotations

import logging
import random
import re
from pathlib import Path

import cv2
import numpy as np

from envs.action_bench.metrics import GR_RADIUS
from envs.action_bench.records import ActionDataset, ActionRecord, decode_image, iter_images
from envs.errors import EnvError
from envs.grounding_draw import BOX_RGB, with_caption

log = logging.getLogger(__name__)

__all__ = ["draw_action_record", "draw_actions"]


def draw_action_record(record: ActionRecord, image: np.ndarray) -> np.ndarray:
    """The annotated picture of one record on its decoded RGB ``image``."""
    picture = image.copy()
    h, w = picture.shape[:2]
    box = record.gt_box((w, h))
    if box is not None:
        cv2.rectangle(picture, (int(box[0] * w), int(box[1] * h)), (int(box[2] * w) - 1, int(box[3] * h) - 1),
                      BOX_RGB, 2)
    point = record.gt_point((w, h))
    if point is not None:
        centre = (int(point[0] * w), int(point[1] * h))
        cv2.ellipse(picture, centre, (int(GR_RADIUS * w), int(GR_RADIUS * h)), 0, 0, 360, BOX_RGB, 1)
        cv2.drawMarker(picture, centre, BOX_RGB, cv2.MARKER_CROSS, max(12, min(w, h) // 30), 2)
    text = record.gt_text if record.gt_text != "no input text" else ""
    return with_caption(picture, f"{record.id} {record.gt_action} {text} | {record.instruction}")


def draw_actions(dataset: ActionDataset, out_dir: str | Path, n: int = 16, seed: int = 0) -> list[Path]:
    """Draw ``n`` records chosen at random (reproducibly, by ``seed``) into ``out_dir``; the written paths. A record
    whose image cannot be read is skipped with a warning."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    records = dataset.records
    chosen = sorted(random.Random(seed).sample(range(len(records)), min(n, len(records))))
    paths = []
    for record, data in iter_images(dataset, [records[i] for i in chosen]):
        try:
            if data is None:
                raise EnvError("no image")
            picture = draw_action_record(record, decode_image(data))
        except EnvError as e:
            log.warning("skipped drawing %s: %s", record.id, e)
            continue
        path = out / f"{record.row:05d}_{re.sub(r'[^A-Za-z0-9_.-]+', '_', record.id)}.png"
        if not cv2.imwrite(str(path), cv2.cvtColor(picture, cv2.COLOR_RGB2BGR)):
            raise EnvError(f"could not write {path}; is {out} writable?")
        paths.append(path)
    return sorted(paths)

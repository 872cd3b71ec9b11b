"""Draw grounding samples for a look by eye (``agent data show FILE``).

Each PNG is the screenshot with the target box outlined in green (the outline's outer edge is the
box's pixel rectangle, ``Box.to_pixels``), prediction points as crosses (the first red, the others
orange) and a strip below the image with the sample id, element type and instruction. A box that sits
beside its element in every picture is the sign of a systematic offset (xywh read as xyxy, a wrong
image size).
"""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import cv2
import numpy as np

from envs.errors import EnvError
from envs.grounding import GroundingPrediction, GroundingSample, read_rgb

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
    width = image.shape[1]
    scale = max(0.35, min(1.0, width / 1600))
    line_h = int(22 * scale) + 6
    kind = "NEGATIVE (target absent)" if sample.negative else sample.element_type or "?"
    text = f"{sample.id} [{sample.platform}/{sample.application} {kind}] {sample.instruction}"
    if prediction is not None:
        said = "parse error" if prediction.parse_error else "absent" if prediction.absent else len(prediction.points)
        text += f" | pred: {said}"
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

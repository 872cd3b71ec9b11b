"""Small action-benchmark files in GUI-R1's released schema, built in code: a Parquet file (pyarrow, images as a
Hugging Face ``Image`` struct of bytes, boxes normalized) and the same records as JSONL with an image folder
(boxes in pixels), plus a scripted policy's answers whose Type / GR / SR the tests work out by hand."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np

W, H = 200, 100

#: (gt_action, gt_bbox normalized, gt_input_text, the scripted answer as an action dict)
STEPS = [
    ("click", [0.5, 0.5], "no input text", {"kind": "click", "point": [0.55, 0.5]}),
    ("click", [0.2, 0.2], "no input text", {"kind": "click", "point": [0.5, 0.5]}),
    ("long_press", [0.1, 0.9], "no input text", {"kind": "click", "point": [0.1, 0.9]}),
    ("type", [-100, -100], "hello world", {"kind": "type", "text": "hello there"}),
    ("scroll", [-100, -100], "down", {"kind": "scroll", "direction": "up"}),
    ("press_back", [-100, -100], "no input text", {"kind": "back"}),
    ("complete", [-100, -100], "no input text", {"kind": "finish"}),
    ("press_recent", [-100, -100], "no input text", {"kind": "home"}),
    ("impossible", [-100, -100], "no input text", {"kind": "infeasible", "text": "not on this screen"}),
    ("long_press", [0.5, 0.5], "no input text", {"kind": "drag", "point": [0.9, 0.9], "end": [0.1, 0.1]}),
]


def png(seed: int) -> bytes:
    """A W x H screenshot stand-in."""
    image = np.full((H, W, 3), 40 + 20 * seed, np.uint8)
    cv2.rectangle(image, (10 * seed, 10), (10 * seed + 30, 40), (255, 255, 255), -1)
    ok, data = cv2.imencode(".png", image)
    assert ok
    return data.tobytes()


def rows(pixels: bool = False) -> list[dict]:
    out = []
    for i, (action, bbox, text, _) in enumerate(STEPS):
        box = [v * (W if j % 2 == 0 else H) for j, v in enumerate(bbox)] if pixels and bbox[0] >= 0 else bbox
        if pixels and i == 0:
            box = [100, 50, 140, 70]  # a box: the released GR reference is its top-left corner, (100, 50)
        out.append({"instruction": f"step {i}", "history": "Step 1: [{'action': 'click'}]" if i else "None",
                    "task_type": "low", "gt_action": action, "gt_bbox": box, "gt_input_text": text})
    return out


def write_parquet(path: Path, extra: list[dict] | None = None) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = [{**r, "image": {"bytes": png(i), "path": f"{i}.png"}} for i, r in enumerate(rows())]
    records += extra or []
    pq.write_table(pa.Table.from_pylist(records), path)
    return path


def write_jsonl(folder: Path, name: str = "guiodyssey_test.jsonl") -> Path:
    (folder / "shots").mkdir(parents=True, exist_ok=True)
    lines = []
    for i, r in enumerate(rows(pixels=True)):
        (folder / "shots" / f"{i}.png").write_bytes(png(i))
        lines.append(json.dumps({**r, "image": f"shots/{i}.png"}))
    path = folder / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def script(folder: Path) -> Path:
    path = folder / "answers.json"
    path.write_text(json.dumps([answer for *_, answer in STEPS]), encoding="utf-8")
    return path

"""``agent data show`` on every data kind handeye reads (grounding files, training JSONL, action records as Parquet,
JSONL or an exported dataset folder, run folders) and ``agent data export``."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from agent.cli import main
from tests.conftest import REPO
from tests.support.action_files import H, W, write_jsonl, write_parquet

RUN = REPO / "tests" / "fixtures" / "run-v1"


def drawn(out: Path) -> list[np.ndarray]:
    return [cv2.imread(str(p)) for p in sorted(out.glob("*.png"))]


def test_show_action_records_draws_the_true_point(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = write_parquet(tmp_path / "guiodyssey_test.parquet")
    assert main(["data", "show", str(data), "-n", "3", "--out", str(tmp_path / "a")]) == 0
    assert "GUI-Odyssey, 10 records loaded, 0 rejected, gt_bbox in normalized" in capsys.readouterr().out
    pictures = drawn(tmp_path / "a")
    assert len(pictures) == 3 and all(p.shape[1] == W and p.shape[0] > H for p in pictures)  # caption strip below
    # JSONL with an image folder: the same records, in pixels
    assert main(["data", "show", str(write_jsonl(tmp_path / "j")), "-n", "2", "--out", str(tmp_path / "b")]) == 0
    assert "gt_bbox in pixels" in capsys.readouterr().out and len(drawn(tmp_path / "b")) == 2


def test_show_the_first_click_of_a_record_in_green(tmp_path: Path) -> None:
    data = write_parquet(tmp_path / "guiodyssey_test.parquet")
    assert main(["data", "show", str(data), "-n", "10", "--seed", "1", "--out", str(tmp_path / "a")]) == 0
    first = cv2.imread(str(sorted((tmp_path / "a").glob("00000_*.png"))[0]))
    # record 0's true point is (0.5, 0.5) of 200 x 100: the cross's centre pixel is green (BGR)
    assert tuple(first[50, 100]) == (0, 255, 0)


def test_show_training_jsonl(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cv2.imwrite(str(tmp_path / "a.png"), np.full((100, 200, 3), 255, np.uint8))
    rows = [{"image": "a.png", "instruction": "the corner", "box": [0, 0, 20, 20]},
            {"image": "a.png", "instruction": "a ghost", "negative": True},
            {"image": "missing.png", "instruction": "gone", "box": [0, 0, 1, 1]}]
    (tmp_path / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    assert main(["data", "show", str(tmp_path / "train.jsonl"), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "2 samples loaded, 1 rejected" in out and "missing.png" in out
    assert len(drawn(tmp_path / "out")) == 2


def test_export_then_show_the_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "export", str(RUN), "--format", "hf", "--out", str(tmp_path / "hf")]) == 0
    assert "exported 3 steps" in capsys.readouterr().out
    assert main(["data", "show", str(tmp_path / "hf"), "--out", str(tmp_path / "shown")]) == 0
    assert "2 records loaded, 1 rejected" in capsys.readouterr().out  # the step that did not parse
    assert len(drawn(tmp_path / "shown")) == 2
    assert main(["data", "export", str(RUN), "--out", str(tmp_path / "steps.parquet")]) == 0
    assert (tmp_path / "steps.parquet").stat().st_size > 0
    assert main(["data", "export", str(tmp_path / "nothing")]) == 2

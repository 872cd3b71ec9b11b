"""Bad files through the ``agent`` command, as a user meets them: a dataset or script nested 100,000 levels deep
or holding a 5,000-digit number, a dataset with no usable record, an image cut off after its header. Each is a
message saying what was wrong and what to do, exit code 2 when nothing could be used, and never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from tests.conftest import REPO
from tests.support import procs


def agent(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "400"}
    return procs.run([sys.executable, "-m", "agent", *args], cwd=cwd, env=env, capture_output=True, text=True,
                     timeout=180)


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    """A folder with a good screenshot, one cut off after its header, and ScreenSpot files made of them."""
    image = np.full((100, 200, 3), 255, np.uint8)
    cv2.putText(image, "Save", (20, 60), cv2.FONT_HERSHEY_SIMPLEX, 1, (0, 0, 0), 2)
    assert cv2.imwrite(str(tmp_path / "ok.png"), image)
    data = (tmp_path / "ok.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(data[:len(data) // 2])
    return tmp_path


def record(name: str) -> dict:
    return {"img_filename": name, "bbox": [15, 30, 80, 40], "instruction": "Save", "data_type": "text",
            "data_source": "shop"}


def eval_screenspot(data: Path, runs: Path) -> subprocess.CompletedProcess[str]:
    return agent("eval", "--suite", "screenspot", "--data", str(data), "--policy", "ocr", "--runs-dir", str(runs))


def assert_bad_input(proc: subprocess.CompletedProcess[str], *expected: str) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "Traceback" not in out and "ExceptionGroup" not in out, out
    for text in expected:
        assert text in out, (text, out)


def test_a_dataset_beyond_the_limits_or_with_no_usable_record_exits_2_naming_why(dataset, tmp_path):
    (dataset / "deep_mobile.json").write_text("[" * 100_000 + "]" * 100_000)
    assert_bad_input(eval_screenspot(dataset / "deep_mobile.json", tmp_path / "runs"),
                     "error: no usable record in", "1 rejected (bad_file: 1)",
                     "record 0 (line 1) is nested more than 64 levels deep (MAX_DEPTH)")
    (dataset / "digits_mobile.json").write_text(
        '[{"img_filename": "ok.png", "bbox": [' + "1" * 5000 + ', 1, 2, 2], "instruction": "x"}]')
    assert_bad_input(eval_screenspot(dataset / "digits_mobile.json", tmp_path / "runs"),
                     "digits_mobile.json: bad_file", "holds a number of 5000 characters", "fix or remove that value")
    (dataset / "none_mobile.json").write_text(json.dumps([record("missing.png"), record("../ok.png")]))
    proc = eval_screenspot(dataset / "none_mobile.json", tmp_path / "runs")
    assert_bad_input(proc, "2 rejected (missing_image: 1, unsafe_path: 1)", "missing.png does not exist")
    assert "accuracy" not in proc.stdout and not (tmp_path / "runs").exists()  # nothing scored, nothing written
    assert_bad_input(agent("data", "show", str(dataset / "none_mobile.json"), "--out", str(tmp_path / "drawn")),
                     "error: no usable record in", "missing_image")


def test_a_cut_off_image_is_a_rejected_sample_and_alone_it_exits_2(dataset, tmp_path):
    (dataset / "both_mobile.json").write_text(json.dumps([record("ok.png"), record("cut.png")]))
    proc = eval_screenspot(dataset / "both_mobile.json", tmp_path / "runs")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Traceback" not in out, out
    assert "rejected: " in out and "cut.png (" in out and "cannot be decoded: it is cut off" in out
    (results,) = (tmp_path / "runs").glob("grounding-*/results.json")
    summary = json.loads(results.read_text())
    assert summary["total"] == 1 and [r["kind"] for r in summary["rejected"]] == ["unreadable_image"]

    (dataset / "cut_mobile.json").write_text(json.dumps([record("cut.png")]))
    assert_bad_input(eval_screenspot(dataset / "cut_mobile.json", tmp_path / "runs2"),
                     "error: no sample of", "could be evaluated: 1 rejected (unreadable_image: 1)")


@pytest.mark.parametrize("content, expected", [
    ("[" * 100_000 + "]" * 100_000, "nested more than 64 levels deep"),
    ("[" + "9" * 5000 + "]", "holds a number of 5000 characters"),
])
def test_a_script_beyond_the_limits_exits_2(tmp_path, content, expected):
    script = tmp_path / "script.json"
    script.write_text(content)
    assert_bad_input(agent("run", "click it", "--policy", "scripted", "--script", str(script), "--runs-dir",
                           str(tmp_path / "runs")), f"script file {script} is not a JSON list of actions", expected)

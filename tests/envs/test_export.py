"""envs.export and ``agent data export``: a recorded run out as Parquet and as a Hugging Face dataset, loaded back
with ``datasets`` and compared step by step; the export read again as action records and as training prompts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from envs.action_bench.records import load_actions
from envs.errors import EnvError
from envs.export import export_run
from envs.trajectory import read_episode
from tests.conftest import REPO

RUN = REPO / "tests" / "fixtures" / "run-v1"


@pytest.mark.parametrize("fmt", ["parquet", "hf"])
def test_export_round_trip_through_datasets(tmp_path: Path, fmt: str) -> None:
    import datasets

    out = tmp_path / ("steps.parquet" if fmt == "parquet" else "steps-hf")
    assert export_run(RUN, out, fmt) == 3
    data = datasets.load_dataset("parquet", data_files=str(out), split="train") if fmt == "parquet" \
        else datasets.load_from_disk(str(out))
    assert isinstance(data.features["image"], datasets.Image) and len(data) == 3
    episode = read_episode(RUN / "ep0000")
    for row, step in zip(data, episode.steps):
        # the frame, pixel for pixel; the action, box, reward and ids as recorded
        assert np.array_equal(np.asarray(row["image"].convert("RGB")), episode.frame(step))
        assert row["step_id"] == step.step_id and row["instruction"] == "Click the Subscribe button"
        assert (json.loads(row["action"]) if row["action"] else None) == step.action
        assert row["target_box"] == (list(step.target_box) if step.target_box else None)
        assert row["reward"] == step.reward and row["raw_output"] == step.raw_output
        assert (row["frame_width"], row["frame_height"], row["group"]) == (320, 240, "web")
    first, unparsed, last = data
    assert (first["gt_action"], first["gt_bbox"], first["history"]) == ("click", [0.5, 0.5], "None")
    assert unparsed["gt_action"] == "" and unparsed["parse_error"].startswith("not JSON")
    assert (last["gt_action"], last["history"]) == ("complete", "Step 1: click (0.500, 0.500)")
    assert json.loads(last["verifier"])["expected"] == "subscribe" and json.loads(last["samples"]) == []


def test_an_export_reads_back_as_action_records_and_training_prompts(tmp_path: Path) -> None:
    from train.data.actions import ActionSource

    for fmt, out in (("parquet", tmp_path / "steps.parquet"), ("hf", tmp_path / "steps-hf")):
        export_run(RUN, out, fmt)
        (records,) = load_actions(out, any_records=True)
        # the step that did not parse has no ground truth: rejected, with its reason
        assert [r.gt_action for r in records.records] == ["click", "complete"] and len(records.rejected) == 1
        assert records.units == "normalized" and records.records[0].gt_point((320, 240)) == (0.5, 0.5)
        source = ActionSource(out, preset="ritzz-ai/GUI-R1-3B")
        prompt = source.prompt(0)
        w, h = prompt.target["coord_size"]
        assert prompt.target["action"] == "click" and prompt.target["point"] == pytest.approx((w / 2, h / 2))
        assert prompt.frame_size == (320, 240) and prompt.origin["source"] == "actions"
    with pytest.raises(EnvError, match="neither a run folder"):
        export_run(tmp_path, tmp_path / "x.parquet")


def test_guir1_style_training_parquet_is_a_prompt_source(tmp_path: Path) -> None:
    from tests.support.action_files import STEPS, write_parquet
    from train.data.actions import ActionSource

    path = write_parquet(tmp_path / "train.parquet")  # GUI-R1-3K's name: no benchmark, read as records
    source = ActionSource(path, preset="ritzz-ai/GUI-R1-3B")
    assert len(source) == len(STEPS)
    second = source.prompt(1)
    text = second.messages[0]["content"][-1]["text"]
    assert "with the action history being 'Step 1: [{'action': 'click'}]'" in text  # the record's history
    assert second.target["action"] == "click" and second.target["box"] is None
    typed = source.prompt(3).target
    assert (typed["action"], typed["text"], typed["point"]) == ("type", "hello world", None)
    assert source.prompt(8).target["negative"] is True  # impossible: a negative sample
    # point-list rewards score a box: records with only a point are left out, impossible ones stay (negative)
    boxed = ActionSource(path, preset="InfiX-ai/InfiGUI-G1-3B", need_box=True)
    assert len(boxed) == 1 and {s.kind for s in boxed.skipped} == {"no_box"}

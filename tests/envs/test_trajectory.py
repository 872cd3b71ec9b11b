"""Trajectory records on disk: round trips, crash leftovers, corrupt files, blurred password boxes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from devices.base import Box, Observation
from devices.frames import decode, encode
from envs.errors import RecordError, RecordFormatError
from envs.records import EpisodeRecord, Outcome, StepRecord
from envs.trajectory import RunWriter, iter_episodes, read_episode


def _obs(seed: int = 0, boxes=()) -> Observation:
    frame = np.random.default_rng(seed).integers(0, 256, (40, 60, 3), dtype=np.uint8)
    return Observation(frame=frame, encoded=encode(frame, "png"), encoding="png", sensitive_boxes=tuple(boxes))


def _step(writer, index: int, frame_path: str) -> StepRecord:
    return StepRecord(step_id=writer.step_id(index), index=index, started_at=1.0, ended_at=2.0, frame_path=frame_path,
                      frame_size=(60, 40), model_input_size=(30, 20), action={"kind": "click", "point": [0.5, 0.5]},
                      executed=True, target_box=(0.1, 0.2, 0.3, 0.4), latency={"observe": 0.01})


def test_round_trip(tmp_path):
    run = RunWriter(tmp_path, config={"hello": "wörld"})
    writer = run.episode(task="click 保存")
    obs = _obs()
    path = writer.write_frame(0, obs)
    writer.write_step(_step(writer, 0, path))
    writer.finish(Outcome.SUCCESS, return_=1.0)
    run_json = json.loads((run.path / "run.json").read_text())
    assert run_json["hello"] == "wörld" and run_json["run_id"] == run.run_id
    (episode,) = iter_episodes(run.path)
    assert episode.record.task == "click 保存" and episode.record.outcome is Outcome.SUCCESS
    assert episode.record.return_ == 1.0 and episode.record.num_steps == 1
    (step,) = episode.steps
    assert step == _step(writer, 0, path)
    # PNG frames are stored lossless: exactly the pixels the policy saw.
    assert np.array_equal(episode.frame(step), obs.frame)


def test_episode_json_exists_while_running_and_unfinished_reads_as_such(tmp_path):
    writer = RunWriter(tmp_path, config={}).episode(task="t")
    writer.write_step(_step(writer, 0, writer.write_frame(0, _obs())))
    episode = read_episode(writer.path)  # the process could die right here
    assert not episode.finished and len(episode.steps) == 1


def test_cut_off_last_line_is_skipped_but_a_corrupt_middle_line_is_an_error(tmp_path):
    writer = RunWriter(tmp_path, config={}).episode(task="t")
    for i in range(2):
        writer.write_step(_step(writer, i, writer.write_frame(i, _obs(i))))
    writer.close()
    steps = writer.path / "steps.jsonl"
    lines = steps.read_text().splitlines()
    steps.write_text("\n".join(lines) + "\n" + lines[0][:25])  # a partial third line
    episode = read_episode(writer.path)
    assert len(episode.steps) == 2 and episode.truncated_tail
    steps.write_text(lines[0][:25] + "\n" + lines[1] + "\n")
    with pytest.raises(RecordFormatError, match=r"steps\.jsonl:1 is not valid JSON"):
        read_episode(writer.path)


def test_sensitive_boxes_are_blurred_in_stored_frames(tmp_path):
    writer = RunWriter(tmp_path, config={}).episode(task="t")
    box = Box(10 / 60, 5 / 40, 30 / 60, 15 / 40)
    obs = _obs(3, [box])
    stored = decode((writer.path / writer.write_frame(0, obs)).read_bytes())
    region = stored[5:15, 10:30]
    assert np.ptp(region.reshape(-1, 3), axis=0).max() == 0  # one flat colour: nothing readable
    assert np.array_equal(region[0, 0], obs.frame[5:15, 10:30].reshape(-1, 3).mean(axis=0).astype(np.uint8))
    outside = np.ones(stored.shape[:2], bool)
    outside[5:15, 10:30] = False
    assert np.array_equal(stored[outside], obs.frame[outside])


def test_jpeg_frames(tmp_path):
    writer = RunWriter(tmp_path, config={}, frame_format="jpeg").episode(task="t")
    path = writer.write_frame(0, _obs())
    assert path.endswith(".jpg") and decode((writer.path / path).read_bytes()).shape == (40, 60, 3)


def test_unwritable_places_say_what_to_do(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(RecordError, match="--runs-dir"):
        RunWriter(blocker / "runs", config={})


def test_wrong_version_and_missing_files(tmp_path):
    with pytest.raises(RecordFormatError, match="no episode.json"):
        read_episode(tmp_path)
    (tmp_path / "episode.json").write_text(json.dumps({**EpisodeRecord("e", "r", "t", 0.0).to_json_dict(), "format_version": 99}))
    with pytest.raises(RecordFormatError, match="format_version 99"):
        read_episode(tmp_path)
    with pytest.raises(RecordFormatError, match="not a run folder"):
        list(iter_episodes(tmp_path))


def test_a_reopened_run_numbers_new_episodes_after_the_old_ones(tmp_path):
    run = RunWriter(tmp_path, {"task": "t"}, run_id="r1")
    for _ in range(2):
        run.episode(task="t")
    assert sorted(p.name for p in (tmp_path / "r1").glob("ep*")) == ["ep0000", "ep0001"]
    again = RunWriter.reopen(tmp_path / "r1")
    assert again.run_id == "r1" and again.episode(task="t").path.name == "ep0002"
    assert json.loads((tmp_path / "r1" / "run.json").read_text())["task"] == "t"  # kept, not rewritten
    with pytest.raises(RecordError, match="is not a run folder"):
        RunWriter.reopen(tmp_path / "nothing")

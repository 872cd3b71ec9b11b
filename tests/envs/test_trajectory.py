"""Trajectory records on disk: round trips, crash leftovers, corrupt files, blurred password boxes, running and
crashed episodes, fsync."""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap

import numpy as np
import pytest

from devices.base import Box, Observation
from devices.frames import decode, encode
from envs.errors import RecordError, RecordFormatError
from envs.records import EpisodeRecord, Outcome, StepRecord
from envs.trajectory import LOCK_FILE, EpisodeState, RunWriter, iter_episodes, read_episode
from tests.conftest import REPO
from tests.support import procs


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
    assert episode.state is EpisodeState.RUNNING  # this process holds the lock


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


def _chinese_step(writer, index: int) -> StepRecord:
    return StepRecord(step_id=writer.step_id(index), index=index, started_at=1.0, ended_at=2.0, frame_path="",
                      frame_size=(60, 40), model_input_size=(60, 40),
                      action={"kind": "type", "text": "你好，世界"},
                      executed=True, raw_output="点击“订阅”按钮，然后输入：你好，世界 🙂")


def test_a_last_line_cut_at_any_byte_is_skipped_even_inside_a_multibyte_character(tmp_path):
    writer = RunWriter(tmp_path, config={}).episode(task="输入你好")
    for i in range(3):
        writer.write_step(_chinese_step(writer, i))
    writer.close()
    steps = writer.path / "steps.jsonl"
    data = steps.read_bytes()
    first_two, last = data[:data.index(b"\n", data.index(b"\n") + 1) + 1], data.split(b"\n")[2] + b"\n"
    inside = [k for k in range(1, len(last)) if (last[k] & 0xC0) == 0x80]  # cuts inside a UTF-8 character
    assert len(inside) > 30
    for cut in range(len(last) + 1):
        steps.write_bytes(first_two + last[:cut])
        episode = read_episode(writer.path)
        whole = cut >= len(last) - 1  # the whole line, with or without its newline
        assert len(episode.steps) == (3 if whole else 2), cut
        assert episode.truncated_tail is (0 < cut < len(last) - 1), cut
        assert episode.state is EpisodeState.CRASHED  # closed without an outcome
    assert episode.steps[2].raw_output.startswith("点击“订阅”")
    steps.write_bytes(first_two[:40] + b"\xe4\n" + first_two[40:] + last)  # a broken character in a whole line
    with pytest.raises(RecordFormatError, match=r"steps\.jsonl:1 is not valid JSON"):
        read_episode(writer.path)


def test_running_finished_crashed_and_older_episodes(tmp_path):
    run = RunWriter(tmp_path, config={})
    writer = run.episode(task="t")
    assert (writer.path / LOCK_FILE).is_file() and read_episode(writer.path).state is EpisodeState.RUNNING
    writer.finish(Outcome.SUCCESS)
    episode = read_episode(writer.path)
    assert episode.state is EpisodeState.FINISHED and not (writer.path / LOCK_FILE).exists()
    # closed without an outcome (the process would have died): the lock file stays, nobody holds it
    closed = run.episode(task="t")
    closed.close()
    assert (closed.path / LOCK_FILE).exists() and read_episode(closed.path).state is EpisodeState.CRASHED
    # written before lock files existed (tests/fixtures/run-v1 is such a run): no outcome reads as crashed
    old = run.episode(task="t")
    old.close()
    (old.path / LOCK_FILE).unlink()
    assert read_episode(old.path).state is EpisodeState.CRASHED
    assert [e.state.value for e in iter_episodes(run.path)] == ["finished", "crashed", "crashed"]


def test_an_episode_finishing_while_it_is_read_reads_as_finished(tmp_path, monkeypatch):
    import envs.trajectory

    writer = RunWriter(tmp_path, config={}).episode(task="t")

    def finishes_meanwhile(path):  # the reader saw no outcome; then the writer finished and let go of the lock
        writer.finish(Outcome.FAILURE)
        return False

    monkeypatch.setattr(envs.trajectory, "writer_alive", finishes_meanwhile)
    episode = read_episode(writer.path)
    assert episode.state is EpisodeState.FINISHED and episode.record.outcome is Outcome.FAILURE


def test_a_killed_writer_leaves_every_finished_step_and_reads_as_crashed(tmp_path):
    # A real process: write three steps and half of a fourth line, then die by SIGKILL (no cleanup at all).
    code = textwrap.dedent(f"""
        import os, signal
        from tests.envs.test_trajectory import _chinese_step, _obs
        from envs.trajectory import RunWriter
        writer = RunWriter({str(tmp_path)!r}, config={{}}, run_id="r").episode(task="t")
        for i in range(3):
            writer.write_frame(i, _obs(i))
            writer.write_step(_chinese_step(writer, i))
        with open(writer.path / "steps.jsonl", "ab") as f:  # the fourth line, cut inside a character
            f.write('{{"step_id": "r/ep0000/3", "raw_output": "点'.encode()[:-1])
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = procs.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == -9, proc.stderr
    episode = read_episode(tmp_path / "r" / "ep0000")
    assert episode.state is EpisodeState.CRASHED and episode.record.outcome is None
    assert [s.index for s in episode.steps] == [0, 1, 2] and episode.truncated_tail
    assert all((episode.path / "frames" / f"{i:04d}.png").is_file() for i in range(3))


def _count_fsyncs(monkeypatch):
    calls = {"dir": [], "file": 0}
    real = os.fsync

    def counting(fd):
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            calls["dir"].append(os.readlink(f"/proc/self/fd/{fd}"))
        else:
            calls["file"] += 1
        return real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    return calls


def test_fsync_is_on_by_default_and_covers_the_folders(tmp_path, monkeypatch):
    calls = _count_fsyncs(monkeypatch)
    run = RunWriter(tmp_path / "runs", config={}, run_id="r")
    assert run.fsync and calls["dir"] == [str(tmp_path / "runs" / "r"), str(tmp_path / "runs")]  # run.json, the run
    writer = run.episode(task="t")
    ep = writer.path
    assert calls["dir"][2:] == [str(ep), str(ep.parent)]  # episode.json (lock, frames/, steps.jsonl), the episode
    calls["dir"].clear()
    calls["file"] = 0
    for i in range(3):
        writer.write_step(_step(writer, i, writer.write_frame(i, _obs(i))))
    assert calls["dir"] == [str(ep / "frames")] * 3 and calls["file"] == 6  # per step: frame, its folder, the line
    writer.update(task="t2")  # every rename is followed by its folder's fsync
    writer.finish(Outcome.SUCCESS)
    assert calls["dir"][3:] == [str(ep), str(ep)]


def test_fsync_off_only_flushes_steps(tmp_path, monkeypatch):
    calls = _count_fsyncs(monkeypatch)
    writer = RunWriter(tmp_path, config={}, fsync=False).episode(task="t")
    for i in range(3):
        writer.write_step(_step(writer, i, writer.write_frame(i, _obs(i))))
    writer.finish(Outcome.SUCCESS)
    assert calls["dir"] == [] and calls["file"] == 3  # episode.json's atomic writes only: run.json, start, end
    assert len(read_episode(writer.path).steps) == 3

"""Prompt sources, the resumable sampler and the reward adapter (the train.data package), on tiny files written
here and, once, a generated screen rendered in Chromium."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path

import cv2
import numpy as np
import pytest

from devices.actions import Action, ActionKind, Point, ScrollDirection
from devices.base import Observation
from envs.generated.layout import ScreenParams, TaskKind, generate
from envs.records import Actor, Outcome, StepRecord
from envs.trajectory import RunWriter
from policy.formats import AnswerForm
from policy.model import ModelPolicy
from tests.conftest import descendants
from policy.presets import preset_for
from train.curriculum import CORRECT_PART, FAILED_PART, ThresholdSchedule, is_failed
from train.data import (
    BadItem,
    ConcatSource,
    GeneratedSource,
    GroundingSource,
    PromptSampler,
    PromptSourceError,
    TrajectorySource,
    reward_fn,
)
from train.learner import RolloutPrompt

INFIGUI = preset_for("infigui-g1")


def write_png(path: Path, width: int, height: int, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    cv2.imwrite(str(path), rng.integers(0, 255, (height, width, 3), dtype=np.uint8))
    return path


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def points(*pts: tuple[float, float]) -> str:
    return "<think>look</think>[" + ", ".join(f'{{"point_2d": [{x}, {y}]}}' for x, y in pts) + "]"


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    # 200 x 100 -> InfiGUI-G1 smart_resize: h = round(100/28)*28 = 112, w = round(200/28)*28 = 196
    write_png(tmp_path / "a.png", 200, 100, 1)
    write_png(tmp_path / "b.png", 280, 140, 2)  # multiples of 28: the model sees it unchanged
    (tmp_path / "broken.png").write_text("not an image")
    return tmp_path


# -- grounding JSONL ------------------------------------------------------------------------------------------------


def test_jsonl_rows_become_prompts_in_model_pixels(shots):
    f = write_jsonl(shots / "g.jsonl", [
        {"image": "a.png", "instruction": "open settings", "box": [20, 10, 60, 30]},
        {"image": "a.png", "instruction": "the logo", "box": [0.5, 0.5, 1.0, 1.0], "box_space": "normalized",
         "id": "logo"},
        {"image": "b.png", "instruction": "a red cat", "negative": True},
    ])
    src = GroundingSource(f, preset=INFIGUI)
    assert len(src) == 3 and src.skipped == []
    assert [src.item_id(i) for i in range(3)] == ["g:1", "g:logo", "g:3"]

    p = src.prompt(0)
    assert p.image.shape == (112, 196, 3) and p.frame_size == (200, 100)
    # (20, 10, 60, 30) / (200, 100) * (196, 112) = (19.6, 11.2, 58.8, 33.6)
    assert p.target["box"] == pytest.approx((19.6, 11.2, 58.8, 33.6))
    assert p.target["point"] == pytest.approx((39.2, 22.4))
    assert p.target["action"] == "click" and p.target["think"] is True and p.target["negative"] is False
    assert p.target["coord_size"] == (196.0, 112.0) and p.target["instruction"] == "open settings"
    assert p.origin["id"] == "g:1" and p.origin["source"] == "grounding"
    # normalized (0.5, 0.5, 1, 1) * (196, 112)
    assert src.prompt(1).target["box"] == pytest.approx((98.0, 56.0, 196.0, 112.0))
    neg = src.prompt(2)
    assert neg.target["box"] is None and neg.target["negative"] and neg.target["action"] == "impossible"
    assert neg.image.shape == (140, 280, 3)


def test_prompt_is_what_agent_run_builds(shots):
    f = write_jsonl(shots / "g.jsonl", [{"image": "a.png", "instruction": "open settings", "box": [20, 10, 60, 30]}])
    p = GroundingSource(f, preset=INFIGUI).prompt(0)
    frame = cv2.cvtColor(cv2.imread(str(shots / "a.png")), cv2.COLOR_BGR2RGB)
    request, space = ModelPolicy(backend=None, preset=INFIGUI).request("open settings", [], Observation(frame))
    want_images = [part["image"] for m in request.messages for part in m["content"] if part.get("type") == "image"]
    stripped = [{**m, "content": [{"type": "image"} if part.get("type") == "image" else part
                                  for part in m["content"]]} for m in request.messages]
    assert p.messages == stripped
    assert np.array_equal(p.image, want_images[0]) and space.input_size == (196, 112)
    assert "The screen's resolution is 196x112." in p.messages[-1]["content"][1]["text"]


def test_bad_rows_are_skipped_counted_and_named(shots):
    f = write_jsonl(shots / "g.jsonl", [
        {"image": "a.png", "instruction": "ok", "box": [20, 10, 60, 30]},
        "{not json",
        {"image": "a.png", "instruction": "flat", "box": [60, 10, 60, 30]},
        {"image": "a.png", "instruction": "outside", "box": [150, 10, 260, 30]},
        {"image": "a.png", "instruction": "words", "box": ["a", 1, 2, 3]},
        {"image": "gone.png", "instruction": "missing", "box": [1, 1, 2, 2]},
        {"image": "broken.png", "instruction": "unreadable", "box": [1, 1, 2, 2]},
        {"image": "a.png", "instruction": "neg with box", "negative": True, "box": [1, 1, 2, 2]},
        {"image": "a.png", "instruction": "bad space", "box": [1, 1, 2, 2], "box_space": "percent"},
        {"image": "a.png", "box": [1, 1, 2, 2]},
        ["a list"],
        {"image": "a.png", "instruction": "dup", "box": [20, 10, 60, 30], "id": 1},
    ])
    src = GroundingSource(f, preset=INFIGUI)
    assert len(src) == 1
    where = {s.where.rsplit(":", 1)[1]: s for s in src.skipped}
    assert sorted(int(k) for k in where) == list(range(2, 13))
    assert where["3"].kind == "malformed" and "x2 > x1" in where["3"].reason
    assert where["4"].kind == "box_outside"
    assert where["5"].kind == "malformed" and "four numbers" in where["5"].reason
    assert where["6"].kind == "missing_image" and where["7"].kind == "unreadable_image"
    assert "duplicate id" in where["12"].reason
    assert str(src.skipped[0]).startswith(f"{f}:2: malformed: not JSON")


def test_a_file_with_nothing_usable_is_an_error(shots):
    with pytest.raises(PromptSourceError, match="no usable row.*the file holds no rows"):
        GroundingSource(write_jsonl(shots / "empty.jsonl", []))
    with pytest.raises(PromptSourceError, match=r"no usable row .*1 skipped.*missing_image"):
        GroundingSource(write_jsonl(shots / "bad.jsonl", [{"image": "x.png", "instruction": "a", "box": [0, 0, 1, 1]}]))
    with pytest.raises(PromptSourceError, match="does not exist"):
        GroundingSource(shots / "nope.jsonl")


def test_screenspot_files_load_through_envs_grounding(shots):
    f = shots / "screenspot_mobile_v2.json"
    f.write_text(json.dumps([
        {"img_filename": "a.png", "bbox": [20, 10, 40, 20], "instruction": "tap it", "data_type": "icon",
         "data_source": "android"},
        {"img_filename": "a.png", "bbox": [20, 10, 0, 20], "instruction": "zero width"},
        {"img_filename": "missing.png", "bbox": [1, 1, 1, 1], "instruction": "no image"},
    ]))
    src = GroundingSource(f, preset=INFIGUI)
    assert len(src) == 1 and src.item_id(0) == "screenspot_mobile_v2:0"
    assert [(s.where, s.kind) for s in src.skipped] == [(f"{f}:1", "malformed"), (f"{f}:2", "missing_image")]
    # ScreenSpot boxes are [x, y, w, h]: (20, 10, 60, 30) in pixels, as in the JSONL test
    assert src.prompt(0).target["box"] == pytest.approx((19.6, 11.2, 58.8, 33.6))


def test_no_think_preset_sets_the_flag(shots):
    f = write_jsonl(shots / "g.jsonl", [{"image": "b.png", "instruction": "x", "box": [0, 0, 28, 28]}])
    p = GroundingSource(f, preset=preset_for("infigui-g1", variant="no_think")).prompt(0)
    assert p.target["think"] is False and p.messages[0]["role"] == "user"


# -- sampler --------------------------------------------------------------------------------------------------------


class ListSource:
    """A stand-in source: item i is a prompt whose origin id is f"item{i}"; ``bad`` items raise BadItem."""

    def __init__(self, n: int, bad: set[int] = frozenset(), name: str = "list") -> None:
        self.n, self.bad, self.name, self.skipped, self.made = n, set(bad), name, [], 0

    def __len__(self) -> int:
        return self.n

    def item_id(self, index: int) -> str:
        return f"{self.name}{index}"

    def prompt(self, index: int) -> RolloutPrompt:
        if index in self.bad:
            raise BadItem(f"item {index} is broken")
        self.made += 1
        return RolloutPrompt([], None, (1, 1), {"box": None, "instruction": ""}, {"id": self.item_id(index)})


def ids(prompts) -> list[str]:
    return [p.origin["id"] for p in prompts]


def test_sampler_shuffles_per_epoch_and_resumes_exactly():
    a = PromptSampler(ListSource(5), seed=7)
    first = ids(a.next_prompts(5))
    second = ids(a.next_prompts(5))
    assert sorted(first) == sorted(second) == [f"list{i}" for i in range(5)]
    assert first != second  # a new permutation each epoch (seed 7, epochs 0 and 1)
    assert ids(PromptSampler(ListSource(5), seed=7).next_prompts(10)) == first + second

    b = PromptSampler(ListSource(5), seed=7)
    b.next_prompts(3)
    state = json.loads(json.dumps(b.state_dict()))
    assert state == {"version": 1, "source": "list", "size": 5, "seed": 7, "shuffle": True, "epoch": 0,
                     "position": 3, "bad": []}
    rest = ids(b.next_prompts(6))
    c = PromptSampler(ListSource(5), seed=0)
    c.load_state_dict(state)
    assert ids(c.next_prompts(6)) == rest
    assert ids(PromptSampler(ListSource(4), shuffle=False).next_prompts(6)) == [
        "list0", "list1", "list2", "list3", "list0", "list1"]


def test_sampler_refuses_another_dataset_state():
    state = PromptSampler(ListSource(5)).state_dict()
    with pytest.raises(PromptSourceError, match="same data"):
        PromptSampler(ListSource(6)).load_state_dict(state)


def test_sampler_skips_bad_items_once_and_fails_when_all_are_bad(caplog):
    src = ListSource(4, bad={1, 2})
    s = PromptSampler(src, shuffle=False)
    with caplog.at_level(logging.WARNING, logger="train.data"):
        assert ids(s.next_prompts(4)) == ["list0", "list3", "list0", "list3"]
    assert [k.where for k in s.skipped] == ["list1", "list2"] and s.state_dict()["bad"] == [1, 2]
    assert "item 1 is broken" in caplog.text
    assert ids(s.prompts_for(["list3", "list1", "unknown"])) == ["list3"]
    with pytest.raises(PromptSourceError, match="every item of list failed"):
        PromptSampler(ListSource(2, bad={0, 1})).next_prompts(1)


def test_missing_image_at_prompt_time_is_skipped(shots):
    write_png(shots / "c.png", 56, 56)
    f = write_jsonl(shots / "g.jsonl", [{"image": "c.png", "instruction": "x", "box": [0, 0, 28, 28]},
                                         {"image": "b.png", "instruction": "y", "box": [0, 0, 28, 28]}])
    src = GroundingSource(f)
    (shots / "c.png").unlink()
    with pytest.raises(BadItem, match="could not be read"):
        src.prompt(0)
    s = PromptSampler(src, shuffle=False)
    assert ids(s.next_prompts(2)) == ["g:2", "g:2"] and len(s.skipped) == 1


def test_concat_source_keeps_ids_distinct():
    both = ConcatSource([ListSource(2, name="a"), ListSource(3, name="b")])
    assert len(both) == 5 and [both.item_id(i) for i in range(5)] == ["a0", "a1", "b0", "b1", "b2"]
    assert both.prompt(3).origin["id"] == "b1"
    with pytest.raises(PromptSourceError, match="distinct"):
        ConcatSource([ListSource(2), ListSource(2)])


# -- reward adapter -------------------------------------------------------------------------------------------------


def grounding_prompt(box=(10.0, 10.0, 50.0, 30.0), **target) -> RolloutPrompt:
    t = {"instruction": "x", "box": box, "point": None, "action": "click" if box else "impossible", "text": None,
         "negative": box is None, "think": True, "coord_size": (300.0, 400.0), "family": "infigui-g1", **target}
    return RolloutPrompt([], None, (300, 400), t, {"id": "p"})


def test_aepo_adapter_scores_against_the_target_and_marks_correct():
    r = reward_fn("aepo")(grounding_prompt(), points((20, 20)))
    assert r.total == 2.0 and r.parts == {"format": 1.0, "accuracy": 1.0, CORRECT_PART: 1.0}
    # N=2, miss: 1 - 1/2
    miss = reward_fn("aepo")(grounding_prompt(), points((100, 100), (200, 150)))
    assert miss.total == 0.5 and miss.parts[CORRECT_PART] == 0.0
    assert reward_fn("aepo")(grounding_prompt(None), "<think>nothing here</think>[]").total == 2.0
    # the think flag: the prompt's target, overridden by the option or the preset
    no_think = grounding_prompt(think=False)
    assert reward_fn("aepo")(no_think, '[{"point_2d": [20, 20]}]').total == 2.0
    assert reward_fn("aepo", think=True)(no_think, '[{"point_2d": [20, 20]}]').total == -1.0
    assert reward_fn("aepo", preset=preset_for("infigui-g1", variant="no_think")).think is False
    assert reward_fn("aepo", no_think=True).think is False


def test_guir1_adapter_uses_action_box_and_text():
    click = '<think>t</think><answer>[{"action": "click", "point": [20, 20], "input_text": "no input text"}]</answer>'
    click = click.replace('"', "'")
    r = reward_fn("guir1")(grounding_prompt(), click)
    assert r.total == pytest.approx(1.0) and r.parts[CORRECT_PART] == 1.0
    typed = "<think>t</think><answer>[{'action': 'type', 'point': [-100, -100], 'input_text': 'hello'}]</answer>"
    prompt = grounding_prompt(action="type", text="hello world")
    # token F1 of {hello} vs {hello, world}: p = 1, r = 1/2, F1 = 2/3 >= 0.5 -> accuracy 1
    assert reward_fn("guir1")(prompt, typed).total == pytest.approx(1.0)
    paper = reward_fn("guir1_paper")(grounding_prompt(), click)
    assert paper.total == pytest.approx(0.2 + 3 * 0.8) and paper.parts[CORRECT_PART] == 1.0


def test_distance_adapter_reads_the_schedule_at_its_step():
    # image 300 x 400: diagonal 500; box (10, 10, 50, 30); point (74, 62): dx 24, dy 32 -> d = 40 -> d/D = 0.08
    schedule = ThresholdSchedule(start=0.4, end=0.1, steps=100)
    adapter = reward_fn("distance", schedule=schedule)
    response = points((74, 62))
    assert adapter(grounding_prompt(), response).parts["accuracy"] == pytest.approx(1 - 0.08 / 0.4)  # 0.8
    adapter.set_step(50)  # threshold 0.25
    assert adapter(grounding_prompt(), response).parts["accuracy"] == pytest.approx(1 - 0.08 / 0.25)  # 0.68
    adapter.set_step(100)  # threshold 0.1
    r = adapter(grounding_prompt(), response)
    assert r.total == pytest.approx(1.2) and r.parts[CORRECT_PART] == 0.0
    assert adapter.metrics()["rollout/reward/threshold"] == pytest.approx(0.1)
    assert reward_fn("distance", threshold=0.1)(grounding_prompt(), points((20, 20))).parts[CORRECT_PART] == 1.0


def test_unknown_reward_and_bad_options_are_clear_errors():
    with pytest.raises(ValueError, match="unknown reward 'aepoo'; known rewards: aepo, aepo_no_collinear, aepo_paper, distance"):
        reward_fn("aepoo")
    with pytest.raises(ValueError, match="needs threshold"):
        reward_fn("distance")
    with pytest.raises(ValueError, match="distance reward only"):
        reward_fn("aepo", threshold=0.1)
    with pytest.raises(ValueError, match="contradict"):
        reward_fn("aepo", think=True, no_think=True)


def test_a_raising_reward_is_counted_logged_once_and_marked_failed(caplog):
    adapter = reward_fn("aepo")
    bad = grounding_prompt(box=(50.0, 10.0, 10.0, 30.0))  # x1 > x2: aepo_reward raises ValueError
    with caplog.at_level(logging.WARNING, logger="train.data"):
        results = [adapter(bad, points((20, 20))) for _ in range(3)]
        adapter(RolloutPrompt([], None, (1, 1), None, {"id": "q"}), "x")  # no target at all
    assert adapter.failures == 4 and adapter.calls == 4
    r = results[0]
    assert r.total == 0.0 and r.parts == {FAILED_PART: 1.0} and "ValueError" in r.info[FAILED_PART]
    assert is_failed(r) and not is_failed(adapter(grounding_prompt(), points((20, 20))))
    assert caplog.text.count("x1 <= x2") == 1 and "TypeError" in caplog.text


def test_a_reward_on_a_prompt_whose_answers_it_cannot_read_warns_once(caplog):
    """The prompt's family writes another answer form (``ModelFormat.answer_form``) than the reward reads."""
    adapter = reward_fn("aepo")
    with caplog.at_level(logging.WARNING, logger="train.data"):
        for _ in range(2):
            adapter(grounding_prompt(family="gui-r1", answer_form=AnswerForm.ACTION_LIST), points((20, 20)))
            adapter(grounding_prompt(answer_form=AnswerForm.POINT_LIST), points((20, 20)))
    assert caplog.text.count("reads point_list answers, but the prompt is gui-r1's, whose answers are action_list") == 1
    assert caplog.text.count("reads") == 1  # InfiGUI-G1's point lists are what it reads: no warning
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="train.data"):
        reward_fn("guir1")(grounding_prompt(family="qwen2.5-vl", answer_form=AnswerForm.TOOL_CALL), "<answer></answer>")
    assert "reward 'guir1' reads action_list answers, but the prompt is qwen2.5-vl's, whose answers are tool_call" \
        in caplog.text


# -- trajectories ---------------------------------------------------------------------------------------------------


def _frame(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 255, (100, 200, 3), dtype=np.uint8)


def record_episode(run: RunWriter, steps: list[tuple[Action | None, tuple | None]], outcome: Outcome,
                   actor: Actor = Actor.POLICY) -> None:
    writer = run.episode(task="search for cats", actor=actor)
    for i, (action, box) in enumerate(steps):
        path = writer.write_frame(i, Observation(_frame(i)))
        writer.write_step(StepRecord(
            step_id=writer.step_id(i), index=i, started_at=1.0, ended_at=2.0, frame_path=path, frame_size=(200, 100),
            model_input_size=(196, 112), action=action.to_dict() if action else None, executed=action is not None,
            raw_output=action.describe() if action else "garbage", parse_error=None if action else "no parse",
            target_box=box))
    writer.finish(outcome)


def test_trajectory_steps_become_guir1_step_prompts(tmp_path):
    run = RunWriter(tmp_path, config={}, run_id="r1")
    click = Action(ActionKind.CLICK, point=Point(0.25, 0.5))
    typed = Action(ActionKind.TYPE, text="cats", point=Point(0.5, 0.2))
    scroll = Action(ActionKind.SCROLL, direction=ScrollDirection.DOWN)
    record_episode(run, [(click, (0.2, 0.4, 0.3, 0.6)), (None, None), (typed, (0.4, 0.1, 0.6, 0.3)),
                         (scroll, None)], Outcome.SUCCESS)
    record_episode(run, [(click, (0.2, 0.4, 0.3, 0.6))], Outcome.FAILURE)
    src = TrajectorySource(tmp_path / "r1")
    assert [src.item_id(i) for i in range(len(src))] == ["r1/ep0000/0", "r1/ep0000/2"]
    kinds = sorted((s.where, s.kind) for s in src.skipped)
    assert kinds == [("r1/ep0000/1", "no_target_box"), ("r1/ep0000/3", "no_target_box"),
                     ("r1/ep0001/0", "episode_outcome")]

    first = src.prompt(0)
    assert first.image.shape == (112, 196, 3) and first.frame_size == (200, 100)
    t = first.target
    assert t["action"] == "click" and t["text"] is None and t["family"] == "gui-r1"
    # box (0.2, 0.4, 0.3, 0.6) * (196, 112); point (0.25, 0.5) * (196, 112)
    assert t["box"] == pytest.approx((39.2, 44.8, 58.8, 67.2)) and t["point"] == pytest.approx((49.0, 56.0))
    text = first.messages[0]["content"][1]["text"]
    assert "continue executing the command 'search for cats'" in text and "history being 'None'" in text

    second = src.prompt(1)
    assert second.target["action"] == "type" and second.target["text"] == "cats"
    history = second.messages[0]["content"][1]["text"]
    # the click (executed) is step 1; the unparsed step changed nothing and is left out
    assert "history being 'Step 1: [{'action': 'click', 'point': [49, 56], 'input_text': 'no input text'}]'" in history
    assert second.origin == {"id": "r1/ep0000/2", "source": "trajectory", "run": "r1", "episode": "ep0000",
                             "step": 2, "task": "search for cats"}
    good = "<think>t</think><answer>[{'action': 'type', 'point': [100, 20], 'input_text': 'cats'}]</answer>"
    assert reward_fn("guir1")(second, good).total == pytest.approx(1.0)

    everything = TrajectorySource(tmp_path / "r1", only_successful=False)
    assert len(everything) == 3


def test_trajectory_human_demos_count_and_empty_runs_fail(tmp_path):
    run = RunWriter(tmp_path, config={}, run_id="demo")
    record_episode(run, [(Action(ActionKind.CLICK, point=Point(0.1, 0.1)), (0.0, 0.0, 0.2, 0.2))], Outcome.CLAIMED,
                   actor=Actor.HUMAN)
    assert len(TrajectorySource(tmp_path)) == 1  # a folder of runs works too
    empty = RunWriter(tmp_path / "other", config={}, run_id="e")
    record_episode(empty, [(Action(ActionKind.CLICK, point=Point(0.1, 0.1)), None)], Outcome.SUCCESS)
    with pytest.raises(PromptSourceError, match="no usable step.*no_target_box: 1"):
        TrajectorySource(tmp_path / "other" / "e")


# -- generated screens, live in Chromium ----------------------------------------------------------------------------


def chromium_children() -> list[int]:
    return [pid for pid in descendants(os.getpid()) if "chrom" in _comm(pid)]


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text()
    except OSError:
        return ""


def test_generated_source_renders_screens_in_chromium():
    params = ScreenParams(TaskKind.CLICK, "easy")
    with GeneratedSource([11, 12], params, preset=INFIGUI) as src:
        assert src.item_id(0) == "generated/click-easy-en-light-desktop:11"
        assert chromium_children() == []  # lazy: no browser before the first prompt
        p = src.prompt(0)
        screen = generate(11, params)
        w, h = INFIGUI.input_size((1280, 800))
        assert p.frame_size == (1280, 800) and p.image.shape == (h, w, 3)
        x1, y1, x2, y2 = screen.norm_box(screen.task.target_ids[0])
        assert p.target["box"] == pytest.approx((x1 * w, y1 * h, x2 * w, y2 * h))
        assert p.target["instruction"] == screen.task.instruction and p.target["action"] == "click"
        assert screen.task.instruction in p.messages[-1]["content"][1]["text"]
        # the target widget is drawn where the box says: its pixels differ from the page background around it
        px1, py1, px2, py2 = (int(v) for v in p.target["box"])
        assert p.image[py1:py2, px1:px2].std() > 0
        # a point at the box centre scores a hit through the adapter
        cx, cy = p.target["point"]
        assert reward_fn("aepo")(p, points((round(cx), round(cy)))).parts[CORRECT_PART] == 1.0

        async def inside_a_loop() -> RolloutPrompt:
            return src.prompt(1)  # blocking, but safe: the browser lives on the source's own loop

        assert asyncio.run(inside_a_loop()).origin["seed"] == 12
    assert chromium_children() == []


# -- files beyond the limits, images and frames that do not decode --------------------------------------------------


def test_deep_or_long_number_rows_are_skipped_and_named(shots):
    f = write_jsonl(shots / "g.jsonl", [
        {"image": "a.png", "instruction": "ok", "box": [20, 10, 60, 30]},
        "[" * 100_000 + "]" * 100_000,
        '{"image": "a.png", "instruction": "x", "box": [' + "1" * 5000 + ", 0, 1, 1]}",
    ])
    src = GroundingSource(f, preset=INFIGUI)
    assert len(src) == 1
    (deep, digits) = src.skipped
    assert deep.where.endswith("g.jsonl:2") and deep.kind == "malformed"
    assert deep.reason.startswith("line 2 is nested more than 64 levels deep (MAX_DEPTH)")
    assert digits.where.endswith("g.jsonl:3") and "line 3 holds a number of 5000 characters" in digits.reason


def test_a_grounding_file_over_the_size_limit_is_refused_before_it_is_read(shots, monkeypatch):
    from devices import bounded_json

    f = write_jsonl(shots / "g.jsonl", [{"image": "a.png", "instruction": "ok", "box": [20, 10, 60, 30]}])
    monkeypatch.setattr(bounded_json, "MAX_FILE_BYTES", 10)
    with pytest.raises(PromptSourceError, match=r"g.jsonl cannot be read: .* more than 10 \(MAX_FILE_BYTES\)"):
        GroundingSource(f)


def test_an_image_cut_off_after_its_header_is_a_skipped_item(shots):
    whole = (shots / "b.png").read_bytes()
    (shots / "cut.png").write_bytes(whole[:len(whole) // 2])
    f = write_jsonl(shots / "g.jsonl", [{"image": "cut.png", "instruction": "x", "box": [0, 0, 28, 28]},
                                         {"image": "b.png", "instruction": "y", "box": [0, 0, 28, 28]}])
    src = GroundingSource(f)
    assert len(src) == 2  # the header is whole: the load cannot tell
    with pytest.raises(BadItem, match=r"g.jsonl:1: image .*cut.png \(\d+ bytes\) cannot be decoded: it is cut off"):
        src.prompt(0)
    s = PromptSampler(src, shuffle=False)
    assert ids(s.next_prompts(2)) == ["g:2", "g:2"] and [k.kind for k in s.skipped] == ["bad_item"]


def test_a_stored_frame_that_does_not_decode_is_a_skipped_item(tmp_path):
    run = RunWriter(tmp_path, config={}, run_id="r1")
    click = Action(ActionKind.CLICK, point=Point(0.25, 0.5))
    record_episode(run, [(click, (0.2, 0.4, 0.3, 0.6)), (click, (0.2, 0.4, 0.3, 0.6))], Outcome.SUCCESS)
    frame = sorted((tmp_path / "r1").rglob("frames/*.png"))[0]
    frame.write_bytes(frame.read_bytes()[:100])
    src = TrajectorySource(tmp_path / "r1")
    with pytest.raises(BadItem, match="r1/ep0000/0: .*not a PNG or JPEG"):
        src.prompt(0)
    s = PromptSampler(src, shuffle=False)
    assert ids(s.next_prompts(2)) == ["r1/ep0000/1", "r1/ep0000/1"] and len(s.skipped) == 1

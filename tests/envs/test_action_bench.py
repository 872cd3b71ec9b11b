"""envs.action_bench: GUI-R1's action-benchmark files read as released (Parquet, and JSONL with images), its
metrics as pure functions worked out by hand, and answers mapped to the benchmarks' action names
(a GUI-R1 model's raw output, read as the released scripts read it, is its format's: tests/policy/formats/test_guir1.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from devices.actions import Action, ActionKind, Point
from envs.action_bench.benchmarks import BENCHMARKS, benchmark, infer_benchmark
from envs.action_bench.mapping import from_action
from envs.action_bench.metrics import Counts, grounding_hit, score_step, scores, token_f1
from envs.action_bench.records import decode_image, iter_images, load_actions
from envs.errors import EnvError
from tests.support.action_files import STEPS, H, W, png, write_jsonl, write_parquet


def test_benchmarks_are_named_as_released_and_inferred_from_file_names() -> None:
    assert set(BENCHMARKS) == {"androidcontrol-low", "androidcontrol-high", "guiodyssey", "omniact-web",
                               "omniact-desktop", "guiact-web"}
    for b in BENCHMARKS.values():
        assert infer_benchmark(f"{b.file_stem}.parquet") is b and benchmark(b.title) is b
    assert BENCHMARKS["guiodyssey"].actions[1] == "press_recent" and "impossible" in BENCHMARKS["guiodyssey"].actions
    assert BENCHMARKS["guiact-web"].published["GUI-R1-3B"] == (89.86, 87.42, 76.31)
    assert infer_benchmark("OmniAct-Desktop.jsonl") is BENCHMARKS["omniact-desktop"]
    assert infer_benchmark("androidcontrol.parquet") is None and infer_benchmark("data.parquet") is None
    with pytest.raises(EnvError, match="no action benchmark 'mind2web'"):
        benchmark("mind2web")


def test_parquet_and_jsonl_give_the_same_records(tmp_path: Path) -> None:
    (parquet,) = load_actions(write_parquet(tmp_path / "guiodyssey_test.parquet"))
    (jsonl,) = load_actions(write_jsonl(tmp_path / "j"))
    assert parquet.benchmark is jsonl.benchmark is BENCHMARKS["guiodyssey"]
    assert (parquet.units, jsonl.units) == ("normalized", "pixels")
    assert len(parquet.records) == len(jsonl.records) == len(STEPS) and not parquet.rejected
    for a, b in zip(parquet.records, jsonl.records):
        assert (a.gt_action, a.gt_text, a.instruction, a.history) == (b.gt_action, b.gt_text, b.instruction, b.history)
        assert a.gt_point((W, H)) == pytest.approx(b.gt_point((W, H))) if a.gt_point((W, H)) else b.gt_point((W, H)) is None
        assert a.group == "mobile"  # no group column: the benchmark's platform
    assert jsonl.records[0].gt_box((W, H)) == (0.5, 0.5, 0.7, 0.7)  # pixels [100, 50, 140, 70] of 200 x 100
    images = dict((r.row, data) for r, data in iter_images(parquet, parquet.records, batch=3))
    assert images[4] == png(4) and decode_image(images[4]).shape == (H, W, 3)
    assert [data for _, data in iter_images(jsonl, jsonl.records[2:4])] == [png(2), png(3)]


def test_bad_rows_are_rejected_with_their_reason(tmp_path: Path) -> None:
    bad = [{"instruction": "x", "gt_action": "click", "gt_bbox": [0.1], "gt_input_text": "", "history": "None",
            "task_type": "low", "image": {"bytes": png(0), "path": "x.png"}},
           {"instruction": "", "gt_action": "click", "gt_bbox": [0.1, 0.2], "gt_input_text": "", "history": "None",
            "task_type": "low", "image": {"bytes": png(0), "path": "y.png"}}]
    (data,) = load_actions(write_parquet(tmp_path / "odd.parquet", bad), bench="guiodyssey")
    assert len(data.records) == len(STEPS)
    assert [(r.index, r.kind.value) for r in data.rejected] == [(10, "malformed"), (11, "malformed")]
    assert "'gt_bbox' must be [x, y] or [x1, y1, x2, y2]" in data.rejected[0].reason
    folder = tmp_path / "j"
    path = write_jsonl(folder, "omniact_web_test.jsonl")
    (folder / "shots" / "3.png").unlink()
    path.write_text(path.read_text() + "not json\n", encoding="utf-8")
    (web,) = load_actions(path)
    assert web.benchmark.name == "omniact-web" and len(web.records) == len(STEPS) - 1
    assert {r.kind.value for r in web.rejected} == {"missing_image", "malformed"}
    with pytest.raises(EnvError, match="cannot tell which benchmark odd.parquet is"):
        load_actions(tmp_path / "odd.parquet")
    with pytest.raises(EnvError, match="does not exist"):
        load_actions(tmp_path / "nowhere")


@pytest.mark.parametrize(("pred", "gt", "f1"), [
    ("hello there", "hello world", 0.5),  # {hello} shared: p = r = 1/2, F1 = 0.5
    ("[Search]", "search", 1.0), ("[up] [down]", "up down", 1.0),  # every bracket removed, as released
    ("up", "down", 0.0), ("down", "scroll down", 2 / 3),  # p = 1, r = 1/2: 2 * 1/2 / (3/2)
    ("a", "apple", 1.0),  # two single tokens, one inside the other
])
def test_token_f1_as_released(pred: str, gt: str, f1: float) -> None:
    assert token_f1(pred, gt) == pytest.approx(f1)


def test_grounding_is_a_normalized_distance_under_0_14() -> None:
    assert grounding_hit((0.5, 0.5), (0.5, 0.639))  # 0.139^2 = 0.0193 < 0.0196
    assert not grounding_hit((0.5, 0.5), (0.5, 0.641))
    assert grounding_hit((0.5, 0.5), (0.598, 0.598))  # 2 * 0.098^2 = 0.019208 < 0.0196
    assert not grounding_hit((0.5, 0.5), (0.599, 0.599))  # 2 * 0.099^2 = 0.019602
    assert not grounding_hit((0.5, 0.5), (0.6, 0.6))  # 2 * 0.1^2 = 0.02 >= 0.0196
    assert grounding_hit((0.05, 0.05), None)  # no point reads as (0, 0): 2 * 0.05^2 = 0.005


def test_type_gr_and_sr_by_hand() -> None:
    # the scripted answers of tests/support/action_files.py, step by step (W x H irrelevant: normalized):
    #  0 click (0.5,.5) <- click (.55,.5): type hit; d^2 = .0025 < .0196: GR hit
    #  1 click (.2,.2) <- click (.5,.5): type hit; d^2 = .09 + .09 = .18: GR miss
    #  2 long_press (.1,.9) <- click (.1,.9): type miss; GR hit (the point is checked whatever the action)
    #  3 type "hello world" <- type "hello there": type hit; F1 0.5 >= 0.5: text hit
    #  4 scroll "down" <- scroll "up": type hit; F1 0: text miss
    #  5 press_back <- press_back, 6 complete <- complete, 8 impossible <- impossible: type hits
    #  7 press_recent <- press_home: type miss; 9 long_press (.5,.5) <- drag, no name, point (.9,.9): both miss
    steps = [score_step("mobile", gt, tuple(box) if box[0] >= 0 else None, text, from_action(
        Action.from_dict(answer)).action, from_action(Action.from_dict(answer)).point, from_action(
        Action.from_dict(answer)).text) for gt, box, text, answer in STEPS]
    s = scores(steps)
    # plain: Type 7/10; GR 2/4 (steps 0, 2 of 0, 1, 2, 9); SR (2 GR + 1 text) / (4 + 2) = 3/6
    assert s.plain == {"type": Counts(7, 10), "gr": Counts(2, 4), "sr": Counts(3, 6)}
    # released: categories without a hit leave both sums: long_press's and press_recent's type (0/2, 0/1) and
    # scroll's text (0/1). Type 7/7, GR 2/4 (click 1/2, long_press 1/2), SR (2 + 1) / (4 + 1) = 3/5
    assert s.released == {"type": Counts(7, 7), "gr": Counts(2, 4), "sr": Counts(3, 5)}
    assert s.released["sr"].rate == 0.6 and steps[9].pred_action is None and steps[9].step_hit is False


def test_unified_actions_map_to_the_benchmarks_names() -> None:
    def name(**fields: object) -> tuple:
        p = from_action(Action(**fields))  # type: ignore[arg-type]
        return p.action, p.text

    assert name(kind=ActionKind.HOVER, point=Point(0.1, 0.2)) == ("moveto", "no input text")
    assert name(kind=ActionKind.KEY, keys=("PageDown",)) == ("press_pgdn", "no input text")
    assert name(kind=ActionKind.KEY, keys=("Escape",)) == ("hotkey", "escape")
    assert name(kind=ActionKind.HOTKEY, keys=("Control", "c")) == ("hotkey", "control c")
    assert name(kind=ActionKind.OPEN_APP, text="Maps") == ("open_app", "Maps")
    assert name(kind=ActionKind.ASK_USER, text="where?") == ("impossible", "no input text")
    assert name(kind=ActionKind.OPEN_URL, text="https://example.com") == (None, "no input text")
    assert from_action(None, parse_error="no JSON").parse_error == "no JSON"



"""ScreenSpot / ScreenSpot-v2 / ScreenSpot-Pro loading, scoring, evaluation and drawing on tiny generated datasets.

Every image is 200 x 100 white with filled coloured rectangles exactly where the records' boxes are,
so an oracle policy that finds the named colour in the observation clicks the true box centre.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np
import pytest

from devices.actions import Action, ActionKind, Point
from devices.base import Box, Observation
from envs.errors import EnvError
from agent.grounding_eval import evaluate_grounding
from envs.grounding import GroundingSample, Language, RejectedRecord, RejectKind, load_grounding, rejection_summary
from envs.grounding_score import Abstention, GroundingOutcome, GroundingPrediction, point_in_box, score
from envs.grounding_draw import BOX_RGB, draw_samples
from policy.base import Decision, HistoryEntry
from policy.errors import PolicyParseError

W, H = 200, 100
COLOURS = {"red": (255, 0, 0), "blue": (0, 0, 255), "green": (0, 160, 0), "yellow": (255, 255, 0)}


def make_png(path: Path, rects: Sequence[tuple[str, int, int, int, int]], size: tuple[int, int] = (W, H)) -> None:
    """A white image with filled rectangles (colour, x1, y1, x2, y2), x2/y2 exclusive, RGB."""
    image = np.full((size[1], size[0], 3), 255, dtype=np.uint8)
    for colour, x1, y1, x2, y2 in rects:
        image[y1:y2, x1:x2] = COLOURS[colour]
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), cv2.cvtColor(image, cv2.COLOR_RGB2BGR))


def write_json(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.fixture
def screenspot(tmp_path: Path) -> Path:
    """ScreenSpot v1 layout: screenspot_mobile.json + screenspot_imgs/, two good records and seven bad ones."""
    root = tmp_path / "ss"
    make_png(root / "screenspot_imgs" / "mobile_a.png", [("red", 20, 10, 60, 40), ("blue", 100, 50, 150, 75)])
    make_png(tmp_path / "outside.png", [])
    (root / "screenspot_imgs" / "link.png").symlink_to(tmp_path / "outside.png")
    (root / "screenspot_imgs" / "broken.png").write_bytes(b"not an image")
    good = [
        {"img_filename": "mobile_a.png", "bbox": [20, 10, 40, 30], "instruction": "click the red box",
         "data_type": "text", "data_source": "ios"},
        {"img_filename": "mobile_a.png", "bbox": [100, 50, 50, 25], "instruction": "click the blue box",
         "data_type": "icon", "data_source": "android"},
    ]
    bad = [
        {"img_filename": "../outside.png", "bbox": [0, 0, 5, 5], "instruction": "climb", "data_type": "text"},
        {"img_filename": str(tmp_path / "outside.png"), "bbox": [0, 0, 5, 5], "instruction": "absolute"},
        {"img_filename": "link.png", "bbox": [0, 0, 5, 5], "instruction": "symlink out"},
        {"img_filename": "nope.png", "bbox": [0, 0, 5, 5], "instruction": "missing"},
        {"img_filename": "broken.png", "bbox": [0, 0, 5, 5], "instruction": "not a png"},
        {"img_filename": "mobile_a.png", "bbox": [180, 10, 40, 10], "instruction": "too wide"},
        {"img_filename": "mobile_a.png", "bbox": [20, 10, 40], "instruction": "three numbers"},
        {"img_filename": "mobile_a.png", "bbox": [20, 10, 0, 30], "instruction": "zero width"},
        {"img_filename": "mobile_a.png", "bbox": [20, 10, 40, 30]},
        42,
    ]
    write_json(root / "screenspot_mobile.json", good + bad)
    return root


@pytest.fixture
def screenspot_v2(tmp_path: Path) -> Path:
    root = tmp_path / "ssv2"
    make_png(root / "screenspotv2_image" / "web_1.png", [("green", 0, 0, 10, 10)])
    write_json(root / "screenspot_web_v2.json", [
        # "question" is the field name some ScreenSpot-v2 exports use for the instruction
        {"img_filename": "web_1.png", "bbox": [0, 0, 10, 10], "question": "click the green box",
         "data_type": "icon", "data_source": "shop"},
    ])
    return root


@pytest.fixture
def pro(tmp_path: Path) -> Path:
    """ScreenSpot-Pro layout: annotations/<app>_<platform>.json + images/<app>_<platform>/."""
    root = tmp_path / "pro"
    make_png(root / "images" / "vscode_macos" / "a.png", [("red", 20, 10, 60, 40)])
    make_png(root / "images" / "photoshop_windows" / "b.png", [("yellow", 150, 20, 190, 90)])
    common = {"platform": "macos", "application": "vscode", "group": "Dev", "img_size": [W, H]}
    write_json(root / "annotations" / "vscode_macos.json", [
        {**common, "img_filename": "vscode_macos/a.png", "bbox": [20, 10, 60, 40], "instruction": "click the red box",
         "instruction_cn": "点击红框", "ui_type": "text", "id": "vs-1", "gt_type": "positive"},
        {**common, "img_filename": "vscode_macos/a.png", "instruction": "click the purple box", "ui_type": "icon",
         "id": "vs-neg", "gt_type": "negative"},
        {**common, "img_filename": "vscode_macos/a.png", "bbox": [20, 10, 60, 40], "img_size": [400, 200],
         "instruction": "wrong size", "ui_type": "text", "id": "vs-bad"},
        {**common, "img_filename": "vscode_macos/a.png", "bbox": [60, 40, 20, 10], "instruction": "x2 < x1",
         "ui_type": "text", "id": "vs-flip"},
    ])
    write_json(root / "annotations" / "photoshop_windows.json", [
        {"img_filename": "photoshop_windows/b.png", "bbox": [150, 20, 190, 90], "img_size": [W, H],
         "instruction": "click the yellow box", "application": "photoshop", "platform": "windows",
         "group": "Creative", "ui_type": "icon", "id": "ps-1"},
    ])
    return root


# --- loading -----------------------------------------------------------------------------------

def test_screenspot_boxes_are_xywh_normalized_by_image_size(screenspot: Path) -> None:
    data = load_grounding(screenspot / "screenspot_mobile.json")
    first, second = data.samples
    assert first.box == Box(20 / W, 10 / H, 60 / W, 40 / H) == Box(0.1, 0.1, 0.3, 0.4)
    assert second.box == Box(0.5, 0.5, 0.75, 0.75)
    assert first.image_size == (W, H)
    assert first.image_path == (screenspot / "screenspot_imgs" / "mobile_a.png").resolve()
    assert (first.platform, first.application, first.element_type) == ("mobile", "ios", "text")
    assert (second.platform, second.application, second.element_type) == ("mobile", "android", "icon")
    assert first.source == "screenspot" and not first.negative
    assert first.id == "screenspot_mobile:0"


def test_every_bad_screenspot_record_is_counted_and_listed(screenspot: Path) -> None:
    data = load_grounding(screenspot)  # the folder: every *.json in it
    report = data.report
    assert report.loaded == 2 and len(data.samples) == 2
    assert [(r.index, r.kind) for r in report.rejected] == [
        (2, RejectKind.UNSAFE_PATH), (3, RejectKind.UNSAFE_PATH), (4, RejectKind.UNSAFE_PATH),
        (5, RejectKind.MISSING_IMAGE), (6, RejectKind.UNREADABLE_IMAGE), (7, RejectKind.BOX_OUTSIDE),
        (8, RejectKind.MALFORMED), (9, RejectKind.MALFORMED), (10, RejectKind.MALFORMED), (11, RejectKind.MALFORMED),
    ]
    assert report.counts() == {"unsafe_path": 3, "missing_image": 1, "unreadable_image": 1, "box_outside": 1,
                               "malformed": 4}
    assert all(r.file == screenspot / "screenspot_mobile.json" for r in report.rejected)
    assert "220" in report.rejected[5].reason and "200x100" in report.rejected[5].reason
    assert "screenspot_mobile.json[5]" in str(report.rejected[3])


def test_screenspot_v2_layout_and_field_alias(screenspot_v2: Path) -> None:
    data = load_grounding(screenspot_v2 / "screenspot_web_v2.json")
    (sample,) = data.samples
    assert sample.source == "screenspot-v2"
    assert sample.instruction == "click the green box"
    assert sample.box == Box(0.0, 0.0, 0.05, 0.1)
    assert (sample.platform, sample.application, sample.element_type) == ("web", "shop", "icon")


def test_pro_boxes_are_xyxy_with_negatives_and_size_checks(pro: Path) -> None:
    data = load_grounding(pro)  # finds annotations/*.json and ../images
    by_id = {s.id: s for s in data.samples}
    assert set(by_id) == {"photoshop_windows:ps-1", "vscode_macos:vs-1", "vscode_macos:vs-neg"}
    positive = by_id["vscode_macos:vs-1"]
    assert positive.box == Box(0.1, 0.1, 0.3, 0.4)  # the same pixels as ScreenSpot's xywh [20, 10, 40, 30]
    assert (positive.platform, positive.application, positive.group, positive.element_type) == (
        "macos", "vscode", "Dev", "text")
    assert positive.source == "screenspot-pro"
    negative = by_id["vscode_macos:vs-neg"]
    assert negative.negative and negative.box is None
    assert by_id["photoshop_windows:ps-1"].box == Box(0.75, 0.2, 0.95, 0.9)
    kinds = {(r.file.name, r.index): r.kind for r in data.report.rejected}
    assert kinds == {("vscode_macos.json", 2): RejectKind.SIZE_MISMATCH, ("vscode_macos.json", 3): RejectKind.MALFORMED}


def test_chinese_instructions_and_the_records_without_one(pro: Path, screenspot_v2: Path) -> None:
    cn = load_grounding(pro, language="cn")
    assert [(s.id, s.instruction) for s in cn.samples] == [("vscode_macos:vs-1", "点击红框")]
    # a record without instruction_cn is left out and counted, never scored in English
    assert cn.report.counts() == {"missing_language": 4}
    assert {(r.file.name, r.index) for r in cn.report.rejected} == {
        ("photoshop_windows.json", 0), ("vscode_macos.json", 1), ("vscode_macos.json", 2), ("vscode_macos.json", 3)}
    assert "no Chinese instruction (instruction_cn)" in cn.report.rejected[0].reason
    v2 = load_grounding(screenspot_v2, language=Language.CN)
    assert v2.samples == () and v2.report.counts() == {"missing_language": 1}
    assert load_grounding(pro, language="en").samples[0].instruction == "click the yellow box"
    with pytest.raises(EnvError, match="unknown instruction language 'fr'; use one of en, cn"):
        load_grounding(pro, language="fr")


def test_limit_keeps_the_first_usable_records_of_each_file(pro: Path) -> None:
    one = load_grounding(pro, limit=1)
    assert [s.id for s in one.samples] == ["photoshop_windows:ps-1", "vscode_macos:vs-1"]
    assert one.report.rejected == ()  # the bad records come after the first usable one and are not read
    two = load_grounding(pro, limit=2)
    assert [s.id for s in two.samples] == ["photoshop_windows:ps-1", "vscode_macos:vs-1", "vscode_macos:vs-neg"]
    everything = load_grounding(pro, limit=100)
    assert len(everything.samples) == 3 and len(everything.report.rejected) == 2
    with pytest.raises(EnvError, match="limit must be at least 1"):
        load_grounding(pro, limit=0)


def test_missing_dataset_is_an_env_error_naming_the_path(tmp_path: Path) -> None:
    with pytest.raises(EnvError, match="nowhere.json"):
        load_grounding(tmp_path / "nowhere.json")
    (tmp_path / "empty").mkdir()
    with pytest.raises(EnvError, match="no \\*.json"):
        load_grounding(tmp_path / "empty")


def test_a_corrupt_file_is_listed_and_the_others_load(screenspot_v2: Path) -> None:
    (screenspot_v2 / "screenspot_desktop_v2.json").write_text("{not json", encoding="utf-8")
    (screenspot_v2 / "screenspot_mobile_v2.json").write_text('{"a": 1}', encoding="utf-8")
    data = load_grounding(screenspot_v2)
    assert len(data.samples) == 1
    assert [(r.file.name, r.index, r.kind) for r in data.report.rejected] == [
        ("screenspot_desktop_v2.json", -1, RejectKind.BAD_FILE), ("screenspot_mobile_v2.json", -1, RejectKind.BAD_FILE)]


# --- scoring -----------------------------------------------------------------------------------

def test_point_in_box_edges() -> None:
    box = Box(0.1, 0.1, 0.3, 0.4)
    assert point_in_box(0.3, 0.4, box) and point_in_box(0.1, 0.1, box)
    assert not point_in_box(0.3, 0.4, box, strict=True) and not point_in_box(0.1, 0.2, box, strict=True)
    assert point_in_box(0.2, 0.2, box, strict=True)
    assert not point_in_box(0.30001, 0.2, box)


def test_score_top1_any_candidate_negatives_and_breakdowns(pro: Path) -> None:
    data = load_grounding(pro)
    by_id = {s.id: s for s in data.samples}
    predictions = {
        # exactly on the bottom-right corner, computed as the evaluator would from pixels (60, 40)
        "vscode_macos:vs-1": GroundingPrediction(((60 / W, 40 / H),)),
        # first point misses, second hits inside
        "photoshop_windows:ps-1": GroundingPrediction(((0.1, 0.1), (0.85, 0.5))),
        "vscode_macos:vs-neg": GroundingPrediction(()),  # declared absent
    }
    report = score(data.samples, predictions, rejected=data.report.rejected)
    assert (report.total, report.correct, report.any_correct) == (3, 2, 3)
    assert report.accuracy == pytest.approx(2 / 3) and report.any_accuracy == 1.0
    outcomes = {r.sample.id: r.outcome for r in report.results}
    assert outcomes["photoshop_windows:ps-1"] is GroundingOutcome.WRONG
    assert len(report.rejected) == 2

    strict = score(data.samples, predictions, strict=True)
    assert (strict.correct, strict.any_correct) == (1, 2)  # only the negative top-1; ps-1's 2nd point is inside

    platform = {r.key: (r.total, r.correct, r.any_correct) for r in report.breakdown("platform")}
    assert platform == {"macos": (2, 2, 2), "windows": (1, 0, 1)}
    assert {r.key: r.accuracy for r in report.breakdown("application")} == {"photoshop": 0.0, "vscode": 1.0}
    assert {r.key: r.total for r in report.breakdown("element_type")} == {"icon": 2, "text": 1}
    assert {r.key: r.correct for r in report.breakdown("gt_type")} == {"negative": 1, "positive": 1}
    assert {r.key: r.total for r in report.breakdown("group")} == {"Creative": 1, "Dev": 2}
    as_dict = report.to_dict()
    assert as_dict["breakdowns"]["platform"][1] == {"key": "windows", "total": 1, "correct": 0, "accuracy": 0.0,
                                                    "any_correct": 1, "any_accuracy": 1.0}
    assert len(as_dict["rejected"]) == 2 and "overall" in report.table()
    with pytest.raises(EnvError, match="unknown breakdown"):
        report.breakdown("colour")

    # a point on a negative is wrong; a parse failure or a missing prediction is wrong_format everywhere
    worse = score(data.samples, {
        "vscode_macos:vs-neg": GroundingPrediction(((0.2, 0.2),)),
        "vscode_macos:vs-1": GroundingPrediction(parse_error="no JSON list"),
    })
    assert (worse.correct, worse.any_correct, worse.wrong_format) == (0, 0, 2)
    assert {r.sample.id: r.outcome for r in worse.results}["vscode_macos:vs-neg"] is GroundingOutcome.WRONG
    assert by_id["vscode_macos:vs-neg"].negative

    # abstentions are counted apart: the negative declared absent is right; a positive declared absent is wrong
    assert report.abstention == Abstention(negatives=1, abstained_correctly=1, positives=2, abstained_wrongly=0)
    assert worse.abstention == Abstention(1, 0, 2, 0)
    shy = score(data.samples, {s.id: GroundingPrediction(()) for s in data.samples})
    assert shy.abstention == Abstention(1, 1, 2, 2) and shy.to_dict()["abstention"]["abstained_wrongly"] == 2
    assert shy.abstention.line() == ("abstention: 1/1 negative samples declared absent (100.0%); 2/2 positive samples "
                                     "declared absent wrongly")


def test_screenspot_xywh_edge_is_a_hit(screenspot: Path) -> None:
    samples = load_grounding(screenspot).samples
    report = score(samples, [GroundingPrediction(((60 / W, 40 / H),)), GroundingPrediction(((150 / W, 75 / H),))])
    assert report.correct == 2
    assert score(samples, [GroundingPrediction(((61 / W, 0.2),)), None]).correct == 0
    with pytest.raises(EnvError, match="1 predictions for 2 samples"):
        score(samples, [GroundingPrediction()])


def test_prediction_from_decision_orders_and_dedupes_points() -> None:
    click = lambda x, y: Action(ActionKind.CLICK, point=Point(x, y))  # noqa: E731
    decision = Decision(click(0.1, 0.2), candidates=(click(0.1, 0.2), click(0.5, 0.5)))
    assert GroundingPrediction.from_decision(decision).points == ((0.1, 0.2), (0.5, 0.5))
    absent = GroundingPrediction.from_decision(Decision(Action(ActionKind.INFEASIBLE, text="not here")))
    assert absent.absent and absent.points == ()
    failed = GroundingPrediction.from_decision(Decision(None, raw_output="??", parse_error="no point"))
    assert failed.parse_error == "no point" and not failed.absent


# --- evaluate_grounding ------------------------------------------------------------------------

class ColourOracle:
    """Clicks the centre of the rectangle whose colour the instruction names, found in the RGB frame."""

    name = "colour-oracle"

    def __init__(self) -> None:
        self.in_flight = 0
        self.max_in_flight = 0

    def describe(self) -> dict[str, object]:
        return {"name": self.name}

    async def decide(self, task: str, history: Sequence[HistoryEntry], observation: Observation,
                     n: int = 1) -> Decision:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        await asyncio.sleep(0.01)
        self.in_flight -= 1
        colour = next((c for c in COLOURS if c in task), None)
        mask = np.all(observation.frame == COLOURS[colour], axis=2) if colour else np.zeros((1, 1), bool)
        if not mask.any():
            return Decision(Action(ActionKind.INFEASIBLE, text="target not on screen"))
        ys, xs = np.nonzero(mask)
        x = (xs.mean() + 0.5) / observation.width
        y = (ys.mean() + 0.5) / observation.height
        return Decision(Action(ActionKind.CLICK, point=Point(x, y)))


class FixedPolicy:
    name = "fixed"

    def __init__(self, decision: Decision | Exception) -> None:
        self.decision = decision

    def describe(self) -> dict[str, object]:
        return {"name": self.name}

    async def decide(self, task: str, history: Sequence[HistoryEntry], observation: Observation,
                     n: int = 1) -> Decision:
        if isinstance(self.decision, Exception):
            raise self.decision
        return self.decision


def all_samples(*roots: Path) -> list[GroundingSample]:
    return [s for root in roots for s in load_grounding(root).samples]


def test_oracle_scores_100_and_a_fixed_wrong_point_scores_0(screenspot: Path, screenspot_v2: Path, pro: Path) -> None:
    samples = [s for s in all_samples(screenspot, screenspot_v2, pro) if not s.negative]
    oracle = ColourOracle()
    seen = []
    report = asyncio.run(evaluate_grounding(samples, oracle, concurrency=2, on_result=seen.append))
    assert report.total == 5 and report.accuracy == 1.0 and report.any_accuracy == 1.0
    assert len(seen) == 5 and oracle.max_in_flight == 2
    for result in report.results:  # the oracle's point is the box centre
        assert result.prediction.points[0] == pytest.approx(result.sample.box.center)

    wrong = FixedPolicy(Decision(Action(ActionKind.CLICK, point=Point(0.99, 0.01))))
    report = asyncio.run(evaluate_grounding(samples, wrong))
    assert (report.correct, report.any_correct, report.wrong_format) == (0, 0, 0)


def test_negatives_and_unparsed_outputs_in_evaluation(pro: Path) -> None:
    samples = all_samples(pro)
    report = asyncio.run(evaluate_grounding(samples, ColourOracle()))
    assert report.accuracy == 1.0  # the purple box is absent: the oracle's infeasible is correct

    for broken in (Decision(None, raw_output="blah", parse_error="no action found"),
                   PolicyParseError("unbalanced bracket")):
        report = asyncio.run(evaluate_grounding(samples, FixedPolicy(broken)))
        assert (report.total, report.correct, report.wrong_format) == (3, 0, 3)


def test_evaluation_rejects_a_bad_concurrency(pro: Path) -> None:
    with pytest.raises(EnvError, match="concurrency"):
        asyncio.run(evaluate_grounding(all_samples(pro), ColourOracle(), concurrency=0))


# --- drawing -----------------------------------------------------------------------------------

def test_draw_samples_outlines_the_box_in_place(screenspot: Path, tmp_path: Path) -> None:
    samples = load_grounding(screenspot).samples
    out = tmp_path / "drawn"
    prediction = {samples[0].id: GroundingPrediction(((0.9, 0.2),))}
    paths = draw_samples(samples, out, n=16, seed=0, predictions=prediction)
    assert [p.parent for p in paths] == [out, out] and all(p.suffix == ".png" for p in paths)
    assert draw_samples(samples, tmp_path / "one", n=1, seed=3) == draw_samples(samples, tmp_path / "one", n=1, seed=3)

    image = cv2.cvtColor(cv2.imread(str(paths[0])), cv2.COLOR_BGR2RGB)
    assert image.shape[0] > H and image.shape[1] == W  # caption strip below, pixels in place above
    green, red, white = np.array(BOX_RGB), np.array(COLOURS["red"]), np.array([255, 255, 255])
    left, top, right, bottom = 20, 10, 60, 40  # the first record's box, [left, right) x [top, bottom)
    for x, y in ((left, top), (right - 1, bottom - 1), (left, 25), (40, bottom - 1), (left + 1, 25)):
        assert (image[y, x] == green).all(), (x, y)
    assert (image[25, left - 1] == white).all() and (image[top - 1, 40] == white).all()
    assert (image[25, right] == white).all()
    assert (image[25, 40] == red).all()  # the inside is untouched
    assert (image[20, 180] == np.array([255, 0, 0])).all()  # the prediction's cross at (0.9, 0.2)
    assert os.path.getsize(paths[1]) > 0


# --- files beyond the limits, images cut off after their header ----------------------------------

def test_a_deep_or_huge_number_file_is_a_bad_file_naming_the_record(screenspot_v2: Path) -> None:
    folder = screenspot_v2
    (folder / "deep_web.json").write_text("[" * 100_000 + "]" * 100_000)
    good = {"img_filename": "web_1.png", "bbox": [0, 0, 10, 10], "instruction": "x"}
    (folder / "digits_web.json").write_text(
        json.dumps([good, good])[:-1] + ',\n{"img_filename": "web_1.png", "bbox": [' + "1" * 5000 + ", 0, 1, 1]}]")
    data = load_grounding(folder)
    assert data.report.loaded == 1  # the good file still loads
    bad = {r.file.name: r for r in data.report.rejected}
    assert bad["deep_web.json"].kind is RejectKind.BAD_FILE and bad["deep_web.json"].index == -1
    assert "record 0 (line 1) is nested more than 64 levels deep (MAX_DEPTH)" in bad["deep_web.json"].reason
    assert "record 2 (line 2) holds a number of 5000 characters" in bad["digits_web.json"].reason
    assert "fix or remove that value" in bad["digits_web.json"].reason


def test_a_file_over_the_size_limit_is_refused_before_it_is_read(screenspot_v2: Path, monkeypatch) -> None:
    from devices import bounded_json

    monkeypatch.setattr(bounded_json, "MAX_FILE_BYTES", 100)
    (rejected,) = load_grounding(screenspot_v2).report.rejected
    assert rejected.kind is RejectKind.BAD_FILE and "more than 100 (MAX_FILE_BYTES)" in rejected.reason


def test_an_image_cut_off_after_its_header_is_a_rejected_sample_not_a_crash(screenspot_v2: Path) -> None:
    images = screenspot_v2 / "screenspotv2_image"
    make_png(images / "web_2.png", [("red", 0, 0, 10, 10)])
    whole = (images / "web_2.png").read_bytes()
    (images / "web_2.png").write_bytes(whole[:len(whole) // 2])  # the IHDR header survives: the load accepts it
    write_json(screenspot_v2 / "screenspot_web_v2.json", [
        {"img_filename": "web_1.png", "bbox": [0, 0, 10, 10], "question": "click the green box"},
        {"img_filename": "web_2.png", "bbox": [0, 0, 10, 10], "question": "click the red box"},
    ])
    data = load_grounding(screenspot_v2)
    assert data.report.loaded == 2 and not data.report.rejected
    report = asyncio.run(evaluate_grounding(data.samples, ColourOracle(), rejected=data.report.rejected))
    assert report.total == 1 and report.accuracy == 1.0
    (cut,) = report.rejected
    assert cut.kind is RejectKind.UNREADABLE_IMAGE and cut.file == (images / "web_2.png").resolve()
    assert "cannot be decoded: it is cut off" in cut.reason and "screenspot_web_v2:1" in cut.reason
    assert report.to_dict()["rejected"][0]["kind"] == "unreadable_image"
    # drawing skips it the same way
    assert len(draw_samples(data.samples, screenspot_v2 / "drawn", n=2)) == 1


def test_a_policy_error_surfaces_as_itself_not_in_a_group(pro: Path) -> None:
    from policy.errors import BackendError

    with pytest.raises(BackendError, match="server down"):
        asyncio.run(evaluate_grounding(all_samples(pro), FixedPolicy(BackendError("server down"))))


def test_rejection_summary_counts_kinds_and_shows_the_first() -> None:
    rows = [RejectedRecord(Path("a.json"), i, RejectKind.MISSING_IMAGE, f"image {i} missing") for i in range(7)]
    text = rejection_summary([RejectedRecord(Path("b.json"), -1, RejectKind.BAD_FILE, "not JSON"), *rows])
    assert text.startswith("8 rejected (bad_file: 1, missing_image: 7): b.json: bad_file: not JSON; a.json[0]")
    assert text.endswith("; and 3 more") and rejection_summary([]) == "the dataset holds no records"

"""Rewards of InfiGUI-G1 (AEPO) and GUI-R1, checked against hand-computed values."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from train.collinear import is_collinear
from train.errors import UnknownReward
from train.reward_registry import REWARDS, AnswerKind, get_reward
from envs.action_bench.metrics import token_f1
from train.rewards import (
    RewardResult,
    aepo_reward,
    distance_reward,
    distance_to_box,
    guir1_reward,
    parse_point_list,
)

BOX = (10, 20, 30, 40)  # x1, y1, x2, y2


def think(answer: str) -> str:
    return f"<think>the target is near the top</think>{answer}"


def pts(*points: tuple[float, float]) -> str:
    return "[" + ", ".join(f'{{"point_2d": [{x}, {y}]}}' for x, y in points) + "]"


# ---------------------------------------------------------------- AEPO, scores


@pytest.mark.parametrize(
    ("points", "expected", "rank"),
    [
        # N=1, hit at k=1: 1 + 1/sqrt(1*1) = 2
        (((15, 25),), 2.0, 1),
        # N=2, hit at k=1: 1 + 1/sqrt(2*1) = 1.70710...
        (((15, 25), (100, 100)), 1 + 1 / math.sqrt(2), 1),
        # N=2, hit at k=2: 1 + 1/sqrt(2*2) = 1.5
        (((100, 100), (15, 25)), 1.5, 2),
        # N=3 (not collinear), hit at k=3: 1 + 1/sqrt(9) = 4/3
        (((100, 100), (200, 150), (15, 25)), 4 / 3, 3),
        # N=1 miss: 1 - 1/1 = 0
        (((100, 100),), 0.0, None),
        # N=2 miss: 1 - 1/2 = 0.5
        (((100, 100), (200, 150)), 0.5, None),
        # N=4 miss, no three on a line: 1 - 1/4 = 0.75
        (((100, 100), (200, 150), (0, 300), (50, 7)), 0.75, None),
    ],
)
def test_aepo_code_scores(points, expected, rank):
    r = aepo_reward(think(pts(*points)), BOX)
    assert r.total == pytest.approx(expected)
    assert r.parts["format"] + r.parts["accuracy"] == pytest.approx(r.total)
    assert r.info["num_pred"] == len(points)
    assert r.info["rank"] == rank
    assert r.info["has_correct"] is (rank is not None)
    assert r.info["first_correct"] is (rank == 1)
    assert r.info["is_collinear"] is False


def test_aepo_empty_list_scores_zero():
    # N=0 with a target on screen: 1 + (-1) = 0
    r = aepo_reward(think("[]"), BOX)
    assert r.total == 0.0 and r.parts == {"format": 1.0, "accuracy": -1.0}
    assert r.info["num_pred"] == 0 and r.info["has_correct"] is False


@pytest.mark.parametrize(
    ("x", "y", "hit"),
    [(10, 20, True), (30, 40, True), (10, 40, True), (31, 40, False), (30, 41, False), (9.5, 30, False)],
)
def test_aepo_box_edges_are_inclusive(x, y, hit):
    r = aepo_reward(think(pts((x, y))), BOX)
    assert r.total == (2.0 if hit else 0.0)


def test_aepo_three_collinear_points():
    # (0,0), (50,50), (100,100) lie on y = x: code -1 (format 0, acc -1); paper 1 + (-1) = 0
    resp = think(pts((0, 0), (15, 25), (100, 100)))
    # not collinear; the hit (15, 25) is second of three: 1 + 1/sqrt(3*2) = 1.408
    assert aepo_reward(resp, BOX).total == pytest.approx(1 + 1 / math.sqrt(6))
    resp = think(pts((0, 0), (50, 50), (100, 100)))
    code = aepo_reward(resp, BOX)
    assert code.total == -1.0 and code.parts == {"format": 0.0, "accuracy": -1.0}
    assert code.info["is_collinear"] is True
    paper = aepo_reward(resp, BOX, variant="paper")
    assert paper.total == 0.0 and paper.parts == {"format": 1.0, "accuracy": -1.0}


def test_aepo_collinear_overrides_a_hit():
    # the hit at (20, 30) does not help: (20,30), (40,50), (60,70) are on one line
    assert aepo_reward(think(pts((20, 30), (40, 50), (60, 70))), BOX).total == -1.0


def test_aepo_duplicates():
    # a repeated point makes any triple holding it collinear (N=3) -> -1
    assert aepo_reward(think(pts((15, 25), (15, 25), (200, 7))), BOX).total == -1.0
    # with N=2 no triple exists, so the duplicate is not penalised: 1 + 1/sqrt(2*1)
    assert aepo_reward(think(pts((15, 25), (15, 25))), BOX).total == pytest.approx(1 + 1 / math.sqrt(2))


def test_is_collinear_is_exact_for_integers():
    assert is_collinear([(0, 0), (1, 1), (2, 2)])
    assert not is_collinear([(0, 0), (1, 1), (2, 3)])
    # cross terms 2e18 + 2e9 vs 2e18 + 1e9: relative gap 5e-10 would pass math.isclose, exact ints do not
    assert not is_collinear([(0, 0), (10**9, 10**9 + 1), (2 * 10**9, 2 * 10**9 + 1)])
    assert is_collinear([(0.1, 0.1), (0.2, 0.2), (0.3, 0.3)])  # floats: math.isclose
    assert not is_collinear([(0, 0), (1, 1)])


# ---------------------------------------------------------------- AEPO, parsing


def test_aepo_trailing_brackets_after_the_list_are_ignored():
    # balanced extraction stops at the list's own ']' so " see [1]" is ignored: N=1 hit -> 2
    r = aepo_reward(think(pts((15, 25)) + " see [1]"), BOX)
    assert r.total == 2.0


def test_aepo_bracket_in_prose_before_the_list_breaks_parsing():
    # first '[' is in "[top right]" -> JSON fails -> -1
    r = aepo_reward(think("It is at the [top right]: " + pts((15, 25))), BOX)
    assert r.total == -1.0 and r.info["error"]


@pytest.mark.parametrize(
    "answer",
    [
        '[{"point_2d": [1, 2, 3]}]',  # three numbers
        '[{"point_2d": ["1", 2]}]',  # a string
        '[{"point_2d": [true, 2]}]',  # a bool is not a number
        '[{"point": [1, 2]}]',  # wrong key
        '[{"point_2d": [15, 25]}, [1, 2]]',  # one bad item rejects all
        '{"point_2d": [15, 25]}',  # not a list
        '[{"point_2d": [15, 25]}',  # unbalanced
        "no list at all",
        '[{"point_2d": [NaN, 25]}]',  # not finite
    ],
)
def test_aepo_bad_answers_score_minus_one(answer):
    assert aepo_reward(think(answer), BOX).total == -1.0
    assert aepo_reward(think(answer), BOX, variant="paper").total == -1.0


@pytest.mark.parametrize(
    "response",
    [
        " <think>x</think>" + pts((15, 25)),  # does not start with <think>
        pts((15, 25)),  # no tags
        "<think>x</think><think>y</think>" + pts((15, 25)),  # two <think>
        "<think>x" + pts((15, 25)),  # no </think>
        "<think>x</think></think>" + pts((15, 25)),  # two </think>
        "<think>  \n</think>" + pts((15, 25)),  # empty thinking
        "<think>x</think>  \n",  # nothing after
    ],
)
def test_aepo_think_gate_failures(response):
    r = aepo_reward(response, BOX)
    assert r.total == -1.0 and r.parts == {"format": 0.0, "accuracy": -1.0}


def test_aepo_no_think_mode_skips_the_gate():
    assert aepo_reward(pts((15, 25)), BOX, think=False).total == 2.0
    assert aepo_reward(pts((15, 25)), BOX, think=True).total == -1.0


def test_parse_point_list_accepts_floats_and_extra_keys():
    assert parse_point_list('[{"point_2d": [1.5, 2], "label": "ok"}]') == [(1.5, 2)]


# ---------------------------------------------------------------- AEPO, negatives


def test_aepo_negative_samples():
    # target absent: declaring nothing is the cheapest correct answer, 1 + 1 = 2 (= the best hit)
    r = aepo_reward(think("[]"), None)
    assert r.total == 2.0 and r.info["has_correct"] is True and r.info["negative"] is True
    assert aepo_reward(think("[]"), None, variant="paper").total == 2.0
    # any point is a miss: N=1 -> 1 - 1 = 0; N=2 -> 1 - 1/2 = 0.5
    assert aepo_reward(think(pts((15, 25))), None).total == 0.0
    assert aepo_reward(think(pts((15, 25), (100, 7))), None).total == 0.5
    # format failure stays -1
    assert aepo_reward("[]", None).total == -1.0


def test_aepo_rejects_bad_ground_truth():
    with pytest.raises(ValueError, match="x1 <= x2"):
        aepo_reward(think("[]"), (30, 20, 10, 40))
    with pytest.raises(ValueError, match="variant"):
        aepo_reward(think("[]"), BOX, variant="papr")


# ---------------------------------------------------------------- token F1


@pytest.mark.parametrize(
    ("pred", "gt", "f1"),
    [
        ("a", "apple", 1.0),  # single tokens, substring -> 1
        ("Apple", "a", 1.0),  # either direction, case-folded
        ("[Search]", "search", 1.0),  # brackets stripped
        ("[up] [down]", "up down", 1.0),  # every bracket, as released (replace, not strip)
        ("abc", "xyz", 0.0),
        # {hello, world} vs {hello}: p = 1/2, r = 1 -> 2*(1/2)/(3/2) = 2/3
        ("hello world", "hello", 2 / 3),
        # {new, york, city} vs {new, jersey}: p = 1/3, r = 1/2 -> 2*(1/6)/(5/6) = 0.4
        ("new york city", "new jersey", 0.4),
        # the substring rule is only for single tokens: {a, b} vs {apple} share nothing
        ("a b", "apple", 0.0),
        ("", "", 0.0),
    ],
)
def test_token_f1(pred, gt, f1):
    assert token_f1(pred, gt) == pytest.approx(f1)


# ---------------------------------------------------------------- GUI-R1


def g(action: str, point: str = "[123, 300]", text: str = "no input text", thought: str = "go") -> str:
    item = f"{{'action': '{action}', 'point': {point}, 'input_text': '{text}'}}"
    return f"<think>{thought}</think> <answer>[{item}]</answer>"


def test_guir1_click_in_box():
    # format 1, acc 1 -> 0.8 + 0.2 = 1.0
    r = guir1_reward(g("click"), "click", [100, 280, 150, 320], None)
    assert r.total == pytest.approx(1.0) and r.parts == {"format": 1.0, "accuracy": 1.0}


@pytest.mark.parametrize(
    ("point", "total"),
    [("[101, 300]", 1.0), ("[100, 300]", 0.2), ("[150, 300]", 0.2), ("[123, 280]", 0.2), ("[123, 319]", 1.0)],
)
def test_guir1_box_is_strictly_inside(point, total):
    # box (100, 280, 150, 320): an edge point misses -> only the 0.2 format part
    assert guir1_reward(g("click", point), "click", [100, 280, 150, 320], None).total == pytest.approx(total)


@pytest.mark.parametrize(
    ("point", "total"),
    [
        ("[239, 100]", 1.0),  # distance 139 < 140
        ("[240, 100]", 0.2),  # distance 140, not < 140
        ("[184, 212]", 0.2),  # (84, 112) = 28*(3, 4): distance exactly 140
        ("[183, 212]", 1.0),  # sqrt(83^2 + 112^2) = 139.4
    ],
)
def test_guir1_point_gt_uses_140px(point, total):
    assert guir1_reward(g("click", point), "click", [100, 100], None).total == pytest.approx(total)


def test_guir1_negative_point_falls_back_to_origin():
    # '[-5, 20]' does not match the \d+ point regex -> point (0, 0); format still OK (ints)
    # GT point (50, 50): distance sqrt(50^2 + 50^2) = 70.7 < 140 -> acc 1, total 1.0
    r = guir1_reward(g("click", "[-5, 20]"), "click", [50, 50], None)
    assert r.info["pred_point"] == (0, 0) and r.total == pytest.approx(1.0)
    # GT box (0, 0, 100, 100): (0, 0) is on the edge, not strictly inside -> 0.2
    assert guir1_reward(g("click", "[-5, 20]"), "click", [0, 0, 100, 100], None).total == pytest.approx(0.2)
    # the paper variant reads the sign: (-5, 20) to (50, 50) is 62.6 px -> point term 1
    paper = guir1_reward(g("click", "[-5, 20]"), "click", [50, 50], None, variant="paper")
    assert paper.info["pred_point"] == (-5, 20) and paper.parts["point"] == 1.0


def test_guir1_action_names_with_slash_never_match_in_code():
    # 'close/delete' fails the \w+ regex -> no action -> acc 0; format is fine -> 0.2
    r = guir1_reward(g("close/delete", "[-100, -100]"), "close/delete", None, None)
    assert r.info["pred_action"] is None and r.total == pytest.approx(0.2)
    # paper: every term is right -> 0.2*1 + 0.8*(1 + 1 + 1) = 2.6
    paper = guir1_reward(g("close/delete", "[-100, -100]"), "close/delete", None, None, variant="paper")
    assert paper.total == pytest.approx(2.6)


def test_guir1_wrong_action_gets_format_only():
    assert guir1_reward(g("long_press"), "click", [100, 280, 150, 320], None).total == pytest.approx(0.2)


@pytest.mark.parametrize(
    ("text", "gt_text", "total"),
    [
        ("hello world", "hello", 1.0),  # F1 2/3 >= 0.5
        ("new york city", "new jersey", 0.2),  # F1 0.4 < 0.5
        ("a", "apple", 1.0),  # single-token substring rule
    ],
)
def test_guir1_type_uses_f1(text, gt_text, total):
    assert guir1_reward(g("type", text=text), "type", None, gt_text).total == pytest.approx(total)


def test_guir1_type_needs_text_for_format():
    # 'no input text' on type: format 0; acc: F1('no input text', 'no input text') = 1 -> 0.8
    r = guir1_reward(g("type"), "type", None, "no input text")
    assert r.parts == {"format": 0.0, "accuracy": 1.0} and r.total == pytest.approx(0.8)


def test_guir1_scroll():
    assert guir1_reward(g("scroll", text="down"), "scroll", None, "down").total == pytest.approx(1.0)
    # 'downward' is not a direction -> format 0; single tokens, 'down' in 'downward' -> acc 1 -> 0.8
    r = guir1_reward(g("scroll", text="downward"), "scroll", None, "down")
    assert r.parts == {"format": 0.0, "accuracy": 1.0} and r.total == pytest.approx(0.8)


def test_guir1_other_actions_score_on_type():
    assert guir1_reward(g("press_back", "[-100, -100]"), "press_back", None, None).total == pytest.approx(1.0)
    assert guir1_reward(g("PRESS_BACK", "[-100, -100]"), "press_back", None, None).parts["accuracy"] == 1.0


def test_guir1_impossible_is_a_negative_sample():
    r = guir1_reward(g("impossible", "[-100, -100]"), "impossible", None, None)
    assert r.total == pytest.approx(1.0)
    # clicking when the task is impossible earns format only
    assert guir1_reward(g("click"), "impossible", None, None).total == pytest.approx(0.2)


@pytest.mark.parametrize(
    "response",
    [
        # no think
        "<answer>[{'action': 'click', 'point': [123, 300], 'input_text': 'no input text'}]</answer>",
        g("click") + " trailing",  # not a full match
        "<think>go</think> <answer>click at 123 300 'action': 'click' [123, 300]</answer>",  # not a literal
        g("click", "[123.0, 300]"),  # float coordinate
        g("click", "[123, 300, 5]"),  # three coordinates
        # no input_text
        "<think>go</think> <answer>[{'action': 'click', 'point': [123, 300]}]</answer>",
        "<think>go</think> <answer>[]</answer>",  # empty list
    ],
)
def test_guir1_format_failures(response):
    r = guir1_reward(response, "click", [100, 280, 150, 320], None)
    assert r.parts["format"] == 0.0 and r.info["error"]


def test_guir1_format_failure_still_scores_accuracy():
    # no <think>: format 0 but the regexes still find click at (123, 300) inside the box -> 0.8
    resp = "<answer>[{'action': 'click', 'point': [123, 300], 'input_text': 'no input text'}]</answer>"
    assert guir1_reward(resp, "click", [100, 280, 150, 320], None).total == pytest.approx(0.8)


def test_guir1_reads_the_answer_not_the_thinking():
    # the first [int, int] of the whole string is in the thinking; the answer's point is used
    resp = g("click", "[123, 300]", thought="not [5, 5] but lower")
    assert guir1_reward(resp, "click", [100, 280, 150, 320], None).info["pred_point"] == (123, 300)


def test_guir1_paper_variant_sums_terms():
    # click right action, point outside: 0.2*1 + 0.8*(1 + 0 + 1[text n/a -> R_act]) = 1.8
    r = guir1_reward(g("click", "[5, 5]"), "click", [100, 280, 150, 320], None, variant="paper")
    assert r.parts == {"format": 1.0, "action": 1.0, "point": 0.0, "text": 1.0}
    assert r.total == pytest.approx(1.8)
    # custom weights, type right but text wrong: 1*1 + 2*(1 + 1 + 0) = 5
    r = guir1_reward(g("type", text="abc"), "type", None, "xyz", variant="paper", alpha=1.0, beta=2.0)
    assert r.total == pytest.approx(5.0)
    # wrong action, point accidentally right: 0.2 + 0.8*(0 + 1 + 0) = 1.0
    r = guir1_reward(g("long_press"), "click", [100, 280, 150, 320], None, variant="paper")
    assert r.total == pytest.approx(1.0)


def test_guir1_rejects_bad_ground_truth():
    with pytest.raises(ValueError, match="needs gt_box_or_point"):
        guir1_reward(g("click"), "click", None, None)
    with pytest.raises(ValueError, match=r"\[x, y\]"):
        guir1_reward(g("click"), "click", [1, 2, 3], None)
    with pytest.raises(ValueError, match="gt_text"):
        guir1_reward(g("type", text="x"), "type", None, None)


# ---------------------------------------------------------------- registry


def test_registry():
    assert get_reward("aepo").fn is aepo_reward and get_reward("guir1").fn is guir1_reward
    assert get_reward("aepo_paper").fn(think(pts((0, 0), (1, 1), (2, 2))), BOX).total == 0.0
    assert get_reward("guir1_paper").fn(g("click"), "click", [100, 280, 150, 320], None).total == pytest.approx(2.6)
    with pytest.raises(UnknownReward, match="did you mean 'aepo'"):
        get_reward("aepoo")
    assert all(callable(spec.fn) and spec.name == name for name, spec in REWARDS.items())
    assert sorted(REWARDS) == ["aepo", "aepo_no_collinear", "aepo_paper", "distance", "guir1", "guir1_paper"]


def test_registry_scores_a_target_as_its_function_does():
    target = {"box": BOX, "point": (20, 30), "action": "click", "text": None, "coord_size": (100, 100)}
    answer = think(pts((15, 25)))
    assert get_reward("aepo").score(target, answer, think=True) == aepo_reward(answer, BOX)
    assert get_reward("aepo").answer is AnswerKind.POINT_LIST and get_reward("aepo").reads_point_list
    assert get_reward("distance").score(target, answer, think=True, threshold=0.1) == \
        distance_reward(answer, BOX, threshold=0.1, image_size=(100, 100))
    assert get_reward("distance").needs_threshold and not get_reward("guir1").reads_point_list
    click = g("click")
    assert get_reward("guir1").score(target, click, think=True) == guir1_reward(click, "click", list(BOX), None)


# ---------------------------------------------------------------- properties

FRAGMENTS = st.sampled_from(
    ["<think>", "</think>", "<answer>", "</answer>", "[", "]", "{", "}", '"point_2d": ', "'action': ", "'click'",
     "'point': ", "'input_text': ", "[12, 30]", "[-3, 4]", ", ", "1", "2.5", "'type'", "'scroll'", "'down'",
     " ", "x", "NaN"]
)
RESPONSES = st.one_of(st.text(max_size=200), st.lists(FRAGMENTS, max_size=40).map("".join))


@settings(max_examples=300, deadline=None)
@given(response=RESPONSES, variant=st.sampled_from(["code", "paper"]), think_mode=st.booleans(),
       negative=st.booleans())
def test_aepo_never_raises_and_stays_in_range(response, variant, think_mode, negative):
    r = aepo_reward(response, None if negative else BOX, think=think_mode, variant=variant)
    assert isinstance(r, RewardResult)
    assert -1.0 <= r.total <= 2.0
    assert r.total == pytest.approx(r.parts["format"] + r.parts["accuracy"])


@settings(max_examples=300, deadline=None)
@given(response=RESPONSES, gt=st.sampled_from([
    ("click", [100, 280, 150, 320], None), ("click", [10, 30], None), ("type", None, "hello"),
    ("scroll", None, "down"), ("press_back", None, None), ("impossible", None, None)]))
def test_guir1_never_raises_and_stays_in_range(response, gt):
    code = guir1_reward(response, *gt)
    assert min(abs(code.total - v) for v in (0.0, 0.2, 0.8, 1.0)) < 1e-9
    paper = guir1_reward(response, *gt, variant="paper")
    assert -1e-9 <= paper.total <= 0.2 + 3 * 0.8 + 1e-9


@settings(max_examples=200, deadline=None)
@given(pred=st.text(max_size=40), gt=st.text(max_size=40))
def test_token_f1_is_a_symmetric_fraction(pred, gt):
    f = token_f1(pred, gt)
    assert 0.0 <= f <= 1.0 and f == pytest.approx(token_f1(gt, pred))


# ---------------------------------------------------------------- distance reward

# image 300 x 400: diagonal 500; box (100, 100, 200, 200)
DBOX = (100, 100, 200, 200)


def dist(response: str, box=DBOX, threshold: float = 0.2, **kw) -> RewardResult:
    return distance_reward(response, box, threshold=threshold, image_size=(300, 400), **kw)


@pytest.mark.parametrize(
    ("points", "accuracy", "d_px"),
    [
        (((150, 150),), 1.0, 0.0),  # inside
        (((200, 150),), 1.0, 0.0),  # on the edge: inside
        (((230, 150),), 0.7, 30.0),  # d = 30, d/D = 0.06, 1 - 0.06/0.2 = 0.7
        (((224, 232),), 0.6, 40.0),  # dx 24, dy 32: d = 40, d/D = 0.08, 1 - 0.08/0.2 = 0.6
        (((76, 68),), 0.6, 40.0),  # the same distance up and left of the box
        (((400, 400),), 0.0, 200 * math.sqrt(2)),  # d/D = 0.566 > 0.2: no credit
        (((400, 400), (150, 150)), 0.0, 200 * math.sqrt(2)),  # only the first point counts
    ],
)
def test_distance_reward_values(points, accuracy, d_px):
    r = dist(think(pts(*points)))
    assert r.parts == {"format": 1.0, "accuracy": pytest.approx(accuracy)}
    assert r.total == pytest.approx(1.0 + accuracy)
    assert r.info["distance_px"] == pytest.approx(d_px) and r.info["distance"] == pytest.approx(d_px / 500)
    assert r.info["has_correct"] == (d_px == 0.0) and r.info["num_pred"] == len(points)


def test_distance_reward_threshold_zero_counts_only_hits():
    assert dist(think(pts((224, 232))), threshold=0.0).total == 1.0
    assert dist(think(pts((150, 150))), threshold=0.0).total == 2.0


def test_distance_reward_empty_lists_negatives_and_format():
    assert dist(think("[]")).total == 1.0  # target present, no point: format only
    assert dist(think("[]"), box=None).total == 2.0  # negative: abstaining is right
    neg = dist(think(pts((10, 10))), box=None)
    assert neg.total == 1.0 and neg.info["negative"] and not neg.info["has_correct"]
    for bad in (pts((150, 150)), think("no list here"), think('[{"point_2d": [1]}]')):
        r = dist(bad)
        assert r.total == 0.0 and r.parts == {"format": 0.0, "accuracy": 0.0} and r.info["error"]
    assert dist(pts((150, 150)), think=False).total == 2.0


def test_distance_reward_rejects_bad_arguments():
    with pytest.raises(ValueError, match="threshold"):
        dist(think(pts((1, 1))), threshold=-0.1)
    with pytest.raises(ValueError, match="image_size"):
        distance_reward(think(pts((1, 1))), DBOX, threshold=0.1, image_size=(0, 10))
    with pytest.raises(ValueError, match="x1 <= x2"):
        dist(think(pts((1, 1))), box=(200, 100, 100, 200))
    assert get_reward("distance").fn is distance_reward


def test_distance_to_box():
    assert distance_to_box(5, 5, (0, 0, 10, 10)) == 0.0
    assert distance_to_box(13, 14, (0, 0, 10, 10)) == 5.0  # 3-4-5 from the corner
    assert distance_to_box(-2, 5, (0, 0, 10, 10)) == 2.0


@settings(max_examples=200, deadline=None)
@given(response=RESPONSES, negative=st.booleans(), threshold=st.floats(0, 1))
def test_distance_reward_never_raises_and_stays_in_range(response, negative, threshold):
    r = dist(response, box=None if negative else DBOX, threshold=threshold)
    assert 0.0 <= r.total <= 2.0 and r.total == pytest.approx(r.parts["format"] + r.parts["accuracy"])


def test_aepo_without_the_collinear_penalty_scores_a_collinear_list_like_any_other():
    # three points on y = 10, the second inside the box (0, 0, 20, 20): N = 3, k = 2
    text = '[{"point_2d": [30, 10]}, {"point_2d": [10, 10]}, {"point_2d": [50, 10]}]'
    penalised = aepo_reward(text, (0, 0, 20, 20), think=False)
    assert penalised.total == -1.0 and penalised.info["is_collinear"]
    free = aepo_reward(text, (0, 0, 20, 20), think=False, collinear_penalty=False)
    assert free.total == pytest.approx(1 + 1 / math.sqrt(3 * 2))
    assert free.info["is_collinear"] is None  # not tested: the penalty is off, the O(N^2) test is skipped
    assert free.info["rank"] == 2 and free.parts == {"format": 1.0, "accuracy": pytest.approx(1 / math.sqrt(6))}
    miss = aepo_reward(text, (100, 100, 120, 120), think=False, collinear_penalty=False)
    assert miss.total == pytest.approx(1 - 1 / 3)

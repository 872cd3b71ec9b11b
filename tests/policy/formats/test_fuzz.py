"""Every model output is a parse result or a parse error, and every response a finite reward, in linear time.

Properties over mutated valid outputs of every family (the mutator and corpus of ``bench.fuzz.inputs``,
driven by hypothesis), over the inputs the fuzzer found (each crashed or took seconds before), and
complexity shown by counting executed lines, not by timing (timings are in ``python -m bench.fuzz``).
"""

from __future__ import annotations

import math
import random
import sys
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.fuzz.inputs import KNOWN_INPUTS, VALID, mutate
from bench.fuzz.naive import OLD_FORMAT_RE, items, parabola, tags_closed
from bench.fuzz.run import FRAME, Target, preset_of, targets
from devices.actions import Action
from policy.errors import CoordinateError, FormatParseError
from policy.formats import get_format
from policy.formats.base import MAX_OUTPUT_CHARS, Parsed
from train.collinear import is_collinear
from train.rewards import RewardResult, aepo_reward, distance_reward, guir1_format_ok, guir1_reward

TARGETS = {group: targets(group) for group in VALID}


def check(group: str, text: str, rng: random.Random) -> list[Any]:
    """Run ``text`` through every target of ``group`` and assert the properties; the results (None for a parse
    error)."""
    results = []
    for target in TARGETS[group]:
        try:
            result = target.run(text, rng)
        except FormatParseError as e:
            assert target.parser, f"{target.name} is a reward and raised {e!r}"
            assert str(e)  # a message that says what failed
            results.append(None)
            continue
        assert_valid(target, result)
        results.append(result)
    return results


def assert_valid(target: Target, result: Any) -> None:
    if isinstance(result, Parsed):
        assert result.actions, f"{target.name} parsed no action"
        for action in result.actions:
            assert isinstance(action, Action)
            for p in (action.point, action.end):
                assert p is None or (0.0 <= p.x <= 1.0 and 0.0 <= p.y <= 1.0), f"{target.name}: {action}"
    elif isinstance(result, RewardResult):
        for v in (result.total, *result.parts.values()):
            assert isinstance(v, float) and math.isfinite(v), f"{target.name}: {result}"
    else:  # strict_parse: model-space points (infinite for numbers too large, which no hit test accepts)
        assert isinstance(result, list) and all(isinstance(v, float) for p in result for v in p), target.name


# -- mutated valid outputs ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("group", sorted(VALID))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_outputs_parse_or_are_parse_errors(group: str, data: st.DataObject) -> None:
    rng = data.draw(st.randoms(use_true_random=False))
    text = mutate(rng.choice(VALID[group]), rng)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no SyntaxWarning / DeprecationWarning from reading a model's text
        check(group, text, rng)


@pytest.mark.parametrize("group", sorted(VALID))
def test_every_valid_output_parses(group: str) -> None:
    for text in VALID[group]:
        for target, result in zip(TARGETS[group], check(group, text, random.Random(0))):
            assert result is not None, (target.name, text)
            if target.name == "parse infigui-g1" and text.endswith("[]"):  # "nothing there": an abstention
                assert [a.kind.value for a in result.actions] == ["infeasible"], text


# -- the inputs the fuzzer found -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("group", "text"), KNOWN_INPUTS,
                         ids=[f"{i}-{g}-{len(t)}chars" for i, (g, t) in enumerate(KNOWN_INPUTS)])
def test_known_inputs(group: str, text: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check(group, text, random.Random(0))


def parse(group: str, text: str) -> Parsed:
    preset = preset_of(group)
    return get_format(preset.family).parse(text, preset.space(FRAME), preset)


BIG = "1" * 400


@pytest.mark.parametrize(("group", "text"), [
    ("gui-r1", f"<think>t</think><answer>[{{'action': 'click', 'point': [{BIG}, 5], 'input_text': 'x'}}]</answer>"),
    ("infigui-g1", f'<think>t</think>[{{"point_2d": [{BIG}, 5]}}]'),
    ("qwen2.5-vl/grounding", f'[{{"point_2d": [5, -{BIG}]}}]'),
    ("qwen2.5-vl/computer_use", '<tool_call>{"name": "computer_use", "arguments": {"action": "left_click", '
                                f'"coordinate": [{BIG}, 5]}}}}</tool_call>'),
])
def test_a_coordinate_no_screen_can_have_is_a_coordinate_error(group: str, text: str) -> None:
    with pytest.raises(CoordinateError, match=r"coordinate -?1\.11e399 is not a number a screen can have"):
        parse(group, text)


def test_ui_tars_reads_ascii_digits_only() -> None:
    for digits in ("٣", "３", "³"):
        with pytest.raises(FormatParseError, match="is not '\\(x,y\\)'"):
            parse("ui-tars-1.5/computer", f"Action: click(start_box='({digits},5)')")
    assert parse("ui-tars-1.5/computer", "Action: click(start_box='(3,5)')").actions


def test_qwen_action_must_be_a_string() -> None:
    for value in ("[]", "{}", "3", "null"):
        text = '<tool_call>{"name": "computer_use", "arguments": {"action": ' + value + "}}</tool_call>"
        with pytest.raises(FormatParseError, match="must be a string naming the action"):
            parse("qwen2.5-vl/computer_use", text)


@pytest.mark.parametrize("group", sorted(VALID))
def test_output_longer_than_the_parser_reads_is_a_parse_error(group: str) -> None:
    text = VALID[group][0] + " " * MAX_OUTPUT_CHARS
    with pytest.raises(FormatParseError, match=f"output of {len(text):,} characters is longer than the parser reads"):
        parse(group, text)


def test_rewards_score_an_absurd_point_as_a_miss() -> None:
    infigui = f'<think>t</think>[{{"point_2d": [{BIG}, 5]}}]'
    huge = f'<think>t</think>[{{"point_2d": [{"9" * 5000}, 5]}}]'
    for text in (infigui, huge):
        miss = aepo_reward(text, (0, 0, 10, 10))
        assert miss.total == 0.0 and miss.info["format_ok"] and not miss.info["has_correct"]  # 1 - 1/N, N = 1
        d = distance_reward(text, (0, 0, 10, 10), threshold=0.5, image_size=(100, 100))
        assert d.total == 1.0 and d.parts["accuracy"] == 0.0
    guir1 = f"<think>t</think><answer>[{{'action': 'click', 'point': [{BIG}, 5], 'input_text': 'x'}}]</answer>"
    r = guir1_reward(guir1, "click", [5, 5], None)
    assert r.parts == {"format": 1.0, "accuracy": 0.0} and r.info["pred_point"] == (math.inf, 5)
    assert guir1_reward(guir1.replace(BIG, "1" * 5000), "click", [5, 5], None).total == 0.0


def test_guir1_reward_prints_no_syntax_warning() -> None:
    text = "<think>t</think><answer>[{'action': 'type', 'point': [1, 2], 'input_text': '\\d'}]</answer>"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert guir1_reward(text, "type", None, "\\d").total == 1.0
        assert guir1_reward("<think>t</think><answer>[{'a': 1}('x')]</answer>", "click", [1, 2], None).total == 0.0


def test_a_response_longer_than_the_parsers_read_is_a_format_failure() -> None:
    long = "<think>t</think>" + '[{"point_2d": [1, 2]}]' + " " * MAX_OUTPUT_CHARS
    r = aepo_reward(long, (0, 0, 10, 10))
    assert r.total == -1.0 and "longer than the reward reads" in r.info["error"]
    assert guir1_reward("<think>t</think><answer>" + " " * MAX_OUTPUT_CHARS + "</answer>", "click", [1, 1], None
                        ).parts == {"format": 0.0, "accuracy": 0.0}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["<think>", "</think>", "<answer>", "</answer>", " ", "\n", "x", "\u2003"]),
                max_size=12))
def test_the_one_pass_format_test_agrees_with_the_released_regex(parts: list[str]) -> None:
    text = "".join(parts)
    tags_fail = guir1_format_ok(text)[1] == "not <think>...</think> <answer>...</answer>"
    assert tags_fail == (OLD_FORMAT_RE.fullmatch(text) is None)


# -- complexity, by counting executed lines ---------------------------------------------------------------------

def lines_run(fn: Callable[[], Any]) -> int:
    """Python lines executed by ``fn()`` (every frame, library code included): a count of work that does not
    depend on the machine or its load."""
    count = 0

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
        return tracer

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(previous)
    return count


def attempt(group: str, text: str) -> None:
    try:
        parse(group, text)
    except FormatParseError:
        pass


def kwargs_call(n: int) -> str:
    return "Action: click(start_box='(1,2)', " + ", ".join(f"k{i}='v'" for i in range(n)) + ")"


def one_per_line(n: int) -> str:
    return "<think>t</think><answer>" + items(n, ",\n", "café") + "</answer>"


@pytest.mark.parametrize(("what", "run", "n"), [
    ("GUI-R1 items, one per line, non-ASCII", lambda n: attempt("gui-r1", one_per_line(n)), 90),
    ("GUI-R1 format test of the reward", lambda n: guir1_format_ok(tags_closed(n)), 300),
    ("UI-TARS keyword arguments", lambda n: attempt("ui-tars-1.5/computer", kwargs_call(n)), 500),
    ("InfiGUI-G1 points", lambda n: attempt("infigui-g1", '<think>t</think>[' + ", ".join(
        [f'{{"point_2d": [{i % 1000}, {i % 700}]}}' for i in range(n)]) + "]"), 250),
])
def test_parsing_work_grows_linearly(what: str, run: Callable[[int], Any], n: int) -> None:
    small, large = lines_run(lambda: run(n)), lines_run(lambda: run(10 * n))
    assert large <= 13 * small, f"{what}: {small} lines for n = {n}, {large} for 10 n"


def test_the_collinear_test_is_quadratic_not_cubic() -> None:
    small, large = lines_run(lambda: is_collinear(parabola(50))), lines_run(lambda: is_collinear(parabola(500)))
    assert large <= 130 * small, (small, large)  # 10x the points: 100x the pairs (cubic would be 1000x)
    floats = [(x + 0.5, y + 0.25) for x, y in parabola(50)]
    floats_large = [(x + 0.5, y + 0.25) for x, y in parabola(500)]
    assert lines_run(lambda: is_collinear(floats_large)) <= 150 * lines_run(lambda: is_collinear(floats))


def test_the_collinear_test_is_skipped_without_the_penalty() -> None:
    text = '[' + ", ".join(f'{{"point_2d": [{x}, {y}]}}' for x, y in parabola(300)) + "]"
    with_penalty = lines_run(lambda: aepo_reward(text, (0, 0, 10, 10), think=False))
    without = lines_run(lambda: aepo_reward(text, (0, 0, 10, 10), think=False, collinear_penalty=False))
    assert without * 10 < with_penalty  # what is left: reading the list, linear
    assert aepo_reward(text, (0, 0, 10, 10), think=False, collinear_penalty=False).info["is_collinear"] is None


# -- the collinear test against the released one -----------------------------------------------------------------

def released_is_collinear(points: list[tuple[float, float]]) -> bool:
    """recipe/infigui-g1's test: every triple (cubic), exact for integers, math.isclose for floats."""
    for i, (x1, y1) in enumerate(points):
        for j in range(i + 1, len(points)):
            x2, y2 = points[j]
            for x3, y3 in points[j + 1:]:
                lhs, rhs = (y2 - y1) * (x3 - x1), (y3 - y1) * (x2 - x1)
                if lhs == rhs or (not (isinstance(lhs, int) and isinstance(rhs, int)) and math.isclose(lhs, rhs)):
                    return True
    return False


COORD = st.one_of(st.integers(-6, 6), st.integers(-10**12, 10**12),
                  st.floats(-10, 10, allow_nan=False).map(lambda v: round(v, 1)))


@settings(max_examples=400, deadline=None)
@given(points=st.lists(st.tuples(COORD, COORD), min_size=0, max_size=8), t=st.floats(-3, 3),
       eps=st.sampled_from([0.0, 1e-12, 1e-10, 1e-8, 1e-6]))
def test_is_collinear_agrees_with_the_released_test(points: list[tuple[Any, Any]], t: float, eps: float) -> None:
    assert is_collinear(points) == released_is_collinear(points)
    if len(points) >= 2:  # a third point on (or within eps of) the line through the first two
        (ax, ay), (bx, by) = points[0], points[1]
        near = [*points, (ax + t * (bx - ax), ay + t * (by - ay) * (1 + eps))]
        assert is_collinear(near) == released_is_collinear(near)


def test_is_collinear_with_integers_beyond_floats() -> None:
    huge = 10**400
    assert is_collinear([(0, 0), (huge, huge), (2 * huge, 2 * huge)])
    assert not is_collinear([(0, 0), (huge, huge + 1), (2 * huge, 2 * huge + 1)])
    assert is_collinear([(0.5, 0.5), (huge, huge), (1.5, 1.5)])  # floats and a huge integer: exact fractions
    assert not is_collinear([(0.5, 0.0), (huge, 1), (1.5, 3.0)])

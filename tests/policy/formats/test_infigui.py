"""InfiGUI-G1: goldens against transformers' processor, the execution and reward parsers, properties."""

from __future__ import annotations

import json
from dataclasses import replace
from functools import lru_cache

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.policy.formats.fuzz import apply_mutations

from devices.actions import Action, ActionKind, Point
from policy.base import HistoryEntry
from policy.errors import CoordinateError, FormatParseError
from policy.formats import get_format
from policy.formats.infigui import EMPTY_LIST_REASON, InfiGuiG1Format, strict_parse
from policy.presets import PRESETS, ModelPreset
from tests.policy.reference import GOLDEN_SIZES, reference_input_size

FAMILY = "infigui-g1"
FAMILY_PRESETS = [p for p in PRESETS.values() if p.family == FAMILY]
THINK = FAMILY_PRESETS[0]
NO_THINK = replace(THINK, variant="no_think")
FMT = InfiGuiG1Format()
SPACE = THINK.space((1920, 1080))
W_, H_ = SPACE.input_size
PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SYSTEM = ("You FIRST think about the reasoning process as an internal monologue and then provide the final answer.\n"
          "The reasoning process MUST BE enclosed within <think> </think> tags.")


@lru_cache(maxsize=None)
def ref(frame: tuple[int, int], preset: ModelPreset) -> tuple[int, int]:
    return reference_input_size(frame[0], frame[1], preset.min_pixels, preset.max_pixels,
                                preset.pre_resize.value, preset.pre_resize_pixels)


def P(x: float, y: float) -> Point:
    return Point(x / W_, y / H_)


def test_registry_serves_this_class() -> None:
    assert isinstance(get_format(FAMILY), InfiGuiG1Format)
    assert len(FAMILY_PRESETS) >= 2


# -- goldens ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("frame", GOLDEN_SIZES)
@pytest.mark.parametrize("preset", FAMILY_PRESETS, ids=lambda p: p.model_id)
def test_golden_input_size(preset: ModelPreset, frame: tuple[int, int]) -> None:
    assert preset.input_size(frame) == ref(frame, preset)


def test_4k_is_pre_resized() -> None:
    # 3840 x 2160 exceeds 5600*28*28 px, so the evaluation's downscale applies before smart_resize
    assert ref((3840, 2160), THINK) == (2800, 1568)


@pytest.mark.parametrize("frame", GOLDEN_SIZES)
@pytest.mark.parametrize("preset", [THINK, NO_THINK], ids=["think", "no_think"])
def test_golden_prompt(preset: ModelPreset, frame: tuple[int, int]) -> None:
    w, h = ref(frame, preset)
    prompt = FMT.build_prompt('the "OK" button', [HistoryEntry(Action(ActionKind.BACK))], preset.space(frame), preset)
    user = prompt.messages[-1]
    assert user["role"] == "user"
    assert user["content"] == [
        {"type": "image", "image": "current"},
        {"type": "text", "text": f"The screen's resolution is {w}x{h}.\n"
                                 'Locate the UI element(s) for "the "OK" button", output the coordinates using JSON '
                                 'format: [{"point_2d": [x, y]}, ...]'},
    ]
    if preset.variant == "think":
        assert prompt.messages[0] == {"role": "system", "content": [{"type": "text", "text": SYSTEM}]}
    else:
        assert len(prompt.messages) == 1


@pytest.mark.parametrize("frame", GOLDEN_SIZES)
def test_golden_known_point_maps_to_frame(frame: tuple[int, int]) -> None:
    W, H = frame
    w, h = ref(frame, THINK)
    x, y = 2 * w // 3, h // 5
    space = THINK.space(frame)
    parsed = FMT.parse(f'<think>the button is top right</think>\n[{{"point_2d": [{x}, {y}]}}]', space, THINK)
    (action,) = parsed.actions
    assert action.kind is ActionKind.CLICK
    assert action.point.x == pytest.approx(x / w) and action.point.y == pytest.approx(y / h)
    u, v = space.to_frame_pixels(action.point)
    assert u == pytest.approx(x * W / w) and v == pytest.approx(y * H / h)
    assert parsed.model_points == ((x, y),) and parsed.thought == "the button is top right"


# -- execution parser ---------------------------------------------------------------------------------

def parse(text: str):
    return FMT.parse(text, SPACE, THINK)


def test_all_candidates_in_order() -> None:
    parsed = parse('<think>two options</think>[{"point_2d": [10, 20]}, {"point_2d": [30, 40]}, {"point_2d": [5, 6]}]')
    assert parsed.actions == tuple(Action(ActionKind.CLICK, p) for p in (P(10, 20), P(30, 40), P(5, 6)))
    assert parsed.info == {"candidates": 3, "truncated": False}


@pytest.mark.parametrize(("text", "points", "thought"), [
    ('[{"point_2d": [1, 2]}]', [(1, 2)], None),  # no think block at all
    ('<think>a</think><think>b</think>\n[{"point_2d": [1, 2]}]', [(1, 2)], "b"),  # after the last </think>
    ('<think>see [1]</think>```json\n[{"point_2d": [1, 2]}]\n```\nHope this helps [1].', [(1, 2)], "see [1]"),
    ('<think>x</think>[{"point_2d": [1.5, 2.25], "label": "ok"}]', [(1.5, 2.25)], "x"),
    ('<think>x</think>[{"point_2d": [1, 2]}, {"point_2d": [3, 4', [(1, 2)], "x"),  # truncated final item
    ('mono</think>[{"point_2d": [1, 2]}]', [(1, 2)], "mono"),  # prompt-prefilled <think>
])
def test_execution_parser_tolerance(text: str, points: list, thought: str | None) -> None:
    parsed = parse(text)
    assert [tuple(p) for p in parsed.model_points] == points and parsed.thought == thought


@pytest.mark.parametrize("text", ['<think>not there</think>[]', "[ ]", '<think>x</think>\n```json\n[]\n```'])
def test_empty_list_is_an_abstention(text: str) -> None:
    # The released reward scores [] on a negative sample as its best answer; at run time it ends the task as
    # infeasible, with no point and no candidate.
    parsed = parse(text)
    assert [a.kind for a in parsed.actions] == [ActionKind.INFEASIBLE]
    assert parsed.actions[0].text == EMPTY_LIST_REASON and parsed.actions[0].point is None
    assert parsed.model_points == () and parsed.info["abstained"] is True


ERROR_CASES = [
    ("<think>hmm</think>I don't see it.", "no JSON list after </think>", "I don't"),
    ("nothing at all", "no JSON list in the output", 0),
    ('<think>x</think>[{"point_2d": [1, 2, 3]}]', "item 0 point_2d must be [x, y] with two numbers", "{"),
    ('<think>x</think>[{"point_2d": [1, 2]}, {"pt": [1, 2]}]', "item 1 must be an object with point_2d", '{"pt"'),
    ('<think>x</think>[{"point_2d": [1, 2]}, [3, 4]]', "item 1 must be an object with point_2d", "[3"),
    ('<think>x</think>[{"point_2d": ["1", 2]}]', "two numbers", "{"),
    ('<think>x</think>[{"point_2d": [1, 99999]}]', "outside the 1932x1092 image", "{"),
    ('<think>x</think>[{"point_2d": [-100, -100]}]', "no-target sentinel", "{"),
    ('<think>x</think>[{"point_2d": [1, 2}]', "invalid JSON in the list item", "}]"),
    ('<think>x</think>[{"point_2d": [1,', "the JSON list is cut off", None),
    ('<think>x</think>see [note] [{"point_2d": [1, 2]}]', "invalid JSON in the list item", "note"),
]


@pytest.mark.parametrize(("text", "fragment", "where"), ERROR_CASES, ids=[c[1][:30] for c in ERROR_CASES])
def test_execution_errors_say_what_and_where(text: str, fragment: str, where: object) -> None:
    with pytest.raises(FormatParseError) as info:
        parse(text)
    assert fragment in str(info.value)
    expected = len(text) if where is None else where if isinstance(where, int) else text.index(str(where))
    assert info.value.position == expected


def test_outside_is_coordinate_error() -> None:
    with pytest.raises(CoordinateError):
        parse('[{"point_2d": [1933, 5]}]')


# -- strict (reward) parser ----------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "points"), [
    ('<think>r</think>[{"point_2d": [1, 2]}, {"point_2d": [3.5, 4]}]', [(1.0, 2.0), (3.5, 4.0)]),
    ('<think>r</think>[{"point_2d": [1, 2]}] see [1]', [(1.0, 2.0)]),  # balanced brackets: trailing [1] ignored
    ('<think>r</think>[]', []),
    ('<think>r</think>[{"point_2d": [99999, 2]}]', [(99999.0, 2.0)]),  # no image bounds: the hit test decides
])
def test_strict_parse_accepts(text: str, points: list) -> None:
    assert strict_parse(text) == points


@pytest.mark.parametrize(("text", "fragment"), [
    ('[{"point_2d": [1, 2]}]', "must start with <think>"),
    (' <think>r</think>[{"point_2d": [1, 2]}]', "must start with <think>"),
    ('<think>r</think><think>s</think>[{"point_2d": [1, 2]}]', "exactly one <think> and one </think>"),
    ('<think>r[{"point_2d": [1, 2]}]', "exactly one <think> and one </think>"),
    ('<think>  </think>[{"point_2d": [1, 2]}]', "the <think> block is empty"),
    ('<think>r</think>  ', "the answer is missing"),
    ('<think>r</think>no list', "no '['"),
    ('<think>r</think>[{"point_2d": [1, 2]}', "never closed"),
    ('<think>r</think>[{"point_2d": [1, 2]}, {"x": 1}]', "item 1 is not"),
    ('<think>r</think>[{"point_2d": [1, 2, 3]}]', "item 0 is not"),
    ('<think>r</think>[{"point_2d": [1, 2],}]', "not valid JSON"),
])
def test_strict_parse_rejects(text: str, fragment: str) -> None:
    with pytest.raises(FormatParseError) as info:
        strict_parse(text)
    assert fragment in str(info.value) and info.value.position is not None


def test_strict_parse_no_think() -> None:
    assert strict_parse('[{"point_2d": [1, 2]}]', think=False) == [(1.0, 2.0)]


def test_strict_is_stricter_than_execution() -> None:
    # the execution parser keeps the complete item of a cut-off list; the reward parser rejects it
    text = '<think>r</think>[{"point_2d": [1, 2]}, {"point_2d": [3'
    assert len(parse(text).actions) == 1
    with pytest.raises(FormatParseError):
        strict_parse(text)


# -- properties -----------------------------------------------------------------------------------------

VALID = [
    '<think>the search icon</think>\n[{"point_2d": [100, 200]}, {"point_2d": [1900, 1000]}]',
    '<think>r</think>```json\n[{"point_2d": [0, 0]}]\n```',
    '[{"point_2d": [1932, 1092]}] trailing [x]',
]


def _check(text: str) -> None:
    try:
        parsed = InfiGuiG1Format().parse(text, SPACE, THINK)
    except FormatParseError:
        pass
    else:
        if parsed.info.get("abstained"):  # an empty list ("[]"): the model says the target is not there
            (action,) = parsed.actions
            assert action.kind is ActionKind.INFEASIBLE and parsed.model_points == ()
        else:
            assert parsed.actions and len(parsed.actions) == len(parsed.model_points)
            for action in parsed.actions:
                assert 0.0 <= action.point.x <= 1.0 and 0.0 <= action.point.y <= 1.0
    try:
        for x, y in strict_parse(text):
            assert isinstance(x, float) and isinstance(y, float)
    except FormatParseError:
        pass


@PROPS
@given(st.text(max_size=300))
@example("[]")  # found by this test on a clean clone: an empty list is the abstention, not an error
def test_random_text_only_raises_format_errors(text: str) -> None:
    _check(text)


_MUTATION = st.tuples(st.sampled_from(["insert", "delete", "replace", "number", "drop_bracket"]),
                      st.floats(0, 1, exclude_max=True),
                      st.sampled_from(list('[]{}",:-.0123456789 e\n<>/') + ["</think>", "<think>", "99999", "-1",
                                                                          "1e9", "NaN", "Infinity", "null", "true"]))


@PROPS
@given(st.sampled_from(VALID), st.lists(_MUTATION, min_size=1, max_size=4))
def test_mutated_outputs_only_raise_format_errors(text: str, mutations: list) -> None:
    text = apply_mutations(text, mutations)
    _check(text)


@PROPS
@given(st.sampled_from(GOLDEN_SIZES), st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), min_size=1, max_size=4))
def test_round_trip_within_half_a_model_pixel(frame: tuple[int, int], points: list) -> None:
    space = THINK.space(frame)
    items = []
    for x, y in points:
        mx, my = space.from_point(Point(x, y))
        items.append({"point_2d": [int(round(mx)), int(round(my))]})
    text = f"<think>candidates</think>\n{json.dumps(items)}"
    parsed = FMT.parse(text, space, THINK)
    assert strict_parse(text) == [tuple(float(v) for v in it["point_2d"]) for it in items]
    w, h = space.input_size
    assert len(parsed.actions) == len(points)
    for action, (x, y) in zip(parsed.actions, points):
        assert abs(action.point.x - x) * w <= 0.5 + 1e-9 and abs(action.point.y - y) * h <= 0.5 + 1e-9


@pytest.mark.parametrize("text", [
    "<think>r</think>" + "[" * 5000 + "]" * 5000,
    '<think>r</think>[{"point_2d": [' + "9" * 5000 + ", 1]}]",
    '<think>r</think>[{"point_2d": [1e999, 1]}]',
])
def test_pathological_json_is_a_format_error(text: str) -> None:
    with pytest.raises(FormatParseError):
        parse(text)
    if "1e999" not in text:  # inf is a number to the reward parser; the hit test rejects it
        with pytest.raises(FormatParseError):
            strict_parse(text)

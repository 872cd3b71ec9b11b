"""Qwen2.5-VL formats: goldens against transformers' processor, parsing tables, properties."""

from __future__ import annotations

import json
from dataclasses import replace
from functools import lru_cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.policy.formats.fuzz import apply_mutations

from devices.actions import Action, ActionKind, Point, ScrollDirection
from policy.base import HistoryEntry
from policy.errors import CoordinateError, FormatParseError
from policy.formats import get_format
from policy.formats.qwen25vl import Qwen25VLFormat
from policy.presets import PRESETS, ModelPreset
from tests.policy.reference import GOLDEN_SIZES, reference_input_size

FAMILY = "qwen2.5-vl"
FAMILY_PRESETS = [p for p in PRESETS.values() if p.family == FAMILY]
BASE = FAMILY_PRESETS[0]
COMPUTER = replace(BASE, variant="computer_use")
MOBILE = replace(BASE, variant="mobile_use")
GROUNDING = replace(BASE, variant="grounding")
FMT = Qwen25VLFormat()
SPACE = COMPUTER.space((1920, 1080))  # 1932 x 1092 per transformers (checked in the goldens)
W_, H_ = SPACE.input_size
PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@lru_cache(maxsize=None)
def ref(frame: tuple[int, int], preset: ModelPreset) -> tuple[int, int]:
    return reference_input_size(frame[0], frame[1], preset.min_pixels, preset.max_pixels,
                                preset.pre_resize.value, preset.pre_resize_pixels)


def call(action: str, **args: object) -> str:
    body = json.dumps({"name": "computer_use", "arguments": {"action": action, **args}})
    return f"<tool_call>\n{body}\n</tool_call>"


def mcall(action: str, **args: object) -> str:
    body = json.dumps({"name": "mobile_use", "arguments": {"action": action, **args}})
    return f"<tool_call>\n{body}\n</tool_call>"


def parse(text: str, preset: ModelPreset = COMPUTER, history=None):
    return Qwen25VLFormat().parse(text, SPACE, preset, history=history)


def test_registry_serves_this_class() -> None:
    assert isinstance(get_format(FAMILY), Qwen25VLFormat)
    assert FAMILY_PRESETS, "the registry has Qwen2.5-VL presets"


# -- goldens ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("frame", GOLDEN_SIZES)
@pytest.mark.parametrize("preset", FAMILY_PRESETS, ids=lambda p: p.model_id)
def test_golden_input_size(preset: ModelPreset, frame: tuple[int, int]) -> None:
    assert preset.input_size(frame) == ref(frame, preset)


@pytest.mark.parametrize("frame", GOLDEN_SIZES)
@pytest.mark.parametrize("variant", ["computer_use", "mobile_use"])
def test_golden_prompt_states_resolution(variant: str, frame: tuple[int, int]) -> None:
    preset = replace(BASE, variant=variant)
    w, h = ref(frame, preset)
    prompt = FMT.build_prompt("open the settings", (), preset.space(frame), preset)
    system = prompt.messages[0]["content"][0]["text"]
    assert f"* The screen's resolution is {w}x{h}." in system
    assert system.startswith("You are a helpful assistant.\n\n# Tools\n\n")
    assert f'"name": "{variant}"' in system and system.endswith("</tool_call>")
    tool_line = system.split("<tools>\n")[1].split("\n</tools>")[0]
    assert json.loads(tool_line)["function"]["name_for_human"] == variant
    assert prompt.messages[1]["content"][-1] == {"type": "image", "image": "current"}


def test_grounding_prompt() -> None:
    prompt = FMT.build_prompt("the search button", (), SPACE, GROUNDING)
    system = {"role": "system", "content": [{"type": "text", "text": "You are a helpful assistant"}]}
    assert prompt.messages[0] == system
    assert prompt.messages[1]["content"] == [
        {"type": "text", "text": "Locate the search button, output its bbox coordinates using JSON format."},
        {"type": "image", "image": "current"},
    ]


@pytest.mark.parametrize("frame", GOLDEN_SIZES)
@pytest.mark.parametrize("form", ["computer", "mobile", "bbox", "point"])
def test_golden_known_point_maps_to_frame(form: str, frame: tuple[int, int]) -> None:
    W, H = frame
    w, h = ref(frame, BASE)
    x, y = w // 3, h // 4
    if form == "computer":
        preset, text = COMPUTER, call("left_click", coordinate=[x, y])
    elif form == "mobile":
        preset, text = MOBILE, mcall("click", coordinate=[x, y])
    elif form == "bbox":  # centre of a box of +-10 px
        preset = GROUNDING
        text = f'```json\n[{{"bbox_2d": [{x - 10}, {y - 10}, {x + 10}, {y + 10}], "label": "ok"}}]\n```'
    else:
        preset, text = GROUNDING, f'```json\n[{{"point_2d": [{x}, {y}]}}]\n```'
    space = preset.space(frame)
    parsed = FMT.parse(text, space, preset)
    action = parsed.actions[0]
    assert action.kind is ActionKind.CLICK
    assert action.point.x == pytest.approx(x / w) and action.point.y == pytest.approx(y / h)
    u, v = space.to_frame_pixels(action.point)
    assert u == pytest.approx(x * W / w) and v == pytest.approx(y * H / h)
    assert parsed.model_points[0] == pytest.approx((x, y))


# -- computer_use table -------------------------------------------------------------------------------

def P(x: float, y: float) -> Point:
    return Point(x / W_, y / H_)


COMPUTER_CASES = [
    (call("left_click", coordinate=[100, 200]), Action(ActionKind.CLICK, P(100, 200))),
    (call("right_click", coordinate=[100, 200]), Action(ActionKind.RIGHT_CLICK, P(100, 200))),
    (call("double_click", coordinate=[0, 0]), Action(ActionKind.DOUBLE_CLICK, P(0, 0))),
    (call("mouse_move", coordinate=[W_, H_]), Action(ActionKind.HOVER, P(W_, H_))),
    (call("type", text="hello world"), Action(ActionKind.TYPE, text="hello world")),
    (call("key", keys=["ctrl", "c"]), Action(ActionKind.HOTKEY, keys=("Control", "c"))),
    (call("key", keys=["Return"]), Action(ActionKind.KEY, keys=("Enter",))),
    (call("key", keys="ctrl+a"), Action(ActionKind.HOTKEY, keys=("Control", "a"))),
    (call("scroll", pixels=-546), Action(ActionKind.SCROLL, direction=ScrollDirection.DOWN, amount=0.5)),
    (call("scroll", pixels=1092, coordinate=[966, 546]),
     Action(ActionKind.SCROLL, P(966, 546), direction=ScrollDirection.UP, amount=1.0)),
    (call("wait", time=2), Action(ActionKind.WAIT, duration_s=2.0)),
    (call("wait"), Action(ActionKind.WAIT, duration_s=1.0)),
    (call("terminate", status="success"), Action(ActionKind.FINISH)),
]


@pytest.mark.parametrize(("text", "expected"), COMPUTER_CASES, ids=lambda v: v if isinstance(v, str) else "")
def test_computer_use_actions(text: str, expected: Action) -> None:
    assert parse(text).actions == (expected,)


def test_terminate_failure_is_infeasible() -> None:
    (action,) = parse(call("terminate", status="failure")).actions
    assert action.kind is ActionKind.INFEASIBLE and "failure" in action.text


def test_chatter_and_several_tool_calls() -> None:
    text = ("I will click the box, then type.\n" + call("left_click", coordinate=[10, 20]) + "\nthen\n"
            + call("type", text="abc") + "\nDone.")
    parsed = parse(text)
    assert [a.kind for a in parsed.actions] == [ActionKind.CLICK, ActionKind.TYPE]
    assert parsed.model_points == ((10.0, 20.0),) and parsed.info["tool_calls"] == 2


def test_bare_tool_json_without_tags() -> None:
    bare = json.dumps({"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [1, 2]}})
    assert parse(bare).actions == (Action(ActionKind.CLICK, P(1, 2)),)


def test_arguments_as_json_string() -> None:
    text = "<tool_call>\n" + json.dumps({"name": "computer_use", "arguments": json.dumps(
        {"action": "left_click", "coordinate": [5, 6]})}) + "\n</tool_call>"
    assert parse(text).actions == (Action(ActionKind.CLICK, P(5, 6)),)


def test_drag_starts_at_mouse_move_in_same_reply() -> None:
    parsed = parse(call("mouse_move", coordinate=[10, 20]) + call("left_click_drag", coordinate=[300, 400]))
    drag = parsed.actions[1]
    assert drag.kind is ActionKind.DRAG and drag.point == P(10, 20) and drag.end == P(300, 400)
    flat = [v for xy in parsed.model_points for v in xy]
    assert flat == pytest.approx([10, 20, 10, 20, 300, 400])


def test_drag_and_pointless_click_use_history_cursor() -> None:
    history = [HistoryEntry(Action(ActionKind.CLICK, P(50, 60))),
               HistoryEntry(Action(ActionKind.CLICK, P(70, 80)), executed=False, note="refused")]
    drag = parse(call("left_click_drag", coordinate=[300, 400]), history=history).actions[0]
    assert drag.point == P(50, 60) and drag.end == P(300, 400)
    click = parse(call("left_click"), history=history).actions[0]
    assert click == Action(ActionKind.CLICK, P(50, 60))


def test_two_interleaved_episodes_sharing_one_format_each_see_only_their_own_cursor() -> None:
    """Every actor of a session shares one format instance: the cursor is read from the history each parse is given,
    so episode B, prompted after A, never clicks or drags from A's cursor (nor A from B's)."""
    fmt = Qwen25VLFormat()
    a_history = [HistoryEntry(Action(ActionKind.CLICK, P(50, 60)))]
    b_history = [HistoryEntry(Action(ActionKind.HOVER, P(700, 500)))]
    fmt.build_prompt("a", a_history, SPACE, COMPUTER)
    fmt.build_prompt("b", (), SPACE, COMPUTER)  # B's first step: no cursor yet
    with pytest.raises(FormatParseError, match="no earlier cursor position"):
        fmt.parse(call("left_click"), SPACE, COMPUTER, history=())
    assert fmt.parse(call("left_click"), SPACE, COMPUTER, history=a_history).actions[0].point == P(50, 60)
    fmt.build_prompt("b", b_history, SPACE, COMPUTER)
    fmt.build_prompt("a", a_history, SPACE, COMPUTER)  # A prompted last: B still drags from its own cursor
    drag = fmt.parse(call("left_click_drag", coordinate=[300, 400]), SPACE, COMPUTER, history=b_history).actions[0]
    assert drag.point == P(700, 500) and drag.end == P(300, 400)
    # a parse given no history knows no cursor, whatever was prompted before it
    with pytest.raises(FormatParseError, match="no earlier cursor position"):
        fmt.parse(call("left_click"), SPACE, COMPUTER)


# -- mobile_use table -----------------------------------------------------------------------------------

MOBILE_CASES = [
    (mcall("click", coordinate=[100, 200]), Action(ActionKind.CLICK, P(100, 200))),
    (mcall("long_press", coordinate=[100, 200], time=2), Action(ActionKind.LONG_PRESS, P(100, 200), duration_s=2.0)),
    (mcall("swipe", coordinate=[100, 900], coordinate2=[100, 100]), Action(ActionKind.DRAG, P(100, 900), P(100, 100))),
    (mcall("type", text="hi"), Action(ActionKind.TYPE, text="hi")),
    (mcall("system_button", button="Back"), Action(ActionKind.BACK)),
    (mcall("system_button", button="Home"), Action(ActionKind.HOME)),
    (mcall("system_button", button="Enter"), Action(ActionKind.KEY, keys=("Enter",))),
    (mcall("open", text="Settings"), Action(ActionKind.OPEN_APP, text="Settings")),
    (mcall("key", text="KEYCODE_DEL"), Action(ActionKind.KEY, keys=("Backspace",))),
    (mcall("key", text="back"), Action(ActionKind.BACK)),
    (mcall("wait", time=3), Action(ActionKind.WAIT, duration_s=3.0)),
    (mcall("terminate", status="success"), Action(ActionKind.FINISH)),
]


@pytest.mark.parametrize(("text", "expected"), MOBILE_CASES, ids=lambda v: v if isinstance(v, str) else "")
def test_mobile_use_actions(text: str, expected: Action) -> None:
    assert parse(text, MOBILE).actions == (expected,)


# -- grounding table ------------------------------------------------------------------------------------

def test_grounding_boxes_in_order_with_fence_and_chatter() -> None:
    text = ('Sure! Here you go:\n```json\n[\n  {"bbox_2d": [10, 20, 30, 40], "label": "a"},\n'
            '  {"bbox_2d": [100, 100, 200, 300], "label": "b"}\n]\n```\nThe first one is the best.')
    parsed = parse(text, GROUNDING)
    assert [a.point for a in parsed.actions] == [P(20, 30), P(150, 200)]
    assert parsed.info["labels"] == ("a", "b") and parsed.info["truncated"] is False
    assert parsed.info["boxes"][0] == pytest.approx((10 / W_, 20 / H_, 30 / W_, 40 / H_))


def test_grounding_truncated_final_item_is_dropped() -> None:
    text = '```json\n[{"bbox_2d": [10, 20, 30, 40], "label": "a"}, {"bbox_2d": [1, 2, 3'
    parsed = parse(text, GROUNDING)
    assert parsed.actions == (Action(ActionKind.CLICK, P(20, 30)),) and parsed.info["truncated"] is True


def test_grounding_single_object_and_xml_points() -> None:
    assert parse('{"point_2d": [5, 7], "label": "x"}', GROUNDING).actions == (Action(ActionKind.CLICK, P(5, 7)),)
    parsed = parse('<points x1="12" y1="34" x2="56" y2="78" alt="btn">btn</points>', GROUNDING)
    assert [a.point for a in parsed.actions] == [P(12, 34), P(56, 78)]


# -- errors: what and where -----------------------------------------------------------------------------

def _at(text: str, needle: str) -> int:
    return text.index(needle)


ERROR_CASES = [
    # (preset, text, message fragment, expected position (a needle to find, or an int))
    (COMPUTER, "I cannot help with that.", "no <tool_call> block", 0),
    (COMPUTER, '<tool_call>\n{"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [1, 2]}\n'
               '</tool_call>', "invalid JSON in the tool call", "</tool_call>"),
    (COMPUTER, call("left_click", coordinate=[1, 2]).replace("computer_use", "browser"), "unknown function 'browser'",
     "{"),
    (COMPUTER, '<tool_call>\n{"name": "computer_use"}\n</tool_call>', "needs an 'arguments' object", "{"),
    (COMPUTER, '<tool_call>\n{"name": "computer_use", "arguments": {"coordinate": [1, 2]}}\n</tool_call>',
     "have no 'action'", "{"),
    (COMPUTER, call("triple_click", coordinate=[1, 2]), "unknown computer_use action 'triple_click'", "{"),
    (COMPUTER, call("left_click", coordinate=[W_ + 1, 5]), "outside the 1932x1092 image", "{"),
    (COMPUTER, call("left_click", coordinate=[1]), "must be [x, y] with two numbers", "{"),
    (COMPUTER, call("left_click", coordinate=["1", 2]), "must be [x, y] with two numbers", "{"),
    (COMPUTER, call("left_click_drag", coordinate=[1, 2]), "no earlier cursor position", "{"),
    (COMPUTER, call("left_click"), "no earlier cursor position", "{"),
    (COMPUTER, call("middle_click", coordinate=[1, 2]), "middle_click is not supported", "{"),
    (COMPUTER, call("type"), "needs 'text'", "{"),
    (COMPUTER, call("type", text=""), "type needs a non-empty text", "{"),
    (COMPUTER, call("key", keys=["hyper"]), "unknown key 'hyper'", "{"),
    (COMPUTER, call("key", keys=[]), "non-empty list", "{"),
    (COMPUTER, call("scroll", pixels=0), "scroll of 0 pixels", "{"),
    (COMPUTER, call("scroll"), "needs 'pixels'", "{"),
    (COMPUTER, call("scroll", pixels=100000), "scroll amount", "{"),
    (COMPUTER, call("terminate", status="maybe"), "terminate status must be 'success' or 'failure'", "{"),
    (COMPUTER, call("left_click", coordinate=[1, 2]) + "\n<tool_call>\nnope", "expected a JSON object after", "nope"),
    (MOBILE, mcall("system_button", button="Menu"), "system_button Menu is not supported", "{"),
    (MOBILE, mcall("system_button", button="Power"), "unknown system_button 'Power'", "{"),
    (MOBILE, mcall("swipe", coordinate=[1, 2]), "needs 'coordinate2'", "{"),
    (MOBILE, mcall("key", text="volume_up"), "has no equivalent", "{"),
    (MOBILE, mcall("left_click", coordinate=[1, 2]), "unknown mobile_use action 'left_click'", "{"),
    (GROUNDING, "There is no such element.", "no JSON list or object in the output", 0),
    (GROUNDING, "```json\nnothing here\n```", "inside the code fence", "nothing"),
    (GROUNDING, '```json\n[{"bbox_2d": [1, 2, 3', "the JSON list is cut off", None),
    (GROUNDING, '[{"bbox_2d": [1, 2, 3]}]', "bbox_2d must be [x1, y1, x2, y2]", "{"),
    (GROUNDING, '[{"box": [1, 2, 3, 4]}]', "neither bbox_2d nor point_2d", "{"),
    (GROUNDING, '[{"point_2d": [1, 2]}, {"point_2d": [5000, 2]}]', "outside the 1932x1092 image", '{"point_2d": [5000'),
    (GROUNDING, '[{"point_2d": [-100, -100]}]', "no-target sentinel", "{"),
    (GROUNDING, '[]', "the JSON list is empty", "["),
    (GROUNDING, '[oops]', "invalid JSON in the list item", "oops"),
]


@pytest.mark.parametrize(("preset", "text", "fragment", "where"), ERROR_CASES,
                         ids=[f"{c[0].variant}-{c[2][:30]}" for c in ERROR_CASES])
def test_parse_errors_say_what_and_where(preset: ModelPreset, text: str, fragment: str, where: object) -> None:
    with pytest.raises(FormatParseError) as info:
        parse(text, preset)
    assert fragment in str(info.value)
    expected = len(text) if where is None else where if isinstance(where, int) else _at(text, str(where))
    assert info.value.position == expected
    assert f"at character {expected}" in str(info.value)


def test_outside_image_is_a_coordinate_error() -> None:
    with pytest.raises(CoordinateError):
        parse(call("left_click", coordinate=[10, H_ + 0.5]))


def test_unknown_variant() -> None:
    with pytest.raises(ValueError, match="no prompt variant"):
        FMT.build_prompt("t", (), SPACE, replace(BASE, variant="chat"))


# -- history -----------------------------------------------------------------------------------------------

def test_history_rendered_as_tool_calls_in_model_pixels() -> None:
    history = [
        HistoryEntry(Action(ActionKind.CLICK, Point(0.5, 0.25))),
        HistoryEntry(None, "garbage", executed=False, note="parse error"),
        HistoryEntry(Action(ActionKind.TYPE, text="cats")),
        HistoryEntry(Action(ActionKind.HOTKEY, keys=("Control", "s"))),
        HistoryEntry(Action(ActionKind.SCROLL, direction=ScrollDirection.DOWN, amount=0.5)),
        HistoryEntry(Action(ActionKind.BACK)),
    ]
    text = FMT.build_prompt("save the file", history, SPACE, COMPUTER).messages[1]["content"][0]["text"]
    assert text.startswith("The user query:  save the file\nTask progress (You have done the following "
                           "operation on the current device): Step 1: ")
    steps = text.split("device): ")[1]
    assert steps == (
        'Step 1: {"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [966, 273]}}; '
        'Step 2: {"name": "computer_use", "arguments": {"action": "type", "text": "cats"}}; '
        'Step 3: {"name": "computer_use", "arguments": {"action": "key", "keys": ["ctrl", "s"]}}; '
        'Step 4: {"name": "computer_use", "arguments": {"action": "scroll", "pixels": -546}}; '
        "Step 5: back; "
    )


def test_mobile_history_and_empty_history() -> None:
    history = [HistoryEntry(Action(ActionKind.DRAG, Point(0.5, 0.75), Point(0.5, 0.25))),
               HistoryEntry(Action(ActionKind.BACK))]
    text = FMT.build_prompt("go", history, SPACE, MOBILE).messages[1]["content"][0]["text"]
    assert text.endswith(
        'Step 1: {"name": "mobile_use", "arguments": {"action": "swipe", "coordinate": [966, 819], '
        '"coordinate2": [966, 273]}}; Step 2: {"name": "mobile_use", "arguments": {"action": "system_button", '
        '"button": "Back"}}; ')
    empty = FMT.build_prompt("go", (), SPACE, MOBILE).messages[1]["content"][0]["text"]
    assert empty == "The user query:  go\nTask progress (You have done the following operation on the current device): "
    assert FMT.build_prompt("go", (), SPACE, COMPUTER).messages[1]["content"][0]["text"] == "go"


def test_history_round_trips_through_the_parser() -> None:
    action = Action(ActionKind.CLICK, Point(0.3, 0.7))
    text = FMT.build_prompt("t", [HistoryEntry(action)], SPACE, COMPUTER).messages[1]["content"][0]["text"]
    step = text.split("Step 1: ")[1].rstrip("; ")
    parsed = parse(f"<tool_call>\n{step}\n</tool_call>").actions[0]
    assert abs(parsed.point.x - 0.3) * W_ <= 0.5 and abs(parsed.point.y - 0.7) * H_ <= 0.5


# -- properties -------------------------------------------------------------------------------------------

VALID = [
    (COMPUTER, call("left_click", coordinate=[100, 200])),
    (COMPUTER, call("scroll", pixels=-300, coordinate=[10, 10]) + call("key", keys=["ctrl", "v"])),
    (COMPUTER, call("mouse_move", coordinate=[1, 1]) + call("left_click_drag", coordinate=[1900, 1000])),
    (MOBILE, mcall("swipe", coordinate=[100, 900], coordinate2=[100, 100])),
    (MOBILE, mcall("long_press", coordinate=[5, 5], time=1)),
    (GROUNDING, '```json\n[{"bbox_2d": [10, 20, 30, 40], "label": "a"}, {"point_2d": [7, 9]}]\n```'),
    (GROUNDING, '<points x1="12" y1="34" alt="b">b</points>'),
]


def _check(preset: ModelPreset, text: str) -> None:
    try:
        parsed = Qwen25VLFormat().parse(text, SPACE, preset)
    except FormatParseError:
        return
    for action in parsed.actions:
        for p in (action.point, action.end):
            if p is not None:
                assert 0.0 <= p.x <= 1.0 and 0.0 <= p.y <= 1.0


@PROPS
@given(st.sampled_from([COMPUTER, MOBILE, GROUNDING]), st.text(max_size=300))
def test_random_text_only_raises_format_errors(preset: ModelPreset, text: str) -> None:
    _check(preset, text)


_MUTATION = st.tuples(st.sampled_from(["insert", "delete", "replace", "number", "drop_bracket"]),
                      st.floats(0, 1, exclude_max=True),
                      st.sampled_from(list('[]{}",:-.0123456789 e\nabx<>/') + ["99999", "-1", "1e9", "NaN", "null"]))


@PROPS
@given(st.sampled_from(VALID), st.lists(_MUTATION, min_size=1, max_size=4))
def test_mutated_outputs_only_raise_format_errors(case: tuple[ModelPreset, str], mutations: list) -> None:
    preset, text = case
    text = apply_mutations(text, mutations)
    _check(preset, text)


@PROPS
@given(st.sampled_from(GOLDEN_SIZES), st.floats(0, 1), st.floats(0, 1),
       st.sampled_from(["computer", "mobile", "point"]))
def test_round_trip_within_half_a_model_pixel(frame: tuple[int, int], x: float, y: float, form: str) -> None:
    preset = {"computer": COMPUTER, "mobile": MOBILE, "point": GROUNDING}[form]
    space = preset.space(frame)
    mx, my = space.from_point(Point(x, y))
    xi, yi = int(round(mx)), int(round(my))
    text = {"computer": call("left_click", coordinate=[xi, yi]), "mobile": mcall("click", coordinate=[xi, yi]),
            "point": f'```json\n[{{"point_2d": [{xi}, {yi}]}}]\n```'}[form]
    point = FMT.parse(text, space, preset).actions[0].point
    w, h = space.input_size
    assert abs(point.x - x) * w <= 0.5 + 1e-9 and abs(point.y - y) * h <= 0.5 + 1e-9


# -- robustness ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("preset", [COMPUTER, MOBILE, GROUNDING], ids=lambda p: p.variant)
@pytest.mark.parametrize("text", [
    "<tool_call>\n" + "[" * 5000 + "\n</tool_call>",  # nesting deeper than the recursion limit
    "[" * 5000,
    "{" * 5000,
    '<tool_call>\n{"name": "computer_use", "arguments": {"action": "wait", "time": ' + "9" * 5000 + "}}\n</tool_call>",
    '[{"point_2d": [' + "9" * 5000 + ", 1]}]",
    '{"point_2d": [1e999, 1]}',
])
def test_pathological_json_is_a_format_error(preset: ModelPreset, text: str) -> None:
    with pytest.raises(FormatParseError):
        parse(text, preset)


def test_text_before_the_tool_call_is_the_thought() -> None:
    parsed = parse("The button is at the top.\n" + call("left_click", coordinate=[1, 2]))
    assert parsed.thought == "The button is at the top."
    assert parse(call("left_click", coordinate=[1, 2])).thought is None


def test_braces_in_chatter_without_tool_call() -> None:
    with pytest.raises(FormatParseError, match="no <tool_call> block") as info:
        parse("I would use {a} here but cannot.")
    assert info.value.position == 0


def test_mobile_single_character_key_keeps_case() -> None:
    assert parse(mcall("key", text="A"), MOBILE).actions == (Action(ActionKind.KEY, keys=("A",)),)

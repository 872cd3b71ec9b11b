"""GUI-R1 format: prompt, goldens against transformers' processor, parsing tables, properties."""

from __future__ import annotations

import ast
import dataclasses
import re
from functools import lru_cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.policy.formats.fuzz import mutated_outputs

from devices.actions import Action, ActionKind, Point
from policy.base import HistoryEntry
from policy.errors import CoordinateError, FormatParseError
from policy.formats import get_format
from policy.formats.guir1 import GuiR1Format
from policy.formats.guir1_prompts import (ACTION_LISTS, ALL_ACTIONS, action_list, action_name,
                                          read_released)
from policy.presets import PRESETS
from tests.policy.reference import GOLDEN_SIZES, reference_input_size

FMT = GuiR1Format()
FAMILY_PRESETS = [p for p in PRESETS.values() if p.family == "gui-r1"]
PRESET = PRESETS["ritzz-ai/GUI-R1-7B"]
FRAME = (1920, 1080)
SPACE = PRESET.space(FRAME)


@lru_cache(maxsize=None)
def ref_size(w: int, h: int, model_id: str) -> tuple[int, int]:
    p = PRESETS[model_id]
    return reference_input_size(w, h, p.min_pixels, p.max_pixels, p.pre_resize.value, p.pre_resize_pixels)


def answer(action: str, point=(-100, -100), text: str = "no input text", think: str = "ok") -> str:
    item = {"action": action, "point": list(point), "input_text": text}
    return f"<think>{think}</think> <answer>[{item!r}]</answer>"


def test_registry_and_family():
    assert FAMILY_PRESETS, "the registry has GUI-R1 presets"
    fmt = get_format("gui-r1")
    assert isinstance(fmt, GuiR1Format) and fmt.family == "gui-r1"


# -- goldens ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("preset", FAMILY_PRESETS, ids=lambda p: p.model_id)
@pytest.mark.parametrize("size", GOLDEN_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_golden_sizes_and_points(preset, size):
    w, h = size
    rw, rh = ref_size(w, h, preset.model_id)
    assert preset.input_size(size) == (rw, rh)
    space = preset.space(size)
    mx, my = rw // 3, (2 * rh) // 3
    parsed = FMT.parse(answer("click", (mx, my)), space, preset)
    (act,) = parsed.actions
    assert act.kind is ActionKind.CLICK
    assert act.point.x == pytest.approx(mx / rw) and act.point.y == pytest.approx(my / rh)
    u, v = space.to_frame_pixels(act.point)
    assert u == pytest.approx(mx * w / rw) and v == pytest.approx(my * h / rh)
    assert parsed.model_points == ((mx, my),)
    # the far corner of the model image is the far corner of the frame
    corner = FMT.parse(answer("click", (rw, rh)), space, preset).actions[0].point
    assert (corner.x, corner.y) == (1.0, 1.0)


# -- prompt ----------------------------------------------------------------------------------------


def test_prompt_androidcontrol_exact():
    preset = dataclasses.replace(PRESET, variant="androidcontrol")
    msgs = FMT.build_prompt("open the clock", [], SPACE, preset).messages
    assert len(msgs) == 1 and msgs[0]["role"] == "user"
    image, text = msgs[0]["content"]
    assert image == {"type": "image", "image": "current"}
    acts = "['wait', 'long_press', 'click', 'press_back', 'type', 'open_app', 'scroll']"
    assert text["text"] == (
        "<image>\nYou are GUI-R1, a reasoning GUI Agent Assistant. In this UI screenshot <image>, I want you to "
        "continue executing the command 'open the clock', with the action history being 'None'.\n"
        f"Please provide the action to perform (enumerate from {acts}), the point where the cursor is moved to "
        "(integer) if a click is performed, and any input text required to complete the action.\n"
        "Output the thinking process in <think> </think> tags, and the final answer in <answer> </answer> tags "
        "as follows:\n"
        f"<think> ... </think> <answer>[{{'action': enum{acts}, 'point': [x, y], "
        "'input_text': 'no input text [default]'}]</answer>\n"
        "Note:\n specific input text (no default) is necessary for actions enum['type', 'open_app', 'scroll'] \n"
        " Example:\n"
        "[{'action': enum['wait', 'press_back'], 'point': [-100, -100], 'input_text': 'no input text'}]\n"
        "[{'action': enum['long_press', 'click'], 'point': [123, 300], 'input_text': 'no input text'}]\n"
        "[{'action': enum['type', 'open_app'], 'point': [-100, -100], 'input_text': 'shanghai shopping mall'}]\n"
        "[{'action': enum['scroll'], 'point': [-100, -100], 'input_text': enum['up', 'left', 'right', 'down']}]"
    )


def test_prompt_click_only_has_no_note():
    text = FMT.build_prompt("the OK button", [], SPACE, dataclasses.replace(PRESET, variant="screenspot"))
    body = text.messages[0]["content"][1]["text"]
    assert "enumerate from ['click']" in body and "Note:" not in body
    assert body.endswith("Example:\n[{'action': enum['click'], 'point': [123, 300], 'input_text': 'no input text'}]\n")
    assert "GUI-R1" in body and "RUN1" not in body


@pytest.mark.parametrize("variant", list(ACTION_LISTS))
def test_every_variant_lists_its_actions(variant):
    body = FMT.build_prompt("t", [], SPACE, dataclasses.replace(PRESET, variant=variant)).messages[0]["content"][1]
    assert f"(enumerate from {list(ACTION_LISTS[variant])!r})" in body["text"]


def test_unknown_variant_names_valid_ones():
    with pytest.raises(ValueError, match="androidcontrol.*omniact-web"):
        FMT.build_prompt("t", [], SPACE, dataclasses.replace(PRESET, variant="aitw"))
    with pytest.raises(ValueError, match="valid variants"):
        action_list("nope")


def test_history_rendering():
    raw1 = answer("click", (100, 200))
    hist = [
        HistoryEntry(Action(ActionKind.CLICK, point=Point(0.1, 0.2)), raw_output=raw1),
        HistoryEntry(None, raw_output="garbage", executed=False, note="parse error"),
        HistoryEntry(Action(ActionKind.TYPE, text="hello"), raw_output=""),
        HistoryEntry(Action(ActionKind.SCROLL, direction="down"), raw_output=""),
    ]
    body = FMT.build_prompt("t", hist, SPACE, PRESET).messages[0]["content"][1]["text"]
    expected = (
        "Step 1: [{'action': 'click', 'point': [100, 200], 'input_text': 'no input text'}]; "
        "Step 2: [{'action': 'type', 'point': [-100, -100], 'input_text': 'hello'}]; "
        "Step 3: [{'action': 'scroll', 'point': [-100, -100], 'input_text': 'down'}]"
    )
    assert f"with the action history being '{expected}'." in body


# -- parsing tables --------------------------------------------------------------------------------

P = (742, 420)  # inside the 1484x840 model image of a 1920x1080 frame
NP = Point(742 / 1484, 420 / 840)

CASES = [
    (answer("click", P), Action(ActionKind.CLICK, point=NP)),
    (answer("long_press", P), Action(ActionKind.LONG_PRESS, point=NP)),
    (answer("moveto", P), Action(ActionKind.HOVER, point=NP)),
    (answer("rightclick", P), Action(ActionKind.RIGHT_CLICK, point=NP)),
    (answer("doubleclick", P), Action(ActionKind.DOUBLE_CLICK, point=NP)),
    (answer("type", text="shanghai mall"), Action(ActionKind.TYPE, text="shanghai mall")),
    (answer("type", P, "hi"), Action(ActionKind.TYPE, text="hi", point=NP)),
    (answer("select", P, "Large"), Action(ActionKind.TYPE, text="Large", point=NP)),
    (answer("scroll", text="up"), Action(ActionKind.SCROLL, direction="up")),
    (answer("scroll", P, " Left "), Action(ActionKind.SCROLL, direction="left", point=NP)),
    (answer("complete"), Action(ActionKind.FINISH)),
    (answer("impossible"), Action(ActionKind.INFEASIBLE, text="the model judged the task impossible")),
    (answer("press_back"), Action(ActionKind.BACK)),
    (answer("press_home"), Action(ActionKind.HOME)),
    (answer("open_app", text="Clock"), Action(ActionKind.OPEN_APP, text="Clock")),
    (answer("wait"), Action(ActionKind.WAIT)),
    (answer("close/delete"), Action(ActionKind.KEY, keys=("Escape",))),
    (answer("close/delete", P), Action(ActionKind.CLICK, point=NP)),
    (answer("enter"), Action(ActionKind.KEY, keys=("Enter",))),
    (answer("press_enter"), Action(ActionKind.KEY, keys=("Enter",))),
    (answer("press_tab"), Action(ActionKind.KEY, keys=("Tab",))),
    (answer("press_down"), Action(ActionKind.KEY, keys=("ArrowDown",))),
    (answer("press_space"), Action(ActionKind.KEY, keys=("Space",))),
    (answer("press_pgdn"), Action(ActionKind.KEY, keys=("PageDown",))),
    (answer("hotkey", text="ctrl c"), Action(ActionKind.HOTKEY, keys=("Control", "c"))),
    (answer("hotkey", text="Ctrl+Shift+T"), Action(ActionKind.HOTKEY, keys=("Control", "Shift", "T"))),
    (answer("hotkey", text="esc"), Action(ActionKind.KEY, keys=("Escape",))),
    (answer("CLICK", P), Action(ActionKind.CLICK, point=NP)),
    (answer("complete", (5000, 5000)), Action(ActionKind.FINISH)),  # an unused point is ignored
]


@pytest.mark.parametrize("text,expected", CASES, ids=[c[0][25:60] for c in CASES])
def test_parse_table(text, expected):
    parsed = FMT.parse(text, SPACE, PRESET)
    assert parsed.actions == (expected,)
    assert parsed.thought == "ok"


def test_every_action_of_every_list_is_handled():
    tested = {re.search(r"'action': '([^']+)'", c[0]).group(1).lower() for c in CASES}
    assert ALL_ACTIONS - tested == {"press_recent"}  # press_recent is an error, tested below


def test_tolerated_format_problems_are_reported():
    parsed = FMT.parse("<answer>[{'action': 'click', 'point': [10.5, 20]}]</answer> bye", SPACE, PRESET)
    assert parsed.actions == (Action(ActionKind.CLICK, point=Point(10.5 / 1484, 20 / 840)),)
    issues = parsed.info["format_issues"]
    assert not parsed.info["format_ok"] and parsed.thought is None
    assert any("no <think>" in i for i in issues) and any("not integers" in i for i in issues)
    assert any("lacks 'input_text'" in i for i in issues) and "text after </answer>" in issues
    ok = FMT.parse(answer("click", P), SPACE, PRESET)
    assert ok.info["format_ok"] and ok.info["format_issues"] == []


def test_several_items_all_returned_in_order():
    text = ("<think>t</think><answer>[{'action': 'click', 'point': [742, 420], 'input_text': 'no input text'}, "
            "{'action': 'type', 'point': [-100, -100], 'input_text': 'x'}]</answer>")
    parsed = FMT.parse(text, SPACE, PRESET)
    assert [a.kind for a in parsed.actions] == [ActionKind.CLICK, ActionKind.TYPE]
    assert parsed.model_points == ((742, 420),)


def test_off_list_action_is_noted_not_rejected():
    parsed = FMT.parse(answer("long_press", P), SPACE, dataclasses.replace(PRESET, variant="high"))
    assert parsed.actions[0].kind is ActionKind.LONG_PRESS
    assert "action 'long_press' is not in the prompted list" in parsed.info["format_issues"]


def _pos(text: str, needle: str) -> int:
    return text.index(needle)


ERRORS = [
    # (output, error class, message fragment, position as a function of the text)
    ("no tags at all", FormatParseError, "has no <answer> tag", lambda t: 0),
    ("<think>a</think> <answer>[{'action': 'click'", FormatParseError, "never closed with </answer>", len),
    ("<answer></answer>", FormatParseError, "<answer> is empty", lambda t: 8),
    ("<answer>[]</answer>", FormatParseError, "empty list", lambda t: 8),
    ("<answer>[{'action': 'click', 'point': [1, 2]]</answer>", FormatParseError, "not a Python literal",
     lambda t: _pos(t, "]]") + 1),
    ("<answer>[{'action': open_app()}]</answer>", FormatParseError, "not a Python literal (Call found)",
     lambda t: _pos(t, "open_app")),
    ("<answer>[{'action': 'click', 'point': [x, y]}]</answer>", FormatParseError, "Name found",
     lambda t: _pos(t, "x, y")),
    ("<answer>'click'</answer>", FormatParseError, "must be a list of action dicts", lambda t: 8),
    ("<answer>['click']</answer>", FormatParseError, "items must be dicts", lambda t: 9),
    ("<answer>[{'point': [1, 2]}]</answer>", FormatParseError, "has no 'action' key", lambda t: 9),
    ("<answer>[{'action': 'fly', 'point': [1, 2]}]</answer>", FormatParseError, "unknown GUI-R1 action 'fly'",
     lambda t: _pos(t, "'fly'")),
    ("<answer>[{'action': 3}]</answer>", FormatParseError, "'action' must be a string", lambda t: _pos(t, "3")),
    (answer("click"), FormatParseError, "click needs a target point, got the no-target point [-100, -100]",
     lambda t: _pos(t, "[-100")),
    ("<answer>[{'action': 'click'}]</answer>", FormatParseError, "click needs a target point, got no 'point'",
     lambda t: 9),
    (answer("click", (1485, 10)), CoordinateError, "outside the 1484x840 image", lambda t: _pos(t, "[1485")),
    (answer("click", (-1, 10)), CoordinateError, "outside", lambda t: _pos(t, "[-1,")),
    ("<answer>[{'action': 'click', 'point': [1, 2, 3]}]</answer>", FormatParseError, "must be [x, y]",
     lambda t: _pos(t, "[1, 2, 3]")),
    ("<answer>[{'action': 'click', 'point': [True, 2]}]</answer>", FormatParseError, "must be [x, y]",
     lambda t: _pos(t, "[True")),
    (answer("type"), FormatParseError, "type needs an input_text", lambda t: _pos(t, "'no input")),
    (answer("open_app", text=""), FormatParseError, "open_app needs an input_text", lambda t: _pos(t, "''")),
    (answer("scroll", text="sideways"), FormatParseError, "up, down, left or right", lambda t: _pos(t, "'sideways")),
    (answer("hotkey", text="ctrl banana"), FormatParseError, "unknown key 'banana'", lambda t: _pos(t, "'ctrl")),
    (answer("press_recent"), FormatParseError, "press_recent (the recent-apps switcher) has no unified action",
     lambda t: _pos(t, "'press_recent")),
    ("<answer>[{'action': 'type', 'input_text': 5}]</answer>", FormatParseError, "'input_text' must be a string",
     lambda t: _pos(t, "5}")),
]


@pytest.mark.parametrize("text,cls,fragment,where", ERRORS, ids=[e[2][:40] for e in ERRORS])
def test_parse_errors_say_what_and_where(text, cls, fragment, where):
    with pytest.raises(cls) as info:
        FMT.parse(text, SPACE, PRESET)
    assert fragment in str(info.value)
    assert info.value.position == where(text)
    assert f"at character {where(text)}" in str(info.value)


def test_unicode_positions_count_characters():
    text = "<think>思考</think><answer>[{'action': '点击', 'point': [1, 2]}]</answer>"
    with pytest.raises(FormatParseError) as info:
        FMT.parse(text, SPACE, PRESET)
    assert info.value.position == text.index("'点击'")


# -- properties ------------------------------------------------------------------------------------

VALID = [c[0] for c in CASES]
NOISE = st.sampled_from(list("'\"[]{}(),:<>/\\- 0123456789abcxyz\n") + ["-100", "<answer>", "</answer>", "</think>",
                                                                          "1e309", "nan", "**", "'click'"])


def mutated():
    return mutated_outputs(VALID, NOISE, [0, -100, 1484, 1485, 840], "'\"[]{}")


def _check(text: str) -> None:
    try:
        parsed = FMT.parse(text, SPACE, PRESET)
    except FormatParseError as e:
        assert e.position is None or 0 <= e.position <= len(text)
        return
    assert parsed.actions
    for action in parsed.actions:
        for p in (action.point, action.end):
            if p is not None:
                assert 0.0 <= p.x <= 1.0 and 0.0 <= p.y <= 1.0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutations_only_raise_format_errors(text):
    _check(text)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=200))
def test_random_text_only_raises_format_errors(text):
    _check(text)
    _check("<answer>" + text + "</answer>")


@settings(max_examples=150, deadline=None)
@given(st.floats(0, 1), st.floats(0, 1), st.sampled_from(GOLDEN_SIZES))
def test_round_trip_within_half_a_model_pixel(x, y, size):
    space = PRESET.space(size)
    mx, my = space.from_point(Point(x, y))
    parsed = FMT.parse(answer("click", (round(mx), round(my))), space, PRESET)
    p = parsed.actions[0].point
    w, h = space.input_size
    assert abs(p.x * w - mx) <= 0.5 + 1e-9 and abs(p.y * h - my) <= 0.5 + 1e-9


def test_answer_is_never_evaluated():
    # a literal_eval-only reader: a call inside the answer is a format error, never run
    text = "<answer>[{'action': __import__('os').getcwd()}]</answer>"
    with pytest.raises(FormatParseError, match="not a Python literal"):
        FMT.parse(text, SPACE, PRESET)
    assert ast.literal_eval("[{'a': 1}]")  # the grammar is Python literals


# -- GUI-R1's names of unified actions, and the released benchmark reader -----------------------------


def test_a_unified_action_has_its_guir1_name_and_text():
    assert action_name(Action(ActionKind.LONG_PRESS, point=Point(0, 0))) == ("long_press", None)
    assert action_name(Action(ActionKind.KEY, keys=("Enter",))) == ("enter", None)
    assert action_name(Action(ActionKind.KEY, keys=("Tab",))) == ("press_tab", None)
    assert action_name(Action(ActionKind.HOTKEY, keys=("Control", "c"))) == ("hotkey", "control c")
    assert action_name(Action(ActionKind.FINISH)) == ("complete", None)
    assert action_name(Action(ActionKind.OPEN_URL, text="https://x")) is None
    assert action_name(Action(ActionKind.KEY, keys=("Enter",)), ACTION_LISTS["omniact-web"]) == ("press_enter", None)
    assert action_name(Action(ActionKind.KEY, keys=("Escape",))) == ("close/delete", None)
    assert action_name(Action(ActionKind.SCROLL, direction="up")) == ("scroll", "up")
    assert action_name(Action(ActionKind.TYPE, text="hi")) == ("type", "hi")
    assert action_name(Action(ActionKind.INFEASIBLE, text="no")) == ("impossible", None)


@pytest.mark.parametrize(("text", "expected"), [
    ("<think>t</think><answer>[{'action': 'click', 'point': [100, 50], 'input_text': 'no input text'}]</answer>",
     ("click", (0.5, 0.5), "no input text")),
    # a name handeye cannot execute is still read, as the released scripts read it
    ("<answer>[{'action': 'press_recent', 'point': [-100, -100], 'input_text': 'no input text'}]</answer>",
     ("press_recent", (0.0, 0.0), "no input text")),
    ("<answer>[{'action': 'type', 'point': [-100, -100], 'input_text': 'shanghai mall'}]</answer>",
     ("type", (0.0, 0.0), "shanghai mall")),
    ("no answer at all", (None, None, "no input text")),
])
def test_guir1_outputs_are_read_as_the_released_scripts_read_them(text: str, expected: tuple) -> None:
    p = read_released(text, (200, 100))
    assert (p.action, p.point, p.text) == expected

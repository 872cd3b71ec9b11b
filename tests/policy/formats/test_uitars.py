"""UI-TARS format (v1 and 1.5): prompts, messages, goldens, parsing tables, properties."""

from __future__ import annotations

import dataclasses
from functools import lru_cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.policy.formats.fuzz import mutated_outputs

from devices.actions import Action, ActionKind, Point
from policy.base import HistoryEntry
from policy.coords import CoordMode
from policy.errors import CoordinateError, FormatParseError
from policy.formats import get_format
from policy.formats.uitars import UiTarsFormat, add_box_token
from policy.presets import PRESETS
from tests.policy.reference import GOLDEN_SIZES, reference_input_size

FMT = UiTarsFormat()
FAMILY_PRESETS = [p for p in PRESETS.values() if p.family == "ui-tars"]
P15 = PRESETS["ByteDance-Seed/UI-TARS-1.5-7B"]
P1 = PRESETS["bytedance-research/UI-TARS-7B-DPO"]
FRAME = (1920, 1080)
S15 = P15.space(FRAME)  # 1932 x 1092 model image
S1 = P1.space(FRAME)


@lru_cache(maxsize=None)
def ref_size(w: int, h: int, model_id: str) -> tuple[int, int]:
    p = PRESETS[model_id]
    return reference_input_size(w, h, p.min_pixels, p.max_pixels, p.pre_resize.value, p.pre_resize_pixels)


def test_registry_and_family():
    assert {p.version for p in FAMILY_PRESETS} == {"1.5", "1"}
    fmt = get_format("ui-tars")
    assert isinstance(fmt, UiTarsFormat) and fmt.family == "ui-tars"


# -- goldens ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("preset", FAMILY_PRESETS, ids=lambda p: p.model_id)
@pytest.mark.parametrize("size", GOLDEN_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_golden_sizes_and_points(preset, size):
    w, h = size
    rw, rh = ref_size(w, h, preset.model_id)
    assert preset.input_size(size) == (rw, rh)
    space = preset.space(size)
    if preset.version == "1":
        assert preset.coord_mode is CoordMode.RELATIVE_1000
        mx, my = 333, 667
        ex, ey = mx / 1000, my / 1000
        fu, fv = mx / 1000 * w, my / 1000 * h
    else:
        assert preset.coord_mode is CoordMode.ABSOLUTE
        mx, my = rw // 3, (2 * rh) // 3
        ex, ey = mx / rw, my / rh
        fu, fv = mx * w / rw, my * h / rh
    parsed = FMT.parse(f"Thought: go\nAction: click(start_box='<|box_start|>({mx},{my})<|box_end|>')", space, preset)
    (act,) = parsed.actions
    assert act.point.x == pytest.approx(ex) and act.point.y == pytest.approx(ey)
    u, v = space.to_frame_pixels(act.point)
    assert u == pytest.approx(fu) and v == pytest.approx(fv)
    assert parsed.model_points == ((mx, my),)


# -- prompts and messages --------------------------------------------------------------------------

COMPUTER_15 = (
    "You are a GUI agent. You are given a task and your action history, with screenshots. You need to perform the "
    "next action to complete the task.\n\n## Output Format\n```\nThought: ...\nAction: ...\n```\n\n"
    "## Action Space\n\n"
    "click(start_box='<|box_start|>(x1,y1)<|box_end|>')\n"
    "left_double(start_box='<|box_start|>(x1,y1)<|box_end|>')\n"
    "right_single(start_box='<|box_start|>(x1,y1)<|box_end|>')\n"
    "drag(start_box='<|box_start|>(x1,y1)<|box_end|>', end_box='<|box_start|>(x3,y3)<|box_end|>')\n"
    "hotkey(key='')\n"
    "type(content='xxx') # Use escape characters \\', \\\", and \\n in content part to ensure we can parse the "
    "content in normal python string format. If you want to submit your input, use \\n at the end of content. \n"
    "scroll(start_box='<|box_start|>(x1,y1)<|box_end|>', direction='down or up or right or left')\n"
    "wait() #Sleep for 5s and take a screenshot to check for any changes.\n"
    "finished(content='xxx') # Use escape characters \\', \\\", and \\n in content part to ensure we can parse the "
    "content in normal python string format.\n\n\n"
    "## Note\n- Use English in `Thought` part.\n"
    "- Write a small plan and finally summarize your next action (with its target element) in one sentence in "
    "`Thought` part.\n\n## User Instruction\nOpen the settings"
)


def test_prompt_computer_15_exact():
    assert FMT.prompt_text("Open the settings", P15) == COMPUTER_15
    assert "Use Chinese in" in UiTarsFormat(language="Chinese").prompt_text("x", P15)


def test_prompt_grounding_15_exact():
    assert FMT.prompt_text("the OK button", dataclasses.replace(P15, variant="grounding")) == (
        "You are a GUI agent. You are given a task and your action history, with screenshots. You need to perform "
        "the next action to complete the task. \n\n## Output Format\n\nAction: ...\n\n\n## Action Space\n"
        "click(start_box='<|box_start|>(x1,y1)<|box_end|>')\n\n## User Instruction\nthe OK button"
    )


def test_prompt_mobile_15_shape():
    text = FMT.prompt_text("t", dataclasses.replace(P15, variant="mobile"))
    assert text.startswith("You are a GUI agent.") and "complete the task. \n## Output Format\n```" in text
    assert "```\n## Action Space\n" in text
    for line in ("long_press(start_box=", "open_app(app_name='')", "press_home()", "press_back()"):
        assert line in text
    assert "call_user" not in text and "hotkey" not in text


def test_prompt_v1_differences():
    computer = FMT.prompt_text("t", P1)
    assert "finished()\ncall_user() # Submit the task and call the user" in computer
    mobile = FMT.prompt_text("t", dataclasses.replace(P1, variant="mobile"))
    assert "long_press(start_box='<|box_start|>(x1,y1)<|box_end|>', time='')" in mobile
    assert "scroll(start_box='<|box_start|>(x1,y1)<|box_end|>', end_box='<|box_start|>(x3,y3)<|box_end|>')" in mobile
    assert FMT.prompt_text("the OK button", dataclasses.replace(P1, variant="grounding")) == (
        "Output only the coordinate of one point in your response. What element matches the following task: "
        "the OK button"
    )


def test_unknown_variant_and_version():
    with pytest.raises(ValueError, match="computer, mobile, grounding"):
        FMT.prompt_text("t", dataclasses.replace(P15, variant="tablet"))
    with pytest.raises(ValueError, match="1.5, 1"):
        FMT.prompt_text("t", dataclasses.replace(P15, version="2"))


def test_messages_keep_last_screenshots():
    hist = [HistoryEntry(Action(ActionKind.CLICK, point=Point(0.5, 0.5)),
                         raw_output=f"Thought: s{i}\nAction: click(start_box='({i},{i})')") for i in range(6)]
    msgs = FMT.build_prompt("task", hist, S15, P15).messages
    assert msgs[0] == {"role": "system", "content": [{"type": "text", "text": "You are a helpful assistant."}]}
    assert msgs[1]["role"] == "user" and msgs[1]["content"][0]["text"].endswith("## User Instruction\ntask")
    images = [m["content"][0]["image"] for m in msgs if m["content"][0]["type"] == "image"]
    assert images == [2, 3, 4, 5, "current"]  # history_images = 5, the current one included
    replies = [m["content"][0]["text"] for m in msgs if m["role"] == "assistant"]
    assert len(replies) == 6  # older steps keep their text
    assert replies[0] == "Thought: s0\nAction: click(start_box='<|box_start|>(0,0)<|box_end|>')"
    roles = [m["role"] for m in msgs[2:]]
    assert roles == ["assistant", "assistant", "user", "assistant", "user", "assistant", "user", "assistant",
                     "user", "assistant", "user"]
    assert msgs[-1] == {"role": "user", "content": [{"type": "image", "image": "current"}]}


def test_history_without_raw_output_is_rendered_in_grammar():
    hist = [HistoryEntry(Action(ActionKind.TYPE, text="it's\n")),
            HistoryEntry(Action(ActionKind.CLICK, point=Point(0.5, 0.25)))]
    msgs = FMT.build_prompt("t", hist, S1, P1).messages
    replies = [m["content"][0]["text"] for m in msgs if m["role"] == "assistant"]
    assert replies == [
        "Action: type(content='it\\'s\\n')", "Action: click(start_box='<|box_start|>(500,250)<|box_end|>')"
    ]
    # and they parse back to the same actions
    assert FMT.parse(replies[0], S1, P1).actions == (hist[0].action,)
    assert FMT.parse(replies[1], S1, P1).actions == (hist[1].action,)


def test_add_box_token():
    assert add_box_token("Action: drag(start_box='(1,2)', end_box='(3,4)')") == (
        "Action: drag(start_box='<|box_start|>(1,2)<|box_end|>', end_box='<|box_start|>(3,4)<|box_end|>')"
    )
    already = "Action: click(start_box='<|box_start|>(1,2)<|box_end|>')"
    assert add_box_token(already) == already


# -- parsing tables --------------------------------------------------------------------------------

# 1.5 on 1920x1080: model image 1932x1092; (966,546) is its centre
C = Point(0.5, 0.5)
Q = Point(483 / 1932, 273 / 1092)


def act(s: str) -> str:
    return f"Thought: a plan\nAction: {s}"


CASES_15 = [
    (act("click(start_box='(966,546)')"), [Action(ActionKind.CLICK, point=C)]),
    (act("click(start_box='<|box_start|>(966,546)<|box_end|>')"), [Action(ActionKind.CLICK, point=C)]),
    (act("click(point='<point>966 546</point>')"), [Action(ActionKind.CLICK, point=C)]),
    (act("click(start_box='(900,500,1032,592)')"), [Action(ActionKind.CLICK, point=C)]),
    (act("click(start_box='[900, 500, 1032, 592]')"), [Action(ActionKind.CLICK, point=C)]),
    (act("left_single(start_box='(966,546)')"), [Action(ActionKind.CLICK, point=C)]),
    (act("left_double(start_box='(966,546)')"), [Action(ActionKind.DOUBLE_CLICK, point=C)]),
    (act("right_single(start_box='(966,546)')"), [Action(ActionKind.RIGHT_CLICK, point=C)]),
    (act("long_press(start_box='(966,546)')"), [Action(ActionKind.LONG_PRESS, point=C)]),
    (act("drag(start_box='(966,546)', end_box='(483,273)')"), [Action(ActionKind.DRAG, point=C, end=Q)]),
    (act("drag(start_point='<point>966 546</point>', end_point='<point>483 273</point>')"),
     [Action(ActionKind.DRAG, point=C, end=Q)]),
    (act("hotkey(key='ctrl c')"), [Action(ActionKind.HOTKEY, keys=("Control", "c"))]),
    (act("hotkey(key='enter')"), [Action(ActionKind.KEY, keys=("Enter",))]),
    (act("hotkey(key='ctrl+shift+t')"), [Action(ActionKind.HOTKEY, keys=("Control", "Shift", "t"))]),
    (act("type(content='hello')"), [Action(ActionKind.TYPE, text="hello")]),
    (act("type(content='it\\'s \\\"quoted\\\"\\n')"), [Action(ActionKind.TYPE, text="it's \"quoted\"\n")]),
    (act("type(content='a bare ' quote and f(x') here')"),
     [Action(ActionKind.TYPE, text="a bare ' quote and f(x') here")]),
    (act("type(content='line1\\nline2')"), [Action(ActionKind.TYPE, text="line1\nline2")]),
    (act("scroll(start_box='(966,546)', direction='down')"),
     [Action(ActionKind.SCROLL, point=C, direction="down", amount=0.5)]),
    (act("scroll(direction='Up')"), [Action(ActionKind.SCROLL, direction="up")]),
    (act("wait()"), [Action(ActionKind.WAIT, duration_s=5.0)]),
    (act("finished(content='The answer is 42.')"), [Action(ActionKind.FINISH, text="The answer is 42.")]),
    (act("finished()"), [Action(ActionKind.FINISH)]),
    (act("call_user()"), [Action(ActionKind.ASK_USER, text="the model asked for the user")]),
    # declining: the target is not there (an abstention, like call_user and InfiGUI-G1's [])
    (act("finished(content='The Save button is not found on this screen.')"),
     [Action(ActionKind.INFEASIBLE, text="The Save button is not found on this screen.")]),
    (act("finished(content='屏幕上找不到“保存”按钮')"), [Action(ActionKind.INFEASIBLE, text="屏幕上找不到“保存”按钮")]),
    (act("press_home()"), [Action(ActionKind.HOME)]),
    (act("press_back()"), [Action(ActionKind.BACK)]),
    (act("open_app(app_name='Settings')"), [Action(ActionKind.OPEN_APP, text="Settings")]),
    (act("click(start_box='(966,546)')\n\ntype(content='hi\\n')\n\n  hotkey(key='ctrl s')"),
     [Action(ActionKind.CLICK, point=C), Action(ActionKind.TYPE, text="hi\n"),
      Action(ActionKind.HOTKEY, keys=("Control", "s"))]),
    ("Reflection: it failed\nAction_Summary: click again\nAction: click(start_box='(966,546)')",
     [Action(ActionKind.CLICK, point=C)]),
    ("Thought: Action: is mentioned here\nAction: press_back()", [Action(ActionKind.BACK)]),
]


@pytest.mark.parametrize("text,expected", CASES_15, ids=[c[0][24:60] for c in CASES_15])
def test_parse_table_15(text, expected):
    assert list(FMT.parse(text, S15, P15).actions) == expected


def test_thought_and_summary():
    assert FMT.parse(act("wait()"), S15, P15).thought == "a plan"
    parsed = FMT.parse("Reflection: it failed\nAction_Summary: click again\nAction: press_back()", S15, P15)
    assert parsed.thought == "click again" and parsed.info["reflection"] == "it failed"


# v1 on 1920x1080: 0-1000 grid
CASES_1 = [
    (act("click(start_box='(500,500)')"), [Action(ActionKind.CLICK, point=Point(0.5, 0.5))]),
    (act("click(start_box='(400,400,600,600)')"), [Action(ActionKind.CLICK, point=Point(0.5, 0.5))]),
    (act("long_press(start_box='(500,500)', time='2')"),
     [Action(ActionKind.LONG_PRESS, point=Point(0.5, 0.5), duration_s=2.0)]),
    (act("long_press(start_box='(500,500)', time='')"), [Action(ActionKind.LONG_PRESS, point=Point(0.5, 0.5))]),
    (act("scroll(start_box='(500,800)', end_box='(500,200)')"),
     [Action(ActionKind.DRAG, point=Point(0.5, 0.8), end=Point(0.5, 0.2))]),
    (act("finished()"), [Action(ActionKind.FINISH)]),
    (act("call_user()"), [Action(ActionKind.ASK_USER, text="the model asked for the user")]),
]


@pytest.mark.parametrize("text,expected", CASES_1, ids=[c[0][24:60] for c in CASES_1])
def test_parse_table_v1(text, expected):
    assert list(FMT.parse(text, S1, P1).actions) == expected


def test_grounding_outputs():
    g15 = dataclasses.replace(P15, variant="grounding")
    assert FMT.parse("Action: click(start_box='(966,546)')", S15, g15).actions == (Action(ActionKind.CLICK, point=C),)
    g1 = dataclasses.replace(P1, variant="grounding")
    assert FMT.parse("(500,250)", S1, g1).actions == (Action(ActionKind.CLICK, point=Point(0.5, 0.25)),)
    with pytest.raises(FormatParseError, match="no 'Action:' line"):
        FMT.parse("(500,250)", S1, P1)


ERRORS = [
    ("Thought: hmm, no action", FormatParseError, "no 'Action:' line", len),
    ("Thought: x\nAction:   ", FormatParseError, "followed by no action", lambda t: t.index(":   ") + 1),
    (act("fly(start_box='(1,2)')"), FormatParseError, "unknown UI-TARS action 'fly'", lambda t: t.index("fly")),
    (act("click start_box='(1,2)'"), FormatParseError, "not a call like", lambda t: t.index("click")),
    (act("click(start_box='(1,2)'"), FormatParseError, "not closed with ')'", len),
    (act("click(start_box=(1,2))"), FormatParseError, "must be a string literal, got Tuple",
     lambda t: t.index("(1,2)")),
    (act("click(start_box='(1,2)' x)"), FormatParseError, "not a valid call", lambda t: t.index("'(1,2)'")),
    (act("click('(1,2)')"), FormatParseError, "keyword arguments only", lambda t: t.index("'(1,2)'")),
    (act("click()"), FormatParseError, "click needs start_box", lambda t: t.index("click")),
    (act("click(start_box='(1,2,3)')"), FormatParseError, "is not '(x,y)'", lambda t: t.index("'(1,2,3)'")),
    (act("click(start_box='(a,b)')"), FormatParseError, "is not '(x,y)'", lambda t: t.index("'(a,b)'")),
    (act("click(start_box='(1933,10)')"), CoordinateError, "outside the 1932x1092 image",
     lambda t: t.index("'(1933")),
    (act("click(start_box='(-100,-100)')"), FormatParseError, "no-target point", lambda t: t.index("'(-100")),
    (act("scroll(start_box='(1,2)', direction='diagonal')"), FormatParseError, "up, down, left or right",
     lambda t: t.index("'diagonal")),
    (act("type(content='')"), FormatParseError, "type needs a non-empty content", lambda t: t.index("')") ),
    (act("type(content='abc)"), FormatParseError, "content string is not closed", lambda t: t.index("abc")),
    (act("hotkey(key='ctrl banana')"), FormatParseError, "unknown key 'banana'", lambda t: t.index("'ctrl")),
    (act("hotkey(key='')"), FormatParseError, "at least one key", lambda t: t.index("''")),
    (act("open_app(app_name='')"), FormatParseError, "non-empty app_name", lambda t: t.index("''")),
    (act("long_press(start_box='(1,2)', time='soon')"), FormatParseError, "not a number of seconds",
     lambda t: t.index("'soon")),
    (act("click(start_box='(1,2)')\n\nbogus"), FormatParseError, "not a call like", lambda t: t.index("bogus")),
]


@pytest.mark.parametrize("text,cls,fragment,where", ERRORS, ids=[e[2][:40] for e in ERRORS])
def test_parse_errors_say_what_and_where(text, cls, fragment, where):
    with pytest.raises(cls) as info:
        FMT.parse(text, S15, P15)
    assert fragment in str(info.value)
    assert info.value.position == where(text)


def test_v1_coordinates_outside_the_grid():
    with pytest.raises(CoordinateError, match="outside the 0-1000 grid"):
        FMT.parse(act("click(start_box='(1001,5)')"), S1, P1)


# -- properties ------------------------------------------------------------------------------------

VALID = [c[0] for c in CASES_15]
NOISE = st.sampled_from(list("'\"[](),=<>/\\- 0123456789abcxyz\n") + ["\n\n", "Action:", "<|box_start|>", "<point>",
                                                                        "-100", "1e309", "**", "')"])


def mutated():
    return mutated_outputs(VALID, NOISE, [0, -100, 1932, 1933, 1092], "'\"()[]")


def _check(text: str, space, preset) -> None:
    try:
        parsed = FMT.parse(text, space, preset)
    except FormatParseError as e:
        assert e.position is None or 0 <= e.position <= len(text)
        return
    assert parsed.actions
    for action in parsed.actions:
        for p in (action.point, action.end):
            if p is not None:
                assert 0.0 <= p.x <= 1.0 and 0.0 <= p.y <= 1.0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated(), st.booleans())
def test_mutations_only_raise_format_errors(text, v1):
    _check(text, S1 if v1 else S15, P1 if v1 else P15)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=200), st.sampled_from(["computer", "grounding"]))
def test_random_text_only_raises_format_errors(text, variant):
    preset = dataclasses.replace(P15, variant=variant)
    _check(text, S15, preset)
    _check("Action: " + text, S15, preset)
    _check("Action: click(start_box='" + text + "')", S15, preset)
    _check("Action: type(content='" + text + "')", S15, preset)


@settings(max_examples=150, deadline=None)
@given(st.floats(0, 1), st.floats(0, 1), st.sampled_from(GOLDEN_SIZES), st.booleans())
def test_round_trip_within_half_a_model_pixel(x, y, size, v1):
    preset = P1 if v1 else P15
    space = preset.space(size)
    mx, my = space.from_point(Point(x, y))
    parsed = FMT.parse(f"Action: click(start_box='({round(mx)},{round(my)})')", space, preset)
    p = parsed.actions[0].point
    ex, ey = space.extent
    assert abs(p.x * ex - mx) <= 0.5 + 1e-9 and abs(p.y * ey - my) <= 0.5 + 1e-9

"""The action contract: validation of every kind, points, keys, and the dict round trip."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devices import Action, ActionKind, InvalidAction, Point, ScrollDirection
from devices.keys import normalize_key

# -- points -------------------------------------------------------------------------------------


@pytest.mark.parametrize("x, y", [(0, 0), (1, 1), (0.0, 1.0), (0.5, 0.25), (1, 0)])
def test_point_accepts_the_closed_unit_square(x, y):
    p = Point(x, y)
    assert (p.x, p.y) == (float(x), float(y))
    assert type(p.x) is float and type(p.y) is float


@pytest.mark.parametrize(
    "x, y",
    [
        (-0.001, 0.5), (1.0001, 0.5), (0.5, -1e-9), (0.5, 2.0), (640, 360),
        (math.nan, 0.5), (0.5, math.inf), (-math.inf, 0),
    ],
)
def test_point_outside_unit_square_or_not_finite_is_invalid(x, y):
    with pytest.raises(InvalidAction, match="outside \\[0, 1\\]"):
        Point(x, y)


@pytest.mark.parametrize("x, y", [(True, 0.5), (0.5, False), ("0.5", 0.5), (None, 0.5), ([0.5], 0.5)])
def test_point_needs_real_numbers_not_bools_or_strings(x, y):
    with pytest.raises(InvalidAction, match="must be a number"):
        Point(x, y)


def test_point_pixel_conversions_use_continuous_coordinates():
    # the centre of pixel column 639 of a 640-wide frame is u = 639.5
    p = Point.from_pixels(639.5, 0.5, 640, 360)
    assert p.x == 639.5 / 640 and p.y == 0.5 / 360
    assert Point(0.25, 0.5).to_pixels(640, 360) == (160.0, 180.0)
    assert Point(1, 1).to_pixels(1280, 720) == (1280.0, 720.0)
    with pytest.raises(InvalidAction):
        Point.from_pixels(641, 0, 640, 360)


# -- required fields per kind ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["click", "double_click", "right_click", "long_press", "hover", "drag"])
def test_pointed_kinds_need_a_point(kind):
    with pytest.raises(InvalidAction, match=f"{kind} needs a point"):
        Action(kind)


def test_drag_needs_an_end_and_only_drag_takes_one():
    with pytest.raises(InvalidAction, match="drag needs an end point"):
        Action("drag", point=Point(0.1, 0.1))
    with pytest.raises(InvalidAction, match="click takes no end point"):
        Action("click", point=Point(0.1, 0.1), end=Point(0.2, 0.2))
    a = Action("drag", point=Point(0.1, 0.2), end=Point(0.3, 0.4))
    assert a.end == Point(0.3, 0.4)


@pytest.mark.parametrize("kind", ["type", "open_app", "open_url", "infeasible"])
def test_text_kinds_need_non_empty_text(kind):
    with pytest.raises(InvalidAction, match=f"{kind} needs a non-empty text"):
        Action(kind)
    with pytest.raises(InvalidAction, match=f"{kind} needs a non-empty text"):
        Action(kind, text="")


def test_text_must_be_a_string():
    with pytest.raises(InvalidAction, match="text must be a string, got int"):
        Action("finish", text=42)


def test_finish_text_is_optional():
    assert Action("finish").text is None
    assert Action("finish", text="42").text == "42"


def test_type_may_click_a_point_first():
    a = Action("type", text="hi", point=Point(0.5, 0.5))
    assert a.point == Point(0.5, 0.5) and a.text == "hi"


def test_key_takes_exactly_one_key_and_hotkey_one_or_more():
    with pytest.raises(InvalidAction, match="key needs at least one key"):
        Action("key")
    with pytest.raises(InvalidAction, match="key takes exactly one key"):
        Action("key", keys=("Control", "a"))
    with pytest.raises(InvalidAction, match="hotkey needs at least one key"):
        Action("hotkey", keys=())
    assert Action("hotkey", keys=("ctrl", "shift", "t")).keys == ("Control", "Shift", "t")
    assert Action("key", keys=["Return"]).keys == ("Enter",)  # a list is accepted and stored as a tuple


def test_only_key_kinds_take_keys():
    with pytest.raises(InvalidAction, match="click takes no keys"):
        Action("click", point=Point(0, 0), keys=("a",))


def test_scroll_direction_and_amount():
    with pytest.raises(InvalidAction, match="scroll needs a direction"):
        Action("scroll")
    with pytest.raises(InvalidAction, match="'sideways' is not up, down, left or right"):
        Action("scroll", direction="sideways")
    a = Action("scroll", direction="down")
    assert a.direction is ScrollDirection.DOWN and a.amount == 0.5 and a.point is None
    assert Action("scroll", direction="left", amount=2).amount == 2.0
    assert Action("scroll", direction="up", amount=10).amount == 10.0
    for bad in (0, -0.5, 10.5, True, "1", math.nan):
        with pytest.raises(InvalidAction, match="scroll amount"):
            Action("scroll", direction="up", amount=bad)
    with pytest.raises(InvalidAction, match="click takes no direction or amount"):
        Action("click", point=Point(0, 0), amount=0.5)
    with pytest.raises(InvalidAction, match="wait takes no direction or amount"):
        Action("wait", direction="up")


def test_durations():
    assert Action("wait").duration_s == 1.0
    assert Action("long_press", point=Point(0.5, 0.5)).duration_s == 1.0
    assert Action("wait", duration_s=0).duration_s == 0.0
    assert Action("wait", duration_s=600).duration_s == 600.0
    for bad in (-0.1, 600.5, False, "1", math.nan):
        with pytest.raises(InvalidAction, match="duration_s"):
            Action("wait", duration_s=bad)
    with pytest.raises(InvalidAction, match="click takes no duration_s"):
        Action("click", point=Point(0, 0), duration_s=1)


@pytest.mark.parametrize("kind", ["back", "home"])
def test_kinds_without_fields(kind):
    a = Action(kind)
    assert a.kind is ActionKind(kind)
    assert a.to_dict() == {"kind": kind}


def test_unknown_kind_lists_the_valid_kinds():
    with pytest.raises(InvalidAction) as info:
        Action("tap", point=Point(0.5, 0.5))
    message = str(info.value)
    assert "unknown action kind 'tap'" in message
    for kind in ActionKind:
        assert kind.value in message


def test_kind_may_be_given_as_enum_or_string():
    assert Action(ActionKind.BACK) == Action("back")
    assert Action("back").kind is ActionKind.BACK


def test_action_is_immutable():
    a = Action("back")
    with pytest.raises(AttributeError):
        a.kind = ActionKind.HOME  # type: ignore[misc]


# -- keys -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "alias, canonical",
    [
        ("ctrl", "Control"), ("CTRL", "Control"), ("control", "Control"), ("return", "Enter"), ("Return", "Enter"),
        ("enter", "Enter"), ("esc", "Escape"), ("cmd", "Meta"), ("win", "Meta"), ("option", "Alt"),
        ("pgdn", "PageDown"), ("up", "ArrowUp"), ("arrowleft", "ArrowLeft"), ("spacebar", "Space"), ("f5", "F5"),
        ("F12", "F12"), (" Tab ", "Tab"), ("a", "a"), ("A", "A"), ("+", "+"), (" ", " "),
    ],
)
def test_key_aliases_normalize(alias, canonical):
    assert normalize_key(alias) == canonical


def test_unknown_key_names_the_valid_keys():
    with pytest.raises(InvalidAction) as info:
        Action("key", keys=("Kontrol",))
    message = str(info.value)
    assert "unknown key 'Kontrol'" in message
    for name in ("Enter", "Escape", "Control", "ArrowDown", "PageUp", "F1", "F12"):
        assert name in message
    assert "ctrl" in message  # says that aliases exist


@pytest.mark.parametrize("bad", ["", None, 3])
def test_key_must_be_a_non_empty_string(bad):
    with pytest.raises(InvalidAction, match="non-empty string"):
        normalize_key(bad)


# -- dict form ------------------------------------------------------------------------------------


def test_to_dict_holds_only_set_fields():
    assert Action("click", point=Point(0.25, 0.75)).to_dict() == {"kind": "click", "point": [0.25, 0.75]}
    assert Action("scroll", direction="down").to_dict() == {"kind": "scroll", "direction": "down", "amount": 0.5}
    assert Action("hotkey", keys=("ctrl", "a")).to_dict() == {"kind": "hotkey", "keys": ["Control", "a"]}
    assert Action("wait").to_dict() == {"kind": "wait", "duration_s": 1.0}
    d = Action("drag", point=Point(0, 1), end=Point(1, 0)).to_dict()
    assert d == {"kind": "drag", "point": [0.0, 1.0], "end": [1.0, 0.0]}


def test_from_dict_examples():
    a = Action.from_dict({"kind": "type", "text": "你好", "point": [0.5, 0.5]})
    assert a == Action("type", text="你好", point=Point(0.5, 0.5))
    assert Action.from_dict({"kind": "key", "keys": "return"}).keys == ("Enter",)  # one key as a string
    assert Action.from_dict({"kind": "click", "point": (0.1, 0.2)}).point == Point(0.1, 0.2)
    assert Action.from_dict({"kind": "finish", "point": None}) == Action("finish")


def test_from_dict_errors_say_what_is_wrong():
    with pytest.raises(InvalidAction, match="must be a JSON object, got list"):
        Action.from_dict(["click"])
    with pytest.raises(InvalidAction, match=r"unknown action field\(s\) \['coords', 'x'\]"):
        Action.from_dict({"kind": "click", "x": 1, "coords": [1, 2]})
    with pytest.raises(InvalidAction, match="needs a 'kind'"):
        Action.from_dict({"point": [0.5, 0.5]})
    with pytest.raises(InvalidAction, match="unknown action kind 'swipe'"):
        Action.from_dict({"kind": "swipe"})
    with pytest.raises(InvalidAction, match=r"point must be \[x, y\]"):
        Action.from_dict({"kind": "click", "point": [0.5]})
    with pytest.raises(InvalidAction, match=r"end must be \[x, y\]"):
        Action.from_dict({"kind": "drag", "point": [0.5, 0.5], "end": {"x": 1, "y": 1}})
    with pytest.raises(InvalidAction, match="outside"):
        Action.from_dict({"kind": "click", "point": [512, 300]})
    with pytest.raises(InvalidAction, match="keys must be a list of key names"):
        Action.from_dict({"kind": "hotkey", "keys": ["Control", 1]})


def test_invalid_action_is_a_value_error():
    with pytest.raises(ValueError):
        Action.from_dict({"kind": "click"})


# -- round trip property --------------------------------------------------------------------------

unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
points = st.builds(Point, unit, unit)
texts = st.text(min_size=1, max_size=20)
key_names = st.sampled_from(["a", "Z", "1", "Enter", "ctrl", "Shift", "alt", "esc", "F4", "ArrowUp", "Tab", "+"])


def _actions() -> st.SearchStrategy[Action]:
    pointed = st.sampled_from(["click", "double_click", "right_click", "hover"])
    return st.one_of(
        st.builds(Action, pointed, points),
        st.builds(lambda p, d: Action("long_press", point=p, duration_s=d), points, st.none() | st.floats(0, 600)),
        st.builds(lambda p, e: Action("drag", point=p, end=e), points, points),
        st.builds(
            lambda d, a, p: Action("scroll", direction=d, amount=a, point=p),
            st.sampled_from(list(ScrollDirection)),
            st.none() | st.floats(min_value=0.0, max_value=10.0, exclude_min=True),
            st.none() | points,
        ),
        st.builds(lambda t, p: Action("type", text=t, point=p), texts, st.none() | points),
        st.builds(lambda k: Action("key", keys=(k,)), key_names),
        st.builds(lambda ks: Action("hotkey", keys=tuple(ks)), st.lists(key_names, min_size=1, max_size=3)),
        st.builds(lambda t: Action("open_app", text=t), texts),
        st.builds(lambda t: Action("open_url", text=t), texts),
        st.builds(lambda t: Action("infeasible", text=t), texts),
        st.builds(lambda t: Action("finish", text=t), st.none() | texts),
        st.builds(lambda d: Action("wait", duration_s=d), st.none() | st.floats(0, 600)),
        st.just(Action("back")),
        st.just(Action("home")),
    )


@given(_actions())
def test_dict_round_trip_property(action):
    d = action.to_dict()
    assert Action.from_dict(d) == action
    # the dict is JSON-ready and survives a trip through JSON text too
    assert Action.from_dict(json.loads(json.dumps(d))) == action
    assert d["kind"] == action.kind.value
    assert action.describe().startswith(action.kind.value)


def test_describe_is_short_and_readable():
    assert Action("click", point=Point(0.5, 0.25)).describe() == "click (0.500, 0.250)"
    assert Action("scroll", direction="down", amount=1).describe() == "scroll down 1"
    assert Action("hotkey", keys=("ctrl", "c")).describe() == "hotkey Control+c"
    long = Action("type", text="x" * 50).describe()
    assert long == "type '" + "x" * 37 + "...'"

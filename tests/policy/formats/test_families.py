"""What every registered format knows about its family beyond prompt and parse (policy.formats.base): the form of
its answers, its think block, whether it is grounding only, the answers SFT teaches (for a recorded action and for a
grounding target), the reward-side reading, its released benchmark scripts and the architecture a backend loads."""

from __future__ import annotations

import dataclasses
import enum
import json

import pytest

from devices.actions import Action, ActionKind, Point
from policy.backends.hf import TransformersBackend
from policy.coords import PreResize
from policy.errors import BackendError, FormatParseError, NoAnswerForm
from policy.formats import FORMAT_CLASSES, AnswerForm, Backbone, get_format
from policy.formats.base import ModelFormat
from policy.formats.guir1_prompts import read_released
from policy.presets import FAMILY_DEFAULTS, preset_for

FRAME = (1000, 800)


def test_every_format_says_what_its_answers_look_like_and_whether_it_thinks():
    """Hand-made table of (preset, answer form, think block, grounding only) for every family and variant."""
    table = {
        ("infigui-g1", "think"): (AnswerForm.POINT_LIST, True, True),
        ("infigui-g1", "no_think"): (AnswerForm.POINT_LIST, False, True),
        ("gui-r1", "high"): (AnswerForm.ACTION_LIST, True, False),
        ("qwen2.5-vl", "computer_use"): (AnswerForm.TOOL_CALL, False, False),
        ("qwen2.5-vl", "grounding"): (AnswerForm.BOX_LIST, False, True),
        ("ui-tars", "computer"): (AnswerForm.CALL, False, False),
        ("ui-tars", "grounding"): (AnswerForm.CALL, False, True),
    }
    for (family, variant), want in table.items():
        preset = preset_for("m", family, variant=variant)
        fmt = get_format(family)
        assert (fmt.answer_form(preset), fmt.thinks(preset), fmt.grounding_only(preset)) == want, (family, variant)
    assert {f: get_format(f).no_think_variant for f in FORMAT_CLASSES} == {
        "qwen2.5-vl": None, "infigui-g1": "no_think", "gui-r1": None, "ui-tars": None}
    assert {get_format(f).backbone for f in FORMAT_CLASSES} == {Backbone.QWEN_VL}
    assert all(ModelFormat in type(get_format(f)).__mro__ for f in FORMAT_CLASSES)  # they inherit its defaults


def test_grounding_targets_are_written_by_the_families_that_have_an_answer_for_one():
    infigui, guir1 = get_format("infigui-g1"), get_format("gui-r1")
    assert infigui.render_target((10.4, 20.6), instruction="OK", think=False) == '[{"point_2d": [10, 21]}]'
    assert infigui.render_target(None, instruction="OK") == (
        '<think>The element for "OK" is not on the screen.</think>\n[]')
    assert guir1.render_target((10.4, 20.6), instruction="x") == (
        "<think>The task asks for click.</think> <answer>[{'action': 'click', 'point': [10, 21], "
        "'input_text': 'no input text'}]</answer>")
    assert guir1.render_target(None, instruction="x") == (
        "<think>The task asks for impossible.</think> <answer>[{'action': 'impossible', 'point': [-100, -100], "
        "'input_text': 'no input text'}]</answer>")
    assert "'action': 'type', 'point': [3, 4], 'input_text': 'hi'" in guir1.render_target(
        (3, 4), instruction="x", action="type", text="hi")
    for family in ("qwen2.5-vl", "ui-tars"):
        with pytest.raises(NoAnswerForm, match=f"{family} has no answer for a grounding target"):
            get_format(family).render_target((1, 2), instruction="x")


@pytest.mark.parametrize("fmt_id", sorted(FAMILY_DEFAULTS))
def test_a_rendered_answer_parses_back_to_the_action(fmt_id):
    preset = preset_for("m", fmt_id)
    fmt, space = get_format(preset.family), preset.space(FRAME)
    click = Action(ActionKind.CLICK, point=Point(0.25, 0.5))
    got = fmt.parse(fmt.render_answer(click, space, preset, instruction="OK"), space, preset).actions[0]
    assert got.kind is ActionKind.CLICK
    assert abs(got.point.x - 0.25) * space.extent[0] <= 1 and abs(got.point.y - 0.5) * space.extent[1] <= 1


def test_what_a_family_cannot_write_is_no_answer_form():
    infigui = preset_for("m", "infigui-g1")
    space = infigui.space(FRAME)
    with pytest.raises(NoAnswerForm, match="this key went to no element"):
        get_format("infigui-g1").render_answer(Action(ActionKind.KEY, keys=("Enter",)), space, infigui)
    with pytest.raises(NoAnswerForm, match="neither a point nor a target box"):
        get_format("infigui-g1").render_answer(Action(ActionKind.TYPE, text="x"), space, infigui)
    typed = get_format("infigui-g1").render_answer(Action(ActionKind.TYPE, text="x"), space, infigui,
                                                   box=(0.1, 0.2, 0.3, 0.4))
    w, h = space.input_size
    assert json.loads(typed.split("\n")[-1]) == [{"point_2d": [round(0.2 * w), round(0.3 * h)]}]  # the box centre
    guir1 = preset_for("m", "gui-r1")
    drag = Action(ActionKind.DRAG, point=Point(0.1, 0.1), end=Point(0.5, 0.5))
    with pytest.raises(NoAnswerForm, match="GUI-R1 has no action for drag"):
        get_format("gui-r1").render_answer(drag, guir1.space(FRAME), guir1)
    desktop = preset_for("m", "qwen2.5-vl")
    with pytest.raises(NoAnswerForm, match="the computer_use tool has no action for back"):
        get_format("qwen2.5-vl").render_answer(Action(ActionKind.BACK), desktop.space(FRAME), desktop)


def test_the_strict_parse_is_the_parser_except_where_the_released_reward_refuses_more():
    broken = '<think>t</think>[{"point_2d": [1, 2]}, {'
    infigui = preset_for("m", "infigui-g1")
    fmt, space = get_format("infigui-g1"), infigui.space(FRAME)
    assert len(fmt.parse(broken, space, infigui).actions) == 1
    with pytest.raises(FormatParseError, match="never closed"):
        fmt.strict_parse(broken, space, infigui)
    with pytest.raises(FormatParseError, match="must start with <think>"):  # the think variant's gate
        fmt.strict_parse('[{"point_2d": [1, 2]}]', space, infigui)
    no_think = dataclasses.replace(infigui, variant="no_think")
    assert fmt.strict_parse('[{"point_2d": [1, 2]}]', space, no_think).actions
    guir1 = preset_for("m", "gui-r1")
    lenient = "<answer>[{'action': 'click', 'point': [10.5, 10], 'input_text': 'no input text'}]</answer>"
    g = get_format("gui-r1")
    assert g.strict_parse(lenient, guir1.space(FRAME), guir1) == g.parse(lenient, guir1.space(FRAME), guir1)


def test_only_gui_r1_has_released_scripts_for_the_action_benchmarks():
    guir1 = preset_for("m", "gui-r1")
    scripts = get_format("gui-r1").released_scripts(guir1, "guiodyssey")
    assert scripts is not None and scripts.read is read_released
    assert (scripts.preset.variant, scripts.preset.pre_resize, scripts.preset.pre_resize_pixels) == (
        "guiodyssey", PreResize.NONE, 0)
    assert guir1.pre_resize is PreResize.TRUNCATE_TO  # the run-time preset keeps its training cap
    for family in ("qwen2.5-vl", "infigui-g1", "ui-tars"):
        assert get_format(family).released_scripts(preset_for("m", family), "guiodyssey") is None


class Architecture(enum.Enum):
    MAMBA = "mamba"


class OtherBackbone:
    """A family whose checkpoints the transformers backend cannot load."""

    family = "other"
    backbone = Architecture.MAMBA


def test_the_transformers_backend_refuses_a_family_of_another_architecture(monkeypatch, tmp_path):
    monkeypatch.setitem(FORMAT_CLASSES, "other", "tests.policy.formats.test_families:OtherBackbone")
    preset = dataclasses.replace(preset_for("m", "qwen2.5-vl"), family="other")
    with pytest.raises(BackendError, match="loads qwen-vl models; other is mamba"):
        TransformersBackend(tmp_path, preset=preset)

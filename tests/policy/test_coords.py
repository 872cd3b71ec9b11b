"""The coordinate contract, checked against transformers' own smart_resize and processor."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devices.actions import Point
from policy.coords import CoordMode, ModelSpace, PreResize, pre_resize, smart_resize
from policy.errors import CoordinateError, UnknownModel
from policy.formats import FORMAT_CLASSES
from policy.presets import FAMILY_DEFAULTS, PRESETS, preset_for
from tests.policy.reference import GOLDEN_SIZES, reference_input_size, reference_smart_resize

BUDGETS = [(3136, 12_845_056), (78_400, 12_845_056), (3136, 2700 * 784), (256 * 784, 1280 * 784), (3136, 1_003_520)]


@settings(max_examples=300, deadline=None)
@given(h=st.integers(28, 8000), w=st.integers(28, 8000), budget=st.sampled_from(BUDGETS))
def test_smart_resize_matches_transformers(h, w, budget):
    if max(h, w) / min(h, w) > 200:
        with pytest.raises(ValueError):
            smart_resize(h, w, 28, *budget)
        return
    assert smart_resize(h, w, 28, *budget) == tuple(reference_smart_resize(h, w, 28, *budget))


def test_round_half_to_even_case():
    # 1022 / 28 = 36.5: Python (and qwen-vl-utils) round to 36 -> 1008; round-half-up would give 1036.
    assert smart_resize(1022, 1000) == (1008, 1008)
    assert reference_smart_resize(1022, 1000, 28, 3136, 12_845_056) == (1008, 1008)
    assert math.floor(1022 / 28 + 0.5) * 28 == 1036  # what a half-up port computes


@pytest.mark.parametrize("model_id", sorted(PRESETS))
@pytest.mark.parametrize("size", GOLDEN_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_every_preset_sizes_like_the_processor(model_id, size):
    preset = PRESETS[model_id]
    expected = reference_input_size(*size, preset.min_pixels, preset.max_pixels, preset.pre_resize.value,
                                    preset.pre_resize_pixels)
    assert preset.input_size(size) == expected


def test_pre_resizes_by_hand():
    # InfiGUI-G1: 3840x2160 = 8,294,400 px > 4,390,400: scale sqrt(4390400/8294400) = 0.72754...
    assert pre_resize(3840, 2160, PreResize.ROUND_DOWN_TO, 5600 * 784) == (2794, 1571)
    # GUI-R1: truncation, not rounding: 1920x1080 -> scale sqrt(1258291/2073600) = 0.77899...
    assert pre_resize(1920, 1080, PreResize.TRUNCATE_TO, 1_258_291) == (1495, 841)
    assert pre_resize(800, 600, PreResize.TRUNCATE_TO, 1_258_291) == (800, 600)  # under the cap: unchanged


def test_model_space_absolute_and_relative():
    space = ModelSpace((1920, 1080), (1932, 1092), CoordMode.ABSOLUTE)
    p = space.to_point(966, 546)
    assert p == Point(0.5, 0.5)
    assert space.to_frame_pixels(p) == (960.0, 540.0)
    assert space.to_point(1932, 1092) == Point(1.0, 1.0)  # the far edge is inside (inclusive boxes)
    assert space.to_point(-100, -100) is None  # GUI-R1's "no target"
    for bad in [(-1, 5), (1933, 5), (5, 1093), (float("nan"), 1)]:
        with pytest.raises(CoordinateError, match="outside the 1932x1092 image the model saw"):
            space.to_point(*bad)
    with pytest.raises(CoordinateError, match="must be numbers"):
        space.to_point("12", 3)  # type: ignore[arg-type]
    v1 = ModelSpace((1080, 2400), (1092, 2408), CoordMode.RELATIVE_1000)
    assert v1.to_point(250, 500) == Point(0.25, 0.5)
    assert v1.to_frame_pixels(Point(0.25, 0.5)) == (270.0, 1200.0)
    with pytest.raises(CoordinateError, match="0-1000 grid"):
        v1.to_point(1001, 3)


@settings(max_examples=200, deadline=None)
@given(x=st.floats(0, 1), y=st.floats(0, 1), size=st.sampled_from(GOLDEN_SIZES), mode=st.sampled_from(list(CoordMode)))
def test_round_trip_within_half_a_model_pixel(x, y, size, mode):
    preset = preset_for("ui-tars-v1" if mode is CoordMode.RELATIVE_1000 else "Qwen/Qwen2.5-VL-7B-Instruct")
    space = preset.space(size)
    mx, my = space.from_point(Point(x, y))
    back = space.to_point(round(mx), round(my))  # a model writes integers
    sx, sy = space.extent
    assert back is not None
    assert abs(back.x * sx - mx) <= 0.5 and abs(back.y * sy - my) <= 0.5


def test_presets_registry():
    assert {p.family for p in PRESETS.values()} <= set(FORMAT_CLASSES)
    assert preset_for("UI-TARS-1.5-7B").model_id == "ByteDance-Seed/UI-TARS-1.5-7B"  # org and case optional
    custom = preset_for("/models/my-finetune", "infigui-g1")
    assert custom.family == "infigui-g1" and custom.model_id == "/models/my-finetune"
    assert preset_for("x", "gui-r1", max_pixels=1_000_000).max_pixels == 1_000_000
    with pytest.raises(UnknownModel, match=r"did you mean .*InfiGUI-G1-3B.*--format"):
        preset_for("InfiX-ai/InfiGUI-G1-3")
    with pytest.raises(UnknownModel, match="unknown format 'gpt'"):
        preset_for("x", "gpt")
    assert set(FAMILY_DEFAULTS) >= {"qwen2.5-vl", "infigui-g1", "gui-r1", "ui-tars", "ui-tars-v1"}

"""Collapse metrics on hand-made groups (every value worked out by hand), the monitor's flags, early stopping."""

from __future__ import annotations

import json
import logging
import math

import pytest

from train.monitors import (
    CollapseKind,
    CollapseMonitor,
    CollapseThresholds,
    EarlyStopping,
    collapse_metrics,
    response_points,
)
from train.samples import TrainSample


def sample(text: str, reward: float, group: int, size: tuple[int, int], tokens: int = 4) -> TrainSample:
    return TrainSample(messages=[], image=None, frame_size=size, input_size=size, response_text=text,
                       response_ids=tuple(range(tokens)), behaviour_logprobs=None, reward=reward, group_id=group)


def two_groups() -> list[list[TrainSample]]:
    """Group 0 (model input 100x200) and group 1 (100x100), three responses each."""
    return [
        [
            sample('<think>centre</think>[{"point_2d": [50, 100]}]', 2.0, 0, (100, 200), tokens=1),  # (0.5, 0.5)
            sample('[{"point_2d": [10, 20]}, {"point_2d": [40, 60]}]', 1.0, 0, (100, 200), tokens=2),  # (.1,.1) (.4,.3)
            sample("I will click the button", 0.0, 0, (100, 200), tokens=3),  # does not parse
        ],
        [
            sample('[{"point_2d": [0, 0]}, {"point_2d": [10, 10]}, {"point_2d": [20, 20]}]', -1.0, 1, (100, 100),
                   tokens=4),  # collinear
            sample("<think>x</think> <answer>[{'action': 'click', 'point': [52, 48], 'input_text': 'no input text'}]"
                   "</answer>", -1.0, 1, (100, 100), tokens=5),  # GUI-R1 action list, (0.52, 0.48)
            sample("[]", -1.0, 1, (100, 100), tokens=6),  # parses, no point
        ],
    ]


# -- reading points ----------------------------------------------------------------------------------------------


def test_response_points_reads_both_formats():
    assert response_points('<think>a [b] c</think>[{"point_2d": [3, 4]}]') == [(3, 4)]
    assert response_points('[{"point_2d": [3.5, 4]}, {"point_2d": [1, 2]}]') == [(3.5, 4), (1, 2)]
    gui_r1 = ("<think>t</think><answer>[{'action': 'press_back', 'point': [-100, -100], 'input_text': 'no input "
              "text'}]</answer>")
    assert response_points(gui_r1) == []  # an action with no target proposes no point
    assert response_points("<answer>[{'action': 'click', 'point': [7, 9], 'input_text': 'x'}]</answer>") == [(7, 9)]
    assert response_points("[]") == []
    assert response_points("no answer") is None
    assert response_points('[{"point_2d": [1]}]') is None
    assert response_points("<answer>[{'action': 'click', 'point': [1, 'a'], 'input_text': ''}]</answer>") is None


# -- collapse metrics, worked by hand ----------------------------------------------------------------------------


def test_collapse_metrics_hand_worked():
    m = collapse_metrics(two_groups())
    # rewards 2, 1, 0, -1, -1, -1: mean 0; population variance (4+1+0+1+1+1)/6 = 4/3
    assert m["collapse/reward_mean"] == pytest.approx(0.0)
    assert m["collapse/reward_std"] == pytest.approx(math.sqrt(4 / 3))
    # group 0: mean 1, deviations 1, 0, -1 -> variance 2/3; group 1: all -1 -> 0
    assert m["collapse/group_reward_std"] == pytest.approx(math.sqrt(2 / 3) / 2)
    assert m["collapse/zero_std_group_share"] == pytest.approx(0.5)
    # points per response 1, 2, 0 (parse failure), 3, 1, 0
    assert m["collapse/answers_per_sample"] == pytest.approx(7 / 6)
    assert m["collapse/answers_max"] == 3.0
    assert m["collapse/parse_fail_rate"] == pytest.approx(1 / 6)
    assert m["collapse/collinear_rate"] == pytest.approx(1 / 6)
    assert m["collapse/response_tokens_mean"] == pytest.approx(3.5)
    assert m["collapse/samples"] == 6.0 and m["collapse/groups"] == 2.0
    # first points, normalised: (0.5, 0.5), (0.1, 0.1), (0, 0), (0.52, 0.48)
    # x: mean 0.28, squared deviations .0484 .0324 .0784 .0576 -> variance .0542
    # y: mean 0.27, squared deviations .0529 .0289 .0729 .0441 -> variance .0497
    assert m["collapse/point_std_x"] == pytest.approx(math.sqrt(0.0542))
    assert m["collapse/point_std_y"] == pytest.approx(math.sqrt(0.0497))
    # within 0.05 of the centre: (0.5, 0.5) at 0 and (0.52, 0.48) at 0.028; not (0.1, 0.1) nor (0, 0)
    assert m["collapse/center_share"] == pytest.approx(0.5)
    # pairwise: response 2 -> |(.3, .2)| = sqrt(.13); response 4 -> (0.1414 + 0.2828 + 0.1414) / 3 = 0.4 sqrt(2) / 3
    assert m["collapse/pairwise_dist"] == pytest.approx((math.sqrt(0.13) + 0.4 * math.sqrt(2) / 3) / 2)
    assert all(k.startswith("collapse/") for k in m)


def test_center_radius_and_undefined_metrics():
    groups = two_groups()
    assert collapse_metrics(groups, center_radius=0.01)["collapse/center_share"] == pytest.approx(0.25)
    # nothing parses: no spread, no centre share, no pairwise distance; never a crash
    bad = [[sample("nope", 1.0, 0, (10, 10)), sample("nope", 1.0, 0, (10, 10))]]
    m = collapse_metrics(bad)
    assert m["collapse/parse_fail_rate"] == 1.0 and m["collapse/answers_per_sample"] == 0.0
    assert m["collapse/zero_std_group_share"] == 1.0 and m["collapse/group_reward_std"] == 0.0
    assert not {"collapse/point_std_x", "collapse/center_share", "collapse/pairwise_dist"} & m.keys()
    # an unknown model-input size (0, 0) keeps the counts but leaves the sample out of the normalised metrics
    unsized = [[sample('[{"point_2d": [5, 5]}]', 0.0, 0, (0, 0))]]
    m = collapse_metrics(unsized)
    assert m["collapse/answers_per_sample"] == 1.0 and "collapse/center_share" not in m
    assert collapse_metrics([]) == {}


def test_custom_parser():
    m = collapse_metrics(two_groups(), parse=lambda text: [(1.0, 1.0)] * 5)
    assert m["collapse/answers_per_sample"] == 5.0
    assert m["collapse/collinear_rate"] == 1.0  # a repeated point is collinear, as in the AEPO penalty


# -- the monitor -------------------------------------------------------------------------------------------------


def kinds(flags) -> set[CollapseKind]:
    return {f.kind for f in flags}


def test_reward_std_flag_needs_patience_consecutive_steps():
    mon = CollapseMonitor(CollapseThresholds(patience=3))
    flat = {"collapse/group_reward_std": 0.0}
    assert CollapseKind.REWARD_STD_ZERO not in kinds(mon.update(0, flat))
    assert CollapseKind.REWARD_STD_ZERO not in kinds(mon.update(1, flat))
    flags = mon.update(2, flat)
    assert CollapseKind.REWARD_STD_ZERO in kinds(flags)
    (flag,) = [f for f in flags if f.kind is CollapseKind.REWARD_STD_ZERO]
    assert flag.step == 2 and flag.threshold == 1e-3 and "3 steps" in str(flag)
    # one healthy step resets the count
    assert not mon.update(3, {"collapse/group_reward_std": 0.4})
    assert not mon.update(4, flat) and not mon.update(5, flat)
    assert kinds(mon.update(6, flat)) == {CollapseKind.REWARD_STD_ZERO}
    # a step without the metric breaks the run too
    assert not CollapseMonitor(CollapseThresholds(patience=1)).update(0, {})


def test_bound_flags_trigger_and_do_not_trigger():
    mon = CollapseMonitor()
    healthy = {"collapse/zero_std_group_share": 0.5, "collapse/answers_per_sample": 1.6,
               "collapse/center_share": 0.1, "collapse/parse_fail_rate": 0.05, "collapse/group_reward_std": 0.5,
               "train/kl": 0.01, "train/approx_kl": 0.001, "train/clipfrac": 0.05}
    assert mon.update(0, healthy) == []
    sick = {"collapse/zero_std_group_share": 1.0, "collapse/answers_per_sample": 6.6,
            "collapse/center_share": 0.95, "collapse/parse_fail_rate": 0.7, "collapse/group_reward_std": 0.5,
            "train/kl": 0.5, "train/approx_kl": 0.2, "train/clipfrac": 0.6}
    flags = mon.update(1, sick)
    assert kinds(flags) == {CollapseKind.ALL_GROUPS_ZERO_STD, CollapseKind.ANSWERS_EXPLODING,
                            CollapseKind.CENTER_COLLAPSE, CollapseKind.PARSE_FAILURES, CollapseKind.KL_HIGH,
                            CollapseKind.APPROX_KL_HIGH, CollapseKind.CLIPFRAC_HIGH}
    answers = next(f for f in flags if f.kind is CollapseKind.ANSWERS_EXPLODING)
    assert answers.value == 6.6 and answers.threshold == 4.0 and "collinear" in answers.message
    assert mon.active == kinds(flags)
    # exactly at the bound is not above it; non-finite values raise nothing
    assert mon.update(2, {"collapse/answers_per_sample": 4.0, "train/kl": math.nan}) == []
    assert mon.active == frozenset()


def test_none_turns_a_flag_off():
    mon = CollapseMonitor(CollapseThresholds(max_answers_per_sample=None, max_kl=None, all_zero_std=False))
    assert mon.update(0, {"collapse/answers_per_sample": 50.0, "train/kl": 9.0,
                          "collapse/zero_std_group_share": 1.0}) == []


def test_flag_is_logged_when_it_turns_on_only(caplog):
    mon = CollapseMonitor()
    with caplog.at_level(logging.WARNING, logger="train.monitors"):
        for step in range(3):
            assert kinds(mon.update(step, {"train/clipfrac": 0.9})) == {CollapseKind.CLIPFRAC_HIGH}
        mon.update(3, {"train/clipfrac": 0.0})
        mon.update(4, {"train/clipfrac": 0.9})
    logged = [r for r in caplog.records if "clip fraction" in r.getMessage()]
    assert [r.getMessage().split(":")[1].strip() for r in logged] == ["step 0", "step 4"]


def test_observe_computes_and_checks(caplog):
    mon = CollapseMonitor()
    metrics, flags = mon.observe(7, two_groups(), {"train/clipfrac": 0.5})
    assert metrics["collapse/answers_per_sample"] == pytest.approx(7 / 6)
    assert kinds(flags) == {CollapseKind.CLIPFRAC_HIGH}
    step, seen = mon.history[-1]
    assert step == 7 and seen["train/clipfrac"] == 0.5 and "collapse/center_share" in seen


def test_monitor_state_round_trips_through_json():
    mon = CollapseMonitor(CollapseThresholds(patience=2), history=4)
    for step in range(6):
        mon.update(step, {"collapse/group_reward_std": 0.0, "train/kl": 1.0})
    state = json.loads(json.dumps(mon.state_dict()))
    assert len(state["history"]) == 4
    other = CollapseMonitor(CollapseThresholds(patience=2), history=4)
    other.load_state_dict(state)
    assert list(other.history) == list(mon.history) and other.active == mon.active
    # the restored monitor continues the streak: one more flat step still flags
    assert CollapseKind.REWARD_STD_ZERO in kinds(other.update(6, {"collapse/group_reward_std": 0.0}))
    with pytest.raises(ValueError, match="patience"):
        CollapseThresholds(patience=0)
    with pytest.raises(ValueError, match="history"):
        CollapseMonitor(CollapseThresholds(patience=5), history=3)


# -- early stopping ----------------------------------------------------------------------------------------------


def test_early_stopping_max_mode_with_min_delta():
    es = EarlyStopping(patience=2, min_delta=0.01)
    assert es.best is None and es.best_step is None and not es.should_stop
    assert es.update(0.50, step=100)
    assert es.update(0.60, step=200)
    assert not es.update(0.605, step=300)  # +0.005 < min_delta
    assert not es.should_stop and es.bad_evals == 1
    assert not es.update(0.59, step=400)
    assert es.should_stop
    assert es.best == 0.60 and es.best_step == 200
    # an improvement after the stop point resets the count
    assert es.update(0.7, step=500) and not es.should_stop


def test_early_stopping_min_mode_and_default_steps():
    es = EarlyStopping(patience=1, mode="min")
    for v in (1.0, 0.8, 0.9):
        es.update(v)
    assert es.best == 0.8 and es.best_step == 1 and es.should_stop


def test_early_stopping_non_finite_is_no_improvement(caplog):
    es = EarlyStopping(patience=2)
    with caplog.at_level(logging.WARNING, logger="train.monitors"):
        assert not es.update(math.nan)
    assert es.best is None and es.bad_evals == 1 and "non-finite" in caplog.text
    assert es.update(0.1)


def test_early_stopping_state_round_trips_through_json():
    es = EarlyStopping(patience=3, min_delta=0.001, mode="max")
    for step, v in enumerate((0.2, 0.3, 0.25, 0.28)):
        es.update(v, step=step * 10)
    state = json.loads(json.dumps(es.state_dict()))
    restored = EarlyStopping(patience=1)
    restored.load_state_dict(state)
    assert restored.state_dict() == es.state_dict()
    for v in (0.29, 0.3):  # the same continuation stops both at the same evaluation
        assert restored.update(v) == es.update(v)
    assert es.should_stop and restored.should_stop
    assert restored.best == 0.3 and restored.best_step == 10


@pytest.mark.parametrize("kwargs", [dict(patience=0), dict(patience=1, min_delta=-0.1), dict(patience=1, mode="up")])
def test_early_stopping_rejects_bad_settings(kwargs):
    with pytest.raises(ValueError):
        EarlyStopping(**kwargs)


def test_response_points_prints_no_syntax_warning_and_bounds_the_text():
    """A model's typo is data: reading it must not print Python's SyntaxWarning (seen in online sessions as
    "<unknown>:1: SyntaxWarning: invalid decimal literal"), and an over-long answer is not parsed at all."""
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")  # recorded, not raised: an error would be caught as a SyntaxError
        assert response_points("<answer>[{'action': 'click', 'point': [1, 2]}, 5x]</answer>") in (None, [])
        assert response_points("<answer>[{'action': 'click', 'point': [3, 4]}]</answer>") == [(3, 4)]
        assert response_points("<answer>[" + "{'point': [1, 2]}, " * 5000 + "]</answer>") in (None, [])
    assert [str(w.message) for w in seen] == []

"""The online step reward (train.step_rewards) worked by hand, and the reward registry answering for each reward how
it is computed offline and online (train.reward_registry)."""

from __future__ import annotations

import pytest

from policy.backends.base import Sample
from policy.formats import get_format
from policy.presets import preset_for
from train.errors import NoOnlineForm, UnknownReward
from train.reward_registry import REWARDS, get_reward, online_rule
from train.step_rewards import StepRule, answer_reward, cut_off, read_answer, step_reward


def test_the_aepo_step_reward_is_aepos_with_the_verifier_as_the_box_test():
    assert step_reward(None) == (-1.0, {"format": 0.0, "accuracy": -1.0, "correct": 0.0, "answers": 0.0})
    assert step_reward([True])[0] == 2.0 and step_reward([True])[1]["correct"] == 1.0
    assert step_reward([False]) == (0.0, {"format": 1.0, "accuracy": -1.0, "correct": 0.0, "answers": 1.0})
    assert step_reward([False, True])[0] == pytest.approx(1 + 1 / 2)  # N = 2, k = 2: 1 + 1/sqrt(4)
    assert step_reward([True, False, False])[0] == pytest.approx(1 + 1 / 3 ** 0.5)
    assert step_reward([False, False])[0] == pytest.approx(0.5)  # 1 - 1/N
    assert step_reward([True, True, True], collinear=True)[0] == -1.0
    assert step_reward([])[0] == -1.0


def test_aepo_without_the_collinear_penalty_scores_a_collinear_list_like_any_other():
    rule = StepRule.AEPO_NO_COLLINEAR
    assert step_reward([False, True, False], collinear=True, rule=rule)[0] == pytest.approx(1 + 1 / 6 ** 0.5)
    assert step_reward([False, False, False], collinear=True, rule=rule)[0] == pytest.approx(1 - 1 / 3)
    assert step_reward(None, rule=rule)[0] == -1.0 and step_reward([], rule=rule)[0] == -1.0


def test_the_guir1_step_reward_is_gui_r1s_weighting_of_the_verifiers_verdict():
    rule = StepRule.GUIR1
    assert step_reward(None, rule=rule) == (0.0, {"format": 0.0, "accuracy": 0.0, "correct": 0.0, "answers": 0.0})
    assert step_reward([True], rule=rule) == (1.0, {"format": 1.0, "accuracy": 1.0, "correct": 1.0, "answers": 1.0})
    assert step_reward([False], rule=rule)[0] == pytest.approx(0.2)
    assert step_reward([True, False], rule=rule)[0] == pytest.approx(0.8)  # right first point, not one action
    assert step_reward([False, True], rule=rule) == (0.0, {"format": 0.0, "accuracy": 0.0, "correct": 0.0,
                                                             "answers": 2.0})
    assert step_reward([], rule=rule)[0] == 0.0
    assert step_reward([True, True, True], collinear=True, rule=rule)[0] == pytest.approx(0.8)  # no collinear test


def test_an_answer_is_read_as_its_familys_reward_reads_it():
    """Cut off at the token cap, or refused by the family's strict_parse: no answer (scored as one that does not
    parse); InfiGUI-G1's strict reading demands the complete list the run-time parser does not."""
    preset = preset_for("tiny-qwen", "infigui-g1", variant="no_think")
    fmt, space = get_format("infigui-g1"), preset.space((224, 224))
    fine, broken = '[{"point_2d": [14, 14]}, {"point_2d": [28, 28]}, {"point_2d": [42, 42]}]', '[{"point_2d": [1, 2]}, {'
    assert cut_off(Sample(fine, finish_reason="length")) and not cut_off(Sample(fine, finish_reason="stop"))
    assert read_answer(Sample(fine, finish_reason="length"), fmt, space, preset, ()) is None
    assert read_answer(Sample(broken, finish_reason="stop"), fmt, space, preset, ()) is None
    read = read_answer(Sample(fine, finish_reason="stop"), fmt, space, preset, ())
    assert read is not None and len(read.actions) == 3
    # the three points lie on a line: -1 under AEPO, 1 + 1/sqrt(3 x 2) without the penalty
    assert answer_reward(read, [False, True, False], StepRule.AEPO)[0] == -1.0
    assert answer_reward(read, [False, True, False], StepRule.AEPO_NO_COLLINEAR)[0] == pytest.approx(1 + 1 / 6 ** 0.5)
    assert answer_reward(None, [], StepRule.GUIR1)[0] == 0.0
    # GUI-R1's reward reads every answer its parser reads: no think block is still an answer
    guir1 = preset_for("tiny-qwen", "gui-r1")
    text = "<answer>[{'action': 'click', 'point': [10, 10], 'input_text': 'no input text'}]</answer>"
    read = read_answer(Sample(text, finish_reason="stop"), get_format("gui-r1"), guir1.space((224, 224)), guir1, ())
    assert read is not None and answer_reward(read, [True], StepRule.GUIR1)[0] == 1.0


def test_every_reward_names_its_online_form_and_distance_has_none():
    assert {name: spec.online for name, spec in REWARDS.items()} == {
        "aepo": StepRule.AEPO, "aepo_paper": StepRule.AEPO, "aepo_no_collinear": StepRule.AEPO_NO_COLLINEAR,
        "guir1": StepRule.GUIR1, "guir1_paper": StepRule.GUIR1, "distance": None}
    assert online_rule("guir1_paper") is StepRule.GUIR1
    with pytest.raises(NoOnlineForm, match=r"data.reward='distance' cannot score online answers: the step verifier "
                                            r"says whether each action is right, not how far it is from a box; use "
                                            r"one of aepo, aepo_paper, aepo_no_collinear, guir1, guir1_paper"):
        online_rule("distance")
    with pytest.raises(UnknownReward, match="did you mean 'distance'"):
        online_rule("distanse")
    assert get_reward("distance").fn.__name__ == "distance_reward"  # its offline form is still there

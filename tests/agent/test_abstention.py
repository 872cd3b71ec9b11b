"""Abstention end to end: every family's way of saying "the target is not here" parses to an abstention, the
generated absent screen's step verifier judges it right, and the online step reward then scores it as AEPO's
released reward scores an empty list on a negative sample (``box=None``): 2 for a correct abstention, 0 for a wrong
one, 1 - 1/N for N points on a screen whose target is absent."""

from __future__ import annotations

import asyncio

import pytest

from devices.actions import ActionKind, is_abstention
from envs.generated.env import GeneratedEnv
from envs.generated.layout import ScreenParams, TaskKind, generate
from policy.formats import get_format
from policy.backends.base import Sample
from policy.formats.guir1_prompts import action_list, prompt_text
from policy.presets import preset_for
from train.rewards import aepo_reward
from train.step_rewards import StepRule, answer_reward, read_answer

SIZE = (1280, 800)

#: (model id, an answer that declines)
DECLINES = [
    ("InfiX-ai/InfiGUI-G1-3B", "<think>No Save button anywhere.</think>[]"),
    ("ritzz-ai/GUI-R1-3B", "<think>gone</think><answer>[{'action': 'impossible', 'point': [-100, -100], "
                           "'input_text': 'no input text'}]</answer>"),
    ("Qwen/Qwen2.5-VL-3B-Instruct", '<tool_call>\n{"name": "computer_use", "arguments": {"action": "terminate", '
                                    '"status": "failure"}}\n</tool_call>'),
    ("ByteDance-Seed/UI-TARS-1.5-7B", "Thought: there is no such button.\nAction: call_user()"),
    ("ByteDance-Seed/UI-TARS-1.5-7B", "Thought: done.\nAction: finished(content='The Save button does not exist "
                                      "on this screen.')"),
]


def screen_env(kind: str, seed: int = 3) -> GeneratedEnv:
    """A generated environment holding its screen without a browser: its verifier reads only the ground truth."""
    env = GeneratedEnv(kind, "hard")
    env.screen = generate(seed, ScreenParams(TaskKind(kind), "hard"))
    return env


def online_reward(env: GeneratedEnv, model_id: str, text: str) -> float:
    """The online actor's scoring of one answer (agent/online/actors.py: the reward's reading of the answer, the
    verifier on every action, the step reward: train.step_rewards)."""
    preset = preset_for(model_id)
    parsed = read_answer(Sample(text, finish_reason="stop"), get_format(preset.family), preset.space(SIZE), preset, ())
    assert parsed is not None
    verdicts = asyncio.run(env.verify(parsed.actions))
    assert verdicts is not None
    return answer_reward(parsed, [v.correct for v in verdicts], StepRule.AEPO)[0]


@pytest.mark.parametrize(("model_id", "text"), DECLINES)
def test_every_familys_decline_is_an_abstention_scored_like_aepos_empty_list(model_id: str, text: str) -> None:
    preset = preset_for(model_id)
    parsed = get_format(preset.family).parse(text, preset.space(SIZE), preset)
    assert is_abstention(parsed.actions[0]), parsed.actions
    # on an absent target: a correct abstention scores as AEPO's [] on a negative sample (1 + 1 = 2)
    assert online_reward(screen_env("absent"), model_id, text) == aepo_reward("<think>x</think>[]", None).total == 2.0
    # on a screen whose target is there: a wrong abstention scores as AEPO's [] on a positive sample (1 - 1 = 0)
    assert online_reward(screen_env("click"), model_id, text) == aepo_reward("<think>x</think>[]",
                                                                             (0, 0, 10, 10)).total == 0.0


def test_points_on_an_absent_target_are_misses_as_in_aepo() -> None:
    env = screen_env("absent")
    text = '<think>x</think>[{"point_2d": [100, 100]}, {"point_2d": [300, 200]}]'
    # 1 - 1/N with N = 2 in both
    assert online_reward(env, "InfiX-ai/InfiGUI-G1-3B", text) == aepo_reward(text, None).total == 0.5


def test_guir1_offers_impossible_where_the_benchmark_has_it() -> None:
    # GUI-Odyssey's released action list holds 'impossible'; the others do not, so their prompts never offer it
    assert "impossible" in action_list("guiodyssey")
    assert "'impossible'" in prompt_text("click Save", "None", action_list("guiodyssey"))
    for variant in ("androidcontrol", "guiact-web", "omniact-web", "omniact-desktop", "screenspot"):
        assert "impossible" not in prompt_text("click Save", "None", action_list(variant))
    preset = preset_for("ritzz-ai/GUI-R1-3B", variant="guiodyssey")
    parsed = get_format("gui-r1").parse(DECLINES[1][1], preset.space(SIZE), preset)
    assert parsed.actions[0].kind is ActionKind.INFEASIBLE

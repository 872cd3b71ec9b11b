"""The reward adapter: ``reward_fn(prompt, text)`` for the trainer, a named reward applied to the prompt's target.

``reward_fn(name, ...)`` returns a ``RewardAdapter``, the ``reward_fn(prompt, text)`` of ``rollout_groups``: it
scores the text with the reward registered as ``name`` (``train.reward_registry``) against ``prompt.target`` and adds
the part ``"correct"`` (see ``train.curriculum``). A reward function that raises never stops training: the adapter
logs each distinct message once, counts it, and returns ``RewardResult(0.0, {"reward_failed": 1.0},
{"reward_failed": "<type>: <message>"})``; ``train.curriculum.is_failed`` recognises it and the filters leave such
samples out.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from policy.presets import ModelPreset
from train.curriculum import CORRECT_PART, FAILED_PART, ThresholdSchedule
from train.data.prompts import resolve_preset, think_enabled
from train.reward_registry import get_reward
from train.rewards import RewardResult
from train.samples import RolloutPrompt

log = logging.getLogger(__name__)

__all__ = ["RewardAdapter", "reward_fn"]


class RewardAdapter:
    """``reward(prompt, text) -> RewardResult``: the reward registered as ``name`` (``spec``) applied to
    ``prompt.target``, plus the part ``"correct"``; a reward that raises gives a failed result (see the module
    docstring).

    ``step`` is the training step the trainer last set (``set_step``); the distance reward reads its threshold
    from ``schedule(step)`` when a schedule is given.
    """

    def __init__(self, name: str, *, think: bool | None = None, threshold: float | None = None,
                 schedule: ThresholdSchedule | None = None) -> None:
        self.spec = get_reward(name)
        if self.spec.needs_threshold and threshold is None and schedule is None:
            raise ValueError(f"the {name} reward needs threshold=... or schedule=ThresholdSchedule(...)")
        if not self.spec.needs_threshold and (threshold is not None or schedule is not None):
            raise ValueError(f"threshold and schedule apply to the distance reward only, not {name!r}")
        self.name = name
        self.think = think
        self.fixed_threshold = threshold
        self.schedule = schedule
        self.step = 0
        self.calls = 0
        self.failures = 0
        self._logged: set[str] = set()

    def set_step(self, step: int) -> None:
        self.step = int(step)

    def threshold(self) -> float:
        """The distance reward's threshold now: the schedule's value at ``step``, else the fixed one."""
        if self.schedule is not None:
            return self.schedule(self.step)
        assert self.fixed_threshold is not None
        return self.fixed_threshold

    def think_for(self, target: Mapping[str, Any]) -> bool:
        """The think-gate flag: the adapter's option, else the target's (from the preset), else True."""
        return self.think if self.think is not None else bool(target.get("think", True))

    def __call__(self, prompt: RolloutPrompt, text: str) -> RewardResult:
        self.calls += 1
        try:
            target = prompt.target
            if not isinstance(target, Mapping):
                raise TypeError(f"prompt.target must be a Target dict, got {type(target).__name__}")
            form = target.get("answer_form")
            if form is not None and form is not self.spec.reads:
                self._log_once(f"reward {self.name!r} reads {self.spec.reads.value} answers, but the prompt is "
                               f"{target.get('family')}'s, whose answers are {form.value}")
            threshold = self.threshold() if self.spec.needs_threshold else None
            result = self.spec.score(target, text, think=self.think_for(target), threshold=threshold)
            correct = self.spec.correct(result)
        except Exception as e:  # noqa: BLE001 - a broken reward must not stop training (module docstring)
            self.failures += 1
            message = f"{type(e).__name__}: {e}"
            self._log_once(f"reward {self.name!r} failed on prompt {getattr(prompt, 'origin', {}).get('id')!r}: "
                           f"{message}", key=message)
            return RewardResult(0.0, {FAILED_PART: 1.0}, {FAILED_PART: message})
        return RewardResult(result.total, {**result.parts, CORRECT_PART: float(correct)}, result.info)

    def _log_once(self, message: str, key: str | None = None) -> None:
        key = key or message
        if key not in self._logged:
            self._logged.add(key)
            log.warning("%s", message)

    def metrics(self, prefix: str = "rollout/reward") -> dict[str, float]:
        out = {f"{prefix}/calls": float(self.calls), f"{prefix}/failures": float(self.failures)}
        if self.spec.needs_threshold:
            out[f"{prefix}/threshold"] = self.threshold()
        return out


def reward_fn(name: str, *, think: bool | None = None, no_think: bool | None = None,
              preset: ModelPreset | str | None = None, threshold: float | None = None,
              schedule: ThresholdSchedule | None = None) -> RewardAdapter:
    """The reward adapter for ``name`` (aepo, aepo_paper, aepo_no_collinear, guir1, guir1_paper, distance).

    The think gate (AEPO and distance) follows, first, ``think`` / ``no_think``; then ``preset`` (InfiGUI-G1's
    no_think variant turns it off); then each prompt's target. ``threshold`` (fixed) or ``schedule`` (per step) is
    the distance reward's.
    """
    if think is not None and no_think is not None and think == no_think:
        raise ValueError(f"think={think} and no_think={no_think} contradict each other; pass one of them")
    flag = think if think is not None else (not no_think if no_think is not None else None)
    if flag is None and preset is not None:
        flag = think_enabled(resolve_preset(preset))
    return RewardAdapter(name, think=flag, threshold=threshold, schedule=schedule)

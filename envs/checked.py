"""CheckedEnv: the step of every environment whose checker reads the task's outcome from the device.

    class MyEnv(CheckedEnv):
        async def reset(self, *, seed=None, options=None):
            ...                                   # make or adopt the device, set the task up
            self.begin_episode()
            return await self.device.observe(), {"instruction": ...}

        async def judge_infeasible(self): return TaskVerdict(False, 0.0, {"reason": "the task is feasible"})
        async def judge_finish(self): return await self.check()
        async def judge_step(self, action): return None if undecided else verdict

``step(action)``:

- before the first ``begin_episode`` (a reset): EnvError, reset first; after the episode ended: EnvError, reset to
  start another;
- ``infeasible``: ``judge_infeasible()`` decides, nothing is performed;
- ``finish``: ``judge_finish()`` decides, nothing is performed;
- any other action is performed (``envs.base.perform``: acts, then settles unless ``SETTLE`` is False), then
  ``judge_step(action)`` reads the outcome: a verdict, or None while the task is undecided;
- a verdict terminates the episode: reward ``verdict.reward``, ``info["success"]`` and ``info["verdict"]`` (its
  details); otherwise reward 0. The screen is observed last, its seconds added to the step's effect
  (``info["effect"]``, present when an action was performed). ``truncated`` is never set here (``TimeLimit``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from devices.actions import Action, ActionKind
from envs.base import OwnsDevice, StepResult, perform, timed_observe
from envs.errors import EnvError
from envs.tasks import TaskVerdict


class CheckedEnv(OwnsDevice):
    """The checked step (see the module docstring); subclasses say what each outcome is worth."""

    SETTLE: ClassVar[bool] = True
    """Whether the screen settles after an action before ``judge_step`` reads the outcome (False where the page
    changes its state at once, or shows a static image)."""

    done: bool = False
    """The episode ended (a verdict came); ``begin_episode`` opens the next."""
    _episode_begun: bool = False

    def begin_episode(self) -> None:
        """A reset put the task in its start state: steps may come."""
        self._episode_begun = True
        self.done = False

    async def judge_infeasible(self) -> TaskVerdict:
        """The verdict on ``infeasible`` (the action is not performed)."""
        raise NotImplementedError

    async def judge_finish(self) -> TaskVerdict:
        """The verdict on ``finish`` (the action is not performed)."""
        raise NotImplementedError

    async def judge_step(self, action: Action) -> TaskVerdict | None:
        """The outcome after ``action`` was performed: a verdict ends the episode, None while it is undecided."""
        raise NotImplementedError

    async def step(self, action: Action) -> StepResult:
        if not self._episode_begun:
            raise EnvError(f"{self.name}: call `await env.reset()` before stepping")
        if self.done:
            raise EnvError(f"{self.name}: the episode is over; call `await env.reset()` to start another")
        device = self._started_device()
        effect = None
        verdict: TaskVerdict | None
        if action.kind is ActionKind.INFEASIBLE:
            verdict = await self.judge_infeasible()
        elif action.kind is ActionKind.FINISH:
            verdict = await self.judge_finish()
        else:
            effect = await perform(device, action, settle=self.SETTLE)
            verdict = await self.judge_step(action)
        terminated = self.done = verdict is not None
        obs = await timed_observe(device, effect)
        info: dict[str, Any] = {} if effect is None else {"effect": effect}
        if verdict is not None:
            info["success"] = verdict.success
            info["verdict"] = verdict.details
        return obs, verdict.reward if verdict else 0.0, terminated, False, info

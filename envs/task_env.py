"""TaskEnv: one instruction on one device, with an optional checker; what ``agent run`` runs.

    env = TaskEnv(PlaywrightDevice(cfg, url=url), "Click Save", checker=task.check, name="demo-save")

``agent run "task" --url URL`` is a page and an instruction; the built-in demo adds its checker;
``--device desktop|android`` is the screen as it is. The first ``reset`` starts the device (a web
device opens its start page), later resets only observe: the environment does not know how to put
an arbitrary screen back. ``finish`` is judged by the checker when there is one (terminated with
its reward) and otherwise ends the episode unjudged (``rewarded`` is then False); ``infeasible``
ends it too. Every other action is performed and the screen settles before the next observation.
There is no step verifier. The environment owns its device and closes it in ``close``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from devices.actions import Action, ActionKind
from devices.base import Device, Observation
from envs.base import BaseEnv, StepVerdict, perform, timed_observe
from envs.errors import EnvError
from envs.tasks import TaskVerdict

Checker = Callable[[Any], Awaitable[TaskVerdict]]


class TaskEnv(BaseEnv):
    """An instruction on a device (see the module docstring)."""

    def __init__(self, device: Device, instruction: str, *, checker: Checker | None = None, name: str = "task",
                 info: dict[str, Any] | None = None) -> None:
        if not instruction.strip():
            raise EnvError("a task needs an instruction, e.g. \"Click the Subscribe button\"")
        self.device = device
        self.instruction = instruction
        self.checker = checker
        self.name = name
        self.rewarded = checker is not None
        self._info = dict(info or {})
        self._started = False
        self._last: Observation | None = None

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
                    ) -> tuple[Observation, dict[str, Any]]:
        if not self._started:
            self._started = True  # set first: a device that failed to start is still closed by close()
            await self.device.start()
        self._last = await self.device.observe()
        return self._last, {"instruction": self.instruction, **self._info}

    async def step(self, action: Action) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        if self._last is None:
            raise EnvError(f"{self.name}: call `await env.reset()` before stepping")
        if action.kind is ActionKind.FINISH:
            if self.checker is None:
                return self._last, 0.0, True, False, {}
            verdict = await self.checker(self.device)
            return self._last, verdict.reward, True, False, {"success": verdict.success, "verdict": verdict.details}
        if action.kind is ActionKind.INFEASIBLE:
            return self._last, 0.0, True, False, {}
        effect = await perform(self.device, action)
        self._last = await timed_observe(self.device, effect)
        return self._last, 0.0, False, False, {"effect": effect}

    async def verify(self, candidates: Sequence[Action]) -> list[StepVerdict] | None:
        return None

    async def close(self) -> None:
        if self._started:
            self._started = False
            await self.device.close()

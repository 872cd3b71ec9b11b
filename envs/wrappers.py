"""Thin wrappers that add one behaviour to any environment (after Gymnasium's wrappers).

    env = TimeLimit(GeneratedEnv("click"), max_steps=3)   # what envs.registry.make(..., max_steps=3) returns
    env = TimeLimit(DryRun(TaskEnv(device, "Click Save")), max_steps=15)

A wrapper forwards the ``Env`` contract (``envs.base``: reset, step, verify, close, name, device, max_steps,
rewarded) to the environment inside it and nothing else, as Gymnasium 1.0 does: what else an environment offers (an
oracle's ``current_step()``, a checker's ``check()``) is reached through ``env.unwrapped``, the innermost
environment.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from devices.actions import Action, ActionKind
from devices.base import Device, Observation
from envs.base import Env, StepResult, StepVerdict
from envs.errors import EnvError


class Wrapper:
    """Forwards the ``Env`` contract to ``env`` (see the module docstring)."""

    def __init__(self, env: Env) -> None:
        self.env = env

    @property
    def name(self) -> str:
        return self.env.name

    @property
    def device(self) -> Device | None:
        return self.env.device

    @property
    def max_steps(self) -> int | None:
        return self.env.max_steps

    @property
    def rewarded(self) -> bool:
        return self.env.rewarded

    @property
    def unwrapped(self) -> Env:
        return self.env.unwrapped

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
                    ) -> tuple[Observation, dict[str, Any]]:
        return await self.env.reset(seed=seed, options=options)

    async def step(self, action: Action) -> StepResult:
        return await self.env.step(action)

    async def verify(self, candidates: Sequence[Action]) -> list[StepVerdict] | None:
        return await self.env.verify(candidates)

    async def close(self) -> None:
        await self.env.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.env!r})"


class TimeLimit(Wrapper):
    """The step budget: ``truncated`` once ``max_steps`` steps ran without the episode terminating.

    Every call to ``step`` counts, whatever the action did (a dry-run step counts too); decisions
    that never reach ``step`` (an output that did not parse, an action the guard refused) do not:
    the episode runner bounds those separately.
    """

    def __init__(self, env: Env, max_steps: int) -> None:
        super().__init__(env)
        if not isinstance(max_steps, int) or isinstance(max_steps, bool) or max_steps < 1:
            raise EnvError(f"{env.name}: max_steps={max_steps!r} must be a whole number of at least 1")
        self._max_steps = max_steps
        self.elapsed_steps = 0

    @property
    def max_steps(self) -> int:
        return self._max_steps

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
                    ) -> tuple[Observation, dict[str, Any]]:
        self.elapsed_steps = 0
        return await self.env.reset(seed=seed, options=options)

    async def step(self, action: Action) -> StepResult:
        obs, reward, terminated, truncated, info = await self.env.step(action)
        self.elapsed_steps += 1
        if not terminated and self.elapsed_steps >= self.max_steps:
            truncated = True
        return obs, reward, terminated, truncated, info


class DryRun(Wrapper):
    """Records what would be done without doing it: non-terminal actions are not performed.

    ``step`` returns the last observation unchanged, reward 0 and ``info["dry_run"] = True``, so the
    policy goes on as if the action happened and the whole plan is recorded. ``finish`` ends the plan
    without reaching the environment: ``terminated``, reward 0 and ``info["planned"] = True`` (the
    checker would only judge the untouched screen, so it is not asked; the episode's outcome is
    ``planned``). ``infeasible`` reaches the environment: the policy found no plan.
    """

    def __init__(self, env: Env) -> None:
        super().__init__(env)
        self._last: Observation | None = None

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
                    ) -> tuple[Observation, dict[str, Any]]:
        obs, info = await self.env.reset(seed=seed, options=options)
        self._last = obs
        return obs, info

    async def step(self, action: Action) -> StepResult:
        if action.kind is ActionKind.INFEASIBLE:
            return await self.env.step(action)
        if self._last is None:
            raise EnvError(f"{self.env.name}: call `await env.reset()` before stepping")
        if action.kind is ActionKind.FINISH:
            return self._last, 0.0, True, False, {"dry_run": True, "planned": True}
        return self._last, 0.0, False, False, {"dry_run": True}

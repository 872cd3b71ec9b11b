"""Thin wrappers that add one behaviour to any environment (after Gymnasium's wrappers).

    env = TimeLimit(GeneratedEnv("click"), max_steps=3)   # what envs.registry.make(..., max_steps=3) returns
    env = TimeLimit(DryRun(TaskEnv(device, "Click Save")), max_steps=15)

A wrapper forwards every attribute it does not define to the environment inside it, so an oracle
reading ``env.current_step()`` or a runner reading ``env.device`` sees through any stack of wrappers;
``env.unwrapped`` is the innermost environment.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from devices.actions import Action, ActionKind
from devices.base import Observation
from envs.base import StepVerdict
from envs.errors import EnvError

StepResult = tuple[Observation, float, bool, bool, dict[str, Any]]


class Wrapper:
    """Forwards reset, step, verify, close and every other attribute to ``env``."""

    def __init__(self, env: Any) -> None:
        self.env = env

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # keep copy/pickle protocols from reaching into the inner env
            raise AttributeError(name)
        return getattr(self.env, name)

    @property
    def unwrapped(self) -> Any:
        return getattr(self.env, "unwrapped", self.env)

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

    def __init__(self, env: Any, max_steps: int) -> None:
        super().__init__(env)
        if not isinstance(max_steps, int) or isinstance(max_steps, bool) or max_steps < 1:
            raise EnvError(f"{getattr(env, 'name', type(env).__name__)}: max_steps={max_steps!r} must be a whole "
                           f"number of at least 1")
        self.max_steps = max_steps
        self.elapsed_steps = 0

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

    def __init__(self, env: Any) -> None:
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
            raise EnvError(f"{getattr(self.env, 'name', 'the environment')}: call `await env.reset()` before stepping")
        if action.kind is ActionKind.FINISH:
            return self._last, 0.0, True, False, {"dry_run": True, "planned": True}
        return self._last, 0.0, False, False, {"dry_run": True}

"""The wrappers that add one behaviour to any environment: the step budget and the dry run."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from devices.actions import Action, ActionKind, Point
from devices.base import Observation
from envs.base import BaseEnv, Env
from envs.errors import EnvError
from envs.wrappers import DryRun, TimeLimit


class Counter(BaseEnv):
    """An environment whose screen is the number of actions performed; finish terminates with reward 1."""

    name = "counter"

    def __init__(self) -> None:
        self.performed: list[Action] = []
        self.closed = False

    def _obs(self) -> Observation:
        return Observation(frame=np.full((2, 2, 3), len(self.performed), np.uint8))

    async def reset(self, *, seed=None, options=None):
        self.performed = []
        return self._obs(), {"instruction": "count"}

    async def step(self, action):
        if action.kind is ActionKind.FINISH:
            return self._obs(), 1.0, True, False, {"success": True}
        self.performed.append(action)
        return self._obs(), 0.0, False, False, {}

    async def verify(self, candidates):
        return None

    async def close(self):
        self.closed = True

    def peek(self) -> int:
        return len(self.performed)


CLICK = Action(ActionKind.CLICK, Point(0.5, 0.5))


def test_time_limit_truncates_at_its_budget_and_starts_again_on_reset():
    env = TimeLimit(Counter(), max_steps=2)

    async def main():
        await env.reset()
        first = await env.step(CLICK)
        second = await env.step(CLICK)
        assert first[2:4] == (False, False) and second[2:4] == (False, True) and env.elapsed_steps == 2
        await env.reset()
        assert env.elapsed_steps == 0
        assert (await env.step(Action(ActionKind.FINISH)))[1:4] == (1.0, True, False)  # terminated wins
        await env.close()

    asyncio.run(main())
    assert env.unwrapped.closed and env.unwrapped.peek() == 0  # the environment's own methods: through unwrapped


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_time_limit_refuses_a_budget_that_is_not_a_positive_whole_number(bad):
    with pytest.raises(EnvError, match="must be a whole number of at least 1"):
        TimeLimit(Counter(), max_steps=bad)


def test_dry_run_performs_nothing_but_terminal_actions_and_counts_against_the_budget():
    inner = Counter()
    env = TimeLimit(DryRun(inner), max_steps=3)

    async def main():
        obs, _ = await env.reset()
        for _ in range(2):
            again, reward, terminated, truncated, info = await env.step(CLICK)
            assert again is obs and (reward, terminated, truncated) == (0.0, False, False) and info == {"dry_run": True}
        # finish ends the plan without reaching the environment (its checker would judge an untouched screen)
        again, reward, terminated, truncated, info = await env.step(Action(ActionKind.FINISH))
        assert again is obs and (reward, terminated, truncated) == (0.0, True, False)
        assert info == {"dry_run": True, "planned": True}
        # infeasible reaches it: the policy found no plan
        await env.step(Action(ActionKind.INFEASIBLE, text="no"))

    asyncio.run(main())
    assert [a.kind for a in inner.performed] == [ActionKind.INFEASIBLE]
    with pytest.raises(EnvError, match="reset"):
        asyncio.run(DryRun(Counter()).step(CLICK))


def test_a_wrapper_stack_is_unwrapped_to_the_innermost_environment():
    inner = Counter()
    env = TimeLimit(DryRun(inner), max_steps=1)
    assert env.unwrapped is inner and env.name == "counter" and "DryRun" in repr(env)


def test_a_wrapper_forwards_the_env_contract_and_nothing_else():
    inner = Counter()
    inner.rewarded = False
    inner.device = object()  # what the environment acts on, whatever it is
    env = DryRun(inner)
    assert isinstance(env, Env) and isinstance(inner, Env)
    assert (env.name, env.device, env.rewarded, env.max_steps) == ("counter", inner.device, False, None)
    assert TimeLimit(env, 4).max_steps == 4 and TimeLimit(TimeLimit(env, 4), 2).max_steps == 2  # the outer budget
    with pytest.raises(AttributeError, match="peek"):
        env.peek()  # the environment's own methods: env.unwrapped.peek()
    with pytest.raises(AttributeError, match="performed"):
        TimeLimit(env, 4).performed


def test_the_contract_defaults_of_an_environment_class():
    env = Counter()
    assert (env.device, env.max_steps, env.rewarded, env.unwrapped) == (None, None, True, env)

"""The checked step (``envs.checked.CheckedEnv``) on a made-up device and checker: what is performed, what each
outcome returns, and the order of act, settle, check and observe."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from devices.actions import Action, ActionKind, Point
from devices.base import ActionResult, Observation
from devices.settle import SettleResult
from envs.base import Env
from envs.checked import CheckedEnv
from envs.conformance import check_env
from envs.errors import EnvError
from envs.tasks import TaskVerdict
from envs.wrappers import TimeLimit


class Counter:
    """A device whose screen shows how many actions it performed; it logs every call."""

    name = "counter"
    supported_actions = frozenset({ActionKind.CLICK, ActionKind.WAIT})

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.acted = 0

    async def start(self) -> None:
        self.calls.append("start")

    async def observe(self) -> Observation:
        self.calls.append("observe")
        return Observation(frame=np.full((4, 4, 3), self.acted, np.uint8))

    async def act(self, action: Action) -> ActionResult:
        self.calls.append("act")
        self.acted += 1
        return ActionResult(action)

    async def settle(self) -> SettleResult:
        self.calls.append("settle")
        return SettleResult(True, 0.0, 1, 0.0)

    async def close(self) -> None:
        self.calls.append("close")

    def describe(self) -> dict:
        return {"kind": "counter"}


class TwoClicks(CheckedEnv):
    """Done after two performed actions; ``finish`` is judged by the same count, ``infeasible`` is wrong."""

    def __init__(self, device: Counter, settle: bool = True) -> None:
        self.name = "two-clicks"
        self.SETTLE = settle
        self._adopt_device(device)

    async def reset(self, *, seed=None, options=None):
        self._device.acted = 0
        self.begin_episode()
        return await self._device.observe(), {"instruction": "click twice"}

    async def check(self) -> TaskVerdict | None:
        self._device.calls.append("check")
        return TaskVerdict(True, 1.0, {"acted": 2}) if self._device.acted >= 2 else None

    async def judge_infeasible(self) -> TaskVerdict:
        return TaskVerdict(False, 0.0, {"reason": "it is feasible"})

    async def judge_finish(self) -> TaskVerdict:
        return await self.check() or TaskVerdict(False, 0.0, {"reason": "finished early"})

    async def judge_step(self, action: Action) -> TaskVerdict | None:
        return await self.check()

    async def verify(self, candidates):
        return None

    async def close(self) -> None:
        await self._close_owned_device()


CLICK = Action(ActionKind.CLICK, point=Point(0.5, 0.5))


def test_a_performed_action_acts_settles_checks_then_observes_and_an_undecided_step_goes_on():
    device = Counter()
    env = TwoClicks(device)

    async def main():
        await env.reset()
        device.calls.clear()
        obs, reward, terminated, truncated, info = await env.step(CLICK)
        assert device.calls == ["act", "settle", "check", "observe"]
        assert (reward, terminated, truncated, env.done) == (0.0, False, False, False)
        assert set(info) == {"effect"} and int(obs.frame[0, 0, 0]) == 1
        assert set(info["effect"].timings) == {"act", "settle", "observe"}  # the observation is timed into it
        obs, reward, terminated, truncated, info = await env.step(CLICK)
        assert (reward, terminated, truncated, env.done) == (1.0, True, False, True)
        assert info["success"] is True and info["verdict"] == {"acted": 2} and "effect" in info

    asyncio.run(main())


def test_without_settling_the_outcome_is_read_right_after_the_action():
    device = Counter()
    env = TwoClicks(device, settle=False)

    async def main():
        await env.reset()
        device.calls.clear()
        _, _, _, _, info = await env.step(CLICK)
        assert device.calls == ["act", "check", "observe"] and info["effect"].settle is None

    asyncio.run(main())


@pytest.mark.parametrize("kind, reward, details", [
    (ActionKind.INFEASIBLE, 0.0, {"reason": "it is feasible"}),
    (ActionKind.FINISH, 0.0, {"reason": "finished early"}),
])
def test_terminal_actions_are_judged_without_being_performed(kind, reward, details):
    device = Counter()
    env = TwoClicks(device)

    async def main():
        await env.reset()
        device.calls.clear()
        _, got, terminated, truncated, info = await env.step(Action(kind, text="x"))
        assert (got, terminated, truncated) == (reward, True, False)
        assert info == {"success": False, "verdict": details}  # no effect: nothing was performed
        assert "act" not in device.calls and device.calls[-1] == "observe"
        with pytest.raises(EnvError, match="two-clicks: the episode is over; call `await env.reset"):
            await env.step(CLICK)
        await env.reset()  # opens the next episode
        assert (await env.step(CLICK))[2] is False

    asyncio.run(main())


def test_a_finish_after_the_goal_held_from_outside_succeeds():
    device = Counter()
    env = TwoClicks(device)

    async def main():
        await env.reset()
        device.acted = 2  # changed from outside
        return await env.step(Action(ActionKind.FINISH))

    _, reward, terminated, _, info = asyncio.run(main())
    assert (reward, terminated, info["success"]) == (1.0, True, True)


def test_stepping_before_a_reset_is_refused():
    with pytest.raises(EnvError, match="two-clicks: call `await env.reset\\(\\)` before stepping"):
        asyncio.run(TwoClicks(Counter()).step(CLICK))


def test_a_checked_env_keeps_the_contract_and_conforms():
    device = Counter()
    env = TwoClicks(device)
    assert isinstance(env, Env) and env.unwrapped is env and env.rewarded is True and env.max_steps is None
    assert env.device is device
    asyncio.run(check_env(TimeLimit(env, 3)))

"""Oracle policies: solve an environment from its ground truth.

An oracle that cannot reach reward 1 means a broken checker, not a weak policy: reaching 100 %
with them proves each suite's checks. They live in ``agent`` because they join the two layers that
never import each other: environments (ground truth) and policies (Decisions). An oracle is given the
environment as the runner runs it (in its wrappers) and reads the ground truth from the environment
inside them (``env.unwrapped``), whose class says what it can tell.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from devices.actions import Action, ActionKind, Point
from devices.base import Observation
from envs.base import Env
from policy.base import Decision, HistoryEntry, Policy

T = TypeVar("T")


def _inner(env: Env, kind: type[T]) -> T:
    """The environment inside ``env``'s wrappers, which must be a ``kind``."""
    inner = env.unwrapped
    if not isinstance(inner, kind):
        raise TypeError(f"{env.name} is a {type(inner).__name__}, not a {kind.__name__}: this oracle reads the "
                        f"ground truth of {kind.__name__} only (agent.oracles.oracle_for picks the right one)")
    return inner


class GeneratedOracle:
    """Clicks the target's centre, types each field's text, declares infeasible on an absent target,
    and finishes once the episode is over (generated GUI tasks)."""

    name = "oracle"

    def __init__(self, env: Env) -> None:
        from envs.generated.env import GeneratedEnv

        self.env = env
        self.truth: GeneratedEnv = _inner(env, GeneratedEnv)

    async def decide(self, task: str, history: Sequence[HistoryEntry], observation: Observation, n: int = 1
                     ) -> Decision:
        needed = await self.truth.current_step()
        box = None
        if needed is None:
            action = Action(ActionKind.FINISH)
        elif needed.kind == "infeasible":
            action = Action(ActionKind.INFEASIBLE, text="the screen has no such widget")
        else:
            assert needed.widget_id is not None
            box = self.truth.target_box(needed.widget_id)
            centre = Point(*box.center)
            if needed.kind == "type":
                action = Action(ActionKind.TYPE, point=centre, text=needed.text)
            else:
                action = Action(ActionKind.CLICK, point=centre)
        return Decision(action, raw_output=action.describe(), candidates=(action,) * n, target_box=box)

    def describe(self) -> dict[str, Any]:
        return {"policy": self.name, "env": self.env.name}


class MiniWobOracle:
    """Clicks the element the MiniWoB++ task's next step needs, found in the DOM."""

    name = "miniwob-oracle"

    def __init__(self, env: Env) -> None:
        from envs.miniwob.env import MiniWobEnv

        self.env = env
        self.truth: MiniWobEnv = _inner(env, MiniWobEnv)

    async def decide(self, task: str, history: Sequence[HistoryEntry], observation: Observation, n: int = 1
                     ) -> Decision:
        action, box = await self.truth.oracle_action()
        return Decision(action, raw_output=action.describe(), candidates=(action,) * n, target_box=box)

    def describe(self) -> dict[str, Any]:
        return {"policy": self.name, "env": self.env.name}


class AndroidOracle:
    """Carries out the step the Android task needs next, read from the phone's UI hierarchy."""

    name = "android-oracle"

    def __init__(self, env: Env) -> None:
        from envs.android.env import AndroidTaskEnv

        self.env = env
        self.truth: AndroidTaskEnv = _inner(env, AndroidTaskEnv)

    async def decide(self, task: str, history: Sequence[HistoryEntry], observation: Observation, n: int = 1
                     ) -> Decision:
        from envs.android.env import action_for

        action = action_for(await self.truth.current_step())
        return Decision(action, raw_output=action.describe(), candidates=(action,) * n)

    def describe(self) -> dict[str, Any]:
        return {"policy": self.name, "env": self.env.name}


def oracle_for(env: Env) -> Policy | None:
    """The oracle policy of an environment, or None where its suite has none for this task."""
    from envs.android.env import AndroidTaskEnv
    from envs.generated.env import GeneratedEnv
    from envs.miniwob.env import TARGET_TASKS, MiniWobEnv

    inner = env.unwrapped  # the type of the environment inside its wrappers (TimeLimit)
    if isinstance(inner, GeneratedEnv):
        return GeneratedOracle(env)
    if isinstance(inner, MiniWobEnv):
        return MiniWobOracle(env) if inner.task in TARGET_TASKS else None
    if isinstance(inner, AndroidTaskEnv):
        return AndroidOracle(env)
    return None

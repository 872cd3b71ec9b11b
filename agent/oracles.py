"""Oracle policies: solve an environment from its ground truth.

An oracle that cannot reach reward 1 means a broken checker, not a weak policy: reaching 100 %
with them proves each suite's checks. They live in ``agent`` because they join the two layers that
never import each other: environments (ground truth) and policies (Decisions).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from devices.actions import Action, ActionKind, Point
from devices.base import Observation
from policy.base import Decision, HistoryEntry


class GeneratedOracle:
    """Clicks the target's centre, types each field's text, declares infeasible on an absent target,
    and finishes once the episode is over (generated GUI tasks)."""

    name = "oracle"

    def __init__(self, env: Any) -> None:
        self.env = env

    async def decide(self, task: str, history: Sequence[HistoryEntry], observation: Observation, n: int = 1
                     ) -> Decision:
        needed = await self.env.current_step()
        box = None
        if needed is None:
            action = Action(ActionKind.FINISH)
        elif needed.kind == "infeasible":
            action = Action(ActionKind.INFEASIBLE, text="the screen has no such widget")
        else:
            assert needed.widget_id is not None
            box = self.env.target_box(needed.widget_id)
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

    def __init__(self, env: Any) -> None:
        self.env = env

    async def decide(self, task: str, history: Sequence[HistoryEntry], observation: Observation, n: int = 1
                     ) -> Decision:
        action, box = await self.env.oracle_action()
        return Decision(action, raw_output=action.describe(), candidates=(action,) * n, target_box=box)

    def describe(self) -> dict[str, Any]:
        return {"policy": self.name, "env": self.env.name}


class AndroidOracle:
    """Carries out the step the Android task needs next, read from the phone's UI hierarchy."""

    name = "android-oracle"

    def __init__(self, env: Any) -> None:
        self.env = env

    async def decide(self, task: str, history: Sequence[HistoryEntry], observation: Observation, n: int = 1
                     ) -> Decision:
        from envs.android.env import action_for

        action = action_for(await self.env.current_step())
        return Decision(action, raw_output=action.describe(), candidates=(action,) * n)

    def describe(self) -> dict[str, Any]:
        return {"policy": self.name, "env": self.env.name}


def oracle_for(env: Any) -> Any | None:
    """The oracle policy of an environment, or None where its suite has none for this task."""
    from envs.android.env import AndroidTaskEnv
    from envs.generated.env import GeneratedEnv
    from envs.miniwob.env import TARGET_TASKS, MiniWobEnv

    inner = getattr(env, "unwrapped", env)  # the type of the environment inside its wrappers (TimeLimit)
    if isinstance(inner, GeneratedEnv):
        return GeneratedOracle(env)
    if isinstance(inner, MiniWobEnv):
        return MiniWobOracle(env) if inner.task in TARGET_TASKS else None
    if isinstance(inner, AndroidTaskEnv):
        return AndroidOracle(env)
    return None

"""OraclePolicy: solves a GeneratedEnv from its ground truth, which proves the env's checkers can be
satisfied (an oracle that cannot reach reward 1 means a broken checker, not a weak policy)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from devices.actions import Action, ActionKind, Point
from devices.base import Observation
from envs.generated.env import GeneratedEnv
from policy.base import Decision, HistoryEntry


class OraclePolicy:
    """Clicks the target's centre, types each field's text, declares infeasible on an absent target,
    and finishes once the episode is over."""

    name = "oracle"

    def __init__(self, env: GeneratedEnv) -> None:
        self.env = env

    async def decide(self, task: str, history: Sequence[HistoryEntry], observation: Observation, n: int = 1
                     ) -> Decision:
        needed = await self.env.current_step()
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
        box = self.env.target_box(needed.widget_id) if needed is not None and needed.widget_id else None
        return Decision(action, raw_output=action.describe(), candidates=(action,) * n, target_box=box)

    def describe(self) -> dict[str, Any]:
        return {"policy": self.name, "env": self.env.name}

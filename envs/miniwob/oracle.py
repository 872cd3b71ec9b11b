"""MiniWobOracle: clicks the element the task's next step needs, found in the DOM. Reaching reward 1
with it proves the env's reward reading and step verifier on the supported tasks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from devices.base import Observation
from policy.base import Decision, HistoryEntry

if TYPE_CHECKING:
    from envs.miniwob.env import MiniWobEnv


class MiniWobOracle:
    name = "miniwob-oracle"

    def __init__(self, env: MiniWobEnv) -> None:
        self.env = env

    async def decide(self, task: str, history: Sequence[HistoryEntry], observation: Observation, n: int = 1
                     ) -> Decision:
        action, box = await self.env.oracle_action()
        return Decision(action, raw_output=action.describe(), candidates=(action,) * n, target_box=box)

    def describe(self) -> dict[str, Any]:
        return {"policy": self.name, "env": self.env.name}

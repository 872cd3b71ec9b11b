"""The Policy protocol and the Decision it returns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from devices.actions import Action
from devices.base import Box, Observation


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """What the policy is told about an earlier step of the episode."""

    action: Action | None
    raw_output: str = ""
    executed: bool = True
    note: str = ""
    """Why the action was not executed (parse error, guard refusal, device error), if it was not."""
    observation: Observation | None = None
    """The screen the action was chosen on; the loop keeps it for the last few steps only (families
    such as UI-TARS show the model its recent screenshots)."""
    recorded: str = ""
    """Earlier steps known only as text, as an offline benchmark records them ("Step 1: ...", with ``action``
    None): GUI-R1, whose prompt holds its history as one string, shows it as it is (``agent.action_eval``)."""


@dataclass(frozen=True, slots=True)
class Decision:
    """A policy's answer for one screen.

    ``action`` is None when the output did not parse; ``parse_error`` then says why and the loop
    records the step without executing anything. ``model_input_size`` is the (w, h) of the image
    the model saw, None meaning the frame itself. ``target_box`` is where the policy grounded its
    target, normalized to the frame, when it knows.
    """

    action: Action | None
    raw_output: str = ""
    parse_error: str | None = None
    candidates: tuple[Action, ...] = ()
    model_input_size: tuple[int, int] | None = None
    target_box: Box | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.action is None and self.parse_error is None:
            raise ValueError("a Decision without an action must say why in parse_error")


@runtime_checkable
class Policy(Protocol):
    """Chooses the next action from the task, the history and the current screen."""

    name: str

    async def decide(self, task: str, history: Sequence[HistoryEntry], observation: Observation, n: int = 1) -> Decision:
        ...

    def describe(self) -> dict[str, Any]:
        """Facts for the episode record: policy name, model id, adapter version."""
        ...

"""The guard between decide and act: allow, ask for confirmation, or refuse an action."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from devices.actions import Action, ActionKind
from devices.base import Observation


class Verdict(str, Enum):
    ALLOW = "allow"
    CONFIRM = "confirm"
    REFUSE = "refuse"


@dataclass(frozen=True, slots=True)
class GuardDecision:
    verdict: Verdict
    reason: str = ""


class Guard(Protocol):
    """Looks at an action (and the screen it was chosen on) before the device performs it."""

    def check(self, action: Action, observation: Observation) -> GuardDecision: ...


class AllowAll:
    """The default guard: everything is allowed."""

    def check(self, action: Action, observation: Observation) -> GuardDecision:
        return GuardDecision(Verdict.ALLOW)


class KindGuard:
    """Refuses some action kinds and asks before others.

    ``confirm`` is called with the action and returns True to go ahead; without it (no terminal),
    actions that need confirmation are refused, because nobody is there to say yes.
    """

    def __init__(
        self,
        refuse: frozenset[ActionKind] = frozenset(),
        confirm_kinds: frozenset[ActionKind] = frozenset(),
        confirm: Callable[[Action], bool] | None = None,
    ) -> None:
        self.refuse = refuse
        self.confirm_kinds = confirm_kinds
        self.confirm = confirm

    def check(self, action: Action, observation: Observation) -> GuardDecision:
        if action.kind in self.refuse:
            return GuardDecision(Verdict.REFUSE, f"{action.kind.value} is refused by guard.refuse")
        if action.kind in self.confirm_kinds:
            if self.confirm is None:
                return GuardDecision(Verdict.REFUSE, f"{action.kind.value} needs confirmation and no terminal is attached")
            if self.confirm(action):
                return GuardDecision(Verdict.ALLOW, "confirmed by the user")
            return GuardDecision(Verdict.REFUSE, "the user said no")
        return GuardDecision(Verdict.ALLOW)

"""The guard between decide and act: allow, ask for confirmation, or refuse an action."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from devices.actions import Action, ActionKind
from devices.base import Observation


class GuardVerdict(str, Enum):
    ALLOW = "allow"
    CONFIRM = "confirm"
    REFUSE = "refuse"


@dataclass(frozen=True, slots=True)
class GuardDecision:
    verdict: GuardVerdict
    reason: str = ""


class Guard(Protocol):
    """Looks at an action (and the screen it was chosen on) before the device performs it."""

    def check(self, action: Action, observation: Observation) -> GuardDecision: ...


class AllowAll:
    """The default guard: everything is allowed."""

    def check(self, action: Action, observation: Observation) -> GuardDecision:
        return GuardDecision(GuardVerdict.ALLOW)


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
            return GuardDecision(GuardVerdict.REFUSE, f"{action.kind.value} is refused by guard.refuse")
        if action.kind in self.confirm_kinds:
            if self.confirm is None:
                return GuardDecision(GuardVerdict.REFUSE, f"{action.kind.value} needs confirmation and no terminal is attached")
            if self.confirm(action):
                return GuardDecision(GuardVerdict.ALLOW, "confirmed by the user")
            return GuardDecision(GuardVerdict.REFUSE, "the user said no")
        return GuardDecision(GuardVerdict.ALLOW)


class RegionGuard:
    """Refuses pointer actions that would touch a forbidden screen region.

    Regions are normalized frame boxes (x1, y1, x2, y2), inclusive, e.g. the corner with the
    system tray or the window holding the user's own work. Any point of the action counts: the
    point of a click, scroll or type, and both ends of a drag.
    """

    def __init__(self, regions: tuple[tuple[float, float, float, float], ...]) -> None:
        for r in regions:
            if len(r) != 4 or not (0 <= r[0] <= r[2] <= 1 and 0 <= r[1] <= r[3] <= 1):
                raise ValueError(f"a forbidden region must be [x1, y1, x2, y2] with 0 <= x1 <= x2 <= 1 and "
                                 f"0 <= y1 <= y2 <= 1 (normalized frame coordinates), got {list(r)}")
        self.regions = regions

    def check(self, action: Action, observation: Observation) -> GuardDecision:
        for point in (action.point, action.end):
            if point is None:
                continue
            for r in self.regions:
                if r[0] <= point.x <= r[2] and r[1] <= point.y <= r[3]:
                    return GuardDecision(GuardVerdict.REFUSE, f"({point.x:.3f}, {point.y:.3f}) is inside the forbidden "
                                                         f"region {list(r)} (guard.forbidden_regions)")
        return GuardDecision(GuardVerdict.ALLOW)


class GuardChain:
    """Several guards in order: the first that does not allow decides."""

    def __init__(self, guards: list[Guard]) -> None:
        self.guards = guards

    def check(self, action: Action, observation: Observation) -> GuardDecision:
        for guard in self.guards:
            decision = guard.check(action, observation)
            if decision.verdict is not GuardVerdict.ALLOW:
                return decision
        return GuardDecision(GuardVerdict.ALLOW)

"""The guard between decide and act: allow, ask the person first, or refuse an action.

``agent run`` acts on people's real devices, so its guard is safe by default (``build_guard`` in
agent/builders.py assembles it from ``[guard]``):

- ``UrlGuard``: ``open_url`` only to the allowed schemes (http and https unless told otherwise:
  ``file://`` would put local files in the episode and in a remote model's prompt, ``chrome://`` and
  ``javascript:`` act on the browser itself) and, when an allowlist is set, only to its domains;
  while the page shown is outside the allowlist, only ``back`` is allowed.
- ``PackageGuard``: on Android, ``open_app`` only for the allowed packages, when a list is set.
- ``IrreversibleGuard``: an action whose target reads as irreversible (pay, buy, delete, send, post,
  uninstall, reset, transfer, … and their Chinese equivalents), read from the DOM, the UI hierarchy
  or OCR of the frame at the point, needs a yes.
- ``KindGuard``: action kinds refused outright, or needing a yes.
- ``RegionGuard``: screen regions never touched: pointer actions inside them, and typing or keys
  while the focused element lies in one.
- ``HotkeyGuard``: key combinations that close windows, tabs or sessions need a yes.

Guards return ``CONFIRM`` rather than asking: the runner asks the person (``agent.person``) and
refuses when nobody is there to say yes. An empty allowlist means everything (documented in
docs/security.md). ``agent eval`` and online sessions run in sandboxes and use no guard.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol
from urllib.parse import urlsplit

from devices.actions import POINTED_KINDS, Action, ActionKind
from devices.base import Box, ElementInfo, Observation

SAFE_SCHEMES = ("http", "https")
"""What ``open_url`` may open unless ``guard.allow_schemes`` says otherwise."""

IRREVERSIBLE_WORDS = (
    "pay", "payment", "buy", "purchase", "order now", "place order", "checkout", "check out", "delete", "remove",
    "erase", "send", "post", "publish", "submit payment", "uninstall", "reset", "factory reset", "wipe", "transfer",
    "withdraw", "confirm payment", "unsubscribe", "close account", "sign out everywhere",
    "支付", "付款", "购买", "立即购买", "下单", "提交订单", "结算", "删除", "移除", "清空", "发送", "发布", "发表",
    "卸载", "重置", "恢复出厂", "转账", "提现", "注销",
)
"""Words whose appearance in a target's text means the action may not be undone (matched on word boundaries for
Latin words, as substrings for Chinese)."""

CLOSING_HOTKEYS = (("Alt", "F4"), ("Control", "w"), ("Control", "q"), ("Meta", "q"), ("Meta", "w"),
                   ("Control", "Shift", "w"), ("Control", "Alt", "Delete"), ("Control", "Alt", "Backspace"))
"""Key combinations that close a window, a tab, the browser or the session."""


class GuardVerdict(str, Enum):
    ALLOW = "allow"
    CONFIRM = "confirm"
    REFUSE = "refuse"


@dataclass(frozen=True, slots=True)
class GuardDecision:
    verdict: GuardVerdict
    reason: str = ""


ALLOW = GuardDecision(GuardVerdict.ALLOW)


class ScreenProbe(Protocol):
    """What a guard may ask about the screen an action was chosen on (``agent.probe.Probe``)."""

    observation: Observation

    async def element_at(self, point: Any) -> ElementInfo | None: ...

    async def focused_box(self) -> Box | None: ...


class Guard(Protocol):
    """Looks at an action (and the screen it was chosen on) before the device performs it."""

    async def check(self, action: Action, probe: ScreenProbe) -> GuardDecision: ...


class AllowAll:
    """Everything is allowed: for environments that are sandboxes (``agent eval``, online sessions)."""

    async def check(self, action: Action, probe: ScreenProbe) -> GuardDecision:
        return ALLOW


@dataclass(frozen=True)
class KindGuard:
    """Refuses some action kinds and asks before others."""

    refuse: frozenset[ActionKind] = frozenset()
    confirm: frozenset[ActionKind] = frozenset()

    async def check(self, action: Action, probe: ScreenProbe) -> GuardDecision:
        if action.kind in self.refuse:
            return GuardDecision(GuardVerdict.REFUSE, f"{action.kind.value} is refused by guard.refuse")
        if action.kind in self.confirm:
            return GuardDecision(GuardVerdict.CONFIRM, f"{action.kind.value} needs a yes (guard.confirm)")
        return ALLOW


class RegionGuard:
    """Refuses actions that would touch a forbidden screen region.

    Regions are normalized frame boxes (x1, y1, x2, y2), inclusive, e.g. the corner with the system
    tray or the window holding the user's own work. Any point of the action counts (the point of a
    click, scroll or type, both ends of a drag); typing without a point and keys count where the
    focused element lies, as the device tells it, or else where the last pointed action landed.
    """

    def __init__(self, regions: Sequence[Sequence[float]]) -> None:
        for r in regions:
            if len(r) != 4 or not (0 <= r[0] <= r[2] <= 1 and 0 <= r[1] <= r[3] <= 1):
                raise ValueError(f"a forbidden region must be [x1, y1, x2, y2] with 0 <= x1 <= x2 <= 1 and "
                                 f"0 <= y1 <= y2 <= 1 (normalized frame coordinates), got {list(r)}")
        self.regions = tuple(tuple(float(v) for v in r) for r in regions)
        self._last_point: tuple[float, float] | None = None

    def _inside(self, x: float, y: float) -> tuple[float, ...] | None:
        return next((r for r in self.regions if r[0] <= x <= r[2] and r[1] <= y <= r[3]), None)

    async def check(self, action: Action, probe: ScreenProbe) -> GuardDecision:
        for point in (action.point, action.end):
            if point is None:
                continue
            region = self._inside(point.x, point.y)
            if region is not None:
                return GuardDecision(GuardVerdict.REFUSE, f"({point.x:.3f}, {point.y:.3f}) is inside the forbidden "
                                                          f"region {list(region)} (guard.forbidden_regions)")
        if action.point is not None:
            self._last_point = (action.point.x, action.point.y)
        elif action.kind in (ActionKind.TYPE, ActionKind.KEY, ActionKind.HOTKEY) and self.regions:
            box = await probe.focused_box()
            where = box.center if box is not None else self._last_point
            region = self._inside(*where) if where is not None else None
            if region is not None:
                return GuardDecision(GuardVerdict.REFUSE, f"{action.kind.value} would go to the focused element, "
                                                          f"inside the forbidden region {list(region)}")
        return ALLOW


@dataclass(frozen=True)
class UrlGuard:
    """``open_url`` only to allowed schemes and domains; nothing but ``back`` on a page outside the allowlist."""

    schemes: tuple[str, ...] = SAFE_SCHEMES
    domains: tuple[str, ...] = ()
    """Allowed domains (a domain allows its subdomains); empty: every domain."""

    def _domain_ok(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        return not self.domains or any(host == d or host.endswith("." + d) for d in self.domains)

    async def check(self, action: Action, probe: ScreenProbe) -> GuardDecision:
        if action.kind is ActionKind.OPEN_URL:
            parts = urlsplit((action.text or "").strip())
            scheme = parts.scheme.lower()
            if scheme not in self.schemes:
                return GuardDecision(GuardVerdict.REFUSE, f"open_url to a {scheme or 'scheme-less'}: address is "
                                                          f"refused; allowed schemes: {', '.join(self.schemes)} "
                                                          "(guard.allow_schemes)")
            if not self._domain_ok(parts.hostname or ""):
                return GuardDecision(GuardVerdict.REFUSE, f"{parts.hostname or action.text!r} is not in "
                                                          f"guard.allow_domains ({', '.join(self.domains)})")
            return ALLOW
        url = str(probe.observation.meta.get("url") or "")
        if self.domains and url.startswith(("http://", "https://")) and action.kind is not ActionKind.BACK:
            host = urlsplit(url).hostname or ""
            if not self._domain_ok(host):
                return GuardDecision(GuardVerdict.REFUSE, f"the page shown ({host}) is outside guard.allow_domains; "
                                                          "only back is allowed here")
        return ALLOW


@dataclass(frozen=True)
class PackageGuard:
    """On Android, ``open_app`` only for allowed packages (empty: every package)."""

    packages: tuple[str, ...] = ()

    async def check(self, action: Action, probe: ScreenProbe) -> GuardDecision:
        if action.kind is ActionKind.OPEN_APP and self.packages:
            target = (action.text or "").strip().split("/")[0]
            if target not in self.packages:
                return GuardDecision(GuardVerdict.REFUSE, f"open_app {target!r} is not in guard.allow_packages "
                                                          f"({', '.join(self.packages)})")
        package = str(probe.observation.meta.get("package") or "")
        if self.packages and package and package not in self.packages and action.kind not in (
                ActionKind.BACK, ActionKind.HOME):
            return GuardDecision(GuardVerdict.REFUSE, f"the app shown ({package}) is outside guard.allow_packages; "
                                                      "only back and home are allowed here")
        return ALLOW


@dataclass(frozen=True)
class IrreversibleGuard:
    """Asks before an action whose target reads as irreversible (see ``IRREVERSIBLE_WORDS``)."""

    words: tuple[str, ...] = IRREVERSIBLE_WORDS
    _pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        latin = [re.escape(w) for w in self.words if w.isascii()]
        other = [re.escape(w) for w in self.words if not w.isascii()]
        parts = ([rf"\b(?:{'|'.join(latin)})\b"] if latin else []) + ([f"(?:{'|'.join(other)})"] if other else [])
        object.__setattr__(self, "_pattern", re.compile("|".join(parts) or r"(?!)", re.IGNORECASE))

    def match(self, text: str) -> str | None:
        """The irreversible word ``text`` contains, if any."""
        m = self._pattern.search(unicodedata.normalize("NFKC", text))
        return m.group(0) if m else None

    async def check(self, action: Action, probe: ScreenProbe) -> GuardDecision:
        pressing = action.kind in POINTED_KINDS or (action.kind is ActionKind.KEY and action.keys == ("Enter",))
        if not pressing or action.kind in (ActionKind.HOVER, ActionKind.DRAG):
            return ALLOW
        if action.point is not None:
            element = await probe.element_at(action.point)
        else:
            box = await probe.focused_box()
            element = await probe.element_at(_centre(box)) if box is not None else None
        word = self.match(element.text) if element is not None and element.text else None
        if word is None:
            return ALLOW
        return GuardDecision(GuardVerdict.CONFIRM, f"{action.kind.value} on {element.text[:60]!r} may not be "
                                                   f"undone (it reads {word!r})")


@dataclass(frozen=True)
class HotkeyGuard:
    """Asks before key combinations that close windows, tabs, the browser or the session."""

    combos: tuple[tuple[str, ...], ...] = CLOSING_HOTKEYS

    async def check(self, action: Action, probe: ScreenProbe) -> GuardDecision:
        if action.kind is ActionKind.HOTKEY:
            pressed = {k.lower() for k in action.keys}
            if any(pressed == {k.lower() for k in combo} for combo in self.combos):
                return GuardDecision(GuardVerdict.CONFIRM, f"{'+'.join(action.keys)} may close a window or session")
        return ALLOW


class GuardChain:
    """Several guards in order: the first refusal decides; otherwise any request for a yes does."""

    def __init__(self, guards: Sequence[Guard]) -> None:
        self.guards = list(guards)

    async def check(self, action: Action, probe: ScreenProbe) -> GuardDecision:
        confirm: list[str] = []
        for guard in self.guards:
            decision = await guard.check(action, probe)
            if decision.verdict is GuardVerdict.REFUSE:
                return decision
            if decision.verdict is GuardVerdict.CONFIRM:
                confirm.append(decision.reason)
        return GuardDecision(GuardVerdict.CONFIRM, "; ".join(confirm)) if confirm else ALLOW


def _centre(box: Box) -> Any:
    from devices.actions import Point

    x, y = box.center
    return Point(x, y)

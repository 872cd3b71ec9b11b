"""The guard between decide and act: allow, ask the person first, or refuse an action.

``agent run`` acts on people's real devices, so its guard is safe by default (``build_guard`` in
agent/builders.py assembles it from ``[guard]``):

- ``UrlGuard``: ``open_url`` only to the allowed schemes (http and https unless told otherwise:
  ``file://`` would put local files in the episode and in a remote model's prompt, ``chrome://`` and
  ``javascript:`` act on the browser itself), never to link-local or cloud metadata addresses, and,
  when an allowlist is set, only to its domains; each address is judged as the browser parses it
  (agent/web_address.py: backslashes, user info, IPv4 number forms, IDNA). While the page shown is
  outside the allowlist or link-local, whatever its scheme, only ``back`` is allowed.
- ``PackageGuard``: on Android, ``open_app`` only for the allowed packages, when a list is set.
- ``IrreversibleGuard``: an action that activates a target whose text reads as irreversible (pay, buy,
  delete, send, post, uninstall, reset, transfer, … and their Chinese equivalents) needs a yes. The
  text is read from the DOM, the UI hierarchy or OCR of the frame, and folded as a person reads it
  (agent/reading.py: look-alike letters, invisible characters, marks, spacing, Traditional Chinese);
  whatever activates counts: a click, tap, double or long press, a drag, typing with a point (it
  clicks first), and Enter, Space or a newline (as a key, in a hotkey or in typed text) on the
  focused element.
- ``KindGuard``: action kinds refused outright, or needing a yes.
- ``RegionGuard``: screen regions never touched: pointer actions inside them (a scroll without a
  point acts at the centre), and typing or keys while the focused element lies in one.
- ``HotkeyGuard``: key combinations that close windows, tabs, applications or sessions need a yes,
  judged by what the keys do (a closing key held with the modifier that makes it close), not by a
  list of combinations.

``finish`` and ``infeasible`` touch nothing and are always allowed (``GuardChain``); ``ask_user``
and ``back`` stay allowed on a page outside the allowlist. Guards return ``CONFIRM`` rather than
asking: the runner asks the person (``agent.person``) and refuses when nobody is there to say yes.
An empty allowlist means everything (documented in docs/security.md, with what each rule does not
cover). ``agent eval`` and online sessions run in sandboxes and use no guard.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from agent.reading import read_as_seen
from agent.web_address import WebAddress, forbidden_host, parse_address
from devices.actions import TERMINAL_KINDS, Action, ActionKind, Point
from devices.base import Box, ElementInfo, Observation

SCREEN_CENTRE = Point(0.5, 0.5)
"""Where a scroll without a point acts, on every device."""

SAFE_SCHEMES = ("http", "https")
"""What ``open_url`` may open unless ``guard.allow_schemes`` says otherwise."""

IRREVERSIBLE_WORDS = (
    "pay", "payment", "buy", "purchase", "order now", "place order", "checkout", "check out", "delete", "remove",
    "erase", "send", "post", "publish", "submit payment", "uninstall", "reset", "factory reset", "wipe", "transfer",
    "withdraw", "confirm payment", "unsubscribe", "close account", "sign out everywhere",
    "支付", "付款", "购买", "立即购买", "下单", "提交订单", "结算", "删除", "移除", "清空", "发送", "发布", "发表",
    "卸载", "重置", "恢复出厂", "转账", "转帐", "提现", "注销",
)
"""Words whose appearance in a target's text means the action may not be undone (matched on word boundaries for
Latin words, as substrings for Chinese; both sides read as a person reads them, so Traditional forms such as 刪除 and
look-alike letters match too)."""

CLOSING_KEYS = {
    "w": (frozenset({"Control", "Meta"}), "closes the tab or window"),
    "q": (frozenset({"Control", "Meta"}), "quits the application (or logs out)"),
    "F4": (frozenset({"Control", "Meta", "Alt"}), "closes the window or tab"),
    "Delete": (frozenset({"Control", "Alt"}), "ends or locks the session"),
    "Backspace": (frozenset({"Control", "Alt"}), "kills the X session"),
    "Escape": (frozenset({"Meta", "Alt"}), "force-quits an application"),
}
"""What closes: a key, the modifiers that make it close (any one of them; all of them for Control+Alt+Delete,
Control+Alt+Backspace and Meta+Alt+Escape), and its effect. Other modifiers held as well do not change the effect
(Control+Shift+W, Control+Shift+Q, Meta+Alt+W all close)."""
_ALL_NEEDED = frozenset({"Delete", "Backspace", "Escape"})
MODIFIERS = frozenset({"Control", "Shift", "Alt", "Meta"})

ACTIVATING_KEYS = frozenset({"Enter", "Space", " ", "\n", "\r"})
"""Keys that activate the focused element (a button, a link, a checkbox) as a click does."""
TEXT_ENTRY_ROLES = ("input", "textarea", "edittext", "select")
"""Focused elements (tag on the web, class on Android) into which a typed space is text, not a press."""
PAGE_FREE_KINDS = frozenset({ActionKind.BACK, ActionKind.ASK_USER, *TERMINAL_KINDS})
"""What stays allowed on a page outside the allowlist: the way back, the question to the person, the end."""


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

    async def focused_element(self) -> ElementInfo | None: ...

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
    click, scroll or type, both ends of a drag); a scroll without a point counts at the centre of the
    screen, where every device scrolls it; typing without a point and keys count where the focused
    element lies, as the device tells it, or else where the last pointed action landed.
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
        centre = SCREEN_CENTRE if action.kind is ActionKind.SCROLL and action.point is None else None
        for point in (action.point, action.end, centre):
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
    """``open_url`` only to allowed schemes and domains and never to link-local or metadata addresses, each judged as
    the browser parses it; nothing but ``back`` (and ``ask_user``, ``finish``, ``infeasible``) on a page outside the
    allowlist or on a link-local page, whatever its scheme (``file:``, ``data:``, ``about:`` pages have no domain,
    so with an allowlist they are outside it)."""

    schemes: tuple[str, ...] = SAFE_SCHEMES
    domains: tuple[str, ...] = ()
    """Allowed domains (a domain allows its subdomains); empty: every domain."""
    link_local: bool = False
    """Allow link-local and cloud metadata addresses (``guard.allow_link_local``)."""

    def __post_init__(self) -> None:
        # The allowlist in the form the browser's hosts take: "Bücher.example" is "xn--bcher-kva.example".
        object.__setattr__(self, "domains", tuple(_domain(d) for d in self.domains))

    def _domain_ok(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        return not self.domains or (bool(host) and any(host == d or host.endswith("." + d) for d in self.domains))

    def _refused_host(self, address: WebAddress) -> str | None:
        why = None if self.link_local else forbidden_host(address.host)
        return f"{why}: refused unless guard.allow_link_local = true" if why else None

    async def check(self, action: Action, probe: ScreenProbe) -> GuardDecision:
        if action.kind is ActionKind.OPEN_URL:
            return self._judge_open(action.text or "")
        url = str(probe.observation.meta.get("url") or "")
        if not url or action.kind in PAGE_FREE_KINDS:
            return ALLOW
        try:
            address: WebAddress | None = parse_address(url)
        except ValueError:
            address = None
        refused = self._refused_host(address) if address is not None else None
        if refused is not None:
            return GuardDecision(GuardVerdict.REFUSE, f"the page shown: {refused}; only back is allowed here")
        if self.domains and (address is None or not self._domain_ok(address.host)):
            shown = address.host if address is not None and address.host else url[:80]
            return GuardDecision(GuardVerdict.REFUSE, f"the page shown ({shown}) is outside guard.allow_domains; "
                                                      "only back (or open_url to an allowed address) is allowed here")
        return ALLOW

    def _judge_open(self, text: str) -> GuardDecision:
        allowed = f"allowed schemes: {', '.join(self.schemes)} (guard.allow_schemes)"
        try:
            address = parse_address(text.strip())
        except ValueError as e:
            return GuardDecision(GuardVerdict.REFUSE, f"open_url: {e}; {allowed}")
        if address.scheme not in self.schemes:
            return GuardDecision(GuardVerdict.REFUSE, f"open_url to a {address.scheme}: address is refused; {allowed}")
        refused = self._refused_host(address)
        if refused is not None:
            return GuardDecision(GuardVerdict.REFUSE, f"open_url to {address.href[:120]}: {refused}")
        if not self._domain_ok(address.host):
            return GuardDecision(GuardVerdict.REFUSE, f"{address.host or text!r} (as the browser reads "
                                                      f"{text[:120]!r}) is not in guard.allow_domains "
                                                      f"({', '.join(self.domains)})")
        return ALLOW


def _domain(name: str) -> str:
    """An allowlist entry as the browser writes hosts (lower-case ASCII, IDNA); unchanged when it is no host."""
    name = name.strip().lower().rstrip(".")
    try:
        return parse_address(f"http://{name}/").host.rstrip(".") or name
    except ValueError:
        return name


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
                *PAGE_FREE_KINDS, ActionKind.HOME):
            return GuardDecision(GuardVerdict.REFUSE, f"the app shown ({package}) is outside guard.allow_packages; "
                                                      "only back and home are allowed here")
        return ALLOW


class IrreversibleGuard:
    """Asks before an action that activates a target reading as irreversible (see ``IRREVERSIBLE_WORDS``).

    What activates: a click, double click, right click, long press or drag on the target (a drag's start and end),
    typing with a point (it clicks there first), and Enter, Space or a newline pressed on the focused element (a
    ``key``, any ``hotkey`` holding one of them, or typed text holding a newline, or a space when the focused element
    is not a text field; typed text that moves the focus with a Tab and then presses one of them always asks). The
    focused element's text is its own and that of the element at its centre (a ``<input type=submit>`` tells its
    label only there); where the device cannot tell the focus (the desktop), the
    target of the last pointed action stands in for it. Texts and words are compared as a person reads them
    (``agent.reading.read_as_seen``).
    """

    def __init__(self, words: Sequence[str] = IRREVERSIBLE_WORDS) -> None:
        self.words = tuple(words)
        readings = [(w, r) for w in self.words if all(r := read_as_seen(w))]  # a word that reads as nothing: none
        self._patterns = tuple(_word_pattern([r[i] for _, r in readings]) for i in range(2))
        self._listed = [{r[i]: w for w, r in reversed(readings)} for i in range(2)]
        """Each reading back to the word of the list it reads as."""
        self._last_point: Point | None = None

    def match(self, text: str) -> str | None:
        """The word of the list that ``text`` reads as containing, if any."""
        for pattern, reading, listed in zip(self._patterns, read_as_seen(text), self._listed):
            m = pattern.search(reading)
            if m:
                return listed.get(m.group(0), m.group(0))
        return None

    async def check(self, action: Action, probe: ScreenProbe) -> GuardDecision:
        pointed = [p for p in (action.point, action.end) if p is not None]
        if action.kind is ActionKind.HOVER or action.kind is ActionKind.SCROLL:
            pointed = []
        elif pointed:
            self._last_point = pointed[-1]
        if action.kind is ActionKind.TYPE and re.search(r"\t[^\n\r ]*[\n\r ]", action.text or ""):
            return GuardDecision(GuardVerdict.CONFIRM, "type moves the focus with a Tab and then presses Enter or "
                                                       "Space on an element the guard cannot see first")
        targets: list[ElementInfo] = []
        if pointed:
            targets = [e for e in [await probe.element_at(p) for p in pointed] if e is not None]
        elif await self._presses_focus(action, probe):
            targets = await self._focused(probe)
        for element in targets:
            word = self.match(element.text) if element.text else None
            if word is not None:
                return GuardDecision(GuardVerdict.CONFIRM, f"{action.kind.value} on {element.text[:60]!r} may not be "
                                                           f"undone (it reads {word!r})")
        return ALLOW

    async def _presses_focus(self, action: Action, probe: ScreenProbe) -> bool:
        if action.kind in (ActionKind.KEY, ActionKind.HOTKEY):
            return any(k in ACTIVATING_KEYS for k in action.keys)
        if action.kind is not ActionKind.TYPE or action.point is not None:
            return False
        text = action.text or ""
        if "\n" in text or "\r" in text:
            return True
        if " " not in text:
            return False
        focused = await probe.focused_element()
        role = (focused.role if focused is not None else "").lower()
        return not any(r in role for r in TEXT_ENTRY_ROLES)

    async def _focused(self, probe: ScreenProbe) -> list[ElementInfo]:
        focused = await probe.focused_element()
        if focused is None:
            last = await probe.element_at(self._last_point) if self._last_point is not None else None
            return [last] if last is not None else []
        found = [focused]
        if focused.box is not None:
            at_centre = await probe.element_at(_centre(focused.box))
            if at_centre is not None:
                found.append(at_centre)
        return found


def _word_pattern(words: Sequence[str]) -> re.Pattern[str]:
    """One pattern for folded words: Latin ones on word boundaries, the others (Chinese) as substrings."""
    latin = [re.escape(w) for w in words if w.isascii()]
    other = [re.escape(w) for w in words if not w.isascii()]
    parts = ([rf"\b(?:{'|'.join(latin)})\b"] if latin else []) + ([f"(?:{'|'.join(other)})"] if other else [])
    return re.compile("|".join(parts) or r"(?!)")


def closing_effect(keys: Sequence[str]) -> str | None:
    """What a key combination (canonical key names, ``devices.keys``) closes, or None: a key of ``CLOSING_KEYS`` held
    with the modifiers that make it close, whatever else is held."""
    held = {k for k in keys if k in MODIFIERS}
    for key in keys:
        if key in MODIFIERS:
            continue
        name = key if len(key) > 1 else read_as_seen(key)[0]
        rule = CLOSING_KEYS.get(name)
        if rule is None:
            continue
        needed, effect = rule
        if (needed <= held) if name in _ALL_NEEDED else bool(needed & held):
            return effect
    return None


@dataclass(frozen=True)
class HotkeyGuard:
    """Asks before key combinations that close windows, tabs, applications or the session (``closing_effect``)."""

    async def check(self, action: Action, probe: ScreenProbe) -> GuardDecision:
        if action.kind is ActionKind.HOTKEY:
            effect = closing_effect(action.keys)
            if effect is not None:
                return GuardDecision(GuardVerdict.CONFIRM, f"{'+'.join(action.keys)} may close a window or session "
                                                           f"(it {effect})")
        return ALLOW


class GuardChain:
    """Several guards in order: the first refusal decides; otherwise any request for a yes does. ``finish`` and
    ``infeasible`` end the episode and touch nothing: they are always allowed, whatever the guards say."""

    def __init__(self, guards: Sequence[Guard]) -> None:
        self.guards = list(guards)

    async def check(self, action: Action, probe: ScreenProbe) -> GuardDecision:
        if action.kind in TERMINAL_KINDS:
            return ALLOW
        confirm: list[str] = []
        for guard in self.guards:
            decision = await guard.check(action, probe)
            if decision.verdict is GuardVerdict.REFUSE:
                return decision
            if decision.verdict is GuardVerdict.CONFIRM:
                confirm.append(decision.reason)
        return GuardDecision(GuardVerdict.CONFIRM, "; ".join(confirm)) if confirm else ALLOW


def _centre(box: Box) -> Point:
    x, y = box.center
    return Point(x, y)

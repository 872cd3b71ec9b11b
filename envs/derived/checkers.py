"""Whether a derived task's conditions hold on a device state (pure: the states are read in ``envs/derived/states.py``).

A state is a plain dict, the same whether it was read at the end of a demonstration (to derive the task) or by the
environment (to check it):

- web: ``{"url", "title", "text", "elements": {selector: {tag, value, checked, selected, text} | None},
  "frames": {frame URL: the same without "frames" | None}}``;
- Android: ``{"activity": "package/activity", "nodes": [{text, resource_id, content_desc, class, package, box,
  password}]}``;
- desktop: ``{"window_title": str | None, "ocr": [{"text", "box": [x1, y1, x2, y2]}]}`` (boxes normalized).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from envs.derived.spec import (ActivityCondition, Condition, ElementCondition, HierarchyTextCondition, TextMatch,
                               OcrTextCondition, TextVisibleCondition, UrlCondition, WindowTitleCondition,
                               condition_dict)
from envs.tasks import TaskVerdict


@dataclass(frozen=True, slots=True)
class ConditionResult:
    """One condition judged on one state: whether it holds and what was there instead."""

    condition: Condition
    holds: bool
    actual: Any = None

    def to_dict(self) -> dict[str, Any]:
        return {**condition_dict(self.condition), "holds": self.holds, "actual": self.actual}


def squash(text: str) -> str:
    """Whitespace runs as one space, ends stripped: visible text compares the same however it wraps."""
    return " ".join(text.split())


def same_url(actual: str, expected: str, match: TextMatch) -> bool:
    if match is TextMatch.EQUALS:
        return actual == expected
    if match is TextMatch.PATH_EQUALS:
        return (urlparse(actual).path or "/") == (urlparse(expected).path or "/")
    return expected in actual


def check(conditions: Sequence[Condition], state: dict[str, Any]) -> list[ConditionResult]:
    """Each condition judged on ``state`` (see the module docstring for its form)."""
    return [check_one(c, state) for c in conditions]


def verdict(results: Sequence[ConditionResult]) -> TaskVerdict:
    """Success when every condition holds; the details list each with what was there."""
    ok = bool(results) and all(r.holds for r in results)
    return TaskVerdict(ok, 1.0 if ok else 0.0, {"conditions": [r.to_dict() for r in results],
                                                "failed": sum(not r.holds for r in results)})


def check_one(c: Condition, state: dict[str, Any]) -> ConditionResult:
    if isinstance(c, UrlCondition):
        url = str(state.get("url") or "")
        return ConditionResult(c, same_url(url, c.value, c.match), url)
    if isinstance(c, ElementCondition):
        return check_element(c, scope(state, c.frame))
    if isinstance(c, TextVisibleCondition):
        where = scope(state, c.frame)
        text = squash(str((where or {}).get("text") or ""))
        return ConditionResult(c, squash(c.text) in text, text[:200] if where else "frame not found")
    if isinstance(c, ActivityCondition):
        activity = str(state.get("activity") or "")
        package, _, name = activity.partition("/")
        ok = package == c.package and (not c.activity or same_activity(name, c.activity, package))
        return ConditionResult(c, ok, activity)
    if isinstance(c, HierarchyTextCondition):
        return check_hierarchy(c, state.get("nodes") or [])
    if isinstance(c, WindowTitleCondition):
        title = state.get("window_title")
        ok = title is not None and (title == c.value if c.match is TextMatch.EQUALS else c.value in title)
        return ConditionResult(c, ok, title)
    assert isinstance(c, OcrTextCondition)
    text = ocr_text_in(state.get("ocr") or [], c.box.as_list())
    return ConditionResult(c, squash(c.text).casefold() in text.casefold(), text[:200])


def scope(state: dict[str, Any], frame: str) -> dict[str, Any] | None:
    """The page's state, or the state of its frame whose URL is ``frame`` (None when no such frame)."""
    if not frame:
        return state
    return (state.get("frames") or {}).get(frame)


def check_element(c: ElementCondition, where: dict[str, Any] | None) -> ConditionResult:
    if where is None:
        return ConditionResult(c, False, "frame not found")
    element = (where.get("elements") or {}).get(c.selector)
    if element is None:
        return ConditionResult(c, False, "element not found")
    ok = True
    if c.value is not None:
        ok &= element.get("value") == c.value
    if c.checked is not None:
        ok &= element.get("checked") is c.checked
    if c.selected is not None:
        ok &= tuple(element.get("selected") or ()) == c.selected
    if c.text_contains is not None:
        ok &= squash(c.text_contains) in squash(str(element.get("text") or ""))
    return ConditionResult(c, ok, {k: element.get(k) for k in ("value", "checked", "selected", "text")})


def same_activity(actual: str, expected: str, package: str) -> bool:
    """Activity names match written short (``.Main``) or in full (``com.example.app.Main``)."""
    def full(name: str) -> str:
        return package + name if name.startswith(".") else name

    return full(actual) == full(expected)


def check_hierarchy(c: HierarchyTextCondition, nodes: Sequence[dict[str, Any]]) -> ConditionResult:
    want = squash(c.text)
    candidates = [n for n in nodes if not c.resource_id or n.get("resource_id") == c.resource_id]
    for node in candidates:
        if not want or want in (squash(str(node.get("text") or "")), squash(str(node.get("content_desc") or ""))):
            return ConditionResult(c, True, node.get("text"))
    seen = [n.get("text") for n in candidates][:5] if c.resource_id else "no node with that text"
    return ConditionResult(c, False, seen if candidates or not c.resource_id else "no node with that resource id")


def ocr_text_in(lines: Sequence[dict[str, Any]], box: Sequence[float]) -> str:
    """The OCR lines whose centres are inside ``box``, top to bottom, joined by spaces."""
    x1, y1, x2, y2 = box
    inside = []
    for line in lines:
        lx1, ly1, lx2, ly2 = line["box"]
        cx, cy = (lx1 + lx2) / 2, (ly1 + ly2) / 2
        if x1 <= cx <= x2 and y1 <= cy <= y2:
            inside.append((ly1, lx1, str(line["text"])))
    return squash(" ".join(t for _, _, t in sorted(inside)))

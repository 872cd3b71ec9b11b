"""A task from a demonstration: what the person *changed*, as conditions (``envs/derived/spec.py``).

    spec = derive_task(read_episode(path), start_state, final_state, "subscribe")

``start_state`` and ``final_state`` are the device's states before and after (their form:
``envs/derived/checkers.py``). Every condition is something that differs between the two, so a derived checker
holds on the demonstration's final state and fails on its start state (``derive_task`` refuses a task whose
conditions would all hold at the start).

- **web**: the final URL when it changed (``path_equals`` on the same site, the query or fragment when only those
  changed, ``equals`` elsewhere); for each element the person touched (the steps' ``info.env_info.demo.selector``
  and ``frame``, in order, once each, password fields never), its final value, checked state or selected options
  where they differ from the start, else its short visible text when that changed; and up to
  ``MAX_TEXT_CONDITIONS`` short lines of visible text that appeared (on the page or in a touched frame), not the
  typed values themselves.
- **Android**: the foreground activity when it changed; for each element the person touched (the step's target:
  its box and class, in the package the recorder names in ``info.package``), the node at the same place in the
  final hierarchy when its text differs from the start (``hierarchy_text`` by resource id and text).
- **desktop**: the focused window's title when it changed; the OCR lines around the last target (its box grown by
  ``OCR_MARGIN`` of the screen) that were not on the start screen (needs ``ocr`` lines in both states; a state
  read without OCR gives no such condition).

A start element state that was not read (the recorder's own start state has no elements) counts as absent:
whatever the element shows at the end becomes the condition.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlparse

from devices.base import Box
from envs.derived.checkers import check, ocr_text_in, squash
from envs.derived.spec import (DEVICE_CONDITIONS, ActivityCondition, AndroidStart, Condition, DesktopStart,
                               DeviceKind, ElementCondition, HierarchyTextCondition, TextMatch, OcrTextCondition, Start,
                               TaskSpec, TextVisibleCondition, UrlCondition, WebStart, WindowTitleCondition,
                               check_name, language_of)
from envs.errors import TaskFileError
from envs.trajectory import Episode

MAX_TEXT_CONDITIONS = 3
"""Lines of appeared text kept as conditions (the first ones, top to bottom)."""
MAX_LINE_CHARS = 80
"""Longer lines of appeared text, and longer element texts, are not conditions: they are rarely what a task is."""
OCR_MARGIN = 0.08
"""How far around the last target (a fraction of the screen) the desktop's OCR text is taken from."""
MIN_IOU = 0.6
"""How much a final node's box must overlap a touched element's box to be taken for it (Android)."""
_PAGE_TAGS = ("html", "body")


def derive_task(episode: Episode, start_state: dict[str, Any], final_state: dict[str, Any], name: str, *,
                instruction: str | None = None, device: DeviceKind | None = None) -> TaskSpec:
    """The task the demonstration shows (see the module docstring); TaskFileError when nothing it changed can be
    checked."""
    check_name(name)
    kind = device or device_of(episode, start_state)
    instruction = instruction or episode.record.task
    steps = [s for s in episode.steps if s.action is not None]
    conditions: list[Condition]
    if kind is DeviceKind.WEB:
        conditions = web_conditions(steps, start_state, final_state)
        start: Start = WebStart(str(start_state.get("url") or ""), viewport=viewport_of(episode))
    elif kind is DeviceKind.ANDROID:
        conditions = android_conditions(steps, start_state, final_state)
        start = android_start(start_state, final_state, steps)
    else:
        conditions = desktop_conditions(steps, start_state, final_state)
        start = DesktopStart()
    if not conditions:
        raise TaskFileError(f"{name}: the demonstration changed nothing a {kind.value} checker can read "
                            f"({', '.join(k.value for k in DEVICE_CONDITIONS[kind])}); record it again so that the "
                            "outcome shows on the screen, or write the conditions by hand")
    if all(r.holds for r in check(conditions, start_state)):
        raise TaskFileError(f"{name}: every derived condition already holds on the start state, so the task would "
                            "pass before anything is done; write the conditions by hand")
    actions = sum(1 for s in steps if s.action and s.action.get("kind") not in ("finish", "wait"))
    return TaskSpec(name, instruction, kind, start, tuple(conditions), language_of(instruction),
                    max_steps=max(5, 2 * actions + 2), source=str(episode.path))


def device_of(episode: Episode, state: dict[str, Any]) -> DeviceKind:
    """The device a demonstration was recorded on: its record's device kind, else the state's form."""
    for facts in (episode.record.device, (episode.record.policy or {}).get("recorder") or {}):
        if isinstance(facts, dict) and facts.get("kind") in {k.value for k in DeviceKind}:
            return DeviceKind(facts["kind"])
    if "activity" in state:
        return DeviceKind.ANDROID
    if "window_title" in state:
        return DeviceKind.DESKTOP
    return DeviceKind.WEB


def viewport_of(episode: Episode) -> tuple[int, int] | None:
    facts = (episode.record.policy or {}).get("recorder") or episode.record.device or {}
    viewport = facts.get("viewport") if isinstance(facts, dict) else None
    if isinstance(viewport, list) and len(viewport) == 2 and all(isinstance(v, int) for v in viewport):
        return viewport[0], viewport[1]
    return None


def demo_info(step: Any) -> dict[str, Any]:
    """What the recorder said about a step (``info.env_info.demo``)."""
    return ((step.info or {}).get("env_info") or {}).get("demo") or {}


def is_secret(step: Any) -> bool:
    return bool(step.sensitive or (step.target or {}).get("password"))


def typed_texts(steps: Iterable[Any]) -> set[str]:
    """What the person typed (and chose in selects), folded, for telling appeared text from echoed input."""
    return {squash(str(s.action.get("text") or "")).casefold() for s in steps
            if s.action.get("kind") == "type" and not is_secret(s)} - {""}


# -- the web -------------------------------------------------------------------------------------------------------
def touched_selectors(steps: Sequence[Any]) -> list[tuple[str, str]]:
    """(frame URL, selector) of every element the person acted on, in order, once each; password fields never."""
    secret = {(demo_info(s).get("frame") or "", demo_info(s).get("selector")) for s in steps if is_secret(s)}
    out: list[tuple[str, str]] = []
    for s in steps:
        info = demo_info(s)
        key = (str(info.get("frame") or ""), str(info.get("selector") or ""))
        if key[1] and key not in secret and key not in out:
            out.append(key)
    return out


def wanted_for_derive(steps: Sequence[Any]) -> dict[str, list[str]]:
    """Frame URL -> selectors: what to read from the page to derive a web task from these steps."""
    wanted: dict[str, list[str]] = {"": []}
    for frame, selector in touched_selectors(steps):
        wanted.setdefault(frame, []).append(selector)
    return wanted


def web_conditions(steps: Sequence[Any], start: dict[str, Any], final: dict[str, Any]) -> list[Condition]:
    conditions: list[Condition] = []
    url = url_condition(str(start.get("url") or ""), str(final.get("url") or ""))
    if url is not None:
        conditions.append(url)
    for frame, selector in touched_selectors(steps):
        before = element_state(start, frame, selector)
        after = element_state(final, frame, selector)
        condition = element_condition(selector, frame, before, after)
        if condition is not None:
            conditions.append(condition)
    shown = {squash(c.text_contains) for c in conditions if isinstance(c, ElementCondition) and c.text_contains}
    typed = typed_texts(steps) | {s.casefold() for s in shown}
    frames = [""] + [f for f in (final.get("frames") or {}) if f]
    lines = [(frame, line) for frame in frames
             for line in appeared_lines(scope_text(start, frame), scope_text(final, frame), typed)]
    conditions += [TextVisibleCondition(line, frame) for frame, line in lines[:MAX_TEXT_CONDITIONS]]
    return conditions


def url_condition(start: str, final: str) -> UrlCondition | None:
    if not final or final == start:
        return None
    s, f = urlparse(start), urlparse(final)
    if (s.scheme, s.netloc) != (f.scheme, f.netloc):
        return UrlCondition(final, TextMatch.EQUALS)
    if s.path != f.path:
        return UrlCondition(f.path or "/", TextMatch.PATH_EQUALS)
    if s.query != f.query and f.query:
        return UrlCondition(f"?{f.query}", TextMatch.CONTAINS)
    if f.fragment:
        return UrlCondition(f"#{f.fragment}", TextMatch.CONTAINS)
    return UrlCondition(final, TextMatch.EQUALS)


def element_state(state: dict[str, Any], frame: str, selector: str) -> dict[str, Any] | None:
    where = state if not frame else (state.get("frames") or {}).get(frame)
    return ((where or {}).get("elements") or {}).get(selector)


def element_condition(selector: str, frame: str, before: dict[str, Any] | None, after: dict[str, Any] | None
                      ) -> ElementCondition | None:
    """The condition an element's change makes (None when it did not change or cannot be read)."""
    if after is None or after.get("tag") in _PAGE_TAGS:
        return None
    was = before or {}
    if after.get("tag") == "select":
        selected = tuple(after.get("selected") or ())
        if before is None or selected != tuple(was.get("selected") or ()):
            return ElementCondition(selector, frame, selected=selected)
        return None
    value = after.get("value")
    value_changed = value is not None and (value != was.get("value") if before is not None else value != "")
    checked = after.get("checked")
    checked_changed = checked is not None and (checked != was.get("checked") if before is not None else checked)
    if value_changed or checked_changed:
        return ElementCondition(selector, frame, value=value if value_changed and not checked_changed else None,
                                checked=checked if checked_changed else None)
    text = squash(str(after.get("text") or ""))
    if text and len(text) <= MAX_LINE_CHARS and text != squash(str(was.get("text") or "")):
        return ElementCondition(selector, frame, text_contains=text)
    return None


def scope_text(state: dict[str, Any], frame: str) -> str:
    where = state if not frame else (state.get("frames") or {}).get(frame)
    return str((where or {}).get("text") or "")


def appeared_lines(before: str, after: str, typed: set[str]) -> list[str]:
    """Short lines of ``after`` that are not lines of ``before`` and not what the person typed, in order."""
    old = {squash(line) for line in before.splitlines()}
    out: list[str] = []
    for raw in after.splitlines():
        line = squash(raw)
        if 2 <= len(line) <= MAX_LINE_CHARS and line not in old and line.casefold() not in typed and line not in out:
            out.append(line)
    return out


# -- Android -------------------------------------------------------------------------------------------------------
def android_start(start: dict[str, Any], final: dict[str, Any], steps: Sequence[Any]) -> AndroidStart:
    """Start where the demonstration started; apps it went through are stopped first, so they open fresh."""
    package, _, activity = str(start.get("activity") or "").partition("/")
    visited = [str(demo_info(s).get("package") or "") for s in steps]
    visited.append(str(final.get("activity") or "").partition("/")[0])
    stops = [f"am force-stop {p}" for p in dict.fromkeys(visited) if p and p != package]
    return AndroidStart(package, activity, tuple(stops), restart=True)


def iou(a: Sequence[float], b: Sequence[float]) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def android_conditions(steps: Sequence[Any], start: dict[str, Any], final: dict[str, Any]) -> list[Condition]:
    conditions: list[Condition] = []
    before_activity, after_activity = str(start.get("activity") or ""), str(final.get("activity") or "")
    if after_activity and after_activity != before_activity:
        package, _, activity = after_activity.partition("/")
        conditions.append(ActivityCondition(package, activity))
    start_nodes = start.get("nodes") or []
    old_texts = {(n.get("resource_id") or "", squash(str(n.get("text") or ""))) for n in start_nodes}
    for node in touched_nodes(steps, final.get("nodes") or []):
        text = squash(str(node.get("text") or ""))
        rid = str(node.get("resource_id") or "")
        if not text or len(text) > MAX_LINE_CHARS or (rid, text) in old_texts:
            continue
        condition = HierarchyTextCondition(text, rid)
        if condition not in conditions:
            conditions.append(condition)
    return conditions


def touched_nodes(steps: Sequence[Any], nodes: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The final hierarchy's nodes where the person's targets were: same package and class, boxes overlapping
    by ``MIN_IOU`` at least; password fields never."""
    out: list[dict[str, Any]] = []
    for s in steps:
        target = s.target or {}
        if is_secret(s) or s.target_box is None:
            continue
        package = str(demo_info(s).get("package") or "")
        role = str(target.get("tag") or target.get("role") or "")
        best = max(((iou(s.target_box, n["box"]), i) for i, n in enumerate(nodes)
                    if not n.get("password") and (not package or n.get("package") == package)
                    and (not role or n.get("class") == role)), default=(0.0, -1))
        if best[0] >= MIN_IOU and nodes[best[1]] not in out:
            out.append(nodes[best[1]])
    return out


# -- the desktop ---------------------------------------------------------------------------------------------------
def desktop_conditions(steps: Sequence[Any], start: dict[str, Any], final: dict[str, Any]) -> list[Condition]:
    conditions: list[Condition] = []
    title = final.get("window_title")
    if title and title != start.get("window_title"):
        conditions.append(WindowTitleCondition(title, TextMatch.EQUALS))
    last = next((s for s in reversed(steps) if s.target_box is not None and not is_secret(s)), None)
    lines = final.get("ocr") or []
    if last is None or not lines or "ocr" not in start:
        return conditions
    x1, y1, x2, y2 = last.target_box
    box = Box(x1 - OCR_MARGIN, y1 - OCR_MARGIN, x2 + OCR_MARGIN, y2 + OCR_MARGIN).clipped()
    old = {squash(str(line["text"])).casefold() for line in start["ocr"]}
    typed = typed_texts(steps)
    for line in lines:
        text = squash(str(line["text"]))
        if text and len(text) <= MAX_LINE_CHARS and text.casefold() not in old | typed \
                and ocr_text_in([line], box.as_list()):
            conditions.append(OcrTextCondition(text, box))
        if sum(isinstance(c, OcrTextCondition) for c in conditions) >= MAX_TEXT_CONDITIONS:
            break
    return conditions

"""Where the web recorder's listener runs: an isolated world of every frame, out of the page's reach.

    listeners = Listeners(context, on_report)      # on_report(page, payload, offset) for each report
    await listeners.watch(page)                    # the page, its frames and its cross-origin frames

The listener (``devices/web/recorder_script.py``) is put into an *isolated world* (``WORLD``) of
every frame through the DevTools protocol: ``Page.addScriptToEvaluateOnNewDocument`` with
``worldName`` for each document to come, ``Page.createIsolatedWorld`` for the documents already
there. An isolated world shares the page's DOM but not its JavaScript: the page's scripts cannot
see the listener's variables, replace its functions or the DOM methods it calls, and the
binding it reports through (``BINDING``, added with ``Runtime.addBinding`` and
``executionContextName``) exists in that world only, so no page script can call it, find it or
replace it. A binding call is taken only from an execution context this module saw created in
``WORLD`` (``Runtime.executionContextCreated``), and the frame it belongs to is the protocol's, not
anything the report says.

One CDP session per target: the page's (its main frame and every same-process frame), and one per
out-of-process frame (a cross-origin iframe under site isolation), opened when Playwright reports
the frame and recognised by its target id, so no target is listened to twice. A child frame's
offset in its page's viewport is its owner element's content box (``DOM.getFrameOwner``,
``DOM.getBoxModel``), which the protocol gives relative to the session's own root frame, plus that
root's offset in its parent session, up to the page.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from devices.errors import RefusedReport
from devices.web.recorder_script import LATE_LISTENER_JS, LISTENER_JS

log = logging.getLogger(__name__)

WORLD = "handeye-recorder"
"""The isolated world the listener runs in (one per frame)."""
BINDING = "__handeyeReport"
"""The binding the listener calls: it exists in ``WORLD`` only."""
MAX_REPORT_CHARS = 1 << 20
"""A report longer than this (a field holding a whole book) is refused: the listener's reports are small."""

OnReport = Callable[[Any, dict[str, Any], tuple[float, float]], Awaitable[None]]
"""What the recorder is handed for each report: the page, the report, the frame's offset in the page's viewport."""
OnRefused = Callable[[str, str], None]
"""What the recorder is told of a binding call it must not take: why (a short reason) and what it was."""


@dataclass
class _Target:
    """One CDP session's target: a page, or an out-of-process frame of one."""

    session: Any
    page: Any
    root: str
    """The frame id of the target's own root frame."""
    parent: _Target | None
    """The target holding the root frame's owner element (None for a page)."""
    contexts: dict[int, str] = field(default_factory=dict)
    """Execution contexts of ``WORLD`` in this target: context id -> frame id."""


class Listeners:
    """The listener in every frame of the pages it watches (see the module docstring)."""

    def __init__(self, context: Any, on_report: OnReport, on_refused: OnRefused) -> None:
        self.context = context
        self.on_report, self.on_refused = on_report, on_refused
        self._targets: dict[str, _Target] = {}
        """Target id -> target."""
        self._by_frame: dict[Any, _Target] = {}
        """Playwright frame (a page's main frame, or an out-of-process frame) -> its target."""
        self._lock = asyncio.Lock()
        self._ready: dict[Any, asyncio.Event] = {}

    async def watch(self, page: Any) -> None:
        """Listen in ``page`` and in every frame it has or will have."""
        self._ready.setdefault(page, asyncio.Event())
        page.on("frameattached", lambda frame: self._soon(self._frame(page, frame)))
        page.on("framenavigated", lambda frame: self._soon(self._frame(page, frame)))
        try:
            session = await self.context.new_cdp_session(page)
            async with self._lock:
                await self._install(session, page, None)
            for frame in page.frames[1:]:
                await self._frame(page, frame)
        finally:
            self._ready[page].set()

    async def ready(self, page: Any) -> None:
        """Returns once the listener is in place in ``page`` (a page the recorder was told of)."""
        await self._ready.setdefault(page, asyncio.Event()).wait()

    def cdp(self, page: Any) -> Any:
        """The CDP session of ``page``'s own target (None before ``watch`` has opened it)."""
        target = self._by_frame.get(page.main_frame)
        return target.session if target is not None else None

    @staticmethod
    def _soon(job: Awaitable[None]) -> None:
        asyncio.ensure_future(job)

    async def _frame(self, page: Any, frame: Any) -> None:
        """A frame attached or navigated: when it is an out-of-process frame of a target not yet watched, watch it."""
        if frame == page.main_frame:
            return
        async with self._lock:
            try:
                session = await self.context.new_cdp_session(frame)
            except Exception:  # a same-process frame: its page's session (or its parent's) listens in it
                return
            try:
                target_id = (await session.send("Target.getTargetInfo"))["targetInfo"]["targetId"]
                if target_id in self._targets:  # this target is already watched: one session each
                    await session.detach()
                    return
                await self._install(session, page, self._parent_target(frame), frame)
            except Exception as e:  # the frame went away meanwhile
                log.debug("could not listen in a frame: %s", e)

    def _parent_target(self, frame: Any) -> _Target | None:
        parent = frame.parent_frame
        while parent is not None and parent not in self._by_frame:
            parent = parent.parent_frame
        return self._by_frame.get(parent) if parent is not None else None

    async def _install(self, session: Any, page: Any, parent: _Target | None, frame: Any = None) -> None:
        """The listener in every document of ``session``'s target, those there now and those to come."""
        tree = (await session.send("Page.getFrameTree"))["frameTree"]
        target_id = (await session.send("Target.getTargetInfo"))["targetInfo"]["targetId"]
        target = _Target(session, page, tree["frame"]["id"], parent)
        self._targets[target_id] = target
        self._by_frame[frame if frame is not None else page.main_frame] = target
        session.on("Runtime.executionContextCreated", lambda e: self._created(target, e["context"]))
        session.on("Runtime.executionContextDestroyed",
                   lambda e: target.contexts.pop(e.get("executionContextId"), None))
        session.on("Runtime.executionContextsCleared", lambda _e: target.contexts.clear())
        session.on("Runtime.bindingCalled", lambda e: self._soon(self._called(target, e)))
        await session.send("Page.enable")
        await session.send("Runtime.enable")
        await session.send("Runtime.addBinding", {"name": BINDING, "executionContextName": WORLD})
        await session.send("Page.addScriptToEvaluateOnNewDocument", {"source": LISTENER_JS, "worldName": WORLD})
        for frame_id in _frame_ids(tree):  # documents already loaded (a new tab, a frame opened before this)
            try:
                made = await session.send("Page.createIsolatedWorld", {"frameId": frame_id, "worldName": WORLD})
                target.contexts[int(made["executionContextId"])] = frame_id
                await session.send("Runtime.evaluate", {"expression": LATE_LISTENER_JS,
                                                        "contextId": made["executionContextId"]})
            except Exception as e:  # the frame went away meanwhile
                log.debug("could not listen in frame %s: %s", frame_id, e)

    @staticmethod
    def _created(target: _Target, context: dict[str, Any]) -> None:
        aux = context.get("auxData") or {}
        if context.get("name") == WORLD and aux.get("type") == "isolated" and aux.get("frameId"):
            target.contexts[int(context["id"])] = str(aux["frameId"])

    async def _called(self, target: _Target, event: dict[str, Any]) -> None:
        if event.get("name") != BINDING:
            return
        frame_id = target.contexts.get(event.get("executionContextId"))  # type: ignore[arg-type]
        raw = event.get("payload")
        try:
            if frame_id is None:
                raise RefusedReport("a call from outside the recorder's world")
            if not isinstance(raw, str) or len(raw) > MAX_REPORT_CHARS:
                raise RefusedReport(f"a report that is not text of at most {MAX_REPORT_CHARS} characters")
            try:
                payload = json.loads(raw)
            except ValueError as e:
                raise RefusedReport(f"a report that is not JSON ({e})") from e
            if not isinstance(payload, dict):
                raise RefusedReport(f"a report that is not an object: {type(payload).__name__}")
        except RefusedReport as e:
            self.on_refused("binding", str(e))
            return
        try:
            offset = await self._offset(target, frame_id)
        except Exception as e:  # the frame went away before its offset could be read: the report is still the person's
            log.debug("could not read a frame's offset: %s", e)
            offset = (0.0, 0.0)
        await self.on_report(target.page, payload, offset)

    async def _offset(self, target: _Target, frame_id: str) -> tuple[float, float]:
        """Where the viewport of frame ``frame_id`` (in ``target``) starts in its page's viewport, CSS pixels."""
        x = y = 0.0
        while True:
            if frame_id == target.root:
                if target.parent is None:
                    return x, y
                frame_id, target = target.root, target.parent  # the root's owner element is in the parent target
                continue
            owner = await target.session.send("DOM.getFrameOwner", {"frameId": frame_id})
            model = (await target.session.send("DOM.getBoxModel", {"backendNodeId": owner["backendNodeId"]}))["model"]
            quad = model["content"]
            x, y = x + min(quad[0::2]), y + min(quad[1::2])
            frame_id = target.root  # quads are relative to the session's root frame: go on from there


def _frame_ids(tree: dict[str, Any]) -> list[str]:
    out = [str(tree["frame"]["id"])]
    for child in tree.get("childFrames") or ():
        out.extend(_frame_ids(child))
    return out

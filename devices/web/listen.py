"""Where the web recorder's listener runs: an isolated world of every frame, out of the page's reach.

    listeners = Listeners(context, on_report, on_refused, on_navigation)
    await listeners.watch(page)        # the page, its frames and its cross-origin frames: on_report(page, report,
    await listeners.ready(page)        # offset) for each report; returns once every frame attached so far listens

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
out-of-process frame (a cross-origin iframe under site isolation), which the parent's
``Target.setAutoAttach`` attaches paused (``waitForDebuggerOnStart``): the listener is in its
world before the frame's first script runs, then the frame goes on. A child frame's
offset in its page's viewport is its owner element's content box (``DOM.getFrameOwner``,
``DOM.getBoxModel``), which the protocol gives relative to the session's own root frame, plus that
root's offset in its parent session, up to the page. A frame's session is a tunnel through its
parent's (``Target.sendMessageToTarget``), so Playwright's own sessions are left as they are.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from devices.errors import DeviceError, RefusedReport
from devices.web.recorder_script import LATE_LISTENER_JS, LISTENER_JS

log = logging.getLogger(__name__)

WORLD = "handeye-recorder"
"""The isolated world the listener runs in (one per frame)."""
BINDING = "__handeyeReport"
"""The binding the listener calls: it exists in ``WORLD`` only."""
OFFSET_TIMEOUT_S = 2.0
"""The longest a frame's offset is waited for (a frame going away mid-question): then the report goes on at (0, 0)
rather than holding every later report back."""
INSTALL_TIMEOUT_S = 10.0
"""The longest an out-of-process frame is held paused for the listener to go in (then it goes on without)."""
MAX_REPORT_CHARS = 1 << 20
"""A report longer than this (a field holding a whole book) is refused: the listener's reports are small."""

OnReport = Callable[[Any, dict[str, Any], tuple[float, float]], Awaitable[None]]
"""What the recorder is handed for each report: the page, the report, the frame's offset in the page's viewport."""
OnRefused = Callable[[str, str], None]
"""What the recorder is told of a binding call it must not take: why (a short reason) and what it was."""
OnNavigation = Callable[[Any, str], None]
"""What the recorder is told when a page's own document starts a navigation of its main frame (a script, a meta
refresh, a link or a form: ``Page.frameRequestedNavigation``'s reason); the address bar and the back button never
do."""


@dataclass
class _Target:
    """One target: a page, or an out-of-process frame of one."""

    session: Any
    """A Playwright CDP session (a page's) or a ``_Tunnel`` (a frame's, through its parent's session)."""
    page: Any
    root: str
    """The frame id of the target's own root frame."""
    parent: _Target | None
    """The target holding the root frame's owner element (None for a page)."""
    contexts: dict[int, str] = field(default_factory=dict)
    """Execution contexts of ``WORLD`` in this target: context id -> frame id."""
    children: dict[str, _Tunnel] = field(default_factory=dict)
    """The sessions of its out-of-process frames, by session id."""


class _Tunnel:
    """A CDP session to a child target, through its parent's session (``Target.sendMessageToTarget``): the child
    is attached, paused, by the parent's auto-attach, so the listener is in place before its first script runs."""

    def __init__(self, parent: Any, session_id: str) -> None:
        self.parent, self.session_id = parent, session_id
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._handlers: dict[str, list[Callable[[dict[str, Any]], None]]] = {}

    def on(self, event: str, handler: Callable[[dict[str, Any]], None]) -> None:
        self._handlers.setdefault(event, []).append(handler)

    async def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        call = next(self._ids)
        reply = self._waiting[call] = asyncio.get_running_loop().create_future()
        message = json.dumps({"id": call, "method": method, "params": params or {}})
        await self.parent.send("Target.sendMessageToTarget", {"sessionId": self.session_id, "message": message})
        answer = await reply
        if "error" in answer:
            raise DeviceError(f"{method} in a frame: {answer['error'].get('message')}")
        return dict(answer.get("result") or {})

    def receive(self, text: str) -> None:
        message = json.loads(text)
        if "id" in message:
            reply = self._waiting.pop(message["id"], None)
            if reply is not None and not reply.done():
                reply.set_result(message)
            return
        for handler in self._handlers.get(message.get("method", ""), ()):
            handler(message.get("params") or {})

    def gone(self) -> None:
        for reply in self._waiting.values():
            if not reply.done():
                reply.set_exception(DeviceError("the frame went away"))
        self._waiting.clear()


class Listeners:
    """The listener in every frame of the pages it watches (see the module docstring)."""

    def __init__(self, context: Any, on_report: OnReport, on_refused: OnRefused,
                 on_navigation: OnNavigation | None = None) -> None:
        self.context = context
        self.on_report, self.on_refused, self.on_navigation = on_report, on_refused, on_navigation
        self._order = asyncio.Lock()
        """Held while one report is handed on: reports go to the recorder in the order the browser sent them."""
        self._ready: dict[Any, asyncio.Event] = {}
        self._pending: dict[Any, set[asyncio.Future[None]]] = {}
        """Per page, the frames being taken in (``ready`` waits for them)."""

    async def watch(self, page: Any) -> None:
        """Listen in ``page`` and in every frame it has or will have."""
        self._ready.setdefault(page, asyncio.Event())
        try:
            await self._install(await self.context.new_cdp_session(page), page, None)
        finally:
            self._ready[page].set()

    async def ready(self, page: Any) -> None:
        """Returns once the listener is in place in ``page`` and in every frame attached to it so far."""
        await self._ready.setdefault(page, asyncio.Event()).wait()
        while pending := self._pending.get(page):
            await asyncio.gather(*list(pending), return_exceptions=True)

    def _soon(self, page: Any, job: Awaitable[None]) -> None:
        future = asyncio.ensure_future(job)
        pending = self._pending.setdefault(page, set())
        pending.add(future)
        future.add_done_callback(pending.discard)

    async def _install(self, session: Any, page: Any, parent: _Target | None, *, paused: bool = False) -> None:
        """The listener in every document of ``session``'s target, those there now (none in a target ``paused``
        before its first document) and those to come, and in its out-of-process frames as they attach."""
        tree = (await session.send("Page.getFrameTree"))["frameTree"]
        target = _Target(session, page, str(tree["frame"]["id"]), parent)
        session.on("Runtime.executionContextCreated", lambda e: self._created(target, e["context"]))
        session.on("Runtime.executionContextDestroyed",
                   lambda e: target.contexts.pop(e.get("executionContextId"), None))
        session.on("Runtime.executionContextsCleared", lambda _e: target.contexts.clear())
        session.on("Runtime.bindingCalled", lambda e: self._soon(None, self._called(target, e)))
        session.on("Target.attachedToTarget", lambda e: self._soon(page, self._attached(target, e)))
        session.on("Target.detachedFromTarget", lambda e: self._detached(target, e))
        session.on("Target.receivedMessageFromTarget", lambda e: self._message(target, e))
        if parent is None:
            session.on("Page.frameRequestedNavigation", lambda e: self._requested(target, e))
        await session.send("Page.enable")
        await session.send("Runtime.enable")
        await session.send("Runtime.addBinding", {"name": BINDING, "executionContextName": WORLD})
        await session.send("Page.addScriptToEvaluateOnNewDocument", {"source": LISTENER_JS, "worldName": WORLD})
        # documents already loaded (a new tab, a frame opened before this); a paused target has none yet
        for frame_id in [] if paused else _frame_ids(tree):
            try:
                made = await session.send("Page.createIsolatedWorld", {"frameId": frame_id, "worldName": WORLD})
                target.contexts[int(made["executionContextId"])] = frame_id
                await session.send("Runtime.evaluate", {"expression": LATE_LISTENER_JS,
                                                        "contextId": made["executionContextId"]})
            except Exception as e:  # the frame went away meanwhile
                log.debug("could not listen in frame %s: %s", frame_id, e)
        # Out-of-process frames attach paused (they wait for every client that asked) until the listener is in them.
        await session.send("Target.setAutoAttach", {"autoAttach": True, "waitForDebuggerOnStart": True,
                                                    "flatten": False})

    async def _attached(self, parent: _Target, event: dict[str, Any]) -> None:
        session_id = str(event.get("sessionId"))
        tunnel = parent.children[session_id] = _Tunnel(parent.session, session_id)
        try:
            if (event.get("targetInfo") or {}).get("type") == "iframe":
                paused = bool(event.get("waitingForDebugger"))
                await asyncio.wait_for(self._install(tunnel, parent.page, parent, paused=paused), INSTALL_TIMEOUT_S)
        except Exception as e:  # the frame went away meanwhile
            log.info("could not listen in an out-of-process frame: %s", type(e).__name__)
        finally:
            if event.get("waitingForDebugger"):
                try:
                    await asyncio.wait_for(tunnel.send("Runtime.runIfWaitingForDebugger"), INSTALL_TIMEOUT_S)
                except Exception as e:  # gone already
                    log.debug("could not resume a frame: %s", e)

    def _requested(self, target: _Target, event: dict[str, Any]) -> None:
        if self.on_navigation is not None and event.get("frameId") == target.root:
            self.on_navigation(target.page, str(event.get("reason") or ""))

    @staticmethod
    def _detached(parent: _Target, event: dict[str, Any]) -> None:
        tunnel = parent.children.pop(str(event.get("sessionId")), None)
        if tunnel is not None:
            tunnel.gone()

    @staticmethod
    def _message(parent: _Target, event: dict[str, Any]) -> None:
        tunnel = parent.children.get(str(event.get("sessionId")))
        if tunnel is not None:
            tunnel.receive(str(event.get("message")))

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
        async with self._order:  # the lock is fair: calls are handed on in the order they came
            try:
                offset = await asyncio.wait_for(self._offset(target, frame_id), OFFSET_TIMEOUT_S)
            except Exception as e:  # the frame went away before its offset was read: the report is still the person's
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

"""WebRecorder: a person's input on Chromium pages as unified actions, each with the screen just before it.

    device = PlaywrightDevice(WebConfig(headless=False))
    recorder = WebRecorder(device, "https://example.com")
    await recorder.start()                         # the browser opens on the page
    event = await recorder.next_event()            # a DemoEvent: action, pre-action frame, target element

The listener (``devices/web/recorder_script.py``) runs in an isolated world of every page and
frame of the browser context, those opened later and cross-origin frames included
(``devices/web/listen.py``): page scripts can neither call the binding it reports through nor
replace it, and it reports the browser's trusted input events only, so what is recorded is what
the person did, not what a page made up. Here raw input becomes actions (``Interpreter``): a
press and release in place is a click (two within ``DOUBLE_CLICK_S`` a double click), a press
moved more than ``DRAG_PX`` a drag, a context menu a right click, wheel turns within
``WHEEL_GAP_S`` one scroll, typing one ``type`` per field (committed on blur, Enter, Tab or a
click elsewhere; password fields masked), a select change a ``type`` of the option's label into
the select, keys outside fields and any key with a modifier a ``key`` or ``hotkey``, a navigation
no action caused an ``open_url`` (or ``back``) unless the page's own document asked for it (a
script, a meta refresh: counted in ``page_loads``, not recorded), and a new tab is followed. The
pause key (default Control+Alt+P) pauses and resumes, the stop key (Control+Alt+S) or closing the
browser ends the recording; both keys count only when the person presses them. A report that is
not what the listener sends (``interpret.check_report``) is logged, counted (``refused``, in
``describe()`` and so in the episode record) and skipped; it never ends the recording. A failure
of the recorder itself ends ``next_event`` with a DeviceError, never as a recording the person
ended.

Frames: a CDP screencast per page keeps the last ``RING`` frames with their times (a frame comes
whenever the page repaints); each event takes the newest frame older than it, so the stored frame
is the screen the person acted on, its password fields blurred at capture. Nothing is dropped: raw
reports queue without bound.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import logging
import time
from typing import Any

from devices.base import Observation
from devices.errors import DeviceError
from devices.frames import decode
from devices.recording import DemoEvent
from devices.web.device import PlaywrightDevice
from devices.web.interpret import RECORDER_KINDS, Interpreter, RawReport
from devices.web.listen import Listeners
from devices.web.recorder_script import STATE_JS

log = logging.getLogger(__name__)

RING = 90
"""Screencast frames kept per page (a few seconds of repaints)."""


class WebRecorder:
    """Records what a person does in the browser of ``device`` (see the module docstring)."""

    def __init__(self, device: PlaywrightDevice, url: str, *, pause_key: str = "Control+Alt+p",
                 stop_key: str = "Control+Alt+s") -> None:
        self.device = device
        self.url = url
        cfg = device.config
        self.interpreter = Interpreter(viewport=(cfg.viewport_width, cfg.viewport_height), pause_key=pause_key,
                                       stop_key=stop_key)
        self._raw: asyncio.Queue[RawReport | None] = asyncio.Queue()
        self._frames: dict[Any, collections.deque[tuple[float, bytes]]] = {}
        self._cdp: dict[Any, Any] = {}
        self._pages: list[Any] = []
        self.active: Any = None
        """The page the person acted on last (a new tab becomes active when it opens)."""
        self._pump: asyncio.Task[None] | None = None
        self._out: asyncio.Queue[DemoEvent | None] = asyncio.Queue()
        self.start_state: dict[str, Any] = {}
        """The page's URL, title and visible text when the recording started (for derived tasks)."""
        self._closed = False
        self._previous_at = 0.0
        self.started = asyncio.Event()
        """Set once the start page is open and every listener is in place."""
        self.listeners: Listeners | None = None
        self._failure: BaseException | None = None

    # -- life cycle -------------------------------------------------------------------------------------------------
    async def start(self) -> None:
        await self.device.start()
        context = self.device.context
        self.listeners = Listeners(context, self._on_report, self.interpreter.refuse, self._on_navigation)
        context.on("page", lambda page: asyncio.ensure_future(self._watch(page, new_tab=True)))
        await self._watch(self.device.page, new_tab=False)
        await self.device.goto(self.url)
        await self.listeners.ready(self.device.page)  # its frames too
        self.start_state = await self.page_state([])
        self._pump = asyncio.create_task(self._run_pump(), name="web-recorder")
        self.started.set()

    async def _watch(self, page: Any, *, new_tab: bool) -> None:
        self._pages.append(page)
        self._frames[page] = collections.deque(maxlen=RING)
        page.on("close", lambda _p: self._raw.put_nowait(RawReport("closed", time.time(), page, {})))
        if new_tab:
            self.active = page
            self._raw.put_nowait(RawReport("tab", time.time(), page, {"tab": len(self._pages) - 1, "url": page.url}))
        else:
            self.active = page
        try:
            assert self.listeners is not None
            await self.listeners.watch(page)
            cdp = await self.device.context.new_cdp_session(page)
            self._cdp[page] = cdp
            cdp.on("Page.screencastFrame", lambda f: self._on_frame(page, cdp, f))
            width, height = self.device.config.viewport_width, self.device.config.viewport_height
            scale = self.device.config.device_scale_factor
            await cdp.send("Page.startScreencast", {"format": "png", "maxWidth": int(width * scale),
                                                    "maxHeight": int(height * scale), "everyNthFrame": 1})
            await self._capture_now(page)  # the screencast sends frames only on repaints: one to start with
        except Exception as e:  # a tab that closed at once: nothing to watch
            log.debug("could not watch a page: %s", e)

    async def _capture_now(self, page: Any) -> None:
        cdp = self._cdp.get(page)
        if cdp is None:
            return
        reply = await cdp.send("Page.captureScreenshot", {"format": "png"})
        self._frames[page].append((time.time(), base64.b64decode(reply["data"])))

    def _on_frame(self, page: Any, cdp: Any, frame: dict[str, Any]) -> None:
        at = float(frame.get("metadata", {}).get("timestamp") or time.time())
        self._frames[page].append((at, base64.b64decode(frame["data"])))
        asyncio.ensure_future(self._ack(cdp, frame["sessionId"]))

    @staticmethod
    async def _ack(cdp: Any, session_id: int) -> None:
        try:
            await cdp.send("Page.screencastFrameAck", {"sessionId": session_id})
        except Exception:  # the page went away; its frames are no longer wanted
            pass

    async def listening(self, page: Any) -> None:
        """Returns once the listener is in place in ``page`` (a tab the person opened: the recorder follows it)."""
        assert self.listeners is not None, "start() first"
        await self.listeners.ready(page)

    def _on_navigation(self, page: Any, reason: str) -> None:
        """The page's own document starts a navigation (its load is not the person's ``open_url``)."""
        self._raw.put_nowait(RawReport("requested", time.time(), page, {"reason": reason}))

    async def _on_report(self, page: Any, payload: dict[str, Any], offset: tuple[float, float]) -> None:
        """One report of the listener (``Listeners`` took it from the recorder's world of one frame)."""
        kind = payload.get("kind")
        if not isinstance(kind, str) or kind in RECORDER_KINDS:
            self.interpreter.refuse("kind", f"a report of kind {kind!r}")
            return
        t = payload.get("t")
        finite = isinstance(t, (int, float)) and not isinstance(t, bool) and abs(t) < 1e15
        at = t / 1000 if finite else time.time()  # not a time: the interpreter refuses the report
        url = payload.get("url")
        self._raw.put_nowait(RawReport(kind, at, page, payload, offset, url if isinstance(url, str) else ""))

    def request_stop(self) -> None:
        """End the recording as if the stop key had been pressed."""
        self._raw.put_nowait(None)

    async def stop(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._raw.put_nowait(None)
        if self._pump is not None:
            self._pump.cancel()
            await asyncio.gather(self._pump, return_exceptions=True)
        await self.device.close()

    @property
    def refused(self) -> int:
        """Reports refused so far (``describe()["refused_by_kind"]`` says of which kinds)."""
        return sum(self.interpreter.refused.values())

    def describe(self) -> dict[str, Any]:
        return {"kind": "web", **self.device.describe(),
                "input": "the browser's trusted input events, read in an isolated world of every frame and tab",
                "frames": "CDP screencast (pre-action frames)", "pause_key": self.interpreter.pause_key,
                "stop_key": self.interpreter.stop_key, "refused": self.refused,
                "refused_by_kind": dict(sorted(self.interpreter.refused.items())),
                "page_loads": self.interpreter.page_loads}

    # -- events -----------------------------------------------------------------------------------------------------
    async def next_event(self) -> DemoEvent | None:
        event = await self._out.get()
        if event is None and self._failure is not None:
            self._out.put_nowait(None)  # a second call says the same
            raise DeviceError(f"the web recorder failed: {type(self._failure).__name__}: {self._failure}"
                              ) from self._failure
        return event

    async def _run_pump(self) -> None:
        """Raw reports in, DemoEvents out, in the order of their input times."""
        try:
            while True:
                hold = self.interpreter.hold_s()
                try:
                    report = await (asyncio.wait_for(self._raw.get(), hold) if hold is not None else self._raw.get())
                except asyncio.TimeoutError:
                    report = "flush"
                if report is None or (isinstance(report, RawReport) and report.kind == "closed"
                                      and report.page is self._pages[0]):
                    for made in self.interpreter.flush():
                        await self._emit(made)
                    break
                made_list = self.interpreter.flush() if report == "flush" else self.interpreter.feed(report)
                for made in made_list:
                    await self._emit(made)
                if self.interpreter.stopped:
                    break
        except Exception as e:  # a bug, or the browser gone mid-event: an error, never a recording the person ended
            log.error("the web recorder failed: %s: %s", type(e).__name__, e)
            self._failure = e
        finally:
            self._out.put_nowait(None)

    async def _emit(self, made: Any) -> None:
        if made.page is not None:
            self.active = made.page
        frame, lag = await self._frame_before(made.page or self.active, made.at)
        self._previous_at = made.at
        obs = Observation(frame=decode(frame), meta={"url": made.url}, encoded=frame, encoding="png",
                          sensitive_boxes=made.sensitive_boxes)
        target = made.target
        self._out.put_nowait(DemoEvent(made.action, made.at, obs, lag, target, made.masked, made.info))

    async def _frame_before(self, page: Any, at: float) -> tuple[bytes, float]:
        """The newest frame older than ``at``, and how far it may trail the screen then.

        The screencast sends a frame whenever the page repaints, so a frame newer than the previous action is the
        screen as it was at ``at`` (lag 0, however old); one older than the previous action may miss that action's
        effect, and its lag is its age."""
        frames = self._frames.get(page) or collections.deque()
        older = [f for f in frames if f[0] <= at]
        if older:
            t, data = older[-1]
            return data, (0.0 if t >= self._previous_at else max(0.0, at - t))
        await self._capture_now(page)  # nothing older: the best there is now, taken after the event
        t, data = self._frames[page][-1]
        return data, max(0.0, at - t)

    # -- state, for derived tasks -----------------------------------------------------------------------------------
    async def observe(self) -> Observation:
        """The screen now; when the person closed the page (or the browser), the last frame it showed."""
        page = self.active or self.device.page
        try:
            await self._capture_now(page)
        except Exception as e:  # the page or the browser is gone: what it showed last is the final screen
            log.info("the page is gone (%s); the final screen is its last frame", type(e).__name__)
        pages = [p for p in (page, *reversed(self._pages)) if self._frames.get(p)]
        if not pages:
            raise DeviceError("the browser closed before it showed anything to record")
        _, data = self._frames[pages[0]][-1]
        return Observation(frame=decode(data), meta={"url": pages[0].url}, encoded=data, encoding="png")

    async def page_state(self, selectors: list[str], frame_url: str = "") -> dict[str, Any]:
        """URL, title, visible text of the active page, and the state (value, checked, selected, text) of the
        elements ``selectors`` name, in the frame whose URL is ``frame_url`` (the main frame when empty)."""
        page = self.active or self.device.page
        frame = next((f for f in page.frames if frame_url and f.url == frame_url), page.main_frame)
        try:
            return await frame.evaluate(STATE_JS, selectors)
        except Exception as e:
            raise DeviceError(f"could not read the page's state: {e}") from e


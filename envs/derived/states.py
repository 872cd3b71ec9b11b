"""Reading the state a derived task's conditions are judged on (its form: ``envs/derived/checkers.py``), from the
devices as they exist: a Chromium page, a phone through adb, an X display.

The same readers serve both ends: ``agent record --make-task`` reads the demonstration's final state through them
(the web: the recorder's page), and the environment reads the state it checks. OCR is not here: environments may
not import the policy package that has it (envs import only envs and devices), so a desktop task that checks text
on the screen is given a ``TextReader`` (``agent.derived_tasks.OcrTextReader``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any, Protocol
from urllib.parse import urlparse

import numpy as np

from devices.base import Box
from devices.errors import DeviceError
from devices.web.recorder_script import STATE_JS
from envs.derived.spec import Condition, ElementCondition, OcrTextCondition, TextVisibleCondition

log = logging.getLogger(__name__)

NAVIGATION_RETRIES = 6
"""Attempts at reading a page whose document a navigation is replacing (right after a click on a link)."""
_RACES = ("execution context was destroyed", "navigation", "frame was detached", "cannot find context")


class TextReader(Protocol):
    """Reads the text lines on a frame (blocking; OCR takes seconds on a CPU)."""

    def read_lines(self, frame: np.ndarray) -> list[tuple[str, Box]]:
        """Each line's text and its box, normalized to the frame."""
        ...


# -- the web -------------------------------------------------------------------------------------------------------
def wanted_selectors(conditions: Iterable[Condition]) -> dict[str, list[str]]:
    """Frame URL ("" for the page) -> the selectors whose state the conditions read there."""
    wanted: dict[str, list[str]] = {"": []}
    for c in conditions:
        if isinstance(c, ElementCondition):
            selectors = wanted.setdefault(c.frame, [])
            if c.selector not in selectors:
                selectors.append(c.selector)
        elif isinstance(c, TextVisibleCondition):
            wanted.setdefault(c.frame, [])
    return wanted


def newest_page(context: Any, fallback: Any) -> Any:
    """The newest open page of a browser context (a link that opened a tab leads there), else ``fallback``."""
    pages = [p for p in context.pages if not p.is_closed()]
    return pages[-1] if pages else fallback


def find_frame(page: Any, url: str) -> Any | None:
    """The frame of ``page`` whose URL is ``url``; failing that, the one with the same path (a page served on
    another port than when it was recorded)."""
    frames = list(page.frames)
    exact = next((f for f in frames if f.url == url), None)
    if exact is not None:
        return exact
    want = urlparse(url)
    return next((f for f in frames[1:] if (urlparse(f.url).path, urlparse(f.url).query) == (want.path, want.query)),
                None)


async def read_web_state(page: Any, wanted: dict[str, list[str]], *, timeout_s: float = 10.0) -> dict[str, Any]:
    """The page's URL, title, visible text and the elements ``wanted`` names, per frame (``checkers``' form)."""
    main = await _frame_state(page.main_frame, wanted.get("", []), timeout_s)
    frames: dict[str, Any] = {}
    for url, selectors in wanted.items():
        if url:
            frame = find_frame(page, url)
            frames[url] = None if frame is None else await _frame_state(frame, selectors, timeout_s)
    return {**main, "url": page.url, "frames": frames}


async def _frame_state(frame: Any, selectors: list[str], timeout_s: float) -> dict[str, Any]:
    for attempt in range(NAVIGATION_RETRIES + 1):
        try:
            state = await asyncio.wait_for(frame.evaluate(STATE_JS, selectors), timeout_s)
        except asyncio.TimeoutError as e:
            raise DeviceError(f"reading the page's state took longer than {timeout_s} s; the page may be hung") from e
        except Exception as e:  # Playwright's Error: a navigation under the call, or the page gone
            if attempt < NAVIGATION_RETRIES and any(m in str(e).lower() for m in _RACES):
                await asyncio.sleep(0.1 * (attempt + 1))
                continue
            raise DeviceError(f"could not read the page's state for the task's checker: {str(e).splitlines()[0]}"
                              ) from e
        if not isinstance(state, dict):
            raise DeviceError(f"the page returned {state!r} instead of its state")
        return state
    raise AssertionError("unreachable")  # pragma: no cover


# -- Android -------------------------------------------------------------------------------------------------------
async def read_android_state(device: Any) -> dict[str, Any]:
    """The foreground activity and the UI hierarchy's nodes (``device``: an ``AndroidDevice``). Password fields'
    text is left out."""
    from envs.android.tasks import foreground_activity

    package, activity = await foreground_activity(device)
    nodes = [{"text": "" if e.password else e.text, "resource_id": e.resource_id, "content_desc": e.content_desc,
              "class": e.class_name, "package": e.package, "box": [round(v, 4) for v in e.box.as_list()],
              "password": e.password} for e in await device.ui_elements()]
    return {"activity": f"{package}/{activity}", "nodes": nodes}


# -- the desktop ---------------------------------------------------------------------------------------------------
async def read_desktop_state(device: Any, reader: TextReader | None, *, ocr: bool = True) -> dict[str, Any]:
    """The focused window's title and, with ``ocr`` and a reader, the text lines on the screen (``device``: a
    started ``DesktopDevice``)."""
    title = await asyncio.to_thread(focused_title, device.display, device.map)
    lines: list[dict[str, Any]] = []
    if ocr and reader is not None:
        frame = (await device.observe()).frame
        lines = [{"text": text, "box": [round(v, 4) for v in box.as_list()]}
                 for text, box in await asyncio.to_thread(reader.read_lines, frame)]
    return {"window_title": title, "ocr": lines}


def focused_title(display: str, screen: Any) -> str | None:
    """The title of the window with the keyboard focus on ``display`` (None when no window has it). Its own X
    connection: the device's belongs to the device's thread."""
    from Xlib import display as xdisplay

    from devices.desktop.display import focused_window, window_info

    conn = xdisplay.Display(display)
    try:
        window = focused_window(conn)
        if window is None:
            return None
        info, _ = window_info(conn, screen, window)
        return None if info is None else info.get("name")
    finally:
        conn.close()


def needs_ocr(conditions: Iterable[Condition]) -> bool:
    return any(isinstance(c, OcrTextCondition) for c in conditions)

"""A demonstration's start and final states, read through its recorder, for each device kind derived tasks run on.

    states = demo_states("android", text_reader=make_reader)    # TaskFileError for a kind without derived tasks
    start = await states.read(recorder)                          # phone, desktop: as soon as the recorder started
    final = await states.final(recorder, episode)                # after the stop key, before the recorder closes
    start = await states.start(recorder, episode, web_config)    # the web: read again from a fresh browser

``replayable`` says whether the start state can be read again after the demonstration: the web's start page opens
anew in a fresh browser, as the environment will open it, so the element states the person changed are known
before and after; a phone or a desktop cannot be put back, so their start state is read as soon as the recording
starts (``agent.derived_tasks.TaskMaker.watch``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

from devices.errors import DeviceError
from envs.derived.derive import viewport_of, wanted_for_derive
from envs.derived.env import open_fresh
from envs.derived.spec import DeviceKind
from envs.derived.states import TextReader, read_android_state, read_desktop_state, read_web_state
from envs.errors import TaskFileError

log = logging.getLogger(__name__)


class DemoStates(Protocol):
    """How a demonstration's states are read on one device kind (see the module docstring)."""

    replayable: bool

    async def read(self, recorder: Any) -> dict[str, Any]:
        """The device's state now, through ``recorder`` (still open)."""
        ...

    async def final(self, recorder: Any, episode: Any) -> dict[str, Any]:
        """The final state of the demonstration ``episode``, through ``recorder`` (still open)."""
        ...

    async def start(self, recorder: Any, episode: Any, section: Any) -> dict[str, Any]:
        """The start state (after the recorder closed): read again where ``replayable``, else the one ``read``
        gave as the recording started (``recorder.start_state``)."""
        ...


class WebDemoStates:
    """The web: the final state from the recorder's active page, the start state from a fresh browser."""

    replayable = True

    def __init__(self) -> None:
        self.start_url = ""

    async def read(self, recorder: Any) -> dict[str, Any]:
        return await read_web_state(recorder.active or recorder.device.page, {"": []})

    async def final(self, recorder: Any, episode: Any) -> dict[str, Any]:
        self.start_url = recorder.url
        page = recorder.active or recorder.device.page
        return await read_web_state(page, wanted_for_derive(episode.steps))

    async def start(self, recorder: Any, episode: Any, section: Any) -> dict[str, Any]:
        from devices.web import PlaywrightDevice

        viewport = viewport_of(episode)
        size = {"viewport_width": viewport[0], "viewport_height": viewport[1]} if viewport else {}
        device = PlaywrightDevice(replace(section, headless=True, **size))
        try:
            await device.start()
            await open_fresh(device, self.start_url, viewport)
            return await read_web_state(device.page, wanted_for_derive(episode.steps))
        except DeviceError as e:
            log.warning("could not open %s again to read its start state (%s); using the one the recorder read",
                        self.start_url, e)
            return dict(recorder.start_state)
        finally:
            await device.close()


class _ReadOnceStates:
    """A device that cannot be put back: every state is read now, the start state when the recording starts."""

    replayable = False

    async def read(self, recorder: Any) -> dict[str, Any]:
        raise NotImplementedError

    async def final(self, recorder: Any, episode: Any) -> dict[str, Any]:
        return await self.read(recorder)

    async def start(self, recorder: Any, episode: Any, section: Any) -> dict[str, Any]:
        return dict(getattr(recorder, "start_state", None) or {})


class AndroidDemoStates(_ReadOnceStates):
    """A phone: its foreground activity and UI hierarchy."""

    async def read(self, recorder: Any) -> dict[str, Any]:
        return await read_android_state(recorder.device)


class DesktopDemoStates(_ReadOnceStates):
    """An X display: the focused window's title and the screen's text (OCR, through ``text_reader``)."""

    def __init__(self, text_reader: Callable[[], TextReader]) -> None:
        self.text_reader = text_reader
        self._reader: TextReader | None = None

    async def read(self, recorder: Any) -> dict[str, Any]:
        if self._reader is None:
            self._reader = self.text_reader()
        return await read_desktop_state(recorder, self._reader)


def demo_states(kind: str, *, text_reader: Callable[[], TextReader]) -> DemoStates:
    """The readers of device kind ``kind``'s demonstrations; ``TaskFileError`` when derived tasks do not run on it.
    ``text_reader`` makes the OCR a desktop task reads the screen with (called once, when first needed)."""
    try:
        device = DeviceKind(kind)
    except ValueError:
        raise TaskFileError(f"the {kind} device has no derived tasks; --make-task works on "
                            f"{', '.join(k.value for k in DeviceKind)}") from None
    if device is DeviceKind.WEB:
        return WebDemoStates()
    if device is DeviceKind.ANDROID:
        return AndroidDemoStates()
    return DesktopDemoStates(text_reader)

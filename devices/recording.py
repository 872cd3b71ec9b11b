"""Recording a person: what every device recorder hands the recording environment (``envs/recording.py``).

A recorder watches a device while a person uses it and turns their input into the unified action
space, one ``DemoEvent`` per action, in order, never dropping one:

    recorder = WebRecorder(device)                # or DesktopRecorder, AndroidRecorder
    await recorder.start()
    while (event := await recorder.next_event()) is not None:
        event.action, event.frame, event.target   # what was done, the screen just before, the element it hit
    await recorder.stop()

``frame`` is the screen just before the action: each recorder keeps a rolling, settled capture, so
the pre-action frame exists when the event arrives. When input comes faster than frames, the
event keeps the newest frame older than it and says how much older (``frame_lag_s``); past
``LATE_FRAME_S`` the step is marked late. Password fields (and anything else the device marks
sensitive) are in the frame's ``sensitive_boxes``, so the recorded frame is masked at capture time,
and text typed into them never leaves the recorder in clear (``masked``).

``next_event`` returns None when the person ends the recording (the stop key, closing the
browser); a pause (the pause key) comes as one ``wait`` event with ``info["paused_s"]``, so the gap
is marked in the episode without recording what happened during it.

A recorder that can be ended or paused from outside the device (``agent record``'s terminal: Enter ends it, ``p``
and Enter pauses and resumes it) says so by being a ``StopsOnRequest`` or a ``PausesOnRequest``; a phone has no
key to spare for either, so the Android recorder is both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from devices.actions import Action
from devices.base import ElementInfo, Observation

LATE_FRAME_S = 0.5
"""A pre-action frame older than this (before its event) is marked late in the step's record."""

MASKED_TEXT = "••••••"
"""What a recorder writes for text typed into a password field."""


@dataclass(frozen=True, slots=True)
class DemoEvent:
    """One action a person did, with the screen just before it."""

    action: Action
    """In the unified action space; points normalized to ``frame``."""
    at: float
    """Wall time of the input event (seconds since the epoch)."""
    frame: Observation
    """The screen just before the action (the newest captured frame older than the event)."""
    frame_lag_s: float = 0.0
    """How much older than the event ``frame`` is."""
    target: ElementInfo | None = None
    """The element the action went to (under its point, or focused for typing and keys), where the device can tell."""
    masked: bool = False
    """The text went into a password field: ``action.text`` is ``MASKED_TEXT``."""
    info: dict[str, Any] = field(default_factory=dict)
    """Device extras for the record (page URL, tab, frame, window title, accessible name, selector, ...)."""

    @property
    def late(self) -> bool:
        return self.frame_lag_s > LATE_FRAME_S


@runtime_checkable
class Recorder(Protocol):
    """Watches a device while a person uses it (see the module docstring)."""

    async def start(self) -> None: ...

    async def next_event(self) -> DemoEvent | None: ...

    async def observe(self) -> Observation:
        """The screen now (the final state, for a derived task's checker)."""
        ...

    async def stop(self) -> None: ...

    def describe(self) -> dict[str, Any]:
        """Facts for the episode record: device kind, what is captured, what is missing."""
        ...


@runtime_checkable
class StopsOnRequest(Protocol):
    """A recorder that can be ended from outside the device, as its stop key would (the terminal's Enter)."""

    def request_stop(self) -> None:
        """End the recording once everything before the request is delivered (safe from any thread)."""
        ...


@runtime_checkable
class PausesOnRequest(Protocol):
    """A recorder that can be paused and resumed from outside the device (the terminal's ``p`` and Enter); the pause
    is one ``wait`` event with ``info["paused_s"]``, as a pause key's is."""

    @property
    def paused(self) -> bool: ...

    def pause(self) -> None: ...

    async def resume(self) -> None:
        """Record again; returns once the recorder sees the screen as it is now."""
        ...

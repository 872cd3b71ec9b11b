"""Android tasks in AndroidWorld's manner: a class with sampled parameters, set-up, check, tear-down.

Each task's parameters are drawn from a ``random.Random`` (``sample``); ``set_up`` puts the phone
in a state where the goal does *not* hold (Wi-Fi off when the goal is on, the note absent, the app
closed) and confirms it; ``check`` reads the outcome from the phone (``settings get``, ``dumpsys
activity activities``, ``ls`` / ``cat``), never from what the agent claims; ``tear_down`` restores
what ``set_up`` changed. ``next_step`` is the ground truth for one step, read from the screen's UI
hierarchy: the environment's step verifier and oracle both use it.

Every phone call goes through ``AndroidDevice.shell_rc`` / ``ui_elements``, so each has the device's
call timeout.
"""

from __future__ import annotations

import random
import re
import shlex
from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar, Protocol

from devices.android import UiElement
from devices.base import Box
from envs.errors import EnvError, TaskSetupError
from envs.tasks import TaskVerdict

SETTINGS_PACKAGE = "com.android.settings"
NOTES_PACKAGE = "com.example.notes"
NOTES_DIR = "/sdcard/Notes"
SLIDER_END = 0.05
"""Fraction of a slider's width, at each end, whose taps give the extreme value (the thumb's inset)."""


class TaskDevice(Protocol):
    """What tasks need from a phone (``devices.android.AndroidDevice`` has it)."""

    async def shell_rc(self, command: str, what: str, *, idempotent: bool = True) -> tuple[str, int]: ...

    async def ui_elements(self) -> list[UiElement]: ...


class StepKind(str, Enum):
    OPEN_APP = "open_app"
    CLICK = "click"
    TYPE = "type"
    KEY = "key"
    FINISH = "finish"


@dataclass(frozen=True, slots=True)
class PhoneStep:
    """What the task needs next. ``box``: the element a click (or typing with a point) must land in;
    for OPEN_APP, the launcher icon that opens the app when one is on screen."""

    kind: StepKind
    package: str = ""
    label: str = ""
    box: Box | None = None
    text: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "package": self.package, "label": self.label,
                "box": self.box.as_list() if self.box else None, "text": self.text}


# -- reading the phone -------------------------------------------------------------------------
async def run(device: TaskDevice, command: str, what: str) -> str:
    """A shell command that must succeed; its output, or TaskSetupError saying what failed."""
    out, rc = await device.shell_rc(command, what)
    if rc != 0:
        raise TaskSetupError(f"cannot {what}: `{command}` exited with {rc}: {out.strip()[:200]}")
    return out


async def get_setting(device: TaskDevice, namespace: str, key: str) -> str:
    """``settings get``: the value as text ("null" when unset)."""
    return (await run(device, f"settings get {namespace} {key}", f"read setting {namespace}/{key}")).strip()


_RESUMED = re.compile(r"(?:topResumedActivity|mResumedActivity|ResumedActivity)[=:]\s*ActivityRecord\{\S+ u\d+ "
                      r"([\w.]+)/([\w.$]+)")
_FOCUS = re.compile(r"mCurrentFocus=Window\{\S+ u\d+ ([\w.]+)/([\w.$]+)")


async def foreground_activity(device: TaskDevice) -> tuple[str, str]:
    """(package, activity) of the resumed activity (``dumpsys activity activities``, else ``dumpsys window``)."""
    out = await run(device, "dumpsys activity activities", "read the foreground activity")
    m = _RESUMED.search(out)
    if m is None:
        m = _FOCUS.search(await run(device, "dumpsys window", "read the focused window"))
    if m is None:
        raise EnvError("neither `dumpsys activity activities` nor `dumpsys window` names a resumed activity; "
                       "is the screen locked?")
    return m.group(1), m.group(2)


async def foreground_package(device: TaskDevice) -> str:
    """The package of the resumed activity."""
    return (await foreground_activity(device))[0]


def _element(elements: list[UiElement], resource_id: str) -> UiElement | None:
    return next((e for e in elements if e.resource_id == resource_id), None)


async def _open_step(device: TaskDevice, package: str, label: str) -> PhoneStep:
    """Open ``package``: by name, or by its launcher button when one is on screen."""
    icon = next((e for e in await device.ui_elements()
                 if e.clickable and e.text.strip().lower() == label.lower()), None)
    return PhoneStep(StepKind.OPEN_APP, package=package, label=label, box=icon.box if icon else None)


# -- tasks ---------------------------------------------------------------------------------------
class AndroidTask(ABC):
    """One task with sampled parameters (see the module docstring)."""

    name: ClassVar[str]
    max_steps: ClassVar[int] = 8

    @classmethod
    @abstractmethod
    def sample(cls, rng: random.Random) -> AndroidTask: ...

    @property
    @abstractmethod
    def instruction(self) -> str: ...

    @abstractmethod
    def params(self) -> dict[str, Any]: ...

    @abstractmethod
    async def set_up(self, device: TaskDevice) -> None: ...

    @abstractmethod
    async def check(self, device: TaskDevice) -> TaskVerdict: ...

    async def tear_down(self, device: TaskDevice) -> None:  # noqa: B027 - most tasks restore something
        """Undo set-up's changes (the default: nothing to undo)."""

    @abstractmethod
    async def next_step(self, device: TaskDevice, last_tap: tuple[float, float] | None) -> PhoneStep:
        """The step the task needs now; ``last_tap`` is the last executed tap (for text focus)."""


class ToggleSettingTask(AndroidTask):
    """Turn a switch in Settings on or off (AndroidWorld's SystemWifiTurnOn/Off, SystemBluetooth...)."""

    setting: ClassVar[str]
    """``svc`` service and settings key stem: ``global/<setting>_on``."""
    label: ClassVar[str]

    def __init__(self, on: bool) -> None:
        self.on = on
        self._original: str | None = None

    @classmethod
    def sample(cls, rng: random.Random) -> ToggleSettingTask:
        return cls(on=rng.random() < 0.5)

    @property
    def instruction(self) -> str:
        return f"Turn {self.label} {'on' if self.on else 'off'}."

    def params(self) -> dict[str, Any]:
        return {"on": self.on}

    async def _value(self, device: TaskDevice) -> str:
        return await get_setting(device, "global", f"{self.setting}_on")

    async def _set(self, device: TaskDevice, on: bool) -> None:
        await run(device, f"svc {self.setting} {'enable' if on else 'disable'}", f"switch {self.label}")

    async def set_up(self, device: TaskDevice) -> None:
        self._original = await self._value(device)
        await self._set(device, not self.on)
        if await self._value(device) != ("0" if self.on else "1"):
            raise TaskSetupError(f"{self.label} did not switch {'off' if self.on else 'on'} during set-up")

    async def check(self, device: TaskDevice) -> TaskVerdict:
        value = await self._value(device)
        ok = value == ("1" if self.on else "0")
        return TaskVerdict(ok, 1.0 if ok else 0.0, {f"{self.setting}_on": value, "goal_on": self.on})

    async def tear_down(self, device: TaskDevice) -> None:
        if self._original in ("0", "1"):
            await self._set(device, self._original == "1")
        self._original = None

    async def next_step(self, device: TaskDevice, last_tap: tuple[float, float] | None) -> PhoneStep:
        if (await self.check(device)).success:
            return PhoneStep(StepKind.FINISH)
        if await foreground_package(device) != SETTINGS_PACKAGE:
            return await _open_step(device, SETTINGS_PACKAGE, "Settings")
        switch = _element(await device.ui_elements(), f"{SETTINGS_PACKAGE}:id/{self.setting}")
        if switch is None:
            raise EnvError(f"the Settings screen shows no {self.label} switch")
        return PhoneStep(StepKind.CLICK, label=self.label, box=switch.box)


class WifiTask(ToggleSettingTask):
    name = "wifi"
    setting = "wifi"
    label = "Wi-Fi"


class BluetoothTask(ToggleSettingTask):
    name = "bluetooth"
    setting = "bluetooth"
    label = "Bluetooth"


class BrightnessTask(AndroidTask):
    """Set the screen brightness to its maximum or minimum (AndroidWorld's SystemBrightnessMax/Min)."""

    name = "brightness"

    def __init__(self, goal: str, start: int) -> None:
        if goal not in ("max", "min"):
            raise EnvError(f"brightness goal {goal!r} must be 'max' or 'min'")
        self.goal, self.start = goal, start
        self._original: tuple[str, str] | None = None

    @property
    def target(self) -> int:
        return 255 if self.goal == "max" else 0

    @classmethod
    def sample(cls, rng: random.Random) -> BrightnessTask:
        goal = rng.choice(["max", "min"])
        return cls(goal, rng.randint(20, 180) if goal == "max" else rng.randint(80, 235))

    @property
    def instruction(self) -> str:
        return f"Turn the screen brightness to its {'maximum' if self.goal == 'max' else 'minimum'}."

    def params(self) -> dict[str, Any]:
        return {"goal": self.goal, "start": self.start}

    async def _level(self, device: TaskDevice) -> str:
        return await get_setting(device, "system", "screen_brightness")

    async def set_up(self, device: TaskDevice) -> None:
        self._original = (await get_setting(device, "system", "screen_brightness_mode"), await self._level(device))
        await run(device, "settings put system screen_brightness_mode 0", "turn adaptive brightness off")
        await run(device, f"settings put system screen_brightness {self.start}", "set the brightness")
        if await self._level(device) != str(self.start):
            raise TaskSetupError(f"the brightness did not change to {self.start} during set-up")

    async def check(self, device: TaskDevice) -> TaskVerdict:
        level = await self._level(device)
        ok = level == str(self.target)
        return TaskVerdict(ok, 1.0 if ok else 0.0, {"screen_brightness": level, "target": self.target})

    async def tear_down(self, device: TaskDevice) -> None:
        if self._original is not None:
            for key, value in zip(("screen_brightness_mode", "screen_brightness"), self._original):
                if value.isdigit():
                    await run(device, f"settings put system {key} {value}", "restore the brightness")
        self._original = None

    async def next_step(self, device: TaskDevice, last_tap: tuple[float, float] | None) -> PhoneStep:
        if (await self.check(device)).success:
            return PhoneStep(StepKind.FINISH)
        if await foreground_package(device) != SETTINGS_PACKAGE:
            return await _open_step(device, SETTINGS_PACKAGE, "Settings")
        slider = _element(await device.ui_elements(), f"{SETTINGS_PACKAGE}:id/brightness")
        if slider is None:
            raise EnvError("the Settings screen shows no brightness slider")
        b = slider.box
        end = SLIDER_END * (b.x2 - b.x1)
        box = Box(b.x2 - end, b.y1, b.x2, b.y2) if self.goal == "max" else Box(b.x1, b.y1, b.x1 + end, b.y2)
        return PhoneStep(StepKind.CLICK, label="brightness slider", box=box)


APPS = (("Notes", NOTES_PACKAGE), ("List", "com.example.list"), ("Settings", SETTINGS_PACKAGE),
        ("Chrome", "com.android.chrome"))


class OpenAppTask(AndroidTask):
    """Open an app (AndroidWorld's OpenAppTaskEval): the resumed activity must belong to it."""

    name = "open-app"
    max_steps = 4

    def __init__(self, app: str, package: str) -> None:
        self.app, self.package = app, package

    @classmethod
    def sample(cls, rng: random.Random) -> OpenAppTask:
        return cls(*rng.choice(APPS))

    @property
    def instruction(self) -> str:
        return f"Open the {self.app} app."

    def params(self) -> dict[str, Any]:
        return {"app": self.app, "package": self.package}

    async def set_up(self, device: TaskDevice) -> None:
        await run(device, f"am force-stop {self.package}", f"close {self.app}")
        await run(device, "input keyevent KEYCODE_HOME", "go to the home screen")
        if await foreground_package(device) == self.package:
            raise TaskSetupError(f"{self.app} is still in the foreground after set-up")

    async def check(self, device: TaskDevice) -> TaskVerdict:
        package = await foreground_package(device)
        ok = package == self.package
        return TaskVerdict(ok, 1.0 if ok else 0.0, {"foreground": package, "expected": self.package})

    async def next_step(self, device: TaskDevice, last_tap: tuple[float, float] | None) -> PhoneStep:
        if (await self.check(device)).success:
            return PhoneStep(StepKind.FINISH)
        return await _open_step(device, self.package, self.app)


_ADJECTIVES = ("quiet", "amber", "brisk", "lucky", "mellow", "rapid", "sunny", "tidy")
_NOUNS = ("groceries", "meeting", "ideas", "travel", "recipes", "budget", "garden", "books")
_BODIES = ("Buy milk and eggs", "Call the dentist at noon", "Pack the blue charger", "Water the ferns",
           "Draft the quarterly report", "Return two library books", "Book a table for four")


class CreateNoteTask(AndroidTask):
    """Create a note in a notes app: its file must exist under /sdcard/Notes with the right text.

    This task targets the notes app of handeye's protocol-level test device
    (``tests/support/fake_adbd.py``, package ``com.example.notes``), which saves the field's first
    line as the note's name and the rest as its text. It follows AndroidWorld's MarkorCreateNote;
    on a real phone it needs an app that behaves the same way (Markor saves differently), so treat
    it as a template for your own app's checker."""

    name = "create-note"
    max_steps = 8

    def __init__(self, title: str, body: str) -> None:
        if not re.fullmatch(r"[\w-]+", title):
            raise EnvError(f"note title {title!r} must be letters, digits, '_' or '-' (it names a file)")
        self.title, self.body = title, body

    @classmethod
    def sample(cls, rng: random.Random) -> CreateNoteTask:
        return cls(f"{rng.choice(_ADJECTIVES)}_{rng.choice(_NOUNS)}_{rng.randint(1, 99)}", rng.choice(_BODIES))

    @property
    def path(self) -> str:
        return f"{NOTES_DIR}/{self.title}.txt"

    @property
    def text(self) -> str:
        """What the note field must hold when Save is pressed."""
        return f"{self.title}\n{self.body}"

    @property
    def instruction(self) -> str:
        return f"In the Notes app, create a note named {self.title} with the text: {self.body}"

    def params(self) -> dict[str, Any]:
        return {"title": self.title, "body": self.body}

    async def _exists(self, device: TaskDevice) -> bool:
        out, rc = await device.shell_rc(f"ls {NOTES_DIR}", "list the notes")
        return rc == 0 and f"{self.title}.txt" in out.split()

    async def set_up(self, device: TaskDevice) -> None:
        await run(device, f"mkdir -p {NOTES_DIR}", "create the notes folder")
        await run(device, f"rm -f {shlex.quote(self.path)}", "remove an old copy of the note")
        await run(device, f"am force-stop {NOTES_PACKAGE}", "close Notes (dropping any draft)")
        if await self._exists(device):
            raise TaskSetupError(f"{self.path} still exists after set-up")

    async def check(self, device: TaskDevice) -> TaskVerdict:
        if not await self._exists(device):
            return TaskVerdict(False, 0.0, {"exists": False, "path": self.path})
        content, rc = await device.shell_rc(f"cat {shlex.quote(self.path)}", "read the note")
        ok = rc == 0 and content.strip() == self.body
        return TaskVerdict(ok, 1.0 if ok else 0.0, {"exists": True, "path": self.path, "content": content.strip()[:200]})

    async def tear_down(self, device: TaskDevice) -> None:
        await run(device, f"rm -f {shlex.quote(self.path)}", "remove the note")

    async def next_step(self, device: TaskDevice, last_tap: tuple[float, float] | None) -> PhoneStep:
        if (await self.check(device)).success:
            return PhoneStep(StepKind.FINISH)
        if await foreground_package(device) != NOTES_PACKAGE:
            return await _open_step(device, NOTES_PACKAGE, "Notes")
        elements = await device.ui_elements()
        field = _element(elements, f"{NOTES_PACKAGE}:id/field")
        save = _element(elements, f"{NOTES_PACKAGE}:id/save")
        if field is None or save is None:
            raise EnvError("the Notes screen shows no note field or Save button")
        shown, wanted = field.text, self.text.replace("\n", " ")  # the field shows line breaks as spaces
        if shown == wanted:
            return PhoneStep(StepKind.CLICK, label="Save", box=save.box)
        focused = last_tap is not None and field.box.contains(*last_tap)
        if not focused:
            return PhoneStep(StepKind.CLICK, label="note field", box=field.box)
        if wanted.startswith(shown):
            return PhoneStep(StepKind.TYPE, label="note field", box=field.box, text=self.text[len(shown):])
        return PhoneStep(StepKind.KEY, label="note field", text="Backspace")


TASKS: dict[str, type[AndroidTask]] = {t.name: t for t in (WifiTask, BluetoothTask, BrightnessTask, OpenAppTask,
                                                           CreateNoteTask)}

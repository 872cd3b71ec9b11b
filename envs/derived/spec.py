"""The derived-task file: what a demonstration changed, as conditions a checker reads from the device.

A task file is one JSON object (docs/recording.md, "Derived tasks", has the whole format)::

    {"format": "handeye-task/1", "name": "subscribe", "instruction": "Subscribe to the newsletter",
     "language": "en", "device": "web", "start": {"url": "http://127.0.0.1:8000/form.html"}, "max_steps": 12,
     "conditions": [{"kind": "element", "selector": "#email", "value": "zoe@example.com"},
                    {"kind": "text_visible", "text": "Thank you"}]}

``load_task`` reads one strictly: an unknown field, a wrong type, a condition that does not belong to the
task's device, a ``start.page`` outside the task's folder, a ``start.url`` that is not http(s), a file that is not a
regular file (a FIFO, a device: never waited on) or is over ``MAX_TASK_BYTES`` is a ``TaskFileError`` naming the
file and the field. A start that runs a command loads, but runs only from a trusted folder
(``envs/derived/trust.py``). ``TaskSpec.to_dict`` writes the same form back.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar, Union
from urllib.parse import urlparse

from devices.base import Box
from devices.bounded_json import loads_bounded
from devices.files import read_regular
from envs.derived.fields import Fields
from envs.errors import TaskFileError

FORMAT = "handeye-task/1"
"""The ``format`` field every task file starts with; a later incompatible format gets another number."""
MAX_TASK_BYTES = 1024 * 1024
"""The largest task file read (a derived task is a few hundred bytes; checked before reading)."""
MAX_CONDITIONS = 64
MAX_TEXT = 4000
"""The longest string field (an instruction, a selector, an expected text)."""
NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
"""Task names: lowercase letters, digits, ``-`` and ``_``; the file is ``NAME.json``, the environment
``tasks/NAME``."""
URL_SCHEMES = ("http", "https")
"""The schemes a task file's ``start.url`` may use: a ``file:`` address would show any file of the machine to the
policy (a local page goes next to the task file, as ``start.page``)."""


class DeviceKind(str, Enum):
    WEB = "web"
    ANDROID = "android"
    DESKTOP = "desktop"


class ConditionKind(str, Enum):
    URL = "url"
    ELEMENT = "element"
    TEXT_VISIBLE = "text_visible"
    ACTIVITY = "activity"
    HIERARCHY_TEXT = "hierarchy_text"
    WINDOW_TITLE = "window_title"
    OCR_TEXT = "ocr_text"


class TextMatch(str, Enum):
    """How a URL or a window title is compared with the expected value."""

    EQUALS = "equals"
    PATH_EQUALS = "path_equals"
    """URLs only: the path alone (the host, port, query and fragment may differ)."""
    CONTAINS = "contains"


# -- conditions ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class UrlCondition:
    """The page's URL (the newest tab's) matches ``value``."""

    value: str
    match: TextMatch = TextMatch.EQUALS
    kind: ClassVar[ConditionKind] = ConditionKind.URL


@dataclass(frozen=True, slots=True)
class ElementCondition:
    """The element ``selector`` names (scopes joined by `` >>> `` into shadow roots) in the frame whose URL is
    ``frame`` (the page itself when empty) exists and meets every expectation given."""

    selector: str
    frame: str = ""
    value: str | None = None
    """The field's value equals this (inputs, text areas, selects, contenteditable elements)."""
    checked: bool | None = None
    selected: tuple[str, ...] | None = None
    """The labels of a select's selected options, in order."""
    text_contains: str | None = None
    """The element's visible text contains this (whitespace runs compared as one space)."""
    kind: ClassVar[ConditionKind] = ConditionKind.ELEMENT


@dataclass(frozen=True, slots=True)
class TextVisibleCondition:
    """The visible text of the page (or of the frame whose URL is ``frame``) contains ``text``."""

    text: str
    frame: str = ""
    kind: ClassVar[ConditionKind] = ConditionKind.TEXT_VISIBLE


@dataclass(frozen=True, slots=True)
class ActivityCondition:
    """The foreground (resumed) activity is in ``package`` (and is ``activity`` when given)."""

    package: str
    activity: str = ""
    kind: ClassVar[ConditionKind] = ConditionKind.ACTIVITY


@dataclass(frozen=True, slots=True)
class HierarchyTextCondition:
    """A node of the UI hierarchy has this resource id (when given) and this text or content description (when
    given; equal after whitespace runs are made one space)."""

    text: str = ""
    resource_id: str = ""
    kind: ClassVar[ConditionKind] = ConditionKind.HIERARCHY_TEXT


@dataclass(frozen=True, slots=True)
class WindowTitleCondition:
    """The title of the window with the keyboard focus equals or contains ``value``."""

    value: str
    match: TextMatch = TextMatch.CONTAINS
    kind: ClassVar[ConditionKind] = ConditionKind.WINDOW_TITLE


@dataclass(frozen=True, slots=True)
class OcrTextCondition:
    """The text OCR reads inside ``box`` (normalized to the frame) contains ``text``."""

    text: str
    box: Box
    kind: ClassVar[ConditionKind] = ConditionKind.OCR_TEXT


Condition = Union[UrlCondition, ElementCondition, TextVisibleCondition, ActivityCondition, HierarchyTextCondition,
                  WindowTitleCondition, OcrTextCondition]

DEVICE_CONDITIONS = {
    DeviceKind.WEB: (ConditionKind.URL, ConditionKind.ELEMENT, ConditionKind.TEXT_VISIBLE),
    DeviceKind.ANDROID: (ConditionKind.ACTIVITY, ConditionKind.HIERARCHY_TEXT),
    DeviceKind.DESKTOP: (ConditionKind.WINDOW_TITLE, ConditionKind.OCR_TEXT),
}
"""The conditions each device can check."""


def condition_dict(condition: Condition) -> dict[str, Any]:
    """The condition as it is written in a task file (fields at their defaults left out)."""
    out: dict[str, Any] = {"kind": condition.kind.value}
    for f in fields(condition):
        value = getattr(condition, f.name)
        if isinstance(value, Box):
            out[f.name] = [round(v, 4) for v in value.as_list()]
        elif value is None or value == "" or (isinstance(value, TextMatch) and value is f.default):
            continue
        else:
            out[f.name] = value.value if isinstance(value, Enum) else list(value) if isinstance(value, tuple) else value
    return out


# -- start states --------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class WebStart:
    """A page opened in a fresh page (cookies and the origin's storage cleared): ``url``, or ``page``, a file under
    the task's folder served on 127.0.0.1."""

    url: str = ""
    page: str = ""
    viewport: tuple[int, int] | None = None
    """The browser's viewport in CSS pixels when the task was recorded (layouts depend on it)."""


@dataclass(frozen=True, slots=True)
class AndroidStart:
    """The home screen, then ``commands`` (adb shell, each must exit 0), then ``package`` started (stopped first
    when ``restart``; at ``activity`` when given, else through its launcher entry). No package: the home screen."""

    package: str = ""
    activity: str = ""
    commands: tuple[str, ...] = ()
    restart: bool = True


@dataclass(frozen=True, slots=True)
class DesktopStart:
    """``command`` (an argument list) started at every reset (the previous one stopped); empty: the screen as it
    is. ``wait_s``: how long the app gets to open its window."""

    command: tuple[str, ...] = ()
    wait_s: float = 2.0


Start = Union[WebStart, AndroidStart, DesktopStart]
START_TYPES: dict[DeviceKind, type] = {DeviceKind.WEB: WebStart, DeviceKind.ANDROID: AndroidStart,
                                       DeviceKind.DESKTOP: DesktopStart}


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """One derived task (see the module docstring)."""

    name: str
    instruction: str
    device: DeviceKind
    start: Start
    conditions: tuple[Condition, ...]
    language: str = "en"
    max_steps: int = 10
    source: str = ""
    """The demonstration it was derived from (an episode folder), for people; nothing reads it."""
    folder: Path | None = field(default=None, compare=False)
    """Where the file was loaded from (``start.page`` is under it); not written."""

    def to_dict(self) -> dict[str, Any]:
        start = {f.name: (list(v) if isinstance(v, tuple) else v) for f in fields(self.start)
                 if (v := getattr(self.start, f.name)) not in ("", None, ())}
        out: dict[str, Any] = {"format": FORMAT, "name": self.name, "instruction": self.instruction,
                               "language": self.language, "device": self.device.value, "start": start,
                               "max_steps": self.max_steps,
                               "conditions": [condition_dict(c) for c in self.conditions]}
        if self.source:
            out["source"] = self.source
        return out

    def to_json(self) -> str:
        """The file's text: one field per line, one condition per line (easy to edit by hand)."""
        def dump(value: Any) -> str:
            return json.dumps(value, ensure_ascii=False)

        lines = []
        for key, value in self.to_dict().items():
            if key == "conditions":
                inner = ",\n".join(f"    {dump(c)}" for c in value)
                lines.append(f'  "conditions": [\n{inner}\n  ]')
            else:
                lines.append(f"  {dump(key)}: {dump(value)}")
        return "{\n" + ",\n".join(lines) + "\n}\n"

    def page_path(self) -> Path | None:
        """The file ``start.page`` names, under the task's folder (None for a URL)."""
        if not isinstance(self.start, WebStart) or not self.start.page:
            return None
        return (self.folder or Path(".")) / self.start.page


def language_of(text: str) -> str:
    """"zh" when the text has Chinese characters, else "en"."""
    return "zh" if re.search(r"[\u3400-\u9fff\uf900-\ufaff]", text) else "en"


def check_name(name: str) -> str:
    """The name if it can name a task file, else TaskFileError saying what a name may hold."""
    if not NAME_RE.fullmatch(name):
        raise TaskFileError(f"task name {name!r}: use 1-64 lowercase letters, digits, '-' and '_', starting with a "
                            "letter or digit (it names the file NAME.json and the environment tasks/NAME)")
    return name


def task_path(folder: str | Path, name: str) -> Path:
    """Where the task ``name`` is written in ``folder``."""
    return Path(folder) / f"{check_name(name)}.json"


def write_task(spec: TaskSpec, folder: str | Path, *, replace: bool = False) -> Path:
    """Write ``spec`` as ``folder/NAME.json`` (the folder made when missing); TaskFileError when the file exists
    and ``replace`` is False. Written whole or not at all (a temporary file renamed over it)."""
    path = task_path(folder, spec.name)
    if path.exists() and not replace:
        raise TaskFileError(f"{path} exists; choose another name or remove the file first")
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(spec.to_json(), encoding="utf-8")
    os.replace(temporary, path)
    return path


# -- reading -------------------------------------------------------------------------------------------------------
def load_task(path: str | Path) -> TaskSpec:
    """Read and check one task file (see the module docstring); TaskFileError naming the file and field."""
    path = Path(path)
    try:
        raw = read_regular(path, MAX_TASK_BYTES, "task file")  # a FIFO, /dev/zero: refused, never waited on
    except ValueError as e:  # not a regular file, or over MAX_TASK_BYTES (a task file is a few hundred bytes)
        raise TaskFileError(str(e)) from None
    except OSError as e:
        raise TaskFileError(f"{path}: cannot read it: {e.strerror or e}") from None
    try:
        data = loads_bounded(raw.decode("utf-8"), records=False)
    except (UnicodeDecodeError, ValueError) as e:
        raise TaskFileError(f"{path}: cannot read it as JSON: {e}") from None
    return parse_task(data, path)


def parse_task(data: Any, path: Path) -> TaskSpec:
    """A task from its decoded JSON (``path`` names it in errors and anchors ``start.page``)."""
    top = Fields(data, "the task", path, MAX_TEXT)
    fmt = top.text("format")
    if fmt != FORMAT:
        top.fail("format", f"is {fmt!r}; this handeye reads {FORMAT!r}")
    name = top.text("name")
    if not NAME_RE.fullmatch(name):
        top.fail("name", f"{name!r} is not a task name (1-64 lowercase letters, digits, '-' and '_')")
    if name != path.stem:
        top.fail("name", f"is {name!r} but the file is {path.name}: name the file {name}.json")
    instruction = top.text("instruction")
    language = top.text("language", language_of(instruction))
    device_name = top.text("device")
    try:
        device = DeviceKind(device_name)
    except ValueError:
        top.fail("device", f"is {device_name!r}; use one of {', '.join(k.value for k in DeviceKind)}")
    max_steps = top.integer("max_steps", 10, 1, 1000)
    source = top.text("source", "", empty=True)
    start = parse_start(device, top.take("start", {}), path)
    raw = top.take("conditions")
    if not isinstance(raw, list) or not raw:
        top.fail("conditions", "must be a non-empty list: a task without conditions would pass before anything is "
                 "done")
    if len(raw) > MAX_CONDITIONS:
        top.fail("conditions", f"has {len(raw)} entries, more than {MAX_CONDITIONS}")
    conditions = tuple(parse_condition(device, c, f"conditions[{i}]", path) for i, c in enumerate(raw))
    top.done()
    spec = TaskSpec(name, instruction, device, start, conditions, language, max_steps, source, path.parent)
    page = spec.page_path()
    if page is not None and not page.is_file():
        raise TaskFileError(f"{path}: start.page: {page} does not exist")
    return spec


def parse_start(device: DeviceKind, data: Any, path: Path) -> Start:
    f = Fields(data, "start", path, MAX_TEXT)
    if device is DeviceKind.WEB:
        url, page = f.text("url", "", empty=True), f.text("page", "", empty=True)
        viewport = f.take("viewport", None)
        if viewport is not None and not (isinstance(viewport, list) and len(viewport) == 2
                                         and all(type(v) is int and 100 <= v <= 10000 for v in viewport)):
            f.fail("viewport", f"must be [width, height], whole CSS pixels from 100 to 10000, got {viewport!r}")
        f.done()
        if bool(url) == bool(page):
            f.fail("url", "give exactly one of url (an address) and page (a file under the task's folder)")
        if url and (urlparse(url).scheme.lower() not in URL_SCHEMES or not urlparse(url).netloc):
            f.fail("url", f"{url[:200]!r} is not an {' or '.join(URL_SCHEMES)} address; a task file starts only at "
                   "a web address (a page on this machine goes next to the task file, named by start.page)")
        if page:
            check_inside(page, path, "start.page")
        return WebStart(url, page, tuple(viewport) if viewport else None)  # type: ignore[arg-type]
    if device is DeviceKind.ANDROID:
        package, activity = f.text("package", "", empty=True), f.text("activity", "", empty=True)
        commands = f.text_list("commands")
        restart = f.boolean("restart", True)
        f.done()
        if activity and not package:
            f.fail("activity", "needs the package it belongs to (start.package)")
        if package and not re.fullmatch(r"[A-Za-z][\w]*(\.[A-Za-z][\w]*)+", package):
            f.fail("package", f"{package!r} is not a package name (like com.example.notes)")
        return AndroidStart(package, activity, commands, restart)
    command = f.text_list("command")
    wait_s = f.number("wait_s", 2.0, 0.0, 120.0)
    f.done()
    return DesktopStart(command, wait_s)


def check_inside(relative: str, path: Path, where: str) -> None:
    """TaskFileError when ``relative`` (a path in the task file) is absolute or leaves the task's folder."""
    folder = path.parent.resolve()
    target = (folder / relative).resolve()
    if Path(relative).is_absolute() or not target.is_relative_to(folder):
        raise TaskFileError(f"{path}: {where}: {relative!r} is outside the task's folder {folder}; give a path "
                            "relative to it, without '..'")


def parse_condition(device: DeviceKind, data: Any, where: str, path: Path) -> Condition:
    f = Fields(data, where, path, MAX_TEXT)
    kind_name = f.text("kind")
    try:
        kind = ConditionKind(kind_name)
    except ValueError:
        f.fail("kind", f"is {kind_name!r}; the kinds are {', '.join(k.value for k in ConditionKind)}")
    if kind not in DEVICE_CONDITIONS[device]:
        f.fail("kind", f"{kind.value} is not checked on the {device.value} device; it checks "
               f"{', '.join(k.value for k in DEVICE_CONDITIONS[device])}")
    condition: Condition
    if kind is ConditionKind.URL:
        condition = UrlCondition(f.text("value"), f.choice("match", TextMatch.EQUALS, tuple(TextMatch)))
    elif kind is ConditionKind.ELEMENT:
        selected = f.take("selected", None)
        if selected is not None:
            if not (isinstance(selected, list) and all(isinstance(s, str) for s in selected)):
                f.fail("selected", "must be a list of option labels")
            selected = tuple(selected)
        condition = ElementCondition(f.text("selector"), f.text("frame", "", empty=True),
                                     f.text("value", None, empty=True), f.boolean("checked", None), selected,
                                     f.text("text_contains", None, empty=True))
        f.done()
        if (condition.value, condition.checked, condition.selected, condition.text_contains) == (None,) * 4:
            f.fail("selector", "an element condition needs at least one of value, checked, selected, text_contains")
    elif kind is ConditionKind.TEXT_VISIBLE:
        condition = TextVisibleCondition(f.text("text"), f.text("frame", "", empty=True))
    elif kind is ConditionKind.ACTIVITY:
        condition = ActivityCondition(f.text("package"), f.text("activity", "", empty=True))
    elif kind is ConditionKind.HIERARCHY_TEXT:
        condition = HierarchyTextCondition(f.text("text", "", empty=True), f.text("resource_id", "", empty=True))
        f.done()
        if not (condition.text or condition.resource_id):
            f.fail("text", "a hierarchy_text condition needs text, resource_id or both")
    elif kind is ConditionKind.WINDOW_TITLE:
        condition = WindowTitleCondition(f.text("value"), f.choice("match", TextMatch.CONTAINS,
                                                                   (TextMatch.EQUALS, TextMatch.CONTAINS)))
    else:
        condition = OcrTextCondition(f.text("text"), f.box("box"))
    f.done()
    return condition

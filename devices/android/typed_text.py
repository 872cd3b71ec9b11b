"""The UI hierarchy as a recording sees it, and the text a person types, read from it.

``getevent`` shows soft-keyboard taps as touches, never the characters, so a recording reads typed text where it
can be observed: in the focused field of successive ``uiautomator dump``s (``Snapshot``). ``TextTracker`` follows
the focused field; touches on the soft keyboard (``Snapshot.keyboard_top``, from ``dumpsys input_method``) are
not actions of their own but mark that typing happened, and the field's text is committed as typed text when
focus moves to another field, or before the next input that is not on the keyboard, or when the recording ends.
Text changes without keyboard input (an app filling a field) are not typing and are not recorded.

A dump costs 1-3 s on a phone, so the committed text is the field's text in the newest dump before the commit:
characters typed after that dump began are missing from it (``Typed.complete`` is False then).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from devices.android.replies import UiElement
from devices.base import Box, ElementInfo


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One UI hierarchy dump: the computer's times it began and ended, the nodes, the display rotation it reports
    and the soft keyboard's top edge (normalized y) while the keyboard is shown."""

    start: float
    end: float
    elements: tuple[UiElement, ...]
    rotation: int | None = None
    keyboard_top: float | None = None

    @property
    def focused(self) -> UiElement | None:
        return next((e for e in self.elements if e.focused), None)

    @property
    def package(self) -> str:
        return next((e.package for e in self.elements if e.package), "")

    def password_boxes(self) -> tuple[Box, ...]:
        return tuple(e.box for e in self.elements if e.password)

    def find(self, key: str) -> UiElement | None:
        return next((e for e in self.elements if field_key(e) == key), None)


def parse_rotation_attr(xml_text: str) -> int | None:
    """The display rotation uiautomator writes on its ``<hierarchy rotation="N">`` element."""
    m = re.search(r"<hierarchy[^>]*\brotation=\"(\d)\"", xml_text)
    return int(m.group(1)) % 4 if m else None


def parse_input_method(text: str) -> tuple[bool | None, int | None]:
    """(whether the soft keyboard is shown, the y of its top edge in display pixels) from ``dumpsys input_method``:
    ``mInputShown=true|false`` of the input method manager and ``visibleTopInsets=N`` of the keyboard's last
    computed insets (its window spans the display, the keys start at that y). None where a line is missing."""
    shown = re.search(r"\bmInputShown=(true|false)", text)
    tops = re.findall(r"\bvisibleTopInsets=(\d+)", text)
    return (shown.group(1) == "true" if shown else None), (int(tops[-1]) if tops else None)


def field_key(e: UiElement) -> str:
    """What identifies a field from one dump to the next: its resource id, else its class and bounds."""
    return e.resource_id or f"{e.class_name}@{e.box.as_list()}"


def element_info(e: UiElement) -> ElementInfo:
    """An element for the recording: a password field's text is never given."""
    return ElementInfo(text="" if e.password else (e.text or e.content_desc), box=e.box, role=e.class_name,
                       password=e.password)


def element_under(elements: tuple[UiElement, ...], x: float, y: float) -> UiElement | None:
    """The smallest node under a normalized point that a person could mean: clickable, a text field, or one that
    says something (text or description); None when only layout containers are there."""
    hits = [e for e in elements if e.box.contains(x, y)
            and (e.clickable or e.text or e.content_desc or "EditText" in e.class_name)]
    return min(hits, key=lambda e: (e.box.x2 - e.box.x1) * (e.box.y2 - e.box.y1)) if hits else None


def edits(before: str, after: str) -> tuple[int, str]:
    """(characters erased from the end of ``before``, text appended after them) that turn ``before`` into
    ``after``: the keystrokes a replay at the end of the field needs."""
    common = 0
    for a, b in zip(before, after):
        if a != b:
            break
        common += 1
    return len(before) - common, after[common:]


@dataclass(frozen=True, slots=True)
class Typed:
    """Text committed into one field: its text ``before`` and ``after`` the typing, and when the keyboard was
    touched (the computer's seconds)."""

    field: UiElement
    before: str
    after: str
    first_key: float
    last_key: float
    complete: bool
    """False when keyboard input came after the dump the text was read from began (characters may be missing)."""


class TextTracker:
    """Follows the focused field across snapshots and commits its typed text (see the module docstring)."""

    def __init__(self) -> None:
        self.field: UiElement | None = None
        self._key = ""
        self._before = ""
        self._text = ""
        self._seen_at = 0.0
        self._keys: list[float] = []
        self.unread = 0
        """Keyboard touches whose text no dump showed before they were committed (reported by the recorder)."""

    @property
    def typing_since(self) -> float | None:
        """When the keyboard was first touched since the last commit, None if it was not."""
        return self._keys[0] if self._keys else None

    def keyboard(self, at: float) -> None:
        """A touch on the soft keyboard (or a character key) at ``at``."""
        self._keys.append(at)

    def snapshot(self, snap: Snapshot, previous: Snapshot | None) -> Typed | None:
        """Read a new dump; the committed text of the field that lost the focus, if any."""
        focused = snap.focused
        if focused is not None and field_key(focused) == self._key:
            self.field, self._text, self._seen_at = focused, focused.text, snap.start
            if not self._keys:  # changed by the app, not typed: a replay starts from it too
                self._before = focused.text
            return None
        typed = self.commit() if self.field is not None else None
        # keyboard touches after the old field was last seen may have gone into the new one
        self._keys = [t for t in self._keys if t >= self._seen_at]
        self.field = focused
        self._key = field_key(focused) if focused is not None else ""
        earlier = previous.find(self._key) if previous is not None and focused is not None else None
        self._before = (earlier or focused).text if focused is not None else ""
        self._text = focused.text if focused is not None else ""
        self._seen_at = snap.start
        return typed

    def commit(self) -> Typed | None:
        """The field's text typed since the last commit (keyboard input and a changed text), None if nothing."""
        keys, self._keys = self._keys, []
        if self.field is None or not keys:
            return None
        if self._text == self._before:
            self.unread += len(keys)
            return None
        typed = Typed(self.field, self._before, self._text, keys[0], keys[-1], self._seen_at >= keys[-1])
        self._before = self._text
        return typed

    def reset(self) -> None:
        """Forget the field and its keyboard input (after a pause: what was typed then stays private)."""
        self.field, self._key, self._before, self._text, self._keys = None, "", "", "", []

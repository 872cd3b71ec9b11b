"""The shell commands that perform unified actions on a phone: key codes, ``input text`` and scroll swipes.

Actions and their ADB commands (points are in the input space, see ``devices.android.replies``):

- click: ``input tap X Y``; long_press: ``input swipe X Y X Y MS`` (a press held in place).
- drag: ``input swipe X1 Y1 X2 Y2 MS`` over ``drag_s`` (a touch drag; launchers that want a
  long press before dragging an icon need a long_press first).
- scroll: direction is where the *content* goes, as on the web: "scroll down" shows content
  further down, so the finger moves **up**. ``amount`` is in screens (0.5 = half the screen's
  height for up/down, width for left/right), split into slow swipes of at most 0.6 screens around
  the point (default: the centre), shifted to stay on screen. Touch slop (~8 dp) and any fling make
  the content move a little less or more than the finger.
- type: printable ASCII goes through ``input text`` (spaces as ``%s``, every argument shell-quoted,
  ``\\n`` / ``\\t`` as ENTER / TAB key events). Other text needs ADBKeyboard
  (https://github.com/senzhk/ADBKeyBoard): the device switches to its IME, sends the text as a
  base64 broadcast (``ADB_INPUT_B64``), and restores the user's IME. ``keyboard = "auto"`` uses
  ``input text`` for ASCII and ADBKeyboard for the rest; without ADBKeyboard non-ASCII text is a
  DeviceError that says how to install it. Characters are never dropped silently.
- key: ``input keyevent KEYCODE_*`` (Escape is KEYCODE_ESCAPE, which Android's key map turns into
  BACK when the app does not handle it; "Home" is the text cursor's MOVE_HOME, not the home screen).
- hotkey: ``input keycombination`` (Android 13+, API 33); older phones raise UnsupportedAction.
- open_app: ``am start -n PKG/ACTIVITY`` for a component, else ``monkey -p PKG -c
  android.intent.category.LAUNCHER 1``; names are looked up in ``app_aliases`` first.
- open_url: ``am start -a android.intent.action.VIEW -d URL``; back / home: KEYCODE_BACK / HOME.
"""

from __future__ import annotations

import math
import shlex

from devices.actions import Action, ScrollDirection
from devices.errors import DeviceError, UnsupportedAction

#: canonical key names (devices.keys) -> Android key codes
KEYCODES: dict[str, str] = {
    "Enter": "KEYCODE_ENTER",
    "Tab": "KEYCODE_TAB",
    "Escape": "KEYCODE_ESCAPE",
    "Backspace": "KEYCODE_DEL",
    "Delete": "KEYCODE_FORWARD_DEL",
    "Insert": "KEYCODE_INSERT",
    "Home": "KEYCODE_MOVE_HOME",
    "End": "KEYCODE_MOVE_END",
    "PageUp": "KEYCODE_PAGE_UP",
    "PageDown": "KEYCODE_PAGE_DOWN",
    "ArrowUp": "KEYCODE_DPAD_UP",
    "ArrowDown": "KEYCODE_DPAD_DOWN",
    "ArrowLeft": "KEYCODE_DPAD_LEFT",
    "ArrowRight": "KEYCODE_DPAD_RIGHT",
    "Space": "KEYCODE_SPACE",
    "Control": "KEYCODE_CTRL_LEFT",
    "Shift": "KEYCODE_SHIFT_LEFT",
    "Alt": "KEYCODE_ALT_LEFT",
    "Meta": "KEYCODE_META_LEFT",
    "CapsLock": "KEYCODE_CAPS_LOCK",
    "AppSwitch": "KEYCODE_APP_SWITCH",
    **{f"F{i}": f"KEYCODE_F{i}" for i in range(1, 13)},
}
_PUNCTUATION_KEYCODES = {
    ",": "COMMA", ".": "PERIOD", "/": "SLASH", "-": "MINUS", "=": "EQUALS", ";": "SEMICOLON", "'": "APOSTROPHE",
    "[": "LEFT_BRACKET", "]": "RIGHT_BRACKET", "\\": "BACKSLASH", "`": "GRAVE", "@": "AT", "+": "PLUS",
    "*": "STAR", "#": "POUND", " ": "SPACE",
}
_TEXT_CHUNK = 100
_MAX_SWIPE_SCREENS = 0.6


def non_ascii(text: str) -> str:
    """The characters of ``text`` that ``input text`` cannot type (all but printable ASCII, newline, tab), sorted."""
    return "".join(sorted({c for c in text if not (32 <= ord(c) < 127 or c in "\n\t")}))


def input_text_commands(text: str) -> list[str]:
    """The shell commands that type ASCII ``text`` with ``input text`` (and key events for \\n, \\t).

    ``input text`` turns ``%s`` into a space, so spaces are sent as ``%s`` and a literal ``%``
    followed by ``s`` is split across two commands. Each argument is shell-quoted.
    """
    bad = non_ascii(text)
    if bad:
        raise DeviceError(f"input text cannot type {bad!r} (only printable ASCII, newline and tab)")
    commands: list[str] = []
    run = ""

    def flush() -> None:
        nonlocal run
        if run:
            commands.append("input text " + shlex.quote(run))
            run = ""

    for c in text:
        if c in "\n\t":
            flush()
            commands.append("input keyevent " + ("KEYCODE_ENTER" if c == "\n" else "KEYCODE_TAB"))
            continue
        if c == "s" and run.endswith("%"):
            flush()  # "%s" would become a space; send "%" and "s" in separate commands
        run += "%s" if c == " " else c
        if len(run) >= _TEXT_CHUNK:
            flush()
    flush()
    return commands


def keycode_for(key: str) -> str:
    """The Android key code of a canonical key name or single character."""
    if key in KEYCODES:
        return KEYCODES[key]
    if len(key) == 1:
        if key.isascii() and key.isalpha():
            return f"KEYCODE_{key.upper()}"
        if key.isascii() and key.isdigit():
            return f"KEYCODE_{key}"
        if key in _PUNCTUATION_KEYCODES:
            return f"KEYCODE_{_PUNCTUATION_KEYCODES[key]}"
    raise UnsupportedAction(f"the android device has no key code for {key!r}; type it as text instead")


def scroll_swipes(action: Action, input_size: tuple[int, int], swipe_s: float) -> list[str]:
    """The ``input swipe`` commands of a scroll action on a screen of ``input_size`` (see the module docstring)."""
    w, h = input_size
    px, py = action.point.to_pixels(w, h) if action.point is not None else (w / 2, h / 2)
    vertical = action.direction in (ScrollDirection.UP, ScrollDirection.DOWN)
    span = h if vertical else w
    total = (action.amount or 0.5) * span
    n = max(1, math.ceil(total / (_MAX_SWIPE_SCREENS * span)))
    step = total / n
    # content moves down/right on screen to show what is above/left, so the finger moves with it
    sign = -1 if action.direction in (ScrollDirection.DOWN, ScrollDirection.RIGHT) else 1
    centre = py if vertical else px
    margin = 0.05 * span
    start, end = centre - sign * step / 2, centre + sign * step / 2
    shift = max(0.0, max(start, end) - (span - 1 - margin)) - max(0.0, margin - min(start, end))
    start, end = start - shift, end - shift
    ms = round(swipe_s * 1000)
    other = min(math.floor(px if vertical else py), (w if vertical else h) - 1)
    commands = []
    for _ in range(n):
        a, b = min(math.floor(start), span - 1), min(math.floor(end), span - 1)
        if vertical:
            commands.append(f"input swipe {other} {a} {other} {b} {ms}")
        else:
            commands.append(f"input swipe {a} {other} {b} {other} {ms}")
    return commands

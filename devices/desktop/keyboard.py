"""Keys and text on an X display: pyautogui key presses, ``xdotool`` and the clipboard (``xclip``).

Text is typed by ``xdotool type`` (any Unicode, Chinese included: xdotool maps each character to a
spare keycode), by pasting through the clipboard (``xclip``, then the paste hotkey), or by
pyautogui key presses (ASCII only). Keys go through pyautogui when it has a keycode for them, else
through ``xdotool key``; text or keys the chosen method cannot send are a DeviceError that names
what to install, never silently dropped.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import time
from typing import Any

from devices.desktop.config import DesktopConfig
from devices.errors import DeviceError, DeviceUnavailable, UnsupportedAction
from devices.keys import PHONE_ONLY_KEYS

log = logging.getLogger(__name__)

#: canonical key names (devices/keys.py) -> pyautogui's names; single characters pass through
PYAUTOGUI_KEYS = {
    "Enter": "enter", "Tab": "tab", "Escape": "esc", "Backspace": "backspace", "Delete": "delete",
    "Insert": "insert", "Home": "home", "End": "end", "PageUp": "pageup", "PageDown": "pagedown",
    "ArrowUp": "up", "ArrowDown": "down", "ArrowLeft": "left", "ArrowRight": "right", "Space": "space",
    "Control": "ctrl", "Shift": "shift", "Alt": "alt", "Meta": "win", "CapsLock": "capslock",
    **{f"F{i}": f"f{i}" for i in range(1, 13)},
}
#: canonical key names -> X keysym names, as ``xdotool key`` takes them
XDOTOOL_KEYS = {
    "Enter": "Return", "Tab": "Tab", "Escape": "Escape", "Backspace": "BackSpace", "Delete": "Delete",
    "Insert": "Insert", "Home": "Home", "End": "End", "PageUp": "Prior", "PageDown": "Next",
    "ArrowUp": "Up", "ArrowDown": "Down", "ArrowLeft": "Left", "ArrowRight": "Right", "Space": "space",
    "Control": "ctrl", "Shift": "shift", "Alt": "alt", "Meta": "super", "CapsLock": "Caps_Lock",
    **{f"F{i}": f"F{i}" for i in range(1, 13)},
}


def pyautogui_key(name: str) -> str:
    """pyautogui's name for a canonical key name ("Control" -> "ctrl", "a" -> "a")."""
    return PYAUTOGUI_KEYS.get(name, name)


def xdotool_key(name: str) -> str:
    """``xdotool key``'s name for a canonical key name ("PageDown" -> "Next", "é" -> "U00E9")."""
    if name in XDOTOOL_KEYS:
        return XDOTOOL_KEYS[name]
    if len(name) == 1 and (name.isascii() and name.isalnum()):
        return name
    return f"U{ord(name):04X}"  # xdotool looks keysyms up by name; Unnnn names any Unicode character


def resolve_typing(method: str) -> str:
    """The typing method to use for ``desktop.typing`` ("auto" resolved by what is installed);
    DeviceUnavailable when the method's tool is missing."""
    if method == "auto":
        if shutil.which("xdotool"):
            return "xdotool"
        if shutil.which("xclip"):
            return "clipboard"
        log.warning("neither xdotool nor xclip is installed: only ASCII text can be typed")
        return "keys"
    tool = {"xdotool": "xdotool", "clipboard": "xclip"}.get(method)
    if tool and not shutil.which(tool):
        raise DeviceUnavailable(
            f"desktop.typing={method!r} needs {tool}, which is not installed; "
            f"`apt-get install {tool}` or choose another desktop.typing"
        )
    return method


REMAP_PAUSE_S = 0.05
"""How long a character typed through a remapped keycode keeps its mapping after its key (``RemappedTyper``)."""


class RemappedTyper:
    """Types characters the keyboard has no key for: a spare keycode is mapped to each one's keysym through the X
    keyboard mapping, pressed and released through XTEST, and the mapping kept ``REMAP_PAUSE_S`` so the app reads the
    key while it still means that character; the keycode is set back to nothing at the end."""

    def __init__(self, display: str) -> None:
        from Xlib import display as xdisplay

        self.conn = xdisplay.Display(display)
        self.keycode = self._spare()

    def _spare(self) -> int:
        first = self.conn.display.info.min_keycode
        count = self.conn.display.info.max_keycode - first + 1
        for offset, syms in enumerate(self.conn.get_keyboard_mapping(first, count)):
            if not any(syms):
                return first + offset
        raise DeviceError("the X keyboard map has no spare keycode to type characters outside the keyboard with; "
                          "set desktop.typing = 'clipboard'")

    def type(self, text: str) -> None:
        from Xlib import X
        from Xlib.ext import xtest

        try:
            for char in text:
                code = ord(char)
                keysym = code if code < 0x100 else 0x01000000 | code  # X11's keysyms for Unicode
                self.conn.change_keyboard_mapping(self.keycode, [(keysym, keysym)])
                self.conn.sync()
                xtest.fake_input(self.conn, X.KeyPress, self.keycode)
                xtest.fake_input(self.conn, X.KeyRelease, self.keycode)
                self.conn.sync()
                time.sleep(REMAP_PAUSE_S)
        finally:
            self.conn.change_keyboard_mapping(self.keycode, [(0, 0)])
            self.conn.sync()


class Keyboard:
    """Types text and presses keys on one display with pyautogui (``pg``) and the X tools."""

    def __init__(self, pg: Any, display: str, config: DesktopConfig, method: str) -> None:
        self.pg = pg
        self.display = display
        self.config = config
        self.method = method
        """The typing method in use: "xdotool", "clipboard" or "keys"."""
        self._typer: RemappedTyper | None = None

    def check_typable(self, text: str) -> None:
        """DeviceError naming the characters the typing method cannot type (only "keys" has any)."""
        if self.method != "keys":
            return
        from pyautogui import _pyautogui_x11 as x11

        bad = sorted({c for c in text if not x11.keyboardMapping.get(c)})
        if bad:
            raise DeviceError(
                f"the desktop device types with pyautogui key presses (desktop.typing={self.config.typing!r}), which "
                f"cannot type {''.join(bad)!r} on display {self.display}; install xdotool (any Unicode) or xclip "
                "(clipboard paste) and set desktop.typing to 'auto', 'xdotool' or 'clipboard'"
            )

    def type_text(self, text: str) -> None:
        env = {**os.environ, "DISPLAY": self.display}
        limit = self.config.action_timeout_s + len(text) * (self.config.type_delay_ms / 1000 + 0.02)
        if self.method == "xdotool":
            # A character with no key on the keyboard needs a spare keycode mapped to it. xdotool maps, presses and
            # unmaps within one call, and a busy app reads the key after the unmapping: the character is lost (seen
            # under load: 第一行 arrived as 第行). So ASCII goes in runs through xdotool, and every other character
            # through our own mapping, held until the app has had the key (RemappedTyper).
            for run in re.findall(r"[\x00-\x7f]+|[^\x00-\x7f]+", text):
                if not run.isascii():
                    self._remapped().type(run)
                    continue
                cmd = ["xdotool", "type", "--clearmodifiers", "--delay", str(self.config.type_delay_ms), "--", run]
                proc = subprocess.run(cmd, env=env, capture_output=True, timeout=limit)
                if proc.returncode != 0:
                    raise DeviceError(
                        f"xdotool could not type on {self.display}: {proc.stderr.decode(errors='replace').strip()}; "
                        "try desktop.typing = 'clipboard'"
                    )
        elif self.method == "clipboard":
            # xclip forks a child that serves the selection until another client takes it; that child
            # inherits stdout/stderr, so they must not be pipes we wait on.
            proc = subprocess.run(
                ["xclip", "-selection", "clipboard", "-in"],
                input=text.encode(), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10,
            )
            if proc.returncode != 0:
                raise DeviceError(
                    f"xclip could not set the clipboard on {self.display} (exit {proc.returncode}); "
                    "try desktop.typing = 'xdotool'"
                )
            self._await_clipboard(text, env)
            self.press(self.config.paste_keys, hotkey=True)
        else:
            self.pg.write(text)

    def _remapped(self) -> RemappedTyper:
        if self._typer is None:
            self._typer = RemappedTyper(self.display)
        return self._typer

    def _await_clipboard(self, text: str, env: dict[str, str]) -> None:
        """Wait until the clipboard holds ``text``: the xclip that serves it runs in the background, and a paste
        sent before it owns the selection would paste the previous text (seen under load)."""
        deadline = time.monotonic() + 2.0
        while True:
            out = subprocess.run(["xclip", "-selection", "clipboard", "-out"], env=env, capture_output=True, timeout=5)
            if out.returncode == 0 and out.stdout == text.encode():
                return
            if time.monotonic() > deadline:
                raise DeviceError(f"the clipboard on {self.display} did not take the text within 2 s; "
                                  "try desktop.typing = 'xdotool'")
            time.sleep(0.02)

    def press(self, keys: tuple[str, ...], hotkey: bool) -> None:
        """Press one key (``hotkey`` False: the first of ``keys``) or a combination."""
        if set(keys) & PHONE_ONLY_KEYS:
            raise UnsupportedAction(f"the desktop device has no {'+'.join(keys)} key (it is a phone key)")
        from pyautogui import _pyautogui_x11 as x11

        names = [pyautogui_key(k) for k in keys]
        if all(x11.keyboardMapping.get(n) for n in names):
            if hotkey:
                self.pg.hotkey(*names)
            else:
                self.pg.press(names[0])
            return
        # pyautogui silently ignores keys it has no keycode for (any non-ASCII character): xdotool
        # maps a spare keycode to the keysym instead.
        if not shutil.which("xdotool"):
            missing = [k for k, n in zip(keys, names) if not x11.keyboardMapping.get(n)]
            raise DeviceError(
                f"pyautogui has no key for {missing} on display {self.display}; install xdotool to press it"
            )
        combo = "+".join(xdotool_key(k) for k in keys)
        env = {**os.environ, "DISPLAY": self.display}
        proc = subprocess.run(["xdotool", "key", "--clearmodifiers", combo], env=env, capture_output=True, timeout=10)
        if proc.returncode != 0:
            raise DeviceError(f"xdotool could not press {combo}: {proc.stderr.decode(errors='replace').strip()}")

"""Keys and text on an X display: pyautogui key presses, ``xdotool`` and the clipboard (``xclip``).

Text is typed by ``xdotool type`` (ASCII) and spare keycodes bound to other characters (any Unicode, Chinese
included: ``RemappedTyper``), by pasting through the clipboard (``xclip``, then the paste hotkey), or by
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
from devices.errors import DeviceError, DeviceUnavailable

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
"""How long a new keycode binding waits before its key is sent (``RemappedTyper``)."""
REMAP_CLOSE_GRACE_S = 0.5
"""How long a binding outlives its last key before it is changed: rebound to another character when the pool is
full, or unbound when the device closes. An app that reads its keys later than this (a machine under heavy load)
reads them with the new mapping. 50 ms was too short for a rebind: a clean-clone test run typed αβγαδε as αεδεδε."""
REMAP_POOL = 24
"""At most this many spare keycodes hold characters at once; at least ``REMAP_LEAVE`` stay free for other tools."""
REMAP_LEAVE = 2


class RemappedTyper:
    """Types characters the keyboard has no key for, through spare keycodes of the X keyboard mapping.

    An app reads a key with the keyboard mapping it has when it gets round to the key, not the one in force when
    the key was sent: a key that comes right after its keycode was bound, or a keycode rebound or unbound right
    after its key, types the wrong character or nothing (seen under load with ``xdotool type``, which binds,
    presses and unbinds at once: 你好 arrived as 你, 第一行 as 第行). So each character gets a spare keycode of its
    own; the characters about to be typed are bound together, ``REMAP_PAUSE_S`` passes, and then their keys are
    pressed and released through XTEST. Bindings stay until the device closes (``close``), so a character typed
    again costs nothing; only when every pooled keycode is taken is the least recently used one rebound,
    ``REMAP_CLOSE_GRACE_S`` after its last key at the earliest. Characters pressed as single keys (``key é``) take the
    same way, since ``xdotool key`` unbinds at once too."""

    def __init__(self, display: str) -> None:
        from Xlib import display as xdisplay

        self.display = display
        self.conn = xdisplay.Display(display)
        self.free = self._spares()
        """spare keycodes not bound yet, taken from the end"""
        self.bound: dict[str, int] = {}
        """character -> its keycode, least recently typed first"""
        self.last_key: dict[int, float] = {}
        """keycode -> when its key was last sent (time.monotonic)"""

    def _spares(self) -> list[int]:
        first = self.conn.display.info.min_keycode
        count = self.conn.display.info.max_keycode - first + 1
        spare = [first + i for i, syms in enumerate(self.conn.get_keyboard_mapping(first, count)) if not any(syms)]
        if not spare:
            raise DeviceError(f"the X keyboard map of {self.display} has no spare keycode to type characters outside "
                              "the keyboard with; set desktop.typing = 'clipboard'")
        # xdotool and other tools bind the lowest spare keycodes: the pool is the highest, taken highest first
        return spare[len(spare) - max(1, min(REMAP_POOL, len(spare) - REMAP_LEAVE)):]

    def _take(self, keep: set[str]) -> int | None:
        """A keycode to bind: a free one, else the least recently used one not bound to a character in ``keep``
        (``REMAP_CLOSE_GRACE_S`` after its last key at the earliest), else None."""
        while self.free:
            code = self.free.pop()
            if not any(self.conn.get_keyboard_mapping(code, 1)[0]):
                return code  # else another client bound it since we looked: skip it
        for char, code in self.bound.items():
            if char not in keep:
                del self.bound[char]
                wait = self.last_key.get(code, 0.0) + REMAP_CLOSE_GRACE_S - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                return code
        return None

    def _bind_ahead(self, text: str) -> int:
        """Bind keycodes for the characters at the start of ``text`` that have none, as many as the pool holds
        without rebinding one of them, and wait ``REMAP_PAUSE_S`` if any was bound. How many characters of
        ``text`` can now be typed (at least one)."""
        stretch: set[str] = set()
        bound_any = False
        end = 0
        for char in text:
            if char not in self.bound:
                code = self._take(stretch)
                if code is None:
                    break
                cp = ord(char)
                keysym = cp if cp < 0x100 else 0x01000000 | cp  # X11's keysyms for Unicode
                self.conn.change_keyboard_mapping(code, [(keysym, keysym)])
                self.bound[char] = code
                bound_any = True
            stretch.add(char)
            end += 1
        if end == 0:
            raise DeviceError(f"every spare keycode of {self.display} was taken by another client; "
                              "set desktop.typing = 'clipboard'")
        if bound_any:
            self.conn.sync()
            time.sleep(REMAP_PAUSE_S)
        return end

    def type(self, text: str, delay_s: float = 0.0) -> None:
        """Type ``text`` (no character of it on the keyboard), ``delay_s`` between characters."""
        from Xlib import X
        from Xlib.ext import xtest

        while text:
            ready = self._bind_ahead(text)
            for char in text[:ready]:
                code = self.bound.pop(char)
                self.bound[char] = code  # the most recently used now
                xtest.fake_input(self.conn, X.KeyPress, code)
                xtest.fake_input(self.conn, X.KeyRelease, code)
                self.conn.sync()
                self.last_key[code] = time.monotonic()
                if delay_s:
                    time.sleep(delay_s)
            text = text[ready:]

    def close(self) -> None:
        """Unbind every keycode this typer bound, ``REMAP_CLOSE_GRACE_S`` after the last key at the earliest, and
        close its connection."""
        try:
            wait = max(self.last_key.values(), default=0.0) + REMAP_CLOSE_GRACE_S - time.monotonic()
            if self.bound and wait > 0:
                time.sleep(wait)
            for code in self.bound.values():
                self.conn.change_keyboard_mapping(code, [(0, 0)])
            self.conn.sync()
        finally:
            self.bound.clear()
            self.conn.close()


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
            # through keycodes of our own that keep their character until the device closes (RemappedTyper).
            for run in re.findall(r"[\x00-\x7f]+|[^\x00-\x7f]+", text):
                if not run.isascii():
                    self._remapped().type(run, self.config.type_delay_ms / 1000)
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

    def close(self) -> None:
        """Give back the keycodes bound for typing (the X connection's own thread: the device's executor)."""
        typer, self._typer = self._typer, None
        if typer is not None:
            typer.close()

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
        from pyautogui import _pyautogui_x11 as x11

        keys = keys if hotkey else keys[:1]
        names = [pyautogui_key(k) for k in keys]
        if len(keys) == 1 and len(keys[0]) == 1 and not x11.keyboardMapping.get(names[0]):
            self._remapped().type(keys[0])  # a character without a key: a keycode of its own, as when typing
            return
        if all(x11.keyboardMapping.get(n) for n in names):
            if hotkey:
                self.pg.hotkey(*names)
            else:
                self.pg.press(names[0])
            return
        # pyautogui silently ignores keys it has no keycode for (a named key outside its table, or a character
        # held with modifiers): xdotool maps a spare keycode to the keysym instead.
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

"""Test infrastructure: a fake Android device daemon (adbd) with a simulated phone screen.

NOT part of handeye and never needed by users. It exists because no phone, emulator or Android
image can run on the CI machines (docs/devices.md, Android, "Tested how"), yet the Android driver
must be tested through the real adb server and adbutils, byte for byte as it talks to a phone.

``FakeAdbd`` listens on a TCP port and speaks the adbd side of the ADB wire protocol: 24-byte
message headers (command, arg0, arg1, payload length, payload checksum, magic), CNXN (AUTH
only to refuse, see ``authorized``), and streams opened by OPEN and driven by OKAY / WRTE / CLSE,
one WRTE in flight per stream. A real adb server adopts it with ``adb connect 127.0.0.1:PORT``.
Services: ``shell:CMD`` and ``exec:CMD`` (both run CMD through a small shell: ``;``-separated commands, quotes,
``$?``), and ``shell,pty:CMD`` (a terminal: ``\\r\\n`` line ends; refused when ``phone.pty_service`` is False, as
adbd before Android 7 refuses it); anything else is closed, as adbd closes services it does not know. The
``shell_v2`` feature is not announced, so
adbutils' ``shell2`` falls back to ``CMD; echo X4EXIT:$?``.

``FakePhone`` is the simulated phone, drawn with numpy/OpenCV at its current logical display size
(the override size when one is set, axes swapped for rotation 1 and 3). Screens: ``home`` (buttons
``notes``, ``list``, ``counter``), ``notes`` (a text field), ``list`` (40 rows that scroll),
``settings``, ``browser`` and ``login`` (a user field, a password field, a Sign in button). Commands it answers
like a phone:

- ``screencap`` (raw: 12-byte header before SDK 28, 16-byte with the colour space after; format 1 =
  RGBA_8888) and ``screencap -p`` (PNG)
- ``wm size`` / ``wm density`` (with "Override" lines when set), ``dumpsys display`` (DisplayInfo
  ``rotation N`` and ``mCurrentOrientation=N`` lines), ``getprop [NAME]``
- ``input tap|swipe|keyevent|text|keycombination`` (change the screen, logged in ``events``)
- ``uiautomator dump [FILE]`` and ``cat FILE``; ``am start -n`` / ``am start -a ...VIEW -d URL``,
  ``monkey -p PKG``, ``pm list packages``, ``am force-stop``
- ADBKeyboard: ``am broadcast -a ADB_INPUT_B64 --es msg B64`` (types only while its IME is the
  current one and a field is focused), ``ime list [-a] -s``, ``ime enable|set``,
  ``settings get|put secure default_input_method``
- optional AUTH refusal (``authorized=False``): the adb server lists the phone as "unauthorized"
- system state: ``settings get|put|list NAMESPACE [KEY [VALUE]]`` (``phone.settings``, keyed
  "namespace/key": Wi-Fi ``global/wifi_on``, Bluetooth ``global/bluetooth_on``, brightness
  ``system/screen_brightness`` 0-255), ``svc wifi|bluetooth enable|disable``; the foreground
  activity in the formats of ``dumpsys activity activities`` (``mResumedActivity`` /
  ``topResumedActivity``) and ``dumpsys window`` (``mCurrentFocus`` / ``mFocusedApp``)
- files (``phone.files``, path -> bytes): ``ls DIR``, ``cat FILE``, ``rm [-rf] PATH``, ``mkdir -p``;
  the notes app's Save button writes the field to ``/sdcard/Notes/<first line>.txt`` (the rest of the
  text is the file's content), and ``am force-stop com.example.notes`` drops the unsaved draft
- the settings screen: switches ``wifi`` and ``bluetooth`` (tapping one flips its setting) and a
  ``brightness`` SeekBar (a tap sets the brightness from where it lands; the outer 5 % at either
  end is padding that gives 0 or 255, as a slider's thumb inset does)
- ``getevent -p`` / ``-lp`` and a running ``getevent [-l] [-t]`` that streams what the person does with
  ``phone.finger`` (``tests/support/fake_getevent.py``: taps, long presses, swipes, keys, soft-keyboard typing);
  ``getevent_access = "denied"`` answers as a phone that keeps /dev/input from the shell user, ``"missing"`` as
  one without getevent; ``dumpsys input_method`` (``mInputShown``, the keyboard's ``visibleTopInsets``: the
  bottom ``KEYBOARD_FRACTION`` of the screen while a field has the focus)
- ``echo``, ``true``; anything else answers ``/system/bin/sh: X: inaccessible or not found``, 127

State for tests: ``phone.events`` (what the user "did"), ``phone.commands`` (every shell command),
``phone.screen``, ``phone.text`` (the notes field), ``phone.login`` (the login fields), ``phone.current_ime``,
``phone.frame()`` (the RGB frame screencap would return now), ``phone.captures`` / ``phone.dumps`` (how many
screencaps and UI dumps were answered). ``FakeAdbd.stop()`` drops every connection (a phone unplugged).
"""

from __future__ import annotations

import base64
import io
import queue
import re
import shlex
import socket
import struct
import threading
from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np

from tests.support.fake_getevent import KEYBOARD_FRACTION, FakeInput

A_CNXN, A_OPEN, A_OKAY, A_CLSE, A_WRTE, A_AUTH = (
    int.from_bytes(name, "little") for name in (b"CNXN", b"OPEN", b"OKAY", b"CLSE", b"WRTE", b"AUTH")
)
VERSION_SKIP_CHECKSUM = 0x01000001
MAX_PAYLOAD = 256 * 1024
ADBKEYBOARD_IME = "com.android.adbkeyboard/.AdbIME"
LATIN_IME = "com.google.android.inputmethod.latin/com.android.inputmethod.latin.LatinIME"
PACKAGES = {
    "com.example.notes": "notes",
    "com.example.list": "list",
    "com.android.settings": "settings",
    "com.android.chrome": "browser",
    "com.example.launcher": "home",
    "com.example.login": "login",
}
KEYCODES = {
    "3": "HOME", "4": "BACK", "187": "APP_SWITCH", "61": "TAB", "62": "SPACE", "66": "ENTER", "67": "DEL", "111": "ESCAPE",
    "112": "FORWARD_DEL", "122": "MOVE_HOME", "123": "MOVE_END",
}
LIST_ROWS = 40
NOTES_DIR = "/sdcard/Notes"
SLIDER_PAD = 0.05
"""Fraction of the brightness slider's width at each end that is padding (taps there give 0 or 255)."""
ACTIVITY = "MainActivity"


@dataclass
class Node:
    """One view of the simulated UI, in display pixels: what uiautomator dumps and taps hit."""

    id: str
    box: tuple[int, int, int, int]
    text: str = ""
    desc: str = ""
    cls: str = "android.widget.Button"
    clickable: bool = True
    color: tuple[int, int, int] = (200, 200, 200)
    password: bool = False


@dataclass
class FakePhone:
    """The simulated phone's state; every field can be changed by a test between calls."""

    physical: tuple[int, int] = (1080, 2400)
    override: tuple[int, int] | None = None
    density: int = 420
    density_override: int | None = None
    rotation: int = 0
    sdk: int = 34
    model: str = "FakePhone"
    adbkeyboard: bool = True
    current_ime: str = LATIN_IME
    screen_on: bool = True
    authorized: bool = True
    """When False, the phone asks the adb server for AUTH and never accepts it (state "unauthorized")."""
    wm_physical_report: tuple[int, int] | None = None
    """When set, ``wm size`` reports this physical size instead of the real one (a lying device)."""
    truncate_raw: bool = False
    """When set, raw screencap output is cut short (a broken pipe)."""
    screen: str = "home"
    text: str = ""
    focused: bool = False
    counter: int = 0
    list_offset: int = 0
    selected: str = ""
    url: str = ""
    back_stack: list[str] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    settings: dict[str, str] = field(default_factory=lambda: {
        "global/wifi_on": "1", "global/bluetooth_on": "0", "global/airplane_mode_on": "0",
        "system/screen_brightness": "102", "system/screen_brightness_mode": "0",
    })
    login: dict[str, str] = field(default_factory=lambda: {"user": "", "password": ""})
    login_focus: str = ""
    """The login field with the focus ("user", "password" or "")."""
    signed_in: str = ""
    getevent_access: str = "ok"
    """"ok", "denied" (the shell user may not read /dev/input) or "missing" (no getevent command)."""
    pty_service: bool = True
    """Whether ``shell,pty:`` is offered (adbd of Android 7+)."""
    captures: int = 0
    dumps: int = 0
    lock: threading.RLock = field(default_factory=threading.RLock)
    finger: FakeInput = field(init=False, repr=False)
    """The input devices and the person's finger (``tests/support/fake_getevent.py``)."""

    def __post_init__(self) -> None:
        self.finger = FakeInput(self)

    # -- geometry -----------------------------------------------------------------------------
    @property
    def display_size(self) -> tuple[int, int]:
        """The current logical display size: override or physical, swapped for rotation 1 and 3."""
        w, h = self.override or self.physical
        return (h, w) if self.rotation % 2 else (w, h)

    # -- the UI -------------------------------------------------------------------------------
    def nodes(self) -> list[Node]:
        w, h = self.display_size

        def box(x1: float, y1: float, x2: float, y2: float) -> tuple[int, int, int, int]:
            return round(x1 * w), round(y1 * h), round(x2 * w), round(y2 * h)

        if self.screen == "home":
            return [
                Node("notes", box(0.1, 0.15, 0.9, 0.25), "Notes", "Open notes", color=(66, 133, 244)),
                Node("list", box(0.1, 0.30, 0.9, 0.40), "List", "Open list", color=(52, 168, 83)),
                Node("counter", box(0.1, 0.45, 0.9, 0.55), f"Count {self.counter}", color=(251, 188, 5)),
                Node("corner", box(0.95, 0.95, 1.0, 1.0), "", "corner", color=(234, 67, 53)),
            ]
        if self.screen == "notes":
            shown = self.text.replace("\n", " ")
            return [
                Node("field", box(0.05, 0.15, 0.95, 0.23), shown, "Note", "android.widget.EditText",
                     color=(255, 255, 200) if self.focused else (235, 235, 235)),
                Node("save", box(0.6, 0.3, 0.95, 0.38), "Save", color=(66, 133, 244)),
            ]
        if self.screen == "list":
            rows = []
            row_h = h // 10
            for i in range(LIST_ROWS):
                top = round(0.1 * h) + i * row_h - self.list_offset
                if top + row_h <= round(0.1 * h) or top >= h:
                    continue
                shade = 250 if i % 2 == 0 else 225
                rows.append(Node(f"row{i}", (0, max(top, round(0.1 * h)), w, min(top + row_h, h)), f"Item {i}",
                                 cls="android.widget.TextView", color=(shade, shade, 255 if i == 0 else shade)))
            return rows
        if self.screen == "settings":
            def switch(key: str, name: str, y: float) -> Node:
                on = self.settings.get(f"global/{key}_on") == "1"
                return Node(key, box(0.05, y, 0.95, y + 0.07), f"{name} {'On' if on else 'Off'}", name,
                            "android.widget.Switch", color=(66, 133, 244) if on else (189, 189, 189))
            level = int(self.settings.get("system/screen_brightness", "0"))
            return [
                switch("wifi", "Wi-Fi", 0.15),
                switch("bluetooth", "Bluetooth", 0.25),
                Node("brightness", box(0.05, 0.40, 0.95, 0.46), f"Brightness {round(level * 100 / 255)}%",
                     "Brightness level", "android.widget.SeekBar", color=(255, 224, 130)),
            ]
        if self.screen == "browser":
            return [Node("urlbar", box(0.02, 0.05, 0.98, 0.1), self.url, cls="android.widget.EditText")]
        if self.screen == "login":
            return [
                Node("user", box(0.05, 0.15, 0.95, 0.23), self.login["user"], "User name", "android.widget.EditText",
                     color=(255, 255, 200) if self.login_focus == "user" else (235, 235, 235)),
                Node("password", box(0.05, 0.27, 0.95, 0.35), "•" * len(self.login["password"]), "Password",
                     "android.widget.EditText", password=True,
                     color=(255, 255, 200) if self.login_focus == "password" else (235, 235, 235)),
                Node("signin", box(0.3, 0.40, 0.7, 0.48), "Sign in", color=(66, 133, 244)),
            ]
        return []

    def frame(self) -> np.ndarray:
        """The RGB frame ``screencap`` returns now (H x W x 3, uint8)."""
        w, h = self.display_size
        img = np.zeros((h, w, 3), np.uint8)
        if not self.screen_on:
            return img
        img[:] = (250, 250, 250)
        img[: round(0.04 * h)] = (30, 30, 30)  # status bar
        scale = max(0.4, min(w, h) / 600)
        title = {"home": "Home", "notes": "Notes", "list": "List", "settings": "Settings", "browser": "Browser",
                 "login": "Login"}
        cv2.putText(img, title.get(self.screen, self.screen), (round(0.05 * w), round(0.09 * h)),
                    cv2.FONT_HERSHEY_SIMPLEX, scale, (0, 0, 0), max(1, round(scale * 2)))
        for node in self.nodes():
            x1, y1, x2, y2 = node.box
            cv2.rectangle(img, (x1, y1), (x2 - 1, y2 - 1), node.color, -1)
            label = "".join(c if 32 <= ord(c) < 127 else "?" for c in node.text)[:40]
            if label:
                cv2.putText(img, label, (x1 + 10, (y1 + y2) // 2 + 10), cv2.FONT_HERSHEY_SIMPLEX, scale * 0.8,
                            (0, 0, 0), max(1, round(scale * 1.5)))
        if self.keyboard_shown:
            img[round((1 - KEYBOARD_FRACTION) * h):] = (60, 60, 60)
        return img

    @property
    def keyboard_shown(self) -> bool:
        """The soft keyboard is up while a text field has the focus."""
        return (self.screen == "notes" and self.focused) or (self.screen == "login" and bool(self.login_focus))

    def type_char(self, c: str) -> None:
        """A character from the soft keyboard into the focused field."""
        if self.screen == "notes" and self.focused:
            self.text += c
        elif self.screen == "login" and self.login_focus:
            self.login[self.login_focus] += c
        self.events.append({"kind": "keyboard", "char": c, "typed": self.keyboard_shown})

    def hit(self, x: float, y: float) -> Node | None:
        for node in self.nodes():
            x1, y1, x2, y2 = node.box
            if x1 <= x < x2 and y1 <= y < y2:
                return node
        return None

    def go(self, screen: str) -> None:
        if screen != self.screen:
            self.back_stack.append(self.screen)
            self.screen = screen
        self.focused = False
        self.login_focus = ""

    def tap(self, x: float, y: float) -> None:
        node = self.hit(x, y)
        self.events.append({"kind": "tap", "x": x, "y": y, "target": node.id if node else None})
        if node is None:
            return
        if node.id in ("notes", "list"):
            self.go(node.id)
        elif node.id == "counter":
            self.counter += 1
        elif node.id == "field":
            self.focused = True
        elif node.id.startswith("row"):
            self.selected = node.id
        elif node.id == "save":
            self.save_note()
        elif node.id in ("user", "password"):
            self.login_focus = node.id
        elif node.id == "signin":
            self.signed_in, self.login_focus = self.login["user"], ""
        elif node.id in ("wifi", "bluetooth"):
            key = f"global/{node.id}_on"
            self.settings[key] = "0" if self.settings.get(key) == "1" else "1"
        elif node.id == "brightness":
            x1, _, x2, _ = node.box
            pad = SLIDER_PAD * (x2 - x1)
            frac = min(1.0, max(0.0, (x - x1 - pad) / (x2 - x1 - 2 * pad)))
            self.settings["system/screen_brightness"] = str(round(frac * 255))

    def save_note(self) -> None:
        """The notes app's Save: ``<first line>.txt`` under NOTES_DIR holds the rest; the field clears."""
        title, _, body = self.text.partition("\n")
        title = title.strip()
        if not title or "/" in title:
            self.events.append({"kind": "save", "saved": None})
            return
        path = f"{NOTES_DIR}/{title}.txt"
        self.files[path] = body.encode("utf-8")
        self.events.append({"kind": "save", "saved": path})
        self.text = ""
        self.focused = False

    @property
    def foreground(self) -> str:
        """The resumed activity's component, ``package/.Activity``."""
        pkg = {v: k for k, v in PACKAGES.items()}.get(self.screen, "com.example.launcher")
        return f"{pkg}/.{ACTIVITY}"

    def swipe(self, x1: float, y1: float, x2: float, y2: float, duration_ms: int) -> None:
        if abs(x2 - x1) < 10 and abs(y2 - y1) < 10 and duration_ms >= 500:
            node = self.hit(x1, y1)
            self.events.append({"kind": "long_press", "x": x1, "y": y1, "duration_ms": duration_ms,
                                "target": node.id if node else None})
            if node is not None and node.id.startswith("row"):
                self.selected = "long:" + node.id
            return
        self.events.append({"kind": "swipe", "x1": x1, "y1": y1, "x2": x2, "y2": y2, "duration_ms": duration_ms})
        if self.screen == "list":
            w, h = self.display_size
            most = max(0, round(0.1 * h) + LIST_ROWS * (h // 10) - h)
            self.list_offset = int(min(most, max(0, self.list_offset + (y1 - y2))))

    def key(self, code: str) -> None:
        name = KEYCODES.get(code, code.removeprefix("KEYCODE_"))
        self.events.append({"kind": "key", "key": name})
        if name in ("BACK", "ESCAPE"):
            if self.focused or self.login_focus:
                self.focused, self.login_focus = False, ""
            elif self.back_stack:
                self.screen = self.back_stack.pop()
        elif name == "HOME":
            self.go("home")
            self.back_stack.clear()
        elif name == "WAKEUP":
            self.screen_on = True
        elif self.focused and name == "DEL":
            self.text = self.text[:-1]
        elif self.focused and name == "ENTER":
            self.text += "\n"
        elif self.focused and name == "TAB":
            self.text += "\t"
        elif self.focused and name == "SPACE":
            self.text += " "

    def dump_xml(self) -> bytes:
        w, h = self.display_size
        attrs = (
            'index="{i}" text="{text}" resource-id="{rid}" class="{cls}" package="{pkg}" content-desc="{desc}" '
            'checkable="false" checked="false" clickable="{click}" enabled="true" focusable="{click}" '
            'focused="{foc}" scrollable="false" long-clickable="false" password="{pw}" selected="false" '
            'bounds="[{x1},{y1}][{x2},{y2}]"'
        )
        esc = lambda s: (s.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")  # noqa: E731
                         .replace(">", "&gt;"))
        pkg = {v: k for k, v in PACKAGES.items()}.get(self.screen, "com.example.launcher")
        inner = "".join(
            f"<node {attrs.format(i=i, text=esc(n.text), rid=pkg + ':id/' + n.id, cls=n.cls, pkg=pkg, desc=esc(n.desc), click=str(n.clickable).lower(), pw=str(n.password).lower(), foc=str((n.id == 'field' and self.focused) or n.id == self.login_focus).lower(), x1=n.box[0], y1=n.box[1], x2=n.box[2], y2=n.box[3])} />"  # noqa: E501
            for i, n in enumerate(self.nodes())
        )
        root = attrs.format(i=0, text="", rid="", cls="android.widget.FrameLayout", pkg=pkg, desc="",
                            click="false", pw="false", foc="false", x1=0, y1=0, x2=w, y2=h)
        xml = (f"<?xml version='1.0' encoding='UTF-8' standalone='yes' ?><hierarchy rotation=\"{self.rotation}\">"
               f"<node {root}>{inner}</node></hierarchy>")
        return xml.encode("utf-8")

    # -- the shell ----------------------------------------------------------------------------
    def run_shell(self, line: str) -> bytes:
        """Run a command line as ``sh -c`` would (enough of it for the driver): output bytes."""
        out = io.BytesIO()
        rc = 0
        with self.lock:
            self.commands.append(line)
            for segment in _split_segments(line):
                segment = _expand_status(segment, rc)
                try:
                    argv = shlex.split(segment)
                except ValueError:
                    out.write(b"/system/bin/sh: syntax error: unterminated quoted string\n")
                    rc = 1
                    continue
                if not argv:
                    continue
                data, rc = self.command(argv)
                out.write(data)
        return out.getvalue()

    def command(self, argv: list[str]) -> tuple[bytes, int]:
        name, args = argv[0], argv[1:]
        handler = getattr(self, "_cmd_" + name.replace("-", "_"), None)
        if handler is None:
            return f"/system/bin/sh: {name}: inaccessible or not found\n".encode(), 127
        result = handler(args)
        if isinstance(result, tuple):
            return result
        return (result.encode() if isinstance(result, str) else result), 0

    def _cmd_echo(self, args: list[str]) -> str:
        return " ".join(args) + "\n"

    def _cmd_true(self, args: list[str]) -> str:
        return ""

    def _cmd_getevent(self, args: list[str]) -> tuple[bytes, int]:
        # `getevent -p` / `-lp`: the input devices (tests/support/fake_getevent.py); a running getevent streams
        # (``event_stream``) and never reaches here
        if self.getevent_access == "missing":
            return b"/system/bin/sh: getevent: inaccessible or not found\n", 127
        if self.getevent_access == "denied":
            return b"".join(b"could not open /dev/input/event%d, Permission denied\n" % i for i in range(3)), 0
        if not any(a.startswith("-") and "p" in a for a in args):
            return b"getevent: only -p is answered here; a running getevent streams\n", 1
        return self.finger.listing(any(a.startswith("-") and "l" in a for a in args)).encode(), 0

    def event_stream(self, command: str, pty: bool) -> tuple[bytes, queue.Queue[bytes]] | None:
        """A running ``getevent`` (no ``-p``): (what it prints first, the queue of its event lines); None for any
        other command. Without access it prints why and then nothing, as getevent does."""
        try:
            argv = shlex.split(command)
        except ValueError:
            return None
        if argv[:1] != ["getevent"] or any(a.startswith("-") and "p" in a for a in argv[1:]):
            return None
        if self.getevent_access == "missing":
            return None
        with self.lock:
            self.commands.append(command)
        if self.getevent_access == "denied":
            line = "".join(f"could not open /dev/input/event{i}, Permission denied\n" for i in range(3))
            return line.encode(), queue.Queue()
        return self.finger.subscribe(argv[1:], pty)

    def _cmd_getprop(self, args: list[str]) -> str:
        props = {
            "ro.build.version.sdk": str(self.sdk),
            "ro.build.version.release": str(max(4, self.sdk - 20)),
            "ro.product.model": self.model,
            "ro.product.manufacturer": "Handeye",
            "ro.serialno": "FAKE0001",
        }
        if args:
            return props.get(args[0], "") + "\n"
        return "".join(f"[{k}]: [{v}]\n" for k, v in props.items())

    def _cmd_screencap(self, args: list[str]) -> bytes | tuple[bytes, int]:
        png = "-p" in args
        frame = self.frame()
        self.captures += 1
        rgba = np.dstack([frame, np.full(frame.shape[:2], 255, np.uint8)])
        if png:
            ok, buf = cv2.imencode(".png", cv2.cvtColor(rgba, cv2.COLOR_RGBA2BGRA))
            assert ok
            return buf.tobytes()
        h, w = frame.shape[:2]
        header = struct.pack("<III", w, h, 1) + (struct.pack("<I", 1) if self.sdk >= 28 else b"")
        data = header + rgba.tobytes()
        if self.truncate_raw:
            data = data[: len(data) // 2]
        return data

    def _cmd_wm(self, args: list[str]) -> str | tuple[bytes, int]:
        if args[:1] == ["size"]:
            if len(args) > 1:
                w, _, h = args[1].partition("x")
                self.override = None if args[1] == "reset" else (int(w), int(h))
                return ""
            pw, ph = self.wm_physical_report or self.physical
            text = f"Physical size: {pw}x{ph}\n"
            if self.override:
                text += f"Override size: {self.override[0]}x{self.override[1]}\n"
            return text
        if args[:1] == ["density"]:
            text = f"Physical density: {self.density}\n"
            if self.density_override:
                text += f"Override density: {self.density_override}\n"
            return text
        return b"usage: wm [size|density] ...\n", 255

    def _cmd_dumpsys(self, args: list[str]) -> str:
        if args[:1] == ["activity"] and args[1:2] in (["activities"], ["a"]):
            return self._dumpsys_activities()
        if args[:1] == ["window"]:
            return self._dumpsys_window()
        if args[:1] == ["input_method"]:
            return self._dumpsys_input_method()
        if args[:1] != ["display"]:
            return ""
        pw, ph = self.physical
        w, h = self.display_size
        return (
            "DISPLAY MANAGER (dumpsys display)\n"
            f"  mOnlyCode=false\n  Display Devices: size=1\n"
            f'  DisplayDeviceInfo{{"Built-in Screen": uniqueId="local:0", {pw} x {ph}, modeId 1, '
            f"density {self.density}, rotation 0, type INTERNAL, state ON}}\n"
            "  Logical Displays: size=1\n  Display 0:\n"
            f'    mBaseDisplayInfo=DisplayInfo{{"Built-in Screen", displayId 0, real {pw} x {ph}, rotation 0}}\n'
            f'    mOverrideDisplayInfo=DisplayInfo{{"Built-in Screen", displayId 0, real {w} x {h}, '
            f"rotation {self.rotation}, density {self.density_override or self.density}}}\n"
            f"  mViewports=[DisplayViewport{{type=INTERNAL, valid=true, displayId=0, orientation={self.rotation}, "
            f"logicalFrame=Rect(0, 0 - {w}, {h}), deviceWidth={pw}, deviceHeight={ph}}}]\n"
            f"  mCurrentOrientation={self.rotation}\n"
        )

    def _dumpsys_activities(self) -> str:
        # the layout of Android 13/14 (topResumedActivity / ResumedActivity) with the older
        # mResumedActivity line too, so parsers of either era find it
        comp = self.foreground
        pkg = comp.split("/")[0]
        record = f"ActivityRecord{{7f3a2c1 u0 {comp} t{41 + len(self.back_stack)}}}"
        return (
            "ACTIVITY MANAGER ACTIVITIES (dumpsys activity activities)\n"
            "Display #0 (activities from top to bottom):\n"
            f"  * Task{{c1d2e3 #{41 + len(self.back_stack)} type=standard A=10123:{pkg} U=0 visible=true "
            "visibleRequested=true mode=fullscreen translucent=false sz=1}\n"
            f"    mLastPausedActivity: {record}\n"
            "    isSleeping=false\n"
            f"    topResumedActivity={record}\n"
            f"    mResumedActivity: {record}\n"
            "  Resumed activities in task display areas (from top to bottom):\n"
            f"    ResumedActivity: {record}\n"
        )

    def _dumpsys_input_method(self) -> str:
        # the lines of InputMethodManagerService and of the keyboard's InputMethodService dump that matter
        shown = self.keyboard_shown
        top = round((1 - KEYBOARD_FRACTION) * self.display_size[1])
        return (
            "Current Input Method Manager state:\n"
            f"  mCurMethodId={self.current_ime}\n"
            f"  mShowRequested={str(shown).lower()} mShowExplicitlyRequested=false mShowForced=false "
            f"mInputShown={str(shown).lower()}\n"
            "Input method service state:\n"
            f"  mInputStarted={str(shown).lower()} mInputViewStarted={str(shown).lower()}\n"
            "  Last computed insets:\n"
            f"    contentTopInsets={top} visibleTopInsets={top} touchableInsets=0 touchableRegion=SkRegion()\n"
        )

    def _dumpsys_window(self) -> str:
        comp = self.foreground
        return (
            "WINDOW MANAGER WINDOWS (dumpsys window windows)\n"
            f"  Window #0 Window{{4b5c6d7 u0 {comp}}}:\n"
            f"    mDisplayId=0 rootTaskId=41 mSession=Session{{a1b2c3 4242:u0a10123}} mClient=android.os.BinderProxy@1\n"
            f"  mCurrentFocus=Window{{4b5c6d7 u0 {comp}}}\n"
            f"  mFocusedApp=ActivityRecord{{7f3a2c1 u0 {comp} t41}}\n"
        )

    def _cmd_svc(self, args: list[str]) -> tuple[bytes, int]:
        if len(args) >= 2 and args[0] in ("wifi", "bluetooth") and args[1] in ("enable", "disable"):
            self.settings[f"global/{args[0]}_on"] = "1" if args[1] == "enable" else "0"
            return b"", 0
        return b"Available commands: svc wifi|bluetooth enable|disable\n", 1

    def _cmd_ls(self, args: list[str]) -> tuple[bytes, int]:
        paths = [a for a in args if not a.startswith("-")] or ["/"]
        out, rc = [], 0
        for path in paths:
            path = path.rstrip("/") or "/"
            if path in self.files:
                out.append(path)
                continue
            prefix = path + "/"
            names = sorted({p[len(prefix):].split("/")[0] for p in self.files if p.startswith(prefix)})
            if not names and not self._is_dir(path):
                out.append(f"ls: {path}: No such file or directory")
                rc = 1
            out.extend(n for n in names if n)
        return "".join(line + "\n" for line in out).encode(), rc

    def _is_dir(self, path: str) -> bool:
        return path in ("/", "/sdcard", "/data/local/tmp") or path + "/" in self.files \
            or any(p.startswith(path + "/") for p in self.files)

    def _cmd_mkdir(self, args: list[str]) -> str:
        for a in args:
            if not a.startswith("-") and not self._is_dir(a.rstrip("/")):
                self.files[a.rstrip("/") + "/"] = b""  # a marker: an empty directory
        return ""

    def _cmd_input(self, args: list[str]) -> tuple[bytes, int]:
        if not args:
            return b"Usage: input [<source>] <command> [<arg>...]\n", 1
        sub, rest = args[0], args[1:]
        try:
            if sub == "tap":
                self.tap(float(rest[0]), float(rest[1]))
            elif sub == "swipe":
                x1, y1, x2, y2 = (float(v) for v in rest[:4])
                self.swipe(x1, y1, x2, y2, int(rest[4]) if len(rest) > 4 else 300)
            elif sub == "keyevent":
                for code in rest:
                    if code != "--longpress":
                        self.key(code)
            elif sub == "keycombination":
                self.events.append({"kind": "keycombination", "keys": [KEYCODES.get(c, c.removeprefix("KEYCODE_"))
                                                                       for c in rest]})
            elif sub == "text":
                if len(rest) != 1:
                    return b"Error: text takes one argument\n", 1
                text = rest[0].replace("%s", " ")
                if any(ord(c) > 126 for c in text):
                    # what a phone does with characters its virtual key map lacks
                    return b"Exception occurred while executing 'text':\njava.lang.IllegalArgumentException\n", 1
                self.events.append({"kind": "text", "text": text})
                if self.focused:
                    self.text += text
            else:
                return f"Error: Unknown command: {sub}\n".encode(), 1
        except (IndexError, ValueError):
            return f"Error: bad arguments for input {sub}\n".encode(), 1
        return b"", 0

    def _cmd_uiautomator(self, args: list[str]) -> tuple[bytes, int]:
        if args[:1] != ["dump"]:
            return b"Usage: uiautomator dump [--compressed] [file]\n", 1
        path = next((a for a in args[1:] if not a.startswith("-")), "/sdcard/window_dump.xml")
        self.files[path] = self.dump_xml()
        self.dumps += 1
        return f"UI hierchary dumped to: {path}\n".encode(), 0

    def _cmd_cat(self, args: list[str]) -> tuple[bytes, int]:
        if args and args[0] in self.files:
            return self.files[args[0]], 0
        return f"cat: {args[0] if args else ''}: No such file or directory\n".encode(), 1

    def _cmd_rm(self, args: list[str]) -> str:
        recursive = any(a.startswith("-") and "r" in a for a in args)
        for a in args:
            if a.startswith("-"):
                continue
            self.files.pop(a, None)
            if recursive:
                for p in [p for p in self.files if p.startswith(a.rstrip("/") + "/")]:
                    del self.files[p]
        return ""

    def _cmd_monkey(self, args: list[str]) -> tuple[bytes, int]:
        pkg = args[args.index("-p") + 1] if "-p" in args else ""
        if pkg not in PACKAGES:
            return b"** No activities found to run, monkey aborted.\n", 251
        self.events.append({"kind": "launch", "package": pkg})
        self.go(PACKAGES[pkg])
        return b"  bash arg: -p\n  bash arg: " + pkg.encode() + b"\nEvents injected: 1\n", 0

    def _cmd_am(self, args: list[str]) -> tuple[bytes, int]:
        if args[:1] == ["start"]:
            if "-n" in args:
                component = args[args.index("-n") + 1]
                pkg = component.split("/")[0]
                if pkg not in PACKAGES or component.split("/")[-1] not in (".MainActivity", pkg + ".MainActivity"):
                    return (f"Starting: Intent {{ cmp={component} }}\nError type 3\nError: Activity class "
                            f"{{{component}}} does not exist.\n").encode(), 0
                self.events.append({"kind": "launch", "package": pkg, "component": component})
                self.go(PACKAGES[pkg])
                return f"Starting: Intent {{ cmp={component} }}\n".encode(), 0
            if "-d" in args:
                self.url = args[args.index("-d") + 1]
                self.events.append({"kind": "view", "url": self.url})
                self.go("browser")
                return f"Starting: Intent {{ act=android.intent.action.VIEW dat={self.url} }}\n".encode(), 0
            return b"Error: no intent\n", 1
        if args[:1] == ["broadcast"]:
            action = args[args.index("-a") + 1] if "-a" in args else ""
            if action == "ADB_INPUT_B64" and self.adbkeyboard:
                msg = args[args.index("--es") + 2] if "--es" in args else ""
                text = base64.b64decode(msg).decode("utf-8")
                typed = self.current_ime == ADBKEYBOARD_IME and self.focused
                self.events.append({"kind": "broadcast", "text": text, "typed": typed})
                if typed:
                    self.text += text
            return f"Broadcasting: Intent {{ act={action} flg=0x400000 }}\nBroadcast completed: result=0\n".encode(), 0
        if args[:1] == ["force-stop"]:
            if args[1:2] == ["com.example.notes"]:
                self.text, self.focused = "", False
            if len(args) > 1 and PACKAGES.get(args[1]) == self.screen and self.screen != "home":
                self.screen = self.back_stack.pop() if self.back_stack else "home"
            return b"", 0
        return b"Error: unknown am command\n", 1

    def _cmd_pm(self, args: list[str]) -> tuple[bytes, int]:
        if args[:2] != ["list", "packages"]:
            return b"Error: unknown pm command\n", 1
        filters = [a for a in args[2:] if not a.startswith("-")]
        pkgs = sorted(set(PACKAGES) | ({"com.android.adbkeyboard"} if self.adbkeyboard else set()))
        return "".join(f"package:{p}\n" for p in pkgs if not filters or filters[0] in p).encode(), 0

    def _cmd_ime(self, args: list[str]) -> tuple[bytes, int]:
        installed = [LATIN_IME] + ([ADBKEYBOARD_IME] if self.adbkeyboard else [])
        if args[:1] == ["list"]:
            return "".join(i + "\n" for i in installed).encode(), 0
        if args[:1] in (["enable"], ["set"]) and len(args) > 1:
            if args[1] not in installed:
                return f"Unknown input method {args[1]} cannot be enabled for user #0\n".encode(), 0
            if args[0] == "set":
                self.current_ime = args[1]
                self.events.append({"kind": "ime", "ime": args[1]})
                return f"Input method {args[1]} selected for user #0\n".encode(), 0
            return f"Input method {args[1]}: already enabled for user #0\n".encode(), 0
        return b"Error: unknown ime command\n", 1

    def _cmd_settings(self, args: list[str]) -> tuple[bytes, int]:
        if args[:3] == ["get", "secure", "default_input_method"]:
            return (self.current_ime + "\n").encode(), 0
        if args[:3] == ["put", "secure", "default_input_method"] and len(args) > 3:
            self.current_ime = args[3]
            return b"", 0
        if len(args) >= 2 and args[1] not in ("system", "secure", "global"):
            return f"Invalid namespace '{args[1]}'\n".encode(), 255
        if args[:1] == ["get"] and len(args) == 3:
            return (self.settings.get(f"{args[1]}/{args[2]}", "null") + "\n").encode(), 0
        if args[:1] == ["put"] and len(args) >= 4:
            self.settings[f"{args[1]}/{args[2]}"] = args[3]
            return b"", 0
        if args[:1] == ["list"] and len(args) == 2:
            prefix = args[1] + "/"
            return "".join(f"{k[len(prefix):]}={v}\n" for k, v in sorted(self.settings.items())
                           if k.startswith(prefix)).encode(), 0
        return b"usage: settings [--user N] get|put|delete|list NAMESPACE [KEY [VALUE]]\n", 255


def _split_segments(line: str) -> list[str]:
    """Split a command line at ``;`` outside quotes."""
    out, cur, quote = [], [], ""
    i = 0
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\" and quote == '"' and i + 1 < len(line):
                cur.append(line[i : i + 2])
                i += 2
                continue
            if c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c == "\\" and i + 1 < len(line):
            cur.append(line[i : i + 2])
            i += 2
            continue
        elif c == ";":
            out.append("".join(cur))
            cur = []
            i += 1
            continue
        cur.append(c)
        i += 1
    out.append("".join(cur))
    return out


def _expand_status(segment: str, rc: int) -> str:
    """Replace ``$?`` outside single quotes with the last exit status."""
    return re.sub(r"\$\?(?=(?:[^']*'[^']*')*[^']*$)", str(rc), segment)


class FakeAdbd:
    """A TCP server speaking the adbd side of the ADB protocol for one ``FakePhone``.

    Use: ``with FakeAdbd(FakePhone()) as adbd: client.connect(adbd.address)``.
    """

    def __init__(self, phone: FakePhone | None = None, port: int = 0) -> None:
        self.phone = phone or FakePhone()
        self._port = port
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    @property
    def port(self) -> int:
        return self._port

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self._port}"

    def __enter__(self) -> FakeAdbd:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self._port))
        s.listen(8)
        self._port = s.getsockname()[1]
        self._listener = s
        t = threading.Thread(target=self._accept, args=(s,), daemon=True, name="fake-adbd-accept")
        t.start()
        self._threads.append(t)

    def stop(self) -> None:
        """Close the listener and every connection, as if the phone were unplugged."""
        listener, self._listener = self._listener, None
        if listener is not None:
            try:
                listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            listener.close()
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()
        for t in self._threads:
            t.join(timeout=2)
        self._threads = []

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._listener is None:
                    conn.close()
                    return
                self._conns.append(conn)
            threading.Thread(target=_Connection(conn, self.phone).serve, daemon=True, name="fake-adbd").start()


class _Connection:
    """One transport (the adb server's connection): streams multiplexed over one socket."""

    def __init__(self, sock: socket.socket, phone: FakePhone) -> None:
        self.sock = sock
        self.phone = phone
        self.send_lock = threading.Lock()
        self.max_payload = 4096
        self.checksum = True
        self.next_id = 1
        self.acks: dict[int, threading.Semaphore] = {}
        self.closed: set[int] = set()

    def send(self, cmd: int, arg0: int, arg1: int, data: bytes = b"") -> None:
        check = 0
        if self.checksum and data:
            check = int(np.frombuffer(data, np.uint8).sum(dtype=np.uint64)) & 0xFFFFFFFF
        header = struct.pack("<6I", cmd, arg0, arg1, len(data), check, cmd ^ 0xFFFFFFFF)
        with self.send_lock:
            self.sock.sendall(header + data)

    def recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return bytes(buf)

    def serve(self) -> None:
        try:
            while True:
                cmd, arg0, arg1, length, _check, _magic = struct.unpack("<6I", self.recv_exact(24))
                data = self.recv_exact(length) if length else b""
                if cmd == A_CNXN:
                    self.max_payload = min(arg1, MAX_PAYLOAD)
                    self.checksum = arg0 < VERSION_SKIP_CHECKSUM
                    banner = f"device::ro.product.name=fake;ro.product.model={self.phone.model};ro.product.device=fake;features=cmd"  # noqa: E501
                    if self.phone.authorized:
                        self.send(A_CNXN, min(arg0, VERSION_SKIP_CHECKSUM), self.max_payload, banner.encode())
                    else:
                        self.send(A_AUTH, 1, 0, bytes(range(20)))  # a token to sign
                elif cmd == A_AUTH:
                    if arg0 == 2:  # a signature: refuse it by asking again, as adbd does for unknown keys
                        self.send(A_AUTH, 1, 0, bytes(range(1, 21)))
                    # arg0 == 3 is the host's public key: the phone now shows its prompt, which nobody accepts
                elif cmd == A_OPEN:
                    local = self.next_id
                    self.next_id += 1
                    service = data.rstrip(b"\0").decode("utf-8", "replace")
                    self.acks[local] = threading.Semaphore(0)
                    threading.Thread(target=self.run_stream, args=(local, arg0, service), daemon=True).start()
                elif cmd == A_OKAY:
                    sem = self.acks.get(arg1)
                    if sem is not None:
                        sem.release()
                elif cmd == A_WRTE:
                    self.send(A_OKAY, arg1, arg0)  # stdin is accepted and ignored
                elif cmd == A_CLSE:
                    self.closed.add(arg1)
                    sem = self.acks.pop(arg1, None)
                    if sem is not None:
                        sem.release()
        except (OSError, ConnectionError, struct.error):
            pass
        finally:
            try:
                self.sock.close()
            except OSError:
                pass

    def run_stream(self, local: int, remote: int, service: str) -> None:
        try:
            kind, _, command = service.partition(":")
            base, *options = kind.split(",")
            offered = not options or (base == "shell" and self.phone.pty_service
                                      and all(o in ("pty", "raw") for o in options))
            if base not in ("shell", "exec") or not command or not offered:
                self.send(A_CLSE, 0, remote)  # a service adbd does not offer: refused
                return
            pty = "pty" in options
            self.send(A_OKAY, local, remote)
            stream = self.phone.event_stream(command, pty) if base == "shell" else None
            if stream is not None:
                self.pump(local, remote, *stream)
                return
            output = self.phone.run_shell(command)
            if pty:
                output = output.replace(b"\n", b"\r\n")
            if self.write(local, remote, output):
                self.send(A_CLSE, local, remote)
        except OSError:
            pass
        finally:
            self.acks.pop(local, None)

    def write(self, local: int, remote: int, output: bytes) -> bool:
        """Send output on a stream, one WRTE in flight; False when the host closed the stream meanwhile."""
        sem = self.acks[local]
        for start in range(0, len(output), self.max_payload):
            if local in self.closed:
                return False
            self.send(A_WRTE, local, remote, output[start : start + self.max_payload])
            if not sem.acquire(timeout=10) or local in self.closed:
                return False
        return True

    def pump(self, local: int, remote: int, header: bytes, lines: queue.Queue[bytes]) -> None:
        """A command that keeps running (getevent): its header, then its lines as they come, until the host closes
        the stream."""
        try:
            if header and not self.write(local, remote, header):
                return
            while local not in self.closed:
                try:
                    data = lines.get(timeout=0.1)
                except queue.Empty:
                    continue
                while True:  # what came meanwhile goes in the same write
                    try:
                        data += lines.get_nowait()
                    except queue.Empty:
                        break
                if not self.write(local, remote, data):
                    return
        finally:
            self.phone.finger.unsubscribe(lines)

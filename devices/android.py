"""The Android device: one phone (or emulator) driven over ADB through an adb server, with adbutils.

Frames come from ``screencap`` through the ``exec:`` service (adb's ``exec-out``: a raw byte pipe,
no shell or terminal in between). The default ``capture = "raw"`` reads the uncompressed pixels,
a 12-byte header (width, height, pixel format) or, since Android 9, a 16-byte one (plus the colour
space), then width x height pixels; it skips the PNG encoding that makes ``screencap -p`` take
up to seconds on phones (peers.md section 4, item 10). ``capture = "png"`` (or a pixel format this
driver does not know) uses ``screencap -p``. A frame that is cut short, does not decode, or is
entirely black (screen off, or a FLAG_SECURE window) is a DeviceError, never a silent frame.

Coordinate contract (docs/actions.md): Android's input space is the display's current logical size
in its current orientation: the override size when ``wm size`` set one, else the physical size,
with the axes swapped for rotation 1 and 3. ``screencap`` delivers exactly that space, so the frame
header is the input size. When the frame size changes (first frame, rotation, ``wm size``), the
driver cross-checks it against ``wm size`` and ``dumpsys display``; when they disagree it logs a
warning and trusts the frame. ``input tap`` / ``swipe`` take floats (Android parses them with
Float.parseFloat), so they get the continuous point X = x * W, Y = y * H, written with two decimals;
x = 1 (the far edge of the last pixel) is moved 0.01 px inside the screen.

Actions and their ADB commands:

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
  (https://github.com/senzhk/ADBKeyBoard): the driver switches to its IME, sends the text as a
  base64 broadcast (``ADB_INPUT_B64``), and restores the user's IME. ``keyboard = "auto"`` uses
  ``input text`` for ASCII and ADBKeyboard for the rest; without ADBKeyboard non-ASCII text is a
  DeviceError that says how to install it. Characters are never dropped silently.
- key: ``input keyevent KEYCODE_*`` (Escape is KEYCODE_ESCAPE, which Android's key map turns into
  BACK when the app does not handle it; "Home" is the text cursor's MOVE_HOME, not the home screen).
- hotkey: ``input keycombination`` (Android 13+, API 33); older phones raise UnsupportedAction.
- open_app: ``am start -n PKG/ACTIVITY`` for a component, else ``monkey -p PKG -c
  android.intent.category.LAUNCHER 1``; names are looked up in ``app_aliases`` first.
- open_url: ``am start -a android.intent.action.VIEW -d URL``; back / home: KEYCODE_BACK / HOME.

Every ADB call has a timeout (``call_timeout_s``). When the phone is offline or gone from the adb
server, calls are retried with backoff (network serials ``host:port`` are re-``connect``-ed) until
``offline_deadline_s``, then DeviceDisconnected. An action whose connection broke *after* it was
sent is not re-sent (it may have happened): that is a DeviceError saying so.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import math
import re
import shlex
import socket
import struct
import subprocess
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any

import numpy as np

from devices.actions import Action, ActionKind, ScrollDirection
from devices.base import ActionResult, AsyncContextDevice, Box, Observation
from devices.errors import (
    DeviceDisconnected,
    DeviceError,
    DeviceTimeout,
    DeviceUnavailable,
    InvalidAction,
    UnsupportedAction,
)
from devices.frames import decode, small_gray
from devices.settle import SettleConfig, SettleResult, wait_until_settled

log = logging.getLogger(__name__)

ANDROID_ACTIONS = frozenset(
    {
        ActionKind.CLICK,
        ActionKind.LONG_PRESS,
        ActionKind.DRAG,
        ActionKind.SCROLL,
        ActionKind.TYPE,
        ActionKind.KEY,
        ActionKind.HOTKEY,
        ActionKind.OPEN_APP,
        ActionKind.OPEN_URL,
        ActionKind.BACK,
        ActionKind.HOME,
        ActionKind.WAIT,
    }
)

ADBKEYBOARD_IME = "com.android.adbkeyboard/.AdbIME"
ADBKEYBOARD_HELP = (
    "install ADBKeyboard (https://github.com/senzhk/ADBKeyBoard: `adb install ADBKeyboard.apk`); the driver "
    "switches to it only while typing and restores your keyboard afterwards"
)
DEFAULT_APP_ALIASES: tuple[tuple[str, str], ...] = (
    ("settings", "com.android.settings"),
    ("chrome", "com.android.chrome"),
    ("camera", "com.android.camera2"),
    ("contacts", "com.android.contacts"),
    ("phone", "com.android.dialer"),
    ("messages", "com.google.android.apps.messaging"),
    ("calendar", "com.google.android.calendar"),
    ("clock", "com.google.android.deskclock"),
    ("files", "com.google.android.documentsui"),
    ("play store", "com.android.vending"),
)
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
#: raw screencap pixel formats (android PixelFormat): bytes per pixel
_PIXEL_FORMATS = {1: 4, 2: 4, 3: 3, 4: 2, 5: 4}
_RC_MARKER = b"HANDEYE_RC="
_PACKAGE_RE = re.compile(r"^[A-Za-z][\w]*(\.[A-Za-z_][\w]*)+$")
_TEXT_CHUNK = 100
_MAX_SWIPE_SCREENS = 0.6
_DUMP_PATH = "/data/local/tmp/handeye_window_dump.xml"


@dataclass(frozen=True, slots=True)
class AndroidConfig:
    serial: str = ""
    """Device serial (``adb devices``), e.g. emulator-5554 or 192.168.1.20:5555; empty = the only connected one."""
    adb_host: str = "127.0.0.1"
    """Host of the adb server."""
    adb_port: int = 5037
    """Port of the adb server (adb's ANDROID_ADB_SERVER_PORT)."""
    start_server: bool = True
    """Start a local adb server on ``adb_port`` when none is listening (as the adb command does)."""
    capture: str = "raw"
    """Frame capture: "raw" (uncompressed ``screencap``, fast) or "png" (``screencap -p``)."""
    keyboard: str = "auto"
    """Text entry: "auto" (ASCII by ``input text``, the rest by ADBKeyboard), "adbkeyboard" or "ascii"."""
    ime_switch_wait_s: float = 0.3
    """Seconds to let ADBKeyboard bind to the focused field after switching to it."""
    call_timeout_s: float = 20.0
    """Seconds any single ADB call may take before the phone counts as hung."""
    offline_deadline_s: float = 30.0
    """Seconds to keep retrying (and reconnecting) a phone that went offline before DeviceDisconnected."""
    drag_s: float = 0.6
    """Duration of a drag's swipe in seconds."""
    scroll_swipe_s: float = 0.5
    """Duration of each scroll swipe in seconds (slow swipes fling less)."""
    allow_black_frames: bool = False
    """Accept all-black frames (apps that really are black) instead of raising DeviceError."""
    app_aliases: tuple[tuple[str, str], ...] = DEFAULT_APP_ALIASES
    """(name, package or package/activity) pairs for open_app; names match case-insensitively."""

    def __post_init__(self) -> None:
        if self.capture not in ("raw", "png"):
            raise ValueError(f"android.capture={self.capture!r} must be 'raw' or 'png'")
        if self.keyboard not in ("auto", "adbkeyboard", "ascii"):
            raise ValueError(f"android.keyboard={self.keyboard!r} must be 'auto', 'adbkeyboard' or 'ascii'")
        if not 0 < self.adb_port < 65536:
            raise ValueError(f"android.adb_port={self.adb_port} is not a TCP port")
        if self.call_timeout_s <= 0 or self.offline_deadline_s < 0 or self.ime_switch_wait_s < 0:
            raise ValueError(
                "android timeouts must be positive seconds (offline_deadline_s and ime_switch_wait_s may be 0)"
            )
        if self.drag_s <= 0 or self.scroll_swipe_s <= 0:
            raise ValueError("android.drag_s and android.scroll_swipe_s must be positive seconds")
        for pair in self.app_aliases:
            if len(pair) != 2 or not all(isinstance(p, str) and p for p in pair):
                raise ValueError(f"android.app_aliases entries must be (name, package) pairs, got {pair!r}")


@dataclass(frozen=True, slots=True)
class AndroidDeviceInfo:
    """One entry of the adb server's device list."""

    serial: str
    state: str
    model: str = ""
    product: str = ""
    transport_id: str = ""

    def __str__(self) -> str:
        extra = f"  model:{self.model}" if self.model else ""
        hint = {
            "unauthorized": "  (unlock the phone and accept the USB debugging prompt)",
            "offline": "  (replug the cable, or `adb connect` it again)",
        }.get(self.state, "")
        return f"{self.serial}  {self.state}{extra}{hint}"


@dataclass(frozen=True, slots=True)
class Geometry:
    """How a frame relates to the phone's input space (see the module docstring)."""

    frame_size: tuple[int, int]
    input_size: tuple[int, int]
    physical_size: tuple[int, int] | None
    override_size: tuple[int, int] | None
    rotation: int | None
    consistent: bool
    """False when ``wm size`` / ``dumpsys display`` disagreed with the frame (the frame was trusted)."""

    def to_input(self, x: float, y: float) -> tuple[float, float]:
        """A normalized frame point as input coordinates: the continuous point (x * W, y * H), with the
        far edge moved 0.01 px inside, rounded to 1/100 px for the command line."""
        w, h = self.input_size
        return round(min(x * w, w - 0.01), 2), round(min(y * h, h - 0.01), 2)


@dataclass(frozen=True, slots=True)
class UiElement:
    """One node of the uiautomator hierarchy; ``box`` is normalized to the frame."""

    box: Box
    text: str
    resource_id: str
    content_desc: str
    class_name: str
    package: str
    clickable: bool
    password: bool


# -- parsing helpers (pure, unit-tested) -----------------------------------------------------------
def parse_raw_screencap(data: bytes) -> np.ndarray:
    """The RGB frame of raw ``screencap`` output (12- or 16-byte header); DeviceError if malformed."""
    if len(data) < 12:
        raise DeviceError(f"screencap returned {len(data)} bytes, fewer than its 12-byte header")
    w, h, fmt = struct.unpack_from("<3I", data)
    if fmt not in _PIXEL_FORMATS:
        raise _UnknownPixelFormat(fmt)
    if not (0 < w <= 16384 and 0 < h <= 16384):
        raise DeviceError(f"screencap header says {w}x{h} pixels, which is not a screen size")
    bpp = _PIXEL_FORMATS[fmt]
    size = w * h * bpp
    if len(data) == 16 + size:
        header = 16
    elif len(data) == 12 + size:
        header = 12
    else:
        raise DeviceError(
            f"screencap returned {len(data)} bytes for a {w}x{h} frame of {bpp} bytes per pixel "
            f"(expected {12 + size} or {16 + size}): the frame was cut short or is corrupt"
        )
    px = np.frombuffer(data, np.uint8, count=size, offset=header)
    if fmt in (1, 2):
        return px.reshape(h, w, 4)[:, :, :3].copy()
    if fmt == 3:
        return px.reshape(h, w, 3).copy()
    if fmt == 5:
        return px.reshape(h, w, 4)[:, :, 2::-1].copy()
    v = px.view("<u2").reshape(h, w).astype(np.uint16)  # RGB_565
    r, g, b = (v >> 11) & 0x1F, (v >> 5) & 0x3F, v & 0x1F
    return np.dstack([(r << 3) | (r >> 2), (g << 2) | (g >> 4), (b << 3) | (b >> 2)]).astype(np.uint8)


def parse_wm_size(text: str) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
    """(physical, override) sizes from ``wm size`` output; None where a line is missing."""

    def find(label: str) -> tuple[int, int] | None:
        m = re.search(label + r" size:\s*(\d+)\s*x\s*(\d+)", text)
        return (int(m.group(1)), int(m.group(2))) if m else None

    return find("Physical"), find("Override")


def parse_rotation(text: str) -> int | None:
    """The current display rotation (0-3) from ``dumpsys display`` output, None if not found."""
    for pattern in (
        r"mCurrentOrientation=(\d)",
        r"\borientation=(\d)",
        r"mOverrideDisplayInfo=DisplayInfo\{[^}]*?\brotation (\d)",
    ):
        m = re.search(pattern, text)
        if m:
            return int(m.group(1)) % 4
    return None


def expected_input_size(
    physical: tuple[int, int] | None, override: tuple[int, int] | None, rotation: int | None
) -> tuple[int, int] | None:
    """The logical display size in the current orientation, per ``wm size`` and the rotation."""
    size = override or physical
    if size is None:
        return None
    return (size[1], size[0]) if (rotation or 0) % 2 else size


def geometry_for(
    frame_size: tuple[int, int], wm_output: str, display_output: str
) -> Geometry:
    """Cross-check the frame size with ``wm size`` and ``dumpsys display``; the frame wins on disagreement."""
    physical, override = parse_wm_size(wm_output)
    rotation = parse_rotation(display_output)
    expected = expected_input_size(physical, override, rotation)
    consistent = expected == frame_size
    if not consistent:
        log.warning(
            "the frame is %dx%d but wm size (physical %s, override %s) at rotation %s gives %s; "
            "using the frame's size as the input space",
            *frame_size, physical, override, rotation, expected,
        )
    return Geometry(frame_size, frame_size, physical, override, rotation, consistent)


def input_text_commands(text: str) -> list[str]:
    """The shell commands that type ASCII ``text`` with ``input text`` (and key events for \\n, \\t).

    ``input text`` turns ``%s`` into a space, so spaces are sent as ``%s`` and a literal ``%``
    followed by ``s`` is split across two commands. Each argument is shell-quoted.
    """
    bad = sorted({c for c in text if not (32 <= ord(c) < 127 or c in "\n\t")})
    if bad:
        raise DeviceError(f"input text cannot type {''.join(bad)!r} (only printable ASCII, newline and tab)")
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


def parse_ui_dump(xml_text: str, size: tuple[int, int]) -> list[UiElement]:
    """Elements of a uiautomator dump, bounds normalized by the input-space ``size`` (W, H)."""
    start = xml_text.find("<?xml")
    start = xml_text.find("<hierarchy") if start < 0 else start
    end = xml_text.rfind("</hierarchy>")
    if start < 0 or end < 0:
        raise DeviceError(f"uiautomator returned no hierarchy: {xml_text.strip()[:200]!r}")
    try:
        root = ET.fromstring(xml_text[start : end + len("</hierarchy>")])
    except ET.ParseError as e:
        raise DeviceError(f"uiautomator returned XML that does not parse: {e}") from e
    w, h = size
    out = []
    for node in root.iter("node"):
        m = re.match(r"\[(-?\d+),(-?\d+)\]\[(-?\d+),(-?\d+)\]", node.get("bounds", ""))
        if not m:
            continue
        x1, y1, x2, y2 = (int(v) for v in m.groups())
        out.append(
            UiElement(
                box=Box(x1 / w, y1 / h, x2 / w, y2 / h).clipped(),
                text=node.get("text", ""),
                resource_id=node.get("resource-id", ""),
                content_desc=node.get("content-desc", ""),
                class_name=node.get("class", ""),
                package=node.get("package", ""),
                clickable=node.get("clickable") == "true",
                password=node.get("password") == "true",
            )
        )
    return out


class _UnknownPixelFormat(DeviceError):
    def __init__(self, fmt: int) -> None:
        super().__init__(f"screencap uses pixel format {fmt}, which this driver does not decode")


class _NotDelivered(Exception):
    """The command never reached the phone (offline, not listed, adb server down): safe to retry."""


class _Broken(Exception):
    """The connection broke after the command was sent: it may or may not have run."""


class _Refused(Exception):
    """The phone refused the service (e.g. ``exec:`` before Android 5)."""


# -- the adb server --------------------------------------------------------------------------------
def _server_listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def _client(host: str, port: int, start_server: bool = False) -> Any:
    """An adbutils client for the server at host:port, checked (never auto-started elsewhere)."""
    try:
        import adbutils
    except ImportError as e:  # pragma: no cover - depends on the install
        raise DeviceUnavailable("adbutils is not installed; run `pip install 'handeye[android]'`") from e
    if not _server_listening(host, port):
        if start_server and host in ("127.0.0.1", "localhost", "::1"):
            exe = adbutils.adb_path()
            try:
                subprocess.run([exe, "-P", str(port), "start-server"], timeout=30, capture_output=True, check=True)
            except (OSError, subprocess.SubprocessError) as e:
                raise DeviceUnavailable(f"could not start an adb server on port {port} with {exe}: {e}") from e
        if not _server_listening(host, port):
            raise DeviceUnavailable(
                f"no adb server is listening at {host}:{port}; start one with `adb -P {port} start-server` "
                "(or set android.adb_host / android.adb_port)"
            )
    return adbutils.AdbClient(host, port, socket_timeout=30)


def list_devices(host: str = "127.0.0.1", port: int = 5037) -> list[AndroidDeviceInfo]:
    """Every device the adb server at host:port knows, in any state (for ``agent devices``)."""
    client = _client(host, port)
    try:
        infos = client.list(extended=True)
    except Exception as e:
        raise DeviceUnavailable(f"the adb server at {host}:{port} did not list its devices: {e}") from e
    return [
        AndroidDeviceInfo(
            i.serial, i.state, i.tags.get("model", ""), i.tags.get("product", ""), i.tags.get("transport_id", "")
        )
        for i in infos
    ]


class AndroidDevice(AsyncContextDevice):
    """One Android phone. Use as ``async with AndroidDevice(AndroidConfig(serial=...)) as dev:``."""

    name = "android"

    def __init__(self, config: AndroidConfig | None = None, settle_config: SettleConfig | None = None) -> None:
        self.config = config or AndroidConfig()
        self.settle_config = settle_config or SettleConfig()
        self._client: Any = None
        self.serial = ""
        self.props: dict[str, str] = {}
        self.density: int | None = None
        self.geometry: Geometry | None = None
        self._capture_mode = self.config.capture
        self._adbkeyboard: bool | None = None
        self._last_grab: tuple[np.ndarray, bytes | None] | None = None
        self._fresh: tuple[np.ndarray, bytes | None] | None = None
        self._aliases = {name.lower(): target for name, target in self.config.app_aliases}

    # -- life cycle -----------------------------------------------------------------------------
    @property
    def supported_actions(self) -> frozenset[ActionKind]:
        return ANDROID_ACTIONS

    async def start(self) -> None:
        if self._client is not None:
            raise DeviceError("the android device is already started")
        cfg = self.config
        self._client = await asyncio.to_thread(_client, cfg.adb_host, cfg.adb_port, cfg.start_server)
        try:
            self.serial = await asyncio.to_thread(self._pick_serial)
            for prop in ("ro.build.version.sdk", "ro.build.version.release", "ro.product.model",
                         "ro.product.manufacturer"):
                self.props[prop] = (await self.shell(f"getprop {prop}", "read the phone's properties")).strip()
            density = await self.shell("wm density", "read the screen density")
            m = re.search(r"Override density:\s*(\d+)", density) or re.search(r"density:\s*(\d+)", density)
            self.density = int(m.group(1)) if m else None
            if cfg.keyboard != "ascii":
                imes = await self.shell("ime list -a -s", "list the input methods")
                self._adbkeyboard = ADBKEYBOARD_IME in imes.split()
                if cfg.keyboard == "adbkeyboard" and not self._adbkeyboard:
                    raise DeviceUnavailable(
                        f"android.keyboard = 'adbkeyboard' but it is not installed on {self.serial}; {ADBKEYBOARD_HELP}"
                    )
        except BaseException:
            self._client = None
            raise

    async def close(self) -> None:
        self._client = None
        self._fresh = self._last_grab = None

    def _pick_serial(self) -> str:
        """The serial to drive, or DeviceUnavailable saying which phones there are and what to do."""
        cfg = self.config
        infos = self._client.list(extended=True)
        if cfg.serial and not any(i.serial == cfg.serial for i in infos) and _is_network_serial(cfg.serial):
            try:
                self._client.connect(cfg.serial, timeout=cfg.call_timeout_s)
            except Exception as e:  # reported below with the device list
                log.debug("adb connect %s failed: %s", cfg.serial, e)
            infos = self._client.list(extended=True)
        listing = ", ".join(f"{i.serial} ({i.state})" for i in infos) or "none"
        where = f"the adb server at {cfg.adb_host}:{cfg.adb_port}"
        if cfg.serial:
            match = [i for i in infos if i.serial == cfg.serial]
            if not match:
                raise DeviceUnavailable(
                    f"no phone with serial {cfg.serial!r} at {where}; connected: {listing}. "
                    "Check `adb devices`, the cable, or `adb connect HOST:PORT` for network phones"
                )
            info = match[0]
        else:
            if not infos:
                raise DeviceUnavailable(
                    f"no phone is connected to {where}: plug one in with USB debugging enabled "
                    "(Settings > Developer options), or `adb connect HOST:PORT`"
                )
            ready = [i for i in infos if i.state == "device"]
            if len(ready) > 1:
                raise DeviceUnavailable(
                    f"{len(ready)} phones are connected ({listing}); choose one with android.serial "
                    "or --device android:SERIAL"
                )
            info = ready[0] if ready else infos[0]
        if info.state == "unauthorized":
            raise DeviceUnavailable(
                f"phone {info.serial} has not authorized this computer: unlock it and accept the "
                "'Allow USB debugging?' prompt (tick 'Always allow'); if no prompt shows, revoke USB debugging "
                "authorizations in Developer options and reconnect"
            )
        if info.state == "offline":
            raise DeviceUnavailable(
                f"phone {info.serial} is offline: reconnect it (replug the cable, `adb reconnect`, or "
                "`adb disconnect` then `adb connect HOST:PORT` for network phones)"
            )
        if info.state != "device":
            raise DeviceUnavailable(f"phone {info.serial} is in state {info.state!r}, not ready for commands")
        return info.serial

    def describe(self) -> dict[str, Any]:
        g = self.geometry
        return {
            "kind": "android",
            "serial": self.serial,
            "model": self.props.get("ro.product.model", ""),
            "manufacturer": self.props.get("ro.product.manufacturer", ""),
            "android_version": self.props.get("ro.build.version.release", ""),
            "sdk": self.props.get("ro.build.version.sdk", ""),
            "density": self.density,
            "physical_size": list(g.physical_size) if g and g.physical_size else None,
            "override_size": list(g.override_size) if g and g.override_size else None,
            "rotation": g.rotation if g else None,
            "input_size": list(g.input_size) if g else None,
            "capture": self._capture_mode,
            "keyboard": self.config.keyboard,
            "adbkeyboard": self._adbkeyboard,
        }

    @property
    def sdk(self) -> int:
        try:
            return int(self.props.get("ro.build.version.sdk", "0"))
        except ValueError:
            return 0

    # -- ADB calls ------------------------------------------------------------------------------
    def _exec_sync(self, service: str, timeout: float) -> bytes:
        """Run one device service through the adb server and read its output until it closes."""
        import adbutils

        cfg = self.config
        if not _server_listening(cfg.adb_host, cfg.adb_port):
            raise _NotDelivered(f"the adb server at {cfg.adb_host}:{cfg.adb_port} is not running")
        try:
            conn = self._client.make_connection(timeout=timeout)
        except adbutils.AdbError as e:
            raise _NotDelivered(f"cannot reach the adb server: {e}") from e
        try:
            try:
                conn.send_command(f"host:transport:{self.serial}")
                conn.check_okay()
            except (adbutils.AdbError, OSError) as e:
                raise _NotDelivered(str(e) or type(e).__name__) from e
            try:
                conn.send_command(service)
                conn.check_okay()
            except adbutils.AdbError as e:
                message = str(e)
                if "closed" in message:
                    raise _Refused(message) from e
                raise _NotDelivered(message) from e
            except OSError as e:
                raise _NotDelivered(str(e) or type(e).__name__) from e
            sock = conn.conn
            sock.settimeout(timeout)
            buf = bytearray()
            chunk = bytearray(1 << 20)
            view = memoryview(chunk)
            while True:
                try:
                    n = sock.recv_into(view)
                except socket.timeout as e:
                    raise DeviceTimeout(
                        f"the phone did not finish {service.split(':', 1)[-1][:60]!r} within {timeout} s "
                        "(raise android.call_timeout_s if it is only slow)"
                    ) from e
                except OSError as e:
                    raise _Broken(str(e)) from e
                if not n:
                    return bytes(buf)
                buf += view[:n]
        finally:
            conn.close()

    async def _call(self, service: str, what: str, *, idempotent: bool = True, timeout: float | None = None) -> bytes:
        """Run a service with the timeout and offline retries described in the module docstring."""
        if self._client is None:
            raise DeviceError(f"cannot {what}: the android device is not started; call `await device.start()` first")
        timeout = timeout or self.config.call_timeout_s
        start = time.monotonic()
        delay = 0.2
        warned = False
        while True:
            try:
                return await asyncio.wait_for(asyncio.to_thread(self._exec_sync, service, timeout), timeout + 5)
            except asyncio.TimeoutError as e:
                raise DeviceTimeout(f"cannot {what}: adb did not answer within {timeout} s") from e
            except _Refused as e:
                raise DeviceError(f"cannot {what}: the phone refused the service ({e})") from e
            except _Broken as e:
                if not idempotent:
                    raise DeviceError(
                        f"the connection to {self.serial} broke while it was told to {what} ({e}); "
                        "the action may or may not have happened: observe the screen again"
                    ) from e
                reason = f"connection lost ({e})"
            except _NotDelivered as e:
                reason = str(e)
            elapsed = time.monotonic() - start
            if elapsed >= self.config.offline_deadline_s:
                raise DeviceDisconnected(
                    f"cannot {what}: phone {self.serial} has been unreachable for {elapsed:.1f} s ({reason}); "
                    "check the cable or network, `adb devices`, and `adb connect HOST:PORT` for network phones"
                )
            if not warned:
                log.warning("phone %s is unreachable (%s); retrying for up to %.0f s",
                            self.serial, reason, self.config.offline_deadline_s)
                warned = True
            if _is_network_serial(self.serial):
                await asyncio.to_thread(self._reconnect)
            remaining = self.config.offline_deadline_s - (time.monotonic() - start)
            await asyncio.sleep(max(0.0, min(delay, remaining)))
            delay = min(delay * 2, 2.0)

    def _reconnect(self) -> None:
        cfg = self.config
        if not _server_listening(cfg.adb_host, cfg.adb_port):
            return
        try:
            states = {i.serial: i.state for i in self._client.list()}
            if states.get(self.serial) == "device":
                return
            if self.serial in states:
                # adb keeps a dropped network transport "offline" and retries it only every ~10 s:
                # drop it and connect afresh
                self._client.disconnect(self.serial)
            self._client.connect(self.serial, timeout=min(3.0, cfg.call_timeout_s))
        except Exception as e:  # the next attempt reports the state
            log.debug("adb connect %s: %s", self.serial, e)

    async def shell_rc(self, command: str, what: str, *, idempotent: bool = True) -> tuple[str, int]:
        """Run a shell command; (output with stderr, exit status)."""
        raw = await self._call(f"shell:{command}; echo {_RC_MARKER.decode()}$?", what, idempotent=idempotent)
        i = raw.rfind(_RC_MARKER)
        if i < 0:
            raise DeviceError(f"cannot {what}: the shell's answer lacks its exit status: {raw[-200:]!r}")
        try:
            rc = int(raw[i + len(_RC_MARKER) :].strip() or b"-1")
        except ValueError:
            rc = -1
        return raw[:i].decode("utf-8", "replace"), rc

    async def shell(self, command: str, what: str, *, idempotent: bool = True) -> str:
        """Run a shell command that must succeed; its output, or DeviceError with the output."""
        out, rc = await self.shell_rc(command, what, idempotent=idempotent)
        if rc != 0:
            raise DeviceError(f"cannot {what}: `{command[:80]}` exited with {rc}: {out.strip()[:300]}")
        return out

    # -- frames ---------------------------------------------------------------------------------
    async def _capture(self) -> tuple[np.ndarray, bytes | None]:
        """(RGB frame, PNG bytes when the capture was PNG)."""
        if self._capture_mode == "raw":
            try:
                data = await self._call("exec:screencap", "take a screenshot")
                frame, png = parse_raw_screencap(data), None
            except _UnknownPixelFormat as e:
                log.warning("%s; capturing PNG from now on", e)
                self._capture_mode = "png"
                return await self._capture()
        else:
            png = await self._call("exec:screencap -p", "take a screenshot")
            if not png.startswith(b"\x89PNG"):
                raise DeviceError(f"screencap -p returned {len(png)} bytes that are not a PNG: {png[:120]!r}")
            frame = decode(png)
        if not self.config.allow_black_frames and not frame.any():
            raise DeviceError(
                f"the screenshot of {self.serial} is entirely black: the screen is off or locked (wake it with "
                "`adb shell input keyevent KEYCODE_WAKEUP`), or the app shows a secure window (FLAG_SECURE); "
                "set android.allow_black_frames = true for apps that really are black"
            )
        await self._check_geometry((frame.shape[1], frame.shape[0]))
        return frame, png

    async def _check_geometry(self, frame_size: tuple[int, int]) -> None:
        if self.geometry is not None and self.geometry.frame_size == frame_size:
            return
        wm = await self.shell("wm size", "read the screen size")
        display = await self.shell("dumpsys display", "read the display rotation")
        self.geometry = geometry_for(frame_size, wm, display)

    async def observe(self) -> Observation:
        fresh, self._fresh = self._fresh, None
        if fresh is not None:
            (frame, png), source = fresh, "settle"
        else:
            (frame, png), source = await self._capture(), "capture"
        g = self.geometry
        assert g is not None
        meta = {
            "serial": self.serial,
            "input_size": list(g.input_size),
            "rotation": g.rotation,
            "geometry_consistent": g.consistent,
            "frame_source": source,
            "capture": self._capture_mode,
        }
        return Observation(frame=frame, meta=meta, encoded=png, encoding="png" if png is not None else None)

    async def grab_small(self) -> np.ndarray:
        """A small gray frame for settling; the full capture is kept for the next observe."""
        frame, png = await self._capture()
        self._last_grab = (frame, png)
        return small_gray(frame, self.settle_config.width)

    async def settle(self) -> SettleResult:
        self._fresh = None
        result = await wait_until_settled(self.grab_small, self.settle_config)
        if result.settled and self._last_grab is not None:
            self._fresh = self._last_grab
        self._last_grab = None
        return result

    async def _geometry(self) -> Geometry:
        if self.geometry is None:
            await self._capture()
        assert self.geometry is not None
        return self.geometry

    async def ui_elements(self) -> list[UiElement]:
        """The screen's accessibility nodes from ``uiautomator dump`` (slow on phones: 1-3 s)."""
        out = ""
        for attempt in range(2):
            out, rc = await self.shell_rc(f"uiautomator dump {_DUMP_PATH}", "dump the UI hierarchy")
            if rc == 0 and "dumped to" in out:
                break
            if attempt == 1:
                raise DeviceError(f"uiautomator could not dump the UI hierarchy: {out.strip()[:300]}")
            await asyncio.sleep(0.5)  # "ERROR: could not get idle state" while the screen animates
        xml_text = await self.shell(f"cat {_DUMP_PATH}", "read the UI hierarchy")
        g = await self._geometry()
        return parse_ui_dump(xml_text, g.input_size)

    # -- actions --------------------------------------------------------------------------------
    async def act(self, action: Action) -> ActionResult:
        self._fresh = None
        kind = action.kind
        if kind not in ANDROID_ACTIONS:
            if kind in (ActionKind.FINISH, ActionKind.INFEASIBLE):
                raise InvalidAction(f"{kind.value} ends the episode and is not sent to a device")
            raise UnsupportedAction(
                f"the android device cannot {kind.value}; it supports "
                f"{', '.join(sorted(k.value for k in ANDROID_ACTIONS))}"
            )
        g = await self._geometry() if (action.point is not None or kind is ActionKind.SCROLL) else self.geometry
        commands: list[str] = []

        async def run(command: str, what: str) -> None:
            commands.append(command)
            out, rc = await self.shell_rc(command, what, idempotent=False)
            if rc != 0 or "Exception" in out or re.search(r"(^|\n)\s*Error", out):
                raise DeviceError(f"cannot {what}: `{command[:80]}` failed (exit {rc}): {out.strip()[:300]}")

        detail = ""
        if kind is ActionKind.CLICK:
            assert g is not None and action.point is not None
            x, y = g.to_input(action.point.x, action.point.y)
            await run(f"input tap {x:g} {y:g}", "tap")
        elif kind is ActionKind.LONG_PRESS:
            assert g is not None and action.point is not None
            x, y = g.to_input(action.point.x, action.point.y)
            await run(f"input swipe {x:g} {y:g} {x:g} {y:g} {round((action.duration_s or 1.0) * 1000)}", "long-press")
        elif kind is ActionKind.DRAG:
            assert g is not None and action.point is not None and action.end is not None
            x1, y1 = g.to_input(action.point.x, action.point.y)
            x2, y2 = g.to_input(action.end.x, action.end.y)
            await run(f"input swipe {x1:g} {y1:g} {x2:g} {y2:g} {round(self.config.drag_s * 1000)}", "drag")
        elif kind is ActionKind.SCROLL:
            assert g is not None
            for command in self._scroll_commands(action, g):
                await run(command, "scroll")
        elif kind is ActionKind.TYPE:
            if action.point is not None:
                assert g is not None
                x, y = g.to_input(action.point.x, action.point.y)
                await run(f"input tap {x:g} {y:g}", "tap before typing")
            detail = await self._type(action.text or "", run)
        elif kind is ActionKind.KEY:
            await run(f"input keyevent {keycode_for(action.keys[0])}", f"press {action.keys[0]}")
        elif kind is ActionKind.HOTKEY:
            codes = [keycode_for(k) for k in action.keys]
            if len(codes) == 1:
                await run(f"input keyevent {codes[0]}", "press a key")
            elif self.sdk and self.sdk < 33:
                raise UnsupportedAction(
                    f"hotkey {'+'.join(action.keys)} needs `input keycombination` (Android 13, API 33); "
                    f"this phone has API {self.sdk}"
                )
            else:
                await run("input keycombination " + " ".join(codes), "press a hotkey")
        elif kind is ActionKind.OPEN_APP:
            detail = await self._open_app(action.text or "", run)
        elif kind is ActionKind.OPEN_URL:
            url = action.text or ""
            if not re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", url):
                raise InvalidAction(f"cannot open {url!r}: the URL needs a scheme, for example https://example.com")
            await run(f"am start -a android.intent.action.VIEW -d {shlex.quote(url)}", f"open {url}")
        elif kind is ActionKind.BACK:
            await run("input keyevent KEYCODE_BACK", "go back")
        elif kind is ActionKind.HOME:
            await run("input keyevent KEYCODE_HOME", "go to the home screen")
        elif kind is ActionKind.WAIT:
            await asyncio.sleep(action.duration_s or 0.0)
        return ActionResult(action=action, detail=detail or "; ".join(commands))

    def _scroll_commands(self, action: Action, g: Geometry) -> list[str]:
        w, h = g.input_size
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
        ms = round(self.config.scroll_swipe_s * 1000)
        other = min(math.floor(px if vertical else py), (w if vertical else h) - 1)
        commands = []
        for _ in range(n):
            a, b = min(math.floor(start), span - 1), min(math.floor(end), span - 1)
            if vertical:
                commands.append(f"input swipe {other} {a} {other} {b} {ms}")
            else:
                commands.append(f"input swipe {a} {other} {b} {other} {ms}")
        return commands

    async def _type(self, text: str, run: Any) -> str:
        mode = self.config.keyboard
        ascii_ok = all(32 <= ord(c) < 127 or c in "\n\t" for c in text)
        if mode == "ascii" or (mode == "auto" and ascii_ok):
            if not ascii_ok:
                bad = "".join(sorted({c for c in text if not (32 <= ord(c) < 127 or c in "\n\t")}))
                raise DeviceError(f"cannot type {bad!r} with android.keyboard = 'ascii'; set it to 'auto' and "
                                  + ADBKEYBOARD_HELP)
            for command in input_text_commands(text):
                await run(command, "type text")
            return f"typed {len(text)} characters with input text"
        if not self._adbkeyboard:
            bad = "".join(sorted({c for c in text if not (32 <= ord(c) < 127 or c in "\n\t")}))
            raise DeviceError(
                f"cannot type {bad!r} on {self.serial}: `input text` only types ASCII and ADBKeyboard is not "
                f"installed; {ADBKEYBOARD_HELP}"
            )
        previous = (await self.shell("settings get secure default_input_method", "read the current keyboard")).strip()
        switched = previous != ADBKEYBOARD_IME
        try:
            if switched:
                await self.shell(f"ime enable {ADBKEYBOARD_IME}", "enable ADBKeyboard")
                await run(f"ime set {ADBKEYBOARD_IME}", "switch to ADBKeyboard")
                if self.config.ime_switch_wait_s:
                    await asyncio.sleep(self.config.ime_switch_wait_s)
            msg = base64.b64encode(text.encode("utf-8")).decode("ascii")
            out, rc = await self.shell_rc(f"am broadcast -a ADB_INPUT_B64 --es msg {msg}", "type text",
                                          idempotent=False)
            if rc != 0 or "Broadcast completed" not in out:
                raise DeviceError(f"ADBKeyboard did not take the text (exit {rc}): {out.strip()[:300]}")
        finally:
            if switched and previous and previous != "null":
                await self.shell(f"ime set {shlex.quote(previous)}", "restore the keyboard")
        return f"typed {len(text)} characters with ADBKeyboard"

    async def _open_app(self, name: str, run: Any) -> str:
        target = self._aliases.get(name.strip().lower(), name.strip())
        package = target.split("/")[0]
        if not _PACKAGE_RE.match(package):
            target = await self._package_for_label(name) or target
            package = target.split("/")[0]
        if not _PACKAGE_RE.match(package):
            known = ", ".join(sorted(self._aliases)) or "none"
            raise InvalidAction(
                f"cannot open app {name!r}: give a package name (com.example.app), a component "
                f"(com.example.app/.MainActivity) or one of the android.app_aliases ({known})"
            )
        if "/" in target:
            await run(f"am start -n {shlex.quote(target)}", f"start {target}")
        else:
            out, rc = await self.shell_rc(
                f"monkey -p {shlex.quote(target)} -c android.intent.category.LAUNCHER 1", f"launch {target}",
                idempotent=False,
            )
            if rc != 0 or "No activities found" in out or "aborted" in out:
                raise DeviceError(
                    f"cannot open app {name!r}: {target} is not installed on {self.serial} or has no launcher "
                    "activity (see `adb shell pm list packages`)"
                )
        return f"opened {target}"


    async def _package_for_label(self, label: str) -> str | None:
        """The installed package a label names, matched against package-name segments ("Notes" ->
        com.example.notes). Phones do not report app labels over adb without extra tools, so this is
        a name match; an ambiguous label is an error listing the candidates."""
        key = re.sub(r"[^a-z0-9]", "", label.lower())
        if not key:
            return None
        out, rc = await self.shell_rc("pm list packages", "list packages", idempotent=True)
        packages = [line.removeprefix("package:").strip() for line in out.splitlines() if line.startswith("package:")]
        hits = [p for p in packages if key in (seg.lower() for seg in p.split("."))]
        if len(hits) > 1:
            raise InvalidAction(f"app {label!r} could be any of {', '.join(hits)}; give the package name")
        return hits[0] if hits else None


def _is_network_serial(serial: str) -> bool:
    host, _, port = serial.rpartition(":")
    return bool(host) and port.isdigit()

"""The Android device: one phone (or emulator) driven over ADB through an adb server, with adbutils.

Frames come from raw ``screencap`` (``capture = "raw"``, parsed by ``devices.android.replies``) or
from ``screencap -p`` (``capture = "png"``, or a pixel format the raw parser does not know). A
frame that is cut short, does not decode, or is entirely black (screen off, or a FLAG_SECURE
window) is a DeviceError, never a silent frame. The input space and its cross-check with ``wm
size`` are in ``devices.android.replies``; the commands each action becomes in
``devices.android.commands``; the calls, their timeouts and offline retries in
``devices.android.adb``. docs/devices.md describes the device for users.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import re
import shlex
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

from devices.actions import Action, ActionKind, Point
from devices.android.adb import AdbTransport
from devices.android.commands import input_text_commands, keycode_for, non_ascii, scroll_swipes
from devices.android.config import AndroidConfig
from devices.android.replies import (
    Geometry,
    UiElement,
    geometry_for,
    parse_density,
    parse_raw_screencap,
    parse_ui_dump,
)
from devices.base import ActionResult, AsyncContextDevice, Box, ElementInfo, Observation, check_act
from devices.errors import DeviceError, DeviceUnavailable, InvalidAction, UnknownPixelFormat, UnsupportedAction
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
_PACKAGE_RE = re.compile(r"^[A-Za-z][\w]*(\.[A-Za-z_][\w]*)+$")
_DUMP_PATH = "/data/local/tmp/handeye_window_dump.xml"

#: runs one shell command of an action (recording it), DeviceError when it fails
Run = Callable[[str, str], Awaitable[None]]


class AndroidDevice(AsyncContextDevice):
    """One Android phone. Use as ``async with AndroidDevice(AndroidConfig(serial=...)) as dev:``."""

    name = "android"

    def __init__(self, config: AndroidConfig | None = None, settle_config: SettleConfig | None = None) -> None:
        self.config = config or AndroidConfig()
        self.settle_config = settle_config or SettleConfig()
        self._adb = AdbTransport(self.config)
        self.props: dict[str, str] = {}
        self.density: int | None = None
        self.geometry: Geometry | None = None
        self._capture_mode = self.config.capture
        self._adbkeyboard: bool | None = None
        self._last_grab: tuple[np.ndarray, bytes | None] | None = None
        self._fresh: tuple[np.ndarray, bytes | None] | None = None
        self._aliases = {name.lower(): target for name, target in self.config.app_aliases}
        self._masked: set[str] = set()
        """Fields a secret was typed into (resource id, or bounds when a node has none): masked in later frames."""

    # -- life cycle -----------------------------------------------------------------------------
    @property
    def supported_actions(self) -> frozenset[ActionKind]:
        return ANDROID_ACTIONS

    @property
    def serial(self) -> str:
        """The phone's serial, once started ("" before)."""
        return self._adb.serial

    async def start(self) -> None:
        if self._adb.client is not None:
            raise DeviceError("the android device is already started")
        cfg = self.config
        await asyncio.to_thread(self._adb.connect)
        try:
            for prop in ("ro.build.version.sdk", "ro.build.version.release", "ro.product.model",
                         "ro.product.manufacturer"):
                self.props[prop] = (await self.shell(f"getprop {prop}", "read the phone's properties")).strip()
            self.density = parse_density(await self.shell("wm density", "read the screen density"))
            if cfg.keyboard != "ascii":
                imes = await self.shell("ime list -a -s", "list the input methods")
                self._adbkeyboard = ADBKEYBOARD_IME in imes.split()
                if cfg.keyboard == "adbkeyboard" and not self._adbkeyboard:
                    raise DeviceUnavailable(
                        f"android.keyboard = 'adbkeyboard' but it is not installed on {self.serial}; {ADBKEYBOARD_HELP}"
                    )
        except BaseException:
            await asyncio.to_thread(self._adb.close)
            raise

    async def close(self) -> None:
        """Let go of the phone; when this device started the adb server and no other device of this process uses
        it, the server is stopped (``devices.android.adb``)."""
        await asyncio.to_thread(self._adb.close)
        self._fresh = self._last_grab = None

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

    # -- shell ----------------------------------------------------------------------------------
    async def shell_rc(self, command: str, what: str, *, idempotent: bool = True) -> tuple[str, int]:
        """Run a shell command; (output with stderr, exit status)."""
        return await self._adb.shell_rc(command, what, idempotent=idempotent)

    async def shell(self, command: str, what: str, *, idempotent: bool = True) -> str:
        """Run a shell command that must succeed; its output, or DeviceError with the output."""
        return await self._adb.shell(command, what, idempotent=idempotent)

    # -- frames ---------------------------------------------------------------------------------
    async def _capture(self) -> tuple[np.ndarray, bytes | None]:
        """(RGB frame, PNG bytes when the capture was PNG)."""
        if self._capture_mode == "raw":
            try:
                data = await self._adb.call("exec:screencap", "take a screenshot")
                frame, png = parse_raw_screencap(data), None
            except UnknownPixelFormat as e:
                log.warning("%s; capturing PNG from now on", e)
                self._capture_mode = "png"
                return await self._capture()
        else:
            png = await self._adb.call("exec:screencap -p", "take a screenshot")
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
        masked = await self._masked_boxes() if self._masked else ()
        return Observation(frame=frame, meta=meta, encoded=png, encoding="png" if png is not None else None,
                           sensitive_boxes=masked)

    async def _masked_boxes(self) -> tuple[Box, ...]:
        """Boxes of the fields secrets went into, and of password fields, from a fresh UI dump (taken only once a
        secret was typed: a dump costs 1-3 s on a phone)."""
        return tuple(e.box for e in await self.ui_elements() if e.password or _field_key(e) in self._masked)

    async def element_at(self, point: Point) -> ElementInfo | None:
        """The smallest UI node under a normalized frame point that says something (text or description)."""
        hits = [e for e in await self.ui_elements() if e.box.contains(point.x, point.y) and (e.text or e.content_desc)]
        if not hits:
            return None
        e = min(hits, key=lambda e: (e.box.x2 - e.box.x1) * (e.box.y2 - e.box.y1))
        return ElementInfo(text="" if e.password else (e.text or e.content_desc), box=e.box, role=e.class_name,
                           password=e.password)

    async def focused_element(self) -> ElementInfo | None:
        """The UI node with the input focus, from a UI dump."""
        e = next((e for e in await self.ui_elements() if e.focused), None)
        if e is None:
            return None
        return ElementInfo(text="" if e.password else (e.text or e.content_desc), box=e.box, role=e.class_name,
                           password=e.password)

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

    def forget_frame(self) -> None:
        """Drop the settled frame kept for the next ``observe``, which then captures anew (a benchmark measuring
        captures, not the reuse of a settled frame)."""
        self._fresh = None

    async def _geometry(self) -> Geometry:
        if self.geometry is None:
            await self._capture()
        assert self.geometry is not None
        return self.geometry

    async def ui_elements(self) -> list[UiElement]:
        """The screen's accessibility nodes from ``uiautomator dump`` (slow on phones: 1-3 s)."""
        xml_text = await self.ui_dump()
        g = await self._geometry()
        return parse_ui_dump(xml_text, g.input_size)

    async def ui_dump(self) -> str:
        """The XML of ``uiautomator dump`` as the phone wrote it (``parse_ui_dump`` reads it; the recorder also
        reads the display rotation on its root)."""
        out = ""
        for attempt in range(2):
            out, rc = await self.shell_rc(f"uiautomator dump {_DUMP_PATH}", "dump the UI hierarchy")
            if rc == 0 and "dumped to" in out:
                break
            if attempt == 1:
                raise DeviceError(f"uiautomator could not dump the UI hierarchy: {out.strip()[:300]}")
            await asyncio.sleep(0.5)  # "ERROR: could not get idle state" while the screen animates
        return await self.shell(f"cat {_DUMP_PATH}", "read the UI hierarchy")

    def open_stream(self, command: str) -> Any:
        """Start a shell command that keeps writing (``getevent``) and return its adbutils connection: read its
        socket (``.conn``) as the output comes, ``close()`` it to end the command. Blocking (call it in a thread).

        The command gets a terminal (adbd's ``shell,pty:`` service, Android 7+): a program whose output is not a
        terminal fills a buffer before writing, so its lines would come in bursts, late. A phone that refuses the
        service is asked with plain ``shell:`` (older adbd gives every shell command a terminal anyway)."""
        import adbutils

        if self._adb.client is None:
            raise DeviceError(f"cannot run `{command}`: the android device is not started")
        phone = self._adb.client.device(self.serial)
        refused = ""
        for service in (f"shell,pty:{command}", f"shell:{command}"):
            try:
                conn = phone.open_transport()
            except (adbutils.AdbError, OSError) as e:
                raise DeviceError(f"cannot run `{command}` on {self.serial}: the adb server did not answer ({e})"
                                  ) from e
            try:
                conn.send_command(service)
                conn.check_okay()
                return conn
            except (adbutils.AdbError, OSError) as e:
                conn.close()
                refused = str(e) or type(e).__name__
        raise DeviceError(f"cannot run `{command}` on {self.serial}: the phone refused it ({refused})")

    # -- actions --------------------------------------------------------------------------------
    async def act(self, action: Action) -> ActionResult:
        self._fresh = None
        check_act(self, action, started=self._adb.client is not None, phone_keys=True)
        kind = action.kind
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
            for command in scroll_swipes(action, g.input_size, self.config.scroll_swipe_s):
                await run(command, "scroll")
        elif kind is ActionKind.TYPE:
            if action.point is not None:
                assert g is not None
                x, y = g.to_input(action.point.x, action.point.y)
                await run(f"input tap {x:g} {y:g}", "tap before typing")
            detail = await self._type(action.text or "", run)
            if action.mask:  # a secret: find its field so later frames mask it
                focused = next((e for e in await self.ui_elements() if e.focused), None)
                if focused is not None:
                    self._masked.add(_field_key(focused))
        elif kind is ActionKind.KEY:
            await run(f"input keyevent {keycode_for(action.keys[0])}", f"press {action.keys[0]}")
        elif kind is ActionKind.HOTKEY:
            await self._hotkey(action.keys, run)
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

    async def _hotkey(self, keys: tuple[str, ...], run: Run) -> None:
        codes = [keycode_for(k) for k in keys]
        if len(codes) == 1:
            await run(f"input keyevent {codes[0]}", "press a key")
        elif self.sdk and self.sdk < 33:
            raise UnsupportedAction(
                f"hotkey {'+'.join(keys)} needs `input keycombination` (Android 13, API 33); "
                f"this phone has API {self.sdk}"
            )
        else:
            await run("input keycombination " + " ".join(codes), "press a hotkey")

    async def _type(self, text: str, run: Run) -> str:
        mode = self.config.keyboard
        bad = non_ascii(text)
        if mode == "ascii" or (mode == "auto" and not bad):
            if bad:
                raise DeviceError(f"cannot type {bad!r} with android.keyboard = 'ascii'; set it to 'auto' and "
                                  + ADBKEYBOARD_HELP)
            for command in input_text_commands(text):
                await run(command, "type text")
            return f"typed {len(text)} characters with input text"
        if not self._adbkeyboard:
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

    async def _open_app(self, name: str, run: Run) -> str:
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


def _field_key(e: UiElement) -> str:
    return e.resource_id or f"{e.box.as_list()}"

"""The Android device through a real adb server and a fake phone (tests/support/fake_adbd.py).

The adb server is our own, on a private port (ANDROID_ADB_SERVER_PORT, with HOME pointed at a
temporary folder so it makes its key there): never the user's server on 5037. The fake phone is
adopted with ``adb connect``, so every byte goes through adb's real host and transport protocols.
Most tests use a 360 x 800 phone so that expected coordinates can be worked out by hand: the fake's
home screen puts its buttons at fixed fractions of the display (notes 0.1-0.9 x 0.15-0.25,
list 0.30-0.40, counter 0.45-0.55, a red corner block 0.95-1.0 x 0.95-1.0).

Set HANDEYE_TEST_ADB to test with another adb binary (default: ``adb`` on PATH, else adbutils').
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from pathlib import Path
from collections.abc import Awaitable, Callable
from typing import Any

import cv2
import numpy as np
import pytest

from devices import Action, DeviceDisconnected, DeviceError, DeviceUnavailable, InvalidAction, Point, UnsupportedAction
from devices.errors import UnknownPixelFormat
from devices.android import AndroidConfig, AndroidDevice, list_devices
from devices.android.commands import input_text_commands, keycode_for
from devices.android.device import ADBKEYBOARD_IME
from devices.android.replies import expected_input_size, parse_raw_screencap, parse_rotation, parse_wm_size
from tests.support.fake_adbd import LATIN_IME, FakeAdbd, FakePhone
from tests.support import procs
from tests.support.adb import adb_binary, free_port, private_adb_server




@pytest.fixture(scope="module")
def adb_port(tmp_path_factory):
    """A private adb server for this module; killed afterwards."""
    with private_adb_server(tmp_path_factory.mktemp("adb-home")) as port:
        patch = pytest.MonkeyPatch()
        patch.setenv("ANDROID_ADB_SERVER_PORT", str(port))  # anything that auto-starts adb starts it here
        try:
            yield port
        finally:
            patch.undo()


def _client(port: int) -> Any:
    import adbutils

    return adbutils.AdbClient("127.0.0.1", port)


def _connect(port: int, adbd: FakeAdbd) -> None:
    answer = _client(port).connect(adbd.address, timeout=10)
    assert "connected" in answer, answer
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        states = {i.serial: i.state for i in _client(port).list()}
        if states.get(adbd.address) == "device":
            return
        time.sleep(0.05)
    raise AssertionError(f"the fake phone never came online: {states}")


def _disconnect(port: int, adbd: FakeAdbd) -> None:
    try:
        _client(port).disconnect(adbd.address)
    except Exception:  # already gone
        pass


def on_phone(
    port: int,
    scenario: Callable[[AndroidDevice, FakePhone], Awaitable[Any]],
    phone: FakePhone | None = None,
    **config: Any,
) -> Any:
    """Run ``scenario(device, phone)`` against a fresh fake phone; returns what it returns."""
    phone = phone or FakePhone(physical=(360, 800))
    with FakeAdbd(phone) as adbd:
        _connect(port, adbd)
        try:
            cfg = AndroidConfig(serial=adbd.address, adb_port=port, ime_switch_wait_s=0, start_server=False, **config)

            async def main() -> Any:
                async with AndroidDevice(cfg) as device:
                    return await scenario(device, phone)

            return asyncio.run(main())
        finally:
            _disconnect(port, adbd)


def at(u: float, v: float, w: int = 360, h: int = 800) -> Point:
    return Point(u / w, v / h)


def find_block(frame: np.ndarray, colour: tuple[int, int, int]) -> tuple[float, float]:
    """Centre (u, v) in continuous frame pixels of the pixels of exactly ``colour``."""
    vs, us = np.nonzero(np.all(frame == np.array(colour, np.uint8), axis=2))
    assert len(us), f"no {colour} pixels on the frame"
    return (us.min() + us.max() + 1) / 2, (vs.min() + vs.max() + 1) / 2


# -- pure helpers ------------------------------------------------------------------------------------

def test_parse_raw_screencap_headers_and_formats():
    rgba = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    for header in (np.array([3, 2, 1], "<u4").tobytes(), np.array([3, 2, 1, 1], "<u4").tobytes()):
        assert np.array_equal(parse_raw_screencap(header + rgba.tobytes()), rgba[:, :, :3])
    bgra = np.array([3, 2, 5], "<u4").tobytes() + rgba.tobytes()
    assert np.array_equal(parse_raw_screencap(bgra), rgba[:, :, 2::-1])
    # RGB_565: pure red, green, blue, white
    px = np.array([[0xF800, 0x07E0], [0x001F, 0xFFFF]], "<u2")
    out = parse_raw_screencap(np.array([2, 2, 4], "<u4").tobytes() + px.tobytes())
    assert out.tolist() == [[[255, 0, 0], [0, 255, 0]], [[0, 0, 255], [255, 255, 255]]]
    with pytest.raises(DeviceError, match="cut short"):
        parse_raw_screencap(np.array([3, 2, 1, 1], "<u4").tobytes() + rgba.tobytes()[:-5])
    with pytest.raises(DeviceError, match="fewer than its 12-byte header"):
        parse_raw_screencap(b"\x01\x02")
    with pytest.raises(UnknownPixelFormat, match="pixel format 7"):  # a DeviceError: the device falls back
        parse_raw_screencap(np.array([3, 2, 7], "<u4").tobytes() + rgba.tobytes())


def test_parse_wm_size_and_rotation():
    assert parse_wm_size("Physical size: 1080x2400\n") == ((1080, 2400), None)
    assert parse_wm_size("Physical size: 1080x2400\nOverride size: 720x1600\n") == ((1080, 2400), (720, 1600))
    assert parse_rotation("  mCurrentOrientation=3\n") == 3
    viewport = "mViewports=[DisplayViewport{type=INTERNAL, orientation=1, logicalFrame=Rect(0, 0 - 2400, 1080)}"
    assert parse_rotation(viewport) == 1
    info = 'DisplayDeviceInfo{"x", rotation 0}\nmOverrideDisplayInfo=DisplayInfo{"S", real 2400 x 1080, rotation 1}'
    assert parse_rotation(info) == 1
    assert parse_rotation("nothing here") is None
    assert expected_input_size((1080, 2400), (720, 1600), 1) == (1600, 720)
    assert expected_input_size((1080, 2400), None, 2) == (1080, 2400)


def test_input_text_commands_quote_and_escape():
    assert input_text_commands("hello world") == ["input text hello%sworld"]
    # shell metacharacters are single-quoted; a literal "%s" is split so that it is not read as a space
    assert input_text_commands("it's 100%s") == ["input text 'it'\"'\"'s%s100%'", "input text s"]
    assert input_text_commands("a\nb\t") == ["input text a", "input keyevent KEYCODE_ENTER", "input text b",
                                             "input keyevent KEYCODE_TAB"]
    with pytest.raises(DeviceError, match="only printable ASCII"):
        input_text_commands("héllo")
    assert keycode_for("Enter") == "KEYCODE_ENTER" and keycode_for("Backspace") == "KEYCODE_DEL"
    assert keycode_for("a") == "KEYCODE_A" and keycode_for("7") == "KEYCODE_7" and keycode_for(",") == "KEYCODE_COMMA"
    with pytest.raises(UnsupportedAction):
        keycode_for("é")


def test_config_is_checked():
    with pytest.raises(ValueError, match="capture"):
        AndroidConfig(capture="jpeg")
    with pytest.raises(ValueError, match="keyboard"):
        AndroidConfig(keyboard="swype")
    with pytest.raises(ValueError, match="app_aliases"):
        AndroidConfig(app_aliases=(("notes",),))


# -- frames ------------------------------------------------------------------------------------------

def test_observe_raw_and_png_equal_the_phone_screen(adb_port):
    async def scenario(device, phone):
        raw = await device.observe()
        assert raw.size == (1080, 2400)
        assert np.array_equal(raw.frame, phone.frame())
        assert raw.encoded is None and raw.meta["capture"] == "raw" and raw.meta["input_size"] == [1080, 2400]
        assert raw.meta["rotation"] == 0 and raw.meta["geometry_consistent"] is True
        described = device.describe()
        assert described["model"] == "FakePhone" and described["physical_size"] == [1080, 2400]
        assert described["density"] == 420 and described["sdk"] == "34"
        return raw.frame

    big = FakePhone()  # 1080 x 2400, SDK 34: 16-byte screencap header
    frame = on_phone(adb_port, scenario, big)
    assert frame.shape == (2400, 1080, 3)

    async def png(device, phone):
        obs = await device.observe()
        assert obs.encoding == "png" and obs.encoded.startswith(b"\x89PNG")
        assert np.array_equal(obs.frame, phone.frame())
        assert np.array_equal(cv2.cvtColor(cv2.imdecode(np.frombuffer(obs.encoded, np.uint8), cv2.IMREAD_COLOR),
                                           cv2.COLOR_BGR2RGB), obs.frame)

    on_phone(adb_port, png, capture="png")

    async def old(device, phone):  # SDK 27: the 12-byte header
        assert np.array_equal((await device.observe()).frame, phone.frame())

    on_phone(adb_port, old, FakePhone(physical=(360, 800), sdk=27))


def test_black_or_truncated_frames_are_errors(adb_port):
    async def scenario(device, phone):
        phone.screen_on = False
        with pytest.raises(DeviceError, match="entirely black"):
            await device.observe()
        phone.screen_on = True
        phone.truncate_raw = True
        with pytest.raises(DeviceError, match="cut short"):
            await device.observe()

    on_phone(adb_port, scenario)

    async def allowed(device, phone):
        phone.screen_on = False
        assert not (await device.observe()).frame.any()

    on_phone(adb_port, allowed, allow_black_frames=True)


def test_settle_then_observe_reuses_the_settled_frame(adb_port):
    async def scenario(device, phone):
        await device.act(Action("click", point=Point(0.5, 0.5)))  # the counter button
        result = await device.settle()
        assert result.settled
        obs = await device.observe()
        assert obs.meta["frame_source"] == "settle"
        assert np.array_equal(obs.frame, phone.frame()) and phone.counter == 1

    on_phone(adb_port, scenario)


# -- geometry ------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("rotation", "size", "tap"),
    [
        (0, (720, 1600), (360, 800)),  # counter block: x 72..647, y 720..879 -> centre (360, 800)
        (1, (1600, 720), (800, 360)),  # landscape: x 160..1439, y 324..395 -> centre (800, 360)
        (3, (1600, 720), (800, 360)),
    ],
)
def test_taps_land_on_the_intended_button_with_override_and_rotation(adb_port, rotation, size, tap):
    phone = FakePhone(physical=(1080, 2400), override=(720, 1600), rotation=rotation)

    async def scenario(device, phone):
        obs = await device.observe()
        assert obs.size == size and obs.meta["rotation"] == rotation and obs.meta["geometry_consistent"]
        u, v = find_block(obs.frame, (251, 188, 5))  # the yellow counter, found in the pixels
        await device.act(Action("click", point=Point(u / obs.width, v / obs.height)))
        assert phone.events[-1] == {"kind": "tap", "x": tap[0], "y": tap[1], "target": "counter"}
        assert phone.counter == 1
        # the far corner (x = y = 1.0) is the far edge of the last pixel: moved 0.01 px inside the screen
        await device.act(Action("click", point=Point(1.0, 1.0)))
        assert phone.events[-1] == {"kind": "tap", "x": size[0] - 0.01, "y": size[1] - 0.01, "target": "corner"}
        assert device.describe()["override_size"] == [720, 1600]

    on_phone(adb_port, scenario, phone)


def test_rotation_change_is_followed(adb_port):
    async def scenario(device, phone):
        assert (await device.observe()).size == (360, 800)
        phone.rotation = 1
        obs = await device.observe()
        assert obs.size == (800, 360) and obs.meta["rotation"] == 1
        await device.act(Action("click", point=Point(0.5, 0.5)))  # counter: x 80..719, y 162..197
        assert phone.events[-1]["target"] == "counter" and (phone.events[-1]["x"], phone.events[-1]["y"]) == (400, 180)

    on_phone(adb_port, scenario)


def test_disagreeing_wm_size_warns_and_the_frame_wins(adb_port, caplog):
    phone = FakePhone(physical=(720, 1600), wm_physical_report=(1080, 2400))

    async def scenario(device, phone):
        with caplog.at_level(logging.WARNING, logger="devices.android"):
            obs = await device.observe()
        assert obs.size == (720, 1600) and obs.meta["geometry_consistent"] is False
        assert "using the frame's size" in caplog.text
        await device.act(Action("click", point=Point(0.5, 0.5)))
        assert phone.events[-1] == {"kind": "tap", "x": 360, "y": 800, "target": "counter"}

    on_phone(adb_port, scenario, phone)


# -- pointer actions -------------------------------------------------------------------------------

def test_long_press_and_drag(adb_port):
    async def scenario(device, phone):
        await device.act(Action("click", point=at(180, 280)))  # "List"
        assert phone.screen == "list"
        # rows are 80 px tall from y = 80: row 2 spans 240..319
        await device.act(Action("long_press", point=at(100, 250), duration_s=1.5))
        assert phone.events[-1] == {"kind": "long_press", "x": 100, "y": 250, "duration_ms": 1500, "target": "row2"}
        assert phone.selected == "long:row2"
        await device.act(Action("drag", point=at(10, 700), end=at(300, 100.9)))
        assert phone.events[-1] == {"kind": "swipe", "x1": 10, "y1": 700, "x2": 300, "y2": 100.9, "duration_ms": 600}

    on_phone(adb_port, scenario)


def test_scroll_moves_the_finger_against_the_content(adb_port):
    async def scenario(device, phone):
        await device.act(Action("click", point=at(180, 280)))
        swipes = lambda: [e for e in phone.events if e["kind"] == "swipe"]  # noqa: E731
        # down 0.5 screens at the centre: 400 px, the finger goes up from 600 to 200
        await device.act(Action("scroll", direction="down"))
        assert swipes()[-1] == {"kind": "swipe", "x1": 180, "y1": 600, "x2": 180, "y2": 200, "duration_ms": 500}
        assert phone.list_offset == 400
        await device.act(Action("scroll", direction="up", amount=0.25))  # finger down 300 -> 500
        assert swipes()[-1] == {"kind": "swipe", "x1": 180, "y1": 300, "x2": 180, "y2": 500, "duration_ms": 500}
        assert phone.list_offset == 200
        # near the bottom edge the swipe shifts up to stay on screen (max end 800 - 1 - 40 = 759)
        await device.act(Action("scroll", direction="down", point=at(100, 720)))
        assert swipes()[-1] == {"kind": "swipe", "x1": 100, "y1": 759, "x2": 100, "y2": 359, "duration_ms": 500}
        # 1.5 screens: three swipes of 400 px
        n = len(swipes())
        await device.act(Action("scroll", direction="down", amount=1.5))
        assert len(swipes()) == n + 3 and all(s["y1"] == 600 and s["y2"] == 200 for s in swipes()[n:])
        # right: content further right comes in, the finger moves left (270 -> 90 on a 360 px screen)
        await device.act(Action("scroll", direction="right"))
        assert swipes()[-1] == {"kind": "swipe", "x1": 270, "y1": 400, "x2": 90, "y2": 400, "duration_ms": 500}

    on_phone(adb_port, scenario)


# -- typing ------------------------------------------------------------------------------------------

def _open_notes(phone: FakePhone) -> None:
    phone.screen = "notes"


def test_type_ascii_with_spaces_and_shell_metacharacters(adb_port):
    text = """it's a "test"; echo $HOME & `id` | 100%s done\\n (ok)"""

    async def scenario(device, phone):
        _open_notes(phone)
        # the field spans y 0.15..0.23 of 800 = 120..183: tap it first, then type
        result = await device.act(Action("type", text=text, point=at(180, 150)))
        assert phone.focused and phone.text == text
        assert "input text" in result.detail or "typed" in result.detail
        assert not any("broadcast" in c for c in phone.commands)
        await device.act(Action("type", text="\nline two"))
        assert phone.text == text + "\nline two"
        await device.act(Action("key", keys=("Backspace",)))
        assert phone.text == text + "\nline tw"

    on_phone(adb_port, scenario)


def test_type_chinese_with_adbkeyboard_and_restore_the_keyboard(adb_port):
    async def scenario(device, phone):
        _open_notes(phone)
        await device.act(Action("type", text="你好，世界 ok", point=at(180, 150)))
        assert phone.text == "你好，世界 ok"
        imes = [e["ime"] for e in phone.events if e["kind"] == "ime"]
        assert imes == [ADBKEYBOARD_IME, LATIN_IME]
        assert phone.current_ime == LATIN_IME
        assert [e["typed"] for e in phone.events if e["kind"] == "broadcast"] == [True]

    on_phone(adb_port, scenario)

    async def always(device, phone):  # keyboard = "adbkeyboard" sends ASCII through it as well
        _open_notes(phone)
        await device.act(Action("type", text="a b", point=at(180, 150)))
        assert phone.text == "a b" and not any(c.startswith("input text") for c in phone.commands)

    on_phone(adb_port, always, keyboard="adbkeyboard")


def test_non_ascii_without_adbkeyboard_is_a_clear_error(adb_port):
    async def scenario(device, phone):
        _open_notes(phone)
        await device.act(Action("click", point=at(180, 150)))
        with pytest.raises(DeviceError, match="ADBKeyboard") as err:
            await device.act(Action("type", text="héllo 你好"))
        assert "é" in str(err.value) and "adb install" in str(err.value)
        assert phone.text == "" and not any(c.startswith("input text") for c in phone.commands)

    on_phone(adb_port, scenario, FakePhone(physical=(360, 800), adbkeyboard=False))

    async def ascii_only(device, phone):
        with pytest.raises(DeviceError, match="keyboard = 'ascii'"):
            await device.act(Action("type", text="naïve"))

    on_phone(adb_port, ascii_only, keyboard="ascii")

    with pytest.raises(DeviceUnavailable, match="not installed"):
        on_phone(adb_port, ascii_only, FakePhone(physical=(360, 800), adbkeyboard=False), keyboard="adbkeyboard")


# -- apps, keys, navigation ------------------------------------------------------------------------

def test_open_app_url_keys_back_and_home(adb_port):
    async def scenario(device, phone):
        await device.act(Action("open_app", text="Notes"))  # an alias
        assert phone.screen == "notes" and phone.events[-1] == {"kind": "launch", "package": "com.example.notes"}
        await device.act(Action("open_app", text="com.example.list"))
        assert phone.screen == "list"
        await device.act(Action("back"))
        assert phone.screen == "notes"
        await device.act(Action("open_app", text="com.example.list/.MainActivity"))
        assert phone.events[-1]["component"] == "com.example.list/.MainActivity" and phone.screen == "list"
        await device.act(Action("home"))
        assert phone.screen == "home"
        await device.act(Action("open_url", text="https://example.com/a?b=1&c=2"))
        assert phone.screen == "browser" and phone.url == "https://example.com/a?b=1&c=2"
        await device.act(Action("key", keys=("Escape",)))
        assert phone.events[-1] == {"kind": "key", "key": "ESCAPE"} and phone.screen == "home"
        await device.act(Action("hotkey", keys=("ctrl", "a")))
        assert phone.events[-1] == {"kind": "keycombination", "keys": ["CTRL_LEFT", "A"]}
        with pytest.raises(DeviceError, match="not installed"):
            await device.act(Action("open_app", text="com.nope.app"))
        with pytest.raises(DeviceError, match="does not exist"):
            await device.act(Action("open_app", text="com.example.notes/.Missing"))
        with pytest.raises(InvalidAction, match="app_aliases"):
            await device.act(Action("open_app", text="My App"))
        await device.act(Action("home"))
        await device.act(Action("open_app", text="List"))  # no alias: found by the package name's segment
        assert phone.screen == "list" and phone.events[-1] == {"kind": "launch", "package": "com.example.list"}
        await device.act(Action("key", keys=("recent",)))  # the recent-apps key
        assert phone.events[-1] == {"kind": "key", "key": "APP_SWITCH"}
        with pytest.raises(UnsupportedAction, match="double_click"):
            await device.act(Action("double_click", point=Point(0.5, 0.5)))
        with pytest.raises(InvalidAction):
            await device.act(Action("finish"))
        start = time.perf_counter()
        await device.act(Action("wait", duration_s=0.2))
        assert time.perf_counter() - start >= 0.2

    on_phone(adb_port, scenario, app_aliases=(("notes", "com.example.notes"),))

    async def old(device, phone):
        with pytest.raises(UnsupportedAction, match="API 33"):
            await device.act(Action("hotkey", keys=("ctrl", "a")))

    on_phone(adb_port, old, FakePhone(physical=(360, 800), sdk=30))


def test_getevent_lists_the_touchscreen(adb_port):
    async def scenario(device, phone):
        out, rc = await device.shell_rc("getevent -lp", "list input devices")
        assert rc == 0 and "ABS_MT_POSITION_X" in out and "max 359" in out and "max 799" in out

    on_phone(adb_port, scenario)


def test_ui_elements_from_uiautomator(adb_port):
    async def scenario(device, phone):
        elements = await device.ui_elements()
        by_id = {e.resource_id: e for e in elements}
        notes = by_id["com.example.launcher:id/notes"]
        # bounds [36,120][324,200] on a 360 x 800 screen
        assert notes.box.as_list() == pytest.approx([0.1, 0.15, 0.9, 0.25])
        assert notes.text == "Notes" and notes.content_desc == "Open notes" and notes.clickable
        assert elements[0].class_name == "android.widget.FrameLayout" and not elements[0].clickable
        phone.rotation = 1  # landscape 800 x 360: the same fractions
        await device.observe()
        elements = await device.ui_elements()
        counter = next(e for e in elements if e.resource_id.endswith("/counter"))
        assert counter.box.as_list() == pytest.approx([0.1, 0.45, 0.9, 0.55]) and counter.text == "Count 0"

    on_phone(adb_port, scenario)


# -- finding phones, losing them ---------------------------------------------------------------------

def test_unknown_serial_lists_the_connected_devices(adb_port):
    with FakeAdbd(FakePhone(physical=(360, 800))) as adbd:
        _connect(adb_port, adbd)
        try:
            listed = list_devices("127.0.0.1", adb_port)
            assert [(d.serial, d.state, d.model) for d in listed] == [(adbd.address, "device", "FakePhone")]
            device = AndroidDevice(AndroidConfig(serial="emulator-5554", adb_port=adb_port, start_server=False))
            with pytest.raises(DeviceUnavailable, match="no phone with serial 'emulator-5554'") as err:
                asyncio.run(device.start())
            assert f"{adbd.address} (device)" in str(err.value)
            # no serial and exactly one phone: that one
            only = AndroidDevice(AndroidConfig(adb_port=adb_port, start_server=False, ime_switch_wait_s=0))
            asyncio.run(only.start())
            assert only.serial == adbd.address
            with FakeAdbd(FakePhone(physical=(360, 800))) as second:
                _connect(adb_port, second)
                try:
                    with pytest.raises(DeviceUnavailable, match="2 phones are connected"):
                        asyncio.run(AndroidDevice(AndroidConfig(adb_port=adb_port, start_server=False)).start())
                finally:
                    _disconnect(adb_port, second)
        finally:
            _disconnect(adb_port, adbd)
    with pytest.raises(DeviceUnavailable, match="no adb server is listening"):
        list_devices("127.0.0.1", free_port())


def test_unauthorized_phone_says_how_to_authorize(adb_port):
    with FakeAdbd(FakePhone(authorized=False)) as adbd:
        _client(adb_port).connect(adbd.address, timeout=10)
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                states = {d.serial: d.state for d in list_devices("127.0.0.1", adb_port)}
                if states.get(adbd.address) == "unauthorized":
                    break
                time.sleep(0.05)
            assert states.get(adbd.address) == "unauthorized"
            device = AndroidDevice(AndroidConfig(serial=adbd.address, adb_port=adb_port, start_server=False))
            with pytest.raises(DeviceUnavailable, match="Allow USB debugging"):
                asyncio.run(device.start())
        finally:
            _disconnect(adb_port, adbd)


def test_phone_going_offline_mid_episode(adb_port):
    phone = FakePhone(physical=(360, 800))
    adbd = FakeAdbd(phone)
    adbd.start()
    _connect(adb_port, adbd)
    cfg = AndroidConfig(serial=adbd.address, adb_port=adb_port, start_server=False, offline_deadline_s=1.0)

    async def scenario():
        async with AndroidDevice(cfg) as device:
            await device.observe()
            adbd.stop()  # unplugged
            start = time.monotonic()
            with pytest.raises(DeviceDisconnected, match="unreachable") as err:
                await device.act(Action("click", point=Point(0.5, 0.5)))
            elapsed = time.monotonic() - start
            assert 1.0 <= elapsed < 6, elapsed
            assert adbd.address in str(err.value)
            with pytest.raises(DeviceDisconnected):
                await device.observe()

    try:
        asyncio.run(scenario())
    finally:
        adbd.stop()
        _disconnect(adb_port, adbd)


def test_phone_coming_back_within_the_deadline(adb_port):
    phone = FakePhone(physical=(360, 800))
    adbd = FakeAdbd(phone)
    adbd.start()
    _connect(adb_port, adbd)
    cfg = AndroidConfig(serial=adbd.address, adb_port=adb_port, start_server=False, offline_deadline_s=15.0)

    async def scenario():
        async with AndroidDevice(cfg) as device:
            await device.observe()
            adbd.stop()
            threading.Timer(0.5, adbd.start).start()  # back on the same port half a second later
            await device.act(Action("click", point=Point(0.5, 0.5)))
            assert phone.counter == 1
            assert np.array_equal((await device.observe()).frame, phone.frame())

    try:
        asyncio.run(scenario())
    finally:
        adbd.stop()
        _disconnect(adb_port, adbd)


def test_agent_run_and_devices_with_a_phone(adb_port, tmp_path):
    """`agent run --device android:SERIAL` taps the counter; `agent devices` lists the phone."""
    import json
    import sys

    phone = FakePhone(physical=(360, 800))
    repo = Path(__file__).resolve().parents[2]
    with FakeAdbd(phone) as adbd:
        _connect(adb_port, adbd)
        frame = phone.frame()
        u, v = find_block(frame, (251, 188, 5))  # the yellow counter
        script = tmp_path / "s.json"
        script.write_text(json.dumps([{"kind": "click", "point": [u / frame.shape[1], v / frame.shape[0]]},
                                      {"kind": "finish"}]))
        env = {**os.environ, "COLUMNS": "200"}
        r = procs.run([sys.executable, "-m", "agent", "run", "tap the counter", "--device", f"android:{adbd.address}",
                       "--policy", "scripted", "--script", str(script), "--runs-dir", str(tmp_path / "runs"),
                       "--set", f"android.adb_port={adb_port}", "--set", "android.start_server=false"],
                      cwd=repo, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        assert phone.counter == 1 and "CLAIMED" in r.stdout
        r = procs.run([sys.executable, "-m", "agent", "devices", "--set", f"android.adb_port={adb_port}"],
                      cwd=repo, env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and adbd.address in r.stdout, r.stdout
        r = procs.run([sys.executable, "-m", "agent", "run", "tap", "--device", "android:no-such-phone",
                       "--policy", "scripted", "--script", str(script), "--runs-dir", str(tmp_path / "runs2"),
                       "--set", f"android.adb_port={adb_port}", "--set", "android.start_server=false"],
                      cwd=repo, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 1 and "no-such-phone" in r.stdout and adbd.address in r.stdout.replace("\n", ""), r.stdout


# -- who owns the adb server -----------------------------------------------------------------------

@pytest.fixture
def no_server(tmp_path, monkeypatch):
    """A free port with no adb server on it; adb's key and state go to a temporary HOME. Any server left on the
    port at the end is killed (and the test has failed by then)."""
    port = free_port()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ANDROID_USER_HOME", str(tmp_path / "home" / ".android"))
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", str(port))
    (tmp_path / "home").mkdir()
    try:
        yield port
    finally:
        procs.run([adb_binary(), "-P", str(port), "kill-server"], timeout=60, capture_output=True)


def _listening(port: int) -> bool:
    from devices.android.adb import server_listening

    return server_listening("127.0.0.1", port)


def test_a_server_handeye_started_is_stopped_when_the_last_device_closes(no_server):
    assert not _listening(no_server)
    with FakeAdbd(FakePhone(physical=(360, 800))) as one, FakeAdbd(FakePhone(physical=(360, 800))) as two:
        async def main() -> None:
            first = AndroidDevice(AndroidConfig(serial=one.address, adb_port=no_server, ime_switch_wait_s=0))
            second = AndroidDevice(AndroidConfig(serial=two.address, adb_port=no_server, ime_switch_wait_s=0))
            await first.start()  # starts the server (start_server is on by default) and `adb connect`s the phone
            assert _listening(no_server)
            await second.start()  # finds it running: shares it
            assert (await first.observe()).frame.shape == (800, 360, 3)
            await first.close()
            assert _listening(no_server)  # the other device still uses it
            assert (await second.observe()).frame.shape == (800, 360, 3)
            await second.close()
            assert not _listening(no_server)  # the last one out stops it

        asyncio.run(main())


def test_a_server_that_was_already_running_is_left_running(adb_port):
    with FakeAdbd(FakePhone(physical=(360, 800))) as adbd:
        _connect(adb_port, adbd)
        try:
            async def main() -> None:  # allowed to start a server (the default), but one was there
                async with AndroidDevice(AndroidConfig(serial=adbd.address, adb_port=adb_port)) as device:
                    await device.observe()

            asyncio.run(main())
        finally:
            _disconnect(adb_port, adbd)
    assert _listening(adb_port)


def test_agent_run_leaves_no_adb_server_it_started(no_server, tmp_path):
    """Through the command: `agent run --device android:SERIAL` with no server on the port starts one for the run
    and stops it before exiting."""
    import json
    import sys

    phone = FakePhone(physical=(360, 800))
    script = tmp_path / "s.json"
    script.write_text(json.dumps([{"kind": "finish"}]))
    repo = Path(__file__).resolve().parents[2]
    with FakeAdbd(phone) as adbd:
        r = procs.run([sys.executable, "-m", "agent", "run", "look", "--device", f"android:{adbd.address}",
                       "--policy", "scripted", "--script", str(script), "--runs-dir", str(tmp_path / "runs"),
                       "--set", f"android.adb_port={no_server}"],
                      cwd=repo, env={**os.environ, "COLUMNS": "200"}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not _listening(no_server), "the adb server handeye started is still running"

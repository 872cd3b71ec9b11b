"""The desktop recorder: pure tests of keys and gestures, then xdotool playing a person on a private Xvfb with the Tk app.

The Xvfb display, the Tk app and its event log come from tests/devices/test_desktop.py (its fixtures,
imported here). xdotool is the person: its input goes through XTEST, which the X RECORD extension sees
exactly like a real keyboard and mouse; the Tk app's log confirms that each input reached the app.
"""

from __future__ import annotations

import asyncio
import os
import re
import struct
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from devices import DeviceError, DeviceUnavailable
from devices.actions import ActionKind, Point
from devices.desktop import DesktopConfig
from devices.desktop.gestures import Gestures, InputKind, RawInput
from devices.desktop.record_config import DesktopRecordConfig, parse_combo
from devices.desktop.recorder import DesktopRecorder
from devices.desktop.xkeys import ALT, ALT_GR, CONTROL, META, NUM_LOCK, SHIFT, KeyInfo, Keymap, keysym_char, parse_keymap_changes
from devices.desktop.xrecord import ServerClock
from devices.recording import DemoEvent, Recorder
from tests.devices.test_desktop import SH, SW, app, tk_app, xvfb  # noqa: F401 - fixtures
from tests.support import procs
from tests.support.xvfb import start_xvfb, stop_xvfb

# -- keys: pure ------------------------------------------------------------------------------------


def test_keysyms_become_characters_in_every_script():
    assert [keysym_char(k) for k in (0x61, 0x41, 0x20, 0xE9, 0xDF)] == ["a", "A", " ", "é", "ß"]
    assert keysym_char(0x1004F60) == "你" and keysym_char(0x1002713) == "✓" and keysym_char(0x101F600) == "😀"
    assert keysym_char(0xFFB7) == "7" and keysym_char(0xFFAB) == "+"  # KP_7, KP_Add
    # legacy blocks: Cyrillic_a, Cyrillic_YU, Greek_alpha, hebrew_aleph, Thai_kokai, Latin-2 zcaron, kana_A
    assert [keysym_char(k) for k in (0x6C1, 0x6E0, 0x7E1, 0xCE0, 0xDA1, 0x1BE, 0x4B1)] == [
        "а", "Ю", "α", "א", "ก", "ž", "ｱ"]
    for named in (0xFF0D, 0xFF09, 0xFFE3, 0xFE52, 0x1000000, 0x100000A):  # Return, Tab, Control_L, dead_circumflex, NUL, LF
        assert keysym_char(named) is None


def keymap() -> Keymap:
    """A small US-like keymap with a German level 3, a Russian second group and the usual modifier map."""
    codes = {
        38: (0x61, 0x41, 0x6C6, 0x6E6, 0xE6, 0xC6),  # a A / ф Ф / æ Æ
        10: (0x31, 0x21),  # 1 !
        23: (0xFF09, 0xFE20),  # Tab, ISO_Left_Tab
        36: (0xFF0D,), 65: (0x20,), 22: (0xFF08,),  # Return, space, BackSpace
        87: (0xFF9C, 0xFFB1),  # KP_End / KP_1
        50: (0xFFE1,), 37: (0xFFE3,), 64: (0xFFE9, 0xFFE7), 133: (0xFFEB,), 92: (0xFE03,), 77: (0xFF7F,),
        66: (0xFFE5,),
    }
    modmap = [[50], [66], [37], [64], [77], [], [133], [92]]
    return Keymap.of(codes, modmap)


def test_keymap_reads_shift_caps_lock_level3_groups_and_num_lock():
    km = keymap()
    assert km.mod_bits == {0: SHIFT, 1: "CapsLock", 2: CONTROL, 3: ALT, 4: NUM_LOCK, 6: META, 7: ALT_GR}
    a = km.resolve(38, 0)
    assert (a.char, a.name, a.base, a.modifier) == ("a", None, "a", None)
    assert km.resolve(38, 1).char == "A"  # Shift
    assert km.resolve(38, 2).char == "A" and km.resolve(38, 3).char == "a"  # Caps Lock; Caps Lock + Shift
    assert km.resolve(38, 1 << 7).char == "æ" and km.resolve(38, 1 << 7 | 1).char == "Æ"  # AltGr (Mod5)
    assert km.resolve(38, 1 << 13).char == "ф" and km.resolve(38, 1 << 13 | 1).char == "Ф"  # second group
    assert km.resolve(38, 1 << 13).base == "a"  # a hotkey names the first group's key
    assert km.resolve(10, 1).char == "!" and km.resolve(10, 1).base == "1"
    tab = km.resolve(23, 1)
    assert (tab.char, tab.name, tab.base) == (None, "Tab", "Tab")  # ISO_Left_Tab is Tab
    space = km.resolve(65, 0)
    assert (space.char, space.name, space.base) == (" ", "Space", "Space")
    assert km.resolve(87, 0).name == "End" and km.resolve(87, 1 << 4).char == "1"  # keypad, Num Lock off / on
    assert [km.resolve(c, 0).modifier for c in (50, 37, 64, 133, 92)] == [SHIFT, CONTROL, ALT, META, ALT_GR]
    assert km.held(0b101 | 1 << 3) == {SHIFT, CONTROL, ALT}


def test_recorded_keyboard_mapping_changes_apply_in_either_byte_order():
    km = keymap()
    for order, swapped in (("=", False), ("<" if sys.byteorder == "big" else ">", True)):
        request = struct.pack(order + "BBHBBH2I", 100, 2, 5, 8, 1, 0, 0x1004F60, 0x100597D)  # 你 好 on keycodes 8, 9
        other = struct.pack(order + "BBH", 1, 0, 2) + b"\0" * 4  # some other request of 8 bytes
        changes = parse_keymap_changes(other + request, swapped)
        assert changes == [(8, 1, (0x1004F60, 0x100597D))]
        for change in changes:
            km.change(*change)
        assert km.resolve(8, 0).char == "你" and km.resolve(9, 1).char == "好"
    km.change(8, 1, (0,))
    assert km.resolve(8, 0).char is None  # xdotool unbinds the keycode after the press


def test_server_time_becomes_wall_time_with_the_smallest_delay_seen():
    clock = ServerClock(offset_s=1000.0)
    assert clock.wall(5000, arrived=1005.010) == pytest.approx(1005.0)  # offset from the calibration
    assert clock.wall(6000, arrived=1005.999) == pytest.approx(1005.999)  # arrived sooner: the offset was too big
    assert clock.wall(7000, arrived=1007.5) == pytest.approx(1006.999)  # a late arrival does not move it
    clock = ServerClock(offset_s=1e9)
    before = clock.wall(2**32 - 10, arrived=2e9)
    assert clock.wall(5, arrived=2e9) - before == pytest.approx(0.015)  # the 32-bit millisecond counter wrapped


def test_record_config_checks_its_keys():
    assert parse_combo("ctrl+alt+p", "k") == parse_combo(("Control", "Alt", "P"), "k")
    assert DesktopRecordConfig(pause_keys="ctrl+shift+F9").pause_combo.describe() == "Control+Shift+f9"
    with pytest.raises(ValueError, match="modifiers .* and one key"):
        DesktopRecordConfig(stop_keys=("q",))
    with pytest.raises(ValueError, match="both Control\\+Alt\\+s"):
        DesktopRecordConfig(pause_keys="ctrl+alt+s")
    with pytest.raises(ValueError, match="unknown key"):
        DesktopRecordConfig(stop_keys="ctrl+hyperspace")
    with pytest.raises(ValueError, match="fps"):
        DesktopRecordConfig(fps=0)


# -- gestures: pure ------------------------------------------------------------------------------


def down(at: float, x: int = 100, y: int = 100, button: int = 1, **kw: Any) -> RawInput:
    return RawInput(InputKind.BUTTON_DOWN, at, x, y, button=button, **kw)


def up(at: float, x: int = 100, y: int = 100, button: int = 1) -> RawInput:
    return RawInput(InputKind.BUTTON_UP, at, x, y, button=button)


def move(at: float, x: int, y: int) -> RawInput:
    return RawInput(InputKind.MOTION, at, x, y)


def press(at: float, char: str | None = None, name: str | None = None, mods: frozenset[str] = frozenset(),
          window: int = 1, modifier: str | None = None, base: str | None = None) -> RawInput:
    info = KeyInfo(0, 0, char, name, base or (char.lower() if char else name), modifier)
    return RawInput(InputKind.KEY_DOWN, at, 0, 0, key=info, modifiers=mods, window=window)


def release(at: float, modifier: str | None = None) -> RawInput:
    return RawInput(InputKind.KEY_UP, at, 0, 0, key=KeyInfo(0, 0, None, None, None, modifier))


def run(inputs: list[RawInput], end: float | None = None, **config: Any) -> tuple[list[tuple], Gestures]:
    """Feed ``inputs`` with clock ticks between them (at each input's time), then tick at ``end`` and flush."""
    g = Gestures(DesktopRecordConfig(**config))
    out = []
    for raw in inputs:
        out += g.tick(raw.at)
        out += g.feed(raw)
    if end is not None:
        out += g.tick(end)
    out += g.flush()
    return [_summary(x) for x in out], g


def _summary(g: Any) -> tuple:
    kind = g.kind.value
    if kind == "drag":
        return kind, g.start, g.end
    if kind in ("click", "double_click", "right_click"):
        return kind, g.start
    if kind == "long_press":
        return kind, g.start, round(g.duration_s, 2)
    if kind == "scroll":
        return kind, g.direction.value, g.clicks
    if kind == "type":
        return kind, g.text
    if kind == "wait":
        return kind, round(g.duration_s, 2)
    return kind, g.keys


def test_clicks_double_clicks_drags_long_presses_and_right_clicks():
    clicks, _ = run([down(0), up(0.05), down(0.2, 102, 99), up(0.25, 102, 99),  # a double click (2 px off)
                     down(1.0), up(1.05), down(1.6), up(1.65),  # two clicks 0.6 s apart: two clicks
                     down(3.0), up(3.05), down(3.1, 120), up(3.15, 120),  # 20 px apart: two clicks
                     down(4.0), move(4.1, 104, 100), move(4.2, 180, 150), up(4.3, 200, 160),  # a drag
                     down(5.0), move(5.5, 103, 101), up(5.9, 103, 101),  # held 0.9 s, moved 3 px: long press
                     down(7.0, button=3), up(7.1, button=3), down(8.0, button=2), up(8.1, button=2)], end=10)
    assert clicks == [
        ("double_click", (100, 100)), ("click", (100, 100)), ("click", (100, 100)), ("click", (100, 100)),
        ("click", (120, 100)), ("drag", (100, 100), (200, 160)), ("long_press", (100, 100), 0.9),
        ("right_click", (100, 100)),
    ]
    # a click is held back for the double-click time, then completes on its own
    g = Gestures(DesktopRecordConfig())
    assert g.feed(down(0)) == [] and g.feed(up(0.05)) == [] and g.tick(0.3) == []
    assert g.deadline() == pytest.approx(0.4) and [x.kind for x in g.tick(0.41)] == [ActionKind.CLICK]
    # the second press of a double click that drags: the click, then the drag
    out, g = run([down(0), up(0.05), down(0.2), move(0.3, 150, 150), up(0.4, 150, 150), down(2, button=2), up(2.1, button=2)])
    assert out == [("click", (100, 100)), ("drag", (100, 100), (150, 150))]
    assert g.left_out == {"middle click": 1}


def test_wheel_clicks_become_one_scroll_per_direction_and_pause():
    out, _ = run([down(0, button=5), up(0.01, button=5), down(0.1, button=5), down(0.2, button=5),
                  down(0.3, button=4),  # the direction changes
                  down(1.5, button=4),  # a gap over 0.5 s
                  down(1.6, button=7), down(1.62, button=6)], end=5)
    assert out == [("scroll", "down", 3), ("scroll", "up", 1), ("scroll", "up", 1), ("scroll", "right", 1),
                   ("scroll", "left", 1)]


def test_typed_text_groups_per_window_and_commits_on_enter_clicks_focus_changes_and_idle():
    out, _ = run([
        press(0.0, "h"), press(0.1, "e"), press(0.2, "l"), press(0.3, "p"), press(0.4, name="Backspace"),
        press(0.5, "l"), press(0.6, "o"), press(0.7, " "), press(0.8, "你"), press(0.9, "!", mods=frozenset({SHIFT})),
        press(1.0, name="Enter"),  # commits, and is a key of its own
        press(1.1, "a"), press(1.2, "b", window=2),  # focus moved to another window
        press(1.3, name="Backspace", window=2), press(1.4, name="Backspace", window=2),  # one takes back "b", one is a key
        press(1.5, "c", window=2), down(1.6), up(1.65),  # a click commits
        press(3.0, "x"), press(5.0, "y"),  # idle 2 s > 1.5 s: two texts
    ], end=10)
    assert out == [("type", "hello 你!"), ("key", ("Enter",)), ("type", "a"), ("key", ("Backspace",)), ("type", "c"),
                   ("click", (100, 100)), ("type", "x"), ("type", "y")]


def test_keys_hotkeys_and_modifiers_alone():
    ctrl, shift, alt_gr = frozenset({CONTROL}), frozenset({SHIFT}), frozenset({ALT_GR})
    out, g = run([
        press(0, "a"), press(0.1, "a", mods=ctrl),  # the hotkey commits the text first
        press(0.2, "T", mods=ctrl | shift, base="t"), press(0.3, name="Tab", mods=shift), press(0.4, name="Escape"),
        press(0.5, "æ", mods=alt_gr),  # AltGr types
        press(0.6, modifier=SHIFT), release(0.7, modifier=SHIFT),  # Shift alone: nothing
        press(0.8, modifier=META), release(0.9, modifier=META),  # Meta alone: opens the desktop's menu
        press(1.0, modifier=META), press(1.1, "e", mods=frozenset({META})), release(1.2, modifier=META),
        press(1.3, mods=ctrl, base=None),  # a key with no name (a media key)
    ])
    assert out == [("type", "a"), ("hotkey", ("Control", "a")), ("hotkey", ("Control", "Shift", "t")),
                   ("hotkey", ("Shift", "Tab")), ("key", ("Escape",)), ("type", "æ"), ("key", ("Meta",)),
                   ("hotkey", ("Meta", "e"))]
    assert g.left_out == {"key without a name": 1}


def test_pause_leaves_out_what_happens_and_marks_the_gap_and_stop_ends():
    keys = frozenset({CONTROL, ALT})
    out, g = run([press(0, "a"), press(1, "p", mods=keys), down(2), up(2.1), press(2.5, "s"),  # private
                  press(4, "p", mods=keys), press(5, "b"), press(6, "s", mods=keys), press(7, "c"), down(8)])
    assert out == [("type", "a"), ("wait", 3.0), ("type", "b")]
    assert g.stopped and g.left_out == {"while paused": 2}
    out, g = run([press(0, "p", mods=keys), down(1), press(2.5, "s", mods=keys)])  # stopped while paused
    assert out == [("wait", 2.5)] and g.stopped
    out, _ = run([press(0, "x", mods=frozenset({CONTROL, ALT, SHIFT}), base="p")])  # Control+Alt+Shift+p is not pause
    assert out == [("hotkey", ("Control", "Alt", "Shift", "p"))]


# -- on Xvfb: xdotool plays the person -------------------------------------------------------------


def xdo(*args: str) -> None:
    procs.run(["xdotool", *args], check=True, timeout=30)


def type_text(text: str) -> None:
    """Type ASCII with xdotool, and each other character by binding it to a spare keycode first.

    ``xdotool type`` binds a spare keycode to a character's keysym, presses it and unbinds it at once;
    an application that reads the press after the unbinding loses the character (Tk does under load;
    the X server, and so the recorder, saw it: see the next test). Binding it here, with a pause
    for the application to take the new mapping before and the press after, makes the application's
    confirmation reliable, and the recorder still has to follow the mapping changes.
    """
    from Xlib import display as xdisplay

    conn = xdisplay.Display(os.environ["DISPLAY"])
    try:
        info = conn.display.info
        rows = conn.get_keyboard_mapping(info.min_keycode, info.max_keycode - info.min_keycode + 1)
        spare = max(info.min_keycode + i for i, row in enumerate(rows) if not any(row))
        for part in re.findall(r"[\x00-\x7f]+|[^\x00-\x7f]", text):
            if part.isascii():
                xdo("type", "--delay", "12", "--", part)
                continue
            code = ord(part)
            keysym = code if code < 0x100 else 0x01000000 + code
            conn.change_keyboard_mapping(spare, [(keysym, keysym)])
            conn.sync()
            time.sleep(0.1)
            xdo("key", f"U{code:04X}")  # xdotool finds the keysym bound, so it binds nothing itself
            time.sleep(0.1)
            conn.change_keyboard_mapping(spare, [(0, 0)])
            conn.sync()
    finally:
        conn.close()


def record(display: str, person: Callable[[], None], timeout: float = 60, **options: Any
           ) -> tuple[list[DemoEvent], dict[str, Any]]:
    """Record while ``person`` acts (in a thread); the stop keys are pressed after it, whatever happens."""

    def act() -> None:
        try:
            person()
        finally:
            time.sleep(0.1)
            xdo("key", "ctrl+alt+s")

    async def main() -> tuple[list[DemoEvent], dict[str, Any]]:
        recorder = DesktopRecorder(DesktopConfig(display=display), DesktopRecordConfig(**options))
        assert isinstance(recorder, Recorder)
        await recorder.start()
        events = []
        try:
            acting = asyncio.create_task(asyncio.to_thread(act))
            while (event := await asyncio.wait_for(recorder.next_event(), timeout)) is not None:
                events.append(event)
            await acting
            assert await recorder.next_event() is None  # and stays ended
        finally:
            await recorder.stop()
        return events, recorder.describe()

    return asyncio.run(main())


def px(point: Any) -> tuple[float, float]:
    """The screen pixel position of a normalized point (the pixel's centre is (i + 0.5) / W)."""
    return point.x * SW - 0.5, point.y * SH - 0.5


def near(point: Any, x: float, y: float) -> bool:
    u, v = px(point)
    return abs(u - x) <= 2 and abs(v - y) <= 2


def test_a_person_s_actions_are_recorded_action_by_action(app, xvfb):
    def person():
        xdo("mousemove", "70", "50", "click", "1")  # red
        xdo("mousemove", "190", "50", "click", "--repeat", "2", "--delay", "80", "1")  # blue, double
        xdo("mousemove", "30", "70", "click", "3")  # red, right
        xdo("mousemove", "400", "60", "mousedown", "1", "mousemove", "450", "100", "mousemove", "500", "150",
            "mousemove", "560", "200", "mouseup", "1")  # a drag on the canvas
        xdo("mousemove", "170", "360", "click", "--repeat", "3", "--delay", "40", "5")  # the list, 3 down
        app.value("list_top", 15)
        time.sleep(0.6)
        xdo("click", "--repeat", "2", "--delay", "40", "4")  # 2 up
        app.value("list_top", 5)
        xdo("mousemove", "170", "115", "click", "1")  # the entry
        type_text("héllo 你好 ✓")
        app.value("entry", "héllo 你好 ✓")
        xdo("mousemove", "170", "190", "click", "1")  # the text
        type_text("第一行")
        xdo("key", "Return")
        type_text("line 2")
        app.value("text", "第一行\nline 2")
        xdo("key", "ctrl+a")
        xdo("key", "Escape")
        xdo("key", "ctrl+alt+p")  # pause: what follows is private
        paused = time.monotonic()
        xdo("mousemove", "190", "50", "click", "1")
        type_text("secret")
        app.wait_for(lambda e: e["ev"] == "value" and e["w"] == "text" and "secret" in e["v"], "the private text")
        time.sleep(max(0.0, 0.5 - (time.monotonic() - paused)))
        xdo("key", "ctrl+alt+p")  # resume
        xdo("mousemove", "70", "50", "click", "1")

    events, described = record(xvfb, person)
    got = [e.action for e in events]
    kinds = [a.kind.value for a in got]
    assert kinds == ["click", "double_click", "right_click", "drag", "scroll", "scroll", "click", "type", "click",
                     "type", "key", "type", "hotkey", "key", "wait", "click"], [a.describe() for a in got]
    click, double, right, drag, down_, up_, c_entry, t_entry, c_text, t1, enter, t2, ctrl_a, esc, wait, last = got
    assert near(click.point, 70, 50) and near(double.point, 190, 50) and near(right.point, 30, 70)
    assert near(drag.point, 400, 60) and near(drag.end, 560, 200)
    assert (down_.direction.value, up_.direction.value) == ("down", "up") and near(down_.point, 170, 360)
    assert (down_.amount, up_.amount) == (3 * 120 / SH, 2 * 120 / SH)  # wheel clicks * scroll_click_px / height
    assert near(c_entry.point, 170, 115) and near(c_text.point, 170, 190) and near(last.point, 70, 50)
    assert (t_entry.text, t1.text, enter.keys, t2.text) == ("héllo 你好 ✓", "第一行", ("Enter",), "line 2")
    assert (ctrl_a.keys, esc.keys) == (("Control", "a"), ("Escape",))
    assert 0.45 <= wait.duration_s < 3 and events[14].info["paused_s"] == round(wait.duration_s, 3)
    # what was done while paused reached the app but not the recording
    assert not any(e.action.text and "secret" in e.action.text for e in events)
    presses = [(e["w"], e["b"]) for e in app.of("press")]
    assert ("blue", 1) in presses and ("red", 3) in presses and ("canvas", 1) in presses
    # targets: the Tk window under the point, and the focused window for keys and text
    for event in events[:14] + events[15:]:
        assert event.target is not None and event.target.text == "handeye-test-app", event.action.describe()
        assert event.target.box.as_list() == pytest.approx([0, 0, 640 / SW, 480 / SH])
        assert event.info["window"]["name"] == "handeye-test-app"
    assert events[14].target is None
    # every frame is older than its event, and recent
    for event in events:
        assert event.frame.timestamp <= event.at and 0 <= event.frame_lag_s < 0.3 and not event.late
        assert event.frame.size == (SW, SH) and event.frame.meta["input_rect"] == [0, 0, SW, SH]
    assert described["events"] == len(events) and described["left_out"] == {"while paused": 1 + len("secret")}
    assert described["missing"][0].startswith("accessibility tree (AT-SPI)")
    assert described["targets"] == "the window under the point; the focused window for keys"
    assert described["pause_keys"] == "Control+Alt+p" and described["stop_keys"] == "Control+Alt+s"


def test_unicode_typed_by_xdotool_is_read_with_the_mapping_of_its_moment(app, xvfb):
    """xdotool binds each character to a spare keycode only for its press: the recording has every one
    (the application may miss some, so it is not asked; the test above has it confirm its input)."""
    text = "你好 ✓ ü Ωmega"

    def person():
        xdo("mousemove", "170", "115", "click", "1")
        xdo("type", "--delay", "12", "--", text)

    events, _ = record(xvfb, person)
    assert [(e.action.kind.value, e.action.text) for e in events] == [("click", None), ("type", text)]


def dark_pixels(frame: np.ndarray) -> int:
    """Dark pixels in the entry (20, 100, 300 x 30) right of where its insert cursor blinks."""
    return int((frame[104:126, 60:315].max(axis=2) < 128).sum())


def test_pre_action_frames_show_the_screen_just_before_each_action(app, xvfb):
    def person():
        xdo("mousemove", "170", "115", "click", "1")
        time.sleep(0.2)
        type_text("abcdefghijklmnopqrstuvwxyz")
        app.value("entry", "abcdefghijklmnopqrstuvwxyz")
        time.sleep(0.2)
        xdo("mousemove", "70", "50", "click", "1")

    events, _ = record(xvfb, person)
    assert [e.action.kind.value for e in events] == ["click", "type", "click"]
    click, typed, after = events
    assert dark_pixels(click.frame.frame) == 0 and dark_pixels(typed.frame.frame) == 0  # before the text
    assert dark_pixels(after.frame.frame) > 100  # the text is there before the next click
    for event in events:
        assert event.frame.timestamp <= event.at and event.frame_lag_s < 0.1


def test_fifty_clicks_faster_than_frames_are_all_recorded(app, xvfb):
    points = [(355 + 10 * i, y) for y in (60, 160) for i in range(25)]  # 10 px apart: no double clicks

    def person():
        args = [a for x, y in points for a in ("mousemove", str(x), str(y), "click", "--delay", "0", "1")]
        xdo(*args)
        app.wait_for(lambda e: len(app.of("release")) >= 50, "50 releases", timeout=10)

    events, described = record(xvfb, person)
    assert [e.action.kind.value for e in events] == ["click"] * 50
    assert all(near(e.action.point, x, y) for e, (x, y) in zip(events, points))
    assert [(e["x"], e["y"]) for e in app.of("release")] == points  # the app got them all
    assert all(e.frame.timestamp <= e.at for e in events)
    span = events[-1].at - events[0].at
    frames = len({id(e.frame.frame) for e in events})
    rate = 49 / span if span > 0 else float("inf")
    lags = sorted(e.frame_lag_s for e in events)
    print(f"\n50 clicks in {span * 1000:.0f} ms ({rate:.0f} events/s) on {frames} frames; frame lag median "
          f"{lags[25] * 1000:.1f} ms, max {lags[-1] * 1000:.1f} ms; recorder: {described['frame_lag_s']}")
    assert frames < 50  # faster than frames, and none dropped
    assert described["raw_inputs"] >= 150  # 50 moves, presses and releases


# -- bad input -----------------------------------------------------------------------------------


def test_no_display_says_so(monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    with pytest.raises(DeviceUnavailable, match="desktop recording needs an X display: no X display") as info:
        asyncio.run(DesktopRecorder().start())
    assert "Xvfb" in str(info.value)


def test_calls_before_start_are_errors():
    with pytest.raises(DeviceError, match="not started"):
        asyncio.run(DesktopRecorder().next_event())
    with pytest.raises(DeviceError, match="not started"):
        asyncio.run(DesktopRecorder().observe())


def test_a_server_without_record_is_named_with_what_still_works(xvfb, monkeypatch):
    monkeypatch.setenv("DISPLAY", xvfb)  # the recorder points DISPLAY at the display it opens: restore it after
    proc, display = start_xvfb("320x240", "-extension", "RECORD")
    try:
        with pytest.raises(DeviceUnavailable) as info:
            asyncio.run(DesktopRecorder(DesktopConfig(display=display)).start())
        message = str(info.value)
        assert message.startswith(f"recording on {display} needs the X RECORD extension")
        assert "+extension RECORD" in message and "`agent run --device desktop` still works" in message
    finally:
        stop_xvfb(proc)


def test_observe_is_the_screen_now(xvfb, app):
    async def main():
        recorder = DesktopRecorder(DesktopConfig(display=xvfb))
        await recorder.start()
        try:
            obs = await recorder.observe()
        finally:
            await recorder.stop()
        assert obs.size == (SW, SH) and obs.frame[50, 70].tolist() == [255, 0, 0]  # the red square
        after = await recorder.observe()  # stopped: a fresh grab
        assert after.frame[50, 190].tolist() == [0, 0, 255]
        return recorder.describe()

    described = asyncio.run(main())
    assert described["kind"] == "desktop" and described["frame_size"] == [SW, SH]


def test_a_desktop_demonstration_is_written_as_an_episode(app, xvfb, tmp_path):
    """The one episode runner with the person in the policy's seat, as `agent record --device desktop` runs it."""
    from agent.record import record_demonstration
    from envs.records import Actor, Outcome
    from envs.recording import RecordingEnv
    from envs.trajectory import RunWriter, read_episode

    writer = RunWriter(tmp_path / "runs", config={}).episode(task="greet", actor=Actor.HUMAN)
    recorder = DesktopRecorder(DesktopConfig(display=xvfb), DesktopRecordConfig(pause_keys="Control+Alt+p"))
    env = RecordingEnv(recorder, "greet")

    def person():
        xdo("mousemove", "170", "115", "click", "1")
        type_text("grüß dich")
        xdo("key", "Return")
        app.value("entry", "grüß dich")
        xdo("key", "ctrl+alt+p")
        time.sleep(0.3)
        xdo("key", "ctrl+alt+p")
        time.sleep(0.1)
        xdo("key", "ctrl+alt+s")

    async def main():
        recording = asyncio.create_task(record_demonstration(env, writer))
        await asyncio.wait_for(recorder.started.wait(), 30)
        await asyncio.to_thread(person)
        result = await asyncio.wait_for(recording, 30)
        await env.close()
        return result

    result = asyncio.run(main())
    assert result.record.outcome is Outcome.CLAIMED and result.record.actor is Actor.HUMAN
    episode = read_episode(writer.path)
    assert [s.action["kind"] for s in episode.steps] == ["click", "type", "key", "wait", "finish"]
    click, typed, enter, wait, _ = episode.steps
    assert near(Point(*click.action["point"]), 170, 115) and typed.action["text"] == "grüß dich"
    assert click.target_box == pytest.approx([0, 0, 640 / SW, 480 / SH])
    assert typed.info["env_info"]["demo"]["window"]["name"] == "handeye-test-app"
    assert 0.25 <= wait.info["env_info"]["demo"]["paused_s"] < 2
    assert all(s.frame_size == (SW, SH) and (episode.path / s.frame_path).exists() for s in episode.steps)
    assert episode.record.policy["recorder"]["kind"] == "desktop"


def test_agent_record_takes_the_desktop_record_section_and_its_flags(app, xvfb, tmp_path, monkeypatch, capsys):
    """`agent record --device desktop --set desktop_record.mask_text=true`: the DesktopRecorder gets the section, so
    the typed text is written masked; --pause-key wins over the section's pause keys (and its stop keys stay)."""
    from agent.cli import main as agent_main
    from envs.trajectory import iter_episodes
    from tests.support.person import play_once_started

    settings: list[DesktopRecordConfig] = []

    def person() -> None:
        xdo("mousemove", "170", "115", "click", "1")
        type_text("hunter22")
        xdo("key", "Return")
        app.value("entry", "hunter22")
        xdo("key", "ctrl+alt+k")  # --pause-key
        time.sleep(0.3)
        xdo("key", "ctrl+alt+k")
        time.sleep(0.1)
        xdo("key", "ctrl+shift+q")  # the section's stop keys

    async def play(recorder: DesktopRecorder) -> None:
        settings.append(recorder.record)
        await asyncio.to_thread(person)

    errors = play_once_started(monkeypatch, play)
    code = agent_main(["record", "Sign in", "--device", "desktop", "--runs-dir", str(tmp_path), "--pause-key",
                       "ctrl+alt+k", "--set", f"desktop.display={xvfb}", "--set", "desktop_record.mask_text=true",
                       "--set", 'desktop_record.pause_keys="ctrl+alt+F8"', "--set",
                       'desktop_record.stop_keys=["Control", "Shift", "q"]', "--set", "desktop_record.fps=20"])
    out = capsys.readouterr().out
    assert not errors and code == 0, (errors, out)
    (record,) = settings
    assert record.mask_text and record.fps == 20 and record.pause_combo.describe() == "Control+Alt+k"
    assert record.stop_combo.describe() == "Control+Shift+q" and "Control+Shift+q" in out
    (run_dir,) = [d for d in tmp_path.iterdir() if (d / "run.json").exists()]
    (episode,) = iter_episodes(run_dir)
    assert [s.action["kind"] for s in episode.steps] == ["click", "type", "key", "wait", "finish"]
    typed = episode.steps[1]
    assert typed.action["text"] == "••••••" and "hunter22" not in (episode.path / "steps.jsonl").read_text()
    assert episode.record.policy["recorder"]["pause_keys"] == "Control+Alt+k"


@pytest.mark.parametrize("setting, words", [
    ("desktop_record.mask_text=maybe", ["desktop_record.mask_text must be bool", "'maybe'"]),
    ("desktop_record.fps=500", ["[desktop_record]", "fps=500.0 must be in 1..120"]),
    ('desktop_record.stop_keys="q"', ["[desktop_record]", "stop_keys='q' must be modifiers", "and one key"]),
    ("desktop_record.mask_txt=true", ["unknown option desktop_record.mask_txt", "did you mean 'mask_text'?"]),
])
def test_a_bad_desktop_record_setting_is_a_clear_error(setting, words, capsys):
    from agent.cli import main as agent_main

    assert agent_main(["record", "Sign in", "--device", "desktop", "--set", setting]) == 2
    out = " ".join(capsys.readouterr().out.split())
    for word in words:
        assert word in out, out

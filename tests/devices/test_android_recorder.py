"""The Android recorder through a real adb server and the fake phone's ``getevent`` stream.

The person is ``phone.finger`` (tests/support/fake_getevent.py), run in a thread while the recorder runs on the
event loop: every touch goes out as getevent lines through adbd's wire protocol and the real adb server, and
happens on the fake phone when the finger lifts, as it would on a phone. ``settle`` waits until the recorder has
taken two more frames and UI dumps (a person slower than the phone), so each step's frame and target show the
screen the person acted on. The recording must equal the script action by action: points within 1 % of the
screen, target boxes from the hierarchy. Pure parsers and rules are tested on their own first.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from devices.actions import Action, ActionKind, Point, ScrollDirection
from devices.android.gestures import AndroidRecordOptions, key_action, touch_action
from devices.android.getevent import (AbsAxis, InputDevice, TouchTracker, find_touchscreen, panel_to_frame,
                                      parse_devices, parse_event_line)
from devices.android.recorder import AndroidRecorder
from devices.android.replies import UiElement
from devices.android.typed_text import Snapshot, TextTracker, edits, parse_input_method, parse_rotation_attr
from devices.base import Box
from devices.errors import DeviceUnavailable
from devices.recording import MASKED_TEXT, DemoEvent, Recorder
from tests.devices.test_android import adb_port, on_phone  # noqa: F401 - adb_port is the module's adb server
from tests.support.fake_adbd import FakePhone

W, H = 360, 800

# -- pure parts ----------------------------------------------------------------------------------------

# `getevent -lp` of a real phone (a Pixel-like layout), and the same panel without names
LABELLED = """add device 1: /dev/input/event4
  name:     "gpio-keys"
  events:
    KEY (0001): KEY_VOLUMEDOWN        KEY_VOLUMEUP          KEY_POWER*
  input props:
    <none>
add device 2: /dev/input/event2
  name:     "fts_ts"
  events:
    KEY (0001): KEY_WAKEUP            BTN_TOOL_FINGER       BTN_TOUCH
    ABS (0003): ABS_MT_SLOT           : value 0, min 0, max 9, fuzz 0, flat 0, resolution 0
                ABS_MT_TOUCH_MAJOR    : value 0, min 0, max 255, fuzz 0, flat 0, resolution 0
                ABS_MT_POSITION_X     : value 0, min 0, max 1079, fuzz 0, flat 0, resolution 0
                ABS_MT_POSITION_Y     : value 0, min 0, max 2399, fuzz 0, flat 0, resolution 0
                ABS_MT_TRACKING_ID    : value 0, min 0, max 65535, fuzz 0, flat 0, resolution 0
  input props:
    INPUT_PROP_DIRECT
could not open /dev/input/event7, Permission denied
"""
NUMERIC = """add device 1: /dev/input/event2
  name:     "fts_ts"
  events:
    KEY (0001): 008f  0145  014a
    ABS (0003): 002f  : value 0, min 0, max 9, fuzz 0, flat 0, resolution 0
                0035  : value 0, min 0, max 4095, fuzz 0, flat 0, resolution 0
                0036  : value 0, min 0, max 4095, fuzz 0, flat 0, resolution 0
                0039  : value 0, min 0, max 65535, fuzz 0, flat 0, resolution 0
  input props:
    INPUT_PROP_DIRECT
"""


def test_parse_devices_finds_the_touchscreen_and_its_ranges():
    keys, panel = parse_devices(LABELLED)
    assert keys.name == "gpio-keys" and keys.keys == {"KEY_VOLUMEDOWN", "KEY_VOLUMEUP", "KEY_POWER"}
    assert not keys.is_touchscreen and find_touchscreen([keys, panel]) is panel
    assert panel.path == "/dev/input/event2" and "INPUT_PROP_DIRECT" in panel.props
    assert panel.axes["ABS_MT_POSITION_X"] == AbsAxis(0, 1079) and panel.axes["ABS_MT_POSITION_Y"] == AbsAxis(0, 2399)
    (numeric,) = parse_devices(NUMERIC)
    assert numeric.is_touchscreen and numeric.axes["ABS_MT_POSITION_Y"] == AbsAxis(0, 4095)
    assert numeric.keys == {"KEY_WAKEUP", "BTN_TOOL_FINGER", "BTN_TOUCH"}
    assert find_touchscreen(parse_devices(LABELLED.split("add device 2")[0])) is None


def test_parse_event_lines_named_numeric_and_signed():
    ev = parse_event_line("[   51389.543297] /dev/input/event2: EV_ABS       ABS_MT_TRACKING_ID   ffffffff    ")
    assert (ev.time, ev.device, ev.type, ev.code, ev.value) == (51389.543297, "/dev/input/event2", "EV_ABS",
                                                                "ABS_MT_TRACKING_ID", -1)
    assert parse_event_line("[   51389.543297] /dev/input/event2: 0003 0035 000001a4\r").code == "ABS_MT_POSITION_X"
    assert parse_event_line("[   51389.543297] /dev/input/event2: 0003 0035 000001a4").value == 420
    down = parse_event_line("[ 1.000001] /dev/input/event1: EV_KEY       KEY_BACK             DOWN")
    assert (down.code, down.value) == ("KEY_BACK", 1)
    assert parse_event_line("[ 1.5] /dev/input/event1: 0001 009e 00000000").code == "KEY_BACK"
    for other in ("add device 1: /dev/input/event2", '  name:     "fts_ts"', "", "could not open x, Permission denied"):
        assert parse_event_line(other) is None


def _lines(*rows: str) -> list[Any]:
    return [parse_event_line(f"[ {t}] /dev/input/event2: {rest}") for t, rest in (r.split(" ", 1) for r in rows)]


def test_touch_tracker_follows_the_first_finger_of_a_two_finger_gesture():
    tracker = TouchTracker()
    events = _lines(
        "1.000 EV_ABS ABS_MT_SLOT 00000000", "1.000 EV_ABS ABS_MT_TRACKING_ID 00000005",
        "1.000 EV_ABS ABS_MT_POSITION_X 00000064", "1.000 EV_ABS ABS_MT_POSITION_Y 000000c8",
        "1.000 EV_SYN SYN_REPORT 00000000",
        "1.100 EV_ABS ABS_MT_SLOT 00000001", "1.100 EV_ABS ABS_MT_TRACKING_ID 00000006",
        "1.100 EV_ABS ABS_MT_POSITION_X 0000012c", "1.100 EV_ABS ABS_MT_POSITION_Y 0000012c",
        "1.100 EV_SYN SYN_REPORT 00000000",
        "1.200 EV_ABS ABS_MT_SLOT 00000000", "1.200 EV_ABS ABS_MT_POSITION_Y 000000d2",
        "1.200 EV_SYN SYN_REPORT 00000000",
        "1.300 EV_ABS ABS_MT_TRACKING_ID ffffffff", "1.300 EV_SYN SYN_REPORT 00000000",
        "1.400 EV_ABS ABS_MT_SLOT 00000001", "1.400 EV_ABS ABS_MT_TRACKING_ID ffffffff",
    )
    assert all(tracker.feed(ev) is None for ev in events)
    assert tracker.open_since == 1.0
    touch = tracker.feed(parse_event_line("[ 1.400] /dev/input/event2: EV_SYN SYN_REPORT 00000000"))
    assert touch.fingers == 2 and touch.start == (100, 200) and touch.end == (100, 210)
    assert touch.duration_s == pytest.approx(0.4) and tracker.open_since is None


def test_touch_tracker_without_tracking_ids_uses_btn_touch():
    tracker = TouchTracker()
    events = _lines("2.0 EV_KEY BTN_TOUCH DOWN", "2.0 EV_ABS ABS_MT_POSITION_X 0000000a",
                    "2.0 EV_ABS ABS_MT_POSITION_Y 00000014", "2.0 EV_SYN SYN_REPORT 00000000",
                    "2.1 EV_KEY BTN_TOUCH UP")
    assert all(tracker.feed(ev) is None for ev in events)
    touch = tracker.feed(parse_event_line("[ 2.1] /dev/input/event2: EV_SYN SYN_REPORT 00000000"))
    assert touch.start == (10, 20) and touch.fingers == 1


def test_panel_to_frame_scales_and_turns_with_the_display():
    panel = InputDevice("/dev/input/event2", axes={"ABS_MT_POSITION_X": AbsAxis(0, 4095),
                                                   "ABS_MT_POSITION_Y": AbsAxis(0, 4095)})
    x, y = 1024, 3072  # a quarter across, three quarters down the panel in its natural orientation
    assert panel_to_frame(panel, 0, x, y) == (0.25, 0.75)
    assert panel_to_frame(panel, 1, x, y) == (0.75, 0.75)  # turned left: the panel's y runs along the frame's x
    assert panel_to_frame(panel, 2, x, y) == (0.75, 0.25)
    assert panel_to_frame(panel, 3, x, y) == (0.25, 0.25)


OPT = AndroidRecordOptions()


def _path(*points: tuple[float, float, float]) -> list[tuple[float, float, float]]:
    return list(points)


def test_touch_rules():
    still = _path((0, 0.5, 0.5), (0.05, 0.501, 0.5))
    assert touch_action(still, 0.1, (W, H), 21, OPT) == Action("click", Point(0.5, 0.5))
    assert touch_action(still, 0.9, (W, H), 21, OPT) == Action("long_press", Point(0.5, 0.5), duration_s=0.9)
    up = _path((0, 0.5, 0.75), (0.2, 0.5, 0.5), (0.3, 0.52, 0.25))
    assert touch_action(up, 0.3, (W, H), 21, OPT) == Action("scroll", Point(0.51, 0.5), direction="down", amount=0.5)
    down = _path((0, 0.5, 0.25), (0.3, 0.5, 0.5))
    assert touch_action(down, 0.3, (W, H), 21, OPT).direction is ScrollDirection.UP
    left = _path((0, 0.9, 0.5), (0.3, 0.1, 0.5))
    swipe = touch_action(left, 0.3, (W, H), 21, OPT)
    assert (swipe.direction, swipe.amount) == (ScrollDirection.RIGHT, 0.8)
    diagonal = _path((0, 0.2, 0.2), (0.3, 0.8, 0.6))
    assert touch_action(diagonal, 0.3, (W, H), 21, OPT) == Action("drag", Point(0.2, 0.2), Point(0.8, 0.6))
    rested = _path((0, 0.5, 0.75), (0.7, 0.5, 0.75), (0.9, 0.5, 0.25))  # held, then moved: an icon being moved
    assert touch_action(rested, 0.9, (W, H), 21, OPT).kind is ActionKind.DRAG
    assert touch_action(left, 0.3, (W, H), 21, OPT, "android.widget.SeekBar").kind is ActionKind.DRAG
    assert key_action("KEY_BACK") == Action("back") and key_action("KEY_HOMEPAGE") == Action("home")
    assert key_action("KEY_ENTER") == Action("key", keys=("Enter",))
    assert key_action("KEY_APPSWITCH") == Action("key", keys=("AppSwitch",))
    assert key_action("KEY_A") == Action("key", keys=("a",)) and key_action("KEY_VOLUMEUP") is None
    with pytest.raises(ValueError, match="keyboard_fraction"):
        AndroidRecordOptions(keyboard_fraction=1.5)


def _field(text: str, focused: bool, rid: str = "app:id/user", password: bool = False) -> UiElement:
    return UiElement(Box(0.05, 0.15, 0.95, 0.23), text, rid, "", "android.widget.EditText", "app", True, password,
                     focused)


def test_text_tracker_commits_keyboard_typing_per_field():
    t = TextTracker()
    before = Snapshot(0.0, 0.1, (_field("", False),))
    t.snapshot(before, None)
    t.snapshot(Snapshot(1.0, 1.1, (_field("al", True),)), before)  # typing began before this dump
    t.keyboard(0.5)
    t.keyboard(0.9)
    t.keyboard(1.2)
    t.snapshot(Snapshot(2.0, 2.1, (_field("alice", True),)), None)
    typed = t.commit()
    assert (typed.before, typed.after, typed.first_key, typed.complete) == ("", "alice", 0.5, True)
    assert t.commit() is None  # nothing new
    t.snapshot(Snapshot(3.0, 3.1, (_field("alice", True),)), None)
    t.snapshot(Snapshot(4.0, 4.1, (_field("alice!", True),)), None)  # the app changed it: no keyboard, no typing
    assert t.commit() is None
    t.keyboard(5.0)
    t.snapshot(Snapshot(5.5, 5.6, (_field("al", True),)), None)
    moved = t.snapshot(Snapshot(6.0, 6.1, (_field("al", False), _field("", True, "app:id/pw", True))), None)
    assert (moved.before, moved.after) == ("alice!", "al") and edits(moved.before, moved.after) == (4, "")
    assert t.field.password
    t.keyboard(7.0)
    assert t.commit() is None and t.unread == 1  # no dump showed the text: nothing to record
    assert edits("hello", "help!") == (2, "p!")


def test_input_method_and_rotation_replies():
    dump = ("mShowRequested=true mShowExplicitlyRequested=false mShowForced=false mInputShown=true\n"
            "  Last computed insets:\n    contentTopInsets=1436 visibleTopInsets=1436 touchableInsets=3\n")
    assert parse_input_method(dump) == (True, 1436)
    assert parse_input_method("mInputShown=false") == (False, None) and parse_input_method("") == (None, None)
    assert parse_rotation_attr("<?xml version='1.0' ?><hierarchy rotation=\"3\"><node/></hierarchy>") == 3
    assert parse_rotation_attr("<hierarchy><node/></hierarchy>") is None


# -- through adb --------------------------------------------------------------------------------------

FAST = AndroidRecordOptions(frame_interval_s=0.05, dump_interval_s=0.1)


def settle(phone: FakePhone, n: int = 2) -> None:
    """Wait until the recorder took ``n`` more frames and UI dumps."""
    captures, dumps = phone.captures, phone.dumps
    deadline = time.monotonic() + 20
    while phone.captures < captures + n or phone.dumps < dumps + n:
        assert time.monotonic() < deadline, "the recorder stopped capturing"
        time.sleep(0.02)


Person = Callable[[FakePhone, AndroidRecorder, asyncio.AbstractEventLoop], None]


def stopped_listening(phone: FakePhone) -> None:
    """getevent ends on the phone once the recording closed its stream (the close travels through the adb server)."""
    deadline = time.monotonic() + 10
    while phone.finger.listeners:
        assert time.monotonic() < deadline, "getevent kept running after the recording stopped"
        time.sleep(0.02)


def record(port: int, person: Person, phone: FakePhone | None = None, options: AndroidRecordOptions = FAST
           ) -> tuple[list[DemoEvent], dict[str, Any], FakePhone]:
    """Record what ``person(phone, recorder, loop)`` does (in a thread) until it is done and the phone has sent
    everything (the loop is the recorder's: the terminal's key handler calls ``resume`` on it)."""
    phone = phone or FakePhone(physical=(W, H))

    async def scenario(device, phone):
        recorder = AndroidRecorder(device, options)
        assert isinstance(recorder, Recorder)
        await recorder.start()
        events: list[DemoEvent] = []

        async def collect() -> None:
            while (event := await recorder.next_event()) is not None:
                events.append(event)

        collector = asyncio.create_task(collect())
        try:
            await asyncio.to_thread(person, phone, recorder, asyncio.get_running_loop())
            await asyncio.to_thread(settle, phone)  # the last lines are through the adb server by then
            recorder.request_stop()
            await asyncio.wait_for(collector, 30)
            final = await recorder.observe()
            assert final.frame.shape[:2] == phone.frame().shape[:2]
            return events, recorder.describe()
        finally:
            await recorder.stop()
            await asyncio.to_thread(stopped_listening, phone)

    events, described = on_phone(port, scenario, phone)
    return events, described, phone


def px(x: float, y: float, w: int = W, h: int = H) -> Point:
    return Point(x / w, y / h)


def assert_same(events: list[DemoEvent], expected: list[Action]) -> None:
    """Action by action: kinds, keys, text, directions equal; points and amounts within 1 % of the screen."""
    assert [e.action.kind for e in events] == [a.kind for a in expected], [e.action.describe() for e in events]
    for event, want in zip(events, expected):
        got = event.action
        for name in ("point", "end"):
            p, q = getattr(got, name), getattr(want, name)
            assert (p is None) == (q is None), (got, want)
            if p is not None:
                assert abs(p.x - q.x) <= 0.01 and abs(p.y - q.y) <= 0.01, (got, want)
        assert (got.text, got.keys, got.direction) == (want.text, want.keys, want.direction), (got, want)
        if want.amount is not None:
            assert got.amount == pytest.approx(want.amount, abs=0.01)
        if want.kind is ActionKind.LONG_PRESS:
            assert got.duration_s >= OPT.long_press_s
        assert event.frame_lag_s >= 0 and "frame_after_event" not in event.info


def box_of(event: DemoEvent) -> list[float]:
    assert event.target is not None and event.target.box is not None, event.action.describe()
    return [round(v, 4) for v in event.target.box.as_list()]


def colour_at(event: DemoEvent, x: float, y: float) -> tuple[int, ...]:
    return tuple(int(c) for c in event.frame.frame[int(y), int(x)])


def test_recording_equals_what_was_done(adb_port):
    def person(phone: FakePhone, recorder: AndroidRecorder, loop: asyncio.AbstractEventLoop) -> None:
        f = phone.finger
        settle(phone); f.tap(180, 160)                 # Notes
        settle(phone); f.tap(180, 152)                 # the note field
        settle(phone); f.type_text("hello")            # on the soft keyboard
        settle(phone); f.tap(279, 272)                 # Save: commits the typing first
        settle(phone); f.key("KEY_BACK")
        settle(phone); f.tap(180, 280)                 # List
        settle(phone); f.long_press(180, 200)          # Item 1
        settle(phone); f.swipe(180, 600, 180, 200)     # finger up: scroll down half a screen
        settle(phone); f.swipe(60, 300, 300, 600)      # diagonal: a drag
        settle(phone); f.key("KEY_HOMEPAGE")
        settle(phone); f.key("KEY_APPSWITCH")
        settle(phone); f.key("KEY_ENTER")
        settle(phone); f.key("KEY_VOLUMEUP")           # no action: not recorded, counted

    events, described, phone = record(adb_port, person)
    assert_same(events, [
        Action("click", px(180, 160)), Action("click", px(180, 152)), Action("type", text="hello"),
        Action("click", px(279, 272)), Action("back"), Action("click", px(180, 280)),
        Action("long_press", px(180, 200)), Action("scroll", px(180, 400), direction="down", amount=0.5),
        Action("drag", px(60, 300), px(300, 600)), Action("home"), Action("key", keys=("AppSwitch",)),
        Action("key", keys=("Enter",)),
    ])
    notes, field, typed, save, _, lst, row = events[:7]
    assert (notes.target.text, box_of(notes)) == ("Notes", [0.1, 0.15, 0.9, 0.25])
    assert box_of(field) == [0.05, 0.15, 0.95, 0.23] and field.target.role == "android.widget.EditText"
    assert box_of(typed) == box_of(field) and not typed.masked
    assert (save.target.text, box_of(save)) == ("Save", [0.6, 0.3, 0.95, 0.38])
    assert (lst.target.text, row.target.text, box_of(row)) == ("List", "Item 1", [0.0, 0.2, 1.0, 0.3])
    assert 0.7 <= row.action.duration_s <= 1.2
    # each frame is the screen before its action: the home screen's blue Notes button, then the notes screen
    assert colour_at(notes, 180, 160) == (66, 133, 244)
    assert colour_at(field, 180, 152) == (235, 235, 235)
    assert colour_at(typed, 180, 152) == (255, 255, 200) and colour_at(typed, 180, 700) == (60, 60, 60)
    assert notes.info["package"] == "com.example.launcher" and save.info["package"] == "com.example.notes"
    assert all(e.at <= later.at for e, later in zip(events, events[1:]))
    assert phone.files["/sdcard/Notes/hello.txt"] == b""  # the phone did what was recorded
    assert described["ignored_keys"] == 1 and described["touchscreen"]["x_range"] == [0, W - 1]
    assert described["dropped_touches"] == 0


@pytest.mark.parametrize("rotation", [1, 2])
def test_rotated_display_and_a_panel_of_its_own_resolution(adb_port, rotation):
    phone = FakePhone(physical=(W, H), rotation=rotation)
    phone.finger.touch_max = (4095, 4095)  # the panel reports 0-4095 on both axes, whatever the screen
    w, h = phone.display_size

    def person(phone: FakePhone, recorder: AndroidRecorder, loop: asyncio.AbstractEventLoop) -> None:
        f = phone.finger
        settle(phone); f.tap(0.5 * w, 0.2 * h)                      # Notes
        settle(phone); f.key("KEY_BACK")
        settle(phone); f.tap(0.97 * w, 0.97 * h)                    # the corner block
        settle(phone); f.swipe(0.5 * w, 0.8 * h, 0.5 * w, 0.2 * h)  # finger up
        settle(phone); f.swipe(0.9 * w, 0.5 * h, 0.2 * w, 0.5 * h)  # finger left: content to the right

    events, _, phone = record(adb_port, person, phone)
    assert_same(events, [
        Action("click", Point(0.5, 0.2)), Action("back"), Action("click", Point(0.97, 0.97)),
        Action("scroll", Point(0.5, 0.5), direction="down", amount=0.6),
        Action("scroll", Point(0.55, 0.5), direction="right", amount=0.7),
    ])
    assert box_of(events[0]) == [0.1, 0.15, 0.9, 0.25] and box_of(events[2]) == [0.95, 0.95, 1.0, 1.0]
    assert events[0].frame.size == (w, h) and events[0].info["rotation"] == rotation
    assert phone.counter == 0 and [e["kind"] for e in phone.events][:2] == ["tap", "key"]


def test_typed_text_and_password_fields(adb_port):
    phone = FakePhone(physical=(W, H), screen="login")

    def person(phone: FakePhone, recorder: AndroidRecorder, loop: asyncio.AbstractEventLoop) -> None:
        f = phone.finger
        settle(phone); f.tap(180, 152)
        f.type_text("alice")                  # at once: before any dump shows the focus
        settle(phone); f.tap(180, 248)        # the password field: commits alice
        settle(phone); f.type_text("hunter2")
        settle(phone); f.tap(180, 352)        # Sign in: commits the password, masked
        settle(phone); f.tap(180, 152)
        settle(phone); f.type_text("x")       # still typing when the recording stops

    events, _, phone = record(adb_port, person, phone)
    assert_same(events, [
        Action("click", px(180, 152)), Action("type", text="alice"), Action("click", px(180, 248)),
        Action("type", text=MASKED_TEXT), Action("click", px(180, 352)), Action("click", px(180, 152)),
        Action("type", text="x"),
    ])
    user, alice, pw_click, secret, signin, _, x = events
    password_box = [0.05, 0.27, 0.95, 0.35]
    assert box_of(alice) == [0.05, 0.15, 0.95, 0.23] and not alice.masked
    assert secret.masked and secret.target.password and secret.target.text == "" and box_of(secret) == password_box
    assert (signin.target.text, phone.signed_in, phone.login["password"]) == ("Sign in", "alice", "hunter2")
    for event in events:  # the password never leaves the recorder, and its field is masked in every frame
        assert "hunter" not in repr((event.action, event.target, event.info))
        assert Box(*password_box) in event.frame.sensitive_boxes
    assert x.target.text == "alicex"


def test_a_burst_of_taps_is_never_dropped(adb_port):
    phone = FakePhone(physical=(W, H), pty_service=False)  # an old adbd: getevent through plain shell:

    def person(phone: FakePhone, recorder: AndroidRecorder, loop: asyncio.AbstractEventLoop) -> None:
        settle(phone)
        for _ in range(50):
            phone.finger.tap(180, 400, hold_s=0.005)
            time.sleep(0.005)

    events, _, phone = record(adb_port, person, phone)
    assert phone.counter == 50 and "getevent -lt" in phone.commands
    assert [e.action.kind for e in events] == [ActionKind.CLICK] * 50
    assert all(e.target.text.startswith("Count") and box_of(e) == [0.1, 0.45, 0.9, 0.55] for e in events)
    assert all(abs(e.action.point.x - 0.5) < 0.01 and abs(e.action.point.y - 0.5) < 0.01 for e in events)
    assert all(e.frame_lag_s >= 0 for e in events) and events[-1].at - events[0].at < 10


def test_pause_records_a_wait_and_nothing_of_the_pause(adb_port):
    def person(phone: FakePhone, recorder: AndroidRecorder, loop: asyncio.AbstractEventLoop) -> None:
        settle(phone); phone.finger.tap(180, 400)
        settle(phone)
        recorder.pause()  # from the terminal's thread
        time.sleep(0.3)   # the capture and dump under way end
        captures, dumps = phone.captures, phone.dumps
        phone.finger.tap(180, 400)
        phone.finger.tap(180, 160)           # opens Notes: private
        time.sleep(0.5)
        assert (phone.captures, phone.dumps) == (captures, dumps)
        asyncio.run_coroutine_threadsafe(recorder.resume(), loop).result(30)
        settle(phone); phone.finger.key("KEY_BACK")

    events, _, phone = record(adb_port, person)
    assert [e.action.kind for e in events] == [ActionKind.CLICK, ActionKind.WAIT, ActionKind.BACK]
    wait = events[1]
    assert 0.8 <= wait.info["paused_s"] <= 10 and wait.action.duration_s == pytest.approx(wait.info["paused_s"])
    assert colour_at(wait, 180, 160) == (66, 133, 244)  # the screen before the pause: home
    assert colour_at(events[2], 180, 152) == (235, 235, 235)  # after the pause: the notes screen, freshly captured
    assert phone.counter == 2 and phone.screen == "home"


@pytest.mark.parametrize("access, words", [
    ("denied", ["could not read its input devices", "Permission denied", "agent run --device android"]),
    ("missing", ["no getevent command", "agent run --device android"]),
    ("no touchscreen", ["none of its input devices is a touchscreen", "gpio-keys", "agent run --device android"]),
])
def test_a_phone_that_cannot_record_says_what_is_missing(adb_port, access, words):
    phone = FakePhone(physical=(W, H))
    if access == "no touchscreen":
        phone.finger.touchscreen = False
    else:
        phone.getevent_access = access

    async def scenario(device, phone):
        recorder = AndroidRecorder(device)
        with pytest.raises(DeviceUnavailable) as raised:
            await recorder.start()
        await recorder.stop()
        return str(raised.value)

    message = on_phone(adb_port, scenario, phone)
    for word in words:
        assert word in message, message
    stopped_listening(phone)


def test_agent_record_pauses_resumes_and_ends_from_the_terminal(adb_port, tmp_path, monkeypatch, capsys):
    """`agent record --device android:SERIAL` on the test phone, its terminal a pipe a program writes to: ``p`` and
    Enter pauses (nothing of the pause is recorded), ``p`` and Enter again resumes, Enter alone ends the recording as
    claimed; the pause is one wait step with ``paused_s``, as the web and desktop pause keys make. The recorder's
    settings come from ``--set android_record.KEY=...``."""
    import os
    import sys

    from agent.cli import main as agent_main
    from envs.trajectory import iter_episodes
    from tests.devices.test_android import _connect, _disconnect
    from tests.support.fake_adbd import FakeAdbd
    from tests.support.person import play_once_started

    phone = FakePhone(physical=(W, H))
    read, write = os.pipe()
    monkeypatch.setattr(sys, "stdin", os.fdopen(read, "r"))

    def until(what: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 20
        while not what():
            assert time.monotonic() < deadline, "the terminal's line was not acted on"
            time.sleep(0.02)

    def person(recorder: AndroidRecorder) -> None:
        def terminal(line: str) -> None:
            os.write(write, f"{line}\n".encode())

        assert recorder.options.frame_interval_s == 0.05 and recorder.options.dump_interval_s == 0.1
        settle(phone); phone.finger.tap(180, 400)        # Count
        settle(phone); terminal("p")
        until(lambda: recorder.paused)
        time.sleep(0.3)                                  # the capture and dump under way end
        captures, dumps = phone.captures, phone.dumps
        phone.finger.tap(180, 400)
        phone.finger.tap(180, 160)                       # opens Notes: private
        time.sleep(0.5)
        assert (phone.captures, phone.dumps) == (captures, dumps)
        terminal(" P ")
        until(lambda: not recorder.paused)
        settle(phone); phone.finger.key("KEY_BACK")
        settle(phone); terminal("")

    async def play(recorder: AndroidRecorder) -> None:
        await asyncio.to_thread(person, recorder)

    errors = play_once_started(monkeypatch, play)
    with FakeAdbd(phone) as adbd:
        _connect(adb_port, adbd)
        try:
            code = agent_main(["record", "Count once", "--device", f"android:{adbd.address}", "--runs-dir",
                               str(tmp_path), "--set", f"android.adb_port={adb_port}", "--set",
                               "android.start_server=false", "--set", "android_record.frame_interval_s=0.05", "--set",
                               "android_record.dump_interval_s=0.1"])
        finally:
            _disconnect(adb_port, adbd)
            os.close(write)
    out = " ".join(capsys.readouterr().out.split())
    assert not errors and code == 0, (errors, out)
    assert "p and Enter here pauses and resumes" in out and "Enter here" in out and "browser" not in out
    assert "paused: nothing is recorded" in out and "recording again" in out
    (run,) = tmp_path.iterdir()
    (episode,) = iter_episodes(run)
    assert episode.record.outcome.value == "claimed"
    assert [s.action["kind"] for s in episode.steps] == ["click", "wait", "back", "finish"]
    click, wait, back, _ = episode.steps
    assert 0.8 <= wait.info["env_info"]["demo"]["paused_s"] <= 20
    assert episode.record.policy["recorder"]["options"]["frame_interval_s"] == 0.05
    assert phone.counter == 2 and phone.screen == "home"


def test_agent_record_on_a_phone_refuses_pause_and_stop_keys():
    from agent.cli import record as record_command
    from agent.cli import build_parser
    from agent.config import load_config

    args = build_parser().parse_args(["record", "Do it", "--device", "android", "--stop-key", "Control+Alt+q"])
    with pytest.raises(ValueError, match="p and Enter in the terminal"):
        record_command.make_recorder(load_config(None, ["device.kind=android"]), args)

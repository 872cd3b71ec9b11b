"""The desktop device on a private Xvfb display, driving a small Tk app that logs what it receives.

The session starts its own Xvfb (1024 x 768, on the first free display number from :91), with an
empty XAUTHORITY file and XDG_SESSION_TYPE=x11, and never touches the user's display. The Tk app
(``APP`` below, a separate process) sits at the screen's top-left corner with widgets at fixed
pixel positions, so at scale 1 a normalized point (x, y) is the screen pixel (1024 x, 768 y) and
expected values are worked out by hand. Xvfb shows one monitor at scale 1: layouts with several
monitors, negative offsets and HiDPI scales are tested with injected geometry only (``screen_map``).

Needs Xvfb, xdotool and xclip (scripts/setup.sh installs them); without them the tests fail saying so.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from devices import Action, DeviceError, DeviceUnavailable, InvalidAction, Point, UnsupportedAction
from devices.desktop import DesktopConfig, DesktopDevice, MonitorGeometry, list_monitors, screen_map
from devices.desktop.geometry import scroll_clicks
from devices.desktop.keyboard import pyautogui_key, xdotool_key
from tests.support.installed import need_program
from tests.support import procs
from tests.support.xvfb import start_xvfb, stop_xvfb

SW, SH = 1024, 768

# Widgets (screen pixels, left/top/width/height): red 20,20,100,60; blue 140,20,100,60; entry
# 20,100,300,30; text 20,140,300,100; canvas (green) 340,20,280,220; list 20,260,300,200 (300 items);
# anim (yellow) 340,260,100,60: a click makes the canvas flash for 0.5 s.
APP = r"""
import json, sys, time, tkinter as tk
log = open(sys.argv[1], "a", buffering=1, encoding="utf-8")
def emit(**kw): log.write(json.dumps({**kw, "t": time.monotonic()}, ensure_ascii=False) + "\n")
root = tk.Tk(); root.title("handeye-test-app"); root.geometry("640x480+0+0"); root.configure(bg="#ffffff")
def place(widget, x, y, w, h): widget.place(x=x, y=y, width=w, height=h); return widget
red = place(tk.Frame(root, bg="#ff0000", name="red"), 20, 20, 100, 60)
blue = place(tk.Frame(root, bg="#0000ff", name="blue"), 140, 20, 100, 60)
entry = place(tk.Entry(root, name="entry"), 20, 100, 300, 30)
text = place(tk.Text(root, name="text"), 20, 140, 300, 100)
canvas = place(tk.Canvas(root, name="canvas", bg="#00ff00", highlightthickness=0), 340, 20, 280, 220)
lb = place(tk.Listbox(root, name="list"), 20, 260, 300, 200)
anim = place(tk.Frame(root, bg="#ffff00", name="anim"), 340, 260, 100, 60)
for i in range(300): lb.insert("end", f"item {i}")
def wname(e): return str(e.widget).lstrip(".")
root.bind_all("<ButtonPress>", lambda e: emit(ev="press", w=wname(e), b=e.num, x=e.x_root, y=e.y_root), add="+")
root.bind_all("<ButtonRelease>", lambda e: emit(ev="release", w=wname(e), b=e.num, x=e.x_root, y=e.y_root), add="+")
root.bind_all("<Double-Button-1>", lambda e: emit(ev="double", w=wname(e), x=e.x_root, y=e.y_root), add="+")
blue.bind("<Enter>", lambda e: emit(ev="enter", w="blue"))
canvas.bind("<B1-Motion>", lambda e: emit(ev="motion", x=e.x_root, y=e.y_root))
def flash(i=0):
    canvas.configure(bg="#ff00ff" if i % 2 == 0 and i < 10 else "#00ff00")
    if i < 10: root.after(50, flash, i + 1)
anim.bind("<ButtonPress-1>", lambda e: flash(), add="+")
last = {}
def poll():
    state = {"entry": entry.get(), "text": text.get("1.0", "end-1c"), "list_top": lb.nearest(0)}
    for k, v in state.items():
        if last.get(k) != v: last[k] = v; emit(ev="value", w=k, v=v)
    root.after(20, poll)
def command(*_):
    line = sys.stdin.readline().strip()
    if line == "clear":
        entry.delete(0, "end"); text.delete("1.0", "end"); lb.yview(0); root.focus_set()
        root.after(60, lambda: emit(ev="cleared"))
root.tk.createfilehandler(sys.stdin, tk.READABLE, command)
root.after(20, poll); root.after(300, lambda: emit(ev="ready"))
root.mainloop()
"""


def _need(tool: str) -> str:
    return need_program(tool, "xvfb xdotool xclip")


def _free_display() -> int:
    for n in range(91, 200):
        if not os.path.exists(f"/tmp/.X11-unix/X{n}") and not os.path.exists(f"/tmp/.X{n}-lock"):
            return n
    pytest.fail("no free X display number between :91 and :199")


@pytest.fixture(scope="session")
def xvfb():
    """A private Xvfb display; the process environment is set for it and restored afterwards."""
    _need("xdotool")
    _need("xclip")
    saved = {k: os.environ.get(k) for k in ("DISPLAY", "XAUTHORITY", "XDG_SESSION_TYPE")}
    tmp = Path(tempfile.mkdtemp(prefix="handeye-xvfb-"))
    (tmp / "xauth").touch()
    proc, display = start_xvfb(f"{SW}x{SH}")
    os.environ.update(XAUTHORITY=str(tmp / "xauth"), XDG_SESSION_TYPE="x11", DISPLAY=display)
    try:
        yield display
    finally:
        stop_xvfb(proc)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(tmp, ignore_errors=True)


class TkApp:
    """The Tk app's process and its event log."""

    def __init__(self, display: str, log_path: Path) -> None:
        self.log_path = log_path
        log_path.write_text("")
        self.proc = procs.start(
            [sys.executable, "-c", APP, str(log_path)],
            stdin=subprocess.PIPE, env={**os.environ, "DISPLAY": display}, text=True,
        )
        self.offset = 0
        try:
            self.wait_for(lambda e: e["ev"] == "ready", what="the Tk app to start", timeout=10)
        except BaseException:
            self.close()
            raise

    def events(self) -> list[dict[str, Any]]:
        """Every event since the last ``clear``."""
        lines = self.log_path.read_text(encoding="utf-8").splitlines()[self.offset :]
        return [json.loads(line) for line in lines if line.strip()]

    def wait_for(self, pred: Callable[[dict[str, Any]], bool], what: str, timeout: float = 3.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"the Tk app exited with {self.proc.returncode}")
            for event in self.events():
                if pred(event):
                    return event
            time.sleep(0.02)
        pytest.fail(f"timed out waiting for {what}; events: {self.events()[-12:]}")

    def value(self, widget: str, expected: Any, timeout: float = 3.0) -> None:
        """Wait until ``widget``'s logged value is ``expected``."""
        self.wait_for(lambda e: e["ev"] == "value" and e["w"] == widget and e["v"] == expected,
                      what=f"{widget} == {expected!r}", timeout=timeout)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events() if e["ev"] == kind]

    def clear(self) -> None:
        """Empty the entry and text, scroll the list to the top, and start a new event log page."""
        self.offset = len(self.log_path.read_text(encoding="utf-8").splitlines())
        assert self.proc.stdin is not None
        self.proc.stdin.write("clear\n")
        self.proc.stdin.flush()
        self.wait_for(lambda e: e["ev"] == "cleared", what="the app to clear")
        self.offset = len(self.log_path.read_text(encoding="utf-8").splitlines())

    def close(self) -> None:
        procs.stop(self.proc, first=signal.SIGKILL)


@pytest.fixture(scope="session")
def tk_app(xvfb, tmp_path_factory):
    app = TkApp(xvfb, tmp_path_factory.mktemp("tk") / "events.jsonl")
    yield app
    app.close()


@pytest.fixture
def app(tk_app):
    tk_app.clear()
    return tk_app


def on_device(display: str, scenario: Callable[[DesktopDevice], Awaitable[Any]], **cfg: Any) -> Any:
    """Start a desktop device on ``display``, run ``scenario(device)``, close it."""

    async def main() -> Any:
        async with DesktopDevice(DesktopConfig(display=display, **cfg)) as device:
            return await scenario(device)

    return asyncio.run(main())


def at(x: float, y: float) -> Point:
    """The normalized point of screen pixel position (x, y) on the 1024 x 768 display."""
    return Point(x / SW, y / SH)


def centre(x: int, y: int, w: int, h: int) -> Point:
    """The normalized point of a widget rectangle's centre."""
    return at(x + w / 2, y + h / 2)


# -- geometry: pure, with injected monitors ------------------------------------------------------


def test_single_monitor_at_scale_1():
    m = screen_map(MonitorGeometry(1, 0, 0, 1280, 800))
    assert m.scale == (1.0, 1.0)
    assert m.to_input(0.5, 0.5) == (640.0, 400.0)
    assert m.to_input_px(0.5, 0.5) == (640, 400)
    assert m.to_input(1.0, 1.0) == (1280.0, 800.0)
    assert m.to_input_px(1.0, 1.0) == (1279, 799)  # the right edge of the last pixel is the last pixel
    assert m.to_input_px(0.0, 0.0) == (0, 0)
    assert m.to_input_px(0.99999, 0.3) == (1279, 240)  # floor(1279.987), floor(240.0)
    assert m.to_frame(640, 400) == (0.5, 0.5)


def test_monitors_side_by_side_stacked_and_at_negative_offsets():
    right = screen_map(MonitorGeometry(2, 1920, 0, 2560, 1440))  # right of a 1920x1080 primary
    assert right.to_input(0.25, 0.5) == (2560.0, 720.0)  # 1920 + 0.25 * 2560, 0.5 * 1440
    assert right.to_input_px(1.0, 1.0) == (4479, 1439)  # never the next monitor's first column
    below = screen_map(MonitorGeometry(2, 0, 1080, 1920, 1080))
    assert below.to_input(0.5, 0.5) == (960.0, 1620.0)
    assert below.to_input_px(0.0, 0.0) == (0, 1080)
    left = screen_map(MonitorGeometry(2, -1280, -200, 1280, 1024))  # left of and higher than the primary
    assert left.to_input(0.5, 0.25) == (-640.0, 56.0)
    assert left.to_input_px(0.0, 0.0) == (-1280, -200)
    assert left.to_input_px(1.0, 1.0) == (-1, 823)  # -1280 + 1279, -200 + 1023
    assert left.to_input_px(0.3, 0.3) == (-896, 107)  # -1280 + floor(384.0), -200 + floor(307.2)


@pytest.mark.parametrize(
    ("monitor", "scale", "input_rect", "point", "expected_float", "expected_px"),
    [
        # 2560x1600 panel at 125 %: input 2048x1280; 0.3 * 2048 = 614.4, 0.7 * 1280 = 896
        ((0, 0, 2560, 1600), 1.25, (0, 0, 2048, 1280), (0.3, 0.7), (614.4, 896.0), (614, 896)),
        # a second 2880x1800 panel at 150 % right of a first one: input starts at 2880 / 1.5 = 1920
        ((2880, 0, 2880, 1800), 1.5, (1920, 0, 1920, 1200), (0.5, 0.1), (2880.0, 120.0), (2880, 120)),
        # 4K at 200 %: input 1920x1080; 0.7 * 1920 = 1344, y = 1 -> last row 1079
        ((0, 0, 3840, 2160), 2.0, (0, 0, 1920, 1080), (0.7, 1.0), (1344.0, 1080.0), (1344, 1079)),
        # a 4K monitor at 200 % above-left of the primary: offsets scale too
        ((-3840, -2160, 3840, 2160), 2.0, (-1920, -1080, 1920, 1080), (0.25, 0.5), (-1440.0, -540.0), (-1440, -540)),
        # 1366x768 at 125 %: 1092.8 x 614.4 input units round to 1093 x 614
        ((0, 0, 1366, 768), 1.25, (0, 0, 1093, 614), (1.0, 0.5), (1093.0, 307.0), (1092, 307)),
    ],
)
def test_scale_override(monitor, scale, input_rect, point, expected_float, expected_px):
    m = screen_map(MonitorGeometry(1, *monitor), scale_override=scale)
    assert (m.input_left, m.input_top, m.input_width, m.input_height) == input_rect
    assert m.to_input(*point) == pytest.approx(expected_float)
    assert m.to_input_px(*point) == expected_px
    assert (m.frame_width, m.frame_height) == monitor[2:]


def test_measured_scale_from_a_frame_bigger_than_the_monitor_rectangle():
    # A Retina-style monitor: the rectangle is 1440x900 points, a grab returns 2880x1800 pixels.
    m = screen_map(MonitorGeometry(1, 0, 0, 1440, 900), frame_size=(2880, 1800))
    assert m.scale == (2.0, 2.0)
    # frame pixel (1000, 450) of 2880x1800 is the normalized point (0.3472.., 0.25) -> input (500, 225)
    assert m.to_input(1000 / 2880, 450 / 1800) == pytest.approx((500.0, 225.0))
    assert m.to_input_px(1000 / 2880, 450 / 1800) == (500, 225)


def test_scroll_clicks_and_key_names():
    assert scroll_clicks(0.5, 768, 120) == 3  # 384 px / 120 = 3.2
    assert scroll_clicks(0.25, 768, 120) == 2  # 192 / 120 = 1.6
    assert scroll_clicks(0.01, 768, 120) == 1  # never zero
    assert scroll_clicks(2.0, 1080, 120) == 18
    assert [pyautogui_key(k) for k in ("Control", "Enter", "ArrowUp", "Meta", "F5", "a")] == [
        "ctrl", "enter", "up", "win", "f5", "a"]
    assert [xdotool_key(k) for k in ("Enter", "PageDown", "Backspace", "a", "é", "你")] == [
        "Return", "Next", "BackSpace", "a", "U00E9", "U4F60"]


def test_config_checks():
    with pytest.raises(ValueError, match="monitor=0"):
        DesktopConfig(monitor=0)
    with pytest.raises(ValueError, match="typing='morse'"):
        DesktopConfig(typing="morse")
    with pytest.raises(ValueError, match="scale_override"):
        DesktopConfig(scale_override=7)


# -- errors that need no X server --------------------------------------------------------------


def test_no_display_is_unavailable_and_says_what_to_do(monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.setenv("WAYLAND_DISPLAY", "wayland-0")
    with pytest.raises(DeviceUnavailable, match="DISPLAY is not set") as info:
        asyncio.run(DesktopDevice(DesktopConfig()).start())
    assert "Xvfb" in str(info.value) and "XWayland" in str(info.value)


def test_unreachable_display_is_named(xvfb):
    number = _free_display()
    with pytest.raises(DeviceUnavailable, match=f"cannot connect to X display ':{number}'") as info:
        list_monitors(f":{number}")
    assert "Xvfb" in str(info.value)


# -- on Xvfb ---------------------------------------------------------------------------------------


def test_bad_monitor_index_lists_the_monitors(xvfb):
    with pytest.raises(DeviceUnavailable, match="no monitor 3") as info:
        on_device(xvfb, lambda d: asyncio.sleep(0), monitor=3)
    assert "monitor 1: 1024x768 at (0, 0)" in str(info.value)
    assert list_monitors(xvfb) == [MonitorGeometry(1, 0, 0, SW, SH)]


def test_observe_shows_the_app_and_a_click_at_a_found_widget_reaches_it(app, xvfb):
    async def scenario(device):
        obs = await device.observe()
        assert obs.size == (SW, SH) and obs.frame.dtype == np.uint8 and obs.frame.flags.c_contiguous
        assert obs.meta["scale"] == [1.0, 1.0] and obs.meta["input_rect"] == [0, 0, SW, SH]
        assert obs.meta["monitor"] == [0, 0, SW, SH] and obs.meta["frame_source"] == "capture"
        assert obs.encoded is None
        found = {}
        for name, rgb in (("red", (255, 0, 0)), ("blue", (0, 0, 255))):
            ys, xs = np.nonzero(np.all(obs.frame == rgb, axis=2))
            found[name] = (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)
        assert found == {"red": (20, 20, 120, 80), "blue": (140, 20, 240, 80)}
        x1, y1, x2, y2 = found["blue"]
        result = await device.act(Action("click", point=Point((x1 + x2) / 2 / SW, (y1 + y2) / 2 / SH)))
        assert result.target["name"] == "handeye-test-app"
        assert result.target_box.as_list() == pytest.approx([0, 0, 640 / SW, 480 / SH])
        return device.describe()

    described = on_device(xvfb, scenario)
    press = app.wait_for(lambda e: e["ev"] == "press", "the click")
    assert (press["w"], press["b"], press["x"], press["y"]) == ("blue", 1, 190, 50)
    assert described["kind"] == "desktop" and described["display"] == xvfb
    assert described["typing"] == "xdotool" and described["monitors"] == [[1, 0, 0, SW, SH]]


def test_clicks_double_clicks_right_clicks_and_hover(app, xvfb):
    async def scenario(device):
        await device.act(Action("click", point=centre(20, 20, 100, 60)))
        await device.act(Action("double_click", point=at(190.5, 50.5)))
        await device.act(Action("right_click", point=at(30, 70)))
        await device.act(Action("hover", point=centre(140, 20, 100, 60)))

    on_device(xvfb, scenario)
    app.wait_for(lambda e: e["ev"] == "enter", "the hover")
    presses = [(e["w"], e["b"], e["x"], e["y"]) for e in app.of("press")]
    # at(190.5, 50.5) floors to pixel (190, 50). The double click's second press reaches Tk as
    # <Double-Button-1>, which takes precedence over the plain <ButtonPress> binding.
    assert presses == [("red", 1, 70, 50), ("blue", 1, 190, 50), ("red", 3, 30, 70)]
    assert [(e["w"], e["x"], e["y"]) for e in app.of("double")] == [("blue", 190, 50)]
    assert [(e["w"], e["b"]) for e in app.of("release")] == [("red", 1), ("blue", 1), ("blue", 1), ("red", 3)]


def test_drag_and_long_press_on_the_canvas(app, xvfb):
    async def scenario(device):
        await device.act(Action("drag", point=at(400, 60), end=at(560, 200)))
        await device.act(Action("long_press", point=at(600, 220), duration_s=0.3))

    on_device(xvfb, scenario)
    app.wait_for(lambda e: e["ev"] == "release" and e["x"] == 600, "the long press")
    presses, releases = app.of("press"), app.of("release")
    assert [(e["w"], e["x"], e["y"]) for e in presses] == [("canvas", 400, 60), ("canvas", 600, 220)]
    assert [(e["x"], e["y"]) for e in releases] == [(560, 200), (600, 220)]
    motions = [e for e in app.of("motion") if e["t"] < presses[1]["t"]]
    assert len(motions) >= 2 and (motions[-1]["x"], motions[-1]["y"]) == (560, 200)  # moved with the button held
    assert releases[1]["t"] - presses[1]["t"] >= 0.29


def test_scroll_turns_screens_into_wheel_clicks(app, xvfb):
    async def scenario(device):
        down = await device.act(Action("scroll", point=centre(20, 260, 300, 200), direction="down", amount=0.5))
        await asyncio.sleep(0.1)
        up = await device.act(Action("scroll", point=centre(20, 260, 300, 200), direction="up", amount=0.25))
        return down.detail, up.detail

    assert on_device(xvfb, scenario) == ("3 wheel clicks", "2 wheel clicks")  # 0.5 * 768 / 120; 0.25 * 768 / 120
    # A Tk listbox scrolls 5 lines per wheel click: 3 down then 2 up leave item 5 at the top.
    app.value("list_top", 5)
    wheel = [(e["w"], e["b"], e["x"], e["y"]) for e in app.of("press")]
    assert wheel == [("list", 5, 170, 360)] * 3 + [("list", 4, 170, 360)] * 2


@pytest.mark.parametrize("typing", ["xdotool", "clipboard"])
def test_typing_unicode(app, xvfb, typing):
    async def scenario(device):
        assert device.typing == typing
        result = await device.act(Action("type", text="你好 wörld ✓", point=centre(20, 100, 300, 30)))
        assert result.detail == f"typed with {typing}"
        await device.act(Action("type", text="第一行\nline 2", point=centre(20, 140, 300, 100)))
        # while the device is open: the app may read its keys late, and closing gives the keycodes back
        app.value("entry", "你好 wörld ✓", timeout=10)
        app.value("text", "第一行\nline 2", timeout=10)

    on_device(xvfb, scenario, typing=typing)


def unicode_keycodes(display: str) -> dict[str, int]:
    """Characters outside Latin-1 that the display's keyboard mapping types -> their keycodes."""
    from Xlib import display as xdisplay

    conn = xdisplay.Display(display)
    try:
        info = conn.display.info
        rows = conn.get_keyboard_mapping(info.min_keycode, info.max_keycode - info.min_keycode + 1)
    finally:
        conn.close()
    return {chr(sym - 0x01000000): info.min_keycode + i for i, row in enumerate(rows)
            for sym in row[:1] if 0x01000100 <= sym <= 0x0110FFFF}


def test_typed_characters_keep_their_keycodes_until_the_device_closes(app, xvfb):
    """An app reads a key with the keyboard mapping of when it reads it: each character keeps its own keycode
    while the device is open (a late reader still gets the right character), and the device gives them back."""
    async def scenario(device):
        await device.act(Action("type", text="你好你", point=centre(20, 100, 300, 30)))
        app.value("entry", "你好你", timeout=10)
        return unicode_keycodes(device.display)

    held = on_device(xvfb, scenario, typing="xdotool")
    assert set(held) == {"你", "好"} and held["你"] != held["好"]
    assert unicode_keycodes(xvfb) == {}


def test_typing_more_characters_than_spare_keycodes(app, xvfb, monkeypatch):
    """With two keycodes for five characters, the least recently typed one is rebound each time."""
    from devices.desktop import keyboard

    monkeypatch.setattr(keyboard, "REMAP_POOL", 2)

    async def scenario(device):
        await device.act(Action("type", text="αβγαδε", point=centre(20, 100, 300, 30)))
        app.value("entry", "αβγαδε", timeout=10)
        return unicode_keycodes(device.display)

    held = on_device(xvfb, scenario, typing="xdotool")
    assert set(held) == {"δ", "ε"}  # the last two; α was typed again after γ but before δ and ε
    assert unicode_keycodes(xvfb) == {}


def test_typing_with_keys_is_ascii_only(app, xvfb):
    async def scenario(device):
        await device.act(Action("type", text="Hello, World!", point=centre(20, 100, 300, 30)))
        with pytest.raises(DeviceError, match="cannot type '你好'") as info:
            await device.act(Action("type", text="a你好", point=centre(20, 100, 300, 30)))
        assert "xdotool" in str(info.value)

    on_device(xvfb, scenario, typing="keys")
    app.value("entry", "Hello, World!")
    time.sleep(0.1)
    assert app.of("value")[-1]["v"] == "Hello, World!"  # the refused text typed nothing, not even "a"


def test_keys_and_hotkeys(app, xvfb):
    async def scenario(device):
        await device.act(Action("type", text="abc", point=centre(20, 100, 300, 30)))
        await device.act(Action("key", keys=("Home",)))
        await device.act(Action("type", text="X"))
        await device.act(Action("hotkey", keys=("ctrl", "e")))  # Tk's emacs binding: end of line
        await device.act(Action("key", keys=("é",)))  # no keycode in pyautogui: pressed through xdotool
        await device.act(Action("key", keys=("Backspace",)))
        await device.act(Action("key", keys=("ü",)))
        await device.act(Action("type", text="one", point=centre(20, 140, 300, 100)))
        await device.act(Action("key", keys=("Enter",)))
        await device.act(Action("type", text="two"))
        app.value("entry", "Xabcü", timeout=10)
        app.value("text", "one\ntwo", timeout=10)

    on_device(xvfb, scenario)


def test_settle_waits_for_an_animation_and_observe_reuses_its_frame(app, xvfb):
    async def scenario(device):
        still = await device.settle()
        assert still.settled and still.elapsed_s < 0.5
        await device.act(Action("click", point=centre(340, 260, 100, 60)))  # flashes the canvas for 0.5 s
        moving = await device.settle()
        obs = await device.observe()
        return moving, obs

    moving, obs = on_device(xvfb, scenario)
    # grabs are paced (settle_grab_interval_s = 0.04 s), so the flash's 50 ms steps are seen
    assert moving.settled and 0.45 <= moving.elapsed_s < 1.5, moving
    assert obs.meta["frame_source"] == "settle"
    assert obs.frame[100, 400].tolist() == [0, 255, 0]  # the flash ends on the canvas's own green


def test_unsupported_and_terminal_actions(xvfb):
    async def scenario(device):
        for action in (Action("open_url", text="https://example.com"), Action("back"), Action("home"),
                       Action("open_app", text="gedit")):
            with pytest.raises(UnsupportedAction, match=f"cannot {action.kind.value}"):
                await device.act(action)
        with pytest.raises(InvalidAction, match="ends the episode"):
            await device.act(Action("finish", text="done"))
        result = await device.act(Action("wait", duration_s=0.05))
        assert result.ok

    on_device(xvfb, scenario)


def test_failsafe_stops_only_for_a_person(app, xvfb):
    async def scenario(device):
        await device.act(Action("click", point=Point(0, 0)))  # our own click leaves the pointer in a corner
        await device.act(Action("click", point=centre(20, 20, 100, 60)))  # so this is no fail-safe
        procs.run(["xdotool", "mousemove", str(SW - 1), "0"], check=True, timeout=30)  # a person's "stop"
        with pytest.raises(DeviceError, match="fail-safe"):
            await device.act(Action("click", point=centre(140, 20, 100, 60)))
        procs.run(["xdotool", "mousemove", "500", "500"], check=True, timeout=30)
        await device.act(Action("click", point=centre(140, 20, 100, 60)))

    on_device(xvfb, scenario, failsafe=True)
    app.wait_for(lambda e: e["ev"] == "press" and e["w"] == "blue", "the click after the fail-safe")
    assert [e["w"] for e in app.of("press")] == ["", "red", "blue"]  # (0, 0) is the app's bare root window


def test_calls_before_start_are_errors():
    with pytest.raises(DeviceError, match="not started"):
        asyncio.run(DesktopDevice().observe())


# -- the command line ------------------------------------------------------------------------------

def test_agent_run_and_devices_on_the_desktop(app, xvfb, tmp_path):
    """`agent run --device desktop` with a scripted click on the blue widget, on the private display."""
    script = tmp_path / "s.json"
    p = centre(140, 20, 100, 60)
    script.write_text(json.dumps([{"kind": "click", "point": [p.x, p.y]}, {"kind": "finish", "text": "done"}]))
    env = {**os.environ, "DISPLAY": xvfb, "COLUMNS": "200"}
    repo = Path(__file__).resolve().parents[2]
    r = procs.run([sys.executable, "-m", "agent", "run", "click the blue square", "--device", "desktop",
                   "--policy", "scripted", "--script", str(script), "--runs-dir", str(tmp_path / "runs")],
                  cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "CLAIMED" in r.stdout
    # (Tk reports a click soon after an earlier test's click on the same widget as a double click)
    app.wait_for(lambda e: e["ev"] in ("press", "double") and e.get("w") == "blue", what="the click on blue")
    from envs.trajectory import iter_episodes

    (run_dir,) = (tmp_path / "runs").iterdir()
    (episode,) = iter_episodes(run_dir)
    assert episode.record.device["kind"] == "desktop"
    assert episode.steps[0].frame_size == (SW, SH) and episode.steps[0].executed
    r = procs.run([sys.executable, "-m", "agent", "devices"], cwd=repo, env=env, capture_output=True,
                  text=True, timeout=60)
    assert r.returncode == 0 and f"monitor 1: {SW}x{SH} at (0, 0)" in r.stdout, r.stdout


def test_without_an_xauthority_file_the_display_answers_without_a_printed_warning(xvfb, tmp_path):
    """Under a bare Xvfb (no XAUTHORITY, no ~/.Xauthority) python-xlib printed "Xlib.xauth: warning, no xauthority
    details available" to stdout on every connection; prepare_display's stand-in file keeps it quiet."""
    env = {k: v for k, v in os.environ.items() if k != "XAUTHORITY"}
    env.update(HOME=str(tmp_path), DISPLAY=xvfb, COLUMNS="80")
    result = procs.run([sys.executable, "-m", "agent", "devices"], env=env, capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert "monitor 1: 1024x768" in result.stdout, result.stdout + result.stderr
    assert "xauth" not in (result.stdout + result.stderr).lower()

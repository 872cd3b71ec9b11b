"""Settling: the frame-difference loop on scripted frames with a fake clock, then on a real browser."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from devices import Action, Point
from devices.settle import SettleConfig, changed_fraction, wait_until_settled
from devices.web import PlaywrightDevice, WebConfig
from envs.site import LocalSite

# -- changed_fraction -----------------------------------------------------------------------------


def test_changed_fraction_on_a_hand_made_pair():
    a = np.full((10, 10), 100, np.uint8)
    b = a.copy()
    b[0, 0:4] = 120  # 4 of 100 pixels moved by 20 > 16
    b[5, 5] = 116  # moved by exactly 16: not a change
    b[9, 9] = 90  # moved by 10: not a change
    assert changed_fraction(a, b, 16) == 0.04
    assert changed_fraction(b, a, 16) == 0.04
    assert changed_fraction(a, b, 19) == 0.04
    assert changed_fraction(a, b, 20) == 0.0
    assert changed_fraction(a, b, 0) == 0.06


def test_changed_fraction_does_not_wrap_around_uint8():
    a = np.zeros((2, 2), np.uint8)
    b = np.full((2, 2), 255, np.uint8)
    assert changed_fraction(a, b, 16) == 1.0
    c = a.copy()
    c[0, 0] = 250  # 0 - 250 in uint8 would be 6, below the threshold
    assert changed_fraction(c, a, 16) == 0.25


def test_changed_fraction_of_different_shapes_is_total():
    assert changed_fraction(np.zeros((4, 4), np.uint8), np.zeros((4, 5), np.uint8), 16) == 1.0


def test_settle_config_rejects_nonsense():
    for kwargs, words in [
        ({"min_s": 2.0, "deadline_s": 1.0}, "min_s <= deadline_s"),
        ({"min_s": -0.1}, "min_s"),
        ({"stable_frames": 0}, "stable_frames"),
        ({"max_changed_fraction": 1.0}, "max_changed_fraction"),
        ({"max_changed_fraction": -0.01}, "max_changed_fraction"),
        ({"pixel_delta": 256}, "pixel_delta"),
        ({"interval_s": -1}, "interval_s"),
        ({"width": 4}, "width"),
    ]:
        with pytest.raises(ValueError, match=words):
            SettleConfig(**kwargs)


# -- wait_until_settled with a fake clock ---------------------------------------------------------

STEP = 0.25  # seconds each grab takes on the fake clock; a power of two keeps the sums exact


class Script:
    """Hands out scripted frames (the last one forever) and advances a fake clock by STEP per grab."""

    def __init__(self, frames: list[np.ndarray]) -> None:
        self.frames = frames
        self.now = 0.0
        self.grabs = 0

    def clock(self) -> float:
        return self.now

    async def grab(self) -> np.ndarray:
        self.now += STEP
        frame = self.frames[min(self.grabs, len(self.frames) - 1)]
        self.grabs += 1
        return frame


def gray(level: int, shape: tuple[int, int] = (10, 10)) -> np.ndarray:
    return np.full(shape, level, np.uint8)


def run(frames: list[np.ndarray], **config: float):
    script = Script(frames)
    result = asyncio.run(wait_until_settled(script.grab, SettleConfig(**config), clock=script.clock))
    assert result.frames == script.grabs  # the result counts every grab
    return result


def test_static_screen_settles_after_stable_frames_pairs():
    # grab 1 at 0.25 s; pairs (1,2) and (2,3) are unchanged: settled at the 3rd grab, 0.75 s
    r = run([gray(0)], min_s=0, stable_frames=2)
    assert (r.settled, r.frames, r.elapsed_s, r.last_changed_fraction) == (True, 3, 0.75, 0.0)
    r = run([gray(0)], min_s=0, stable_frames=4)
    assert (r.settled, r.frames, r.elapsed_s) == (True, 5, 1.25)
    r = run([gray(0)], min_s=0, stable_frames=1)
    assert (r.settled, r.frames, r.elapsed_s) == (True, 2, 0.5)


def test_settles_only_after_the_changes_stop():
    # frames 0..3 each differ from the one before; frame 3 repeats from the 4th grab on
    frames = [gray(0), gray(100), gray(200), gray(50)]
    r = run(frames, min_s=0, stable_frames=2)
    # pairs: (0,100) (100,200) (200,50) changed, then (50,50) at grab 5 and (50,50) at grab 6
    assert (r.settled, r.frames, r.elapsed_s) == (True, 6, 1.5)


def test_a_change_resets_the_stable_count():
    a, b = gray(0), gray(255)
    r = run([a, a, b, b, b], min_s=0, stable_frames=2)
    # pairs: (a,a) stable 1, (a,b) back to 0, (b,b) 1, (b,b) 2 at grab 5
    assert (r.settled, r.frames, r.elapsed_s) == (True, 5, 1.25)


def test_min_s_is_respected_on_a_static_screen():
    r = run([gray(0)], min_s=2.0, stable_frames=2, deadline_s=3.0)
    # stable from grab 3 on, but not before 2.0 s: grab 8 at 8 * 0.25 s
    assert (r.settled, r.frames, r.elapsed_s) == (True, 8, 2.0)


def test_ever_changing_screen_returns_unsettled_at_the_deadline():
    frames = [gray(0 if i % 2 == 0 else 200) for i in range(100)]
    r = run(frames, min_s=0, deadline_s=3.0)
    # the deadline is checked after each grab: 3.0 s is reached at grab 12
    assert (r.settled, r.frames, r.elapsed_s, r.last_changed_fraction) == (False, 12, 3.0, 1.0)


def test_a_screen_that_settles_late_still_counts_before_the_deadline():
    frames = [gray(i * 20) for i in range(10)]  # changes for 9 pairs, then still
    r = run(frames, min_s=0, deadline_s=3.0, stable_frames=2)
    assert (r.settled, r.frames, r.elapsed_s) == (True, 12, 3.0)  # settled wins over the deadline at the same grab


def test_tiny_changes_below_max_changed_fraction_do_not_keep_the_screen_busy():
    base = gray(0)
    blink = base.copy()
    blink[3, 4] = 255  # a caret: 1 of 100 pixels
    frames = [base, blink] * 50
    r = run(frames, min_s=0, max_changed_fraction=0.02, stable_frames=2)
    assert (r.settled, r.frames, r.last_changed_fraction) == (True, 3, 0.01)
    # the same caret is a change when the allowance is smaller than one pixel in a hundred
    r = run(frames, min_s=0, max_changed_fraction=0.005, deadline_s=2.0)
    assert (r.settled, r.frames, r.last_changed_fraction) == (False, 8, 0.01)


def test_changes_within_pixel_delta_do_not_count():
    frames = [gray(100 + (16 if i % 2 else 0)) for i in range(50)]  # flicker by exactly 16 levels
    r = run(frames, min_s=0, pixel_delta=16, stable_frames=2)
    assert (r.settled, r.frames) == (True, 3)
    frames = [gray(100 + (17 if i % 2 else 0)) for i in range(50)]  # by 17 levels: a change
    r = run(frames, min_s=0, pixel_delta=16, deadline_s=1.0)
    assert (r.settled, r.frames, r.last_changed_fraction) == (False, 4, 1.0)


def test_interval_pauses_between_grabs():
    script = Script([gray(0)])
    started = time.perf_counter()
    r = asyncio.run(
        wait_until_settled(script.grab, SettleConfig(min_s=0, interval_s=0.05, stable_frames=2), clock=script.clock)
    )
    assert r.settled and r.frames == 3
    assert time.perf_counter() - started >= 0.1  # two pauses of 0.05 s of real time


# -- a real browser ---------------------------------------------------------------------------------

STATIC = "<!doctype html><body style='margin:0;background:#eee'><h1>Nothing moves here</h1></body>"

TRANSITION = """<!doctype html>
<style>
  body { margin: 0; background: #fff; }
  #box { position: absolute; left: 0; top: 100px; width: 300px; height: 300px; background: #000;
         transition: transform 600ms linear; }
  #box.moved { transform: translateX(900px); }
</style>
<body><div id="box"></div>
<script>
  window.ended = null;
  document.addEventListener('click', () => {
    window.started = performance.now();
    document.getElementById('box').classList.add('moved');
  });
  document.getElementById('box').addEventListener('transitionend', () => { window.ended = performance.now(); });
</script></body>"""

# A 16 x 16 ring spinner (256 px^2) on an 8 px grid, turning forever.
SPINNER = """<!doctype html>
<style>
  body { margin: 0; background: #fff; }
  #spin { position: absolute; left: 640px; top: 352px; width: 16px; height: 16px; box-sizing: border-box;
          border-radius: 50%; border: 4px solid #ddd; border-top-color: #000; animation: turn 0.4s linear infinite; }
  @keyframes turn { to { transform: rotate(360deg); } }
</style>
<body><p>Loading</p><div id="spin"></div></body>"""

# The whole background: black and white stripes sliding forever.
BACKGROUND = """<!doctype html>
<style>
  html, body { margin: 0; height: 100%; }
  body { background: repeating-linear-gradient(90deg, #000 0 64px, #fff 64px 128px);
         animation: slide 0.5s linear infinite; }
  @keyframes slide { from { background-position: 0 0; } to { background-position: 128px 0; } }
</style>
<body></body>"""


def serve(tmp_path, **pages: str) -> LocalSite:
    for name, html in pages.items():
        (tmp_path / f"{name}.html").write_text(html, encoding="utf-8")
    return LocalSite(tmp_path)


async def settle_on(url: str, settle: SettleConfig, click: Point | None = None, **web) -> tuple:
    config = WebConfig(**web)
    async with PlaywrightDevice(config, settle_config=settle, url=url) as device:
        await device.observe()
        small = await device.grab_small()
        if click is not None:
            await device.act(Action("click", point=click))
        result = await device.settle()
        page_times = await device.evaluate("[window.started ?? null, window.ended ?? null, performance.now()]")
        return result, small, page_times


def test_static_page_settles_quickly(tmp_path):
    with serve(tmp_path, static=STATIC) as site:
        result, small, _ = asyncio.run(settle_on(site.url("static.html"), SettleConfig(deadline_s=2.0)))
    assert result.settled, result
    assert result.elapsed_s < 0.5, result
    assert result.last_changed_fraction == 0.0
    # the grab is resized to SettleConfig.width (160) with the frame's aspect (1280 x 720)
    assert small.shape == (90, 160) and small.dtype == np.uint8


def test_grab_width_does_not_depend_on_viewport_or_pixel_ratio(tmp_path):
    with serve(tmp_path, static=STATIC) as site:
        _, small, _ = asyncio.run(
            settle_on(
                site.url("static.html"), SettleConfig(deadline_s=1.0, width=120),
                viewport_width=400, viewport_height=300, device_scale_factor=2,
            )
        )
    assert small.shape == (90, 120)


def test_transition_settles_only_after_it_ended(tmp_path):
    with serve(tmp_path, transition=TRANSITION) as site:
        result, _, (started, ended, _) = asyncio.run(
            settle_on(site.url("transition.html"), SettleConfig(deadline_s=2.5), click=Point(0.5, 0.5))
        )
    assert started is not None, "the click did not start the transition"
    assert ended is not None, "the transition never ended"
    assert result.settled, result
    assert result.elapsed_s >= 0.55, f"settled before the 600 ms transition was over: {result}"
    assert result.elapsed_s < 2.5


def test_small_spinner_does_not_keep_the_screen_busy(tmp_path):
    with serve(tmp_path, spinner=SPINNER) as site:
        result, _, _ = asyncio.run(settle_on(site.url("spinner.html"), SettleConfig(deadline_s=2.0)))
    assert result.settled, result
    assert result.last_changed_fraction <= 0.001
    assert result.elapsed_s < 1.5


def test_spinner_does_change_frames(tmp_path):
    """Guards the previous test: with no allowance at all the same spinner never settles."""
    with serve(tmp_path, spinner=SPINNER) as site:
        result, _, _ = asyncio.run(
            settle_on(site.url("spinner.html"), SettleConfig(deadline_s=0.6, max_changed_fraction=0.0, stable_frames=3))
        )
    assert not result.settled, result
    assert result.last_changed_fraction > 0.0


def test_animated_background_hits_the_deadline(tmp_path):
    with serve(tmp_path, background=BACKGROUND) as site:
        started = time.perf_counter()
        result, _, _ = asyncio.run(
            settle_on(
                site.url("background.html"), SettleConfig(deadline_s=0.6), viewport_width=640, viewport_height=360
            )
        )
        wall = time.perf_counter() - started
    assert not result.settled, result
    assert result.elapsed_s >= 0.6
    assert result.elapsed_s < 1.5, "settle overran its deadline"
    assert result.last_changed_fraction > 0.1
    assert result.frames >= 3
    assert wall < 10

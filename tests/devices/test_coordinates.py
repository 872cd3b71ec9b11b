"""The coordinate contract end to end, without trusting the DOM for where to click.

Each page holds solid-coloured target blocks. A test finds every block by its colour in the pixels of
the OBSERVED frame, takes its centre in normalized frame coordinates (continuous pixel coordinates:
the centre of pixels min..max is (min + max + 1) / 2, divided by the frame size), clicks there with
``device.act`` and checks that the page's own click listener saw that block. This holds at device
pixel ratio 1 and 2 (device- and CSS-sized frames), on a scrolled page, under CSS zoom and under
pinch zoom, for 8 x 8 CSS pixel targets in the corners, and at the frame's edges (x or y = 1.0).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from devices import Action, Observation, Point
from devices.web import PlaywrightDevice, WebConfig
from envs.site import LocalSite

W, H = 640, 400  # CSS viewport of these tests

COLOURS = {
    "red": (255, 0, 0),
    "green": (0, 160, 0),
    "blue": (0, 0, 255),
    "orange": (255, 160, 0),
    "purple": (160, 0, 160),
    "teal": (0, 160, 160),
}

RECORDER = """<script>
  window.clicks = [];
  document.addEventListener('click', e => clicks.push(e.target.id));
</script>"""


def blocks_page(blocks: dict[str, tuple[int, int, int, int]], body_css: str = "") -> str:
    """A page with absolutely placed blocks {id: (left, top, width, height)}; each id is a COLOURS key."""
    divs = "\n".join(
        f'<div id="{name}" style="position:absolute;left:{x}px;top:{y}px;width:{w}px;height:{h}px;'
        f'background:rgb{COLOURS[name]}"></div>'
        for name, (x, y, w, h) in blocks.items()
    )
    return f"""<!doctype html><style>html, body {{ margin: 0; background: #fff; }} body {{ {body_css} }}</style>
<body>{divs}{RECORDER}</body>"""


def find_block(frame: np.ndarray, colour: tuple[int, int, int]) -> tuple[float, float, int] | None:
    """Centre (u, v) in continuous frame pixels of the pixels of exactly ``colour``, and their count."""
    mask = np.all(frame == np.array(colour, np.uint8), axis=2)
    vs, us = np.nonzero(mask)
    if len(us) == 0:
        return None
    return (us.min() + us.max() + 1) / 2, (vs.min() + vs.max() + 1) / 2, len(us)


async def click_blocks(device: PlaywrightDevice, names: list[str], min_pixels: int = 16) -> dict[str, Any]:
    """Find each block in a fresh observation and click its centre; returns what the page saw."""
    observation = await device.observe()
    seen: dict[str, Any] = {}
    for name in names:
        found = find_block(observation.frame, COLOURS[name])
        assert found is not None, f"block {name} is not in the {observation.size} frame ({observation.meta})"
        u, v, count = found
        assert count >= min_pixels, f"block {name}: only {count} pixels in the frame"
        point = Point.from_pixels(u, v, observation.width, observation.height)
        result = await device.act(Action("click", point=point))
        clicked = await device.evaluate("clicks.at(-1)")
        assert clicked == name, (
            f"clicked the centre of {name} at frame pixel ({u}, {v}) = {point} but the page saw {clicked!r}; "
            f"frame {observation.size}, meta {observation.meta}"
        )
        # the DOM's view of the target agrees, and its box holds the point
        assert result.target is not None and result.target["id"] == name
        assert result.target_box is not None and result.target_box.contains(point.x, point.y)
        seen[name] = (point, result.target_box)
    seen["observation"] = observation
    return seen


def serve(tmp_path: Path, **pages: str) -> LocalSite:
    for name, html in pages.items():
        (tmp_path / f"{name}.html").write_text(html, encoding="utf-8")
    return LocalSite(tmp_path)


def on_device(url: str, scenario, **web: Any) -> Any:
    async def main():
        async with PlaywrightDevice(WebConfig(viewport_width=W, viewport_height=H, **web), url=url) as device:
            return await scenario(device)

    return asyncio.run(main())


SCATTERED = {
    "red": (10, 10, 60, 40),
    "green": (300, 30, 24, 24),
    "blue": (560, 320, 70, 70),
    "orange": (50, 300, 200, 20),
    "purple": (420, 150, 33, 17),
    "teal": (200, 180, 9, 11),
}


@pytest.mark.parametrize(
    "dpr, frame_scale, frame_size",
    [(1, "device", (640, 400)), (2, "device", (1280, 800)), (2, "css", (640, 400))],
)
def test_click_blocks_found_in_the_frame(tmp_path, dpr, frame_scale, frame_size):
    async def scenario(device):
        seen = await click_blocks(device, list(SCATTERED))
        observation: Observation = seen["observation"]
        assert observation.size == frame_size
        # the DOM box of each block, normalized, matches the block's pixels in the frame
        for name, (left, top, width, height) in SCATTERED.items():
            _, box = seen[name]
            assert box.as_list() == pytest.approx(
                [left / W, top / H, (left + width) / W, (top + height) / H], abs=1e-6
            )

    with serve(tmp_path, page=blocks_page(SCATTERED)) as site:
        on_device(site.url("page.html"), scenario, device_scale_factor=dpr, frame_scale=frame_scale)


def test_scrolled_page(tmp_path):
    # targets in the middle of a big document, shown by scrolling both ways
    blocks = {name: (1000 + x, 1500 + y, w, h) for name, (x, y, w, h) in SCATTERED.items()}
    page = blocks_page(blocks, "width: 4000px; height: 4000px;")

    async def scenario(device):
        await device.evaluate("window.scrollTo(1000, 1500)")
        seen = await click_blocks(device, list(blocks))
        assert seen["observation"].meta["scroll"] == [1000, 1500]
        await device.evaluate("window.scrollTo(1100, 1600)")  # half of them still visible, elsewhere
        await click_blocks(device, ["blue", "purple", "teal"])

    with serve(tmp_path, page=page) as site:
        on_device(site.url("page.html"), scenario, device_scale_factor=2)


@pytest.mark.parametrize("dpr", [1, 2])
def test_css_zoom_on_the_root_element(tmp_path, dpr):
    # at zoom 1.5 a block at CSS (x, y) is drawn at (1.5 x, 1.5 y): keep them inside 640 x 400 / 1.5
    blocks = {
        "red": (10, 10, 40, 30),
        "green": (200, 20, 16, 16),
        "blue": (380, 220, 40, 40),
        "orange": (30, 200, 100, 10),
        "purple": (250, 120, 21, 13),
    }

    async def scenario(device):
        await device.evaluate("document.documentElement.style.zoom = '1.5'")
        seen = await click_blocks(device, list(blocks))
        # the DOM box agrees with the zoom: the 40 px wide blue block spans 60 px of the viewport
        box = seen["blue"][1]
        assert round((box.x2 - box.x1) * W) == 60

    with serve(tmp_path, page=blocks_page(blocks)) as site:
        on_device(site.url("page.html"), scenario, device_scale_factor=dpr)


@pytest.mark.parametrize("dpr, frame_scale", [(1, "device"), (2, "device"), (2, "css")])
def test_pinch_zoom_follows_the_visual_viewport(tmp_path, dpr, frame_scale):
    # a big document, scrolled, then pinch-zoomed 2x and panned so that the visual viewport is offset
    # inside the layout viewport: page coordinates, layout offset and visual offset all differ
    blocks = {
        "red": (1100, 880, 30, 20),
        "green": (1200, 900, 12, 12),
        "blue": (1260, 950, 25, 25),
        "orange": (1150, 1020, 60, 6),
        "purple": (1370, 1040, 9, 9),
    }  # the visual viewport will show page x 1080..1400, y 860..1060
    page = blocks_page(blocks, "width: 4000px; height: 4000px;")

    async def scenario(device):
        await device.evaluate("window.scrollTo(1000, 800)")
        cdp = await device.page.context.new_cdp_session(device.page)
        await cdp.send("Emulation.setPageScaleFactor", {"pageScaleFactor": 2})
        await device.page.mouse.move(W / 2, H / 2)
        await device.page.mouse.wheel(160, 120)  # pans the visual viewport by (80, 60) CSS px at scale 2
        await device.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        seen = await click_blocks(device, list(blocks), min_pixels=36)
        meta = seen["observation"].meta
        assert meta["page_scale"] == 2
        assert meta["viewport_css"] == [W / 2, H / 2]
        assert meta["viewport_offset_css"] == [80, 60], meta
        assert meta["scroll"] == [1000, 800]
        # a 12 CSS px block is 24 frame pixels wide in a CSS-sized frame, 24 * dpr in a device-sized one
        frame_px = 24 * (dpr if frame_scale == "device" else 1)
        _, _, count = find_block(seen["observation"].frame, COLOURS["green"])
        assert count == frame_px * frame_px
        scale = dpr if frame_scale == "device" else 1
        assert seen["observation"].size == (W * scale, H * scale)

    with serve(tmp_path, page=page) as site:
        on_device(site.url("page.html"), scenario, device_scale_factor=dpr, frame_scale=frame_scale)


@pytest.mark.parametrize("dpr, frame_scale", [(1, "device"), (2, "device"), (2, "css")])
def test_small_targets_in_the_corners(tmp_path, dpr, frame_scale):
    # 8 x 8 CSS px targets one pixel in from each corner
    corners = {
        "red": (1, 1, 8, 8),
        "green": (W - 9, 1, 8, 8),
        "blue": (1, H - 9, 8, 8),
        "orange": (W - 9, H - 9, 8, 8),
    }

    async def scenario(device):
        seen = await click_blocks(device, list(corners), min_pixels=64 * (dpr if frame_scale == "device" else 1) ** 2)
        size = seen["observation"].size
        scale = dpr if frame_scale == "device" else 1
        # hand-computed centre of the bottom-right target: CSS (635, 395) in any frame
        point, _ = seen["orange"]
        assert (point.x * size[0] / scale, point.y * size[1] / scale) == (635.0, 395.0)

    with serve(tmp_path, page=blocks_page(corners)) as site:
        on_device(site.url("page.html"), scenario, device_scale_factor=dpr, frame_scale=frame_scale)


EDGES = """<!doctype html>
<style>
  html, body { margin: 0; width: 100%; height: 100%; overflow: hidden; background: #fff; }
  div { position: fixed; }
  #left { left: 0; top: 0; width: 1px; height: 100%; background: rgb(255, 0, 0); }
  #right { right: 0; top: 0; width: 1px; height: 100%; background: rgb(0, 0, 255); }
  #top { top: 0; left: 1px; right: 1px; height: 1px; background: rgb(0, 160, 0); }
  #bottom { bottom: 0; left: 1px; right: 1px; height: 1px; background: rgb(255, 160, 0); }
</style>
<body><div id="left"></div><div id="right"></div><div id="top"></div><div id="bottom"></div>""" + RECORDER


@pytest.mark.parametrize("dpr, frame_scale", [(1, "device"), (2, "device"), (2, "css")])
def test_points_on_the_frame_edges_land_on_the_page(tmp_path, dpr, frame_scale):
    async def scenario(device):
        observation = await device.observe()
        frame = observation.frame
        # the page's 1 px edges are the frame's outermost pixel rows and columns
        assert frame[observation.height // 2, -1].tolist() == [0, 0, 255]
        assert frame[observation.height // 2, 0].tolist() == [255, 0, 0]
        assert frame[-1, observation.width // 2].tolist() == [255, 160, 0]
        assert frame[0, observation.width // 2].tolist() == [0, 160, 0]
        for point, expected in [
            (Point(1.0, 0.5), "right"),
            (Point(0.0, 0.5), "left"),
            (Point(0.5, 1.0), "bottom"),
            (Point(0.5, 0.0), "top"),
            (Point(1.0, 1.0), "right"),
            (Point(0.0, 1.0), "left"),
        ]:
            result = await device.act(Action("click", point=point))
            assert await device.evaluate("clicks.at(-1)") == expected, f"{point} missed the {expected} edge"
            assert result.target["id"] == expected

    with serve(tmp_path, edges=EDGES) as site:
        on_device(site.url("edges.html"), scenario, device_scale_factor=dpr, frame_scale=frame_scale)

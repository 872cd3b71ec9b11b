"""What a phone answers, parsed: raw ``screencap`` frames, ``wm size``, ``wm density``, ``dumpsys
display`` and ``uiautomator dump``. Pure functions of the text or bytes, unit-tested without a phone.

Frames: ``screencap`` through the ``exec:`` service (adb's ``exec-out``: a raw byte pipe, no shell
or terminal in between) gives the uncompressed pixels: a 12-byte header (width, height, pixel
format) or, since Android 9, a 16-byte one (plus the colour space), then width x height pixels.
Reading them skips the PNG encoding that makes ``screencap -p`` take up to seconds on a phone
(docs/devices.md, Android). A frame that is cut short or does not decode is a DeviceError, never a
silent frame; a pixel format this driver does not know is an ``UnknownPixelFormat``, on which the
device switches to ``screencap -p``.

Coordinate contract (docs/coordinates.md, docs/devices.md): Android's input space is the display's
current logical size in its current orientation: the override size when ``wm size`` set one, else
the physical size, with the axes swapped for rotation 1 and 3. ``screencap`` delivers exactly that
space, so the frame header is the input size. When the frame size changes (first frame, rotation,
``wm size``), the device cross-checks it against ``wm size`` and ``dumpsys display``
(``geometry_for``); when they disagree it logs a warning and trusts the frame. ``input tap`` /
``swipe`` take floats (Android parses them with Float.parseFloat), so they get the continuous point
X = x * W, Y = y * H, written with two decimals; x = 1 (the far edge of the last pixel) is moved
0.01 px inside the screen.
"""

from __future__ import annotations

import logging
import re
import struct
import xml.etree.ElementTree as ET
from dataclasses import dataclass

import numpy as np

from devices.base import Box
from devices.errors import DeviceError, UnknownPixelFormat

log = logging.getLogger(__name__)

#: raw screencap pixel formats (android PixelFormat): bytes per pixel
PIXEL_FORMATS = {1: 4, 2: 4, 3: 3, 4: 2, 5: 4}


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
    focused: bool = False


def parse_raw_screencap(data: bytes) -> np.ndarray:
    """The RGB frame of raw ``screencap`` output (12- or 16-byte header); DeviceError if malformed."""
    if len(data) < 12:
        raise DeviceError(f"screencap returned {len(data)} bytes, fewer than its 12-byte header")
    w, h, fmt = struct.unpack_from("<3I", data)
    if fmt not in PIXEL_FORMATS:
        raise UnknownPixelFormat(fmt)
    if not (0 < w <= 16384 and 0 < h <= 16384):
        raise DeviceError(f"screencap header says {w}x{h} pixels, which is not a screen size")
    bpp = PIXEL_FORMATS[fmt]
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


def parse_density(text: str) -> int | None:
    """The screen density (dpi) from ``wm density`` output: the override when one is set."""
    m = re.search(r"Override density:\s*(\d+)", text) or re.search(r"density:\s*(\d+)", text)
    return int(m.group(1)) if m else None


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
                focused=node.get("focused") == "true",
            )
        )
    return out

"""Frame decoding, encoding and the small helpers devices and recorders share (OpenCV; RGB order)."""

from __future__ import annotations

import cv2
import numpy as np

from devices.errors import DeviceError
from devices.files import check_image


def decode(data: bytes) -> np.ndarray:
    """Decode PNG or JPEG bytes to an RGB uint8 array; DeviceError when they are no image or declare more than
    ``devices.files.MAX_IMAGE_PIXELS`` pixels (read from the header, before decoding)."""
    try:
        check_image(data, "the frame")
    except ValueError as e:
        raise DeviceError(str(e)) from None
    frame = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR_RGB)
    if frame is None:
        raise DeviceError(f"the device returned {len(data)} bytes that are not a PNG or JPEG image")
    return frame


_REDUCED_GRAY = {
    1: cv2.IMREAD_GRAYSCALE,
    2: cv2.IMREAD_REDUCED_GRAYSCALE_2,
    4: cv2.IMREAD_REDUCED_GRAYSCALE_4,
    8: cv2.IMREAD_REDUCED_GRAYSCALE_8,
}


def decode_small_gray(
    data: bytes, reduce: int = 8, *, width: int | None = None, expected_width: int | None = None
) -> np.ndarray:
    """Decode to gray at 1/``reduce`` size (JPEG decodes at reduced size directly, which is cheap).

    With ``width``, the result is exactly ``width`` pixels wide (aspect kept): the image is decoded at
    the largest reduction that stays at least that wide (``expected_width`` is the full image width,
    when known, to pick it) and then area-resized.
    """
    try:
        check_image(data, "the frame")
    except ValueError as e:
        raise DeviceError(str(e)) from None
    if width is not None and expected_width:
        reduce = max((r for r in (8, 4, 2, 1) if expected_width // r >= width), default=1)
    frame = cv2.imdecode(np.frombuffer(data, np.uint8), _REDUCED_GRAY[reduce])
    if frame is None:
        raise DeviceError(f"the device returned {len(data)} bytes that are not a PNG or JPEG image")
    if width is not None and frame.shape[1] != width:
        height = max(1, round(frame.shape[0] * width / frame.shape[1]))
        frame = cv2.resize(frame, (width, height), interpolation=cv2.INTER_AREA)
    return frame


def small_gray(frame: np.ndarray, width: int) -> np.ndarray:
    """An RGB frame as a gray image ``width`` pixels wide (aspect kept), for frame differencing."""
    height = max(1, round(frame.shape[0] * width / frame.shape[1]))
    small = cv2.resize(frame, (width, height), interpolation=cv2.INTER_AREA)
    return cv2.cvtColor(small, cv2.COLOR_RGB2GRAY)


def encode(frame: np.ndarray, fmt: str = "png", quality: int = 90) -> bytes:
    """Encode an RGB frame as PNG (lossless) or JPEG."""
    bgr = cv2.cvtColor(frame, cv2.COLOR_RGB2BGR)
    if fmt == "png":
        # No PNG row filter and zlib level 1: 3.6 ms instead of 12.5 ms for a 1280x720 UI frame with
        # OpenCV's default adaptive filters, and no bigger (flat UI areas compress well unfiltered).
        ok, buf = cv2.imencode(
            ".png", bgr, [cv2.IMWRITE_PNG_COMPRESSION, 1, cv2.IMWRITE_PNG_FILTER, cv2.IMWRITE_PNG_FILTER_NONE]
        )
    elif fmt in ("jpeg", "jpg"):
        ok, buf = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, quality])
    else:
        raise ValueError(f"unknown frame format {fmt!r}; use png or jpeg")
    if not ok:
        raise ValueError(f"could not encode a {frame.shape} frame as {fmt}")
    return buf.tobytes()


def blur_boxes(frame: np.ndarray, boxes: list[tuple[int, int, int, int]]) -> np.ndarray:
    """A copy of ``frame`` with each pixel rectangle (left, top, right, bottom) made unreadable."""
    out = frame.copy()
    for left, top, right, bottom in boxes:
        if right <= left or bottom <= top:
            continue
        region = out[top:bottom, left:right]
        # A box blur wider than the region leaves only its average colour: no glyph survives.
        out[top:bottom, left:right] = region.reshape(-1, 3).mean(axis=0).astype(np.uint8)
    return out

"""The coordinate contract between model space and frame space (docs/coordinates.md).

- Frame space: a W x H frame; action points are normalized x = u / W, y = v / H in [0, 1].
- Model space: what a model writes. ``ABSOLUTE``: pixels of the image the model saw (w' x h'),
  so x = x' / w'; ``RELATIVE_1000``: a 0-1000 grid, so x = x' / 1000. No half-pixel shift: the
  models' training boxes are edge coordinates and a point is inside a box when x1 <= x <= x2.
- The model-input size comes from an optional pre-resize (a family's own downscale before the
  processor) and then ``smart_resize``, the one implementation in handeye, which follows
  qwen-vl-utils exactly (Python's round, half to even) and is tested against transformers'.
- GUI-R1's ``[-100, -100]`` means "no target": an absent point, not an error. Any other point
  outside the model image is a CoordinateError, never clamped; so is a number no screen can have
  (an integer too large for a float, which a model writing 400 digits produces): ``coordinate``
  turns every such value into a CoordinateError instead of Python's OverflowError.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from devices.actions import Point
from policy.errors import CoordinateError

IMAGE_FACTOR = 28
"""Qwen2-VL / Qwen2.5-VL: 14 px patches merged 2 x 2."""
MIN_PIXELS = 4 * 28 * 28
"""3,136: the qwen-vl-utils and checkpoint default."""
MAX_PIXELS = 16384 * 28 * 28
"""12,845,056: the qwen-vl-utils and checkpoint default."""
MAX_RATIO = 200
NO_TARGET = (-100.0, -100.0)


def number_text(value: int | float) -> str:
    """A number as a message shows it, whatever its size: ``str`` up to 15 digits, else the first
    digits and the exponent (``1.11e399``). ``str`` of an integer over 4,300 digits raises
    ValueError (Python's digit limit), and a message must never fail while being written."""
    if isinstance(value, bool) or not isinstance(value, int) or -10**15 < value < 10**15:
        return str(value)
    exponent = math.floor(math.log10(abs(value)))  # log10 takes integers of any size
    mantissa = abs(value) / 10**exponent  # int / int is exact enough for three digits
    if mantissa >= 10:  # log10 rounded up across a power of ten
        mantissa, exponent = mantissa / 10, exponent + 1
    return f"{'-' if value < 0 else ''}{mantissa:.3g}e{exponent}"


def coordinate(value: object, what: str = "coordinate") -> float:
    """``value`` (a number a model wrote) as a float; CoordinateError when it is not a number
    (booleans are not) or is an integer too large for a float. Non-finite floats pass through:
    ``ModelSpace.to_point`` reports them as outside the image."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CoordinateError(f"{what} must be a number, got {type(value).__name__}")
    try:
        return float(value)
    except OverflowError:
        raise CoordinateError(f"{what} {number_text(value)} is not a number a screen can have") from None


class CoordMode(str, Enum):
    ABSOLUTE = "absolute"
    """Pixels of the image the model saw (Qwen2.5-VL, InfiGUI-G1, GUI-R1, UI-TARS-1.5)."""
    RELATIVE_1000 = "relative_1000"
    """A 0-1000 grid over the image (UI-TARS v1, Qwen2-VL based)."""


def smart_resize(
    height: int, width: int, factor: int = IMAGE_FACTOR, min_pixels: int = MIN_PIXELS, max_pixels: int = MAX_PIXELS
) -> tuple[int, int]:
    """(height, width), each a multiple of ``factor``, with the pixel count in [min_pixels, max_pixels]
    and the aspect ratio kept as closely as possible. Argument order and result are (h, w), as in
    qwen-vl-utils and transformers."""
    if height <= 0 or width <= 0:
        raise ValueError(f"image size must be positive, got {width}x{height}")
    if min_pixels > max_pixels:
        raise ValueError(f"min_pixels {min_pixels} is larger than max_pixels {max_pixels}")
    if max(height, width) / min(height, width) > MAX_RATIO:
        raise ValueError(f"aspect ratio of {width}x{height} is over {MAX_RATIO}; Qwen-VL models cannot take it")
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


class PreResize(str, Enum):
    NONE = "none"
    ROUND_DOWN_TO = "round_down_to"
    """InfiGUI-G1 evaluation: above ``pixels``, scale both sides by sqrt(pixels / (W*H)) and round."""
    TRUNCATE_TO = "truncate_to"
    """GUI-R1 training loader: above ``pixels``, scale by sqrt(pixels / (W*H)) and truncate (int)."""


def pre_resize(width: int, height: int, mode: PreResize, pixels: int = 0) -> tuple[int, int]:
    """A family's own downscale before the processor; (width, height) unchanged when under the cap."""
    if mode is PreResize.NONE or width * height <= pixels:
        return width, height
    scale = math.sqrt(pixels / (width * height))
    if mode is PreResize.ROUND_DOWN_TO:
        return max(1, round(width * scale)), max(1, round(height * scale))
    return max(1, int(width * scale)), max(1, int(height * scale))


@dataclass(frozen=True, slots=True)
class ModelSpace:
    """How one model's coordinates relate to one frame.

    ``frame_size`` is (W, H) of the observation; ``input_size`` is (w', h') of the image the model
    saw (after any pre-resize and smart_resize); ``mode`` says how its numbers are meant.
    """

    frame_size: tuple[int, int]
    input_size: tuple[int, int]
    mode: CoordMode = CoordMode.ABSOLUTE

    @property
    def extent(self) -> tuple[float, float]:
        """The model-space width and height that map to the frame's full width and height."""
        if self.mode is CoordMode.RELATIVE_1000:
            return 1000.0, 1000.0
        return float(self.input_size[0]), float(self.input_size[1])

    def to_point(self, x: float, y: float) -> Point | None:
        """The normalized frame point of model coordinates (x', y'); None for the no-target sentinel.
        Every other value is a Point inside [0, 1] or a CoordinateError (see ``coordinate``)."""
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in (x, y)):
            kinds = f"{type(x).__name__}, {type(y).__name__}"
            raise CoordinateError(f"coordinates must be numbers, got ({kinds})")
        x, y = coordinate(x), coordinate(y)
        if (x, y) == NO_TARGET:
            return None
        sx, sy = self.extent
        if not (math.isfinite(x) and math.isfinite(y) and 0 <= x <= sx and 0 <= y <= sy):
            unit = "the 0-1000 grid" if self.mode is CoordMode.RELATIVE_1000 else f"the {sx:g}x{sy:g} image the model saw"
            raise CoordinateError(f"point ({x:g}, {y:g}) is outside {unit}")
        return Point(x / sx, y / sy)

    def from_point(self, point: Point) -> tuple[float, float]:
        """Model coordinates of a normalized frame point (the inverse of ``to_point``)."""
        sx, sy = self.extent
        return point.x * sx, point.y * sy

    def to_frame_pixels(self, point: Point) -> tuple[float, float]:
        """Continuous frame pixel coordinates (u, v) of a normalized point."""
        return point.x * self.frame_size[0], point.y * self.frame_size[1]

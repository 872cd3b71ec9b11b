"""Generated 224 px screens for the learning benchmark: find "the red circle" among distractors.

Each screen is a 224 x 224 RGB frame on a ``grid`` x ``grid`` grid of cells (default 2 x 2, 112 px cells). One
target and ``distractors`` other shapes sit at the centres of distinct random cells, each a filled circle, square
or triangle of one of five colours, 1/2 to 4/5 of a cell across. With two or more distractors, one shares the
target's colour and one its shape, so the instruction's two words are both needed; a single distractor shares one
of the two, at random. The target's box is its shape's bounding box in pixels of the image the model sees (the
frame is already a model-input size: 224 = 8 x 28).

The background is a two-way gradient (red channel grows to the right, green downwards) by default, and shapes
let 30% of it show through: a model of about 1M parameters with rotary positions only has no easy way to read
*where* an image token is from its content, and the gradient gives every patch, shapes included, a position
signature it can read. ``background="flat"`` draws plain grey and opaque shapes.

Prompts are built by the project's InfiGUI-G1 format (``no_think`` variant), exactly as ``agent run`` builds them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from policy.formats.infigui import InfiGuiG1Format
from policy.presets import Decoding, ModelPreset, preset_for
from train.learner import RolloutPrompt

SIZE = 224
COLOURS = {
    "red": (220, 40, 40),
    "green": (40, 190, 60),
    "blue": (50, 80, 230),
    "yellow": (235, 215, 40),
    "purple": (160, 60, 200),
}
SHAPES = ("circle", "square", "triangle")
BLEND = 0.3
"""Share of the background showing through a shape on the gradient background (so shapes carry position too)."""

PRESET: ModelPreset = preset_for("handeye-bench-1m", fmt="infigui-g1", variant="no_think",
                                 min_pixels=4 * 28 * 28, max_pixels=SIZE * SIZE,
                                 decoding=Decoding(temperature=0.0, max_new_tokens=40))
"""InfiGUI-G1's no_think prompt; the pixel budget makes a 224 x 224 frame its own model-input size."""

WIDE_FRAME = (1280, 720)
"""The throughput comparison's screen-sized frame (``bench/learning/trl_compare.py``, setting ``1280x720``)."""
WIDE_PRESET: ModelPreset = preset_for("handeye-bench-1m", fmt="infigui-g1", variant="no_think",
                                      min_pixels=4 * 28 * 28, max_pixels=1288 * 728,
                                      decoding=Decoding(temperature=0.0, max_new_tokens=40))
"""The same prompt with a pixel budget that keeps a 1280 x 720 frame whole: model input 1288 x 728, 1,196 image
tokens (the size of a real screenshot's prompt, as Qwen2.5-VL's default budget gives it)."""


@dataclass(frozen=True, slots=True)
class Screen:
    image: np.ndarray
    instruction: str
    box: tuple[float, float, float, float]
    """(x1, y1, x2, y2) of the target, inclusive, in model-input pixels."""
    centre: tuple[int, int]
    objects: tuple[tuple[str, str, int, int, int], ...]
    """(colour, shape, cx, cy, half-size) of every shape, the target first."""


def _background(kind: str) -> np.ndarray:
    if kind == "flat":
        return np.full((SIZE, SIZE, 3), 110, dtype=np.uint8)
    if kind != "gradient":
        raise ValueError(f"background must be 'gradient' or 'flat', got {kind!r}")
    ramp = np.linspace(30, 200, SIZE)
    img = np.empty((SIZE, SIZE, 3))
    img[..., 0] = ramp[None, :]
    img[..., 1] = ramp[:, None]
    img[..., 2] = 100
    return img.astype(np.uint8)


def _draw(img: np.ndarray, colour: tuple[int, int, int], shape: str, cx: int, cy: int, r: int,
          blend: float) -> None:
    ys, xs = np.mgrid[0:SIZE, 0:SIZE]
    px, py = xs + 0.5, ys + 0.5  # pixel centres
    if shape == "circle":
        mask = (px - cx) ** 2 + (py - cy) ** 2 <= r * r
    elif shape == "square":
        mask = (np.abs(px - cx) <= r) & (np.abs(py - cy) <= r)
    else:  # triangle, apex up, base at cy + r
        inside_y = (py >= cy - r) & (py <= cy + r)
        half = (py - (cy - r)) / 2.0  # half-width grows from 0 at the apex to r at the base
        mask = inside_y & (np.abs(px - cx) <= half)
    img[mask] = (1.0 - blend) * np.asarray(colour, dtype=float) + blend * img[mask]


def make_screen(rng: np.random.Generator, distractors: int = 1, background: str = "gradient",
                grid: int = 2, mode: str = "share") -> Screen:
    """One screen (see the module docstring). ``mode="differ"``: every distractor differs from the target in both
    colour and shape (the colour word alone then names the target)."""
    if mode not in ("share", "differ"):
        raise ValueError(f"mode must be 'share' or 'differ', got {mode!r}")
    if grid not in (2, 4, 8):
        raise ValueError(f"grid must be 2, 4 or 8 (cells a multiple of 28 px), got {grid}")
    if not 0 <= distractors < grid * grid:
        raise ValueError(f"distractors must be in 0..{grid * grid - 1}, got {distractors}")
    cell = SIZE // grid
    colours = list(COLOURS)
    target = (colours[rng.integers(len(colours))], SHAPES[rng.integers(len(SHAPES))])
    same_colour = (target[0], _pick(rng, [s for s in SHAPES if s != target[1]]))
    same_shape = (_pick(rng, [c for c in colours if c != target[0]]), target[1])
    others: list[tuple[str, str]] = []
    if mode == "differ":
        combos = [(c, s) for c in colours for s in SHAPES if c != target[0] and s != target[1]]
        others = [combos[i] for i in rng.choice(len(combos), size=distractors, replace=False)]
    elif distractors == 1:
        others.append(same_colour if rng.integers(2) else same_shape)
    elif distractors >= 2:
        others += [same_colour, same_shape]
    combos = [(c, s) for c in colours for s in SHAPES if (c, s) != target]
    while mode == "share" and len(others) < distractors:
        others.append(combos[rng.integers(len(combos))])
    cells = rng.permutation(grid * grid)[: distractors + 1]
    img = _background(background)
    objects = []
    for (colour, shape), c in zip([target, *others], cells):
        cx, cy = cell * int(c % grid) + cell // 2, cell * int(c // grid) + cell // 2
        r = int(rng.integers(cell // 4, cell * 2 // 5 + 1))
        _draw(img, COLOURS[colour], shape, cx, cy, r, BLEND if background == "gradient" else 0.0)
        objects.append((colour, shape, cx, cy, r))
    _, _, cx, cy, r = objects[0]
    return Screen(img, f"the {target[0]} {target[1]}", (cx - r, cy - r, cx + r, cy + r), (cx, cy), tuple(objects))


def _pick(rng: np.random.Generator, items: list[str]) -> str:
    return items[rng.integers(len(items))]


def to_prompt(screen: Screen, origin: dict | None = None) -> RolloutPrompt:
    """The InfiGUI-G1 no_think prompt for the screen, with its box as the reward target."""
    space = PRESET.space((SIZE, SIZE))
    assert space.input_size == (SIZE, SIZE), space
    messages = InfiGuiG1Format().build_prompt(screen.instruction, (), space, PRESET).messages
    messages = [{**m, "content": [({"type": "image"} if p.get("type") == "image" else p) for p in m["content"]]}
                for m in messages]
    return RolloutPrompt(messages, screen.image, (SIZE, SIZE), target=screen.box,
                         origin={"instruction": screen.instruction, **(origin or {})})


def to_wide_prompt(screen: Screen, origin: dict | None = None) -> RolloutPrompt:
    """The screen stretched to a 1280 x 720 frame, resized to its model-input size (1288 x 728) as ``agent run``
    resizes a frame, with the box scaled alike: the same task with a real screenshot's number of image tokens."""
    from PIL import Image

    space = WIDE_PRESET.space(WIDE_FRAME)
    width, height = space.input_size
    frame = Image.fromarray(screen.image).resize(WIDE_FRAME, Image.BILINEAR)
    image = np.asarray(frame.resize((width, height), Image.BILINEAR))
    fx, fy = width / SIZE, height / SIZE
    x1, y1, x2, y2 = screen.box
    messages = InfiGuiG1Format().build_prompt(screen.instruction, (), space, WIDE_PRESET).messages
    messages = [{**m, "content": [({"type": "image"} if p.get("type") == "image" else p) for p in m["content"]]}
                for m in messages]
    return RolloutPrompt(messages, image, WIDE_FRAME, target=(x1 * fx, y1 * fy, x2 * fx, y2 * fy),
                         origin={"instruction": screen.instruction, **(origin or {})})


def target_text(screen: Screen, rng: np.random.Generator | None = None, jitter: int = 0,
                multi: float = 0.0, multi_points: int = 2) -> str:
    """The SFT answer: one point at the target's centre (moved by up to ``jitter`` px, staying in the box); with
    probability ``multi`` distractors' centres follow (target first, ``multi_points`` points at most), so answers
    of several points are in the policy's support before RL."""
    cx, cy = screen.centre
    if jitter and rng is not None:
        x1, y1, x2, y2 = screen.box
        cx = int(np.clip(cx + rng.integers(-jitter, jitter + 1), x1, x2))
        cy = int(np.clip(cy + rng.integers(-jitter, jitter + 1), y1, y2))
    points = [{"point_2d": [int(cx), int(cy)]}]
    if multi and rng is not None and len(screen.objects) > 1 and rng.random() < multi:
        points += [{"point_2d": [int(o[2]), int(o[3])]} for o in screen.objects[1:max(1, multi_points)]]
    return json.dumps(points)


def screens(seed: int, count: int, distractors: int = 1, background: str = "gradient", grid: int = 2,
            mode: str = "share") -> list[Screen]:
    rng = np.random.default_rng(seed)
    return [make_screen(rng, distractors, background, grid, mode) for _ in range(count)]

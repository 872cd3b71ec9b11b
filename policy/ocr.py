"""The OCR policy: the offline default with no model. It reads the screenshot's pixels with RapidOCR
and clicks the text the instruction names.

It handles one kind of task, "click X" (and double-click, right-click, hover, tap, 点击 ...; see
``policy.instructions.parse_instruction``): it finds X on the screen (ranking in ``policy.grounding``),
acts once at the centre of X's box, and finishes on the next step. When the screen holds only look-alikes of X
("Save as", "Unsave" for "Save": ``policy.grounding.lookalike``) or nothing like it, X is absent and the decision
is ``infeasible``. It never reads the DOM, so it
works the same on any device that gives frames.

RapidOCR (``pip install 'handeye[ocr]'``) ships its ONNX models inside the wheel, so nothing is
downloaded. It takes BGR arrays (an ndarray goes into its pipeline unconverted), so the RGB frame is
flipped first. Its polygons are taken as continuous pixel coordinates.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import numpy as np

from devices.actions import Action, ActionKind, Point
from devices.base import Box, Observation
from policy.base import Decision, HistoryEntry
from policy.errors import PolicyUnavailable
from policy.grounding import (
    DEFAULT_FUZZY_THRESHOLD,
    Match,
    OcrLine,
    Rect,
    find_target,
    lookalike,
    spread_chars,
)
from policy.instructions import parse_instruction

log = logging.getLogger(__name__)

#: actions after which a "click X" task is done
POINTER_KINDS = frozenset(
    {ActionKind.CLICK, ActionKind.DOUBLE_CLICK, ActionKind.RIGHT_CLICK, ActionKind.HOVER, ActionKind.LONG_PRESS}
)
#: how many read lines a not-found message quotes
READ_PREVIEW = 15
INSTALL_HINT = "run `make setup` or pip install 'handeye[ocr]'"
SUPPORTED = (
    'the OCR policy only handles "click X"-style instructions: click, double-click, right-click, hover (over), '
    "tap, press, select, choose, open, 点击, 单击, 双击, 右键点击, 选择, 打开, "
    "followed by the text to click "
    '(quote it when it is ambiguous: click "Save as draft")'
)


@dataclass(frozen=True, slots=True)
class OcrConfig:
    min_text_score: float = 0.5
    """OCR lines read with less confidence than this are ignored."""
    fuzzy_threshold: float = DEFAULT_FUZZY_THRESHOLD
    """Lowest difflib ratio at which a misread label still counts as found (0..1)."""
    max_side: int = 0
    """Downscale frames whose longer side exceeds this many pixels before OCR; 0 = never."""

    def __post_init__(self) -> None:
        if not 0 <= self.min_text_score <= 1:
            raise ValueError(f"ocr.min_text_score={self.min_text_score} must be between 0 and 1")
        if not 0 < self.fuzzy_threshold <= 1:
            raise ValueError(f"ocr.fuzzy_threshold={self.fuzzy_threshold} must be in (0, 1]")
        if self.max_side < 0 or 0 < self.max_side < 64:
            raise ValueError(f"ocr.max_side={self.max_side} must be 0 (never downscale) or at least 64 pixels")


def rapidocr_version() -> str | None:
    """The installed rapidocr version, read without importing it (importing loads onnxruntime)."""
    try:
        return metadata.version("rapidocr")
    except metadata.PackageNotFoundError:
        return None


class _DropEmptyResult(logging.Filter):
    """Drops RapidOCR's warnings that a screen had no text: a normal answer, reported by the policy."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "is empty" not in record.getMessage()


_DROP_EMPTY = _DropEmptyResult()


def _quiet_rapidocr_logging() -> None:
    """Keep RapidOCR's logger out of the way of tests and the CLI.

    It logs INFO on every model load through its own coloured stderr handler, bypassing the
    application's logging setup. Drop that handler and let records propagate like any library's,
    at WARNING and above, less the "result is empty" warnings a blank screen causes on every step.
    """
    rlog = logging.getLogger("RapidOCR")
    rlog.setLevel(logging.WARNING)
    for handler in list(rlog.handlers):
        rlog.removeHandler(handler)
    rlog.propagate = True
    if _DROP_EMPTY not in rlog.filters:
        rlog.addFilter(_DROP_EMPTY)


def build_engine(min_text_score: float = 0.5) -> Any:
    """A RapidOCR engine, or PolicyUnavailable saying how to install it."""
    try:
        from rapidocr import RapidOCR
    except ImportError as e:
        raise PolicyUnavailable(f"the OCR policy needs the rapidocr package ({e}); {INSTALL_HINT}") from e
    _quiet_rapidocr_logging()
    try:
        engine = RapidOCR(params={"Global.log_level": "warning", "Global.text_score": min_text_score})
    except Exception as e:  # a broken install: missing model files, an onnxruntime that will not load
        raise PolicyUnavailable(f"could not start the RapidOCR engine ({type(e).__name__}: {e}); {INSTALL_HINT}") from e
    _quiet_rapidocr_logging()  # building it resets the level from its config
    return engine


# -- turning RapidOCR output into lines ------------------------------------------------------------


def _quad_rect(quad: Any) -> Rect | None:
    try:
        points = np.asarray(quad, dtype=np.float64).reshape(-1, 2)
    except (TypeError, ValueError):
        return None
    if len(points) == 0 or not np.isfinite(points).all():
        return None
    return Rect.around(points.tolist())


def _char_rects(entries: Any) -> list[tuple[str, Rect]] | None:
    """(char, rect) per character from one line's word results, or None when they are unusable.

    Each entry is (text, score, quad); an entry of several characters (a word) is split evenly.
    Entries of any other shape (RapidOCR leaves its internal objects there when it could not place
    a line's characters) are unusable.
    """
    if not isinstance(entries, (list, tuple)) or not entries:
        return None
    out: list[tuple[str, Rect]] = []
    for entry in entries:
        if not (isinstance(entry, (list, tuple)) and len(entry) == 3 and isinstance(entry[0], str)):
            return None
        rect = _quad_rect(entry[2])
        if rect is None:
            return None
        glyphs = "".join(entry[0].split())
        out.extend(spread_chars(glyphs, rect))
    return out


def _chars_for(text: str, box: Rect, placed: list[tuple[str, Rect]] | None) -> tuple[tuple[str, Rect], ...]:
    """One box per character of ``text``, from RapidOCR's character boxes when they fit the text.

    RapidOCR's characters leave out spaces, so they are laid along the text's non-space characters
    and each space gets the gap between its neighbours.
    """
    glyph_positions = [i for i, c in enumerate(text) if not c.isspace()]
    if placed is None or len(placed) != len(glyph_positions):
        return spread_chars(text, box)
    rects: list[Rect | None] = [None] * len(text)
    for position, (_, rect) in zip(glyph_positions, placed, strict=True):
        rects[position] = rect.clip_to(box)
    out: list[tuple[str, Rect]] = []
    for i, char in enumerate(text):
        rect = rects[i]
        if rect is None:
            left = out[-1][1].right if out else box.left
            following = next((r for r in rects[i + 1 :] if r is not None), None)
            right = max(left, following.left if following is not None else box.right)
            rect = Rect(left, box.top, right, box.bottom)
        out.append((char, rect))
    return tuple(out)


def _near(placed: list[tuple[str, Rect]], box: Rect | None) -> bool:
    """Whether character boxes lie on the line's box (so two lines with equal text are not swapped)."""
    if box is None:
        return False
    union = placed[0][1]
    for _, rect in placed[1:]:
        union = union.union(rect)
    u, v = union.center
    pad = box.height
    return box.left - pad <= u <= box.right + pad and box.top - pad <= v <= box.bottom + pad


def _align_word_results(
    txts: Sequence[str], boxes: Sequence[Rect | None], word_results: Any
) -> list[list[tuple[str, Rect]] | None]:
    """Character boxes per line, None where a line has none.

    RapidOCR drops the word results of lines it could not place and of lines under the score
    threshold without dropping the lines, so the two lists can be out of step. Entries are paired
    with lines in order, by their characters and their position.
    """
    entries = list(word_results) if isinstance(word_results, (list, tuple)) else []
    out: list[list[tuple[str, Rect]] | None] = []
    j = 0
    for text, box in zip(txts, boxes, strict=True):
        glyphs = "".join(text.split())
        placed = None
        for k in range(j, len(entries)):
            rects = _char_rects(entries[k])
            if rects is not None and "".join(c for c, _ in rects) == glyphs and _near(rects, box):
                placed, j = rects, k + 1
                break
        out.append(placed)
    return out


def lines_from_result(result: Any, scale: float = 1.0, min_score: float = 0.0) -> list[OcrLine]:
    """OcrLines from a RapidOCR result, in frame pixels (``scale`` = OCR image size / frame size)."""
    txts = getattr(result, "txts", None)
    boxes = getattr(result, "boxes", None)
    if not txts or boxes is None or len(boxes) != len(txts):
        return []
    scores = getattr(result, "scores", None)
    if scores is None or len(scores) != len(txts):
        scores = [1.0] * len(txts)
    rects = [_quad_rect(quad) for quad in boxes]
    placed_per_line = _align_word_results(txts, rects, getattr(result, "word_results", None))
    lines: list[OcrLine] = []
    for text, score, box, placed in zip(txts, scores, rects, placed_per_line, strict=True):
        if box is None or not text.strip() or float(score) < min_score:
            continue
        if scale != 1.0:
            box = box.scaled(1 / scale)
            placed = [(c, r.scaled(1 / scale)) for c, r in placed] if placed else None
        lines.append(OcrLine(text, float(score), box, _chars_for(text, box, placed)))
    lines.sort(key=lambda line: (line.box.top, line.box.left))
    return lines


# -- the policy ------------------------------------------------------------------------------------


def _normalized_box(rect: Rect, width: int, height: int) -> Box:
    return Box(rect.left / width, rect.top / height, rect.right / width, rect.bottom / height).clipped()


def _click_point(rect: Rect, width: int, height: int) -> Point:
    # The box can poke past the frame edge (OCR polygons are padded); click the visible part's centre.
    visible = rect.clip_to(Rect(0, 0, width, height))
    u, v = visible.center
    return Point.from_pixels(u, v, width, height)


def _preview(lines: Sequence[OcrLine]) -> str:
    shown = ", ".join(json.dumps(line.text, ensure_ascii=False) for line in lines[:READ_PREVIEW])
    more = f", ... ({len(lines) - READ_PREVIEW} more)" if len(lines) > READ_PREVIEW else ""
    return shown + more if shown else "no text at all"


class OcrPolicy:
    """Grounds "click X" on the screenshot with OCR, acts once, then finishes."""

    name = "ocr"

    def __init__(self, config: OcrConfig | None = None) -> None:
        self.config = config or OcrConfig()
        self._engine: Any = None
        # RapidOCR keeps per-call options on the engine object, so one call runs at a time.
        self._lock = threading.Lock()

    def describe(self) -> dict[str, Any]:
        version = rapidocr_version()
        cfg = self.config
        return {
            "name": self.name,
            "engine": f"rapidocr {version}" if version else "rapidocr (not installed)",
            "min_text_score": cfg.min_text_score,
            "fuzzy_threshold": cfg.fuzzy_threshold,
            "max_side": cfg.max_side,
        }

    def _get_engine(self) -> Any:
        if self._engine is None:
            self._engine = build_engine(self.config.min_text_score)
        return self._engine

    def read(self, frame: np.ndarray) -> list[OcrLine]:
        """The text lines on an RGB frame, in frame pixels, top to bottom (blocking; seconds on a CPU)."""
        import cv2

        image = cv2.cvtColor(frame, cv2.COLOR_RGB2BGR)
        scale = 1.0
        longest = max(frame.shape[:2])
        if self.config.max_side and longest > self.config.max_side:
            scale = self.config.max_side / longest
            size = (max(1, round(frame.shape[1] * scale)), max(1, round(frame.shape[0] * scale)))
            image = cv2.resize(image, size, interpolation=cv2.INTER_AREA)
            scale = size[0] / frame.shape[1]
        with self._lock:
            engine = self._get_engine()
            result = engine(image, return_word_box=True, return_single_char_box=True)
        return lines_from_result(result, scale, self.config.min_text_score)

    async def decide(self, task: str, history: Sequence[HistoryEntry], observation: Observation, n: int = 1) -> Decision:
        parsed = parse_instruction(task)
        if parsed is None:
            action = Action(ActionKind.INFEASIBLE, text=f"{SUPPORTED}; got {task!r}")
            return Decision(action, raw_output=json.dumps({"task": task}, ensure_ascii=False))
        if _already_acted(history):
            note = f"already did {parsed.kind.value} on {parsed.label!r}"
            return Decision(Action(ActionKind.FINISH), info={"note": note})
        width, height = observation.size
        started = time.perf_counter()
        lines = await asyncio.to_thread(self.read, observation.frame)
        ocr_s = time.perf_counter() - started
        match = find_target(parsed.labels, lines, self.config.fuzzy_threshold, allow_lookalikes=False)
        info = {"ocr_s": round(ocr_s, 3), "lines": len(lines)}
        log.debug("OCR read %d lines in %.2f s; %r -> %r", len(lines), ocr_s, parsed.label, match and match.text)
        if match is None:
            return _absent(parsed.label, lines, self.config.fuzzy_threshold, (width, height), info)
        return Decision(
            Action(parsed.kind, point=_click_point(match.box, width, height)),
            raw_output=json.dumps(_summary(parsed.label, match), ensure_ascii=False),
            model_input_size=(width, height),
            target_box=_normalized_box(match.box, width, height),
            info=info,
        )


def _absent(label: str, lines: Sequence[OcrLine], fuzzy_threshold: float, size: tuple[int, int],
            info: dict[str, Any]) -> Decision:
    """The label is not on the screen: an ``infeasible`` decision naming the look-alike it refused, if any, and what
    it read."""
    quoted = json.dumps(label, ensure_ascii=False)
    near = find_target(label, lines, fuzzy_threshold)
    why = lookalike(near) if near is not None else None
    if near is not None and why is not None:
        text = f"could not find {quoted} on the screen, only a look-alike: {why}"
    else:
        text = f"could not find {quoted} on the screen (read: {_preview(lines)})"
    raw = {"label": label, "matched": None, "lookalike": near.line.text if why and near else None,
           "read": [line.text for line in lines]}
    return Decision(Action(ActionKind.INFEASIBLE, text=text), raw_output=json.dumps(raw, ensure_ascii=False),
                    model_input_size=size, info=info)


def _already_acted(history: Sequence[HistoryEntry]) -> bool:
    """Whether an earlier step executed a pointer action: a "click X" task is then done."""
    return any(e.executed and e.action is not None and e.action.kind in POINTER_KINDS for e in history)


def _summary(label: str, match: Match) -> dict[str, Any]:
    return {
        "label": label,
        "matched": match.text,
        "line": match.line.text,
        "tier": match.tier.name.lower(),
        "level": match.level.name.lower(),
        "ratio": round(match.ratio, 3),
        "score": round(match.line.score, 3),
        "box_px": [round(v, 1) for v in match.box.as_list()],
    }

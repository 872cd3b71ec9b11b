"""Verifiable rewards for GUI grounding: InfiGUI-G1 (AEPO) and GUI-R1.

Pure functions of (model response, ground truth); no torch. Each returns a
``RewardResult`` whose ``total`` is the scalar the trainer uses, whose ``parts``
are logged under their own names, and whose ``info`` carries diagnostics.

Two variants per reward:

- ``variant="code"`` (default) reproduces the released training code, quirks
  included (InfiGUI-G1 ``recipe/infigui-g1/reward_fn.py``; GUI-R1
  ``verl/utils/reward_score/r1gui.py``), as described in docs/algorithms.md,
  "AEPO: the adaptive exploration reward" and "GUI-R1: format and accuracy".
- ``variant="paper"`` follows the formula printed in the paper (the same
  sections give both and where they differ).

The names a training config gives these functions are in ``train.reward_registry``.

A response that does not parse is never an exception: every response text
scores a finite float, the format failure value when it does not parse, in time
that grows linearly with its length (quadratically with the number of points for
the collinear test). A response longer than ``MAX_OUTPUT_CHARS`` (the parsers'
limit) is a format failure; a number too large for a float is a number that
misses every target. Malformed *ground truth* is a caller bug and raises
``ValueError``.
"""

from __future__ import annotations

import ast
import decimal
import json
import math
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from envs.action_bench.metrics import token_f1
from policy.formats.base import MAX_OUTPUT_CHARS
from policy.formats.guir1_prompts import NO_INPUT, SCROLL_DIRECTIONS, TEXT_REQUIRED
from train.collinear import is_collinear

Variant = Literal["code", "paper"]
BoxXYXY = tuple[float, float, float, float]
"""A ground-truth box (x1, y1, x2, y2) in the coordinate space of the answer (model-input pixels, or the 0-1000
grid of relative-coordinate families)."""


@dataclass(frozen=True, slots=True)
class RewardResult:
    """One response's reward: the scalar, its named parts, and diagnostics."""

    total: float
    parts: dict[str, float]
    info: dict[str, Any] = field(default_factory=dict)


def _is_number(v: object) -> bool:
    """A finite number: any int (``math.isfinite`` cannot take one too large for a float), a finite float."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and (isinstance(v, int) or math.isfinite(v))


def _as_float(v: float) -> float:
    """``float(v)``, with an integer too large for a float as the infinity of its sign."""
    try:
        return float(v)
    except OverflowError:
        return math.inf if v > 0 else -math.inf


def _unreadable(response: object) -> str:
    """Why a response is not read at all ("" when it is): not text, or longer than the parsers read."""
    if not isinstance(response, str):
        return f"response is not text but {type(response).__name__}"
    if len(response) > MAX_OUTPUT_CHARS:
        return f"response of {len(response):,} characters is longer than the reward reads ({MAX_OUTPUT_CHARS:,})"
    return ""


def _check_variant(variant: str) -> None:
    if variant not in ("code", "paper"):
        raise ValueError(f"variant must be 'code' or 'paper', got {variant!r}")


# ---------------------------------------------------------------------------
# InfiGUI-G1 / AEPO
# ---------------------------------------------------------------------------

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def _think_gate(response: str) -> tuple[str | None, str]:
    """The answer after ``</think>``, or None and the reason the gate failed."""
    if not response.startswith(THINK_OPEN):
        return None, "response does not start with <think>"
    if response.count(THINK_OPEN) != 1 or response.count(THINK_CLOSE) != 1:
        return None, "need exactly one <think> and one </think>"
    thinking, _, answer = response[len(THINK_OPEN) :].partition(THINK_CLOSE)
    if not thinking.strip():
        return None, "empty thinking"
    if not answer.strip():
        return None, "nothing after </think>"
    return answer, ""


def _first_balanced_list(text: str) -> str | None:
    """Text from the first ``[`` to the ``]`` that closes it (plain bracket counting,
    as the released parser does; brackets inside JSON strings are not special)."""
    start = text.find("[")
    if start < 0:
        return None
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "[":
            depth += 1
        elif text[i] == "]":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
    return None


def _json_int(digits: str) -> int:
    """JSON's integers without ``int(str)``'s 4,300-digit limit (Decimal has none): 5,000 digits are a
    number too, one that misses every box."""
    try:
        return int(digits)
    except ValueError:
        return int(decimal.Decimal(digits))


def parse_point_list(answer: str) -> list[tuple[float, float]] | None:
    """The ``[{"point_2d": [x, y]}, ...]`` list in ``answer``, or None if malformed.

    Every item must be a dict with a ``point_2d`` of exactly two finite numbers
    (integers of any size are finite; JSON's ``1e999`` is not); one bad item
    rejects the whole list (the reward parser is all-or-nothing).
    """
    snippet = _first_balanced_list(answer)
    if snippet is None:
        return None
    try:
        data = json.loads(snippet, parse_int=_json_int)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, list):
        return None
    points: list[tuple[float, float]] = []
    for item in data:
        if not isinstance(item, dict):
            return None
        p = item.get("point_2d")
        if not isinstance(p, list) or len(p) != 2 or not all(_is_number(v) for v in p):
            return None
        points.append((p[0], p[1]))
    return points


def _gated_points(response: str, think: bool) -> tuple[list[tuple[float, float]] | None, str]:
    """The answer's points after the think gate (when ``think``), or None and why not."""
    if reason := _unreadable(response):
        return None, reason
    answer = response
    if think:
        answer, reason = _think_gate(response)
        if answer is None:
            return None, reason
    points = parse_point_list(answer)
    if points is None:
        return None, "no valid point list: need [{\"point_2d\": [x, y]}, ...]"
    return points, ""


def _check_box(box: Sequence[float]) -> BoxXYXY:
    if len(box) != 4 or not all(_is_number(v) for v in box):
        raise ValueError(f"ground-truth box must be 4 finite numbers (x1, y1, x2, y2), got {box!r}")
    x1, y1, x2, y2 = box
    if x1 > x2 or y1 > y2:
        raise ValueError(f"ground-truth box needs x1 <= x2 and y1 <= y2, got {box!r}; pass corners in that order")
    return (x1, y1, x2, y2)


def aepo_reward(
    response: str,
    box: BoxXYXY | None,
    *,
    think: bool = True,
    variant: Variant = "code",
    collinear_penalty: bool = True,
) -> RewardResult:
    """Adaptive Exploration Reward of InfiGUI-G1 for one response.

    ``box`` is the target's (x1, y1, x2, y2) in the pixel space of the image the
    model saw, or None for a negative sample (the target is not on screen).
    ``think=False`` is the dataset's ``no_think`` mode: no tag gate, the whole
    response is the answer.

    With N points and k the 1-based rank of the first point inside the box
    (inclusive edges), parts are ``format`` (R_fmt) and ``accuracy`` (R_acc),
    and ``total = format + accuracy`` in both variants:

    ===============================  ================  ==================
    case                             code              paper
    ===============================  ================  ==================
    think gate / parse failure       0 + -1 = -1       0 + -1 = -1
    N >= 3 with a collinear triple   0 + -1 = -1       1 + -1 = 0
    hit at rank k                    1 + 1/sqrt(N k)   same, (1, 2]
    miss                             1 - 1/N           same, [0, 1)
    empty list, target present       1 + -1 = 0        same
    empty list, negative sample      1 + 1 = 2         same
    any point, negative sample       1 - 1/N (miss)    same
    ===============================  ================  ==================

    ``collinear_penalty=False`` is the paper's ablation: a collinear list is scored like any other, which lets
    a policy list ever more points. The collinear test is then not run at all (it is the reward's only
    super-linear step) and ``info["is_collinear"]`` is None: not tested.

    The paper leaves R_acc undefined when the answer does not parse; we use -1
    there too (the released value), so a malformed answer is never better than a
    collinear one. For negatives, "nothing is there" spends no proposals and no
    verification: it is the cheapest possible success, and the best hit on a
    positive sample (N = k = 1) scores 1 + 1/sqrt(1) = 2, so a correct
    abstention gets exactly that maximum -- abstaining is never worth more than
    finding the target, and never less.
    """
    _check_variant(variant)
    negative = box is None
    gt = None if negative else _check_box(box)
    info: dict[str, Any] = {
        "num_pred": 0,
        "has_correct": False,
        "first_correct": False,
        "rank": None,
        "is_collinear": False,
        "negative": negative,
        "format_ok": False,
        "error": "",
    }

    def fail(reason: str) -> RewardResult:
        info["error"] = reason
        return RewardResult(-1.0, {"format": 0.0, "accuracy": -1.0}, info)

    points, reason = _gated_points(response, think)
    if points is None:
        return fail(reason)
    n = len(points)
    info["num_pred"] = n

    info["is_collinear"] = is_collinear(points) if collinear_penalty else None
    if info["is_collinear"]:
        info["format_ok"] = variant == "paper"
        fmt = 1.0 if variant == "paper" else 0.0
        return RewardResult(fmt - 1.0, {"format": fmt, "accuracy": -1.0}, info)
    info["format_ok"] = True

    if n == 0:
        acc = 1.0 if negative else -1.0
        info["has_correct"] = info["first_correct"] = negative
        return RewardResult(1.0 + acc, {"format": 1.0, "accuracy": acc}, info)

    rank = None
    if gt is not None:
        x1, y1, x2, y2 = gt
        rank = next((i for i, (x, y) in enumerate(points, 1) if x1 <= x <= x2 and y1 <= y <= y2), None)
    if rank is None:
        acc = -1.0 / n
    else:
        acc = 1.0 / math.sqrt(n * rank)
        info.update(has_correct=True, first_correct=rank == 1, rank=rank)
    return RewardResult(1.0 + acc, {"format": 1.0, "accuracy": acc}, info)


# ---------------------------------------------------------------------------
# GUI-R1
# ---------------------------------------------------------------------------

_SPACES = re.compile(r"\s*")
# Released regexes: \w+ so 'close/delete' never matches; \d+ so negative points never match (and, as
# released, \d also reads other scripts' digits such as '٣').
_ACTION_RE = {"code": re.compile(r"'action':\s*'(\w+)'"), "paper": re.compile(r"'action':\s*'([^']+)'")}
_TEXT_RE = re.compile(r"'input_text':\s*'(.*?)'")
_POINT_RE = {
    "code": re.compile(r"\[\s*(\d+)\s*,\s*(\d+)\s*\]"),
    "paper": re.compile(r"\[\s*(-?\d+)\s*,\s*(-?\d+)\s*\]"),
}
# GUI-R1's names are its format's (policy.formats.guir1_prompts); which of them the released reward compares by text
# is the reward's own choice.
NEEDS_TEXT = frozenset(TEXT_REQUIRED) - {"scroll"}  # R_f: the default input text fails these (scroll: a direction)
F1_ACTIONS = frozenset({"type", "select", "scroll"})  # released accuracy: text compared by F1
PAPER_TEXT_ACTIONS = F1_ACTIONS | {"open_app"}
CLICK_RADIUS_PX = 140.0


def _answer_text(response: str) -> str | None:
    """What the released ``<answer>(.*?)</answer>`` search finds: from the first ``<answer>`` to the
    first ``</answer>`` after it (if the first has none, no later one has)."""
    start = response.find("<answer>")
    if start < 0:
        return None
    end = response.find("</answer>", start + len("<answer>"))
    return None if end < 0 else response[start + len("<answer>"):end]


def _tags_ok(response: str) -> bool:
    """Whether the released format regex ``<think>.*?</think>\\s*<answer>.*?</answer>`` (DOTALL) matches
    the whole response, decided in one pass instead of by backtracking (which took seconds on 100 KiB):
    it does when some ``</think>`` after the opening tag is followed by spaces and ``<answer>``, and that
    ``<answer>`` ends before the closing ``</answer>``; the first such ``</think>`` is the best one."""
    if not (response.startswith("<think>") and response.endswith("</answer>")):
        return False
    last = len(response) - len("</answer>")
    pos = len("<think>")
    while (close := response.find("</think>", pos)) >= 0:
        pos = close + len("</think>")  # "</think>" cannot overlap itself
        start = _SPACES.match(response, pos).end()  # type: ignore[union-attr]  # \s* always matches
        if response.startswith("<answer>", start):
            return start + len("<answer>") <= last
    return False


def read_literal(answer: str) -> Any:
    """``ast.literal_eval`` without the warnings compiling prints (invalid escapes such as ``'\\d'``,
    "perhaps you missed a comma?"): a model's text is data, and training logs are not for its typos. Raises what
    ``ast.literal_eval`` raises; callers bound the text's length first (``MAX_OUTPUT_CHARS``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.literal_eval(answer)


def guir1_format_ok(response: str) -> tuple[bool, str]:
    """R_f of GUI-R1: tags, a literal list of action dicts, and per-action text rules."""
    if reason := _unreadable(response):
        return False, reason
    if not _tags_ok(response):
        return False, "not <think>...</think> <answer>...</answer>"
    answer = _answer_text(response) or ""
    try:
        data = read_literal(answer.strip())
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, "answer is not a Python literal"
    if not isinstance(data, list) or not data:
        return False, "answer is not a non-empty list"
    for item in data:
        if not isinstance(item, dict) or not {"action", "point", "input_text"} <= item.keys():
            return False, "item lacks action/point/input_text"
        action, point, text = item["action"], item["point"], item["input_text"]
        if not isinstance(action, str) or not isinstance(text, str):
            return False, "action and input_text must be strings"
        if not isinstance(point, (list, tuple)) or len(point) != 2:
            return False, "point must be [x, y]"
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in point):
            return False, "point coordinates must be integers"
        if action in NEEDS_TEXT and text == NO_INPUT:
            return False, f"{action} needs input text"
        if action == "scroll" and text not in SCROLL_DIRECTIONS:
            return False, "scroll needs a direction (up/down/left/right)"
    return True, ""


def _pixel(digits: str) -> float:
    """A coordinate the released point regex read: its int, or the infinity of its sign past 300 digits
    (``int()`` stops at 4,300 and a float at about 308; either way it misses every target)."""
    negative, body = digits.startswith("-"), digits.lstrip("-").lstrip("0") or "0"
    if len(body) > 300:
        return -math.inf if negative else math.inf
    return -int(body) if negative else int(body)  # zeros stripped first: they count toward int()'s limit


def _point_hits(point: tuple[float, float], gt: Sequence[float]) -> tuple[bool, float | None]:
    """Released click test: 2 numbers = point, hit if distance < 140 px; 4 = box, hit if strictly inside."""
    x, y = point
    if len(gt) == 2:
        dist = math.hypot(x - gt[0], y - gt[1])
        return dist < CLICK_RADIUS_PX, dist
    x1, y1, x2, y2 = gt
    return (x1 < x < x2 and y1 < y < y2), None


def guir1_reward(
    response: str,
    gt_action: str,
    gt_box_or_point: Sequence[float] | None,
    gt_text: str | None,
    *,
    variant: Variant = "code",
    alpha: float = 0.2,
    beta: float = 0.8,
) -> RewardResult:
    """GUI-R1 reward for one response.

    ``gt_box_or_point`` is [x, y] or [x1, y1, x2, y2] in the resized training
    image's pixels, or None when the action has no location. A negative sample
    (the task cannot be done here) is ``gt_action="impossible"`` with no
    location; it is rewarded like any location-free action, on the action
    name alone.

    code: ``total = 0.8 * accuracy + 0.2 * format``, both in {0, 1}; accuracy is
    gated on the action name (read by regex, so names with '/' never match and
    negative points fall back to [0, 0]); click needs the point hit; type /
    select / scroll need token F1 >= 0.5; any other action scores on the name.
    ``alpha``/``beta`` are ignored (fixed at 0.2/0.8, as released).

    paper: ``total = alpha * R_f + beta * (R_act + R_point + R_text)``, each term
    in {0, 1}, summed, not gated. A term that does not apply to the ground truth
    (no location; not a text action or no gt_text) copies R_act, so every
    correct answer scores alpha + 3 beta whatever its action. The paper variant
    reads action names containing '/' and negative coordinates.
    """
    _check_variant(variant)
    gt_action = gt_action.lower()
    if gt_box_or_point is not None:
        if len(gt_box_or_point) not in (2, 4) or not all(_is_number(v) for v in gt_box_or_point):
            raise ValueError(f"gt_box_or_point must be [x, y] or [x1, y1, x2, y2], got {gt_box_or_point!r}")
    if gt_action == "click" and gt_box_or_point is None:
        raise ValueError("a click ground truth needs gt_box_or_point; got None")
    if gt_action in F1_ACTIONS and gt_text is None:
        raise ValueError(f"a {gt_action!r} ground truth needs gt_text; got None")

    fmt_ok, fmt_error = guir1_format_ok(response)
    fmt = 1.0 if fmt_ok else 0.0
    source = "" if _unreadable(response) else _answer_text(response)
    source = response if source is None else source
    m = _ACTION_RE[variant].search(source)
    pred_action = m.group(1).lower() if m else None
    m = _TEXT_RE.search(source)
    pred_text = m.group(1) if m else ""
    m = _POINT_RE[variant].search(source)
    pred_point = (_pixel(m.group(1)), _pixel(m.group(2))) if m else (0, 0)

    action_ok = pred_action == gt_action
    info: dict[str, Any] = {
        "pred_action": pred_action,
        "pred_point": pred_point,
        "pred_text": pred_text,
        "format_ok": fmt_ok,
        "error": fmt_error,
        "f1": None,
        "distance": None,
    }

    if variant == "code":
        acc = 0.0
        if action_ok:
            if gt_action == "click":
                hit, info["distance"] = _point_hits(pred_point, gt_box_or_point)
                acc = float(hit)
            elif gt_action in F1_ACTIONS:
                info["f1"] = token_f1(pred_text, gt_text)
                acc = float(info["f1"] >= 0.5)
            else:
                acc = 1.0
        return RewardResult(0.8 * acc + 0.2 * fmt, {"format": fmt, "accuracy": acc}, info)

    r_act = float(action_ok)
    if gt_box_or_point is not None:
        hit, info["distance"] = _point_hits(pred_point, gt_box_or_point)
        r_point = float(hit)
    else:
        r_point = r_act
    if gt_action in PAPER_TEXT_ACTIONS and gt_text is not None:
        info["f1"] = token_f1(pred_text, gt_text)
        r_text = float(info["f1"] >= 0.5)
    else:
        r_text = r_act
    total = alpha * fmt + beta * (r_act + r_point + r_text)
    return RewardResult(total, {"format": fmt, "action": r_act, "point": r_point, "text": r_text}, info)


# ---------------------------------------------------------------------------
# Distance reward: partial credit near the box (a curriculum reward; no paper)
# ---------------------------------------------------------------------------


def distance_to_box(x: float, y: float, box: Sequence[float]) -> float:
    """Euclidean distance from (x, y) to the nearest point of ``box`` (0 inside it, edges included)."""
    x1, y1, x2, y2 = box
    dx = max(x1 - x, 0.0, x - x2)
    dy = max(y1 - y, 0.0, y - y2)
    return math.hypot(dx, dy)


def distance_reward(
    response: str,
    box: BoxXYXY | None,
    *,
    threshold: float,
    image_size: tuple[int, int],
    think: bool = True,
) -> RewardResult:
    """Partial credit by how far the first predicted point lands from the box.

    The response is read as InfiGUI-G1's answer (think gate unless ``think=False``, then the
    ``[{"point_2d": [x, y]}, ...]`` list); only the first point is scored. With ``d`` the distance
    from that point to the box in model-input pixels and ``D`` the diagonal of the ``image_size``
    (w', h') image, the normalised distance is ``d / D`` and

    - ``accuracy = 1`` inside the box (edges included),
    - ``accuracy = max(0, 1 - (d / D) / threshold)`` outside it (``threshold = 0``: only a hit counts),
    - ``format = 1`` when the answer parses, and ``total = format + accuracy`` in [0, 2].

    A format failure scores 0 (format 0, accuracy 0). An empty list scores accuracy 0, except on a
    negative sample (``box`` None), where it is the right answer (accuracy 1) and any point is wrong
    (accuracy 0). A curriculum tightens ``threshold`` over training (``train.curriculum``).
    """
    if not _is_number(threshold) or threshold < 0:
        raise ValueError(f"threshold must be a finite number >= 0 (a share of the image diagonal), got {threshold!r}")
    if len(image_size) != 2 or not all(_is_number(v) and v > 0 for v in image_size):
        raise ValueError(f"image_size must be (w, h) with positive sides, got {image_size!r}")
    negative = box is None
    gt = None if negative else _check_box(box)
    info: dict[str, Any] = {
        "num_pred": 0,
        "has_correct": False,
        "distance_px": None,
        "distance": None,
        "threshold": float(threshold),
        "negative": negative,
        "format_ok": False,
        "error": "",
    }

    def fail(reason: str) -> RewardResult:
        info["error"] = reason
        return RewardResult(0.0, {"format": 0.0, "accuracy": 0.0}, info)

    points, reason = _gated_points(response, think)
    if points is None:
        return fail(reason)
    info["num_pred"] = len(points)
    info["format_ok"] = True

    if gt is None or not points:
        acc = 1.0 if negative and not points else 0.0
        info["has_correct"] = acc == 1.0
        return RewardResult(1.0 + acc, {"format": 1.0, "accuracy": acc}, info)

    x, y = _as_float(points[0][0]), _as_float(points[0][1])
    d = distance_to_box(x, y, gt)
    d_norm = d / math.hypot(image_size[0], image_size[1])
    info.update(distance_px=d, distance=d_norm)
    if d == 0.0:
        acc = 1.0
        info["has_correct"] = True
    elif threshold == 0:
        acc = 0.0
    else:
        acc = max(0.0, 1.0 - d_norm / threshold)
    return RewardResult(1.0 + acc, {"format": 1.0, "accuracy": acc}, info)

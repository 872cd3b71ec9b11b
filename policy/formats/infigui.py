"""InfiGUI-G1 (InfiX-ai/InfiGUI-G1-3B / -7B; arXiv 2508.05731): prompt and parsers (docs/coordinates.md).

Single-step grounding. Prompt (eval/prompts.py):

- system, ``think`` variant: "You FIRST think about the reasoning process as an internal monologue
  and then provide the final answer.\\nThe reasoning process MUST BE enclosed within <think>
  </think> tags." (``no_think``: no system message, the chat template's default applies);
- user: the screenshot, then ``The screen's resolution is {w'}x{h'}.`` newline
  ``Locate the UI element(s) for "{instruction}", output the coordinates using JSON format:
  [{"point_2d": [x, y]}, ...]``.

Output: ``<think>...</think>`` then a JSON list of ``{"point_2d": [x, y]}`` in absolute pixels of
the w' x h' image, most preferred first.

``InfiGuiG1Format.parse`` is the execution parser (what a device acts on): the text after the
last ``</think>`` (all of it when there is none), the JSON list from the first ``[`` to its
closing bracket, every item validated (an object with a two-number ``point_2d`` inside the image)
and kept as a click candidate in order; the first is executed. No think gate, trailing chatter
ignored, a list cut off mid-item keeps its complete items. An empty list ``[]`` is the model's way of
saying "the target is not on this screen" (the negative samples it was trained on, where the released
reward gives ``[]`` its best score): it parses to one ``infeasible`` action (``EMPTY_LIST_REASON``),
which an episode executes as the end of the task and every evaluation scores as an abstention. ``strict_parse`` is
the reward parser of the released recipe (think gate, then every item must be valid), for training; the format's
``strict_parse`` method applies it (with the preset's think gate) before the execution parser, which is what the
online step reward reads.

What SFT writes: a recorded step's location as a one-point list (``render_answer``; InfiGUI-G1 is grounding only,
so only steps that went to an element have one), a grounding target's point, or ``[]`` when the target is absent
(``render_target``), each after a short think block in the ``think`` variant.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from devices.actions import Action, ActionKind
from policy.base import HistoryEntry
from policy.coords import ModelSpace
from policy.errors import FormatParseError
from policy.formats.base import (AnswerForm, ModelFormat, Parsed, Prompt, check_output, grounding_point, make_action,
                                 model_point, shown)
from policy.formats.jsonscan import scan_json_list
from policy.presets import ModelPreset

__all__ = ["EMPTY_LIST_REASON", "InfiGuiG1Format", "SYSTEM_THINK", "USER_TEMPLATE", "strict_parse", "split_think"]

SYSTEM_THINK = (
    "You FIRST think about the reasoning process as an internal monologue and then provide the final answer.\n"
    "The reasoning process MUST BE enclosed within <think> </think> tags."
)
USER_TEMPLATE = (
    "The screen's resolution is {width}x{height}.\n"
    'Locate the UI element(s) for "{instruction}", output the coordinates using JSON format: '
    '[{{"point_2d": [x, y]}}, ...]'
)

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
EMPTY_LIST_REASON = "the model listed no point: the target is not on the screen"


def split_think(text: str) -> tuple[str | None, int]:
    """(the think text or None, offset where the answer starts): the answer is everything after the
    last ``</think>``; the thought is what precedes it, from the last ``<think>`` before it."""
    close = text.rfind(THINK_CLOSE)
    if close < 0:
        return None, 0
    open_ = text.rfind(THINK_OPEN, 0, close)
    thought = text[open_ + len(THINK_OPEN) if open_ >= 0 else 0:close].strip()
    return thought, close + len(THINK_CLOSE)


def strict_parse(text: str, think: bool = True) -> list[tuple[float, float]]:
    """The released reward parser's acceptance rule (recipe/infigui-g1/reward_fn.py), as model-space
    points; a FormatParseError where the reward would be -1.

    With ``think``: the output must start with ``<think>``, hold exactly one ``<think>`` and one
    ``</think>``, with non-empty thinking and a non-empty answer after ``</think>``. Then the
    answer from the first ``[`` to its bracket-balanced ``]`` must decode to a list whose every
    item is an object whose ``point_2d`` is a list of two numbers. An empty list is valid (N = 0).
    An integer too large for a float is, like JSON's ``1e999``, a number to this parser: it comes
    back as an infinity, which no hit test accepts.
    """
    text = check_output(text)
    offset = 0
    if think:
        if not text.startswith(THINK_OPEN):
            raise FormatParseError("the output must start with <think>", text, 0)
        if text.count(THINK_OPEN) != 1 or text.count(THINK_CLOSE) != 1:
            second = text.find(THINK_OPEN, 1) if text.count(THINK_OPEN) != 1 else text.find(THINK_CLOSE)
            raise FormatParseError(f"the output must hold exactly one <think> and one </think>, found "
                                   f"{text.count(THINK_OPEN)} and {text.count(THINK_CLOSE)}", text, max(second, 0))
        close = text.index(THINK_CLOSE)
        if close < len(THINK_OPEN) or not text[len(THINK_OPEN):close].strip():
            raise FormatParseError("the <think> block is empty", text, len(THINK_OPEN))
        offset = close + len(THINK_CLOSE)
        if not text[offset:].strip():
            raise FormatParseError("nothing after </think>: the answer is missing", text, offset)
    start = text.find("[", offset)
    if start < 0:
        raise FormatParseError("no '[' in the answer: expected [{\"point_2d\": [x, y]}, ...]", text, offset)
    depth, end = 0, -1
    for i in range(start, len(text)):
        if text[i] == "[":
            depth += 1
        elif text[i] == "]":
            depth -= 1
            if depth == 0:
                end = i + 1
                break
    if end < 0:
        raise FormatParseError("the JSON list from the first '[' is never closed", text, start)
    try:
        value = json.loads(text[start:end])
    except json.JSONDecodeError as exc:
        raise FormatParseError(f"the answer list is not valid JSON: {exc.msg}", text, start + exc.pos) from None
    except (ValueError, RecursionError) as exc:  # digit limit, nesting depth
        raise FormatParseError(f"the answer list is not valid JSON: {exc}", text, start) from None
    if not isinstance(value, list):  # pragma: no cover - a bracketed JSON value is always a list
        raise FormatParseError("the answer is not a JSON list", text, start)
    points: list[tuple[float, float]] = []
    for i, item in enumerate(value):
        p = item.get("point_2d") if isinstance(item, dict) else None
        if not (isinstance(p, list) and len(p) == 2
                and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in p)):
            raise FormatParseError(f"item {i} is not {{\"point_2d\": [x, y]}} with two numbers: "
                                   f"{shown(item, as_json=True)}", text, start)
        points.append((_float(p[0]), _float(p[1])))
    return points


def _float(value: int | float) -> float:
    """``float(value)``, with an integer too large for a float as the infinity of its sign."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf  # copysign would convert value to a float


class InfiGuiG1Format(ModelFormat):
    """InfiGUI-G1's grounding prompt and its execution parser (see the module docstring)."""

    family = "infigui-g1"
    variants = ("think", "no_think")
    no_think_variant = "no_think"

    def answer_form(self, preset: ModelPreset) -> AnswerForm:
        return AnswerForm.POINT_LIST

    def thinks(self, preset: ModelPreset) -> bool:
        return preset.variant != self.no_think_variant

    def grounding_only(self, preset: ModelPreset) -> bool:
        return True

    def strict_parse(
        self, text: str, space: ModelSpace, preset: ModelPreset, history: Sequence[HistoryEntry] | None = None
    ) -> Parsed:
        """The released reward parser's rule (``strict_parse``, with the think gate of the preset's variant), then
        the execution parser."""
        strict_parse(text, think=self.thinks(preset))
        return self.parse(text, space, preset, history=history)

    def render_answer(self, action: Action, space: ModelSpace, preset: ModelPreset, *, instruction: str = "",
                      box: Sequence[float] | None = None) -> str:
        x, y = space.from_point(grounding_point(action, box))
        answer = json.dumps([{"point_2d": [round(x), round(y)]}])
        if not self.thinks(preset):
            return answer
        return f"<think>The element for \"{instruction}\" is at this point.</think>\n{answer}"

    def render_target(self, point: tuple[float, float] | None, *, instruction: str, action: str | None = None,
                      text: str | None = None, think: bool = True) -> str:
        """The point as a one-point list, ``[]`` when the target is absent (what the reward scores best on a
        negative sample); ``action`` and ``text`` do not enter a location."""
        answer = "[]" if point is None else json.dumps([{"point_2d": [round(point[0]), round(point[1])]}])
        if not think:
            return answer
        what = "is not on the screen" if point is None else "is at this point"
        return f"<think>The element for \"{instruction}\" {what}.</think>\n{answer}"

    def build_prompt(
        self, task: str, history: Sequence[HistoryEntry], space: ModelSpace, preset: ModelPreset
    ) -> Prompt:
        """Single-step: the history is not shown (the model was trained on one screen, one instruction)."""
        variant = preset.variant or "think"
        if variant not in self.variants:
            raise ValueError(f"infigui-g1 has no prompt variant {variant!r}; use think or no_think")
        w, h = space.input_size
        messages: list[dict[str, Any]] = []
        if variant == "think":
            messages.append({"role": "system", "content": [{"type": "text", "text": SYSTEM_THINK}]})
        messages.append({"role": "user", "content": [
            {"type": "image", "image": "current"},
            {"type": "text", "text": USER_TEMPLATE.format(width=w, height=h, instruction=task)},
        ]})
        return Prompt(messages)

    def parse(
        self, text: str, space: ModelSpace, preset: ModelPreset, history: Sequence[HistoryEntry] | None = None
    ) -> Parsed:
        text = check_output(text)
        thought, offset = split_think(text)
        start = text.find("[", offset)
        if start < 0:
            where = "after </think>" if thought is not None else "in the output"
            raise FormatParseError(f"no JSON list {where}: expected [{{\"point_2d\": [x, y]}}, ...]", text, offset)
        scan = scan_json_list(text, start)
        if not scan.items:  # a cut-off list with no complete item is a FormatParseError of the scanner
            action = make_action(text, start, kind=ActionKind.INFEASIBLE, text=EMPTY_LIST_REASON)
            return Parsed((action,), (), thought, {"candidates": 0, "truncated": False, "abstained": True})
        actions, points = [], []
        for i, (pos, item) in enumerate(scan.items):
            if not isinstance(item, dict) or "point_2d" not in item:
                raise FormatParseError(f"item {i} must be an object with point_2d, got "
                                       f"{shown(item, as_json=True)}", text, pos)
            mp, point = model_point(space, item["point_2d"], f"item {i} point_2d", text, pos)
            points.append(mp)
            actions.append(make_action(text, pos, kind=ActionKind.CLICK, point=point))
        return Parsed(tuple(actions), tuple(points), thought,
                      {"candidates": len(actions), "truncated": scan.truncated})

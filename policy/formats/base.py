"""What a model family is to handeye: a prompt builder and an output parser.

Prompts are chat messages in the OpenAI / transformers form: ``{"role": ..., "content": [...]}``
with parts ``{"type": "text", "text": ...}`` and ``{"type": "image", "image": ref}``, where ``ref``
is ``"current"`` for the screenshot being decided on, or the index of a history step whose
screenshot the family wants to see again. Backends resolve those references to pixels, resized to
the preset's model-input size.

A parser turns the model's text into unified actions in frame space, or raises FormatParseError
saying what was wrong and where. Candidate actions come in the model's order; the first is the one
executed.

Every parser is total: for any ``str`` it returns actions whose points lie inside [0, 1] or raises
its FormatParseError, never another exception, and its work grows linearly with the text. It reads
at most ``MAX_OUTPUT_CHARS`` characters (``check_output``): a longer output is a parse error, since
no model answer in these grammars comes near it (the presets' token limits are 512-1024 tokens) and
a bound keeps a runaway generation from costing more than its own length to reject. Messages quote
values with ``shown``, which cannot fail on numbers too long for ``str``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from devices.actions import Action, Point
from devices.errors import InvalidAction
from policy.base import HistoryEntry
from policy.coords import ModelSpace, coordinate, number_text
from policy.errors import CoordinateError, FormatParseError
from policy.formats.jsonscan import is_number
from policy.presets import ModelPreset


@dataclass(frozen=True, slots=True)
class Prompt:
    messages: list[dict[str, Any]]
    """Chat messages; image parts carry a reference ("current" or a history index)."""


@dataclass(frozen=True, slots=True)
class Parsed:
    """A parsed model output."""

    actions: tuple[Action, ...]
    """Unified actions in frame space, in the model's order; ``actions[0]`` is executed."""
    model_points: tuple[tuple[float, float], ...] = ()
    """The points as the model wrote them (model space), in the order of ``actions``' points."""
    thought: str | None = None
    """The model's reasoning text (think block, Thought: line), when it wrote one."""
    info: dict[str, Any] = field(default_factory=dict)


class ModelFormat(Protocol):
    """One model family's prompt builder and parser."""

    family: str

    def build_prompt(
        self, task: str, history: Sequence[HistoryEntry], space: ModelSpace, preset: ModelPreset
    ) -> Prompt: ...

    def parse(
        self, text: str, space: ModelSpace, preset: ModelPreset, history: Sequence[HistoryEntry] | None = None
    ) -> Parsed:
        """``history`` is the episode so far, for grammars whose actions depend on it (Qwen2.5-VL's
        ``left_click_drag`` starts at the cursor); families that do not need it ignore it."""
        ...


# -- helpers for parsers ----------------------------------------------------------------------------

MAX_OUTPUT_CHARS = 65_536
"""The longest model output a parser reads (64 Ki characters; see the module docstring)."""


def check_output(text: object) -> str:
    """``text`` when it is a string a parser reads; FormatParseError when it is not text or is longer
    than ``MAX_OUTPUT_CHARS``."""
    if not isinstance(text, str):
        raise FormatParseError(f"model output must be text, got {type(text).__name__}")
    if len(text) > MAX_OUTPUT_CHARS:
        raise FormatParseError(f"output of {len(text):,} characters is longer than the parser reads "
                               f"({MAX_OUTPUT_CHARS:,}); the model ran on far past any answer of its grammar")
    return text


def shown(value: Any, limit: int = 80, *, as_json: bool = False) -> str:
    """``repr(value)`` (``as_json``: the JSON text, for values a model wrote as JSON) cut to about
    ``limit`` characters, for messages. Integers too long for ``repr`` (over 4,300 digits) are written
    as ``number_text`` does, inside lists, tuples and dicts too; nesting too deep for ``repr`` is cut."""
    try:
        text = json.dumps(value, ensure_ascii=False) if as_json else repr(value)
    except (ValueError, TypeError, RecursionError):  # a huge integer or a deep nest somewhere inside
        text = _safe_repr(value, limit)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _safe_repr(value: Any, budget: int, depth: int = 0) -> str:
    """repr that writes huge integers as ``number_text`` does; stops after ``budget`` characters
    (and 20 levels of nesting), so it costs at most what the message shows."""
    if isinstance(value, int) and not isinstance(value, bool):
        return number_text(value)
    if isinstance(value, (list, tuple, dict)) and depth < 20:
        opening, closing = {list: "[]", tuple: "()", dict: "{}"}.get(type(value), "[]")
        items = value.items() if isinstance(value, dict) else value
        parts: list[str] = []
        used = 0
        for item in items:
            if used > budget:
                parts.append("...")
                break
            if isinstance(value, dict):
                part = f"{_safe_repr(item[0], budget, depth + 1)}: {_safe_repr(item[1], budget, depth + 1)}"
            else:
                part = _safe_repr(item, budget, depth + 1)
            parts.append(part)
            used += len(part) + 2
        return opening + ", ".join(parts) + closing
    try:
        return repr(value)[:budget]
    except (ValueError, RecursionError):
        return f"<{type(value).__name__}>"


def as_float(value: Any, what: str, text: str, pos: int) -> float:
    """A decoded number (not a boolean) as a float; FormatParseError at ``pos`` when ``value`` is not a
    number or is an integer too large for a float."""
    if not is_number(value):
        raise FormatParseError(f"{what} must be a number, got {shown(value, as_json=True)}", text, pos)
    try:
        return float(value)
    except OverflowError:
        raise FormatParseError(f"{what} {number_text(value)} is not a number a screen can have", text, pos) from None


def model_point(space: ModelSpace, value: Any, what: str, text: str, pos: int) -> tuple[tuple[float, float], Point]:
    """Validate ``value`` (a decoded JSON value) as an [x, y] model-space point and map it to the frame.

    Returns ((x', y') as floats, normalized Point). Every problem is a FormatParseError (a
    CoordinateError when the point lies outside the model image) at ``pos``.
    """
    if not isinstance(value, (list, tuple)) or len(value) != 2 or not all(is_number(v) for v in value):
        raise FormatParseError(f"{what} must be [x, y] with two numbers, got {shown(value, as_json=True)}", text, pos)
    try:
        x, y = coordinate(value[0]), coordinate(value[1])
        point = space.to_point(x, y)
    except CoordinateError as exc:
        raise CoordinateError(f"{what}: {exc}", text, pos) from None
    if point is None:
        raise CoordinateError(f"{what} [{x:g}, {y:g}] is the no-target sentinel, not a location", text, pos)
    return (x, y), point


def make_action(source: str, pos: int, /, **fields: Any) -> Action:
    """An Action from ``fields``, with InvalidAction turned into a FormatParseError at ``pos`` of
    the model output ``source``."""
    try:
        return Action(**fields)
    except InvalidAction as exc:
        raise FormatParseError(f"not a valid action: {exc}", source, pos) from None

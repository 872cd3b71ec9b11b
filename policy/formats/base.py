"""What a model family is to handeye: a prompt builder and an output parser.

Prompts are chat messages in the OpenAI / transformers form: ``{"role": ..., "content": [...]}``
with parts ``{"type": "text", "text": ...}`` and ``{"type": "image", "image": ref}``, where ``ref``
is ``"current"`` for the screenshot being decided on, or the index of a history step whose
screenshot the family wants to see again. Backends resolve those references to pixels, resized to
the preset's model-input size.

A parser turns the model's text into unified actions in frame space, or raises FormatParseError
saying what was wrong and where. Candidate actions come in the model's order; the first is the one
executed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from devices.actions import Action, Point
from devices.errors import InvalidAction
from policy.base import HistoryEntry
from policy.coords import ModelSpace
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

def model_point(space: ModelSpace, value: Any, what: str, text: str, pos: int) -> tuple[tuple[float, float], Point]:
    """Validate ``value`` (a decoded JSON value) as an [x, y] model-space point and map it to the frame.

    Returns ((x', y') as floats, normalized Point). Every problem is a FormatParseError (a
    CoordinateError when the point lies outside the model image) at ``pos``.
    """
    if not isinstance(value, (list, tuple)) or len(value) != 2 or not all(is_number(v) for v in value):
        shown = json.dumps(value, ensure_ascii=False)[:80]
        raise FormatParseError(f"{what} must be [x, y] with two numbers, got {shown}", text, pos)
    x, y = float(value[0]), float(value[1])
    try:
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

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

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from devices.actions import Action
from policy.base import HistoryEntry
from policy.coords import ModelSpace
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

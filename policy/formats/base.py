"""What a model family is to handeye: its prompt builder, its output parser, and everything else that knows its
grammar (the answer SFT teaches, the reward's format check, the architecture a backend must load).

Prompts are chat messages in the OpenAI / transformers form: ``{"role": ..., "content": [...]}``
with parts ``{"type": "text", "text": ...}`` and ``{"type": "image", "image": ref}``, where ``ref``
is ``"current"`` for the screenshot being decided on, or the index of a history step whose
screenshot the family wants to see again. Backends resolve those references to pixels, resized to
the preset's model-input size.

A parser turns the model's text into unified actions in frame space, or raises FormatParseError
saying what was wrong and where. Candidate actions come in the model's order; the first is the one
executed. A parser keeps no state between calls: whatever it needs of the episode (a cursor left by
an earlier step) it reads from the ``history`` it is given, so one format instance serves every
episode at once.

Every parser is total: for any ``str`` it returns actions whose points lie inside [0, 1] or raises
its FormatParseError, never another exception, and its work grows linearly with the text. It reads
at most ``MAX_OUTPUT_CHARS`` characters (``check_output``): a longer output is a parse error, since
no model answer in these grammars comes near it (the presets' token limits are 512-1024 tokens) and
a bound keeps a runaway generation from costing more than its own length to reject. Messages quote
values with ``shown``, which cannot fail on numbers too long for ``str``.

The formats subclass ``ModelFormat`` explicitly, so they inherit its defaults (a strict parse that is the parser,
no think block, no released benchmark scripts, no answer for a grounding target). What each family decides
(docs/policies.md, "What a format knows"):

- infigui-g1: ``strict_parse`` is the released reward parser (the think gate of the think variant, a complete JSON
  list of ``point_2d`` objects) before the parser; ``render_answer`` and ``render_target`` write its point list
  (``[]`` for an absent target); grounding only.
- gui-r1: ``strict_parse`` is the parser: the released reward reads every answer (its format check R_f,
  ``train.rewards.guir1_format_ok``, is a 0.2 term of the score, not a gate, and its accuracy is read by regex
  whatever the format), so a reward refuses nothing the parser accepts; ``render_answer`` and ``render_target``
  write its action literal; its released scripts run the offline action benchmarks (``released_scripts``).
- qwen2.5-vl and ui-tars: no released RL reward, so ``strict_parse`` is the parser; ``render_answer`` writes a tool
  call (Qwen2.5-VL) or a ``Thought:``/``Action:`` call (UI-TARS), a location in their grounding variants; no answer
  for a grounding target.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from devices.actions import POINTED_KINDS, Action, ActionKind, Point
from devices.errors import InvalidAction
from policy.base import HistoryEntry
from policy.coords import ModelSpace, coordinate, number_text
from policy.errors import CoordinateError, FormatParseError, NoAnswerForm
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


class AnswerForm(enum.Enum):
    """What a preset's answers look like: a reward names the form it reads (``train.reward_registry``), so a prompt
    of another form is known to get answers it cannot read."""

    POINT_LIST = "point_list"
    """InfiGUI-G1: ``<think>...</think>`` then ``[{"point_2d": [x, y]}, ...]``."""
    ACTION_LIST = "action_list"
    """GUI-R1: ``<think>...</think> <answer>[{'action': ..., 'point': [x, y], 'input_text': ...}]</answer>``."""
    BOX_LIST = "box_list"
    """Qwen2.5-VL grounding: ``[{"bbox_2d": [x1, y1, x2, y2]}]`` or ``[{"point_2d": [x, y]}]``, no think block."""
    TOOL_CALL = "tool_call"
    """Qwen2.5-VL computer_use / mobile_use: ``<tool_call>`` JSON blocks."""
    CALL = "call"
    """UI-TARS: ``Thought: ...`` then ``Action: click(start_box='(x,y)')``."""


class Backbone(enum.Enum):
    """The architecture a family's checkpoints are: what a backend must be able to load to run it."""

    QWEN_VL = "qwen-vl"
    """Qwen2-VL and Qwen2.5-VL (one processor and chat template serve both)."""


@dataclass(frozen=True, slots=True)
class ReleasedAnswer:
    """A raw model answer read as the family's released benchmark scripts read it, in those scripts' action
    names (which need not be actions handeye can execute)."""

    action: str | None
    """The action name read; None when none was."""
    point: tuple[float, float] | None
    """The point read, normalized to the frame; None when the scripts read none."""
    text: str
    """The input text read (the scripts' "no text" value when none)."""
    error: str | None = None
    """Why nothing (or no action) was read."""


@dataclass(frozen=True, slots=True)
class ReleasedScripts:
    """How a family's released inference scripts run it on an offline action benchmark (``agent.action_eval``):
    the preset they prompt with, shown the benchmark record's own history string (``HistoryEntry.recorded``), and
    how they read the raw answer."""

    preset: ModelPreset
    """The preset the scripts prompt with (the benchmark's action list, the scripts' image size)."""
    read: Callable[[str, tuple[int, int]], ReleasedAnswer]
    """``read(raw_output, (w', h') of the image the model saw)``."""


GROUNDED_KINDS = POINTED_KINDS | {ActionKind.TYPE}
"""What a grounding-only answer can teach: the element an action went to (a key press or a scroll has none)."""


class ModelFormat(Protocol):
    """One model family's grammar: its prompt builder and parser, the answers it writes and how strictly a reward
    reads them (see the module docstring). Formats subclass it explicitly to inherit the defaults."""

    family: str
    backbone: Backbone = Backbone.QWEN_VL
    """The architecture of the family's checkpoints (what ``TransformersBackend`` checks it can load)."""
    no_think_variant: str | None = None
    """The prompt variant that asks for no think block (what ``data.think = false`` selects); None when the family
    has none."""
    grounding_variant: str | None = None
    """The variant that asks for one target's location, which grounding benchmarks (``agent eval --suite
    screenspot``) prompt with unless ``model.variant`` is set; None: the default variant already does (InfiGUI-G1)."""
    screen_variants: Mapping[str, str] = MappingProxyType({})
    """The prompt variant the family uses on each kind of screen a device shows (``devices.registry``'s
    ``DeviceKindSpec.screen``: "computer", "phone"): its action space on that screen. A screen not listed keeps the
    preset's variant (a family with one prompt, InfiGUI-G1's)."""

    def build_prompt(
        self, task: str, history: Sequence[HistoryEntry], space: ModelSpace, preset: ModelPreset
    ) -> Prompt: ...

    def parse(
        self, text: str, space: ModelSpace, preset: ModelPreset, history: Sequence[HistoryEntry] | None = None
    ) -> Parsed:
        """``history`` is the episode so far, for grammars whose actions depend on it (Qwen2.5-VL's
        ``left_click_drag`` starts at the cursor); families that do not need it ignore it."""
        ...

    def strict_parse(
        self, text: str, space: ModelSpace, preset: ModelPreset, history: Sequence[HistoryEntry] | None = None
    ) -> Parsed:
        """The answer as a reward reads it: ``parse`` after the family's reward-side format check, a
        FormatParseError where either refuses it. The run-time parser is lenient on purpose (it acts on what a
        model meant); a reward that paid for what only the lenient parser reads would teach malformed answers. By
        default the check is the parser itself (a family whose released reward refuses nothing more)."""
        return self.parse(text, space, preset, history=history)

    def answer_form(self, preset: ModelPreset) -> AnswerForm:
        """What ``preset``'s answers look like."""
        ...

    def thinks(self, preset: ModelPreset) -> bool:
        """Whether ``preset``'s prompt asks for a ``<think>`` block before the answer (the think gate of the
        point-list rewards follows it)."""
        return False

    def grounding_only(self, preset: ModelPreset) -> bool:
        """Whether ``preset``'s answers are locations only (single-step grounding): a recorded step teaches where
        it went, and an action that went to no element has no answer."""
        return False

    def render_answer(self, action: Action, space: ModelSpace, preset: ModelPreset, *, instruction: str = "",
                      box: Sequence[float] | None = None) -> str:
        """The answer that writes ``action`` (a recorded step's, frame-normalized) in the family's grammar, in
        ``space``'s model coordinates: what SFT teaches for that step. ``box`` is the step's target box (normalized;
        a grounding answer points at its centre when the action has no point). ``NoAnswerForm`` when the family has
        no form for it. ``train.data.answers`` parses every answer back and refuses one that is not faithful."""
        ...

    def render_target(self, point: tuple[float, float] | None, *, instruction: str, action: str | None = None,
                      text: str | None = None, think: bool = True) -> str:
        """The answer for a grounding target (cold-start SFT without a recorded action): ``point`` in model
        coordinates (None: the target is not on the screen), ``action`` and ``text`` the ground truth's GUI-R1
        action name and text (``train.data.prompts.Target``), ``think`` whether to write a think block.
        ``NoAnswerForm`` by default: only families trained on such targets write them."""
        raise NoAnswerForm(f"{self.family} has no answer for a grounding target without a recorded action: cold-start "
                           f"SFT on grounding targets needs a family that writes one (infigui-g1's point lists, "
                           f"gui-r1's actions)")

    def released_scripts(self, preset: ModelPreset, variant: str) -> ReleasedScripts | None:
        """How the family's released scripts run it on an offline action benchmark whose action list is
        ``variant``; None (the default) when it has none, and a policy is scored on its unified action."""
        return None


def grounding_point(action: Action, box: Sequence[float] | None) -> Point:
    """Where a grounding-only answer for ``action`` points: its point, else the centre of its target ``box``;
    ``NoAnswerForm`` for an action that went to no element (``GROUNDED_KINDS``) or has neither."""
    if action.kind not in GROUNDED_KINDS:
        raise NoAnswerForm(f"a grounding answer is a location, and this {action.kind.value} went to no element to "
                           f"point at")
    if action.point is not None:
        return action.point
    if box is not None:
        x1, y1, x2, y2 = box
        return Point((x1 + x2) / 2, (y1 + y2) / 2)
    raise NoAnswerForm(f"a grounding answer is a location, and this {action.kind.value} step has neither a point "
                       f"nor a target box")


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

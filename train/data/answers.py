"""The answer a supervised example teaches for a prompt, written in its model family's output format.

Two kinds of prompt:

- a grounding target (a box or a point: grounding files, generated screens): ``answer_text`` writes InfiGUI-G1's
  point list or GUI-R1's action list from the target;
- a recorded step (trajectories, demonstrations): ``answer_for_action`` writes the recorded action as the family
  writes it, in model coordinates (``policy.coords``), and ``TrajectorySource`` stores it in the target's
  ``"answer"``, which ``answer_text`` then returns as it is.

``answer_for_action`` per family (``preset.family`` and ``preset.variant``):

- gui-r1: ``<think>...</think> <answer>[{'action': ..., 'point': [x, y], 'input_text': ...}]</answer>``, the
  literal GUI-R1's own history uses (``policy.formats.guir1.answer_from_action``);
- qwen2.5-vl computer_use / mobile_use: ``<tool_call>`` with the tool-call JSON (``render_step``);
- ui-tars computer / mobile: ``Thought: ...`` then ``Action: ...`` in its call grammar (``render_action``);
- the grounding-only answers (infigui-g1, qwen2.5-vl and ui-tars grounding): the step's location, the recorded
  point or else the centre of the target box (a ``type`` teaches where its field is); only steps that went to an
  element (``GROUNDED_KINDS``: clicks, drags, hovers, long presses, typing).

Every answer is read back with the family's own parser (``policy.formats``) before it is used: it must give the
recorded action (kind, points within a model pixel, text, keys, direction; grounding answers: the location). An
action the family cannot write, or cannot write faithfully (GUI-R1 has no drag; Qwen2.5-VL's computer_use drags
from the cursor; a grounding model has nothing to say about a key press without a target), is an
``UnwritableAction`` saying why, and the step is left out with that reason.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from devices.actions import POINTED_KINDS, Action, ActionKind, Point
from policy.base import HistoryEntry
from policy.coords import ModelSpace
from policy.errors import FormatParseError
from policy.presets import ModelPreset
from train.samples import RolloutPrompt

__all__ = ["GROUNDED_KINDS", "UnwritableAction", "answer_for_action", "answer_text"]


class UnwritableAction(ValueError):
    """The family cannot write the recorded action as an answer that parses back to it (the message says why)."""


def answer_text(prompt: RolloutPrompt, *, think: bool = True) -> str:
    """The answer an SFT example teaches for ``prompt``: a recorded step's stored answer (``target["answer"]``), else
    its target in the family's output format: InfiGUI-G1's point list (``[{"point_2d": [x, y]}]``, ``[]`` on a
    negative sample, after a short think block in think mode) or GUI-R1's action list. The point is the target box's
    centre (or the recorded point), in the model's coordinates."""
    t = prompt.target or {}
    if t.get("answer"):
        return str(t["answer"])
    family = t.get("family", "")
    point = t.get("point")
    if point is None and t.get("box") is not None:
        x1, y1, x2, y2 = t["box"]
        point = ((x1 + x2) / 2, (y1 + y2) / 2)
    if family == "gui-r1":
        action = t.get("action") or ("impossible" if t.get("negative") else "click")
        xy = [round(point[0]), round(point[1])] if point is not None else [-100, -100]
        text = t.get("text") or "no input text"
        return (f"<think>The task asks for {action}.</think> "
                f"<answer>{[{'action': action, 'point': xy, 'input_text': text}]!r}</answer>")
    if family in ("infigui-g1", "") or "point_2d" in str(prompt.messages):
        answer = "[]" if point is None else json.dumps([{"point_2d": [round(point[0]), round(point[1])]}])
        if not (t.get("think", think)):
            return answer
        what = "is not on the screen" if point is None else "is at this point"
        return f"<think>The element for \"{t.get('instruction', '')}\" {what}.</think>\n{answer}"
    raise ValueError(f"no SFT answer format for model family {family!r} without a recorded action: cold-start SFT "
                     f"on grounding targets supports InfiGUI-G1 point lists and GUI-R1 actions")


# -- recorded actions -----------------------------------------------------------------------------------------------
GROUNDED_KINDS = POINTED_KINDS | {ActionKind.TYPE}
"""What a grounding-only answer can teach: the element an action went to (a key press or a scroll has none)."""


def _grounding(preset: ModelPreset) -> bool:
    return preset.family == "infigui-g1" or preset.variant == "grounding"


def _location(action: Action, box: Sequence[float] | None) -> Point:
    if action.point is not None:
        return action.point
    if box is not None:
        x1, y1, x2, y2 = box
        return Point((x1 + x2) / 2, (y1 + y2) / 2)
    raise UnwritableAction(f"a grounding answer is a location, and this {action.kind.value} step has neither a point "
                           f"nor a target box")


def _render(preset: ModelPreset, space: ModelSpace, action: Action, instruction: str,
            box: Sequence[float] | None, think: bool) -> str:
    family = preset.family
    if family == "infigui-g1":
        x, y = space.from_point(_location(action, box))
        answer = json.dumps([{"point_2d": [round(x), round(y)]}])
        return f"<think>The element for \"{instruction}\" is at this point.</think>\n{answer}" if think else answer
    if family == "qwen2.5-vl":
        if preset.variant == "grounding":
            x, y = space.from_point(_location(action, box))
            return json.dumps([{"point_2d": [round(x), round(y)]}])
        from policy.formats.qwen25vl_prompts import render_step

        return f"<tool_call>\n{render_step(action, space, preset.variant or 'computer_use')}\n</tool_call>"
    if family == "ui-tars":
        from policy.formats.uitars import UiTarsFormat

        if preset.variant == "grounding":
            return "Action: " + UiTarsFormat.render_action(Action(ActionKind.CLICK, _location(action, box)), space)
        return f"Thought: The next step is {action.kind.value}.\nAction: {UiTarsFormat.render_action(action, space)}"
    if family == "gui-r1":
        from policy.formats.guir1 import action_list, answer_from_action

        literal = answer_from_action(action, space, action_list(preset.variant))
        return f"<think>The next step is {action.kind.value}.</think> <answer>{literal}</answer>"
    raise UnwritableAction(f"no answer format for model family {family!r}")


def answer_for_action(preset: ModelPreset, space: ModelSpace, action: Action, *, instruction: str = "",
                      box: Sequence[float] | None = None, history: Sequence[HistoryEntry] = (),
                      think: bool = True) -> str:
    """The answer that teaches ``action`` (a recorded step's, frame-normalized) to ``preset``'s family on a screen
    whose model space is ``space``; ``box`` is the step's target box (normalized), ``history`` the steps before it
    (what the prompt shows). ``UnwritableAction`` when the family cannot write it faithfully (module docstring)."""
    if action.kind is ActionKind.ASK_USER:
        raise UnwritableAction("ask_user is the person's part, not a step to teach")
    if _grounding(preset) and action.kind not in GROUNDED_KINDS:
        raise UnwritableAction(f"a grounding answer ({preset.family}) is a location, and this "
                               f"{action.kind.value} went to no element to point at")
    text = _render(preset, space, action, instruction, box, think)
    from policy.formats import get_format

    try:
        parsed = get_format(preset.family).parse(text, space, preset, history=list(history))
    except FormatParseError as e:
        raise UnwritableAction(f"{preset.family} cannot write {action.kind.value}: {e}") from None
    if not parsed.actions:
        raise UnwritableAction(f"{preset.family} wrote no action for {action.kind.value}")
    why = _difference(parsed.actions[0], action, box, space, _grounding(preset))
    if why:
        raise UnwritableAction(f"{preset.family} cannot write this {action.kind.value} faithfully: {why}")
    return text


def _difference(got: Action, want: Action, box: Sequence[float] | None, space: ModelSpace, grounding: bool) -> str:
    """What differs between the parsed answer ``got`` and the recorded ``want`` ("" when nothing that matters)."""
    sx, sy = space.extent

    def far(a: Point | None, b: Point | None) -> bool:
        if a is None or b is None:
            return a is not b
        return abs(a.x - b.x) * sx > 1.0 or abs(a.y - b.y) * sy > 1.0

    if grounding:
        return "the location moved" if far(got.point, _location(want, box)) else ""
    if got.kind is not want.kind:
        return f"it reads back as {got.kind.value}"
    for name in ("point", "end"):
        if far(getattr(got, name), getattr(want, name)):
            return f"its {name} reads back as {getattr(got, name)}"
    for name in ("text", "keys", "direction"):
        if getattr(got, name) != getattr(want, name):
            return f"its {name} reads back as {getattr(got, name)!r}"
    return ""

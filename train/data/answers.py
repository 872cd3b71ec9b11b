"""The answer a supervised example teaches for a prompt, written by its model family's format.

Two kinds of prompt:

- a grounding target (a box or a point: grounding files, generated screens): ``answer_text`` asks the family's
  format to write the target (``ModelFormat.render_target``: InfiGUI-G1's point list, GUI-R1's action list; the
  other families have no such answer);
- a recorded step (trajectories, demonstrations): ``answer_for_action`` asks the format to write the recorded action
  (``ModelFormat.render_answer``, in model coordinates: ``policy.coords``), and ``TrajectorySource`` stores it in
  the target's ``"answer"``, which ``answer_text`` then returns as it is.

What each family writes is its format's (``policy.formats.base``, docs/policies.md). Every answer for a recorded
step is read back with the family's own parser before it is used: it must give the recorded action (kind, points
within a model pixel, text, keys, direction; a grounding-only answer: the location). An action the family cannot
write (``NoAnswerForm``), or cannot write faithfully (Qwen2.5-VL's computer_use drags from the cursor), is an
``UnwritableAction`` saying why, and the step is left out with that reason.
"""

from __future__ import annotations

from collections.abc import Sequence

from devices.actions import Action, ActionKind, Point
from policy.base import HistoryEntry
from policy.coords import ModelSpace
from policy.errors import FormatParseError, NoAnswerForm
from policy.formats import get_format
from policy.formats.base import grounding_point
from policy.presets import GROUNDING_FAMILY, ModelPreset
from train.errors import UnwritableAction
from train.samples import RolloutPrompt

__all__ = ["answer_for_action", "answer_text"]


def answer_text(prompt: RolloutPrompt, *, think: bool = True) -> str:
    """The answer an SFT example teaches for ``prompt``: a recorded step's stored answer (``target["answer"]``), else
    its target written by the family's format (``render_target``: the target box's centre or its recorded point, in
    the model's coordinates; None on a negative sample). ``think`` is the think block's default where the target
    does not say (``target["think"]``). A target without a family is InfiGUI-G1's (``GROUNDING_FAMILY``)."""
    t = prompt.target or {}
    if t.get("answer"):
        return str(t["answer"])
    point = t.get("point")
    if point is None and t.get("box") is not None:
        x1, y1, x2, y2 = t["box"]
        point = ((x1 + x2) / 2, (y1 + y2) / 2)
    fmt = get_format(t.get("family") or GROUNDING_FAMILY)
    return fmt.render_target(point, instruction=t.get("instruction", ""), action=t.get("action"),
                             text=t.get("text"), think=bool(t.get("think", think)))


def answer_for_action(preset: ModelPreset, space: ModelSpace, action: Action, *, instruction: str = "",
                      box: Sequence[float] | None = None, history: Sequence[HistoryEntry] = ()) -> str:
    """The answer that teaches ``action`` (a recorded step's, frame-normalized) to ``preset``'s family on a screen
    whose model space is ``space``; ``box`` is the step's target box (normalized), ``history`` the steps before it
    (what the prompt shows). ``UnwritableAction`` when the family cannot write it faithfully (module docstring)."""
    if action.kind is ActionKind.ASK_USER:
        raise UnwritableAction("ask_user is the person's part, not a step to teach")
    fmt = get_format(preset.family)
    grounding = fmt.grounding_only(preset)
    try:
        text = fmt.render_answer(action, space, preset, instruction=instruction, box=box)
        parsed = fmt.parse(text, space, preset, history=list(history))
        want = grounding_point(action, box) if grounding else None
    except (NoAnswerForm, FormatParseError) as e:
        raise UnwritableAction(f"{preset.family} cannot write {action.kind.value}: {e}") from None
    if not parsed.actions:
        raise UnwritableAction(f"{preset.family} wrote no action for {action.kind.value}")
    why = _difference(parsed.actions[0], action, want, space)
    if why:
        raise UnwritableAction(f"{preset.family} cannot write this {action.kind.value} faithfully: {why}")
    return text


def _difference(got: Action, want: Action, location: Point | None, space: ModelSpace) -> str:
    """What differs between the parsed answer ``got`` and the recorded ``want`` ("" when nothing that matters); a
    grounding-only answer is compared with the ``location`` it points at."""
    sx, sy = space.extent

    def far(a: Point | None, b: Point | None) -> bool:
        if a is None or b is None:
            return a is not b
        return abs(a.x - b.x) * sx > 1.0 or abs(a.y - b.y) * sy > 1.0

    if location is not None:
        return "the location moved" if far(got.point, location) else ""
    if got.kind is not want.kind:
        return f"it reads back as {got.kind.value}"
    for name in ("point", "end"):
        if far(getattr(got, name), getattr(want, name)):
            return f"its {name} reads back as {getattr(got, name)}"
    for name in ("text", "keys", "direction"):
        if getattr(got, name) != getattr(want, name):
            return f"its {name} reads back as {getattr(got, name)!r}"
    return ""

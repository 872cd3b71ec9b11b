"""What a policy's answer is in a benchmark's terms: its action name, point and text (a ``Prediction``).

The benchmarks' own action vocabulary is here (``BENCHMARK_NAMES``, ``KEY_NAMES``; ``metrics.NO_INPUT``):
``from_action`` maps a unified action (any policy: OCR, scripted, Qwen2.5-VL, InfiGUI-G1, UI-TARS) by it
(docs/actions.md has the table). A kind the benchmark's list lacks keeps its name and so can never match the truth
(a type miss); a kind no benchmark names (drag, open_url) is ``None``, a type miss too.

A model whose family's released scripts evaluate it on these benchmarks (GUI-R1) is read as those scripts read its
raw output instead: that reader is the family's knowledge (``policy.formats.guir1_prompts.read_released``), and
``agent.action_eval`` turns what it reads into a ``Prediction``.
"""

from __future__ import annotations

from dataclasses import dataclass

from devices.actions import Action, ActionKind
from envs.action_bench.metrics import NO_INPUT

__all__ = ["BENCHMARK_NAMES", "KEY_NAMES", "Prediction", "from_action"]

#: unified kind -> the benchmarks' name for it (keys are handled by KEY_NAMES and hotkey)
BENCHMARK_NAMES: dict[ActionKind, str] = {
    ActionKind.CLICK: "click", ActionKind.LONG_PRESS: "long_press", ActionKind.HOVER: "moveto",
    ActionKind.DOUBLE_CLICK: "doubleclick", ActionKind.RIGHT_CLICK: "rightclick", ActionKind.TYPE: "type",
    ActionKind.OPEN_APP: "open_app", ActionKind.SCROLL: "scroll", ActionKind.BACK: "press_back",
    ActionKind.HOME: "press_home", ActionKind.WAIT: "wait", ActionKind.FINISH: "complete",
    ActionKind.INFEASIBLE: "impossible", ActionKind.ASK_USER: "impossible", ActionKind.HOTKEY: "hotkey",
}
#: a single key -> the benchmarks' name for pressing it; any other key is a one-key ``hotkey``
KEY_NAMES = {"Enter": "press_enter", "Tab": "press_tab", "ArrowDown": "press_down", "Space": "press_space",
             "PageDown": "press_pgdn"}


@dataclass(frozen=True, slots=True)
class Prediction:
    """A policy's answer for one step, in the benchmark's terms (what the metrics read)."""

    action: str | None
    """The benchmark's action name; None when nothing was read or the action has no name in any benchmark."""
    point: tuple[float, float] | None = None
    """Normalized frame point; None scores as (0, 0), as the released reader gives a missing point."""
    text: str = NO_INPUT
    raw_output: str = ""
    parse_error: str | None = None
    unified: str = ""
    """The unified action's short form (``Action.describe``), for the report."""


def from_action(action: Action | None, *, raw_output: str = "", parse_error: str | None = None) -> Prediction:
    """The benchmark-side form of a unified action (see the module docstring)."""
    if action is None:
        return Prediction(None, raw_output=raw_output, parse_error=parse_error or "no action")
    kind, name, text = action.kind, None, NO_INPUT
    if kind is ActionKind.KEY:
        name = KEY_NAMES.get(action.keys[0], "hotkey")
        text = NO_INPUT if name != "hotkey" else action.keys[0].lower()
    elif kind in BENCHMARK_NAMES:
        name = BENCHMARK_NAMES[kind]
    if kind in (ActionKind.TYPE, ActionKind.OPEN_APP):
        text = action.text or NO_INPUT
    elif kind is ActionKind.SCROLL and action.direction is not None:
        text = action.direction.value
    elif kind is ActionKind.HOTKEY:
        text = " ".join(k.lower() for k in action.keys)
    point = (action.point.x, action.point.y) if action.point is not None else None
    return Prediction(name, point, text, raw_output, parse_error, action.describe())


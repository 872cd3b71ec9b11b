"""What a policy's answer is in a benchmark's terms: its action name, point and text.

Two readers, one per kind of policy:

- ``from_action``: a unified action (any policy: OCR, scripted, Qwen2.5-VL, InfiGUI-G1, UI-TARS) mapped by
  ``BENCHMARK_NAMES`` (docs/actions.md has the table). A kind the benchmark's list lacks keeps its name and so can
  never match the truth (a type miss); a kind no benchmark names (drag, open_url) is ``None``, a type miss too.
- ``read_guir1_answer``: a GUI-R1 model's raw output read as the released inference scripts read it
  (``guir1/inference/inference_vllm_*.py``: ``extract_action``, ``extract_coord``, ``extract_input_text``), so a
  GUI-R1 run through handeye is scored on exactly what the published numbers were: the action is the first
  ``'action': '<word>'`` inside the first ``<answer>...</answer>``, the point the last ``[int, int]`` on the line of
  the answer's first ``{`` ... ``}`` (no negative numbers: ``[-100, -100]`` and a missing point both read as
  (0, 0)), the text the first ``'input_text': '...'`` (else "no input text"). This reads names handeye cannot
  execute (GUI-Odyssey's ``press_recent``), which the released scorer counts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from devices.actions import Action, ActionKind
from envs.action_bench.metrics import NO_INPUT

__all__ = ["BENCHMARK_NAMES", "KEY_NAMES", "Prediction", "from_action", "read_guir1_answer"]

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


_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_ACTION = re.compile(r"'action':\s*'(\w+)'")
_TEXT = re.compile(r"'input_text':\s*'(.*?)'")
_POINT = re.compile(r"\{.*\[(\d+),\s*(\d+)]\s*.*\}")


def read_guir1_answer(text: str, model_size: tuple[int, int]) -> Prediction:
    """A GUI-R1 output read as the released inference scripts read it (module docstring); ``model_size`` is the
    (w', h') of the image the model saw, which maps its pixel point to the frame."""
    text = text[:65_536]
    found = _ANSWER.search(text)
    if found is None:
        return Prediction(None, None, NO_INPUT, text, "no <answer>...</answer> in the output")
    answer = found.group(1).strip()
    action = _ACTION.search(answer)
    typed = _TEXT.search(answer)
    where = _POINT.search(answer[:2000])  # a line of an answer; the bound keeps the released regex's backtracking small
    point = (0.0, 0.0)
    if where is not None:
        w, h = model_size
        point = (int(where.group(1)[:12]) / w, int(where.group(2)[:12]) / h)
    return Prediction(action.group(1) if action else None, point, typed.group(1) if typed else NO_INPUT, text,
                      None if action else "no 'action' in the answer")

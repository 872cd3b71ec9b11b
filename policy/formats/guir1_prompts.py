"""GUI-R1's vocabulary, prompt text, history text and answer literals (the parser is ``policy.formats.guir1``).

Every GUI-R1 table is here, once: the action lists of the prompt variants (``ACTION_LISTS``), which names need a
point or an input text, the key actions, and ``NO_INPUT``. The GUI-R1 reward (``train.rewards``) and the SFT answers
(``train.data``) read them from here; the offline action benchmarks name their ground truth in their own vocabulary
(``envs.action_bench``), which matches these names because GUI-R1 was trained on those benchmarks.

Prompt
    One user turn, no system prompt: the screenshot first, then the text, which (as in the released
    inference scripts) starts with ``<image>\\n`` and also keeps the literal ``<image>`` inside the
    template sentence. ``preset.variant`` picks the action list: ``high`` (the navigation list of
    the training loader), ``low`` (``['click']``), or a benchmark's list (``androidcontrol``,
    ``guiodyssey``, ``guiact-web``, ``omniact-web``, ``omniact-desktop``, ``screenspot``). The
    released ScreenSpot script says "RUN1-R1"; that is a typo and the model was trained on "GUI-R1",
    so every variant says "GUI-R1". Lists with text-bearing actions get the "Note: specific input
    text ..." line and one example per action group; the click-only lists get just the example, as
    in the released grounding script.

History
    The training data's history is one string of earlier actions. handeye renders every executed
    step as ``Step i: <answer>`` where ``<answer>`` is the step's own answer literal, as the model
    wrote it between ``<answer>`` tags (the trained output grammar); a step whose action came from
    elsewhere (no parseable answer) is written in the same literal form from its unified action
    (``answer_from_action``). Steps that were not executed (parse failures, refusals) changed nothing on
    screen and are left out. No history gives ``'None'``, as in the released scripts. An entry with
    ``recorded`` text (an offline benchmark's history string, ``agent.action_eval``) is written as it is.

The released benchmark reader
    ``read_released`` reads a raw output as the released inference scripts do (``guir1/inference/
    inference_vllm_*.py``: ``extract_action``, ``extract_coord``, ``extract_input_text``), so a GUI-R1 run through
    handeye is scored on exactly what the published numbers were: the action is the first ``'action': '<word>'``
    inside the first ``<answer>...</answer>``, the point the last ``[int, int]`` on the line of the answer's first
    ``{`` ... ``}`` (no negative numbers: ``[-100, -100]`` and a missing point both read as (0, 0)), the text the
    first ``'input_text': '...'`` (else ``NO_INPUT``). This reads names handeye cannot execute (GUI-Odyssey's
    ``press_recent``), which the released scorer counts.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Sequence

from devices.actions import Action, ActionKind
from policy.base import HistoryEntry
from policy.coords import ModelSpace
from policy.formats.base import MAX_OUTPUT_CHARS, ReleasedAnswer

__all__ = ["ACTION_LISTS", "ALL_ACTIONS", "IMPOSSIBLE_REASON", "KEY_ACTIONS", "NO_INPUT", "NO_TARGET", "PLAIN",
           "POINTED", "SCROLL_DIRECTIONS", "TEXT_REQUIRED", "action_list", "action_name", "answer_from_action",
           "history_text", "prompt_text", "read_released"]

#: action lists by ``preset.variant``, in the order the released prompts enumerate them
ACTION_LISTS: dict[str, tuple[str, ...]] = {
    "high": ("complete", "close/delete", "press_home", "click", "press_back", "type", "select", "scroll", "enter"),
    "low": ("click",),
    "androidcontrol": ("wait", "long_press", "click", "press_back", "type", "open_app", "scroll"),
    "guiodyssey": (
        "press_back", "press_recent", "press_home", "complete", "long_press", "scroll", "click", "impossible", "type",
    ),
    "guiact-web": ("scroll", "click", "complete"),
    "omniact-web": (
        "press_tab", "moveto", "rightclick", "press_enter", "scroll", "click", "press_down", "hotkey", "press_space",
        "doubleclick",
    ),
    "omniact-desktop": ("click", "moveto", "press_pgdn"),
    "screenspot": ("click",),
}
ALL_ACTIONS: frozenset[str] = frozenset(a for actions in ACTION_LISTS.values() for a in actions)

NO_INPUT = "no input text"
"""The ``input_text`` of an action that takes none."""
NO_TARGET = (-100, -100)
"""The ``point`` of an action that has none."""
SCROLL_DIRECTIONS = ("up", "down", "left", "right")
#: actions whose point is required (the click-like ones)
POINTED = {"click": ActionKind.CLICK, "long_press": ActionKind.LONG_PRESS, "moveto": ActionKind.HOVER,
           "rightclick": ActionKind.RIGHT_CLICK, "doubleclick": ActionKind.DOUBLE_CLICK}
#: actions whose input_text is required (scroll's is a direction; hotkey's keys are checked by the parser)
TEXT_REQUIRED = ("type", "select", "open_app", "scroll")
KEY_ACTIONS = {"enter": "Enter", "press_enter": "Enter", "press_tab": "Tab", "press_down": "ArrowDown",
               "press_space": "Space", "press_pgdn": "PageDown"}
PLAIN = {"complete": ActionKind.FINISH, "press_back": ActionKind.BACK, "press_home": ActionKind.HOME,
         "wait": ActionKind.WAIT}
IMPOSSIBLE_REASON = "the model judged the task impossible"

_KIND_NAMES = {kind: name for name, kind in {**POINTED, **PLAIN}.items()} | {ActionKind.INFEASIBLE: "impossible"}
_TEXT_KINDS = {ActionKind.TYPE: "type", ActionKind.OPEN_APP: "open_app"}
_KEY_NAMES = {key: name for name, key in KEY_ACTIONS.items() if name not in ("enter", "press_enter")}

_HEADER = (
    "You are GUI-R1, a reasoning GUI Agent Assistant. In this UI screenshot <image>, I want you to continue "
    "executing the command '{instruction}', with the action history being '{history}'.\n"
)


def _enum(names: Sequence[str]) -> str:
    return "[" + ", ".join(repr(n) for n in names) + "]"


def action_list(variant: str) -> tuple[str, ...]:
    """The action list of a GUI-R1 prompt variant; ValueError naming the valid ones otherwise."""
    key = (variant or "high").strip().lower()
    if key not in ACTION_LISTS:
        raise ValueError(f"unknown GUI-R1 variant {variant!r}; valid variants: {', '.join(ACTION_LISTS)}")
    return ACTION_LISTS[key]


def prompt_text(instruction: str, history: str, actions: Sequence[str]) -> str:
    """The GUI-R1 user text for an action list (without the leading ``<image>\\n``)."""
    enum = _enum(actions)
    text = _HEADER.format(instruction=instruction, history=history)
    text += (
        f"Please provide the action to perform (enumerate from {enum}), the point where the cursor is moved to "
        "(integer) if a click is performed, and any input text required to complete the action.\n"
        "Output the thinking process in <think> </think> tags, and the final answer in <answer> </answer> tags "
        "as follows:\n"
        f"<think> ... </think> <answer>[{{'action': enum{enum}, 'point': [x, y], "
        "'input_text': 'no input text [default]'}]</answer>\n"
    )
    needs_text = [a for a in actions if a in TEXT_REQUIRED]
    pointed = [a for a in actions if a in POINTED]
    plain = [a for a in actions if a not in POINTED and a not in TEXT_REQUIRED]
    texty = [a for a in needs_text if a != "scroll"]
    examples = []
    if plain:
        examples.append(f"[{{'action': enum{_enum(plain)}, 'point': [-100, -100], 'input_text': 'no input text'}}]")
    if pointed:
        examples.append(f"[{{'action': enum{_enum(pointed)}, 'point': [123, 300], 'input_text': 'no input text'}}]")
    if texty:
        examples.append(
            f"[{{'action': enum{_enum(texty)}, 'point': [-100, -100], 'input_text': 'shanghai shopping mall'}}]"
        )
    if "scroll" in actions:
        examples.append(
            "[{'action': enum['scroll'], 'point': [-100, -100], 'input_text': enum['up', 'left', 'right', 'down']}]"
        )
    if needs_text:
        text += (
            f"Note:\n specific input text (no default) is necessary for actions enum{_enum(needs_text)} \n Example:\n"
        )
        text += "\n".join(examples)
    else:
        text += "Example:\n" + "\n".join(examples) + "\n"
    return text


# -- a unified action in GUI-R1's terms ---------------------------------------------------------------------------


def action_name(action: Action, actions: Sequence[str] = ACTION_LISTS["high"]) -> tuple[str, str | None] | None:
    """(GUI-R1 action name, its input text or None) of a unified action; None when GUI-R1 has no such action (drag,
    open_url). Text: typed text, app name, scroll direction, hotkey keys. Enter is ``enter`` unless ``actions`` (the
    prompted list) has only ``press_enter``; Escape is ``close/delete`` (which the parser reads back as Escape)."""
    kind = action.kind
    if kind in _KIND_NAMES:
        return _KIND_NAMES[kind], None
    if kind in _TEXT_KINDS:
        return _TEXT_KINDS[kind], action.text
    if kind is ActionKind.SCROLL:
        return "scroll", action.direction.value if action.direction else None
    if kind is ActionKind.KEY:
        key = action.keys[0]
        if key == "Enter":
            return ("enter" if "enter" in actions or "press_enter" not in actions else "press_enter"), None
        if key == "Escape":
            return "close/delete", None
        if key in _KEY_NAMES:
            return _KEY_NAMES[key], None
        return "hotkey", key.lower()
    if kind is ActionKind.HOTKEY:
        return "hotkey", " ".join(k.lower() for k in action.keys)
    return None


def answer_from_action(action: Action, space: ModelSpace, actions: Sequence[str]) -> str:
    """The GUI-R1 answer literal that stands for a unified action (for history text, and the answer an SFT example
    teaches for a recorded step); its short description when GUI-R1 has no such action."""
    named = action_name(action, actions)
    if named is None:  # drag, open_url: no GUI-R1 form
        return action.describe()
    name, text = named
    point = list(NO_TARGET)
    if action.point is not None:
        x, y = space.from_point(action.point)
        point = [round(x), round(y)]
    return repr([{"action": name, "point": point, "input_text": NO_INPUT if text is None else text}])


# -- history --------------------------------------------------------------------------------------------------------


def _last_answer(raw: str) -> str | None:
    """The text of the last ``<answer>...</answer>`` pair (pairs taken left to right, as a lazy regex
    would find them), in one pass: each search starts where the previous pair ended."""
    found, pos = None, 0
    while (a_open := raw.find("<answer>", pos)) >= 0:
        a_close = raw.find("</answer>", a_open + len("<answer>"))
        if a_close < 0:
            break
        found, pos = raw[a_open + len("<answer>"):a_close], a_close + len("</answer>")
    return found


def _answer_of(raw: str) -> str | None:
    if not raw or len(raw) > MAX_OUTPUT_CHARS:
        return None
    body = _last_answer(raw)
    if body is None:
        return None
    body = body.strip()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = ast.literal_eval(body)
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        return None
    return body if isinstance(value, (list, dict)) and value else None


def history_text(history: Sequence[HistoryEntry], space: ModelSpace, actions: Sequence[str]) -> str:
    parts = []
    for entry in history:
        if entry.recorded:  # an offline benchmark's own history string, shown as the model was trained on it
            parts.append(entry.recorded)
            continue
        if not entry.executed or entry.action is None:
            continue
        answer = _answer_of(entry.raw_output) or answer_from_action(entry.action, space, actions)
        parts.append(f"Step {len(parts) + 1}: {answer}")
    return "; ".join(parts) if parts else "None"


# -- the released benchmark reader --------------------------------------------------------------------------------

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_ACTION = re.compile(r"'action':\s*'(\w+)'")
_TEXT = re.compile(r"'input_text':\s*'(.*?)'")
_POINT = re.compile(r"\{.*\[(\d+),\s*(\d+)]\s*.*\}")


def read_released(text: str, model_size: tuple[int, int]) -> ReleasedAnswer:
    """A GUI-R1 output read as the released inference scripts read it (module docstring); ``model_size`` is the
    (w', h') of the image the model saw, which maps its pixel point to the frame."""
    text = text[:MAX_OUTPUT_CHARS]
    found = _ANSWER.search(text)
    if found is None:
        return ReleasedAnswer(None, None, NO_INPUT, "no <answer>...</answer> in the output")
    answer = found.group(1).strip()
    action = _ACTION.search(answer)
    typed = _TEXT.search(answer)
    where = _POINT.search(answer[:2000])  # a line of an answer; the bound keeps the released regex's backtracking small
    point: tuple[float, float] = (0.0, 0.0)
    if where is not None:
        w, h = model_size
        point = (int(where.group(1)[:12]) / w, int(where.group(2)[:12]) / h)
    return ReleasedAnswer(action.group(1) if action else None, point, typed.group(1) if typed else NO_INPUT,
                          None if action else "no 'action' in the answer")

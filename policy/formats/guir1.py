"""GUI-R1 (arXiv 2504.10458, ritzz-ai/GUI-R1): prompt builder and output parser.

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
    elsewhere (no parseable answer) is written in the same literal form from its unified action.
    Steps that were not executed (parse failures, refusals) changed nothing on screen and are left
    out. No history gives ``'None'``, as in the released scripts. An entry with ``recorded`` text (an offline
    benchmark's history string, ``agent.action_eval``) is written as it is.

Output
    ``<think>...</think> <answer>[{'action': ..., 'point': [x, y], 'input_text': ...}]</answer>``.
    The answer is read with ``ast`` (never eval), in time linear in the output (node positions come
    from one ``SourcePositions`` map), and at most ``MAX_OUTPUT_CHARS`` of it (longer is a parse
    error). A missing think block or a non-integer point is
    tolerated for execution and listed in ``Parsed.info["format_issues"]``; anything that cannot
    be executed is a FormatParseError with the position of the problem. Every dict of the list is
    returned, in order (the first is executed). An action name of any of the lists is accepted
    under every variant; one that is not in the prompted list is noted in ``format_issues``.

Action mapping (GUI-R1 name -> unified action)
    click / long_press / moveto / rightclick / doubleclick -> click / long_press / hover /
        right_click / double_click at ``point`` (the no-target ``[-100, -100]`` is an error here);
    type -> type ``input_text`` (clicking ``point`` first when one is given);
    select -> type ``input_text`` at ``point``: handeye has no "select an option" action; clicking
        a drop-down and typing the option's text picks it in browsers and most toolkits, which is
        the closest executable form of the training data's web "select" steps;
    scroll -> scroll in the ``input_text`` direction (up/down/left/right), default amount 0.5
        screens, at ``point`` when one is given;
    open_app -> open_app ``input_text``; wait -> wait (default 1 s; GUI-R1 gives no duration);
    complete -> finish; impossible -> infeasible ("the model judged the task impossible");
    press_back -> back; press_home -> home;
    enter / press_enter -> key Enter; press_tab -> key Tab; press_down -> key ArrowDown;
        press_space -> key Space; press_pgdn -> key PageDown;
    hotkey -> hotkey of the keys in ``input_text`` ("ctrl c", "ctrl+c"); one key -> key action;
    close/delete -> with a point, a click on it (the close or delete control the model points
        at); without one (the prompt's example), key Escape, which closes dialogs, menus and
        pop-ups on the web and desktop and acts as back on Android;
    press_recent -> FormatParseError: the unified action space has no recent-apps (app switcher)
        action, and guessing a substitute would do something else on the device.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Sequence
from typing import Any

from devices.actions import Action, ActionKind
from devices.errors import InvalidAction
from devices.keys import normalize_key
from policy.base import HistoryEntry
from policy.coords import ModelSpace
from policy.errors import CoordinateError, FormatParseError
from policy.formats.base import MAX_OUTPUT_CHARS, Parsed, Prompt, check_output, shown
from policy.formats.positions import SourcePositions
from policy.presets import ModelPreset

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
SCROLL_DIRECTIONS = ("up", "down", "left", "right")
#: actions whose point is required (the click-like ones)
POINTED = {"click": ActionKind.CLICK, "long_press": ActionKind.LONG_PRESS, "moveto": ActionKind.HOVER,
           "rightclick": ActionKind.RIGHT_CLICK, "doubleclick": ActionKind.DOUBLE_CLICK}
#: actions whose input_text is required (the format reward's list, plus open_app and hotkey)
TEXT_REQUIRED = ("type", "select", "open_app", "scroll")
KEY_ACTIONS = {"enter": "Enter", "press_enter": "Enter", "press_tab": "Tab", "press_down": "ArrowDown",
               "press_space": "Space", "press_pgdn": "PageDown"}
PLAIN = {"complete": ActionKind.FINISH, "press_back": ActionKind.BACK, "press_home": ActionKind.HOME,
         "wait": ActionKind.WAIT}
IMPOSSIBLE_REASON = "the model judged the task impossible"

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


# -- history ----------------------------------------------------------------------------------------

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


def answer_from_action(action: Action, space: ModelSpace, actions: Sequence[str]) -> str:
    """The GUI-R1 answer literal that stands for a unified action (for history text, and the answer an SFT example
    teaches for a recorded step: train/data/answers.py); its short description when GUI-R1 has no such action."""

    def pt(p: Any) -> list[int]:
        if p is None:
            return [-100, -100]
        x, y = space.from_point(p)
        return [round(x), round(y)]

    kind = action.kind
    name, point, text = None, action.point, NO_INPUT
    simple = {ActionKind.CLICK: "click", ActionKind.LONG_PRESS: "long_press", ActionKind.HOVER: "moveto",
              ActionKind.RIGHT_CLICK: "rightclick", ActionKind.DOUBLE_CLICK: "doubleclick",
              ActionKind.BACK: "press_back", ActionKind.HOME: "press_home", ActionKind.WAIT: "wait",
              ActionKind.FINISH: "complete", ActionKind.INFEASIBLE: "impossible"}
    if kind in simple:
        name = simple[kind]
    elif kind is ActionKind.TYPE:
        name, text = "type", action.text or ""
    elif kind is ActionKind.OPEN_APP:
        name, text = "open_app", action.text or ""
    elif kind is ActionKind.SCROLL:
        name, text = "scroll", action.direction.value if action.direction else "down"
    elif kind is ActionKind.KEY:
        key = action.keys[0]
        if key == "Enter":
            name = "enter" if "enter" in actions or "press_enter" not in actions else "press_enter"
        elif key == "Escape":
            name = "close/delete"
        else:
            back = {v: k for k, v in KEY_ACTIONS.items() if k != "enter" and k != "press_enter"}
            name = back.get(key)
            if name is None:
                name, text = "hotkey", key.lower()
    elif kind is ActionKind.HOTKEY:
        name, text = "hotkey", " ".join(k.lower() for k in action.keys)
    if name is None:  # drag, open_url: no GUI-R1 form
        return action.describe()
    return repr([{"action": name, "point": pt(point), "input_text": text}])


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


# -- parsing helpers --------------------------------------------------------------------------------


def _literal(node: ast.AST, text: str, at: SourcePositions, what: str) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        bad = next(
            (n for n in ast.walk(node)
             if not isinstance(n, (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.UnaryOp,
                                   ast.BinOp, ast.USub, ast.UAdd, ast.Add, ast.Sub, ast.Load))),
            node,
        )
        raise FormatParseError(
            f"GUI-R1 {what} is not a Python literal ({type(bad).__name__} found)", text, at.node(bad)
        ) from None


def _think_block(text: str, issues: list[str]) -> tuple[str | None, int]:
    """(the thought, where the last ``</think>`` starts or -1); a missing or unbalanced block is an issue."""
    think_close = text.rfind("</think>")
    think_open = text.find("<think>")
    if think_close >= 0:
        start = think_open + len("<think>") if 0 <= think_open < think_close else 0
        if think_open < 0 or think_open > think_close:
            issues.append("no <think> before </think>")
        return text[start:think_close].strip(), think_close
    if think_open >= 0:
        issues.append(f"<think> at character {think_open} is never closed with </think>")
    else:
        issues.append("no <think>...</think> block before the answer")
    return None, -1


def _answer_tags(text: str, think_close: int, issues: list[str]) -> tuple[int, int]:
    """Where ``<answer>`` and its ``</answer>`` start (the first answer after the think block, else the
    first at all); FormatParseError when there is none or it is never closed."""
    search_from = think_close + len("</think>") if think_close >= 0 else 0
    a_open = text.find("<answer>", search_from)
    if a_open < 0:
        a_open = text.find("<answer>")
    if a_open < 0:
        raise FormatParseError(
            "GUI-R1 output has no <answer> tag; expected <answer>[{'action': ..., 'point': [x, y], "
            "'input_text': ...}]</answer>", text, search_from,
        )
    a_close = text.find("</answer>", a_open + len("<answer>"))
    if a_close < 0:
        raise FormatParseError("GUI-R1 <answer> is never closed with </answer>", text, len(text))
    if text[a_close + len("</answer>"):].strip():
        issues.append("text after </answer>")
    if think_close >= 0 and text[think_close + len("</think>"):a_open].strip():
        issues.append("text between </think> and <answer>")
    return a_open, a_close


def _answer_items(text: str, body_start: int, a_close: int, issues: list[str]
                  ) -> tuple[list[ast.AST], SourcePositions]:
    """(the answer's action dict nodes, the positions of the stripped answer's nodes in ``text``)."""
    raw = text[body_start:a_close]
    content = raw.strip()
    base = body_start + len(raw) - len(raw.lstrip())
    if not content:
        raise FormatParseError("GUI-R1 <answer> is empty; expected a list of action dicts", text, body_start)
    at = SourcePositions(content, base)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(content, mode="eval")
    except SyntaxError as e:
        msg = e.msg if len(e.msg) <= 200 else e.msg[:200] + "..."
        raise FormatParseError(f"GUI-R1 answer is not a Python literal: {msg}", text, at.syntax_error(e)) from None
    except (ValueError, MemoryError, RecursionError) as e:  # a NUL or lone surrogate, a nest too deep
        raise FormatParseError(f"GUI-R1 answer cannot be read: {type(e).__name__}: {str(e)[:200]}", text,
                               base) from None
    body = tree.body
    if isinstance(body, (ast.List, ast.Tuple)):
        items = list(body.elts)
    elif isinstance(body, ast.Dict):
        issues.append("answer is a dict, not a one-element list")
        items = [body]
    else:
        raise FormatParseError(
            f"GUI-R1 answer must be a list of action dicts, got {type(body).__name__}", text, at.node(body),
        )
    if not items:
        raise FormatParseError("GUI-R1 answer is an empty list; expected one action dict", text, base)
    if len(items) > 1:
        issues.append(f"answer has {len(items)} action dicts; GUI-R1 was trained to give one")
    return items, at


def _dict_fields(node: ast.AST, text: str, at: SourcePositions, pos: int) -> dict[str, ast.AST]:
    """key -> value node of one answer dict, which must have an 'action' key."""
    if not isinstance(node, ast.Dict):
        raise FormatParseError(
            f"GUI-R1 answer items must be dicts with 'action', 'point' and 'input_text', got {type(node).__name__}",
            text, pos,
        )
    fields: dict[str, ast.AST] = {}
    for key, value in zip(node.keys, node.values):
        if key is None:
            raise FormatParseError("GUI-R1 answer dict uses ** unpacking", text, at.node(value))
        k = _literal(key, text, at, "dict key")
        if not isinstance(k, str):
            raise FormatParseError(f"GUI-R1 answer dict key {shown(k)} is not a string", text, at.node(key))
        fields[k] = value
    if "action" not in fields:
        raise FormatParseError("GUI-R1 answer dict has no 'action' key", text, pos)
    return fields


def _action_name(node: ast.AST, text: str, at: SourcePositions) -> tuple[str, int]:
    """(the known action name, lower-cased, and its position)."""
    a_pos = at.node(node)
    name = _literal(node, text, at, "'action' value")
    if not isinstance(name, str):
        raise FormatParseError(f"GUI-R1 'action' must be a string, got {shown(name)}", text, a_pos)
    name = name.strip().lower()
    if name not in ALL_ACTIONS:
        raise FormatParseError(
            f"unknown GUI-R1 action {shown(name)}; known actions: {', '.join(sorted(ALL_ACTIONS))}", text, a_pos
        )
    return name, a_pos


def _target(
    node: ast.AST | None, name: str, text: str, at: SourcePositions, space: ModelSpace, issues: list[str], pos: int,
) -> tuple[Any, tuple[float, float] | None]:
    """(the frame point of the 'point' value ``node`` or None, the model point or None) for action ``name``."""
    point = None
    model_point: tuple[float, float] | None = None
    p_pos = pos
    raw_point: Any = None
    if node is not None:
        p_pos = at.node(node)
        raw_point = _literal(node, text, at, "'point' value")
    uses_point = name in POINTED or name in ("type", "select", "scroll", "close/delete")
    if raw_point is not None and uses_point:
        if (not isinstance(raw_point, (list, tuple)) or len(raw_point) != 2
                or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in raw_point)):
            raise FormatParseError(f"GUI-R1 'point' must be [x, y] with two numbers, got {shown(raw_point)}",
                                   text, p_pos)
        if not all(isinstance(v, int) for v in raw_point):
            issues.append("point coordinates are not integers")
        try:
            point = space.to_point(raw_point[0], raw_point[1])
        except CoordinateError as e:
            raise CoordinateError(f"GUI-R1 {name} {e}", text, p_pos) from None
        if point is not None:  # inside the image, so both fit a float
            model_point = (float(raw_point[0]), float(raw_point[1]))
    if name in POINTED and point is None:
        what = "the no-target point [-100, -100]" if raw_point is not None else "no 'point'"
        raise FormatParseError(f"GUI-R1 {name} needs a target point, got {what}", text, p_pos)
    return point, model_point


class GuiR1Format:
    """GUI-R1's prompt and its ``<think>/<answer>`` Python-literal answer (see the module docstring)."""

    family = "gui-r1"

    def build_prompt(
        self, task: str, history: Sequence[HistoryEntry], space: ModelSpace, preset: ModelPreset
    ) -> Prompt:
        actions = action_list(preset.variant)
        text = "<image>\n" + prompt_text(task, history_text(history, space, actions), actions)
        return Prompt(
            messages=[
                {"role": "user", "content": [{"type": "image", "image": "current"}, {"type": "text", "text": text}]}
            ]
        )

    # -- parse ----------------------------------------------------------------------------------
    def parse(
        self, text: str, space: ModelSpace, preset: ModelPreset, history: Sequence[HistoryEntry] | None = None
    ) -> Parsed:
        text = check_output(text)
        try:
            prompted = set(action_list(preset.variant))
        except ValueError:
            prompted = set(ALL_ACTIONS)
        issues: list[str] = []
        thought, think_close = _think_block(text, issues)
        a_open, a_close = _answer_tags(text, think_close, issues)
        if think_close >= 0 and a_open < think_close:
            thought = None
        items, at = _answer_items(text, a_open + len("<answer>"), a_close, issues)

        actions: list[Action] = []
        model_points: list[tuple[float, float]] = []
        names: list[str] = []
        for item in items:
            action, mpt, name = self._item(item, text, at, space, issues, prompted)
            actions.append(action)
            names.append(name)
            if mpt is not None:
                model_points.append(mpt)
        info = {"format_issues": issues, "format_ok": not issues, "model_actions": names}
        return Parsed(actions=tuple(actions), model_points=tuple(model_points), thought=thought, info=info)

    def _item(
        self, node: ast.AST, text: str, at: SourcePositions, space: ModelSpace, issues: list[str], prompted: set[str],
    ) -> tuple[Action, tuple[float, float] | None, str]:
        pos = at.node(node)
        fields = _dict_fields(node, text, at, pos)
        missing = [k for k in ("point", "input_text") if k not in fields]
        if missing:
            issues.append(f"answer dict lacks {', '.join(repr(m) for m in missing)}")
        name, a_pos = _action_name(fields["action"], text, at)
        if name not in prompted:
            issues.append(f"action {name!r} is not in the prompted list")
        input_text, t_pos = NO_INPUT, pos
        if "input_text" in fields:
            t_pos = at.node(fields["input_text"])
            input_text = _literal(fields["input_text"], text, at, "'input_text' value")
            if not isinstance(input_text, str):
                raise FormatParseError(f"GUI-R1 'input_text' must be a string, got {shown(input_text)}", text, t_pos)
        has_text = input_text.strip() != "" and input_text.strip().lower() != NO_INPUT
        point, model_point = _target(fields.get("point"), name, text, at, space, issues, pos)
        try:
            action = self._action(name, point, input_text, has_text, text, t_pos, a_pos)
        except InvalidAction as e:
            raise FormatParseError(f"GUI-R1 {name} is not a valid action: {e}", text, a_pos) from None
        if action.point is None:
            model_point = None
        return action, model_point, name

    @staticmethod
    def _action(name: str, point: Any, input_text: str, has_text: bool, text: str, t_pos: int, a_pos: int) -> Action:
        if name in POINTED:
            return Action(POINTED[name], point=point)
        if name in ("type", "select", "open_app"):
            if not has_text:
                raise FormatParseError(f"GUI-R1 {name} needs an input_text, got {shown(input_text)}", text, t_pos)
            if name == "open_app":
                return Action(ActionKind.OPEN_APP, text=input_text)
            return Action(ActionKind.TYPE, text=input_text, point=point)
        if name == "scroll":
            direction = input_text.strip().lower()
            if direction not in SCROLL_DIRECTIONS:
                raise FormatParseError(
                    f"GUI-R1 scroll needs input_text up, down, left or right, got {shown(input_text)}", text, t_pos
                )
            return Action(ActionKind.SCROLL, direction=direction, point=point)
        if name in PLAIN:
            return Action(PLAIN[name])
        if name == "impossible":
            return Action(ActionKind.INFEASIBLE, text=IMPOSSIBLE_REASON)
        if name in KEY_ACTIONS:
            return Action(ActionKind.KEY, keys=(KEY_ACTIONS[name],))
        if name == "close/delete":
            if point is not None:
                return Action(ActionKind.CLICK, point=point)
            return Action(ActionKind.KEY, keys=("Escape",))
        if name == "hotkey":
            if not has_text:
                raise FormatParseError(f"GUI-R1 hotkey needs the keys in input_text, got {shown(input_text)}", text,
                                       t_pos)
            parts = [p for p in re.split(r"\s*\+\s*|\s+", input_text.strip()) if p]
            try:
                keys = tuple(normalize_key(p) for p in parts)
            except InvalidAction as e:
                raise FormatParseError(f"GUI-R1 hotkey {shown(input_text)}: {e}", text, t_pos) from None
            kind = ActionKind.KEY if len(keys) == 1 else ActionKind.HOTKEY
            return Action(kind, keys=keys)
        if name == "press_recent":
            raise FormatParseError(
                "GUI-R1 press_recent (the recent-apps switcher) has no unified action; handeye cannot execute it",
                text, a_pos,
            )
        raise FormatParseError(f"unknown GUI-R1 action {name!r}", text, a_pos)  # pragma: no cover

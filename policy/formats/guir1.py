"""GUI-R1 (arXiv 2504.10458, ritzz-ai/GUI-R1): the format (prompt, parser, answers) and its output parser.

The prompt, the history text, the action lists and the answer literals are in ``policy.formats.guir1_prompts``.

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

What SFT writes (``render_answer``) is ``<think>The next step is ...</think> <answer>[...]</answer>`` with the action
literal of ``guir1_prompts.answer_from_action``; for a grounding target (``render_target``) the target's action name,
point and text. ``strict_parse`` is the parser: the released reward reads every answer (its format check R_f,
``train.rewards.guir1_format_ok``, is one term of its score, not a gate). On the offline action benchmarks the
released scripts' settings and reader apply (``released_scripts``: the benchmark's action list, no training-size
image cap, ``guir1_prompts.read_released``).
"""

from __future__ import annotations

from types import MappingProxyType

import ast
import re
import warnings
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from devices.actions import Action, ActionKind
from devices.errors import InvalidAction
from devices.keys import normalize_key
from policy.base import HistoryEntry
from policy.coords import ModelSpace, PreResize
from policy.errors import CoordinateError, FormatParseError, NoAnswerForm
from policy.formats.base import (AnswerForm, ModelFormat, Parsed, Prompt, ReleasedScripts, check_output,
                                 shown)
from policy.formats.guir1_prompts import (ALL_ACTIONS, IMPOSSIBLE_REASON, KEY_ACTIONS, NO_INPUT, NO_TARGET, PLAIN,
                                          POINTED, SCROLL_DIRECTIONS, action_list, action_name, answer_from_action,
                                          history_text, prompt_text, read_released)
from policy.formats.positions import SourcePositions
from policy.presets import ModelPreset

__all__ = ["GuiR1Format"]


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


class GuiR1Format(ModelFormat):
    """GUI-R1's prompt and its ``<think>/<answer>`` Python-literal answer (see the module docstring)."""

    family = "gui-r1"
    grounding_variant = "screenspot"
    """The prompt of GUI-R1's released ScreenSpot script (its action list is ['click']: the first click's point is
    scored)."""
    screen_variants = MappingProxyType({"computer": "high", "phone": "androidcontrol"})
    """GUI-R1's high-level action list on a computer; on a phone, AndroidControl's (the released prompt's phone
    actions: wait, long_press, click, press_back, type, open_app, scroll)."""

    def answer_form(self, preset: ModelPreset) -> AnswerForm:
        return AnswerForm.ACTION_LIST

    def thinks(self, preset: ModelPreset) -> bool:
        return True

    def render_answer(self, action: Action, space: ModelSpace, preset: ModelPreset, *, instruction: str = "",
                      box: Sequence[float] | None = None) -> str:
        if action_name(action) is None:
            raise NoAnswerForm(f"GUI-R1 has no action for {action.kind.value}")
        literal = answer_from_action(action, space, action_list(preset.variant))
        return f"<think>The next step is {action.kind.value}.</think> <answer>{literal}</answer>"

    def render_target(self, point: tuple[float, float] | None, *, instruction: str, action: str | None = None,
                      text: str | None = None, think: bool = True) -> str:
        """The target's action (a click on its point, ``impossible`` when it is absent, unless it names another),
        at its point (``NO_TARGET`` when none), with its text (``NO_INPUT`` when none); always with a think block,
        which GUI-R1's prompt asks for."""
        name = action or ("click" if point is not None else "impossible")
        xy = [round(point[0]), round(point[1])] if point is not None else list(NO_TARGET)
        item = {"action": name, "point": xy, "input_text": text or NO_INPUT}
        return f"<think>The task asks for {name}.</think> <answer>{[item]!r}</answer>"

    def released_scripts(self, preset: ModelPreset, variant: str) -> ReleasedScripts:
        """The benchmark's action list, and the image size of the released inference scripts (qwen-vl-utils'
        defaults, without the training cap of run time); their reader."""
        return ReleasedScripts(replace(preset, variant=variant, pre_resize=PreResize.NONE, pre_resize_pixels=0),
                               read_released)

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

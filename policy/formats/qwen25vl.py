"""Qwen2.5-VL's native formats (QwenLM/Qwen2.5-VL cookbooks; docs: research notes §5).

Three prompt variants, chosen by ``preset.variant``:

- ``grounding`` (spatial_understanding cookbook): system "You are a helpful assistant", user text
  ``Locate the {target}, output its bbox coordinates using JSON format.`` then the screenshot.
  The answer, usually in a json code fence, is ``[{"bbox_2d": [x1, y1, x2, y2], "label": ...}]``
  (a click at each box's centre) or ``[{"point_2d": [x, y]}]`` items; the cookbook's XML point
  form ``<points x1=".." y1="..">`` is accepted too. Every item is a candidate, in order.
  Trailing chatter is ignored; a list cut off mid-item keeps the complete items before it.
- ``computer_use`` and ``mobile_use`` (computer_use / mobile_agent cookbooks): qwen-agent's
  NousFnCallPrompt system message with the tool's JSON signature, whose description states
  ``* The screen's resolution is {w'}x{h'}.``; replies are
  ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` blocks, each one action.

Coordinates are absolute pixels of the image the model saw (w' x h'), mapped with
``ModelSpace.to_point``. History is rendered as the mobile cookbook does (one user turn: the
query, then "Task progress ... Step i: {tool-call json}; ", then only the current screenshot),
reused for computer_use (whose cookbook is single-step: with no history its user text is the bare
query). Only executed actions are listed (the cookbook lists operations done on the device);
past points are converted back to model pixels with ``space.from_point`` and rounded; an action
the tool cannot express (e.g. back on a desktop) is shown by its short description. The grounding
variant is single-step and shows no history.

Mapping choices (computer_use):

- ``left_click`` / ``right_click`` / ``double_click`` / ``mouse_move`` -> click / right_click /
  double_click / hover at ``coordinate``. A click without a coordinate clicks where the cursor is:
  the last point of an earlier tool call in the same reply, else of the last executed action in
  the history (``parse(..., history=...)`` or the history given to the latest ``build_prompt``).
- ``left_click_drag`` drags from the cursor (found the same way) to ``coordinate``; with no known
  cursor it is a FormatParseError, since guessing a start would drag something else.
- ``middle_click`` is a FormatParseError: the unified action space has no middle button, and a
  left click instead (e.g. navigating instead of opening a new tab) would do something the model
  did not ask for.
- ``scroll``: ``pixels`` > 0 scrolls up, < 0 down; amount = |pixels| / model image height
  (screens); at ``coordinate`` when given. 0 pixels is an error.
- ``key``: one key -> key, several -> hotkey (names normalized by ``devices.keys``; a single
  ``"ctrl+c"`` string is split on ``+``).
- ``terminate``: success -> finish, failure -> infeasible.

Mapping choices (mobile_use): click, long_press (``time`` -> duration), swipe -> drag from
``coordinate`` to ``coordinate2``, type, open -> open_app, wait, terminate as above;
``system_button`` Back -> back, Home -> home, Enter -> key Enter, Menu -> FormatParseError (no
app-switcher action in the unified space); ``key`` takes an adb keyevent name (``KEYCODE_`` prefix
optional): back/home map to those actions, enter/del/tab/escape/space/dpad_* to keys, others are
errors.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from devices.actions import Action, ActionKind, Point, ScrollDirection
from devices.errors import InvalidAction
from devices.keys import normalize_key
from policy.base import HistoryEntry
from policy.coords import ModelSpace
from policy.errors import CoordinateError, FormatParseError
from policy.formats.base import Parsed, Prompt
from policy.presets import ModelPreset

__all__ = [
    "Qwen25VLFormat",
    "computer_use_tool",
    "mobile_use_tool",
    "nous_system_prompt",
    "scan_json_list",
    "model_point",
    "make_action",
    "decode_json",
]

SYSTEM_DEFAULT = "You are a helpful assistant"
"""The spatial-understanding cookbook's system prompt (no final period there)."""

GROUNDING_TEMPLATE = "Locate the {target}, output its bbox coordinates using JSON format."

PROGRESS_PREFIX = "Task progress (You have done the following operation on the current device): "

_DECODER = json.JSONDecoder()
_WS = " \t\r\n"


# -- shared parsing helpers (also used by the InfiGUI-G1 format, a Qwen2.5-VL fine-tune) ------------

class JsonError(Exception):
    """A JSON value that does not decode: ``msg`` at offset ``pos``."""

    def __init__(self, msg: str, pos: int) -> None:
        super().__init__(msg)
        self.msg, self.pos = msg, pos


def decode_json(text: str, pos: int) -> tuple[Any, int]:
    """(value, end) of the JSON value starting at ``text[pos]``. Every failure, including the ones
    ``json`` does not report as JSONDecodeError (integers over Python's digit limit, nesting
    deeper than the recursion limit), is a JsonError with an offset."""
    try:
        return _DECODER.raw_decode(text, pos)
    except json.JSONDecodeError as exc:
        raise JsonError(exc.msg, exc.pos) from None
    except (ValueError, RecursionError) as exc:
        raise JsonError(str(exc) or type(exc).__name__, pos) from None


def skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _WS:
        pos += 1
    return pos


@dataclass(frozen=True, slots=True)
class ListScan:
    """The complete items of a JSON list, each with the offset where it starts."""

    items: tuple[tuple[int, Any], ...]
    truncated: bool
    """True when the list did not close properly: the items after the last complete one are lost."""
    stop: int
    """Where scanning stopped (after the closing bracket, or where the list broke off)."""


def scan_json_list(text: str, start: int) -> ListScan:
    """Decode the JSON list opening at ``text[start] == "["`` item by item.

    Stops at the closing bracket; anything after it is ignored. If an item cannot be decoded, or
    something other than ``,`` / ``]`` follows one, the list is taken as cut off there and the
    complete items before it are returned with ``truncated=True``. With no complete item at all,
    that is a FormatParseError at the offending offset.
    """
    if start >= len(text) or text[start] != "[":
        raise FormatParseError("expected a JSON list starting with '['", text, start)
    items: list[tuple[int, Any]] = []
    pos = skip_ws(text, start + 1)
    if pos < len(text) and text[pos] == "]":
        return ListScan((), False, pos + 1)
    while True:
        if pos >= len(text):
            problem, where = "the JSON list ends before its closing ']'", len(text)
            break
        try:
            value, end = decode_json(text, pos)
        except JsonError as exc:
            if exc.pos >= len(text):
                problem = f"the JSON list is cut off at the end of the output ({exc.msg})"
            else:
                problem = f"invalid JSON in the list item: {exc.msg}"
            where = exc.pos
            break
        items.append((pos, value))
        pos = skip_ws(text, end)
        if pos < len(text) and text[pos] == "]":
            return ListScan(tuple(items), False, pos + 1)
        if pos < len(text) and text[pos] == ",":
            pos = skip_ws(text, pos + 1)
            continue
        problem = "the JSON list ends before its closing ']'" if pos >= len(text) else \
            f"expected ',' or ']' after a list item, found {text[pos]!r}"
        where = pos
        break
    if not items:
        raise FormatParseError(problem, text, where)
    return ListScan(tuple(items), True, where)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def model_point(space: ModelSpace, value: Any, what: str, text: str, pos: int) -> tuple[tuple[float, float], Point]:
    """Validate ``value`` as an [x, y] model-space point and map it to the frame.

    Returns ((x', y') as floats, normalized Point). Every problem is a FormatParseError (a
    CoordinateError when the point lies outside the model image) at ``pos``.
    """
    if not isinstance(value, (list, tuple)) or len(value) != 2 or not all(_is_number(v) for v in value):
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


# -- the tool signatures --------------------------------------------------------------------------

def _action_doc(lines: Sequence[tuple[str, str]]) -> str:
    return "The action to perform. The available actions are:\n" + "\n".join(f"* `{a}`: {d}" for a, d in lines)


_COMPUTER_ACTIONS = (
    ("key", "Performs key down presses on the arguments passed in order, then performs key releases in reverse order."),
    ("type", "Type a string of text on the keyboard."),
    ("mouse_move", "Move the cursor to a specified (x, y) pixel coordinate on the screen."),
    ("left_click", "Click the left mouse button."),
    ("left_click_drag", "Click and drag the cursor to a specified (x, y) pixel coordinate on the screen."),
    ("right_click", "Click the right mouse button."),
    ("middle_click", "Click the middle mouse button."),
    ("double_click", "Double-click the left mouse button."),
    ("scroll", "Performs a scroll of the mouse scroll wheel."),
    ("wait", "Wait specified seconds for the change to happen."),
    ("terminate", "Terminate the current task and report its completion status."),
)

_MOBILE_ACTIONS = (
    ("key", "Perform a key event on the mobile device.\n    - This supports adb's `keyevent` syntax.\n"
            "    - Examples: \"volume_up\", \"volume_down\", \"power\", \"camera\", \"clear\"."),
    ("click", "Click the point on the screen with coordinate (x, y)."),
    ("long_press", "Press the point on the screen with coordinate (x, y) for specified seconds."),
    ("swipe", "Swipe from the starting point with coordinate (x, y) to the end point with coordinates2 (x2, y2)."),
    ("type", "Input the specified text into the activated input box."),
    ("system_button", "Press the system button."),
    ("open", "Open an app on the device."),
    ("wait", "Wait specified seconds for the change to happen."),
    ("terminate", "Terminate the current task and report its completion status."),
)

_COORD_DOC = ("(x, y): The x (pixels from the left edge) and y (pixels from the top edge) coordinates to move the "
              "mouse to.")


def _tool(name: str, description: str, properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name_for_human": name,
            "name": name,
            "description": description,
            "parameters": {"properties": properties, "required": ["action"], "type": "object"},
            "args_format": "Format the arguments as a JSON object.",
        },
    }


def computer_use_tool(width: int, height: int) -> dict[str, Any]:
    """The computer_use function signature for a w' x h' model image."""
    description = (
        "Use a mouse and keyboard to interact with a computer, and take screenshots.\n"
        "* This is an interface to a desktop GUI. You do not have access to a terminal or applications menu. "
        "You must click on desktop icons to start applications.\n"
        "* Some applications may take time to start or process actions, so you may need to wait and take "
        "successive screenshots to see the results of your actions. E.g. if you click on Firefox and a window "
        "doesn't open, try wait and taking another screenshot.\n"
        f"* The screen's resolution is {width}x{height}.\n"
        "* Whenever you intend to move the cursor to click on an element like an icon, you should consult a "
        "screenshot to determine the coordinates of the element before moving the cursor.\n"
        "* If you tried clicking on a program or link but it failed to load, even after waiting, try adjusting "
        "your cursor position so that the tip of the cursor visually falls on the element that you want to click.\n"
        "* Make sure to click any buttons, links, icons, etc with the cursor tip in the center of the element. "
        "Don't click boxes on their edges unless asked."
    )
    properties = {
        "action": {"description": _action_doc(_COMPUTER_ACTIONS), "enum": [a for a, _ in _COMPUTER_ACTIONS],
                   "type": "string"},
        "keys": {"description": "Required only by `action=key`.", "type": "array"},
        "text": {"description": "Required only by `action=type`.", "type": "string"},
        "coordinate": {"description": _COORD_DOC + " Required only by `action=mouse_move` and "
                                                   "`action=left_click_drag`.", "type": "array"},
        "pixels": {"description": "The amount of scrolling to perform. Positive values scroll up, negative values "
                                  "scroll down. Required only by `action=scroll`.", "type": "number"},
        "time": {"description": "The seconds to wait. Required only by `action=wait`.", "type": "number"},
        "status": {"description": "The status of the task. Required only by `action=terminate`.", "type": "string",
                   "enum": ["success", "failure"]},
    }
    return _tool("computer_use", description, properties)


def mobile_use_tool(width: int, height: int) -> dict[str, Any]:
    """The mobile_use function signature for a w' x h' model image."""
    description = (
        "Use a touchscreen to interact with a mobile device, and take screenshots.\n"
        "* This is an interface to a mobile device with touchscreen. You can perform actions like clicking, "
        "typing, swiping, etc.\n"
        "* Some applications may take time to start or process actions, so you may need to wait and take "
        "successive screenshots to see the results of your actions.\n"
        f"* The screen's resolution is {width}x{height}.\n"
        "* Make sure to click any buttons, links, icons, etc with the cursor tip in the center of the element. "
        "Don't click boxes on their edges unless asked."
    )
    properties = {
        "action": {"description": _action_doc(_MOBILE_ACTIONS), "enum": [a for a, _ in _MOBILE_ACTIONS],
                   "type": "string"},
        "coordinate": {"description": _COORD_DOC + " Required only by `action=click`, `action=long_press`, and "
                                                   "`action=swipe`.", "type": "array"},
        "coordinate2": {"description": _COORD_DOC + " Required only by `action=swipe`.", "type": "array"},
        "text": {"description": "Required only by `action=key`, `action=type`, and `action=open`.", "type": "string"},
        "time": {"description": "The seconds to wait. Required only by `action=long_press` and `action=wait`.",
                 "type": "number"},
        "button": {"description": "Back means returning to the previous interface, Home means returning to the "
                                  "desktop, Menu means opening the application background menu, and Enter means "
                                  "pressing the enter. Required only by `action=system_button`",
                   "enum": ["Back", "Home", "Menu", "Enter"], "type": "string"},
        "status": {"description": "The status of the task. Required only by `action=terminate`.", "type": "string",
                   "enum": ["success", "failure"]},
    }
    return _tool("mobile_use", description, properties)


def nous_system_prompt(tools: Sequence[dict[str, Any]]) -> str:
    """qwen-agent's NousFnCallPrompt system message (English), one tool JSON per line."""
    tool_lines = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return (
        "You are a helpful assistant.\n\n# Tools\n\n"
        "You may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        f"{tool_lines}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


# -- history rendering ----------------------------------------------------------------------------

_XDOTOOL_NAMES = {"Control": "ctrl", "Alt": "alt", "Shift": "shift", "Meta": "super", "Enter": "Return",
                  "Space": "space", "ArrowUp": "Up", "ArrowDown": "Down", "ArrowLeft": "Left", "ArrowRight": "Right",
                  "PageUp": "Page_Up", "PageDown": "Page_Down", "Backspace": "BackSpace"}
_ADB_NAMES = {"Enter": "enter", "Backspace": "del", "Delete": "forward_del", "Tab": "tab", "Escape": "escape",
              "Space": "space", "ArrowUp": "dpad_up", "ArrowDown": "dpad_down", "ArrowLeft": "dpad_left",
              "ArrowRight": "dpad_right"}


def _pix(space: ModelSpace, point: Point) -> list[int]:
    x, y = space.from_point(point)
    return [int(round(x)), int(round(y))]


def _computer_args(action: Action, space: ModelSpace) -> dict[str, Any] | None:
    k = action.kind
    simple = {ActionKind.CLICK: "left_click", ActionKind.DOUBLE_CLICK: "double_click",
              ActionKind.RIGHT_CLICK: "right_click", ActionKind.HOVER: "mouse_move"}
    if k in simple:
        return {"action": simple[k], "coordinate": _pix(space, action.point)}  # type: ignore[arg-type]
    if k is ActionKind.DRAG:
        return {"action": "left_click_drag", "coordinate": _pix(space, action.end)}  # type: ignore[arg-type]
    if k is ActionKind.TYPE:
        return {"action": "type", "text": action.text}
    if k in (ActionKind.KEY, ActionKind.HOTKEY):
        return {"action": "key", "keys": [_XDOTOOL_NAMES.get(key, key) for key in action.keys]}
    if k is ActionKind.SCROLL and action.direction in (ScrollDirection.UP, ScrollDirection.DOWN):
        pixels = int(round((action.amount or 0.5) * space.extent[1]))
        signed = pixels if action.direction is ScrollDirection.UP else -pixels
        args: dict[str, Any] = {"action": "scroll", "pixels": signed}
        if action.point is not None:
            args["coordinate"] = _pix(space, action.point)
        return args
    if k is ActionKind.WAIT:
        return {"action": "wait", "time": action.duration_s}
    if k is ActionKind.FINISH:
        return {"action": "terminate", "status": "success"}
    if k is ActionKind.INFEASIBLE:
        return {"action": "terminate", "status": "failure"}
    return None


def _mobile_args(action: Action, space: ModelSpace) -> dict[str, Any] | None:
    k = action.kind
    if k is ActionKind.CLICK:
        return {"action": "click", "coordinate": _pix(space, action.point)}  # type: ignore[arg-type]
    if k is ActionKind.LONG_PRESS:
        return {"action": "long_press", "coordinate": _pix(space, action.point),  # type: ignore[arg-type]
                "time": action.duration_s}
    if k is ActionKind.DRAG:
        return {"action": "swipe", "coordinate": _pix(space, action.point),  # type: ignore[arg-type]
                "coordinate2": _pix(space, action.end)}  # type: ignore[arg-type]
    if k is ActionKind.TYPE:
        return {"action": "type", "text": action.text}
    if k is ActionKind.KEY and action.keys == ("Enter",):
        return {"action": "system_button", "button": "Enter"}
    if k is ActionKind.KEY and action.keys[0] in _ADB_NAMES:
        return {"action": "key", "text": _ADB_NAMES[action.keys[0]]}
    if k is ActionKind.BACK:
        return {"action": "system_button", "button": "Back"}
    if k is ActionKind.HOME:
        return {"action": "system_button", "button": "Home"}
    if k is ActionKind.OPEN_APP:
        return {"action": "open", "text": action.text}
    if k is ActionKind.WAIT:
        return {"action": "wait", "time": action.duration_s}
    if k is ActionKind.FINISH:
        return {"action": "terminate", "status": "success"}
    if k is ActionKind.INFEASIBLE:
        return {"action": "terminate", "status": "failure"}
    return None


def render_step(action: Action, space: ModelSpace, tool: str) -> str:
    """A past action as the family writes it: the tool-call JSON in model pixels, or, for an action
    the tool cannot express, its short description."""
    args = (_computer_args if tool == "computer_use" else _mobile_args)(action, space)
    if args is None:
        return action.describe()
    return json.dumps({"name": tool, "arguments": args}, ensure_ascii=False)


def _last_cursor(history: Sequence[HistoryEntry]) -> Point | None:
    for entry in reversed(history):
        if entry.executed and entry.action is not None:
            a = entry.action
            if a.kind is ActionKind.DRAG:
                return a.end
            if a.point is not None:
                return a.point
    return None


# -- the format -------------------------------------------------------------------------------------

_TOOL_CALL = re.compile(r"<tool_call>")
_TOOL_END = "</tool_call>"
_FENCE = re.compile(r"```(?:json|JSON)?[ \t]*\n?")
_XML_POINT = re.compile(r"<points?\s+([^>]*?)>")
_XML_ATTR = re.compile(r"([xy])(\d+)\s*=\s*\"\s*(-?[0-9.]+)\s*\"")

_ADB_KEYS = {"enter": "Enter", "del": "Backspace", "forward_del": "Delete", "tab": "Tab", "escape": "Escape",
             "space": "Space", "dpad_up": "ArrowUp", "dpad_down": "ArrowDown", "dpad_left": "ArrowLeft",
             "dpad_right": "ArrowRight", "move_home": "Home", "move_end": "End", "page_up": "PageUp",
             "page_down": "PageDown"}


class Qwen25VLFormat:
    """Qwen2.5-VL: grounding, computer_use and mobile_use (see the module docstring)."""

    family = "qwen2.5-vl"
    variants = ("grounding", "computer_use", "mobile_use")

    def __init__(self) -> None:
        self._cursor: Point | None = None
        """The cursor after the history of the latest ``build_prompt`` (for clicks without a point, drags)."""

    # -- prompt ------------------------------------------------------------------------------------
    def _variant(self, preset: ModelPreset) -> str:
        variant = preset.variant or "computer_use"
        if variant not in self.variants:
            raise ValueError(f"qwen2.5-vl has no prompt variant {variant!r}; use one of {', '.join(self.variants)}")
        return variant

    def build_prompt(
        self, task: str, history: Sequence[HistoryEntry], space: ModelSpace, preset: ModelPreset
    ) -> Prompt:
        variant = self._variant(preset)
        self._cursor = _last_cursor(history)
        if variant == "grounding":
            target = re.sub(r"^\s*the\s+", "", task.strip(), flags=re.IGNORECASE)
            return Prompt([
                {"role": "system", "content": [{"type": "text", "text": SYSTEM_DEFAULT}]},
                {"role": "user", "content": [{"type": "text", "text": GROUNDING_TEMPLATE.format(target=target)},
                                             {"type": "image", "image": "current"}]},
            ])
        w, h = space.input_size
        tool = computer_use_tool(w, h) if variant == "computer_use" else mobile_use_tool(w, h)
        steps = [e.action for e in history if e.executed and e.action is not None]
        if steps or variant == "mobile_use":
            rendered = "".join(f"Step {i}: {render_step(a, space, variant)}; " for i, a in enumerate(steps, 1))
            user_text = f"The user query:  {task}\n{PROGRESS_PREFIX}{rendered}"
        else:
            user_text = task
        return Prompt([
            {"role": "system", "content": [{"type": "text", "text": nous_system_prompt([tool])}]},
            {"role": "user", "content": [{"type": "text", "text": user_text}, {"type": "image", "image": "current"}]},
        ])

    # -- parse -------------------------------------------------------------------------------------
    def parse(self, text: str, space: ModelSpace, preset: ModelPreset,
              history: Sequence[HistoryEntry] | None = None) -> Parsed:
        """Actions from a reply. ``history`` (optional) gives the cursor position for clicks without
        a coordinate and drags; without it, the history of the latest ``build_prompt`` is used."""
        if not isinstance(text, str):
            raise FormatParseError(f"model output must be text, got {type(text).__name__}")
        variant = self._variant(preset)
        if variant == "grounding":
            return self._parse_grounding(text, space)
        cursor = _last_cursor(history) if history is not None else self._cursor
        return self._parse_tool_calls(text, space, variant, cursor)

    # grounding
    def _parse_grounding(self, text: str, space: ModelSpace) -> Parsed:
        fence = _FENCE.search(text)
        search_from = fence.end() if fence else 0
        starts = [i for i in (text.find("[", search_from), text.find("{", search_from)) if i >= 0]
        if not starts:
            xml = self._parse_xml_points(text, space)
            if xml is not None:
                return xml
            where = "inside the code fence" if fence else "in the output"
            raise FormatParseError(f"no JSON list or object {where}; expected [{{\"bbox_2d\": [x1, y1, x2, y2]}}, ...]",
                                   text, search_from)
        start = min(starts)
        if text[start] == "[":
            scan = scan_json_list(text, start)
            items, truncated = scan.items, scan.truncated
        else:
            try:
                value, _ = decode_json(text, start)
            except JsonError as exc:
                raise FormatParseError(f"invalid JSON object: {exc.msg}", text, exc.pos) from None
            items, truncated = ((start, value),), False
        if not items:
            raise FormatParseError("the JSON list is empty: no box or point to act on", text, start)
        actions, points, boxes, labels = [], [], [], []
        for pos, item in items:
            if not isinstance(item, dict):
                raise FormatParseError(f"list item must be an object with bbox_2d or point_2d, got "
                                       f"{type(item).__name__}", text, pos)
            if "bbox_2d" in item:
                box = item["bbox_2d"]
                if not isinstance(box, (list, tuple)) or len(box) != 4 or not all(_is_number(v) for v in box):
                    raise FormatParseError(f"bbox_2d must be [x1, y1, x2, y2] with four numbers, got "
                                           f"{json.dumps(box, ensure_ascii=False)[:80]}", text, pos)
                (xa, ya), pa = model_point(space, box[:2], "bbox_2d corner (x1, y1)", text, pos)
                (xb, yb), pb = model_point(space, box[2:], "bbox_2d corner (x2, y2)", text, pos)
                centre = ((xa + xb) / 2, (ya + yb) / 2)
                (_, point) = model_point(space, list(centre), "bbox_2d centre", text, pos)
                boxes.append((min(pa.x, pb.x), min(pa.y, pb.y), max(pa.x, pb.x), max(pa.y, pb.y)))
                points.append(centre)
            elif "point_2d" in item:
                mp, point = model_point(space, item["point_2d"], "point_2d", text, pos)
                boxes.append(None)
                points.append(mp)
            else:
                raise FormatParseError(f"list item has neither bbox_2d nor point_2d (keys: {sorted(item)[:6]})",
                                       text, pos)
            labels.append(item.get("label"))
            actions.append(make_action(text, pos, kind=ActionKind.CLICK, point=point))
        return Parsed(tuple(actions), tuple(points), None,
                      {"boxes": tuple(boxes), "labels": tuple(labels), "truncated": truncated})

    def _parse_xml_points(self, text: str, space: ModelSpace) -> Parsed | None:
        actions, points = [], []
        for m in _XML_POINT.finditer(text):
            coords: dict[str, dict[str, float]] = {}
            for axis, idx, value in _XML_ATTR.findall(m.group(1)):
                try:
                    coords.setdefault(idx, {})[axis] = float(value)
                except ValueError:
                    raise FormatParseError(f"<points> attribute {axis}{idx} is not a number: {value!r}",
                                           text, m.start()) from None
            for idx in sorted(coords, key=int):
                xy = coords[idx]
                if set(xy) != {"x", "y"}:
                    raise FormatParseError(f"<points> has x{idx} or y{idx} without the other", text, m.start())
                mp, point = model_point(space, [xy["x"], xy["y"]], f"<points> x{idx}, y{idx}", text, m.start())
                points.append(mp)
                actions.append(make_action(text, m.start(), kind=ActionKind.CLICK, point=point))
        if not actions:
            return None
        return Parsed(tuple(actions), tuple(points), None, {"truncated": False})

    # tool calls
    def _tool_calls(self, text: str, tool: str) -> list[tuple[int, dict[str, Any]]]:
        calls: list[tuple[int, dict[str, Any]]] = []
        opens = [m.end() for m in _TOOL_CALL.finditer(text)]
        if not opens:
            # tolerate a bare {"name": ..., "arguments": ...} without the tags
            bare = text.find("{")
            try:
                value = decode_json(text, bare)[0] if bare >= 0 else None
            except JsonError:
                value = None
            if not (isinstance(value, dict) and "name" in value):
                raise FormatParseError(f"no <tool_call> block: expected <tool_call>\\n{{\"name\": \"{tool}\", "
                                       f"\"arguments\": {{...}}}}\\n</tool_call>", text, 0)
            opens = [bare]
        for start in opens:
            pos = skip_ws(text, start)
            if pos >= len(text) or text[pos] != "{":
                raise FormatParseError("expected a JSON object after <tool_call>", text, pos)
            try:
                value, _ = decode_json(text, pos)
            except JsonError as exc:
                raise FormatParseError(f"invalid JSON in the tool call: {exc.msg}", text, exc.pos) from None
            if not isinstance(value, dict):
                raise FormatParseError("the tool call is not a JSON object", text, pos)
            calls.append((pos, value))
        return calls

    def _parse_tool_calls(self, text: str, space: ModelSpace, tool: str, cursor: Point | None) -> Parsed:
        actions: list[Action] = []
        points: list[tuple[float, float]] = []
        for pos, call in self._tool_calls(text, tool):
            name = call.get("name")
            if name != tool:
                raise FormatParseError(f"unknown function {name!r}; the only tool is {tool!r}", text, pos)
            args = call.get("arguments")
            if isinstance(args, str):  # some servers pass the arguments as a JSON string
                try:
                    args = json.loads(args)
                except (ValueError, RecursionError) as exc:
                    raise FormatParseError(f"the arguments string is not JSON: {exc}", text, pos) from None
            if not isinstance(args, dict):
                raise FormatParseError(f"{tool} call needs an 'arguments' object, got {type(args).__name__}", text, pos)
            if "action" not in args:
                raise FormatParseError(f"{tool} arguments have no 'action' (keys: {sorted(args)[:6]})", text, pos)
            mapper = self._computer_action if tool == "computer_use" else self._mobile_action
            action, mps = mapper(args, space, text, pos, cursor)
            actions.append(action)
            points.extend(mps)
            if action.kind is ActionKind.DRAG:
                cursor = action.end
            elif action.point is not None:
                cursor = action.point
        first = text.find("<tool_call>")
        thought = text[:first].strip() if first > 0 else ""
        return Parsed(tuple(actions), tuple(points), thought or None, {"tool_calls": len(actions)})

    @staticmethod
    def _need(args: dict[str, Any], key: str, action: str, text: str, pos: int) -> Any:
        if key not in args or args[key] is None:
            raise FormatParseError(f"action {action!r} needs {key!r}", text, pos)
        return args[key]

    @staticmethod
    def _number(args: dict[str, Any], key: str, action: str, text: str, pos: int,
                default: float | None = None) -> float | None:
        value = args.get(key)
        if value is None:
            if default is None:
                raise FormatParseError(f"action {action!r} needs {key!r}", text, pos)
            return default
        if not _is_number(value):
            raise FormatParseError(f"{action} {key} must be a number, got {value!r}", text, pos)
        return float(value)

    def _computer_action(self, args: dict[str, Any], space: ModelSpace, text: str, pos: int,
                         cursor: Point | None) -> tuple[Action, list[tuple[float, float]]]:
        name = args["action"]
        mps: list[tuple[float, float]] = []

        def at(required: bool) -> Point | None:
            if args.get("coordinate") is None:
                if required:
                    raise FormatParseError(f"action {name!r} needs 'coordinate'", text, pos)
                return None
            mp, p = model_point(space, args["coordinate"], f"{name} coordinate", text, pos)
            mps.append(mp)
            return p

        def at_or_cursor() -> Point:
            p = at(False)
            if p is not None:
                return p
            if cursor is None:
                raise FormatParseError(f"action {name!r} has no 'coordinate' and no earlier cursor position is known",
                                       text, pos)
            mps.append(space.from_point(cursor))
            return cursor

        clicks = {"left_click": ActionKind.CLICK, "right_click": ActionKind.RIGHT_CLICK,
                  "double_click": ActionKind.DOUBLE_CLICK}
        if name in clicks:
            return make_action(text, pos, kind=clicks[name], point=at_or_cursor()), mps
        if name == "mouse_move":
            return make_action(text, pos, kind=ActionKind.HOVER, point=at(True)), mps
        if name == "left_click_drag":
            if cursor is None:
                raise FormatParseError("left_click_drag drags from the current cursor, but no earlier cursor position "
                                       "is known (no mouse_move or click before it)", text, pos)
            mps.append(space.from_point(cursor))
            end = at(True)
            return make_action(text, pos, kind=ActionKind.DRAG, point=cursor, end=end), mps
        if name == "middle_click":
            raise FormatParseError("middle_click is not supported: the unified action space has no middle button",
                                   text, pos)
        if name == "type":
            value = self._need(args, "text", name, text, pos)
            if not isinstance(value, str):
                raise FormatParseError(f"type text must be a string, got {value!r}", text, pos)
            return make_action(text, pos, kind=ActionKind.TYPE, text=value), mps
        if name == "key":
            keys = self._need(args, "keys", name, text, pos)
            if isinstance(keys, str):
                keys = [keys]
            if not isinstance(keys, list) or not keys or not all(isinstance(k, str) and k for k in keys):
                raise FormatParseError(f"key keys must be a non-empty list of key names, got {keys!r}", text, pos)
            if len(keys) == 1 and len(keys[0]) > 1 and "+" in keys[0]:
                keys = [k for k in keys[0].split("+")]
            try:
                norm = tuple(normalize_key(k) for k in keys)
            except InvalidAction as exc:
                raise FormatParseError(f"bad key: {exc}", text, pos) from None
            kind = ActionKind.KEY if len(norm) == 1 else ActionKind.HOTKEY
            return make_action(text, pos, kind=kind, keys=norm), mps
        if name == "scroll":
            pixels = self._number(args, "pixels", name, text, pos)
            if pixels == 0:
                raise FormatParseError("scroll of 0 pixels: give a positive (up) or negative (down) amount", text, pos)
            direction = ScrollDirection.UP if pixels > 0 else ScrollDirection.DOWN  # type: ignore[operator]
            point = at(False)
            return make_action(text, pos, kind=ActionKind.SCROLL, direction=direction,
                               amount=abs(pixels) / space.extent[1], point=point), mps  # type: ignore[arg-type]
        if name == "wait":
            return make_action(text, pos, kind=ActionKind.WAIT,
                               duration_s=self._number(args, "time", name, text, pos, default=1.0)), mps
        if name == "terminate":
            return self._terminate(args, text, pos), mps
        valid = ", ".join(a for a, _ in _COMPUTER_ACTIONS)
        raise FormatParseError(f"unknown computer_use action {name!r}; valid actions: {valid}", text, pos)

    def _mobile_action(self, args: dict[str, Any], space: ModelSpace, text: str, pos: int,
                       cursor: Point | None) -> tuple[Action, list[tuple[float, float]]]:
        name = args["action"]
        mps: list[tuple[float, float]] = []

        def at(key: str) -> Point:
            mp, p = model_point(space, self._need(args, key, name, text, pos), f"{name} {key}", text, pos)
            mps.append(mp)
            return p

        if name == "click":
            return make_action(text, pos, kind=ActionKind.CLICK, point=at("coordinate")), mps
        if name == "long_press":
            point = at("coordinate")
            return make_action(text, pos, kind=ActionKind.LONG_PRESS, point=point,
                               duration_s=self._number(args, "time", name, text, pos, default=1.0)), mps
        if name == "swipe":
            start = at("coordinate")
            return make_action(text, pos, kind=ActionKind.DRAG, point=start, end=at("coordinate2")), mps
        if name in ("type", "open"):
            value = self._need(args, "text", name, text, pos)
            if not isinstance(value, str):
                raise FormatParseError(f"{name} text must be a string, got {value!r}", text, pos)
            kind = ActionKind.TYPE if name == "type" else ActionKind.OPEN_APP
            return make_action(text, pos, kind=kind, text=value), mps
        if name == "system_button":
            button = self._need(args, "button", name, text, pos)
            b = button.strip().lower() if isinstance(button, str) else None
            if b == "back":
                return make_action(text, pos, kind=ActionKind.BACK), mps
            if b == "home":
                return make_action(text, pos, kind=ActionKind.HOME), mps
            if b == "enter":
                return make_action(text, pos, kind=ActionKind.KEY, keys=("Enter",)), mps
            if b == "menu":
                raise FormatParseError("system_button Menu is not supported: the unified action space has no "
                                       "app-switcher action", text, pos)
            raise FormatParseError(f"unknown system_button {button!r}; valid: Back, Home, Menu, Enter", text, pos)
        if name == "key":
            value = self._need(args, "text", name, text, pos)
            if not isinstance(value, str) or not value.strip():
                raise FormatParseError(f"key text must be an adb keyevent name, got {value!r}", text, pos)
            key = value.strip().lower().removeprefix("keycode_")
            if key == "back":
                return make_action(text, pos, kind=ActionKind.BACK), mps
            if key == "home":
                return make_action(text, pos, kind=ActionKind.HOME), mps
            if key in _ADB_KEYS:
                return make_action(text, pos, kind=ActionKind.KEY, keys=(_ADB_KEYS[key],)), mps
            if len(value.strip()) == 1:
                return make_action(text, pos, kind=ActionKind.KEY, keys=(value.strip(),)), mps
            raise FormatParseError(f"adb key {value!r} has no equivalent in the unified action space "
                                   f"(supported: back, home, {', '.join(_ADB_KEYS)})", text, pos)
        if name == "wait":
            return make_action(text, pos, kind=ActionKind.WAIT,
                               duration_s=self._number(args, "time", name, text, pos, default=1.0)), mps
        if name == "terminate":
            return self._terminate(args, text, pos), mps
        valid = ", ".join(a for a, _ in _MOBILE_ACTIONS)
        raise FormatParseError(f"unknown mobile_use action {name!r}; valid actions: {valid}", text, pos)

    @staticmethod
    def _terminate(args: dict[str, Any], text: str, pos: int) -> Action:
        status = args.get("status")
        if status == "success":
            return make_action(text, pos, kind=ActionKind.FINISH)
        if status == "failure":
            return make_action(text, pos, kind=ActionKind.INFEASIBLE, text="the model terminated with status failure")
        raise FormatParseError(f"terminate status must be 'success' or 'failure', got {status!r}", text, pos)

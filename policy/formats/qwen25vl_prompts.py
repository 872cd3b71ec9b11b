"""Qwen2.5-VL's prompts: the computer_use / mobile_use tool signatures, qwen-agent's function-calling
system message, and past steps written as tool calls (the format itself is ``policy.formats.qwen25vl``).

The tool signatures follow the QwenLM/Qwen2.5-VL computer_use and mobile_agent cookbooks (the
prompts the model was tuned with), with the screen resolution of the model image filled in.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from devices.actions import Action, ActionKind, Point, ScrollDirection
from policy.base import HistoryEntry
from policy.coords import ModelSpace

SYSTEM_DEFAULT = "You are a helpful assistant"
"""The spatial-understanding cookbook's system prompt (no final period there)."""

GROUNDING_TEMPLATE = "Locate the {target}, output its bbox coordinates using JSON format."

PROGRESS_PREFIX = "Task progress (You have done the following operation on the current device): "


# -- the tool signatures --------------------------------------------------------------------------

def _action_doc(lines: Sequence[tuple[str, str]]) -> str:
    return "The action to perform. The available actions are:\n" + "\n".join(f"* `{a}`: {d}" for a, d in lines)


COMPUTER_ACTIONS = (
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

MOBILE_ACTIONS = (
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
        "action": {"description": _action_doc(COMPUTER_ACTIONS), "enum": [a for a, _ in COMPUTER_ACTIONS],
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
        "action": {"description": _action_doc(MOBILE_ACTIONS), "enum": [a for a, _ in MOBILE_ACTIONS],
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


def tool_call(action: Action, space: ModelSpace, tool: str) -> str | None:
    """The tool-call JSON that writes ``action`` (model pixels) with ``tool`` (computer_use or mobile_use); None
    when the tool cannot express it (e.g. back on a desktop)."""
    args = (_computer_args if tool == "computer_use" else _mobile_args)(action, space)
    return None if args is None else json.dumps({"name": tool, "arguments": args}, ensure_ascii=False)


def render_step(action: Action, space: ModelSpace, tool: str) -> str:
    """A past action as the family writes it: the tool-call JSON in model pixels, or, for an action
    the tool cannot express, its short description."""
    return tool_call(action, space, tool) or action.describe()


def last_cursor(history: Sequence[HistoryEntry]) -> Point | None:
    """Where the last executed action left the cursor (a drag's end, else its point); None if unknown."""
    for entry in reversed(history):
        if entry.executed and entry.action is not None:
            a = entry.action
            if a.kind is ActionKind.DRAG:
                return a.end
            if a.point is not None:
                return a.point
    return None

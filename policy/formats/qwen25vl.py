"""Qwen2.5-VL's native formats (the QwenLM/Qwen2.5-VL cookbooks; docs/policies.md, docs/coordinates.md).

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
  The tool signatures and the system message are in ``policy.formats.qwen25vl_prompts``.

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
  the ``history`` given to ``parse`` (none given: no cursor is known). The cursor is read from that
  history at each parse, never kept on the format, which every actor of a session shares.
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

What SFT writes (``render_answer``): the action as one ``<tool_call>`` block (an action the tool
cannot express has none: ``NoAnswerForm``); in the grounding variant, the location as a one-point
``point_2d`` list.
"""

from __future__ import annotations

from types import MappingProxyType

import json
import re
from collections.abc import Sequence
from typing import Any

from devices.actions import Action, ActionKind, Point, ScrollDirection
from devices.errors import InvalidAction
from devices.keys import normalize_key
from policy.base import HistoryEntry
from policy.coords import ModelSpace
from policy.errors import FormatParseError, JsonError, NoAnswerForm
from policy.formats.base import (AnswerForm, ModelFormat, Parsed, Prompt, as_float, check_output, grounding_point,
                                 make_action, model_point, shown)
from policy.formats.jsonscan import decode_json, is_number, scan_json_list, skip_ws
from policy.formats.qwen25vl_prompts import (
    COMPUTER_ACTIONS,
    GROUNDING_TEMPLATE,
    MOBILE_ACTIONS,
    PROGRESS_PREFIX,
    SYSTEM_DEFAULT,
    computer_use_tool,
    last_cursor,
    mobile_use_tool,
    nous_system_prompt,
    render_step,
    tool_call,
)
from policy.presets import ModelPreset

__all__ = ["Qwen25VLFormat"]

_TOOL_CALL = re.compile(r"<tool_call>")
_FENCE = re.compile(r"```(?:json|JSON)?[ \t]*\n?")
# One \s, not \s+, before the attributes: \s+ followed by a class that also takes spaces backtracks
# over every split of a long run of spaces; [^<>] stops at the next tag, so each search is bounded.
_XML_POINT = re.compile(r"<points?\s([^<>]*)>")
_XML_ATTR = re.compile(r"([xy])([0-9]+)\s*=\s*\"\s*(-?[0-9.]+)\s*\"")

_ADB_KEYS = {"enter": "Enter", "del": "Backspace", "forward_del": "Delete", "tab": "Tab", "escape": "Escape",
             "space": "Space", "dpad_up": "ArrowUp", "dpad_down": "ArrowDown", "dpad_left": "ArrowLeft",
             "dpad_right": "ArrowRight", "move_home": "Home", "move_end": "End", "page_up": "PageUp",
             "page_down": "PageDown"}


class Qwen25VLFormat(ModelFormat):
    """Qwen2.5-VL: grounding, computer_use and mobile_use (see the module docstring)."""

    family = "qwen2.5-vl"
    variants = ("grounding", "computer_use", "mobile_use")
    grounding_variant = "grounding"
    screen_variants = MappingProxyType({"computer": "computer_use", "phone": "mobile_use"})

    def answer_form(self, preset: ModelPreset) -> AnswerForm:
        return AnswerForm.BOX_LIST if self._variant(preset) == "grounding" else AnswerForm.TOOL_CALL

    def grounding_only(self, preset: ModelPreset) -> bool:
        return self._variant(preset) == "grounding"

    def render_answer(self, action: Action, space: ModelSpace, preset: ModelPreset, *, instruction: str = "",
                      box: Sequence[float] | None = None) -> str:
        variant = self._variant(preset)
        if variant == "grounding":
            x, y = space.from_point(grounding_point(action, box))
            return json.dumps([{"point_2d": [round(x), round(y)]}])
        call = tool_call(action, space, variant)
        if call is None:
            raise NoAnswerForm(f"the {variant} tool has no action for {action.kind.value}")
        return f"<tool_call>\n{call}\n</tool_call>"

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
        a coordinate and drags (``last_cursor``); without it no cursor is known."""
        text = check_output(text)
        variant = self._variant(preset)
        if variant == "grounding":
            return self._parse_grounding(text, space)
        return self._parse_tool_calls(text, space, variant, last_cursor(history or ()))

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
                if not isinstance(box, (list, tuple)) or len(box) != 4 or not all(is_number(v) for v in box):
                    raise FormatParseError(f"bbox_2d must be [x1, y1, x2, y2] with four numbers, got "
                                           f"{shown(box, as_json=True)}", text, pos)
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
                raise FormatParseError(f"list item has neither bbox_2d nor point_2d (keys: {shown(sorted(item)[:6])})",
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
                idx = idx.lstrip("0") or "0"  # x01 is x1; sorted as (length, digits): int() has a digit limit
                try:
                    coords.setdefault(idx, {})[axis] = float(value)  # float() of any length: at worst inf
                except ValueError:
                    raise FormatParseError(f"<points> attribute {axis}{idx[:12]} is not a number: {shown(value)}",
                                           text, m.start()) from None
            for idx in sorted(coords, key=lambda i: (len(i), i)):
                xy = coords[idx]
                if set(xy) != {"x", "y"}:
                    raise FormatParseError(f"<points> has x{idx[:12]} or y{idx[:12]} without the other", text,
                                           m.start())
                where = f"<points> x{idx[:12]}, y{idx[:12]}"
                mp, point = model_point(space, [xy["x"], xy["y"]], where, text, m.start())
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
                raise FormatParseError(f"unknown function {shown(name)}; the only tool is {tool!r}", text,
                                       pos)
            args = call.get("arguments")
            if isinstance(args, str):  # some servers pass the arguments as a JSON string
                try:
                    args = json.loads(args)
                except (ValueError, RecursionError) as exc:
                    raise FormatParseError(f"the arguments string is not JSON: {exc}", text, pos) from None
            if not isinstance(args, dict):
                raise FormatParseError(f"{tool} call needs an 'arguments' object, got {type(args).__name__}", text,
                                       pos)
            if "action" not in args:
                raise FormatParseError(f"{tool} arguments have no 'action' (keys: {shown(sorted(args)[:6])})", text,
                                       pos)
            if not isinstance(args["action"], str):
                raise FormatParseError(f"{tool} 'action' must be a string naming the action, got "
                                       f"{shown(args['action'])}", text, pos)
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
        return as_float(value, f"{action} {key}", text, pos)

    def _computer_action(self, args: dict[str, Any], space: ModelSpace, text: str, pos: int,
                         cursor: Point | None) -> tuple[Action, list[tuple[float, float]]]:
        name = args["action"]
        mps: list[tuple[float, float]] = []

        def at(required: bool) -> Point | None:
            if args.get("coordinate") is None:
                if required:
                    raise FormatParseError(f"action {shown(name)} needs 'coordinate'", text, pos)
                return None
            mp, p = model_point(space, args["coordinate"], f"{name} coordinate", text, pos)
            mps.append(mp)
            return p

        def at_or_cursor() -> Point:
            p = at(False)
            if p is not None:
                return p
            if cursor is None:
                raise FormatParseError(f"action {shown(name)} has no 'coordinate' and no earlier cursor position is "
                                       "known", text, pos)
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
                raise FormatParseError(f"type text must be a string, got {shown(value)}", text, pos)
            return make_action(text, pos, kind=ActionKind.TYPE, text=value), mps
        if name == "key":
            keys = self._need(args, "keys", name, text, pos)
            if isinstance(keys, str):
                keys = [keys]
            if not isinstance(keys, list) or not keys or not all(isinstance(k, str) and k for k in keys):
                raise FormatParseError(f"key keys must be a non-empty list of key names, got {shown(keys)}", text, pos)
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
        valid = ", ".join(a for a, _ in COMPUTER_ACTIONS)
        raise FormatParseError(f"unknown computer_use action {shown(name)}; valid actions: {valid}", text, pos)

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
                raise FormatParseError(f"{name} text must be a string, got {shown(value)}", text, pos)
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
            raise FormatParseError(f"unknown system_button {shown(button)}; valid: Back, Home, Menu, Enter", text, pos)
        if name == "key":
            value = self._need(args, "text", name, text, pos)
            if not isinstance(value, str) or not value.strip():
                raise FormatParseError(f"key text must be an adb keyevent name, got {shown(value)}", text, pos)
            key = value.strip().lower().removeprefix("keycode_")
            if key == "back":
                return make_action(text, pos, kind=ActionKind.BACK), mps
            if key == "home":
                return make_action(text, pos, kind=ActionKind.HOME), mps
            if key in _ADB_KEYS:
                return make_action(text, pos, kind=ActionKind.KEY, keys=(_ADB_KEYS[key],)), mps
            if len(value.strip()) == 1:
                return make_action(text, pos, kind=ActionKind.KEY, keys=(value.strip(),)), mps
            raise FormatParseError(f"adb key {shown(value)} has no equivalent in the unified action space "
                                   f"(supported: back, home, {', '.join(_ADB_KEYS)})", text, pos)
        if name == "wait":
            return make_action(text, pos, kind=ActionKind.WAIT,
                               duration_s=self._number(args, "time", name, text, pos, default=1.0)), mps
        if name == "terminate":
            return self._terminate(args, text, pos), mps
        valid = ", ".join(a for a, _ in MOBILE_ACTIONS)
        raise FormatParseError(f"unknown mobile_use action {shown(name)}; valid actions: {valid}", text, pos)

    @staticmethod
    def _terminate(args: dict[str, Any], text: str, pos: int) -> Action:
        status = args.get("status")
        if status == "success":
            return make_action(text, pos, kind=ActionKind.FINISH)
        if status == "failure":
            return make_action(text, pos, kind=ActionKind.INFEASIBLE, text="the model terminated with status failure")
        raise FormatParseError(f"terminate status must be 'success' or 'failure', got {shown(status)}", text, pos)

"""UI-TARS v1 and UI-TARS-1.5 (bytedance/UI-TARS, arXiv 2501.12326): prompt builder and parser.

Versions (``preset.version``)
    ``"1.5"``: Qwen2.5-VL based, absolute pixels of the resized image (``CoordMode.ABSOLUTE``), the
    codes/prompts.py templates. ``"1"``: Qwen2-VL based, a 0-1000 grid (``RELATIVE_1000``), the
    README_v1 templates: computer adds ``call_user()`` and has a bare ``finished()``; mobile has
    ``long_press(start_box, time)`` and ``scroll(start_box, end_box)``; grounding asks for one point.
    Variants (``preset.variant``): ``computer``, ``mobile``, ``grounding``; the templates are in
    ``policy.formats.uitars_prompts``. ``{language}`` is ``UiTarsFormat.language`` (English by
    default). The v1 README writes its computer template as a raw string whose code fence shows a
    literal ``\\n``; handeye uses real line breaks there.

Messages
    system "You are a helpful assistant.", user(prompt), then per past step user(its screenshot,
    referenced by history index) + assistant(its raw reply, with ``start_box``/``end_box``
    coordinates re-wrapped in ``<|box_start|>...<|box_end|>`` as add_box_token does), then
    user(current screenshot). Only the last ``preset.history_images`` screenshots, the current one
    included, are sent; older steps keep their assistant text only. A step with no raw reply (its
    action came from elsewhere) gets a synthesized ``Action: ...`` line in the family's grammar.

Output
    ``Thought: ...\\nAction: ...`` (also ``Reflection: ... Action_Summary: ...``; grounding may be
    only ``Action: ...``, and v1 grounding a bare ``(x,y)``). The actions are the text after the LAST
    ``Action:``; several actions are separated by blank lines and all are returned in order. Each
    is a call with string keyword arguments, read with ``ast`` (never eval), except the ``content``
    of type/finished, which is taken up to the call's final quote and unescaped (``\\'``, ``\\"``,
    ``\\n``, ``\\t``, ``\\\\``; a bare quote inside is kept, as the reference parser does).
    Coordinates: ``'(x,y)'``, ``'<|box_start|>(x,y)<|box_end|>'``, ``'<point>x y</point>'``,
    ``'[x1, y1, x2, y2]'``, written with the ASCII digits 0-9 (``\\d`` would also take other scripts'
    digits, such as Arabic-Indic ones, which no UI-TARS answer uses); two numbers are a point, four a
    box whose centre is used;
    ``point=``/``start_point=`` mean ``start_box=`` and ``end_point=`` means ``end_box=``.

Action mapping (UI-TARS -> unified)
    click / left_single -> click; left_double -> double_click; right_single -> right_click;
    drag(start, end) -> drag; long_press -> long_press (v1 ``time`` in seconds, default 1 s);
    type(content) -> type; a trailing ``\\n`` ("submit") stays in the text as its last character,
    which the web device types as Enter (type, then Enter, as the model means);
    hotkey(key='ctrl c') -> hotkey of the normalized keys ("ctrl+c" also split); one key -> key;
    scroll(start_box, direction) -> scroll at the point, default amount 0.5 screens (the 5 wheel
    clicks of the reference runtime); v1 mobile scroll(start_box, end_box) is a swipe between the
    two points -> drag (its direction is the finger's, so a scroll direction would have to guess);
    wait() -> wait 5 s; finished(content) -> finish with the answer (bare finished() -> finish), except a
    content that declines ("not found", "cannot find", "does not exist", "no such ...", "impossible",
    找不到, 不存在 ...: ``DECLINE``) -> infeasible with that content as the reason, the model's way of saying
    the target is absent; call_user() -> ask_user, "the model asked for the user" (the person answers;
    with nobody there the episode ends as infeasible, and evaluations count it as an abstention:
    ``devices.actions.ABSTAIN_KINDS``); press_home -> home;
    press_back -> back; open_app(app_name) -> open_app.
    Every action name is accepted in every version and variant (the union of the grammars).

What SFT writes (``render_answer``): ``Thought: The next step is <kind>.`` then ``Action:`` and the
action in the call grammar (``render_action``); in the grounding variant, ``Action: click(...)`` at
the location.
"""

from __future__ import annotations

from types import MappingProxyType

import ast
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from devices.actions import Action, ActionKind, Point
from devices.errors import InvalidAction
from devices.keys import normalize_key
from policy.base import HistoryEntry
from policy.coords import ModelSpace, number_text
from policy.errors import CoordinateError, FormatParseError
from policy.formats.base import AnswerForm, ModelFormat, Parsed, Prompt, check_output, grounding_point, shown
from policy.formats.positions import SourcePositions
from policy.formats.uitars_prompts import PROMPTS, SYSTEM_PROMPT
from policy.presets import ModelPreset

CALL_USER_REASON = "the model asked for the user"
#: a finished(content=...) that declines: the model says the target is not there or the task cannot be done
DECLINE = re.compile(
    r"\b(?:not\s+(?:found|present|visible|available|shown|(?:on|in)\s+(?:the\s+)?(?:screen|page))"
    r"|no\s+such|(?:can\s*not|can't|cannot|couldn't|could\s+not|unable\s+to)\s+(?:find|locate|see|be\s+found)"
    r"|does(?:\s+not|n't)\s+exist|impossible|infeasible)\b"
    r"|找不到|不存在|没有找到|未找到|无法找到|无法完成",
    re.IGNORECASE,
)
WAIT_S = 5.0
VARIANTS = ("computer", "mobile", "grounding")
VERSIONS = ("1.5", "1")

POINTED = {"click": ActionKind.CLICK, "left_single": ActionKind.CLICK, "left_double": ActionKind.DOUBLE_CLICK,
           "right_single": ActionKind.RIGHT_CLICK, "long_press": ActionKind.LONG_PRESS}
ACTIONS = frozenset({*POINTED, "drag", "hotkey", "type", "scroll", "wait", "finished", "call_user",
                     "press_home", "press_back", "open_app"})
_BOX_ALIASES = {"start_box": "start_box", "point": "start_box", "start_point": "start_box",
                "end_box": "end_box", "end_point": "end_box"}
_NUM = r"-?[0-9]+(?:\.[0-9]+)?"
_TOKENS = re.compile(r"<\|box_start\|>|<\|box_end\|>|</?point>|</?bbox>")
_BLANK = re.compile(r"\n[ \t\r]*\n")

Mapped = tuple[Action, list[tuple[float, float]], str]
"""A mapped call: the unified action, the model points it used, and the UI-TARS action name."""


def _version(preset: ModelPreset) -> str:
    v = (preset.version or "1.5").strip().lower().lstrip("v")
    if v not in VERSIONS:
        raise ValueError(f"unknown UI-TARS version {preset.version!r}; valid versions: {', '.join(VERSIONS)}")
    return v


def _variant(preset: ModelPreset) -> str:
    v = (preset.variant or "computer").strip().lower()
    if v not in VARIANTS:
        raise ValueError(f"unknown UI-TARS variant {preset.variant!r}; valid variants: {', '.join(VARIANTS)}")
    return v


def add_box_token(reply: str) -> str:
    """Wrap bare ``start_box``/``end_box`` coordinates of a past reply in box tokens."""

    def wrap(m: re.Match[str]) -> str:
        inner = m.group(3)
        if "<|box_start|>" in inner:
            return m.group(0)
        return f"{m.group(1)}{m.group(2)}<|box_start|>{inner.strip()}<|box_end|>{m.group(2)}"

    return re.sub(r"((?:start_box|end_box)\s*=\s*)(['\"])([^'\"]*)\2", wrap, reply)


def _unescape(raw: str) -> str:
    out, i = [], 0
    table = {"n": "\n", "t": "\t", "r": "\r", "'": "'", '"': '"', "\\": "\\"}
    while i < len(raw):
        c = raw[i]
        if c == "\\" and i + 1 < len(raw) and raw[i + 1] in table:
            out.append(table[raw[i + 1]])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


class UiTarsFormat(ModelFormat):
    """UI-TARS's prompts and its ``Thought:/Action:`` call grammar (see the module docstring)."""

    family = "ui-tars"
    grounding_variant = "grounding"
    screen_variants = MappingProxyType({"computer": "computer", "phone": "mobile"})

    def __init__(self, language: str = "English") -> None:
        self.language = language

    def answer_form(self, preset: ModelPreset) -> AnswerForm:
        return AnswerForm.CALL

    def grounding_only(self, preset: ModelPreset) -> bool:
        return _variant(preset) == "grounding"

    def render_answer(self, action: Action, space: ModelSpace, preset: ModelPreset, *, instruction: str = "",
                      box: Sequence[float] | None = None) -> str:
        if self.grounding_only(preset):
            return "Action: " + self.render_action(Action(ActionKind.CLICK, grounding_point(action, box)), space)
        return f"Thought: The next step is {action.kind.value}.\nAction: {self.render_action(action, space)}"

    # -- prompt ---------------------------------------------------------------------------------
    def prompt_text(self, task: str, preset: ModelPreset) -> str:
        template = PROMPTS[(_version(preset), _variant(preset))]
        return template.replace("{language}", self.language).replace("{instruction}", task)

    def build_prompt(
        self, task: str, history: Sequence[HistoryEntry], space: ModelSpace, preset: ModelPreset
    ) -> Prompt:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": [{"type": "text", "text": SYSTEM_PROMPT}]},
            {"role": "user", "content": [{"type": "text", "text": self.prompt_text(task, preset)}]},
        ]
        past_images = max(preset.history_images, 1) - 1
        first_with_image = len(history) - past_images
        for i, entry in enumerate(history):
            if i >= first_with_image:
                messages.append({"role": "user", "content": [{"type": "image", "image": i}]})
            reply = self._reply(entry, space)
            if reply:
                messages.append({"role": "assistant", "content": [{"type": "text", "text": reply}]})
        messages.append({"role": "user", "content": [{"type": "image", "image": "current"}]})
        return Prompt(messages=messages)

    def _reply(self, entry: HistoryEntry, space: ModelSpace) -> str:
        if entry.raw_output and entry.raw_output.strip():
            return add_box_token(entry.raw_output)
        if entry.action is None:
            return ""
        return "Action: " + self.render_action(entry.action, space)

    @staticmethod
    def render_action(action: Action, space: ModelSpace) -> str:
        """A unified action in UI-TARS's call grammar (for history of steps with no raw reply)."""

        def box(p: Point) -> str:
            x, y = space.from_point(p)
            return f"'<|box_start|>({round(x)},{round(y)})<|box_end|>'"

        def q(s: str) -> str:
            return "'" + s.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"

        k = action.kind
        names = {ActionKind.CLICK: "click", ActionKind.DOUBLE_CLICK: "left_double",
                 ActionKind.RIGHT_CLICK: "right_single", ActionKind.LONG_PRESS: "long_press"}
        if k in names and action.point is not None:
            return f"{names[k]}(start_box={box(action.point)})"
        if k is ActionKind.DRAG and action.point is not None and action.end is not None:
            return f"drag(start_box={box(action.point)}, end_box={box(action.end)})"
        if k is ActionKind.TYPE:
            return f"type(content={q(action.text or '')})"
        if k in (ActionKind.KEY, ActionKind.HOTKEY):
            return f"hotkey(key={q(' '.join(key.lower() for key in action.keys))})"
        if k is ActionKind.SCROLL:
            where = f"start_box={box(action.point)}, " if action.point is not None else ""
            return f"scroll({where}direction='{action.direction.value if action.direction else 'down'}')"
        if k is ActionKind.WAIT:
            return "wait()"
        if k is ActionKind.FINISH:
            return f"finished(content={q(action.text)})" if action.text else "finished()"
        if k in (ActionKind.INFEASIBLE, ActionKind.ASK_USER):
            return "call_user()"
        if k is ActionKind.HOME:
            return "press_home()"
        if k is ActionKind.BACK:
            return "press_back()"
        if k is ActionKind.OPEN_APP:
            return f"open_app(app_name={q(action.text or '')})"
        return action.describe()

    # -- parse ----------------------------------------------------------------------------------
    def parse(
        self, text: str, space: ModelSpace, preset: ModelPreset, history: Sequence[HistoryEntry] | None = None
    ) -> Parsed:
        text = check_output(text)
        variant = _variant(preset)
        idx = text.rfind("Action:")
        thought: str | None = None
        info: dict[str, Any] = {}
        if idx < 0:
            if variant != "grounding":
                raise FormatParseError(
                    "UI-TARS output has no 'Action:' line; expected 'Thought: ...\\nAction: click(...)'",
                    text, len(text),
                )
            start = 0
        else:
            start = idx + len("Action:")
            thought = self._thought(text[:idx], info)
        body = text[start:]
        if not body.strip():
            raise FormatParseError("UI-TARS 'Action:' is followed by no action", text, start)

        actions: list[Action] = []
        points: list[tuple[float, float]] = []
        names: list[str] = []
        pos = 0
        for m in [*_BLANK.finditer(body), None]:
            end = m.start() if m else len(body)
            seg = body[pos:end]
            if seg.strip():
                lead = len(seg) - len(seg.lstrip())
                action, mpts, name = self._segment(seg.strip(), text, start + pos + lead, space, variant)
                actions.append(action)
                points.extend(mpts)
                names.append(name)
            if m:
                pos = m.end()
        info["model_actions"] = names
        return Parsed(actions=tuple(actions), model_points=tuple(points), thought=thought, info=info)

    @staticmethod
    def _thought(prefix: str, info: dict[str, Any]) -> str | None:
        t = prefix.rfind("Thought:")
        if t >= 0:
            return prefix[t + len("Thought:"):].strip() or None
        r = prefix.find("Reflection:")
        s = prefix.find("Action_Summary:")
        if r >= 0 or s >= 0:
            if r >= 0:
                info["reflection"] = prefix[r + len("Reflection:"):s if s > r else len(prefix)].strip()
            if s >= 0:
                return prefix[s + len("Action_Summary:"):].strip() or None
            return info.get("reflection") or None
        return prefix.strip() or None

    def _segment(
        self, seg: str, text: str, off: int, space: ModelSpace, variant: str
    ) -> Mapped:
        m = re.match(r"([A-Za-z_]\w*)\s*\(", seg)
        if not m:
            if variant == "grounding" and re.search(_NUM, seg):
                pt, mpt = self._coords(seg, text, off, space, "grounding answer")
                if pt is None:
                    raise FormatParseError("UI-TARS grounding answer is the no-target point", text, off)
                return Action(ActionKind.CLICK, point=pt), [mpt], "click"
            raise FormatParseError(
                "UI-TARS action is not a call like click(start_box='(x,y)')", text, off
            )
        name = m.group(1)
        if name not in ACTIONS:
            raise FormatParseError(
                f"unknown UI-TARS action {shown(name)}; known actions: {', '.join(sorted(ACTIONS))}", text, off
            )
        if not seg.endswith(")"):
            raise FormatParseError(f"UI-TARS {name}(...) call is not closed with ')'", text, off + len(seg))
        kwargs = self._kwargs(seg, name, m.end(), text, off)
        try:
            return self._action(name, kwargs, text, off, space)
        except InvalidAction as e:
            raise FormatParseError(f"UI-TARS {name} is not a valid action: {e}", text, off) from None

    def _kwargs(self, seg: str, name: str, args_at: int, text: str, off: int) -> dict[str, tuple[Any, int]]:
        """keyword -> (value, absolute position of the value)."""
        cm = re.search(r"\bcontent\s*=\s*(['\"])", seg) if name in ("type", "finished") else None
        if cm:
            closing = seg[:-1].rstrip()
            quote = cm.group(1)
            if len(closing) - 1 < cm.end() or closing[-1] != quote:
                raise FormatParseError(f"UI-TARS {name} content string is not closed", text, off + cm.end())
            content = _unescape(seg[cm.end():len(closing) - 1].replace("\r", ""))
            before = seg[args_at:cm.start()].rstrip().rstrip(",")
            kwargs = self._ast_kwargs(f"{name}({before})", name, text, off, shift=0) if before.strip() else {}
            kwargs["content"] = (content, off + cm.end())
            return kwargs
        return self._ast_kwargs(seg, name, text, off, shift=0)

    @staticmethod
    def _ast_kwargs(src: str, name: str, text: str, off: int, shift: int) -> dict[str, tuple[Any, int]]:
        positions = SourcePositions(src, off)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tree = ast.parse(src, mode="eval")
        except SyntaxError as e:
            msg = e.msg if len(e.msg) <= 200 else e.msg[:200] + "..."
            raise FormatParseError(f"UI-TARS {name}(...) is not a valid call: {msg}", text,
                                   positions.syntax_error(e)) from None
        except (ValueError, MemoryError, RecursionError) as e:  # a NUL or lone surrogate, a nest too deep
            raise FormatParseError(f"UI-TARS {name}(...) cannot be read: {type(e).__name__}: {str(e)[:200]}",
                                   text, off) from None
        call = tree.body
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
            raise FormatParseError(f"UI-TARS action must be one call like {name}(...)", text, off)
        if call.args:
            raise FormatParseError(
                f"UI-TARS {name}(...) takes keyword arguments only (like start_box='(x,y)')", text,
                positions.node(call.args[0]),
            )
        out: dict[str, tuple[Any, int]] = {}
        for kw in call.keywords:
            at = positions.node(kw.value)
            if kw.arg is None:
                raise FormatParseError(f"UI-TARS {name}(...) uses ** unpacking", text, at)
            if not isinstance(kw.value, ast.Constant) or not isinstance(kw.value.value, (str, int, float)) \
                    or isinstance(kw.value.value, bool):
                raise FormatParseError(
                    f"UI-TARS {name} argument {kw.arg}= must be a string literal, got {type(kw.value).__name__}",
                    text, at,
                )
            out[kw.arg] = (kw.value.value, at)
        return out

    @staticmethod
    def _coords(
        value: Any, text: str, at: int, space: ModelSpace, what: str
    ) -> tuple[Point | None, tuple[float, float]]:
        if not isinstance(value, str):
            raise FormatParseError(f"UI-TARS {what} must be a string like '(x,y)', got {shown(value)}", text, at)
        stripped = _TOKENS.sub(" ", value)
        nums = re.findall(_NUM, stripped)
        rest = re.sub(_NUM, "", stripped)
        if re.search(r"[^\s()\[\],]", rest) or len(nums) not in (2, 4):
            raise FormatParseError(
                f"UI-TARS {what} {shown(value)} is not '(x,y)', '<point>x y</point>' or a 4-number box", text, at
            )
        v = [float(n) for n in nums]
        x, y = (v[0], v[1]) if len(v) == 2 else ((v[0] + v[2]) / 2, (v[1] + v[3]) / 2)
        try:
            return space.to_point(x, y), (x, y)
        except CoordinateError as e:
            raise CoordinateError(f"UI-TARS {what} {e}", text, at) from None

    def _action(
        self, name: str, kwargs: dict[str, tuple[Any, int]], text: str, off: int, space: ModelSpace
    ) -> Mapped:
        boxes: dict[str, tuple[Point | None, tuple[float, float]]] = {}
        for key, (value, at) in kwargs.items():
            if key in _BOX_ALIASES:
                slot = _BOX_ALIASES[key]
                boxes[slot] = self._coords(value, text, at, space, f"{name} {key}")
        mapper = _MAPPERS.get(name)
        if mapper is None:
            raise FormatParseError(f"unknown UI-TARS action {name!r}", text, off)  # pragma: no cover
        return mapper(_Call(name, kwargs, boxes, text, off))


# -- action mapping (one function per UI-TARS action, see the module docstring) ----------------------

@dataclass(frozen=True, slots=True)
class _Call:
    """One UI-TARS call being mapped: its keyword values (with their positions) and its boxes."""

    name: str
    kwargs: dict[str, tuple[Any, int]]
    boxes: dict[str, tuple[Point | None, tuple[float, float]]]
    """slot ("start_box" / "end_box") -> (frame point or None for the no-target point, model point)."""
    text: str
    off: int

    def need(self, slot: str) -> tuple[Point, tuple[float, float]]:
        """The box in ``slot``; FormatParseError when it is missing or the no-target point."""
        if slot not in self.boxes:
            raise FormatParseError(f"UI-TARS {self.name} needs {slot}='(x,y)'", self.text, self.off)
        pt, mpt = self.boxes[slot]
        if pt is None:
            raise FormatParseError(f"UI-TARS {self.name} {slot} is the no-target point", self.text,
                                   self.slot_pos(slot))
        return pt, mpt

    def slot_pos(self, slot: str) -> int:
        for key, (_, at) in self.kwargs.items():
            if _BOX_ALIASES.get(key) == slot:
                return at
        return self.off

    def string(self, key: str, *alts: str) -> tuple[str, int]:
        """The first of the keywords given, as a string, with its position ("" at the call when absent)."""
        for k in (key, *alts):
            if k in self.kwargs:
                value, at = self.kwargs[k]
                return (value if isinstance(value, str) else number_text(value)), at
        return "", self.off


def _pointed(call: _Call) -> Mapped:
    pt, mpt = call.need("start_box")
    duration = _press_time(call) if call.name == "long_press" else None
    return Action(POINTED[call.name], point=pt, duration_s=duration), [mpt], call.name


def _press_time(call: _Call) -> float | None:
    """v1 long_press's ``time`` (or ``duration``) in seconds; None when not given."""
    raw, at = call.string("time", "duration")
    if not raw.strip():
        return None
    m = re.fullmatch(r"\s*(" + _NUM + r")\s*(?:s\s*)?", raw)  # no two \s* side by side: no backtracking
    if not m:
        raise FormatParseError(f"UI-TARS long_press time {shown(raw)} is not a number of seconds", call.text, at)
    duration = float(m.group(1))
    if not 0 <= duration <= 600:
        raise FormatParseError(f"UI-TARS long_press time {shown(raw)} is outside 0-600 s", call.text, at)
    return duration


def _drag(call: _Call) -> Mapped:
    pt, mpt = call.need("start_box")
    end, mend = call.need("end_box")
    return Action(ActionKind.DRAG, point=pt, end=end), [mpt, mend], call.name


def _scroll(call: _Call) -> Mapped:
    direction, at = call.string("direction")
    start = call.boxes.get("start_box")
    if not direction.strip() and "end_box" in call.boxes:
        return _drag(call)  # v1 mobile scroll(start_box, end_box): a swipe between the two points
    d = direction.strip().lower()
    if d not in ("up", "down", "left", "right"):
        raise FormatParseError(
            f"UI-TARS scroll direction must be up, down, left or right, got {shown(direction)}", call.text, at
        )
    point = start[0] if start else None
    mpts = [start[1]] if start and start[0] is not None else []
    return Action(ActionKind.SCROLL, direction=d, point=point), mpts, call.name


def _type(call: _Call) -> Mapped:
    content, at = call.string("content")
    if not content:
        raise FormatParseError("UI-TARS type needs a non-empty content", call.text, at)
    return Action(ActionKind.TYPE, text=content), [], call.name


def _hotkey(call: _Call) -> Mapped:
    keys_text, at = call.string("key", "hotkey", "keys")
    parts = [p for p in re.split(r"\s*\+\s*|\s+", keys_text.strip()) if p]
    if not parts:
        raise FormatParseError("UI-TARS hotkey needs key='...' with at least one key", call.text, at)
    try:
        keys = tuple(normalize_key(p) for p in parts)
    except InvalidAction as e:
        raise FormatParseError(f"UI-TARS hotkey {shown(keys_text)}: {e}", call.text, at) from None
    return Action(ActionKind.KEY if len(keys) == 1 else ActionKind.HOTKEY, keys=keys), [], call.name


def _finished(call: _Call) -> Mapped:
    content, _ = call.string("content")
    if content and DECLINE.search(content):
        return Action(ActionKind.INFEASIBLE, text=content), [], call.name
    return Action(ActionKind.FINISH, text=content or None), [], call.name


def _open_app(call: _Call) -> Mapped:
    app, at = call.string("app_name", "app")
    if not app.strip():
        raise FormatParseError("UI-TARS open_app needs a non-empty app_name", call.text, at)
    return Action(ActionKind.OPEN_APP, text=app.strip()), [], call.name


def _plain(kind: ActionKind, **fields: Any) -> Callable[[_Call], Mapped]:
    """The mapper of a call that always means the same action (its arguments are ignored)."""
    return lambda call: (Action(kind, **fields), [], call.name)


_MAPPERS: dict[str, Callable[[_Call], Mapped]] = {
    **{name: _pointed for name in POINTED},
    "drag": _drag,
    "scroll": _scroll,
    "type": _type,
    "hotkey": _hotkey,
    "wait": _plain(ActionKind.WAIT, duration_s=WAIT_S),
    "finished": _finished,
    "call_user": _plain(ActionKind.ASK_USER, text=CALL_USER_REASON),
    "press_home": _plain(ActionKind.HOME),
    "press_back": _plain(ActionKind.BACK),
    "open_app": _open_app,
}

"""The fuzzer's inputs: valid outputs of each family, the inputs that once crashed or hung, and the mutator."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from typing import Any

# -- valid outputs of each family ---------------------------------------------------------------------


def call_text(name: str, **arguments: Any) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def gui_r1_item(action: str, point: tuple[int, int] = (-100, -100), text: str = "no input text") -> str:
    return repr({"action": action, "point": list(point), "input_text": text})


VALID: dict[str, list[str]] = {
    "qwen2.5-vl/computer_use": [
        call_text("computer_use", action="left_click", coordinate=[640, 360]),
        "I will type.\n" + call_text("computer_use", action="type", text="hello"),
        call_text("computer_use", action="mouse_move", coordinate=[100, 200]) + "\n"
        + call_text("computer_use", action="left_click_drag", coordinate=[300, 400]),
        call_text("computer_use", action="scroll", pixels=-300, coordinate=[640, 360]),
        call_text("computer_use", action="key", keys=["ctrl", "c"]),
        call_text("computer_use", action="wait", time=2),
        call_text("computer_use", action="terminate", status="success"),
    ],
    "qwen2.5-vl/mobile_use": [
        call_text("mobile_use", action="click", coordinate=[640, 360]),
        call_text("mobile_use", action="long_press", coordinate=[10, 20], time=2),
        call_text("mobile_use", action="swipe", coordinate=[10, 20], coordinate2=[300, 400]),
        call_text("mobile_use", action="system_button", button="Back"),
        call_text("mobile_use", action="key", text="KEYCODE_ENTER"),
        call_text("mobile_use", action="open", text="Maps"),
        call_text("mobile_use", action="terminate", status="failure"),
    ],
    "qwen2.5-vl/grounding": [
        '```json\n[{"bbox_2d": [100, 200, 300, 260], "label": "OK"}, {"point_2d": [50, 60]}]\n```',
        '[{"point_2d": [640, 360]}]',
        '<points x1="100" y1="200" x2="300" y2="400" alt="OK">OK</points>',
        '{"bbox_2d": [10, 20, 30, 40]}',
    ],
    "infigui-g1": [
        '<think>The OK button is at the bottom.</think>[{"point_2d": [640, 360]}, {"point_2d": [100, 120]}]',
        '<think>r</think>\n```json\n[{"point_2d": [10, 20]}]\n```',
        "<think>nothing there</think>[]",
        '<think>three</think>[{"point_2d": [5.5, 7.25]}, {"point_2d": [30, 40]}, {"point_2d": [55, 73]}]',
    ],
    "gui-r1": [
        f"<think>click it</think> <answer>[{gui_r1_item('click', (640, 360))}]</answer>",
        f"<think>t</think><answer>[{gui_r1_item('type', text='shanghai mall')}]</answer>",
        f"<think>t</think><answer>[{gui_r1_item('scroll', text='down')}]</answer>",
        f"<think>t</think><answer>[{gui_r1_item('hotkey', text='ctrl c')}]</answer>",
        f"<think>t</think><answer>[{gui_r1_item('close/delete', (10, 20))}, {gui_r1_item('complete')}]</answer>",
        f"<think>t</think><answer>[{gui_r1_item('open_app', text='Settings')}]</answer>",
    ],
    "ui-tars-1.5/computer": [
        "Thought: click OK\nAction: click(start_box='(640,360)')",
        "Thought: t\nAction: type(content='hello\\n')",
        "Thought: t\nAction: drag(start_box='<|box_start|>(10,20)<|box_end|>', end_box='(300,400)')",
        "Thought: t\nAction: hotkey(key='ctrl c')",
        "Thought: t\nAction: scroll(start_box='(640,360)', direction='down')",
        "Reflection: r\nAction_Summary: s\nAction: left_double(start_box='[10, 20, 30, 40]')",
        "Thought: t\nAction: finished(content='done')",
        "Thought: t\nAction: wait()\n\nclick(point='<point>5 6</point>')",
    ],
    "ui-tars-1.5/mobile": [
        "Thought: t\nAction: long_press(start_box='(5,5)')",
        "Thought: t\nAction: press_back()",
        "Thought: t\nAction: open_app(app_name='Maps')",
        "Thought: t\nAction: scroll(start_box='(100,200)', direction='up')",
    ],
    "ui-tars-1.5/grounding": ["Action: click(start_box='(640,360)')", "(640,360)"],
    "ui-tars-v1/mobile": [
        "Thought: t\nAction: click(start_box='(500,500)')",
        "Thought: t\nAction: scroll(start_box='(100,200)', end_box='(100,800)')",
        "Thought: t\nAction: long_press(start_box='(1,2)', time='2')",
    ],
}

# -- the inputs the fuzzer found (each crashed or took seconds before the fix) ---------------------------

_BIG, _HUGE, _HEX = "1" * 400, "1" * 5000, "0x" + "f" * 5000
_TAGS = "</think><answer>" * (156 * 1024 // 16)
_ITEMS = ", ".join([gui_r1_item("click", (5, 5))] * 8000)
_PARABOLA = json.dumps([{"point_2d": [i, i * i]} for i in range(1000)])

KNOWN_INPUTS: list[tuple[str, str]] = [
    ("gui-r1", f"<think>t</think><answer>[{{'action': 'click', 'point': [{_BIG}, 5], 'input_text': 'x'}}]</answer>"),
    ("gui-r1", f"<think>t</think><answer>[{{'action': 'click', 'point': [{_HUGE}, 5], 'input_text': 'x'}}]</answer>"),
    ("gui-r1", f"<think>t</think><answer>[{{'action': 'click', 'point': [{_HEX}, 5], 'input_text': 'x'}}]</answer>"),
    ("gui-r1", f"<think>t</think><answer>[{{'action': {_HEX}, 'point': [5, 5], 'input_text': 'x'}}]</answer>"),
    ("gui-r1", "<think>t</think><answer>[{'action': 'type', 'point': [1, 2], 'input_text': '\\d'}]</answer>"),
    ("gui-r1", f"<think>t</think><answer>[{{'action': 'click', 'point': [5, {'0' * 5000}7], 'input_text': 'x'}}]"
               "</answer>"),  # leading zeros count toward int()'s digit limit
    ("gui-r1", "<think>" + _TAGS),  # the quadratic format regex: 156 KiB
    ("gui-r1", f"<think>t</think><answer>[{_ITEMS}]</answer>"),  # 8,000 items
    ("qwen2.5-vl/computer_use", call_text("computer_use", action="left_click", coordinate=[int(_BIG), 5])),
    ("qwen2.5-vl/computer_use", call_text("computer_use", action="scroll", pixels=int(_BIG))),
    ("qwen2.5-vl/computer_use", call_text("computer_use", action="wait", time=int(_BIG))),
    ("qwen2.5-vl/computer_use", call_text("computer_use", action=[])),
    ("qwen2.5-vl/computer_use", '<tool_call>{"name": "computer_use", "arguments": {"action": "left_click", '
                                f'"coordinate": [{_HUGE}, 5]}}}}</tool_call>'),
    ("qwen2.5-vl/mobile_use", call_text("mobile_use", action={"a": 1})),
    ("qwen2.5-vl/grounding", f'[{{"bbox_2d": [{_BIG}, 1, 2, 3]}}]'),
    ("qwen2.5-vl/grounding", f'<points x{_HUGE}="1" y{_HUGE}="2">'),
    ("qwen2.5-vl/grounding", "<point " + " " * 60000),
    ("infigui-g1", f'<think>t</think>[{{"point_2d": [{_BIG}, 5]}}]'),
    ("infigui-g1", f'<think>t</think>[{{"point_2d": [{_HUGE}, 5]}}]'),
    ("infigui-g1", f'<think>t</think>[{{"point_2d": [-{_BIG}, 5]}}, {{"point_2d": [1.5, 2]}}, {{"point_2d": [3, 4]}}]'),
    ("infigui-g1", "<think>t</think>" + _PARABOLA),  # the cubic collinear test: 1,000 points
    ("ui-tars-1.5/computer", f"Action: click(start_box='({_HUGE},5)')"),
    ("ui-tars-1.5/computer", "Action: click(start_box='(٣,5)')"),
    ("ui-tars-1.5/computer", f"Action: click(start_box={_HEX})"),
    ("ui-tars-1.5/computer", f"Action: hotkey(key={_HEX})"),
    ("ui-tars-1.5/mobile", "Action: long_press(start_box='(5,5)', time='1" + " " * 30000 + "x')"),
]

# -- mutations ----------------------------------------------------------------------------------------

_NOISE = ["[", "]", "{", "}", '"', "'", ",", ":", "\\", "\n", "\n\n", " ", "(", ")", "=", "-", ".", "e", "0",
          "<think>", "</think>", "<answer>", "</answer>", "<tool_call>", "</tool_call>", "Action:", "Thought:",
          "<|box_start|>", "<point>", "-100", "null", "None", "true", "NaN", "Infinity", "1e400", "٣", "²", "３",
          "\x00", "\ud800", "\u2028", "😀", "é", "**", "#", "'''", "\\u0000", "\\d"]
_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")
_STRING = re.compile(r"\"[^\"\n]*\"|'[^'\n]*'")
_LIST = re.compile(r"\[[^\[\]]*\]")
_OPS = ("insert", "delete", "replace", "huge", "digits", "nest", "empty", "type", "repeat", "truncate")


def _noise(rng: random.Random) -> str:
    if rng.random() < 0.8:
        return rng.choice(_NOISE)
    return "".join(chr(rng.choice([rng.randrange(32, 127), rng.randrange(0x80, 0x3000)]))
                   for _ in range(rng.randint(1, 6)))


def _replace_match(text: str, pattern: re.Pattern[str], rng: random.Random, new: Callable[[str], str]) -> str:
    found = list(pattern.finditer(text))
    if not found:
        return text
    m = rng.choice(found)
    return text[:m.start()] + new(m.group(0)) + text[m.end():]


def mutate(text: str, rng: random.Random) -> str:
    """``text`` after 1-4 random edits (see the module docstring); ``rng`` decides everything."""
    for _ in range(rng.randint(1, 4)):
        op = rng.choice(_OPS)
        i = rng.randint(0, len(text))
        if op == "insert":
            text = text[:i] + _noise(rng) + text[i:]
        elif op == "delete":
            text = text[:i] + text[i + rng.randint(1, 8):]
        elif op == "replace":
            text = text[:i] + _noise(rng) + text[i + 1:]
        elif op == "huge":
            huge = rng.choice([_BIG, "-" + _BIG, _HUGE, "1e400", "-1e400", _HEX, "1" * 20, "0" * 50 + "7"])
            text = _replace_match(text, _NUMBER, rng, lambda _: huge)
        elif op == "digits":
            table = str.maketrans("0123456789", rng.choice(["٠١٢٣٤٥٦٧٨٩", "⁰¹²³⁴⁵⁶⁷⁸⁹", "０１２３４５６７８９"]))
            text = _replace_match(text, _NUMBER, rng, lambda s: s.translate(table))
        elif op == "nest":
            depth = rng.choice([1, 2, 3, 50, 1000])
            pattern = rng.choice([_NUMBER, _STRING, _LIST])
            text = _replace_match(text, pattern, rng, lambda s: "[" * depth + s + "]" * depth)
        elif op == "empty":
            text = _replace_match(text, _LIST, rng, lambda _: rng.choice(["[]", "{}", "()", "[[]]"]))
        elif op == "type":
            wrong = rng.choice(["[]", "{}", "null", "None", "true", '"s"', "'s'", "1.5", "[1]", "[[1, 2]]", '{"a": 1}',
                                "()", "1j", "-0", "b'x'", "..."])
            text = _replace_match(text, rng.choice([_NUMBER, _STRING, _LIST]), rng, lambda _: wrong)
        elif op == "repeat":
            n = rng.choice([2, 3, 10, 50, 2000])
            j = rng.randint(i, min(len(text), i + 60))
            text = text[:i] + text[i:j] * n + text[j:]
        elif op == "truncate":
            text = text[:i]
    return text

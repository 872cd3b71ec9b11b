"""The fuzzer's super-linear cases: the code the fixes replaced (the naive path) against the new code, and
how the new code grows when its input grows tenfold."""

from __future__ import annotations

import ast
import itertools
import json
import math
import multiprocessing
import re
import time
from collections.abc import Callable
from typing import Any

from bench.fuzz.inputs import call_text, gui_r1_item
from bench.fuzz.run import FRAME, preset_of
from policy.errors import FormatParseError
from policy.formats import get_format
from policy.formats.base import MAX_OUTPUT_CHARS
from policy.formats.positions import SourcePositions
from policy.presets import ModelPreset
from train.collinear import is_collinear
from train.rewards import aepo_reward, guir1_format_ok

# -- the naive path: the code the fixes replaced ------------------------------------------------------

OLD_FORMAT_RE = re.compile(r"<think>.*?</think>\s*<answer>.*?</answer>", re.DOTALL)
"""GUI-R1's format test before: a fullmatch that backtracks over every </think> (quadratic)."""


def old_is_collinear(points: list[tuple[float, float]]) -> bool:
    """AEPO's collinear test before: every triple (cubic)."""
    if len(points) < 3:
        return False
    for (x1, y1), (x2, y2), (x3, y3) in itertools.combinations(points, 3):
        lhs, rhs = (y2 - y1) * (x3 - x1), (y3 - y1) * (x2 - x1)
        if lhs == rhs:
            return True
        if not (isinstance(lhs, int) and isinstance(rhs, int)) and math.isclose(lhs, rhs):
            return True
    return False


def old_node_positions(content: str, nodes: list[ast.AST]) -> list[int]:
    """GUI-R1's item positions before: the answer split and the line re-encoded for every node."""
    out = []
    for node in nodes:
        lines = content.splitlines(keepends=True) or [""]
        idx = min(max(getattr(node, "lineno", 1) - 1, 0), len(lines) - 1)
        before = sum(len(line) for line in lines[:idx])
        out.append(before + len(lines[idx].encode("utf-8")[:node.col_offset].decode("utf-8", "ignore")))
    return out


def new_node_positions(content: str, nodes: list[ast.AST]) -> list[int]:
    at = SourcePositions(content)
    return [at.node(node) for node in nodes]


def _best_of(fn: Callable[..., Any], *args: Any, runs: int = 3) -> float:
    best = math.inf
    for _ in range(runs):
        start = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - start)
    return best


def _limited(fn: Callable[..., Any], args: tuple[Any, ...], limit_s: float) -> float | None:
    """Seconds ``fn(*args)`` takes in a forked child, or None when it is still running after ``limit_s``
    (a regex cannot be interrupted from inside)."""
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)

    def child() -> None:
        start = time.perf_counter()
        fn(*args)
        send.send(time.perf_counter() - start)

    process = ctx.Process(target=child)
    process.start()
    process.join(limit_s)
    if process.is_alive():
        process.kill()
        process.join()
        return None
    return receive.recv() if receive.poll() else None


def old_worst_tags(kib: float) -> str:
    """The old format regex's worst case: many ``</think><answer>`` and no closing tag."""
    return "<think>" + "</think><answer>" * int(kib * 1024 / 16)


def tags_closed(n: int) -> str:
    """The new format test's worst case: it ends with ``</answer>`` and each of the ``n`` ``</think>`` is
    tried."""
    return "<think>" + "</think> x<answer>" * n + "</answer>"


def items(n: int, sep: str = ", ", text: str = "no input text") -> str:
    """A GUI-R1 answer list of ``n`` clicks."""
    return "[" + sep.join([gui_r1_item("click", (5, 5), text)] * n) + "]"


def parabola(n: int) -> list[tuple[int, int]]:
    return [(i, i * i) for i in range(n)]  # a parabola: no three in line, so every direction is tried


def _parsed(answer: str) -> tuple[str, list[ast.AST]]:
    return answer, list(ast.parse(answer, mode="eval").body.elts)  # type: ignore[attr-defined]


def _attempt(fmt: Any, text: str, space: Any, preset: ModelPreset) -> None:
    try:
        fmt.parse(text, space, preset)
    except FormatParseError:
        pass


def naive_paths(limit_s: float) -> list[dict[str, Any]]:
    """The fuzzer's super-linear cases, old code (in a child, killed at ``limit_s``) against new, on the same
    input (the new code may reject it at once: that is part of the fix)."""
    gui_r1, preset = get_format("gui-r1"), preset_of("gui-r1")
    space = preset.space(FRAME)
    one_per_line = _parsed(items(8000, ",\n", "café"))
    rows = []
    for label, old, new, args in [
        ("GUI-R1 format test (reward), 156 KiB", OLD_FORMAT_RE.fullmatch, guir1_format_ok, (old_worst_tags(156),)),
        ("GUI-R1 format test (reward), 60 KiB", OLD_FORMAT_RE.fullmatch, guir1_format_ok, (old_worst_tags(60),)),
        ("is_collinear, 1,000 points", old_is_collinear, is_collinear, (parabola(1000),)),
        ("GUI-R1 item positions, 8,000 items", old_node_positions, new_node_positions, _parsed(items(8000))),
        ("GUI-R1 item positions, 8,000 lines, non-ASCII", old_node_positions, new_node_positions, one_per_line),
        ("GUI-R1 parse, 8,000 items (over the cap)", None, lambda t: _attempt(gui_r1, t, space, preset),
         (f"<think>t</think><answer>{items(8000)}</answer>",)),
    ]:
        before = _limited(old, args, limit_s) if old else None
        after = _best_of(new, *args)
        rows.append({"case": label, "naive_s": None if before is None else round(before, 4),
                     "naive_limit_s": limit_s if old else None, "handeye_s": round(after, 6),
                     "speedup": round(before / after) if before is not None and after > 0 else None,
                     "speedup_at_least": round(limit_s / after) if old and before is None and after > 0 else None})
    return rows


def growth() -> list[dict[str, Any]]:
    """New code only: time at size n and 10 n (best of 3), with 10 n as large as the parsers read. Linear
    work grows about 10x; the collinear test, O(N^2) by design, about 100x."""

    def parse(group: str) -> Callable[[str], None]:
        preset = preset_of(group)
        fmt, space = get_format(preset.family), preset.space(FRAME)
        return lambda text: _attempt(fmt, text, space, preset)

    def kwargs(n: int) -> str:
        return "Action: click(start_box='(1,2)', " + ", ".join(f"k{i}='v'" for i in range(n)) + ")"

    def calls(n: int) -> str:
        return "\n".join([call_text("computer_use", action="mouse_move", coordinate=[10, 20])] * n)

    def point_list(n: int) -> str:
        return "<think>t</think>" + json.dumps([{"point_2d": [i % 1288, (i * 7) % 728]} for i in range(n)])

    def answer(n: int) -> str:
        return "<think>t</think><answer>" + items(n, ",\n", "café") + "</answer>"

    cases: list[tuple[str, Callable[[Any], Any], Callable[[int], Any]]] = [
        ("GUI-R1 format test (reward), </think> tags", guir1_format_ok, tags_closed),
        ("GUI-R1 parse, items one per line", parse("gui-r1"), answer),
        ("UI-TARS parse, keyword arguments", parse("ui-tars-1.5/computer"), kwargs),
        ("Qwen2.5-VL parse, tool calls", parse("qwen2.5-vl/computer_use"), calls),
        ("InfiGUI-G1 parse, points", parse("infigui-g1"), point_list),
        ("AEPO reward, points", lambda t: aepo_reward(t, (0, 0, 10, 10)), point_list),
    ]
    rows = []
    for label, fn, make in cases:
        n = max(1, int(0.09 * MAX_OUTPUT_CHARS * 10 / len(make(10))))  # 10 n fills 90% of the limit
        rows.append(_grow(label, fn, make(n), make(10 * n), n))
    rows.append(_grow("is_collinear, points (no three in line)", is_collinear, parabola(100), parabola(1000), 100))
    return rows


def _grow(label: str, fn: Callable[[Any], Any], small: Any, large: Any, n: int) -> dict[str, Any]:
    t1, t10 = _best_of(fn, small), _best_of(fn, large)
    return {"case": label, "n": n, "sizes": [len(small), len(large)], "seconds": [round(t1, 6), round(t10, 6)],
            "ratio": round(t10 / t1, 1) if t1 > 0 else None}

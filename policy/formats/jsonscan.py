"""A tolerant reader of the JSON lists and objects in model answers.

Models write JSON inside chatter, code fences and think blocks, and their answers are sometimes cut
off by the token limit. ``scan_json_list`` decodes a list item by item and keeps the complete items
of a list that breaks off; ``decode_json`` turns every way ``json`` can fail into one ``JsonError``
(``policy.errors``) with an offset, so parsers can say where an answer went wrong (FormatParseError). Used by the
Qwen2.5-VL and InfiGUI-G1 formats.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from policy.errors import FormatParseError, JsonError

_DECODER = json.JSONDecoder()
_WS = " \t\r\n"


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
    """The first offset at or after ``pos`` that is not JSON whitespace."""
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


def is_number(v: Any) -> bool:
    """Whether a decoded JSON value is a number (booleans are not)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)

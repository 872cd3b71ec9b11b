"""JSON from files people hand to handeye (grounding datasets, training rows, action scripts), read within limits.

Python's ``json`` has no limits of its own: a file nested 100,000 levels deep raises ``RecursionError`` from deep
inside the decoder, a 5,000-digit number raises ``ValueError`` (CPython refuses integers over 4,300 digits), and a
huge file is read whole into memory first. Here each of those is a ``ValueError`` whose message says where (line,
and the record's index in a top-level list) and what to do, found before anything is decoded:

- ``MAX_FILE_BYTES``: checked with ``stat`` before the file is read, and only a regular file is read
  (``devices.files.read_regular``: a FIFO or a device is refused, never waited on);
- ``MAX_DEPTH``: nesting of lists and objects (a dataset record or an action is 2 or 3 levels deep);
- ``MAX_NUMBER_CHARS``: characters of one number (a float64 written out in full takes about 24).

Callers turn the ``ValueError`` into their own kind of rejection (a rejected file or row, a refused script).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from devices.files import read_regular

__all__ = ["MAX_DEPTH", "MAX_FILE_BYTES", "MAX_NUMBER_CHARS", "check_json", "loads_bounded", "read_bounded"]

MAX_FILE_BYTES = 256 * 1024 * 1024
"""The largest file read: the published ScreenSpot splits are under 2 MB; a million-row JSONL is about 200 MB."""
MAX_DEPTH = 64
"""The deepest nesting of lists and objects accepted (far below where Python's decoder runs out of stack)."""
MAX_NUMBER_CHARS = 64
"""The longest number accepted, sign, digits, point and exponent included."""

# One token per string (an unterminated one runs to the end: the decoder then reports it), bracket, comma or
# number. Whatever else there is (whitespace, colons, true/false/null) cannot nest and is skipped.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{},]|-?[0-9][0-9.eE+-]*', re.DOTALL)


def _where(text: str, pos: int, record: int | None, first_line: int) -> str:
    line = text.count("\n", 0, pos) + first_line
    return f"line {line}" if record is None else f"record {record} (line {line})"


def check_json(text: str, *, first_line: int = 1, records: bool = True) -> str | None:
    """Why ``text`` exceeds the limits (where, what, what to do), or None when it is within them.

    Places are given as lines counted from ``first_line`` (a JSONL row passes its line number) and, with
    ``records``, as the index of the record in a top-level list. Only the limits are checked, not the grammar:
    ``json.loads`` reports grammar errors as usual."""
    depth, record, top_list = 0, None, records and text.lstrip().startswith("[")
    for match in _TOKEN.finditer(text):
        token = match.group()
        first = token[0]
        if first in "[{":
            depth += 1
            if depth == 1 and top_list:
                record = 0
            if depth > MAX_DEPTH:
                return (f"{_where(text, match.start(), record, first_line)} is nested more than {MAX_DEPTH} "
                        f"levels deep (MAX_DEPTH); a dataset record or an action is 2 or 3 levels deep: the file is "
                        f"damaged or not what it should be, check how it was written")
        elif first in "]}":
            depth -= 1
        elif first == ",":
            if depth == 1 and record is not None:
                record += 1
        elif first != '"' and len(token) > MAX_NUMBER_CHARS:
            return (f"{_where(text, match.start(), record, first_line)} holds a number of {len(token)} "
                    f"characters ({token[:12]}...), more than {MAX_NUMBER_CHARS} (MAX_NUMBER_CHARS); coordinates and "
                    f"sizes are short numbers: fix or remove that value")
    return None


def _int(token: str) -> int:
    if len(token) > MAX_NUMBER_CHARS:
        raise ValueError(f"a number of {len(token)} characters")
    return int(token)


def _float(token: str) -> float:
    if len(token) > MAX_NUMBER_CHARS:
        raise ValueError(f"a number of {len(token)} characters")
    return float(token)


def _too_deep(value: Any) -> bool:
    """Whether ``value`` nests lists and objects more than ``MAX_DEPTH`` levels (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if depth > MAX_DEPTH:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False


def loads_bounded(text: str, *, first_line: int = 1, records: bool = True) -> Any:
    """``json.loads(text)`` within the limits: ``ValueError`` saying where and what otherwise (``JSONDecodeError``
    for grammar, as usual), never ``RecursionError``.

    The decoder's own hooks check numbers and a walk checks depth, so a file within the limits costs little more
    than ``json.loads``; only a refused one is scanned again (``check_json``, which takes ``first_line`` and
    ``records``) to say where the problem is."""
    try:
        value = json.loads(text, parse_int=_int, parse_float=_float)
    except json.JSONDecodeError:
        raise
    except (RecursionError, ValueError) as exc:
        raise ValueError(check_json(text, first_line=first_line, records=records)
                         or f"beyond the limits of a JSON input ({exc})") from None
    if isinstance(value, (dict, list)) and _too_deep(value):
        raise ValueError(check_json(text, first_line=first_line, records=records)
                         or f"nested more than {MAX_DEPTH} levels deep (MAX_DEPTH)")
    return value


def read_bounded(path: str | Path) -> str:
    """The UTF-8 text of ``path`` when it is a regular file of at most ``MAX_FILE_BYTES``; ``ValueError`` when larger
    (the size is checked before reading) or not a regular file (a FIFO or a device: never waited on,
    ``devices.files.read_regular``), ``OSError`` / ``UnicodeDecodeError`` as from ``Path.read_text``."""
    path = Path(path)
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ValueError(f"{path} is {size:,} bytes, more than {MAX_FILE_BYTES:,} (MAX_FILE_BYTES); split it into "
                         f"smaller files")
    return read_regular(path, MAX_FILE_BYTES).decode("utf-8")

"""Character offsets of what ``ast`` finds in a model's answer, from one pass over the text.

``ast`` places a node by line number and a column counted in UTF-8 bytes, and a SyntaxError by line
and character; parse errors quote the model output by character offset. Splitting the text and
re-encoding a line for every node costs the whole text per node, so an answer of 8,000 actions took
seconds. ``SourcePositions`` finds the line starts once and converts the byte columns of a line with
non-ASCII characters through a table built the first time that line is asked about: the cost is
linear in the text, however many nodes are placed. Used by the GUI-R1 and UI-TARS parsers.
"""

from __future__ import annotations

import ast
import bisect
import itertools
import re

__all__ = ["SourcePositions"]

_NEWLINE = re.compile(r"\r\n|\r|\n")
"""Python's tokenizer ends lines at these (form feeds and U+2028 do not end a line for ``ast``)."""


def _utf8_len(char: str) -> int:
    """Bytes of ``char`` in UTF-8; a lone surrogate counts 3, as "surrogatepass" would write it."""
    code = ord(char)
    return 1 if code < 0x80 else 2 if code < 0x800 else 3 if code < 0x10000 else 4


class SourcePositions:
    """Offsets in the model output of places in ``source``, the text ``ast`` read, which starts at
    offset ``base`` of the output."""

    def __init__(self, source: str, base: int = 0) -> None:
        self._source = source
        self._base = base
        self._starts = [0, *(m.end() for m in _NEWLINE.finditer(source))]
        self._ascii = source.isascii()
        self._byte_columns: dict[int, list[int]] = {}
        """line index -> the byte offset of each character of that line (non-ASCII lines only)."""

    def _line(self, lineno: int | None) -> int:
        return min(max((lineno or 1) - 1, 0), len(self._starts) - 1)

    def _line_end(self, index: int) -> int:
        return self._starts[index + 1] if index + 1 < len(self._starts) else len(self._source)

    def node(self, node: ast.AST) -> int:
        """The offset where ``node`` starts."""
        index = self._line(getattr(node, "lineno", 1))
        col = max(getattr(node, "col_offset", 0), 0)
        start = self._starts[index]
        if not self._ascii:
            columns = self._byte_columns.get(index)
            if columns is None:
                line = self._source[start:self._line_end(index)]
                columns = list(itertools.accumulate(map(_utf8_len, line), initial=0))
                self._byte_columns[index] = columns
            col = bisect.bisect_right(columns, col) - 1
        return self._base + min(start + col, self._line_end(index))

    def syntax_error(self, error: SyntaxError) -> int:
        """The offset a SyntaxError points at (its ``offset`` counts characters, from 1)."""
        index = self._line(error.lineno)
        col = max((error.offset or 1) - 1, 0)
        return self._base + min(self._starts[index] + col, len(self._source))

"""Text from outside (a task, a page, a model's output, a file, an error message quoting any of those) shown on a
terminal through rich: as text, never as markup and never as terminal control.

    console.print(f"[bold]task[/] {plain(task)}")

``plain`` escapes rich markup (``[/b]`` in a model's output would otherwise end someone else's style or raise
``MarkupError``) and writes control characters as visible escapes (an ANSI sequence in a page's text would
otherwise move the cursor, clear the screen or retitle the terminal). Newlines and tabs stay.
"""

from __future__ import annotations

import re
from typing import Any

from rich.markup import escape

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""C0 and C1 controls (not tab and newline), DEL, and the bidirectional overrides that reorder shown text."""


def plain(text: Any) -> str:
    """``text`` (any value, shown with ``str``) safe to put inside a rich markup string."""
    return escape(_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                               else f"\\u{ord(m.group()):04x}", str(text)))

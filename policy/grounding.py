"""Pure text grounding for the OCR policy: find a label among OCR lines, and tell the label from its look-alikes.

The instruction is read by ``policy.instructions``.

Nothing here runs OCR or touches a device, so every rule is unit-testable on hand-built lines.

Text is compared after normalisation (NFKC, casefold, whitespace collapsed) at three levels, each a
weaker form of equality than the one before:

- ``EXACT``: the normalised text as it is;
- ``SPACELESS``: spaces dropped too, because OCR often loses or invents the gap between words
  ("Saveas draft", "保存设置取消" for "保存 设置取消");
- ``CONFUSABLE``: spaces dropped and glyphs OCR mixes up mapped to one form (l/I/1/|/! and O/0), so
  "lnsert" matches "Insert".

Ranking, best first (the first rule that differs decides):

1. tier: ``LINE`` (the whole OCR line equals the label) > ``WORDS`` (the label is one or more whole
   words inside a longer line; a word ends at a space, punctuation, a lower-to-upper case change as
   in "FileEditView", or a CJK character, so for Chinese any substring counts) > ``SUBSTRING`` (the
   label sits inside a longer word, as "subscribe" in "Unsubscribe") > ``FUZZY`` (difflib ratio of
   the label against the line, against runs of as many words as the label has, and for CJK labels
   against runs of as many characters, at least ``fuzzy_threshold``). Fuzzy is only tried when no
   line matches in a better tier;
2. level: ``EXACT`` > ``SPACELESS`` > ``CONFUSABLE``, so an exact "Insert" always beats "lnsert";
3. which label: the instruction's label before its alternative (the phrase with the role word kept,
   "Main Menu" for "click Main Menu" whose label is "Main");
4. fuzzy ratio, higher first (1.0 for the exact tiers);
5. OCR score, higher first, in steps of 0.05 so noise in the third decimal cannot outrank rule 6;
6. the shorter line (the tighter the line around the label, the likelier it is the label's own
   element);
7. position: top to bottom, then left to right, so the answer never depends on the OCR's order.

A match that is not the label itself but a look-alike of it ("Save as", "Unsave", "Autosave" for "Save") is told
apart by ``lookalike``; ``find_target(..., allow_lookalikes=False)`` leaves such matches out, so a screen that
holds only look-alikes has no match and the target is absent.

The matched box is the union of the matched characters' boxes (clipped to the line's box), not the
whole line: OCR merges neighbouring labels into one line ("FileEditViewInsert"), and clicking the
centre of that line would hit the wrong item. A whole-line match uses the line's detected box.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum

DEFAULT_FUZZY_THRESHOLD = 0.8

# -- geometry ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rect:
    """A frame pixel rectangle in continuous coordinates: [left, right) x [top, bottom)."""

    left: float
    top: float
    right: float
    bottom: float

    def __post_init__(self) -> None:
        if self.right < self.left or self.bottom < self.top:
            raise ValueError(f"a Rect needs left <= right and top <= bottom, got {self.as_list()}")

    @property
    def width(self) -> float:
        return self.right - self.left

    @property
    def height(self) -> float:
        return self.bottom - self.top

    @property
    def center(self) -> tuple[float, float]:
        return (self.left + self.right) / 2, (self.top + self.bottom) / 2

    def union(self, other: Rect) -> Rect:
        return Rect(
            min(self.left, other.left),
            min(self.top, other.top),
            max(self.right, other.right),
            max(self.bottom, other.bottom),
        )

    def clip_to(self, outer: Rect) -> Rect:
        """This rect limited to ``outer``; a rect wholly outside collapses onto outer's nearest edge."""
        left = min(max(self.left, outer.left), outer.right)
        top = min(max(self.top, outer.top), outer.bottom)
        return Rect(left, top, max(left, min(self.right, outer.right)), max(top, min(self.bottom, outer.bottom)))

    def contains(self, other: Rect, tolerance: float = 1e-6) -> bool:
        return (
            other.left >= self.left - tolerance
            and other.top >= self.top - tolerance
            and other.right <= self.right + tolerance
            and other.bottom <= self.bottom + tolerance
        )

    def scaled(self, factor: float) -> Rect:
        return Rect(self.left * factor, self.top * factor, self.right * factor, self.bottom * factor)

    def as_list(self) -> list[float]:
        return [self.left, self.top, self.right, self.bottom]

    @classmethod
    def around(cls, points: Iterable[Sequence[float]]) -> Rect:
        """The axis-aligned rect around a polygon's (x, y) points (OCR gives 4-point quads)."""
        xs, ys = zip(*((float(p[0]), float(p[1])) for p in points), strict=True)
        return cls(min(xs), min(ys), max(xs), max(ys))


def _char_weight(char: str) -> int:
    # Wide (CJK, full-width) glyphs take about twice the width of Latin ones.
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def spread_chars(text: str, box: Rect) -> tuple[tuple[str, Rect], ...]:
    """Character boxes spread over ``box`` by estimated glyph width, for lines OCR gave no positions for."""
    weights = [_char_weight(c) for c in text]
    total = sum(weights) or 1
    out: list[tuple[str, Rect]] = []
    x = box.left
    for char, weight in zip(text, weights, strict=True):
        right = min(box.right, x + box.width * weight / total)
        out.append((char, Rect(x, box.top, right, box.bottom)))
        x = right
    return tuple(out)


@dataclass(frozen=True, slots=True)
class OcrLine:
    """One line of text read off the screen, with a box per character (``chars[i]`` is ``text[i]``).

    Leave ``chars`` empty when the OCR gave no character positions: they are then spread over the
    line's box by estimated glyph width.
    """

    text: str
    score: float
    box: Rect
    chars: tuple[tuple[str, Rect], ...] = ()

    def __post_init__(self) -> None:
        if not self.chars:
            object.__setattr__(self, "chars", spread_chars(self.text, self.box))
        elif len(self.chars) != len(self.text):
            raise ValueError(
                f"OcrLine {self.text!r} has {len(self.text)} characters but {len(self.chars)} character boxes; "
                "give one box per character (spaces included) or none"
            )


# -- normalisation -------------------------------------------------------------------------------


class Level(IntEnum):
    """How loosely text was compared; lower is stricter and ranks first."""

    EXACT = 0
    SPACELESS = 1
    CONFUSABLE = 2


class Tier(IntEnum):
    """How the label sits in the line; lower ranks first."""

    LINE = 1
    WORDS = 2
    SUBSTRING = 3
    FUZZY = 4


#: glyphs OCR confuses, each mapped to one representative (applied after casefolding)
CONFUSABLES = {"l": "i", "1": "i", "|": "i", "!": "i", "0": "o"}


@dataclass(frozen=True, slots=True)
class Normalized:
    """Normalised text and, for each of its characters, the index of the source character."""

    text: str
    src: tuple[int, ...]


def normalize(text: str, level: Level = Level.EXACT) -> Normalized:
    """NFKC + casefold + whitespace collapsed (and at looser levels: spaces dropped, confusables mapped).

    Done per source character so every normalised character still points at the character (and so
    the box) it came from.
    """
    out: list[str] = []
    src: list[int] = []
    pending_space = -1
    for i, char in enumerate(text):
        if char.isspace():
            if out and pending_space < 0:
                pending_space = i
            continue
        if pending_space >= 0 and level is Level.EXACT:
            out.append(" ")
            src.append(pending_space)
        pending_space = -1
        for piece in unicodedata.normalize("NFKC", char).casefold():
            if piece.isspace():  # NFKC turns some symbols into spaced forms
                continue
            if level is Level.CONFUSABLE:
                piece = CONFUSABLES.get(piece, piece)
            out.append(piece)
            src.append(i)
    return Normalized("".join(out), tuple(src))


def is_cjk(char: str) -> bool:
    """Whether the character is a CJK ideograph, kana, hangul or full-width form (no word spaces)."""
    return unicodedata.east_asian_width(char) in ("W", "F") and not char.isspace()


def _boundary(text: str, before: int, after: int) -> bool:
    """Whether a word boundary lies between text[before] and text[after] (either may be off the end)."""
    if before < 0 or after >= len(text):
        return True
    left, right = text[before], text[after]
    if not left.isalnum() or not right.isalnum():
        return True
    if is_cjk(left) or is_cjk(right):
        return True
    return left.islower() and right.isupper()  # camel case: "FileEdit" has a boundary at "eE"


# -- matching ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Match:
    """Where a label was found: the line, the matched characters ``line.text[start:end]`` and their box."""

    label: str
    line: OcrLine
    start: int
    end: int
    box: Rect
    tier: Tier
    level: Level
    ratio: float = 1.0

    @property
    def text(self) -> str:
        return self.line.text[self.start : self.end]


def _span_box(line: OcrLine, start: int, end: int) -> Rect:
    if start == 0 and end >= len(line.text.rstrip()) and not line.text[:1].isspace():
        return line.box
    box = line.chars[start][1]
    for _, rect in line.chars[start + 1 : end]:
        box = box.union(rect)
    return box.clip_to(line.box)


def _make_match(label: str, line: OcrLine, norm: Normalized, a: int, b: int, tier: Tier, level: Level) -> Match:
    """A Match for normalised characters [a, b) of ``norm`` (the normalised ``line.text``)."""
    start, end = norm.src[a], norm.src[b - 1] + 1
    return Match(label, line, start, end, _span_box(line, start, end), tier, level)


def _exact_match(label: str, line: OcrLine, level: Level) -> Match | None:
    """The best tier-1..3 match of ``label`` in ``line`` at ``level``, or None."""
    needle = normalize(label, level).text
    if not needle:
        return None
    hay = normalize(line.text, level)
    if hay.text == needle:
        return _make_match(label, line, hay, 0, len(hay.text), Tier.LINE, level)
    first: Match | None = None
    at = hay.text.find(needle)
    while at >= 0:
        end = at + len(needle)
        start_src, end_src = hay.src[at], hay.src[end - 1]
        if _boundary(line.text, start_src - 1, start_src) and _boundary(line.text, end_src, end_src + 1):
            return _make_match(label, line, hay, at, end, Tier.WORDS, level)
        if first is None:
            first = _make_match(label, line, hay, at, end, Tier.SUBSTRING, level)
        at = hay.text.find(needle, at + 1)
    return first


def _windows(label: str, line: OcrLine) -> Iterable[tuple[int, int]]:
    """Spans of ``line.text`` (start, end) worth comparing fuzzily with ``label``."""
    text = line.text
    yield 0, len(text)
    words = [m.span() for m in re.finditer(r"\S+", text)]
    n = len(label.split())
    if 0 < n < len(words):
        for i in range(len(words) - n + 1):
            yield words[i][0], words[i + n - 1][1]
    if any(is_cjk(c) for c in label):
        size = len(normalize(label, Level.SPACELESS).text)
        glyphs = [i for i, c in enumerate(text) if not c.isspace()]
        for i in range(len(glyphs) - size + 1):
            yield glyphs[i], glyphs[i + size - 1] + 1


def _fuzzy_match(label: str, line: OcrLine, threshold: float) -> Match | None:
    best: Match | None = None
    for level in (Level.SPACELESS, Level.CONFUSABLE):
        needle = normalize(label, level).text
        if not needle:
            return None
        for start, end in _windows(label, line):
            hay = normalize(line.text[start:end], level).text
            if not hay:
                continue
            ratio = difflib.SequenceMatcher(None, needle, hay, autojunk=False).ratio()
            if ratio >= threshold and (best is None or ratio > best.ratio):
                box = _span_box(line, start, end)
                best = Match(label, line, start, end, box, Tier.FUZZY, level, ratio)
        if best is not None:
            return best  # a spaceless fuzzy match outranks any confusable one
    return best


def _rank(match: Match, label_index: int) -> tuple[float, ...]:
    line = match.line
    score_step = round(line.score * 20) / 20
    length = len(normalize(line.text).text)
    return (match.tier, match.level, label_index, -match.ratio, -score_step, length, line.box.top, line.box.left)


def find_target(
    labels: str | Sequence[str],
    lines: Sequence[OcrLine],
    fuzzy_threshold: float = DEFAULT_FUZZY_THRESHOLD,
    *,
    allow_lookalikes: bool = True,
) -> Match | None:
    """The best place of the label (or of the first of several labels that ranks best), or None.

    See the module docstring for the ranking. With ``allow_lookalikes=False`` a match that ``lookalike`` calls a
    look-alike ("Save as" for "Save") is no match, so only look-alikes on the screen give None: the target is absent.
    """
    if isinstance(labels, str):
        labels = (labels,)
    keep = (lambda m: True) if allow_lookalikes else (lambda m: lookalike(m) is None)
    candidates: list[tuple[tuple[float, ...], Match]] = []
    for index, label in enumerate(labels):
        for line in lines:
            for level in Level:
                # every level is tried: a looser one can find a better tier ("Reinsert lnsert")
                found = _exact_match(label, line, level)
                if found is not None and keep(found):
                    candidates.append((_rank(found, index), found))
    if not candidates:
        for index, label in enumerate(labels):
            for line in lines:
                found = _fuzzy_match(label, line, fuzzy_threshold)
                if found is not None and keep(found):
                    candidates.append((_rank(found, index), found))
    if not candidates:
        return None
    return min(candidates, key=lambda pair: pair[0])[1]


# -- look-alikes ----------------------------------------------------------------------------------

#: a gap between two glyphs of one OCR line at least this many line heights wide separates two elements that the
#: OCR merged into one line (word spaces inside a label are about a quarter of the line height)
ELEMENT_GAP = 0.6


def _neighbour(text: str, start: int, step: int) -> int | None:
    """The index of the nearest letter, digit or CJK character from ``start`` in direction ``step`` (icons,
    punctuation and spaces skipped), or None at the end of the line."""
    i = start
    while 0 <= i < len(text):
        if text[i].isalnum():
            return i
        i += step
    return None


def _joined(line: OcrLine, inner: int, outer: int, side: int) -> bool:
    """Whether the glyph ``outer`` next to the match (``inner`` is the match's own glyph on that side, ``side`` -1
    before, +1 after) belongs to the same element as the match: no element-sized gap between their boxes, and not a
    camel-case seam of labels rendered without a gap ("FileEditView")."""
    height = max(line.box.height, 1e-6)
    a, b = line.chars[inner][1], line.chars[outer][1]
    gap = (b.left - a.right) if side > 0 else (a.left - b.right)
    if gap >= ELEMENT_GAP * height:
        return False
    left, right = (line.text[inner], line.text[outer]) if side > 0 else (line.text[outer], line.text[inner])
    adjacent = abs(outer - inner) == 1
    camel = left.isalpha() and right.isalpha() and left.islower() and right.isupper() and not is_cjk(left)
    return not (adjacent and camel)


def lookalike(match: Match) -> str | None:
    """Why ``match`` is a look-alike of its label rather than the label itself ("Save as", "Unsave", "Autosave" for
    "Save"; "Photo" for "Photos"), or None when it is the label.

    The label is itself when it is the whole line, or when whatever else the line holds is a separate element: text
    beyond an element-sized gap (``ELEMENT_GAP``), or a label joined at a camel-case seam with no gap at all (a
    menu bar read as "FileEditView"); icons and punctuation around it do not count. A fuzzy match whose text only
    adds or drops letters at one end of the label ("report" for "Reports") is a different word, not a misreading.
    """
    if match.tier is Tier.LINE:
        return None
    found = match.text
    if match.tier is Tier.FUZZY:
        a, b = normalize(match.label, Level.SPACELESS).text, normalize(found, Level.SPACELESS).text
        short, long_ = sorted((a, b), key=len)
        if short != long_ and (long_.startswith(short) or long_.endswith(short)):
            return f"{found!r} is another word than {match.label!r}, not a misreading of it"
    line = match.line
    for side, inner, start in ((-1, match.start, match.start - 1), (1, match.end - 1, match.end)):
        outer = _neighbour(line.text, start, side)
        if outer is not None and _joined(line, inner, outer, side):
            return f"{match.label!r} is part of the longer label {line.text.strip()!r}"
    return None

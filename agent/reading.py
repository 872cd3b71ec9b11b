"""Text as a person reads it off the screen: what the guard matches its words against (agent/guard.py).

A page controls the characters of its labels, not what they look like, so a label can read "Delete" to the
person and be another string to a program: Cyrillic and Greek letters that look Latin (``Dеlеtе``), characters that
draw nothing (zero-width spaces, soft hyphens, bidi controls, Hangul fillers), combining marks over each letter,
full-width and mathematical letters, spaced letters (``D e l e t e``, ``删 除``), a right-to-left override that draws
``eteleD`` as ``Delete``, or the Traditional form of a Chinese word (``刪除`` for ``删除``). ``read_as_seen`` folds
all of these to one form, and the guard folds its own words the same way, so a word matches whatever string draws
it:

1. explicit bidi overrides are applied: a run inside RIGHT-TO-LEFT OVERRIDE is drawn reversed, so it is reversed;
   then each character becomes the prototype of its class in Unicode's confusables data (step 5) once before
   anything else changes it;
2. compatibility decomposition (NFKD): full-width, mathematical and circled letters, ligatures, accents split off;
3. what draws nothing is dropped: format characters (Cf: zero-width space and joiners, soft hyphen, bidi controls,
   word joiner, BOM, tag characters), combining marks (Mn, Me), the default-ignorable letters Unicode lists as
   blank (Hangul fillers), controls; every kind of space becomes one space;
4. Traditional Chinese becomes Simplified (OpenCC's ``t2s`` tables);
5. each character (again) becomes the prototype of its class in Unicode's confusables data
   (``confusables.txt`` of UTS #39, as the ``confusable_homoglyphs`` package ships it), so Cyrillic ``е`` and Latin
   ``e`` read alike, and so do ``I``, ``1`` and ``l``, ``0`` and ``O``, ``rn`` and ``m``; case is folded before
   this step and after it, giving two readings (``read_as_seen`` says why);
6. spaces inside a run of CJK characters are dropped, and so are the spaces of a run of three or more single letters
   (``D e l e t e``).

The confusables data says which characters look alike, not which of them is the "real" one, and it holds pairs both
ways: a character listed with several others is a prototype (it stays), one listed with a single other is folded to
it, and of a pair that only know each other the smaller code point stands for both (ASCII first). Whichever it
picks, the same table folds the word and the label, so the match does not depend on the choice.

What this does not cover is said in docs/security.md ("The guard reads as a person does").
"""

from __future__ import annotations

import re
import unicodedata
from functools import cache

BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800\u180e\u17b4\u17b5")
"""Characters Unicode marks default-ignorable (or that draw as a blank) whose category is not Cf, Mn or Me: the
Hangul fillers, the blank Braille pattern, the Mongolian vowel separator, the Khmer inherent vowels."""

DROPPED_CATEGORIES = frozenset({"Cf", "Mn", "Me", "Cc", "Co", "Cs", "Cn"})
"""Categories that draw nothing a person reads: format, combining marks, controls, private use, surrogates,
unassigned."""

_RLO, _LRO, _RLE, _LRE, _PDF = "\u202e", "\u202d", "\u202b", "\u202a", "\u202c"
_ISOLATES, _PDI = "\u2066\u2067\u2068", "\u2069"
_CJK = r"\u2e80-\u2fdf\u3005-\u3007\u3021-\u3029\u3040-\u30ff\u3100-\u312f\u31a0-\u31ff\u3400-\u4dbf\u4e00-\u9fff" \
       r"\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003ffff"
_CJK_SPACE = re.compile(rf"(?<=[{_CJK}]) (?=[{_CJK}])")
_SPACED_LETTERS = re.compile(r"(?<![^\W\d_])[^\W\d_](?: [^\W\d_]){2,}(?![^\W\d_])")


def read_as_seen(text: str) -> tuple[str, str]:
    """``text`` folded to what a person reads (see the module docstring), two ways: case folded before the
    confusables (so ``İ`` and ``I`` read as ``i``) and after them (so a capital ``I`` reads as the ``l`` it looks like
    in ``DeIete``; in this reading ``i`` and ``l`` are one letter, since a capital I stands for either, as in
    ``PUBIISH``). The two do not commute, so a word matches when its own reading of either kind is in the text's
    reading of that kind. Each is lower-case with one space between words."""
    table = _confusables()
    text = apply_overrides(text)
    # the confusables first, on the characters as written: compatibility forms would lose what they look like
    # (NFKD writes the lunate sigma ϲ, a c to the eye, as σ; the long s ſ, an f, as s). ASCII waits for the two
    # readings below (a capital I is an i or an l).
    text = "".join(ch if ch.isascii() else table.get(ch, ch) for ch in text
                   if ch not in BLANK_LETTERS and unicodedata.category(ch) != "Cf")
    text = unicodedata.normalize("NFKD", text)
    kept: list[str] = []
    for ch in text:
        if ch.isspace():
            kept.append(" ")
        elif ch not in BLANK_LETTERS and unicodedata.category(ch) not in DROPPED_CATEGORIES:
            kept.append(ch)
    text = _simplified("".join(kept))
    return (_tidy("".join(table.get(ch, ch) for ch in text.casefold())),
            _tidy("".join(table.get(ch, ch) for ch in text)).replace("i", "l"))


def _tidy(text: str) -> str:
    text = " ".join(unicodedata.normalize("NFKC", text).casefold().split())
    text = _CJK_SPACE.sub("", text)
    return _SPACED_LETTERS.sub(lambda m: m.group(0).replace(" ", ""), text)


def apply_overrides(text: str) -> str:
    """``text`` in the order explicit bidi overrides draw it: a RIGHT-TO-LEFT OVERRIDE run (up to its POP
    DIRECTIONAL FORMATTING, the end of its isolate or of the text) reversed. Embeddings and isolates without an
    override keep their order (they reorder only right-to-left letters, which no word of the guard has)."""
    if not any(c in text for c in (_RLO, _LRO)):
        return text
    stack: list[tuple[str, list[str]]] = [("", [])]

    def close() -> None:
        kind, chars = stack.pop()
        stack[-1][1].extend(reversed(chars) if kind == _RLO else chars)

    for ch in text:
        if ch in (_RLO, _LRO, _RLE, _LRE) or ch in _ISOLATES:
            stack.append((ch, []))
        elif ch == _PDF and len(stack) > 1 and stack[-1][0] not in _ISOLATES:
            close()
        elif ch == _PDI:
            while len(stack) > 1 and stack[-1][0] not in _ISOLATES:
                close()
            if len(stack) > 1:
                close()
        elif ch in "\n\u2029":  # a paragraph ends every embedding
            while len(stack) > 1:
                close()
            stack[-1][1].append(ch)
        else:
            stack[-1][1].append(ch)
    while len(stack) > 1:
        close()
    return "".join(stack[0][1])


@cache
def _confusables() -> dict[str, str]:
    """Each confusable character to the prototype of its class (the module docstring says how it is chosen)."""
    from confusable_homoglyphs.confusables import confusables_data

    def clean(s: str) -> str:  # the package keeps the marks that show right-to-left glyphs in its comments
        return s.replace("\u200e", "").replace("\u200f", "")

    links: dict[str, set[str]] = {}
    for key, entries in confusables_data.items():
        k = clean(key)
        for entry in entries:
            links.setdefault(k, set()).add(clean(entry["c"]))
    single: dict[str, str] = {}
    for ch, others in links.items():
        if len(ch) != 1 or len(others) != 1:
            continue  # a prototype (listed with several), or a sequence
        (other,) = others
        if len(other) == 1 and len(links.get(other, ())) == 1:  # a pair that only know each other
            single[ch] = min(ch, other, key=lambda c: (not c.isascii(), ord(c)))
        elif len(other) == 1:
            single[ch] = other
    table = dict(single)
    for ch, others in links.items():
        if len(ch) == 1 and len(others) == 1 and len(next(iter(others))) > 1:  # folded to a sequence ("m" -> "rn")
            table[ch] = "".join(single.get(c, c) for c in next(iter(others)))
    return {k: v for k, v in table.items() if k != v}


def _simplified(text: str) -> str:
    """``text`` with Traditional Chinese characters in their Simplified form (unchanged when it has no Han)."""
    if not any("\u3400" <= c <= "\u9fff" or "\uf900" <= c <= "\ufaff" or c >= "\U00020000" for c in text):
        return text
    return _converter().convert(text)


@cache
def _converter():  # type: ignore[no-untyped-def]  # opencc has no type information
    import opencc

    return opencc.OpenCC("t2s")

"""Mutations of valid model outputs, shared by the format parsers' property tests."""

from __future__ import annotations

import re
from collections.abc import Sequence

from hypothesis import strategies as st


def mutated_outputs(valid: Sequence[str], noise: st.SearchStrategy[str], numbers: Sequence[int],
                    droppable: str) -> st.SearchStrategy[str]:
    """Valid outputs with 1-4 edits: insert or replace noise, delete characters, swap a number
    (random or one of ``numbers``, e.g. the image's edge), or drop a quote or bracket."""

    @st.composite
    def mutated(draw: st.DrawFn) -> str:
        text = draw(st.sampled_from(list(valid)))
        for _ in range(draw(st.integers(1, 4))):
            op = draw(st.sampled_from(["insert", "delete", "replace", "number", "drop"]))
            i = draw(st.integers(0, len(text)))
            if op == "insert":
                text = text[:i] + draw(noise) + text[i:]
            elif op == "delete":
                text = text[:i] + text[i + draw(st.integers(1, 8)):]
            elif op == "replace" and i < len(text):
                text = text[:i] + draw(noise) + text[i + 1:]
            elif op == "number":
                nums = list(re.finditer(r"-?\d+", text))
                if nums:
                    m = draw(st.sampled_from(nums))
                    new = str(draw(st.one_of(st.integers(-10**6, 10**6), st.sampled_from(list(numbers)))))
                    text = text[:m.start()] + new + text[m.end():]
            elif op == "drop":
                spots = [k for k, c in enumerate(text) if c in droppable]
                if spots:
                    k = draw(st.sampled_from(spots))
                    text = text[:k] + text[k + 1:]
        return text

    return mutated()


def apply_mutations(text: str, mutations: Sequence[tuple[str, float, str]]) -> str:
    """Apply (op, position fraction, noise) edits: insert, delete, replace, number (a digit
    replaced by the noise) and drop_bracket."""
    for op, frac, s in mutations:
        i = int(frac * (len(text) + 1)) if op == "insert" else int(frac * len(text))
        if op == "insert":
            text = text[:i] + s + text[i:]
        elif op == "delete" and text:
            text = text[:i] + text[i + 1:]
        elif op == "replace" and text:
            text = text[:i] + s + text[i + 1:]
        elif op == "number":
            digits = [j for j, c in enumerate(text) if c.isdigit()]
            if digits:
                j = digits[int(frac * len(digits))]
                text = text[:j] + s + text[j + 1:]
        elif op == "drop_bracket":
            brackets = [j for j, c in enumerate(text) if c in "[]{}"]
            if brackets:
                j = brackets[int(frac * len(brackets))]
                text = text[:j] + text[j + 1:]
    return text

"""Unit tests for policy.grounding: label matching and look-alikes on hand-built OCR lines."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policy.grounding import (
    Level,
    OcrLine,
    Rect,
    Tier,
    find_target,
    lookalike,
    normalize,
)
from policy.instructions import parse_instruction


def line(text: str, x: float = 0, y: float = 0, score: float = 1.0, char_w: float = 10, h: float = 20) -> OcrLine:
    """A line with one char_w-wide box per character starting at (x, y)."""
    chars = tuple((c, Rect(x + i * char_w, y, x + (i + 1) * char_w, y + h)) for i, c in enumerate(text))
    return OcrLine(text, score, Rect(x, y, x + len(text) * char_w, y + h), chars)


# -- matching ----------------------------------------------------------------------------------


SUBSCRIBE_LINES = (line("Subscribe later", 0, 0), line("Unsubscribe", 0, 100), line("Subscribe", 300, 200))


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_exact_line_beats_longer_lines_in_every_order(order: tuple[int, ...]) -> None:
    lines = [SUBSCRIBE_LINES[i] for i in order]
    match = find_target("Subscribe", lines)
    assert match is not None
    assert match.line.text == "Subscribe"
    assert match.tier is Tier.LINE and match.level is Level.EXACT
    assert match.box == SUBSCRIBE_LINES[2].box


def test_whole_word_beats_substring_inside_a_word() -> None:
    match = find_target("subscribe", [line("Unsubscribe"), line("Subscribe later", 0, 50)])
    assert match is not None
    assert match.line.text == "Subscribe later" and match.tier is Tier.WORDS
    assert match.text == "Subscribe"


def test_substring_inside_a_word_is_found_when_nothing_better() -> None:
    match = find_target("subscribe", [line("Unsubscribe")])
    assert match is not None and match.tier is Tier.SUBSTRING and match.text == "subscribe"


def test_merged_menu_bar_is_split_by_character_positions() -> None:
    bar = line("FileEditViewInsert", 100, 40, char_w=8)
    match = find_target("Edit", [bar])
    assert match is not None
    assert match.text == "Edit" and (match.start, match.end) == (4, 8)
    expected = bar.chars[4][1].union(bar.chars[7][1])
    assert match.box == expected
    assert bar.box.contains(match.box)
    assert match.box.width < bar.box.width / 3
    assert match.tier is Tier.WORDS  # the camel-case change "eE" counts as a word boundary


def test_character_boxes_are_used_even_when_unevenly_spaced() -> None:
    # Real glyph positions, not an even split: "Edit" sits at 200..260 of a 100..400 line.
    widths = [20, 20, 20, 20, 15, 15, 15, 15, 40, 40, 40, 40]
    text = "FileEditView"
    chars, x = [], 100.0
    for c, w in zip(text, widths, strict=True):
        chars.append((c, Rect(x, 0, x + w, 20)))
        x += w
    bar = OcrLine(text, 0.99, Rect(100, 0, x, 20), tuple(chars))
    match = find_target("edit", [bar])
    assert match is not None and match.box == Rect(180, 0, 240, 20)


@pytest.mark.parametrize(("label", "text"), [
    ("Save", "Save as"), ("Save", "Unsave"), ("Save", "Autosave"), ("Save", "Save all"),
    ("Settings", "Reset settings"), ("Notifications", "□No notifications"), ("Upload", "Re-upload"),
    ("Reports", "New report"), ("Calendar", "□ Calendars"), ("保存", "取消保存"), ("保存", "全部保存"),
])
def test_only_lookalikes_on_the_screen_mean_the_target_is_absent(label: str, text: str) -> None:
    # what the generated absent screens hold: the best match is a longer or shorter label, not the label itself
    found = find_target(label, [line(text)])
    assert found is not None and lookalike(found) is not None
    assert find_target(label, [line(text)], allow_lookalikes=False) is None


def test_the_label_itself_is_found_past_lookalikes_and_beside_icons() -> None:
    lines = [line("Save as"), line("Unsave", 0, 40), line("Save", 200, 80)]
    assert find_target("Save", lines, allow_lookalikes=False).line.text == "Save"  # type: ignore[union-attr]
    for text in ("□ Save", "⎙Save", "Save.", "Save", "lnsert"):
        found = find_target(text.strip("□⎙.") if text != "lnsert" else "Insert", [line(text)], allow_lookalikes=False)
        assert found is not None and lookalike(found) is None, text
    # a misreading inside the word is still the label
    assert find_target("Subscribe", [line("Subscrbe")], allow_lookalikes=False) is not None


def test_elements_merged_into_one_line_are_told_apart_by_gaps_and_camel_case() -> None:
    # "Save" then, 40 px further (two line heights), "Share": two buttons the OCR read as one line
    chars = [(c, Rect(i * 10, 0, i * 10 + 10, 20)) for i, c in enumerate("Save")]
    chars += [(" ", Rect(40, 0, 80, 20))] + [(c, Rect(80 + i * 10, 0, 90 + i * 10, 20)) for i, c in enumerate("Share")]
    merged = OcrLine("Save Share", 1.0, Rect(0, 0, 130, 20), tuple(chars))
    assert lookalike(find_target("Save", [merged])) is None  # type: ignore[arg-type]
    # the same text with a word space is one label, "Save Share", of which "Save" is a look-alike
    assert lookalike(find_target("Save", [line("Save Share")])) is not None  # type: ignore[arg-type]
    # a menu bar rendered without gaps: camel-case seams separate its items
    assert lookalike(find_target("Edit", [line("FileEditViewInsert")])) is None  # type: ignore[arg-type]


def test_confusable_read_is_matched() -> None:
    match = find_target("Insert", [line("lnsert", 50, 50)])
    assert match is not None and match.level is Level.CONFUSABLE and match.tier is Tier.LINE


@pytest.mark.parametrize("first", [True, False])
def test_exact_beats_confusable(first: bool) -> None:
    exact, misread = line("Insert", 0, 300), line("lnsert", 0, 0)
    lines = [exact, misread] if first else [misread, exact]
    match = find_target("Insert", lines)
    assert match is not None and match.line is exact and match.level is Level.EXACT


def test_a_looser_level_can_give_a_better_tier() -> None:
    # Exactly, "insert" only sits inside "Reinsert"; read loosely, "lnsert" is a whole word.
    match = find_target("Insert", [line("Reinsert lnsert")])
    assert match is not None and match.text == "lnsert"
    assert (match.tier, match.level) == (Tier.WORDS, Level.CONFUSABLE)


def test_zero_and_o_are_confusable() -> None:
    match = find_target("OK", [line("0K")])
    assert match is not None and match.level is Level.CONFUSABLE


def test_cjk_substring_counts_as_words() -> None:
    merged = line("保存 设置取消", 10, 10, char_w=16)
    match = find_target("设置", [merged])
    assert match is not None
    assert match.text == "设置" and match.tier is Tier.WORDS
    assert match.box == merged.chars[3][1].union(merged.chars[4][1])


def test_cjk_exact_line_beats_containing_lines() -> None:
    lines = [line("取消订阅", 0, 0), line("稍后订阅", 0, 40), line("订阅", 0, 80)]
    for order in itertools.permutations(lines):
        match = find_target("订阅", list(order))
        assert match is not None and match.line.text == "订阅"


def test_spaces_lost_by_ocr_still_match() -> None:
    match = find_target("Save as draft", [line("Saveas draft")])
    assert match is not None and match.tier is Tier.LINE and match.level is Level.SPACELESS


def test_fuzzy_match_for_a_misread_label() -> None:
    match = find_target("Subscribe", [line("Subscrbe"), line("Settings", 0, 40)])
    assert match is not None and match.tier is Tier.FUZZY and match.line.text == "Subscrbe"
    assert 0.8 <= match.ratio < 1


def test_fuzzy_match_picks_the_words_not_the_whole_line() -> None:
    match = find_target("Subscribe", [line("Subscrbe to our newsletter")])
    assert match is not None and match.tier is Tier.FUZZY and match.text == "Subscrbe"


def test_fuzzy_threshold_is_respected() -> None:
    assert find_target("Subscribe", [line("Subscrbe")], fuzzy_threshold=0.99) is None


def test_no_match_is_none() -> None:
    assert find_target("Delete account", [line("Subscribe"), line("Cancel", 0, 40)]) is None
    assert find_target("Anything", []) is None
    assert find_target("", [line("Subscribe")]) is None


def test_higher_score_then_shorter_line_then_position() -> None:
    weak, strong = line("Save draft", 0, 0, score=0.6), line("Save draft", 0, 100, score=0.99)
    assert find_target("Save", [weak, strong]).line is strong  # type: ignore[union-attr]
    long, short = line("Save your work now", 0, 0), line("Save work", 0, 100)
    assert find_target("save", [long, short]).line is short  # type: ignore[union-attr]
    top, bottom = line("Save work", 0, 0), line("Save work", 0, 100)
    assert find_target("save", [bottom, top]).line is top  # type: ignore[union-attr]


def test_alternative_label_with_role_word_is_used_when_it_matches_better() -> None:
    parsed = parse_instruction("click Main Menu")
    assert parsed is not None and parsed.labels == ("Main", "Main Menu")
    match = find_target(parsed.labels, [line("Main Street"), line("Main Menu", 0, 50)])
    assert match is not None and match.line.text == "Main Menu" and match.tier is Tier.LINE


def test_lines_without_character_boxes_are_spread_by_glyph_width() -> None:
    bare = OcrLine("保存ab", 1.0, Rect(0, 0, 60, 20))
    widths = [rect.width for _, rect in bare.chars]
    assert widths == pytest.approx([20, 20, 10, 10])
    match = find_target("ab", [bare])
    assert match is not None and match.box == Rect(40, 0, 60, 20)


def test_ocr_line_rejects_mismatched_character_boxes() -> None:
    with pytest.raises(ValueError, match="character boxes"):
        OcrLine("abc", 1.0, Rect(0, 0, 30, 10), (("a", Rect(0, 0, 10, 10)),))


def test_normalize_keeps_source_positions() -> None:
    n = normalize("  Ｓave\u3000  AS ")
    assert n.text == "save as"
    assert n.src == (2, 3, 4, 5, 6, 9, 10)
    assert normalize("l n|", Level.CONFUSABLE).text == "ini"


# -- hypothesis properties ---------------------------------------------------------------------

_words = st.text(alphabet="abcdeilnorstuvxyz01| 订阅取消", min_size=1, max_size=14)


@st.composite
def _lines(draw: st.DrawFn) -> list[OcrLine]:
    texts = draw(st.lists(_words.filter(lambda t: t.strip() != ""), min_size=1, max_size=6))
    out = []
    for i, text in enumerate(texts):
        widths = draw(st.lists(st.floats(1, 30), min_size=len(text), max_size=len(text)))
        x0, y0 = draw(st.floats(0, 500)), i * 40.0
        chars, x = [], x0
        for c, w in zip(text, widths, strict=True):
            chars.append((c, Rect(x, y0, x + w, y0 + 20)))
            x += w
        out.append(OcrLine(text, draw(st.floats(0.5, 1)), Rect(x0, y0, x, y0 + 20), tuple(chars)))
    return out


@settings(max_examples=200, deadline=None)
@given(lines=_lines(), label=_words)
def test_matched_box_lies_inside_its_line(lines: list[OcrLine], label: str) -> None:
    match = find_target(label, lines)
    if match is not None:
        assert match.line.box.contains(match.box)
        assert 0 <= match.start < match.end <= len(match.line.text)


@settings(max_examples=200, deadline=None)
@given(lines=_lines(), label=st.text(alphabet="abcdeSTUV订阅", min_size=1, max_size=8), data=st.data())
def test_exact_line_is_chosen_whatever_the_order(lines: list[OcrLine], label: str, data: st.DataObject) -> None:
    target = line(label, 900, 900)
    shuffled = data.draw(st.permutations([*lines, target]))
    match = find_target(label, shuffled)
    assert match is not None
    assert normalize(match.line.text).text == normalize(label).text
    assert match.tier is Tier.LINE and match.level is Level.EXACT

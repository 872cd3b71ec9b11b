"""Unit tests for policy.grounding: instruction parsing and label matching on hand-built OCR lines."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devices.actions import ActionKind
from policy.grounding import (
    Level,
    OcrLine,
    Rect,
    Tier,
    find_target,
    normalize,
    parse_instruction,
)


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


# -- instruction parsing -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("instruction", "kind", "label"),
    [
        ("click Subscribe", ActionKind.CLICK, "Subscribe"),
        ("Click on the Subscribe button", ActionKind.CLICK, "Subscribe"),
        ("CLICK 'Save as draft'", ActionKind.CLICK, "Save as draft"),
        ('click "Save as draft" now', ActionKind.CLICK, "Save as draft"),
        ("click “Save as draft”", ActionKind.CLICK, "Save as draft"),
        ("click ‘Save as draft’", ActionKind.CLICK, "Save as draft"),
        ("click 「保存」", ActionKind.CLICK, "保存"),
        ("click the user's 'Profile' tab", ActionKind.CLICK, "Profile"),
        ("click Don't save", ActionKind.CLICK, "Don't save"),
        ("click the Submit button.", ActionKind.CLICK, "Submit"),
        ("click an Edit link", ActionKind.CLICK, "Edit"),
        ("click a Settings icon", ActionKind.CLICK, "Settings"),
        ("click the Remember me checkbox", ActionKind.CLICK, "Remember me"),
        ("click the Email field", ActionKind.CLICK, "Email"),
        ("click the Open option", ActionKind.CLICK, "Open"),
        ("click the File menu item", ActionKind.CLICK, "File"),
        ("click the Button", ActionKind.CLICK, "Button"),
        ("click A", ActionKind.CLICK, "A"),  # a leading word is only an article when a label follows
        ("double-click report.txt", ActionKind.DOUBLE_CLICK, "report.txt"),
        ("double click the Documents icon", ActionKind.DOUBLE_CLICK, "Documents"),
        ("Right-click on Trash", ActionKind.RIGHT_CLICK, "Trash"),
        ("right click the Desktop", ActionKind.RIGHT_CLICK, "Desktop"),
        ("hover over the Help menu", ActionKind.HOVER, "Help"),
        ("hover Help", ActionKind.HOVER, "Help"),
        ("tap Next", ActionKind.CLICK, "Next"),
        ("press OK", ActionKind.CLICK, "OK"),
        ("select English", ActionKind.CLICK, "English"),
        ("choose the Dark option", ActionKind.CLICK, "Dark"),
        ("open Settings", ActionKind.CLICK, "Settings"),
        ("Please click Continue", ActionKind.CLICK, "Continue"),
        ("点击“订阅”", ActionKind.CLICK, "订阅"),
        ("点击订阅按钮", ActionKind.CLICK, "订阅"),
        ("单击‘保存’", ActionKind.CLICK, "保存"),
        ("双击「文档」", ActionKind.DOUBLE_CLICK, "文档"),
        ("右键点击回收站图标", ActionKind.RIGHT_CLICK, "回收站"),
        ("选择中文选项", ActionKind.CLICK, "中文"),
        ("打开设置菜单", ActionKind.CLICK, "设置"),
        ("请点击“确定”按钮", ActionKind.CLICK, "确定"),
        ("点击链接", ActionKind.CLICK, "链接"),
    ],
)
def test_parse_instruction(instruction: str, kind: ActionKind, label: str) -> None:
    parsed = parse_instruction(instruction)
    assert parsed is not None, instruction
    assert (parsed.kind, parsed.label) == (kind, label)


@pytest.mark.parametrize(
    "instruction",
    [
        "type hello into the search box",
        "scroll down",
        "clicked Subscribe",
        "clickSubscribe",
        "click",
        "click  . ",
        "",
        "订阅",
    ],
)
def test_unsupported_instructions_are_none(instruction: str) -> None:
    assert parse_instruction(instruction) is None


@pytest.mark.parametrize(
    "instruction, label",
    [
        ("在列表中选择“刷新”", "刷新"),
        ("在菜单中选择“导出”", "导出"),
        ("勾选“首页”复选框", "首页"),
        ("打开“设置”标签页", "设置"),
        ('Check the "Home" checkbox', "Home"),
        ('Select "Refresh" in the list', "Refresh"),
    ],
)
def test_location_phrases_and_checkbox_verbs(instruction, label):
    parsed = parse_instruction(instruction)
    assert parsed is not None and parsed.label == label and parsed.kind is ActionKind.CLICK


def test_a_place_name_is_not_a_verb():
    assert parse_instruction("在线客服") is None

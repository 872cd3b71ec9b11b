"""policy.instructions: reading "click X" instructions as people write them, including every form of the generated
phrasing suite (envs/generated/phrasing.py)."""

from __future__ import annotations

import pytest

from devices.actions import ActionKind
from envs.generated.layout import VOCAB
from envs.generated.phrasing import PHRASINGS
from policy.instructions import parse_instruction

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


@pytest.mark.parametrize(
    ("instruction", "label"),
    [
        ("Click Export in the toolbar", "Export"),
        ("Press the Save button in the dialog", "Save"),
        ("Select Print from the menu", "Print"),
        ("Open the Help tab at the top", "Help"),
        ("Click Share in the top right corner", "Share"),
        ("Press Undo on the left side of the page", "Undo"),
        ("Find Settings and click it", "Settings"),
        ("Locate the Download link and click on it", "Download"),
        ("Go ahead and tap on Next", "Next"),
        ("Can you click Archive?", "Archive"),
        ("I want to click Filter", "Filter"),
        ("Click the button labelled Send", "Send"),
        ('Click the link that says "Pin"', "Pin"),
        ("Hit the Mute button", "Mute"),
        ("Now click 'Copy' to continue", "Copy"),
        ("在设置页面点击“导出”", "导出"),
        ("在工具栏中点击保存按钮", "保存"),
        ("帮我点一下“分享”", "分享"),
        ("找到“帮助”并点击", "帮助"),
        ("把“下载”点一下", "下载"),
        ("从菜单中选择“打印”", "打印"),
        ("在弹出的对话框里点击“确定”", "确定"),
        ("点击页面顶部的“首页”", "首页"),
        ("点击页面顶部的首页", "首页"),
    ],
)
def test_phrasings_people_use(instruction: str, label: str) -> None:
    parsed = parse_instruction(instruction)
    assert parsed is not None and (parsed.kind, parsed.label) == (ActionKind.CLICK, label), (instruction, parsed)


def test_an_untrimmed_phrase_stays_an_alternative() -> None:
    parsed = parse_instruction("Click Export in the toolbar")
    assert parsed is not None and parsed.labels == ("Export", "Export in the toolbar")
    mine = parse_instruction("点击我的文档")  # 的 inside a label: the whole phrase is still tried
    assert mine is not None and "我的文档" in mine.labels


@pytest.mark.parametrize("phrasing", PHRASINGS, ids=[p.id for p in PHRASINGS])
def test_every_form_of_the_phrasing_suite_names_its_label(phrasing) -> None:
    # every label the generator draws, in the form's language
    for entry in VOCAB:
        label = entry[0] if phrasing.language == "en" else entry[1]
        parsed = parse_instruction(phrasing.instruction(label))
        assert parsed is not None and (parsed.kind, parsed.label) == (ActionKind.CLICK, label), \
            (phrasing.instruction(label), parsed)

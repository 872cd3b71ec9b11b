"""The phrasing suite: the same click task worded the many ways people write it, in English and Chinese.

``generated/phrasing`` (English) and ``generated/phrasing-zh`` (Chinese) are generated click screens whose
instruction is one of the forms below instead of the fixed 'Click the "X" button'. Seed ``s`` uses form
``s % len(forms)`` of its language, so ``--episodes`` a multiple of the form count measures every form equally
often; the episode's ``info["phrasing"]`` names the form. A form that names a role ("the X button", "the X tab")
gets a target of that role; the others a target of any role that shows its label as text (never an icon button,
whose label is only an ``aria-label``). Location words ("in the toolbar", "在设置页面") are part of the wording
under test, not of the layout: the target is wherever the generator put it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PHRASINGS", "Phrasing", "forms"]


@dataclass(frozen=True, slots=True)
class Phrasing:
    """One instruction form: ``template`` with ``{label}`` where the target's label goes."""

    id: str
    language: str
    """en or zh."""
    template: str
    role: str | None = None
    """The role the form names (an ``envs.generated.layout.Role`` value), which the target then has; None: any role
    that shows its label."""

    def instruction(self, label: str) -> str:
        return self.template.format(label=label)


_B, _L, _T, _M, _I, _C = "button", "link", "tab", "menu_item", "list_item", "checkbox"

PHRASINGS: tuple[Phrasing, ...] = (
    Phrasing("en-click", "en", "Click {label}"),
    Phrasing("en-click-on", "en", "Click on {label}"),
    Phrasing("en-toolbar", "en", "Click {label} in the toolbar"),
    Phrasing("en-dialog-button", "en", "Press the {label} button in the dialog", _B),
    Phrasing("en-tap", "en", "Tap {label}"),
    Phrasing("en-from-menu", "en", "Select {label} from the menu", _M),
    Phrasing("en-please-button", "en", "Please click the {label} button.", _B),
    Phrasing("en-can-you", "en", "Can you click {label}?"),
    Phrasing("en-find-and-click", "en", "Find {label} and click it"),
    Phrasing("en-locate-link", "en", "Locate the {label} link and click on it", _L),
    Phrasing("en-go-ahead", "en", "Go ahead and tap on {label}"),
    Phrasing("en-labelled", "en", "Click the button labelled {label}", _B),
    Phrasing("en-that-says", "en", 'Click the link that says "{label}"', _L),
    Phrasing("en-hit", "en", "Hit the {label} button", _B),
    Phrasing("en-option", "en", "Choose the {label} option", _I),
    Phrasing("en-tab-at-top", "en", "Open the {label} tab at the top", _T),
    Phrasing("en-tick", "en", "Tick the {label} checkbox", _C),
    Phrasing("en-i-want", "en", "I want to click {label}"),
    Phrasing("en-to-continue", "en", "Now click '{label}' to continue"),
    Phrasing("en-corner", "en", "Click {label} in the top right corner"),
    Phrasing("en-side-of-page", "en", "Press {label} on the left side of the page"),
    Phrasing("zh-click", "zh", "点击{label}"),
    Phrasing("zh-quoted", "zh", "点击“{label}”"),
    Phrasing("zh-settings-page", "zh", "在设置页面点击“{label}”"),
    Phrasing("zh-toolbar-button", "zh", "在工具栏中点击{label}按钮", _B),
    Phrasing("zh-please-button", "zh", "请点击“{label}”按钮", _B),
    Phrasing("zh-help-me", "zh", "帮我点一下“{label}”"),
    Phrasing("zh-find-then-click", "zh", "找到“{label}”并点击"),
    Phrasing("zh-tap", "zh", "轻触“{label}”"),
    Phrasing("zh-from-menu", "zh", "从菜单中选择“{label}”", _M),
    Phrasing("zh-tab", "zh", "打开“{label}”标签页", _T),
    Phrasing("zh-checkbox", "zh", "勾选“{label}”复选框", _C),
    Phrasing("zh-dialog", "zh", "在弹出的对话框里点击“{label}”"),
    Phrasing("zh-link", "zh", "单击{label}链接", _L),
    Phrasing("zh-top-of-page", "zh", "点击页面顶部的“{label}”"),
    Phrasing("zh-ba", "zh", "把“{label}”点一下"),
    Phrasing("zh-then-corner", "zh", "然后点击「{label}」"),
)


def forms(language: str) -> tuple[Phrasing, ...]:
    """The forms of one language, in the order seeds cycle through them."""
    return tuple(p for p in PHRASINGS if p.language == language)

"""Reading a "click X" instruction the way people write it: which action, and which label X names.

The OCR policy (``policy.ocr``) acts on one kind of task, a pointer action on a named label. People phrase it many
ways ("Click Export in the toolbar", "Press the Save button in the dialog", "Find Help and click it", "Can you tap
on Next?", "在设置页面点击“导出”", "帮我点一下保存", "找到“帮助”并点击", "把“下载”点一下"); the generated phrasing
suite (``envs/generated/phrasing.py``) holds the forms this parser is measured on. The rules, in order:

1. A leading verb, after polite words and lead-ins ("please", "can you", "go ahead and", "I want to", 请, 帮我,
   麻烦) and a Chinese location before the verb (在…中/里/上/页面/界面/窗口/对话框, 从…中): the action is the
   verb's (double-click, right-click, hover; otherwise click), the label is what follows.
2. Or a verb at the end: "find / locate / look for X and click (on) it", 找到X并点击, 把X点一下.
3. The label is the first quoted string when there is one (``'…'``, ``"…"``, ``“…”``, ``‘…’``, ``「…」``,
   ``『…』``). Otherwise the phrase is trimmed: trailing punctuation, a trailing location ("in the toolbar", "from the
   menu", "at the top", "on the left side of the page"), leading articles and "on", a naming lead-in ("the button
   labelled X", "the link that says X"), a Chinese location before 的 ("页面顶部的保存" -> 保存), then a trailing
   role word ("button", "link", "tab", 按钮, 链接 ...). The untrimmed phrase is kept as an alternative label, tried
   after the trimmed one (``Instruction.alternatives``), so a label that really is "Main Menu" is still found.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from devices.actions import ActionKind

__all__ = ["Instruction", "parse_instruction"]


@dataclass(frozen=True, slots=True)
class Instruction:
    """A parsed "click X" instruction: the action kind, the label, and other phrasings to try after it."""

    kind: ActionKind
    label: str
    alternatives: tuple[str, ...] = ()

    @property
    def labels(self) -> tuple[str, ...]:
        return (self.label, *self.alternatives)


_NOT_QUOTE = r"[^“”「」『』\"']"
# Polite words and lead-ins, and a Chinese location before the verb ("在菜单中选择“X”": choose X in the menu).
_LEAD = (
    r"(?:(?:please|now|then|just|kindly|also|next|finally|go\s+ahead\s+and|(?:can|could|would|will)\s+you"
    r"(?:\s+please)?|i\s+(?:want|need|would\s+like)\s+(?:you\s+)?to|i'd\s+like\s+(?:you\s+)?to|let's|try\s+to)"
    r"[\s,]+|请你?|帮我|麻烦你?|然后|再|先|接着|"
    rf"在{_NOT_QUOTE}{{1,12}}?(?:中|里|上|内|页面|界面|窗口|对话框|页)|从{_NOT_QUOTE}{{1,12}}?(?:中|里|上))*"
)
_LATIN_END = r"(?![\w-])"
_CLICK_ZH = r"点击一下|点击|单击|轻触|轻点|点按|点一下|点下|点开|按下|选择|选中|勾选|打开"
_VERBS: tuple[tuple[str, ActionKind], ...] = (
    (r"double[\s-]?click" + _LATIN_END, ActionKind.DOUBLE_CLICK),
    (r"right[\s-]?click" + _LATIN_END, ActionKind.RIGHT_CLICK),
    (r"(?:hover(?:\s+(?:over|on))?|mouse[\s-]?over)" + _LATIN_END, ActionKind.HOVER),
    (r"(?:click|tap|press|hit|select|choose|pick|open|check|tick|toggle)" + _LATIN_END, ActionKind.CLICK),
    (r"双击", ActionKind.DOUBLE_CLICK),
    (r"右键(?:点击|单击)|右击", ActionKind.RIGHT_CLICK),
    (_CLICK_ZH, ActionKind.CLICK),
)
_VERB_RES = tuple((re.compile(r"^\s*" + _LEAD + "(?:" + verb + ")", re.IGNORECASE), kind) for verb, kind in _VERBS)
# The verb at the end: "find X and click it", "找到X并点击", "把X点一下".
_FIND_THEN_ACT = (
    re.compile(r"^\s*" + _LEAD + r"(?:find|locate|look\s+for|spot)\s+(?P<rest>.+?),?\s+and\s+(?:then\s+)?"
               r"(?P<verb>double[\s-]?click|right[\s-]?click|click|tap|press|hit|select|choose|open)"
               r"(?:\s+on)?(?:\s+(?:it|that|this|them))?[\s.!]*$", re.IGNORECASE),
    re.compile(r"^\s*" + _LEAD + r"(?:找到|找出|定位到?)(?P<rest>.+?)(?:并且?|然后|，|,)\s*(?:把它|将其)?"
               r"(?P<verb>双击|" + _CLICK_ZH + r")(?:它|一下)?[\s。！!]*$"),
    re.compile(r"^\s*" + _LEAD + r"[把将](?P<rest>.+?)(?P<verb>双击|" + _CLICK_ZH + r")(?:一下|上)?[\s。！!]*$"),
)

# Straight quotes double as apostrophes ("Don't"), so they only count next to a space or punctuation.
_QUOTE_RES = (
    re.compile(r"(?:^|(?<=[\s(\[:,]))'([^']+?)'(?=$|[\s.,!?;:)\]])"),
    re.compile(r"(?:^|(?<=[\s(\[:,]))\"([^\"]+?)\"(?=$|[\s.,!?;:)\]])"),
    re.compile(r"“([^”]+?)”"),
    re.compile(r"‘([^’]+?)’"),
    re.compile(r"「([^」]+?)」"),
    re.compile(r"『([^』]+?)』"),
)
_LEADING_WORDS = re.compile(r"^(?:(?:on|the|a|an)\s+|一下)+", re.IGNORECASE)
_NAMED = re.compile(
    r"^(?:the\s+)?(?:button|link|tab|icon|item|option|entry|menu\s+item|checkbox|text)\s+"
    r"(?:labell?ed|named|called|titled|that\s+(?:says|reads)|saying|reading|with\s+(?:the\s+)?(?:text|label))\s+",
    re.IGNORECASE,
)
_PLACES = (r"toolbar|tool\s+bar|dialog(?:ue)?|(?:pop-?up|modal)(?:\s+window)?|menu(?:\s?bar)?|sidebar|side\s+bar|"
           r"list|panel|page|screen|window|header|footer|top|bottom|left|right|corner|bar|section|form|app|side|"
           r"area|navigation|nav|ribbon|card|sheet")
_TRAILING_PLACE = re.compile(
    r"\s+(?:in|on|at|from|inside|within|under|near)\s+(?:the\s+)?(?:[\w-]+\s+){0,3}?(?:" + _PLACES + r")"
    r"(?:\s+(?:of|on|in)\s+(?:the\s+)?(?:page|screen|window|app|dialog))?$",
    re.IGNORECASE,
)
_STRAY_QUOTES = "\"'“”‘’「」『』"
_TRAILING_PUNCT = re.compile(r"[\s.!?;,。！？；，、]+$")
_ROLE_LATIN = re.compile(
    r"\s+(?:button|link|tab|icon|menu\s+item|menu|item|option|checkbox|check\s+box|field|entry)$", re.IGNORECASE
)
_ROLE_CJK = re.compile(r"(?:按钮|链接|选项|图标|菜单项|菜单|复选框|标签页|标签)$")
_CJK_PLACE = re.compile(r"^.{1,12}?的(?=.)")


def _quoted(text: str) -> str | None:
    found = [m for rx in _QUOTE_RES if (m := rx.search(text))]
    if not found:
        return None
    label = min(found, key=lambda m: m.start()).group(1).strip()
    return label or None


def _strip_role(phrase: str) -> str:
    for rx in (_ROLE_LATIN, _ROLE_CJK):
        stripped = rx.sub("", phrase).strip()
        if stripped != phrase and stripped:
            return stripped
    return phrase


def _trim(rest: str) -> str:
    """The label phrase of an unquoted instruction: rule 3 of the module docstring, up to the role word."""
    phrase = _TRAILING_PUNCT.sub("", rest)
    phrase = _TRAILING_PLACE.sub("", phrase)
    phrase = _LEADING_WORDS.sub("", phrase).strip()
    phrase = _NAMED.sub("", phrase).strip()
    phrase = _CJK_PLACE.sub("", phrase) if not phrase.isascii() else phrase
    return phrase.strip().strip(_STRAY_QUOTES).strip()


def _instruction(kind: ActionKind, rest: str) -> Instruction | None:
    quoted = _quoted(rest)
    if quoted is not None:
        return Instruction(kind, quoted)
    phrase = _trim(rest.strip())
    if not phrase:
        return None
    label = _strip_role(phrase)
    full = _LEADING_WORDS.sub("", _TRAILING_PUNCT.sub("", rest.strip())).strip().strip(_STRAY_QUOTES).strip()
    alternatives = tuple(dict.fromkeys(a for a in (_strip_role(full) if full != phrase else "", phrase, full)
                                       if a and a != label))
    return Instruction(kind, label, alternatives)


def _verb_kind(verb: str) -> ActionKind:
    for pattern, kind in _VERBS:
        if re.fullmatch(pattern, verb, re.IGNORECASE):
            return kind
    return ActionKind.CLICK


def parse_instruction(instruction: str) -> Instruction | None:
    """The action and target label of a "click X"-style instruction, or None when it is not one."""
    for rx in _FIND_THEN_ACT:
        m = rx.match(instruction)
        if m is not None:
            return _instruction(_verb_kind(m.group("verb")), m.group("rest"))
    for rx, kind in _VERB_RES:
        m = rx.match(instruction)
        if m is not None:
            return _instruction(kind, instruction[m.end():])
    return None

"""Procedural GUI screens with exact ground truth: pure Python, no browser.

``generate(seed, params)`` draws a screen (an app bar with icon buttons, tabs, a side menu, a shelf of
buttons, links, checkboxes and text fields, a list card) and a task on it. Every widget is placed
with ``position: absolute`` at integer CSS pixels and ``box-sizing: border-box``, so its box here is
exactly what ``getBoundingClientRect`` reports in the page. Labels on one screen are distinct;
distractors are look-alike labels of the target ("Save" / "Save as" / "Unsave"), and a negative task
names a label that is absent (on hard screens, while its look-alikes are present).

The page's script records, per widget id, the clicks (``window.handeye.clicks``), typed values
(``values``) and checkbox states (``checked``); checkers read that state, never the agent's claim.
"""

from __future__ import annotations

import html
import json
import random
from dataclasses import dataclass, field
from enum import Enum

from envs.errors import LayoutError
from envs.generated.phrasing import forms


class Role(str, Enum):
    BUTTON = "button"
    ICON_BUTTON = "icon_button"
    LINK = "link"
    TAB = "tab"
    MENU_ITEM = "menu_item"
    LIST_ITEM = "list_item"
    CHECKBOX = "checkbox"
    TEXT_FIELD = "text_field"


class TaskKind(str, Enum):
    CLICK = "click"
    """One click on the named widget."""
    FORM = "form"
    """Type a text into one or two fields, then click Submit."""
    ABSENT = "absent"
    """The named widget is not on the screen: the right answer is ``infeasible``."""


#: roles a click task may name
CLICKABLE = (Role.BUTTON, Role.ICON_BUTTON, Role.LINK, Role.TAB, Role.MENU_ITEM, Role.LIST_ITEM, Role.CHECKBOX)
FORM_FACTORS = {"desktop": (1280, 800), "phone": (390, 844)}


@dataclass(frozen=True, slots=True)
class Difficulty:
    clutter: int
    """Number of widgets besides the target, its distractors and the form."""
    distractors: int
    """Look-alike labels of the target placed on the screen."""
    target_height: int
    """Height of the target widget in CSS px (icon buttons are square)."""


DIFFICULTIES = {
    "easy": Difficulty(clutter=5, distractors=0, target_height=40),
    "medium": Difficulty(clutter=10, distractors=1, target_height=32),
    "hard": Difficulty(clutter=18, distractors=3, target_height=22),
}


@dataclass(frozen=True, slots=True)
class ScreenParams:
    task_kind: TaskKind = TaskKind.CLICK
    difficulty: str = "medium"
    """easy, medium or hard (see DIFFICULTIES)."""
    language: str = "en"
    """en or zh: labels and instruction."""
    theme: str = "light"
    """light or dark."""
    form_factor: str = "desktop"
    """desktop (1280 x 800) or phone (390 x 844)."""
    phrasing: bool = False
    """Word a click task in one of the phrasing suite's forms (``envs.generated.phrasing``), by seed."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "task_kind", TaskKind(self.task_kind))
        for name, value, valid in (
            ("difficulty", self.difficulty, DIFFICULTIES),
            ("language", self.language, ("en", "zh")),
            ("theme", self.theme, THEMES),
            ("form_factor", self.form_factor, FORM_FACTORS),
        ):
            if value not in valid:
                raise LayoutError(f"{name}={value!r} is not one of {', '.join(valid)}")

    @property
    def size(self) -> tuple[int, int]:
        return FORM_FACTORS[self.form_factor]


@dataclass(frozen=True, slots=True)
class Widget:
    id: str
    role: Role
    label: str
    box: tuple[int, int, int, int]
    """(left, top, width, height) in CSS px."""
    glyph: str = ""
    """The visible text of an icon button (its label is the aria-label)."""


@dataclass(frozen=True, slots=True)
class PlanStep:
    """One step of the task's solution: click a widget, type into a field, or declare infeasible."""

    kind: str
    widget_id: str | None = None
    text: str | None = None


@dataclass(frozen=True, slots=True)
class Task:
    kind: TaskKind
    instruction: str
    target_ids: tuple[str, ...]
    """Widgets the task acts on (fields then Submit for a form; empty for an absent target)."""
    plan: tuple[PlanStep, ...]
    named_label: str
    """The label the instruction names (for an absent task, the missing one)."""
    distractor_ids: tuple[str, ...] = ()
    """Widgets with look-alike labels of the named one ("Save as" for "Save")."""
    phrasing: str = ""
    """The id of the phrasing suite's form the instruction uses, if it uses one."""


@dataclass(frozen=True, slots=True)
class Screen:
    seed: int
    params: ScreenParams
    width: int
    height: int
    widgets: tuple[Widget, ...]
    task: Task
    html: str = field(repr=False)

    def widget(self, wid: str) -> Widget:
        for w in self.widgets:
            if w.id == wid:
                return w
        raise KeyError(wid)

    def norm_box(self, wid: str) -> tuple[float, float, float, float]:
        """The widget's box normalized to the viewport: (x1, y1, x2, y2) in [0, 1]."""
        x, y, w, h = self.widget(wid).box
        return x / self.width, y / self.height, (x + w) / self.width, (y + h) / self.height


# -- vocabulary ----------------------------------------------------------------------------------
# (en, zh, glyph for an icon button, look-alikes as (en, zh))
VOCAB: tuple[tuple[str, str, str, tuple[tuple[str, str], ...]], ...] = (
    ("Save", "保存", "⎙", (("Save as", "另存为"), ("Unsave", "取消保存"), ("Save all", "全部保存"), ("Autosave", "自动保存"))),
    ("Delete", "删除", "⌫", (("Delete all", "全部删除"), ("Undelete", "撤销删除"), ("Deleted", "已删除"))),
    ("Share", "分享", "⇪", (("Share link", "分享链接"), ("Unshare", "取消分享"), ("Shared", "已分享"))),
    ("Download", "下载", "⬇", (("Download all", "全部下载"), ("Downloads", "下载列表"), ("Download as", "下载为"))),
    ("Upload", "上传", "⬆", (("Upload file", "上传文件"), ("Uploads", "上传列表"), ("Re-upload", "重新上传"))),
    ("Settings", "设置", "⚙", (("Site settings", "站点设置"), ("Settings sync", "设置同步"), ("Reset settings", "重置设置"))),
    ("Edit", "编辑", "✎", (("Edit profile", "编辑资料"), ("Edited", "已编辑"), ("Quick edit", "快速编辑"))),
    ("Search", "搜索", "⌕", (("Search all", "全部搜索"), ("Advanced search", "高级搜索"), ("Searches", "搜索记录"))),
    ("Send", "发送", "➤", (("Send later", "稍后发送"), ("Resend", "重新发送"), ("Sent", "已发送"))),
    ("Copy", "复制", "⧉", (("Copy link", "复制链接"), ("Copy all", "全部复制"), ("Copies", "副本"))),
    ("Print", "打印", "⎚", (("Print preview", "打印预览"), ("Print all", "全部打印"), ("Reprint", "重新打印"))),
    ("Export", "导出", "⇥", (("Export as", "导出为"), ("Export all", "全部导出"), ("Exports", "导出记录"))),
    ("Import", "导入", "⇤", (("Import all", "全部导入"), ("Reimport", "重新导入"), ("Imports", "导入记录"))),
    ("Add", "添加", "+", (("Add all", "全部添加"), ("Add new", "新增"), ("Added", "已添加"))),
    ("Remove", "移除", "−", (("Remove all", "全部移除"), ("Removed", "已移除"), ("Remove item", "移除项目"))),
    ("Archive", "归档", "▤", (("Unarchive", "取消归档"), ("Archived", "已归档"), ("Archive all", "全部归档"))),
    ("Filter", "筛选", "⧩", (("Clear filter", "清除筛选"), ("Filters", "筛选条件"), ("Filter by", "筛选方式"))),
    ("Sort", "排序", "⇅", (("Sort by", "排序方式"), ("Unsort", "取消排序"), ("Sorted", "已排序"))),
    ("Refresh", "刷新", "↻", (("Auto refresh", "自动刷新"), ("Refreshed", "已刷新"), ("Refresh all", "全部刷新"))),
    ("Close", "关闭", "✕", (("Close all", "全部关闭"), ("Closed", "已关闭"), ("Close tab", "关闭标签"))),
    ("Open", "打开", "↗", (("Open in", "打开方式"), ("Reopen", "重新打开"), ("Opened", "已打开"))),
    ("Help", "帮助", "?", (("Help center", "帮助中心"), ("Get help", "获取帮助"), ("Helpful", "有帮助"))),
    ("Home", "首页", "⌂", (("Homepage", "主页"), ("Home feed", "首页动态"), ("Go home", "回到首页"))),
    ("Messages", "消息", "✉", (("Message", "留言"), ("New messages", "新消息"), ("Messenger", "信使"))),
    ("Favorites", "收藏", "★", (("Favorite", "收藏夹"), ("Unfavorite", "取消收藏"), ("Add to favorites", "加入收藏"))),
    ("Like", "点赞", "♥", (("Unlike", "取消点赞"), ("Likes", "点赞列表"), ("Liked", "已点赞"))),
    ("Menu", "菜单", "☰", (("Main menu", "主菜单"), ("Menus", "菜单列表"), ("Menu bar", "菜单栏"))),
    ("More", "更多", "⋮", (("More info", "更多信息"), ("Show more", "显示更多"), ("More options", "更多选项"))),
    ("Cart", "购物车", "⊕", (("Add to cart", "加入购物车"), ("Clear cart", "清空购物车"), ("Carts", "购物车列表"))),
    ("Checkout", "结账", "✓", (("Quick checkout", "快速结账"), ("Check in", "签到"), ("Checked out", "已结账"))),
    ("Profile", "个人资料", "☺", (("Edit profile", "编辑个人资料"), ("Profiles", "资料列表"), ("Public profile", "公开资料"))),
    ("Notifications", "通知", "♪", (("Notification", "提醒"), ("Mute notifications", "静音通知"), ("No notifications", "无通知"))),
    ("Calendar", "日历", "▦", (("Calendars", "日历列表"), ("Calendar view", "日历视图"), ("New calendar", "新建日历"))),
    ("Photos", "照片", "▣", (("Photo", "相片"), ("Photo albums", "相册"), ("Photos backup", "照片备份"))),
    ("Contacts", "联系人", "☏", (("Contact", "联系"), ("Contact us", "联系我们"), ("Contacts sync", "联系人同步"))),
    ("Reports", "报告", "▥", (("Report", "举报"), ("Reports archive", "报告归档"), ("New report", "新建报告"))),
    ("Logout", "退出登录", "⏻", (("Log in", "登录"), ("Logout all", "全部退出"), ("Logged out", "已退出"))),
    ("Undo", "撤销", "↶", (("Redo", "重做"), ("Undo all", "全部撤销"), ("Undone", "已撤销"))),
    ("Next", "下一步", "→", (("Next page", "下一页"), ("Skip next", "跳过下一步"), ("Next up", "即将播放"))),
    ("Back", "返回", "←", (("Go back", "后退"), ("Back up", "备份"), ("Backlog", "待办"))),
    ("Pin", "置顶", "⚲", (("Unpin", "取消置顶"), ("Pinned", "已置顶"), ("Pin all", "全部置顶"))),
    ("Mute", "静音", "🔇", (("Unmute", "取消静音"), ("Muted", "已静音"), ("Mute all", "全部静音"))),
)
FIELDS: tuple[tuple[str, str, tuple[str, ...], tuple[str, ...]], ...] = (
    # (en label, zh label, en values, zh values)
    ("Email", "邮箱", ("alice@example.com", "bob.lee@mail.net", "chen.wei@corp.cn"), ("li.na@example.cn", "wang@mail.cn")),
    ("Name", "姓名", ("Alice Moreau", "Bob Lee", "Chen Wei"), ("张伟", "李娜", "王芳")),
    ("Phone", "电话", ("+1 555 0142", "020 7946 0958", "415-555-0199"), ("138 0013 8000", "021-5555-0101")),
    ("City", "城市", ("Berlin", "Lisbon", "Osaka", "Toronto"), ("上海", "成都", "杭州", "深圳")),
    ("Company", "公司", ("Acme Corp", "Globex", "Initech"), ("华光科技", "星河传媒")),
    ("Username", "用户名", ("alice_m", "bob2024", "cwei"), ("xiaoming", "lina_88")),
)
SUBMIT = ("Submit", "提交", (("Submit later", "稍后提交"), ("Resubmit", "重新提交"), ("Submitted", "已提交")))
APP_TITLES = (("Notes", "笔记"), ("Mailbox", "邮箱助手"), ("Projects", "项目"), ("Drive", "云盘"), ("Shop", "商城"))
SECTION_TITLES = (("Recent", "最近"), ("Items", "项目列表"), ("Library", "资料库"), ("Inbox", "收件箱"))

THEMES = {
    "light": {"bg": "#f6f7f9", "surface": "#ffffff", "bar": "#ffffff", "text": "#1f2328", "muted": "#59636e",
              "border": "#d0d7de", "field": "#ffffff"},
    "dark": {"bg": "#0d1117", "surface": "#161b22", "bar": "#1c2128", "text": "#e6edf3", "muted": "#9198a1",
             "border": "#3d444d", "field": "#0d1117"},
}
ACCENTS = ("#0969da", "#1a7f37", "#8250df", "#cf222e", "#bc4c00", "#0550ae")

_INSTRUCTIONS = {
    "en": {
        Role.BUTTON: 'Click the "{}" button', Role.ICON_BUTTON: 'Click the "{}" icon', Role.LINK: 'Click the "{}" link',
        Role.TAB: 'Open the "{}" tab', Role.MENU_ITEM: 'Choose "{}" in the menu',
        Role.LIST_ITEM: 'Select "{}" in the list', Role.CHECKBOX: 'Check the "{}" checkbox',
    },
    "zh": {
        Role.BUTTON: "点击“{}”按钮", Role.ICON_BUTTON: "点击“{}”图标", Role.LINK: "点击“{}”链接",
        Role.TAB: "打开“{}”标签页", Role.MENU_ITEM: "在菜单中选择“{}”",
        Role.LIST_ITEM: "在列表中选择“{}”", Role.CHECKBOX: "勾选“{}”复选框",
    },
}


def _form_instruction(lang: str, fields: list[tuple[str, str]], submit: str) -> str:
    if lang == "zh":
        parts = "，".join(f"在“{f}”输入框中输入“{v}”" for f, v in fields)
        return f"{parts}，然后点击“{submit}”"
    parts = " and ".join(f'"{v}" into the {f} field' for f, v in fields)
    return f'Type {parts}, then click "{submit}"'


# -- generation ----------------------------------------------------------------------------------
@dataclass(slots=True)
class _Spec:
    """A widget before placement."""

    id: str
    role: Role
    label: str
    glyph: str = ""
    height: int = 0
    essential: bool = False


def generate(seed: int, params: ScreenParams | None = None) -> Screen:
    """The screen and task of ``seed`` under ``params``; the same arguments give the same screen.

    A draw whose essential widgets do not fit (a crowded phone screen) is drawn again from a derived
    random stream, so this stays deterministic."""
    params = params or ScreenParams()
    error: LayoutError | None = None
    for attempt in range(20):
        try:
            return _generate(seed, params, attempt)
        except LayoutError as e:
            error = e
    raise LayoutError(f"{error} (after 20 draws; use a lower difficulty or the desktop form factor)")


def _generate(seed: int, params: ScreenParams, attempt: int) -> Screen:
    rng = random.Random(f"handeye-generated/{seed}/{params.task_kind.value}/{params.difficulty}/"
                        f"{params.language}/{params.theme}/{params.form_factor}/{attempt}")
    lang = 0 if params.language == "en" else 1
    diff = DIFFICULTIES[params.difficulty]
    phone = params.form_factor == "phone"
    specs: list[_Spec] = []
    counter = iter(range(1, 1000))

    def new(role: Role, label: str, glyph: str = "", height: int = 0, essential: bool = False) -> _Spec:
        s = _Spec(f"w{next(counter)}", role, label, glyph, height, essential)
        specs.append(s)
        return s

    vocab = list(VOCAB)
    rng.shuffle(vocab)
    named_entry = vocab.pop()
    named_label = named_entry[lang]
    target_ids: tuple[str, ...] = ()
    plan: tuple[PlanStep, ...]
    roles_for_clutter = list(CLICKABLE) + [Role.BUTTON, Role.LINK]  # buttons and links are commonest

    phrased = forms(params.language) if params.phrasing and params.task_kind is not TaskKind.FORM else ()
    form = phrased[seed % len(phrased)] if phrased else None
    if params.task_kind is TaskKind.FORM:
        chosen = rng.sample(FIELDS, 1 if params.difficulty == "easy" else 2)
        filled = [(f[lang], rng.choice(f[2 + lang])) for f in chosen]
        fields = [new(Role.TEXT_FIELD, label, essential=True) for label, _ in filled]
        submit = new(Role.BUTTON, SUBMIT[lang], height=diff.target_height, essential=True)
        looks_ids = [new(Role.BUTTON, look[lang], essential=True).id for look in SUBMIT[2][: diff.distractors]]
        target_ids = (*(f.id for f in fields), submit.id)
        plan = (*(PlanStep("type", f.id, v) for f, (_, v) in zip(fields, filled)), PlanStep("click", submit.id))
        instruction = _form_instruction(params.language, filled, SUBMIT[lang])
        named_label = SUBMIT[lang]
        target_role = Role.BUTTON
    else:
        shown_roles = [r for r in CLICKABLE if r is not Role.ICON_BUTTON]  # an icon shows no label to read
        target_role = Role(form.role) if form and form.role else rng.choice(shown_roles if form else CLICKABLE)
        instruction = form.instruction(named_label) if form else _INSTRUCTIONS[params.language][target_role].format(
            named_label)
        looks = list(named_entry[3])
        rng.shuffle(looks)
        # an absent target keeps at least one look-alike on screen from medium up: the hard negatives
        n_looks = diff.distractors if params.task_kind is TaskKind.CLICK else max(diff.distractors, 1 if
                                                                                    params.difficulty != "easy" else 0)
        if params.task_kind is TaskKind.CLICK:
            glyph = named_entry[2] if target_role is Role.ICON_BUTTON else ""
            target = new(target_role, named_label, glyph, height=diff.target_height, essential=True)
            target_ids = (target.id,)
            plan = (PlanStep("click", target.id),)
        else:
            plan = (PlanStep("infeasible"),)
        looks_ids = []
        for look in looks[:n_looks]:
            role = target_role if rng.random() < 0.6 else rng.choice(CLICKABLE)
            looks_ids.append(new(role, look[lang], named_entry[2] if role is Role.ICON_BUTTON else "", essential=True).id)

    spare_fields = [f[lang] for f in FIELDS]
    rng.shuffle(spare_fields)
    for entry in vocab[: diff.clutter]:
        role = rng.choice(roles_for_clutter)
        if params.task_kind is not TaskKind.FORM and spare_fields and rng.random() < 0.1:
            new(Role.TEXT_FIELD, spare_fields.pop())  # fields carry field names, not command words
            continue
        new(role, entry[lang], entry[2] if role is Role.ICON_BUTTON else "")

    widgets = _place(specs, params, rng, phone)
    placed = {w.id for w in widgets}
    missing = [s.label for s in specs if s.essential and s.id not in placed]
    if missing:
        raise LayoutError(f"seed {seed} with {params}: no room for {missing}")
    width, height = params.size
    task = Task(params.task_kind, instruction, target_ids, plan, named_label, tuple(looks_ids), form.id if form else "")
    theme = dict(THEMES[params.theme], accent=rng.choice(ACCENTS))
    title = rng.choice(APP_TITLES)[lang]
    section = rng.choice(SECTION_TITLES)[lang]
    page = _html(widgets, params, theme, title, section, width, height)
    return Screen(seed, params, width, height, tuple(widgets), task, page)


def _text_width(label: str, font_px: int) -> int:
    wide = sum(1 for ch in label if ord(ch) > 0x2E80)
    return int((len(label) - wide) * font_px * 0.66 + wide * font_px * 1.05) + 1


APP_BAR_H, TAB_H, SIDEBAR_W, MARGIN = 56, 44, 232, 20


def _place(specs: list[_Spec], params: ScreenParams, rng: random.Random, phone: bool) -> list[Widget]:
    """Absolute boxes: icon buttons in the app bar, tabs under it, menu items in a sidebar (a card on
    a phone), list items in a list card, everything else shelf-packed in rows. Essential widgets
    (target, look-alikes, form) are placed first so that clutter is what gets dropped.

    The random draws happen in a fixed order (the parts below, top to bottom), so a seed always
    gives the same layout."""
    width, height = params.size
    order = sorted(specs, key=lambda s: (not s.essential, rng.random()))
    by_role: dict[Role, list[_Spec]] = {}
    for s in order:
        by_role.setdefault(s.role, []).append(s)
    placer = _Placer(width, height, rng)
    rest_icons = placer.app_bar(by_role.get(Role.ICON_BUTTON, []), phone)
    top = APP_BAR_H
    menus = by_role.get(Role.MENU_ITEM, [])
    sidebar = bool(menus) and not phone
    tabs = by_role.get(Role.TAB, [])
    if tabs:  # the tab strip, right of the sidebar when there is one
        placer.tabs(tabs, SIDEBAR_W + MARGIN if sidebar else MARGIN, top)
        top += TAB_H
    main_x0 = MARGIN
    if sidebar:
        placer.sidebar(menus)
        main_x0 = SIDEBAR_W + MARGIN
    # the shelf: buttons, links, checkboxes, text fields, icon buttons that did not fit the bar
    shelf = [s for s in order if s.role in (Role.BUTTON, Role.LINK, Role.CHECKBOX, Role.TEXT_FIELD)]
    shelf += rest_icons
    shelf.sort(key=lambda s: (not s.essential, rng.random()))
    y = placer.shelf(shelf, main_x0, top + 16)
    # list card (and the menu card on a phone)
    placer.cards([by_role.get(Role.LIST_ITEM, []), *([menus] if phone else [])], main_x0, y)
    return placer.out


@dataclass(slots=True)
class _Placer:
    """The widgets placed so far on a ``width`` x ``height`` screen, and the parts of ``_place``."""

    width: int
    height: int
    rng: random.Random
    out: list[Widget] = field(default_factory=list)

    def put(self, s: _Spec, x: int, y: int, w: int, h: int) -> None:
        self.out.append(Widget(s.id, s.role, s.label, (x, y, w, h), s.glyph))

    def app_bar(self, icons: list[_Spec], phone: bool) -> list[_Spec]:
        """Icon buttons right-aligned in the app bar, as many as fit; the ones that did not."""
        x = self.width - 12
        rest = []
        for s in icons:
            size = s.height or self.rng.choice((32, 36, 40))
            if x - size < self.width * (0.55 if phone else 0.6):
                rest.append(s)
                continue
            x -= size
            self.put(s, x, (APP_BAR_H - size) // 2, size, size)
            x -= self.rng.choice((4, 8, 12))
        return rest

    def tabs(self, tabs: list[_Spec], x: int, top: int) -> None:
        """A strip of tabs from ``x``, in a band of TAB_H at ``top``; tabs that do not fit are dropped."""
        for s in tabs:
            h = s.height or TAB_H - 8
            w = _text_width(s.label, 14) + 28
            if x + w > self.width - MARGIN:
                break
            self.put(s, x, top + (TAB_H - h) // 2, w, h)
            x += w + 4

    def sidebar(self, menus: list[_Spec]) -> None:
        """Menu items stacked in the desktop sidebar, under the app bar."""
        my = APP_BAR_H + 16
        for s in menus:
            h = s.height or self.rng.choice((36, 40))
            if my + h > self.height - MARGIN:
                break
            self.put(s, 12, my, SIDEBAR_W - 24, h)
            my += h + 4

    def shelf(self, shelf: list[_Spec], x0: int, y: int) -> int:
        """Widgets packed in rows from (x0, y) to the right margin; where the content below starts."""
        x1 = self.width - MARGIN
        x, row_h = x0, 0
        for s in shelf:
            w, h = _shelf_size(s, self.rng, x1 - x0)
            if x + w > x1:
                x, y, row_h = x0, y + row_h + self.rng.choice((10, 14, 20)), 0
            if y + h > self.height - MARGIN:
                continue
            self.put(s, x, y, w, h)
            x += w + self.rng.choice((8, 12, 16, 24))
            row_h = max(row_h, h)
        return y + row_h + 24

    def cards(self, stacks: list[list[_Spec]], x0: int, y: int) -> None:
        """One card per non-empty stack from (x0, y): a heading row, then the items stacked."""
        card_w = min(self.width - MARGIN - x0, 520)
        for items in stacks:
            if not items:
                continue
            y += 28  # the card's heading
            for s in items:
                h = s.height or self.rng.choice((40, 44))
                if y + h > self.height - MARGIN:
                    break
                self.put(s, x0, y, card_w, h)
                y += h + 2
            y += 20


def _shelf_size(s: _Spec, rng: random.Random, max_w: int) -> tuple[int, int]:
    """(width, height) of a shelf widget: its own height when set, else one drawn for its role."""
    font = 13 if s.height and s.height < 28 else 14
    if s.role is Role.ICON_BUTTON:
        h = s.height or 36
        w = h
    elif s.role is Role.TEXT_FIELD:
        h = s.height or 36
        w = min(max_w, rng.randrange(200, 300))
    elif s.role is Role.LINK:
        h = s.height or 24
        w = _text_width(s.label, font) + 4
    elif s.role is Role.CHECKBOX:
        h = s.height or 28
        w = _text_width(s.label, font) + 30
    else:
        h = s.height or rng.choice((32, 36, 40))
        w = _text_width(s.label, font) + rng.choice((24, 32, 40))
    return min(w, max_w), h


# -- HTML ----------------------------------------------------------------------------------------
_SCRIPT = """
window.handeye = {clicks: [], values: {}, checked: {}};
for (const el of document.querySelectorAll('[data-wid]')) {
  const id = el.dataset.wid;
  el.addEventListener('click', (e) => {
    if (el.tagName === 'A') e.preventDefault();
    if (el.getAttribute('role') === 'checkbox') {
      const on = el.getAttribute('aria-checked') !== 'true';
      el.setAttribute('aria-checked', String(on));
      el.querySelector('.box').textContent = on ? '☑' : '☐';
      window.handeye.checked[id] = on;
    }
    window.handeye.clicks.push(id);
  });
  if (el.tagName === 'INPUT') el.addEventListener('input', () => { window.handeye.values[id] = el.value; });
}
"""


def _html(widgets: list[Widget], params: ScreenParams, t: dict[str, str], title: str, section: str,
          width: int, height: int) -> str:
    fonts = '"DejaVu Sans", "Noto Sans CJK SC", sans-serif'
    if params.language == "zh":
        fonts = '"Noto Sans CJK SC", "DejaVu Sans", sans-serif'
    esc = html.escape
    css = f"""
* {{ box-sizing: border-box; margin: 0; }}
html, body {{ width: {width}px; height: {height}px; overflow: hidden; background: {t['bg']}; color: {t['text']};
  font-family: {fonts}; font-size: 14px; }}
.w {{ position: absolute; display: flex; align-items: center; white-space: nowrap; overflow: hidden;
  font: inherit; color: inherit; padding: 0; }}
.deco {{ position: absolute; }}
.button {{ justify-content: center; border: 1px solid {t['border']}; border-radius: 6px; background: {t['surface']}; }}
.button.primary {{ background: {t['accent']}; color: #fff; border-color: {t['accent']}; }}
.icon_button {{ justify-content: center; border: none; border-radius: 50%; background: transparent; font-size: 18px; }}
.link {{ color: {t['accent']}; text-decoration: underline; }}
.tab {{ justify-content: center; border-bottom: 2px solid transparent; cursor: pointer; }}
.tab.active {{ border-bottom-color: {t['accent']}; }}
.menu_item {{ padding-left: 12px; border-radius: 6px; }}
.list_item {{ padding-left: 14px; border-bottom: 1px solid {t['border']}; background: {t['surface']}; }}
.checkbox {{ gap: 6px; }}
.checkbox .box {{ font-size: 18px; width: 20px; }}
.text_field {{ border: 1px solid {t['border']}; border-radius: 6px; background: {t['field']}; padding: 0 10px; }}
.text_field::placeholder {{ color: {t['muted']}; }}
"""
    parts = [f'<div class="deco" style="left:0;top:0;width:{width}px;height:{APP_BAR_H}px;background:{t["bar"]};'
             f'border-bottom:1px solid {t["border"]}"></div>',
             f'<div class="deco" style="left:{MARGIN}px;top:16px;font-size:18px;font-weight:bold">{esc(title)}</div>']
    list_tops = [w.box[1] for w in widgets if w.role is Role.LIST_ITEM]
    if list_tops:
        parts.append(f'<div class="deco" style="left:{min(w.box[0] for w in widgets if w.role is Role.LIST_ITEM)}px;'
                     f'top:{min(list_tops) - 26}px;font-weight:bold;color:{t["muted"]}">{esc(section)}</div>')
    if params.form_factor == "desktop" and any(w.role is Role.MENU_ITEM for w in widgets):
        parts.append(f'<div class="deco" style="left:0;top:{APP_BAR_H}px;width:{SIDEBAR_W}px;height:{height - APP_BAR_H}px;'
                     f'background:{t["surface"]};border-right:1px solid {t["border"]}"></div>')
    first_tab = True
    for w in widgets:
        x, y, bw, bh = w.box
        style = f"left:{x}px;top:{y}px;width:{bw}px;height:{bh}px"
        if bh < 28 and w.role is not Role.ICON_BUTTON:
            style += ";font-size:12px"
        attrs = f'class="w {w.role.value}" data-wid="{w.id}" id="{w.id}" style="{style}"'
        label = esc(w.label)
        if w.role is Role.BUTTON:
            primary = " primary" if w.label in (SUBMIT[0], SUBMIT[1]) else ""
            parts.append(f'<button {attrs.replace("w button", "w button" + primary)}>{label}</button>')
        elif w.role is Role.ICON_BUTTON:
            parts.append(f'<button {attrs} aria-label="{label}" title="{label}">{esc(w.glyph)}</button>')
        elif w.role is Role.LINK:
            parts.append(f'<a href="#" {attrs}>{label}</a>')
        elif w.role is Role.TAB:
            active = "active " if first_tab else ""
            first_tab = False
            parts.append(f'<div role="tab" {attrs.replace("w tab", "w " + active + "tab")}>{label}</div>')
        elif w.role is Role.MENU_ITEM:
            parts.append(f'<div role="menuitem" {attrs}>{label}</div>')
        elif w.role is Role.LIST_ITEM:
            parts.append(f'<div role="option" {attrs}>{label}</div>')
        elif w.role is Role.CHECKBOX:
            parts.append(f'<div role="checkbox" aria-checked="false" {attrs}><span class="box">☐</span>{label}</div>')
        else:
            parts.append(f'<input type="text" {attrs} placeholder="{label}" aria-label="{label}" autocomplete="off">')
    body = "\n".join(parts)
    return (f'<!doctype html><html lang="{params.language}"><head><meta charset="utf-8">'
            f"<style>{css}</style></head><body>\n{body}\n<script>{_SCRIPT}</script></body></html>")


def screen_json(screen: Screen) -> str:
    """The ground truth of a screen as JSON (widgets and task), for datasets and debugging."""
    return json.dumps({
        "seed": screen.seed, "size": [screen.width, screen.height],
        "widgets": [{"id": w.id, "role": w.role.value, "label": w.label, "box": list(w.box)} for w in screen.widgets],
        "task": {"kind": screen.task.kind.value, "instruction": screen.task.instruction,
                 "targets": list(screen.task.target_ids), "distractors": list(screen.task.distractor_ids)},
    }, ensure_ascii=False)

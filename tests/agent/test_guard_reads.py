"""The guard reads as a person and a browser do (docs/security.md, "The guard reads as a person does"): each test is
an attack that got through before: look-alike and invisible characters in a label, keys that press a focused
button, closing hotkeys outside a list, URLs the browser parses differently, the metadata address, a forbidden
screen scrolled at its centre, pages of other kinds off the allowlist, ``finish`` refused."""

from __future__ import annotations

import asyncio
import unicodedata
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.guard import (
    IRREVERSIBLE_WORDS,
    GuardChain,
    GuardVerdict,
    HotkeyGuard,
    IrreversibleGuard,
    RegionGuard,
    UrlGuard,
)
from agent.reading import read_as_seen
from agent.web_address import forbidden_host, parse_address
from devices.actions import Action, ActionKind, Point
from devices.base import Box, ElementInfo, Observation

BUTTON = Box(0.4, 0.4, 0.6, 0.6)
CENTRE = Point(0.5, 0.5)


class Screen:
    """A made-up screen (a stand-in for agent.probe.Probe over a device): elements, the focused one, the page URL."""

    def __init__(self, elements=(), focused: ElementInfo | None = None, url: str = ""):
        self.elements = list(elements)
        self.focused = focused
        self.observation = Observation(frame=np.zeros((4, 4, 3), np.uint8), meta={"url": url})

    async def element_at(self, point):
        return next((e for e in self.elements if e.box.contains(point.x, point.y)), None)

    async def focused_element(self):
        return self.focused

    async def focused_box(self):
        return self.focused.box if self.focused is not None else None


def verdict(guard, action, screen=None) -> GuardVerdict:
    return asyncio.run(guard.check(action, screen or Screen())).verdict


def click_on(label: str) -> GuardVerdict:
    button = ElementInfo(text=label, box=BUTTON, role="button")
    return verdict(IrreversibleGuard(), Action(ActionKind.CLICK, CENTRE), Screen([button]))


# -- labels read as a person reads them ------------------------------------------------------------------------------
DISGUISED = {
    "cyrillic e": "D\u0435l\u0435t\u0435",          # Dеlеtе
    "greek capitals": "\u03a1\u0391\u03a5",          # ΡΑΥ
    "cyrillic capitals": "\u0405\u0415ND",           # ЅЕND
    "armenian and cyrillic": "\u0570\u0455\u0435nd",  # not a word: control below
    "zero-width space": "De\u200blete",
    "zero-width joiner": "Se\u200dnd",
    "word joiner": "Pur\u2060chase",
    "soft hyphen": "Uni\u00adnstall",
    "combining strokes": "D\u0336e\u0336l\u0336e\u0336t\u0336e\u0336",
    "combining accents": "Pa\u0301y",
    "hangul filler": "Wi\u3164pe",
    "right-to-left override": "\u202eeteleD\u202c",
    "capital I for l": "DeIete",
    "digit one for l": "De1ete",
    "rn for m": "Rernove",
    "spaced letters": "D e l e t e",
    "spaced CJK": "删 除",
    "ideographic space": "购\u3000买",
    "traditional delete": "刪除",
    "traditional buy": "購買",
    "traditional send": "發送",
    "traditional transfer": "轉賬",
    "taiwan transfer": "轉帳",
    "traditional with zero-width": "刪\u200b除",
}
DISGUISED.pop("armenian and cyrillic")


@pytest.mark.parametrize("label", list(DISGUISED.values()), ids=list(DISGUISED))
def test_a_disguised_irreversible_label_still_needs_a_yes(label):
    assert click_on(label) is GuardVerdict.CONFIRM


@pytest.mark.parametrize("label", ["Payload viewer", "Postal code", "Deleted items", "Sender info", "Modern", "Save",
                                   "Setup", "Обзор", "Reading list", "编辑", "編輯"])
def test_ordinary_labels_still_pass(label):
    assert click_on(label) is GuardVerdict.ALLOW


def test_the_word_named_is_the_listed_one_and_added_words_fold_too():
    decision = asyncio.run(IrreversibleGuard().check(
        Action(ActionKind.CLICK, CENTRE), Screen([ElementInfo(text="Dеlеtе", box=BUTTON)])))
    assert "it reads 'delete'" in decision.reason and "'Dеlеtе'" in decision.reason
    signed = IrreversibleGuard(("sign contract", "签署"))
    for label in ("Ѕign соntract", "簽署"):  # Cyrillic Ѕ and о; Traditional 簽
        assert verdict(signed, Action(ActionKind.CLICK, CENTRE), Screen([ElementInfo(label, BUTTON)])) \
            is GuardVerdict.CONFIRM
    assert read_as_seen("Ｄｅｌｅｔｅ\u00ad") == ("delete", "delete")
    # a word that reads as nothing would match everywhere: refused in the config, ignored by the guard
    assert verdict(IrreversibleGuard(("\u200b\u0301",)), Action(ActionKind.CLICK, CENTRE),
                   Screen([ElementInfo("Save", BUTTON)])) is GuardVerdict.ALLOW
    from agent.config import load_config
    from agent.errors import ConfigError

    with pytest.raises(ConfigError, match="reads as nothing"):
        load_config(None, ['guard.irreversible_words=["\u200b"]'])


def _look_alikes() -> dict[str, list[str]]:
    """For each character of the Latin words, the single characters Unicode's confusables data lists as looking like
    it (the package's own data, not the guard's table)."""
    from confusable_homoglyphs.confusables import confusables_data

    letters = {c for w in IRREVERSIBLE_WORDS if w.isascii() for c in w if c != " "}
    found = {}
    for c in sorted(letters):
        alike = [e["c"].strip("\u200e\u200f") for e in confusables_data.get(c, [])]
        found[c] = [a for a in alike if len(a) == 1 and not unicodedata.category(a).startswith("M")]
    return found


LOOK_ALIKES = _look_alikes()
BIDI = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
INVISIBLE = [chr(c) for c in (*range(0x30000), *range(0xE0000, 0xE0080))
             if unicodedata.category(chr(c)) == "Cf" and chr(c) not in BIDI]
MARKS = [chr(c) for c in range(0x300, 0x2000) if unicodedata.category(chr(c)) == "Mn"]


@st.composite
def disguised(draw) -> tuple[str, str]:
    """A listed word, each letter kept, upper-cased or swapped for a look-alike, with invisible characters and
    combining marks strewn in, inside an ordinary sentence."""
    word = draw(st.sampled_from([w for w in IRREVERSIBLE_WORDS if w.isascii()]))
    out = []
    for c in word:
        choices = [c, c.upper(), *LOOK_ALIKES.get(c, [])]
        out.append(draw(st.sampled_from(choices)))
        out.extend(draw(st.lists(st.sampled_from(INVISIBLE), max_size=2)))
        out.extend(draw(st.lists(st.sampled_from(MARKS), max_size=1)))
    return word, f"Please {''.join(out)} now"


@settings(max_examples=200, deadline=None)
@given(disguised())
def test_any_disguise_from_the_confusables_data_still_reads_as_the_word(case):
    word, label = case
    assert READER.match(label) is not None, f"{word}: {label!a}"
    assert READER.match("Please  now") is None


READER = IrreversibleGuard()


# -- whatever activates the target ------------------------------------------------------------------------------------
FOCUSED_DELETE = ElementInfo(text="Delete", box=BUTTON, role="button")
PRESSES = {
    "type with a point": Action(ActionKind.TYPE, CENTRE, text="x"),
    "hotkey Enter": Action(ActionKind.HOTKEY, keys=("Enter",)),
    "hotkey Shift+Enter": Action(ActionKind.HOTKEY, keys=("Shift", "Return")),
    "key Space": Action(ActionKind.KEY, keys=("Space",)),
    "key space character": Action(ActionKind.KEY, keys=(" ",)),
    "key newline": Action(ActionKind.KEY, keys=("\n",)),
    "key carriage return": Action(ActionKind.KEY, keys=("\r",)),
    "typed newline": Action(ActionKind.TYPE, text="ok\n"),
    "typed space on a button": Action(ActionKind.TYPE, text=" "),
    "long press": Action(ActionKind.LONG_PRESS, CENTRE),
    "double click": Action(ActionKind.DOUBLE_CLICK, CENTRE),
    "drag that starts on it": Action(ActionKind.DRAG, CENTRE, end=Point(0.9, 0.9)),
}


@pytest.mark.parametrize("action", list(PRESSES.values()), ids=list(PRESSES))
def test_whatever_presses_a_focused_irreversible_button_needs_a_yes(action):
    assert verdict(IrreversibleGuard(), action, Screen([FOCUSED_DELETE], focused=FOCUSED_DELETE)) \
        is GuardVerdict.CONFIRM


def test_a_submit_input_tells_its_label_at_its_centre_and_text_fields_take_spaces():
    # <input type=submit value=Delete>: its own accessible text is empty; the element at its centre says "Delete"
    submit = ElementInfo(text="", box=BUTTON, role="input")
    screen = Screen([ElementInfo(text="Delete", box=BUTTON, role="input")], focused=submit)
    assert verdict(IrreversibleGuard(), Action(ActionKind.KEY, keys=("Enter",)), screen) is GuardVerdict.CONFIRM
    # a space typed into a text field labelled "Send a message" is text, not a press; a newline there sends
    field = ElementInfo(text="Send a message", box=BUTTON, role="textarea")
    chat = Screen([field], focused=field)
    assert verdict(IrreversibleGuard(), Action(ActionKind.TYPE, text="see you soon"), chat) is GuardVerdict.ALLOW
    assert verdict(IrreversibleGuard(), Action(ActionKind.TYPE, text="bye\n"), chat) is GuardVerdict.CONFIRM
    # a Tab moves the focus somewhere the guard did not see: a space or newline after it asks
    assert verdict(IrreversibleGuard(), Action(ActionKind.TYPE, text="x\t "), Screen()) is GuardVerdict.CONFIRM
    assert verdict(IrreversibleGuard(), Action(ActionKind.KEY, keys=("a",)), chat) is GuardVerdict.ALLOW


def test_without_a_focus_the_last_pointed_target_stands_in():
    guard = IrreversibleGuard()  # the desktop: no focused element, OCR at the last point
    screen = Screen([ElementInfo(text="Send", box=BUTTON, role="ocr")])
    asyncio.run(guard.check(Action(ActionKind.HOVER, Point(0.1, 0.1)), screen))
    assert verdict(guard, Action(ActionKind.KEY, keys=("Enter",)), screen) is GuardVerdict.ALLOW
    asyncio.run(guard.check(Action(ActionKind.RIGHT_CLICK, CENTRE), screen))
    assert verdict(guard, Action(ActionKind.KEY, keys=("Enter",)), screen) is GuardVerdict.CONFIRM


# -- closing hotkeys by what they do ----------------------------------------------------------------------------------
@pytest.mark.parametrize("keys", ids="+".join, argvalues=[("Control", "F4"), ("Control", "Shift", "q"), ("Control", "Shift", "w"),
                                  ("Alt", "F4"), ("cmd", "q"), ("Command", "w"), ("Meta", "Alt", "w"),
                                  ("Meta", "Shift", "q"), ("ctrl", "W"), ("Control", "ｗ"), ("Shift", "Alt", "F4"),
                                  ("Control", "Alt", "Del"), ("ctrl", "alt", "backspace"), ("Meta", "Alt", "Esc"),
                                  ("w", "Control")])
def test_closing_hotkeys_are_judged_by_their_effect(keys):
    decision = asyncio.run(HotkeyGuard().check(Action(ActionKind.HOTKEY, keys=keys), Screen()))
    assert decision.verdict is GuardVerdict.CONFIRM and "may close" in decision.reason


@pytest.mark.parametrize("keys", ids="+".join, argvalues=[("Control", "c"), ("Control", "Shift", "t"), ("Alt", "Tab"), ("Shift", "F4"),
                                  ("F4",), ("Control", "Delete"), ("Alt", "w"), ("Shift", "q"), ("Control", "Escape")])
def test_other_hotkeys_pass(keys):
    assert verdict(HotkeyGuard(), Action(ActionKind.HOTKEY, keys=keys)) is GuardVerdict.ALLOW


# -- URLs as the browser reads them -----------------------------------------------------------------------------------
@pytest.mark.parametrize("url", ["http://127.0.0.1:8080\\@localhost/", "http://evil.test\\.localhost/",
                                 "http://evil.test\\@localhost/", "http:\\\\evil.test\\x.localhost",
                                 "http://evil.test#@localhost/"])
def test_an_allowlist_is_not_escaped_by_backslashes_or_user_info(url):
    assert verdict(UrlGuard(domains=("localhost",)), Action(ActionKind.OPEN_URL, text=url)) is GuardVerdict.REFUSE


@pytest.mark.parametrize("url, host", [
    ("http://2130706433/", "127.0.0.1"), ("http://0x7f.1/", "127.0.0.1"), ("http://0177.0.0.1/", "127.0.0.1"),
    ("http://%31%32%37.0.0.1/", "127.0.0.1"), ("http://user:pw@127.1:8/", "127.0.0.1"),
    ("HTTP://LOCALHOST./", "localhost."), ("http://ｌｏｃａｌｈｏｓｔ/", "localhost"),
    ("http://Bücher.example/", "xn--bcher-kva.example"), ("http:/\\localhost/x", "localhost"),
    (" http://local\thost/\n", "localhost"),
])
def test_hosts_are_read_as_the_url_standard_reads_them(url, host):
    assert parse_address(url).host == host
    assert verdict(UrlGuard(domains=(host,)), Action(ActionKind.OPEN_URL, text=url)) is GuardVerdict.ALLOW
    assert verdict(UrlGuard(domains=("bücher.example",)), Action(ActionKind.OPEN_URL, text="https://BÜCHER.example")) \
        is GuardVerdict.ALLOW  # the allowlist itself is read the same way


@pytest.mark.parametrize("url", [
    "http://169.254.169.254/latest/meta-data/iam/security-credentials/", "http://2852039166/", "http://0xa9fea9fe/",
    "http://0251.0376.0251.0376/", "http://169.254.43518/", "http://[::ffff:169.254.169.254]/",
    "http://[fd00:ec2::254]/latest/", "http://metadata.google.internal/computeMetadata/v1/",
    "http://METADATA.google.internal./", "http://metadata/computeMetadata/v1/", "http://169.254.1.1/",
    "http://[fe80::1]/", "http://[64:ff9b::a9fe:a9fe]/", "http://100.100.100.200/latest/meta-data/",
    "https://user@169.254.169.254@/", "http://169.254.169.254\\@example.com/",
])
def test_link_local_and_metadata_addresses_are_refused_by_default(url):
    try:
        address = parse_address(url)
    except ValueError:
        address = None  # not a URL at all: refused as such
    assert verdict(UrlGuard(), Action(ActionKind.OPEN_URL, text=url)) is GuardVerdict.REFUSE
    if address is not None:
        assert forbidden_host(address.host) is not None
        assert verdict(UrlGuard(link_local=True), Action(ActionKind.OPEN_URL, text=url)) is GuardVerdict.ALLOW


def test_the_page_shown_is_judged_whatever_its_kind():
    g = UrlGuard(domains=("example.com",))
    click = Action(ActionKind.CLICK, CENTRE)
    for shown in ("file:///etc/passwd", "data:text/html,<b>hi</b>", "about:blank", "chrome://settings/",
                  "blob:https://evil.test/0d5c", "https://evil.test\\.example.com/", "not a url"):
        assert verdict(g, click, Screen(url=shown)) is GuardVerdict.REFUSE, shown
        for free in (ActionKind.BACK, ActionKind.FINISH, ActionKind.ASK_USER):
            action = Action(free, text="why?" if free is ActionKind.ASK_USER else None)
            assert verdict(g, action, Screen(url=shown)) is GuardVerdict.ALLOW, (shown, free)
    assert verdict(g, click, Screen(url="https://shop.example.com/cart")) is GuardVerdict.ALLOW
    # a link-local page is refused with no allowlist at all (a redirect may have led there)
    assert verdict(UrlGuard(), click, Screen(url="http://169.254.169.254/latest/")) is GuardVerdict.REFUSE
    assert verdict(UrlGuard(), click, Screen(url="file:///home/me/page.html")) is GuardVerdict.ALLOW


# -- the end is always allowed; a scroll acts where it acts ----------------------------------------------------------
def test_finish_and_infeasible_are_allowed_off_the_allowlist():
    from agent.builders import build_guard
    from agent.config import load_config
    from agent.errors import ConfigError

    guard = build_guard(load_config(None, ['guard.allow_domains=["example.com"]', "guard.forbidden_regions=[[0,0,1,1]]",
                                           'guard.confirm=["ask_user"]']))
    away = Screen(url="https://elsewhere.test/")
    assert verdict(guard, Action(ActionKind.FINISH, text="done"), away) is GuardVerdict.ALLOW
    assert verdict(guard, Action(ActionKind.INFEASIBLE, text="not here"), away) is GuardVerdict.ALLOW
    assert verdict(guard, Action(ActionKind.CLICK, CENTRE), away) is GuardVerdict.REFUSE
    with pytest.raises(ConfigError, match="finish cannot be refused"):
        load_config(None, ['guard.refuse=["finish"]'])


def test_a_scroll_without_a_point_counts_at_the_centre():
    whole = RegionGuard(((0.0, 0.0, 1.0, 1.0),))
    assert verdict(whole, Action(ActionKind.SCROLL, direction="down")) is GuardVerdict.REFUSE
    middle = RegionGuard(((0.4, 0.4, 0.6, 0.6),))
    assert verdict(middle, Action(ActionKind.SCROLL, direction="up")) is GuardVerdict.REFUSE
    assert verdict(middle, Action(ActionKind.SCROLL, Point(0.1, 0.1), direction="up")) is GuardVerdict.ALLOW
    corner = RegionGuard(((0.0, 0.0, 0.2, 0.2),))
    assert verdict(corner, Action(ActionKind.SCROLL, direction="up")) is GuardVerdict.ALLOW
    assert verdict(GuardChain([whole]), Action(ActionKind.FINISH)) is GuardVerdict.ALLOW


# -- in Chromium ------------------------------------------------------------------------------------------------------
def _hosts_in_chromium(urls: list[str]) -> list[tuple[str, str, str]]:
    """Where Chromium goes for each URL, three ways: the host of the request ``open_url`` makes (the web device's own
    ``goto``), of the page it then shows, and of the URL as the page's own parser reads it (``new URL``). Every
    request is answered by the test itself (a route), so nothing leaves the browser."""
    from devices.web import PlaywrightDevice, WebConfig

    async def main() -> list[tuple[str, str, str]]:
        async with PlaywrightDevice(WebConfig(viewport_width=400, viewport_height=300)) as device:
            requested: list[str] = []

            async def answer(route):
                requested.append(route.request.url)
                await route.fulfill(status=200, content_type="text/html", body="<p>here</p>")

            await device.page.context.route("**/*", answer)
            seen = []
            for url in urls:
                requested.clear()
                await device.goto(url)
                shown = await device.page.evaluate("location.hostname")
                parsed = await device.page.evaluate("u => { try { return new URL(u).hostname } catch { return '' } }",
                                                    url)
                seen.append((urlsplit(requested[0]).hostname or "", shown.strip("[]"), parsed.strip("[]")))
            return seen

    return asyncio.run(main())


def test_the_guard_judges_the_host_chromium_goes_to(site):
    port = site.port
    urls = [f"http://127.0.0.1:{port}\\@localhost/", f"http://localhost:{port}\\@127.0.0.1/",
            f"http://2130706433:{port}/", f"http://0x7f.1:{port}/", f"http://0177.0.0.1:{port}/",
            f"http://%31%32%37.0.0.1:{port}/", f"http://localhost@127.0.0.1:{port}/", f"http:\\\\127.0.0.1:{port}/x",
            f"http:127.1:{port}/", f"http://LOCALHOST:{port}/", f"http://127.0.0.1:{port}#@localhost/",
            f"http://[::ffff:7f00:1]:{port}/", f"http://ｌｏｃａｌｈｏｓｔ:{port}/", f"http://0x7f000001:{port}/"]
    seen = _hosts_in_chromium(urls)
    judged = [parse_address(u).host for u in urls]
    for way in range(3):
        assert [s[way].lower() for s in seen] == judged, way
    # the issue's own case: Chromium lands on 127.0.0.1, and an allowlist of localhost refuses it
    assert judged[0] == "127.0.0.1"
    assert verdict(UrlGuard(domains=("localhost",)), Action(ActionKind.OPEN_URL, text=urls[0])) is GuardVerdict.REFUSE


LABELS_HTML = """<!doctype html><html><body style="margin:0">{buttons}
<script>window.handeye = {{clicks: []}};
for (const b of document.querySelectorAll('button')) b.addEventListener('click', () => window.handeye.clicks.push(b.id));
document.getElementById('b0').focus();</script></body></html>"""
PAGE_LABELS = ["D\u0435l\u0435t\u0435", "De\u200blete", "Uni\u00adnstall", "\u202eeteleD\u202c", "删 除", "刪除",
               "購買", "發送", "轉賬", "P\u0336a\u0336y\u0336", "\u200b" * 90 + "Send",
               '<span style="display:inline-block;width:60px;height:40px;line-height:40px;text-align:right">Del</span>ete',
               '<svg width="100" height="40" aria-hidden="true"><rect width="100" height="40" fill="#c33"/></svg>']
"""Each one drawn as an irreversible word: look-alike, invisible, reordered, spaced and Traditional; one padded with
zero-width spaces past the 80 characters kept; one split across two elements (the point lands on "Del"); an icon
(the point lands on the drawing) in a button named by its aria-label."""
ARIA = {len(PAGE_LABELS) - 1: ' aria-label="Delete"'}


def _button_page(pages_dir: Path, site) -> str:
    buttons = "".join(f'<button id="b{i}"{ARIA.get(i, "")} style="position:absolute;left:{20 + 150 * (i % 5)}px;'
                      f'top:{40 + 100 * (i // 5)}px;width:120px;height:50px">{label}</button>'
                      for i, label in enumerate(PAGE_LABELS))
    (pages_dir / "labels.html").write_text(LABELS_HTML.format(buttons=buttons), encoding="utf-8")
    return site.url("labels.html")


def _press_each(tmp_path: Path, url: str, script: list[Action], **options) -> tuple[list[str], list]:
    """Runs ``script`` with agent run's default guard and nobody to ask (or ``assume_yes``); the buttons clicked and
    the guard's word on each step."""
    from agent.builders import build_guard
    from agent.config import load_config
    from agent.runner import RunOptions, run_episode
    from devices.settle import SettleConfig
    from devices.web import PlaywrightDevice, WebConfig
    from envs.task_env import TaskEnv
    from envs.trajectory import RunWriter, read_episode
    from policy.scripted import ScriptedPolicy

    writer = RunWriter(tmp_path / "runs", config={}).episode(task="t")
    device = PlaywrightDevice(WebConfig(viewport_width=800, viewport_height=600),
                              SettleConfig(min_s=0.0, deadline_s=1.0), url=url)
    env = TaskEnv(device, "t")
    # every step may be refused without the streak ending the episode
    run_options = RunOptions(max_parse_retries=len(script) + 1, **options)

    async def main():
        try:
            await run_episode(env, ScriptedPolicy([*script, Action(ActionKind.FINISH)]), writer,
                              guard=build_guard(load_config(None, [])), options=run_options)
            return await device.evaluate("() => window.handeye.clicks")
        finally:
            await env.close()

    clicks = asyncio.run(main())
    return clicks, [s.guard for s in read_episode(writer.path).steps]


def _centre_of(i: int) -> Point:
    return Point((20 + 150 * (i % 5) + 60) / 800, (40 + 100 * (i // 5) + 25) / 600)


def test_disguised_labels_are_not_clicked_in_chromium(tmp_path, pages_dir, site):
    url = _button_page(pages_dir, site)
    clicks, guards = _press_each(tmp_path, url, [Action(ActionKind.CLICK, _centre_of(i)) for i in range(len(PAGE_LABELS))])
    assert clicks == [] and all(g["verdict"] == "refuse" and "may not be undone" in g["reason"] for g in guards[:-1])


def test_keys_and_typing_do_not_press_a_focused_irreversible_button_in_chromium(tmp_path, pages_dir, site):
    url = _button_page(pages_dir, site)  # b0, "Dеlеtе", has the focus
    script = [Action(ActionKind.TYPE, _centre_of(1), text="x"), Action(ActionKind.HOTKEY, keys=("Enter",)),
              Action(ActionKind.KEY, keys=("Space",)), Action(ActionKind.KEY, keys=("\n",)),
              Action(ActionKind.TYPE, text="\n")]
    clicks, guards = _press_each(tmp_path, url, script)
    assert clicks == [] and [g["verdict"] for g in guards[:-1]] == ["refuse"] * len(script)
    # the same steps said yes to press the buttons: each of them is a press the page sees
    clicks, _ = _press_each(tmp_path, url, script, assume_yes=True)
    assert clicks == ["b1", "b1", "b1", "b1", "b1"]


URL_PIECES = (
    ["http:", "HTTP:", "https:", "hTtPs:"],
    ["//", "\\\\", "/\\", "\\/", "", "///", "/", "\t//", "/ /"],
    ["", "u@", "u:p@", "a@b@", "x\\@", "localhost@", "127.0.0.1:1@", "%40@", "u@p@q@"],
    ["127.0.0.1", "2130706433", "0x7f.1", "0177.1", "127.1", "%31%32%37.0.0.1", "localhost", "LOCALHOST", "ｌｏｃａｌｈｏｓｔ",
     "[::1]", "[::ffff:127.0.0.1]", "example.com", "xn--bcher-kva.example", "bücher.example", "a..b", "0x7f.0.0.0x1",
     "127.0.0.1.", "1.2.3.4.5", "0x100000000", "4294967296", "EXAMPLE.com.", "ex%61mple.com", "ex\u00adample.com",
     "exa\u200bmple.com", "169.254.169.254", "0251.254.169.254", "localhost%2e", "127.0.0.0x1", "09.1", "0x", "1e1.1"],
    ["", ":80", ":8080", ":", ":0080"],
    ["/", "\\@localhost/", "#@evil.test", "?@x", "\t/x", "", "/\\evil.test", "\\\\evil.test", ";@x", "/%2e%2e/"],
)


def test_random_urls_are_read_as_chromium_reads_them_or_refused():
    """1,500 URLs put together at random from pieces that parsers disagree on: each one the guard reads as an address
    has the host Chromium's own parser gives it; the rest the guard refuses outright (Chromium, unlike the URL
    Standard, opens ``http:/ /x`` at host ``%20``)."""
    import random

    from devices.web import PlaywrightDevice, WebConfig

    pick = random.Random(7)
    urls = sorted({"".join(pick.choice(p) for p in URL_PIECES) for _ in range(1700)})[:1500]

    async def chromium() -> list[str | None]:
        async with PlaywrightDevice(WebConfig(viewport_width=400, viewport_height=300)) as device:
            return await device.page.evaluate(
                "us => us.map(u => { try { return new URL(u).hostname } catch { return null } })", urls)

    agreed = refused = 0
    for url, theirs in zip(urls, asyncio.run(chromium())):
        try:
            ours = parse_address(url).host
        except ValueError:
            refused += 1
            assert verdict(UrlGuard(), Action(ActionKind.OPEN_URL, text=url)) is GuardVerdict.REFUSE
            continue
        assert theirs is not None and theirs.strip("[]").lower() == ours, url
        agreed += 1
    assert agreed > 1000 and agreed + refused == len(urls)

"""OcrPolicy end to end: real OCR on real Chromium screenshots, and the click executed on the page.

Each page records which element got the click (``window.clicked`` holds the id), so a test fails
when the policy clicks the wrong element, not merely when its box differs from an expected one.
One OCR engine serves the whole module; the conversion of RapidOCR's output is also tested alone.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from devices.actions import Action, ActionKind, Point
from devices.base import Observation
from policy.base import Decision, HistoryEntry
from policy.errors import PolicyUnavailable
from policy.grounding import Rect
from policy.ocr import OcrConfig, OcrPolicy, build_engine, lines_from_result

RECORDER = """<script>
window.clicked = null; window.dblclicked = null; window.rightclicked = null; window.hovered = null;
const idOf = (e) => { const el = e.target.closest && e.target.closest('[id]'); return el ? el.id : null; };
document.addEventListener('click', (e) => { window.clicked = idOf(e); });
document.addEventListener('dblclick', (e) => { window.dblclicked = idOf(e); });
document.addEventListener('contextmenu', (e) => { e.preventDefault(); window.rightclicked = idOf(e); });
document.addEventListener('mouseover', (e) => { window.hovered = idOf(e); });
</script>"""

STYLE = """<style>
body { margin: 0; font-family: "Noto Sans", "Noto Sans CJK SC", sans-serif; background: #fff; }
button { position: absolute; font-size: 16px; padding: 6px 14px; }
</style>"""


def page(body: str) -> str:
    return f'<!doctype html><html><head><meta charset="utf-8">{STYLE}</head><body>{body}{RECORDER}</body></html>'


def button(element_id: str, label: str, x: int, y: int) -> str:
    return f'<button id="{element_id}" style="left:{x}px;top:{y}px">{label}</button>'


def distractor_page(seed: int) -> str:
    """Subscribe among look-alikes, at positions and in a document order drawn from ``seed``."""
    rng = random.Random(seed)
    slots = [(x, y) for x in (60, 420, 800) for y in (60, 280, 500)]
    buttons = [("sub", "Subscribe"), ("later", "Subscribe later"), ("unsub", "Unsubscribe")]
    rng.shuffle(buttons)
    placed = [
        button(element_id, label, x + rng.randint(0, 60), y + rng.randint(0, 40))
        for (element_id, label), (x, y) in zip(buttons, rng.sample(slots, 3), strict=True)
    ]
    # A longer line holding the label as a word: it must lose to the button that is just the label.
    blurb = (
        '<p id="blurb" style="position:absolute;left:40px;top:660px">'
        "Subscribe to our newsletter for weekly updates</p>"
    )
    return page("".join(placed) + blurb)


CHINESE_PAGE = page(
    button("sub", "订阅", 520, 300)
    + button("unsub", "取消订阅", 120, 140)
    + button("later", "稍后订阅", 860, 460)
    + '<p id="note" style="position:absolute;left:120px;top:600px">订阅后每周收到更新</p>'
)

MENU_PAGE = page(
    '<div style="position:absolute;left:12px;top:10px;font-size:14px;white-space:nowrap">'
    '<span id="file">File</span><span id="edit">Edit</span><span id="view">View</span>'
    '<span id="insert">Insert</span><span id="format">Format</span><span id="tools">Tools</span></div>'
    '<p style="position:absolute;left:12px;top:200px">Editing is disabled in this document.</p>'
)

PAGES = {
    # Seeds chosen so that no shortcut (topmost, leftmost, first in the document) finds "Subscribe".
    "distract0.html": distractor_page(3),
    "distract1.html": distractor_page(4),
    "distract2.html": distractor_page(5),
    "chinese.html": CHINESE_PAGE,
    "menu.html": MENU_PAGE,
}


# -- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def policy() -> OcrPolicy:
    # The set-up installs rapidocr: a missing engine is a failure, not a skip.
    return OcrPolicy()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from envs.site import LocalSite

    root: Path = tmp_path_factory.mktemp("ocr_pages")
    for name, html in PAGES.items():
        (root / name).write_text(html, encoding="utf-8")
    with LocalSite(root) as s:
        yield s


def run_on_pages(site: object, scenario, **web: object) -> object:
    """Open a browser, run ``scenario(dev, url)`` in it, close the browser."""
    from devices.web import PlaywrightDevice, WebConfig

    async def main() -> object:
        async with PlaywrightDevice(WebConfig(**web)) as dev:  # type: ignore[arg-type]
            return await scenario(dev, site.url)  # type: ignore[attr-defined]

    return asyncio.run(main())


async def click_on(dev, policy: OcrPolicy, instruction: str, history: tuple[HistoryEntry, ...] = ()) -> Decision:
    """Let the policy decide on the current screen and perform its action."""
    obs = await dev.observe()
    decision = await policy.decide(instruction, history, obs)
    assert decision.action is not None
    pointer = (ActionKind.CLICK, ActionKind.DOUBLE_CLICK, ActionKind.RIGHT_CLICK, ActionKind.HOVER)
    assert decision.action.kind in pointer, f"{instruction!r}: {decision.action.describe()} {decision.raw_output}"
    point = decision.action.point
    assert decision.target_box is not None and decision.target_box.contains(point.x, point.y)
    assert decision.model_input_size == obs.size
    await dev.act(decision.action)
    return decision


# -- on real pages ------------------------------------------------------------------------------


def test_subscribe_among_lookalikes(site: object, policy: OcrPolicy) -> None:
    async def scenario(dev, url):
        for name in ("distract0.html", "distract1.html", "distract2.html"):
            await dev.goto(url(name))
            decision = await click_on(dev, policy, "click Subscribe")
            clicked = await dev.evaluate("window.clicked")
            assert clicked == "sub", f"{name}: clicked {clicked!r}; {decision.raw_output}"
            summary = json.loads(decision.raw_output)
            assert summary["tier"] == "line" and summary["matched"] == "Subscribe"
        await dev.goto(url("distract1.html"))
        await click_on(dev, policy, 'click "Subscribe later"')
        assert await dev.evaluate("window.clicked") == "later"
        await click_on(dev, policy, "click the Unsubscribe button")
        assert await dev.evaluate("window.clicked") == "unsub"

    run_on_pages(site, scenario)


def test_chinese_labels(site: object, policy: OcrPolicy) -> None:
    async def scenario(dev, url):
        await dev.goto(url("chinese.html"))
        decision = await click_on(dev, policy, "点击“订阅”")
        assert await dev.evaluate("window.clicked") == "sub", decision.raw_output
        await click_on(dev, policy, "点击稍后订阅按钮")
        assert await dev.evaluate("window.clicked") == "later"

    run_on_pages(site, scenario, locale="zh-CN")


def test_merged_menu_bar_items(site: object, policy: OcrPolicy) -> None:
    async def scenario(dev, url):
        await dev.goto(url("menu.html"))
        decision = await click_on(dev, policy, "click Edit")
        assert await dev.evaluate("window.clicked") == "edit", decision.raw_output
        line = json.loads(decision.raw_output)["line"]
        assert len(line) > len("Edit")  # the bar really was read as one merged line
        await click_on(dev, policy, "click Insert")
        assert await dev.evaluate("window.clicked") == "insert"
        await click_on(dev, policy, "double-click View")
        assert await dev.evaluate("window.dblclicked") == "view"
        await click_on(dev, policy, "right-click Format")
        assert await dev.evaluate("window.rightclicked") == "format"
        await click_on(dev, policy, "hover over the Tools menu")
        assert await dev.evaluate("window.hovered") == "tools"

    run_on_pages(site, scenario)


def test_hidpi_frame_and_downscaled_ocr(site: object, policy: OcrPolicy) -> None:
    # A 2x frame read at a smaller size: points must still land on the right CSS pixels.
    small = OcrPolicy(OcrConfig(max_side=1800))
    small._engine = policy._get_engine()  # the same models; only the frame size differs

    async def scenario(dev, url):
        await dev.goto(url("menu.html"))
        obs = await dev.observe()
        assert obs.size == (2560, 1440)
        decision = await small.decide("click Edit", (), obs)
        assert decision.action is not None and decision.action.kind is ActionKind.CLICK, decision.raw_output
        await dev.act(decision.action)
        assert await dev.evaluate("window.clicked") == "edit", decision.raw_output

    run_on_pages(site, scenario, device_scale_factor=2.0)


def test_label_not_on_screen_is_infeasible(site: object, policy: OcrPolicy) -> None:
    async def scenario(dev, url):
        await dev.goto(url("distract0.html"))
        return await policy.decide("click Delete account", (), await dev.observe())

    decision = run_on_pages(site, scenario)
    assert decision.action is not None and decision.action.kind is ActionKind.INFEASIBLE
    assert decision.action.text.startswith('could not find "Delete account" on the screen (read: ')
    assert '"Subscribe later"' in decision.action.text
    assert decision.target_box is None
    assert decision.info["lines"] >= 3 and decision.info["ocr_s"] > 0


def test_click_then_finish(site: object, policy: OcrPolicy) -> None:
    async def scenario(dev, url):
        await dev.goto(url("distract2.html"))
        first = await click_on(dev, policy, "click Subscribe")
        done = HistoryEntry(first.action, first.raw_output, executed=True)
        second = await policy.decide("click Subscribe", (done,), await dev.observe())
        refused = HistoryEntry(first.action, first.raw_output, executed=False, note="guard refused")
        again = await policy.decide("click Subscribe", (refused,), await dev.observe())
        return second, again

    second, again = run_on_pages(site, scenario)
    assert second.action == Action(ActionKind.FINISH)
    assert again.action is not None and again.action.kind is ActionKind.CLICK  # not executed: still to do


# -- without a browser ---------------------------------------------------------------------------


def test_unsupported_instruction_is_infeasible_without_ocr() -> None:
    policy = OcrPolicy()
    obs = Observation(frame=np.zeros((10, 10, 3), np.uint8))
    decision = asyncio.run(policy.decide("type hello into the search box", (), obs))
    assert decision.action is not None and decision.action.kind is ActionKind.INFEASIBLE
    assert 'only handles "click X"-style instructions' in (decision.action.text or "")
    assert policy._engine is None  # nothing was read


def test_finish_needs_no_ocr() -> None:
    policy = OcrPolicy()
    obs = Observation(frame=np.zeros((10, 10, 3), np.uint8))
    history = (HistoryEntry(Action(ActionKind.CLICK, Point(0.5, 0.5))),)
    decision = asyncio.run(policy.decide("click Subscribe", history, obs))
    assert decision.action == Action(ActionKind.FINISH)
    assert policy._engine is None


def test_blank_frame_is_infeasible(policy: OcrPolicy) -> None:
    obs = Observation(frame=np.full((200, 300, 3), 255, np.uint8))
    decision = asyncio.run(policy.decide("click Subscribe", (), obs))
    assert decision.action is not None and decision.action.kind is ActionKind.INFEASIBLE
    assert "no text at all" in (decision.action.text or "")


def test_missing_rapidocr_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "rapidocr", None)  # makes `import rapidocr` fail
    with pytest.raises(PolicyUnavailable, match=r"make setup.*handeye\[ocr\]"):
        build_engine()


def test_describe_and_config() -> None:
    described = OcrPolicy().describe()
    assert described["name"] == "ocr" and described["engine"].startswith("rapidocr")
    with pytest.raises(ValueError, match="fuzzy_threshold"):
        OcrConfig(fuzzy_threshold=0)
    with pytest.raises(ValueError, match="max_side"):
        OcrConfig(max_side=10)


def _quad(left: float, top: float, right: float, bottom: float) -> list[list[float]]:
    return [[left, top], [right, top], [right, bottom], [left, bottom]]


def test_lines_from_result_pairs_character_boxes_with_their_lines() -> None:
    def chars(text: str, x: float) -> tuple:
        return tuple((c, 0.9, _quad(x + 10 * i, 0, x + 10 * i + 8, 20)) for i, c in enumerate(text))

    result = SimpleNamespace(
        txts=("Save as", "Edit", "Go"),
        scores=(0.99, 0.95, 0.3),
        boxes=np.array([_quad(0, 0, 80, 20), _quad(200, 0, 240, 20), _quad(300, 0, 320, 20)], np.float32),
        # "Edit" got no character boxes: RapidOCR then leaves the list shorter (or holds other objects).
        word_results=(chars("Saveas", 2), (object(),)),
    )
    lines = lines_from_result(result, min_score=0.5)
    assert [line.text for line in lines] == ["Save as", "Edit"]
    save, edit = lines
    assert save.chars[0] == ("S", Rect(2, 0, 10, 20))
    assert save.chars[4][1] == Rect(40, 0, 42, 20)  # the space fills the gap between "e" and "a"
    assert save.chars[5] == ("a", Rect(42, 0, 50, 20))
    assert [rect.width for _, rect in edit.chars] == pytest.approx([10, 10, 10, 10])  # spread evenly


def test_lines_from_result_scales_back_and_handles_empty_results() -> None:
    result = SimpleNamespace(
        txts=("OK",), scores=(1.0,), boxes=np.array([_quad(10, 10, 30, 20)]), word_results=()
    )
    (line,) = lines_from_result(result, scale=0.5)
    assert line.box == Rect(20, 20, 60, 40)
    assert lines_from_result(SimpleNamespace(txts=None, boxes=None, scores=None, word_results=(("", 1.0, None),))) == []
    assert lines_from_result(SimpleNamespace()) == []


def test_phrasings_people_use_on_generated_screens(policy: OcrPolicy) -> None:
    # Three forms of the phrasing suite (seed s uses form s % forms): the full measurement per form is
    # bench/phrasing.py (docs/benchmarks.md)
    from envs.generated import GeneratedEnv

    async def one(language: str, seed: int) -> tuple[str, bool]:
        env = GeneratedEnv("click", language=language, phrasing=True)
        try:
            obs, info = await env.reset(seed=seed)
            decision = await policy.decide(info["instruction"], (), obs)
            assert decision.action is not None and decision.action.kind is ActionKind.CLICK, decision.raw_output
            _, reward, *_ = await env.step(decision.action)
            return info["phrasing"], reward == 1.0
        finally:
            await env.close()

    results = [asyncio.run(one(lang, seed)) for lang, seed in (("en", 2), ("en", 8), ("zh", 2))]
    assert results == [("en-toolbar", True), ("en-find-and-click", True), ("zh-settings-page", True)]

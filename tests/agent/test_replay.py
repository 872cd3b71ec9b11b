"""``agent replay``: a web demonstration recorded with the real recorder (Playwright playing the person) is replayed
through the episode runner; the same page matches step by step, a changed page diverges where it changed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agent.cli import main as cli_main
from agent.replay import Verdict, frame_difference, plan_replay
from envs.records import Actor, Outcome
from envs.trajectory import iter_episodes, read_episode
from tests.support.web_demo import H, W, form_page, record_web_demo


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory):
    """(the recorded episode folder, the pages folder its site serves): recorded once for the module."""
    from envs.site import LocalSite

    root = tmp_path_factory.mktemp("demo")
    pages = root / "pages"
    pages.mkdir()
    (pages / "form.html").write_text(form_page(), encoding="utf-8")
    site = LocalSite(pages)
    try:
        yield record_web_demo(root / "runs", site.url("form.html")), pages, site
    finally:
        site.close()


def steps_of(report: dict) -> list[tuple]:
    """The report's steps, short enough for an assertion message: (step, verdict, element, frame, box, note)."""
    return [(r["step"], r["verdict"], r["element"], r["frame_diff"], r["box_diff"], r["note"]) for r in report["steps"]]


def replay_cli(episode: Path, runs: Path, *more: str) -> tuple[int, dict, Path]:
    code = cli_main(["replay", str(episode), "--runs-dir", str(runs), "--set", f"web.viewport_width={W}",
                     "--set", f"web.viewport_height={H}", *more])
    (run,) = [p for p in runs.iterdir() if p.is_dir()]
    return code, json.loads((run / "replay.json").read_text(encoding="utf-8")), run


def test_the_plan_skips_masked_text_unless_a_secret_is_named(demo):
    episode = read_episode(demo[0])
    assert episode.record.actor is Actor.HUMAN
    plan = plan_replay(episode)
    kinds = [(p.recorded.action or {}).get("kind") for p in plan]
    assert kinds == ["click", "click", "type", "click", "type", "key", "click", "finish"], kinds
    masked = plan[4]
    assert masked.action is None and "--secret-for" in masked.skip and masked.selector == "#pw"
    named = plan_replay(episode, {"#pw": "PASSWORD"})[4]
    assert named.action is not None and named.action.text == "{{secret:PASSWORD}}"
    assert plan[0].selector == "#ok" and plan[0].name == "OK"


def test_replay_on_the_same_page_matches_every_step(demo, tmp_path):
    episode, pages, site = demo
    code, report, run = replay_cli(episode, tmp_path / "runs")
    assert code == 0, steps_of(report)
    assert report["matched"] is True and report["diverged"] == [] and report["skipped"] == [4]
    rows = {r["step"]: r for r in report["steps"]}
    assert rows[0]["element"] == "found" and rows[0]["verdict"] == "ok" and rows[0]["frame_diff"] < 0.03
    assert rows[2]["element"] == "found"  # typing found its field again
    assert rows[7]["action"].startswith("finish") and rows[7]["verdict"] == "ok"  # the final screens agree
    (replayed,) = list(iter_episodes(run))
    assert replayed.record.outcome is Outcome.CLAIMED and replayed.record.actor is Actor.POLICY
    assert replayed.record.policy["name"] == "replay"
    assert [s.action["kind"] for s in replayed.steps] == ["click", "click", "type", "click", "key", "click", "finish"]
    assert replayed.steps[0].info["policy"]["replay"]["recorded_step"] == 0


def test_a_secret_named_for_the_password_is_typed_and_never_stored(demo, tmp_path, monkeypatch):
    episode, _, _ = demo
    monkeypatch.setenv("HANDEYE_TEST_PASSWORD", "s3cret-pass")
    assert cli_main(["replay", str(episode), "--secret-for", "#pw=PASSWORD"]) == 2  # not in the config's [secrets]
    code, report, run = replay_cli(episode, tmp_path / "runs", "--secret-for", "#pw=PASSWORD",
                                   "--set", 'secrets.PASSWORD="env:HANDEYE_TEST_PASSWORD"')
    assert code == 0, steps_of(report)
    assert report["skipped"] == [] and {r["step"]: r for r in report["steps"]}[4]["verdict"] == "ok"
    on_disk = "".join(p.read_text(encoding="utf-8") for p in run.rglob("*.json*"))
    assert "s3cret-pass" not in on_disk


def test_a_changed_page_diverges_where_it_changed(demo, tmp_path):
    episode, pages, site = demo
    (pages / "form.html").write_text(form_page(ok_left=400, ok_label="Go"), encoding="utf-8")
    try:
        code, report, _ = replay_cli(episode, tmp_path / "runs")
    finally:
        (pages / "form.html").write_text(form_page(), encoding="utf-8")
    assert code == 1
    first = report["steps"][0]
    assert first["verdict"] == "diverged" and first["element"] == "renamed" and first["frame_diff"] > 0.003
    assert "Go" in first["note"]
    assert report["diverged"] and 0 in report["diverged"]


def test_bad_input_exits_2(tmp_path, capsys):
    assert cli_main(["replay", str(tmp_path / "nothing")]) == 2
    assert "not a folder" in capsys.readouterr().out


def test_frame_difference_counts_the_changed_share():
    a = np.zeros((100, 200, 3), np.uint8)
    b = a.copy()
    b[0:50, 0:100] = 255  # a quarter of the frame
    whole, inside = frame_difference(a, b, (0.0, 0.0, 0.5, 0.5))
    assert whole == pytest.approx(0.25, abs=0.01) and inside == pytest.approx(1.0)
    assert frame_difference(a, a, None) == (0.0, None)
    assert Verdict.SKIPPED.value == "skipped"


HOVER_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>Hover</title><style>
#ok { position:absolute; left:40px; top:60px; width:160px; height:40px; background:#fff; color:#000;
      border:1px solid #888 }
#ok:hover { background:#123; color:#fff }
</style></head><body style="margin:0;font:16px sans-serif;background:#fff">
<button id="ok">OK</button><div id="out" style="position:absolute;left:40px;top:140px"></div>
<script>document.getElementById('ok').onclick = () => { document.getElementById('out').textContent = 'Pressed'; };
</script></body></html>"""


async def rest_on_ok_then_click(page) -> None:
    """A person: the pointer comes to rest on OK (it turns dark), a moment later the click."""
    import asyncio

    await page.wait_for_selector("#ok")
    await asyncio.sleep(0.3)
    box = await page.locator("#ok").bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    await page.mouse.move(x, y)
    await asyncio.sleep(0.8)  # the hovered button is on screen long before the click
    await page.mouse.click(x, y)
    await asyncio.sleep(0.6)


def test_a_target_recorded_hovered_is_compared_with_the_pointer_on_it(tmp_path):
    """The recorded frame shows OK hovered (dark); the replay's first look does not (the pointer is elsewhere), so it
    looks again with its pointer on OK and matches; on a page whose OK differs, looking again does not help."""
    from envs.site import LocalSite

    pages = tmp_path / "pages"
    pages.mkdir()
    (pages / "hover.html").write_text(HOVER_PAGE, encoding="utf-8")
    site = LocalSite(pages)
    try:
        episode = record_web_demo(tmp_path / "demo", site.url("hover.html"), task="Press OK",
                                  play=rest_on_ok_then_click)
        code, report, _ = replay_cli(episode, tmp_path / "runs")
        assert code == 0, steps_of(report)
        first = report["steps"][0]
        assert first["action"].startswith("click") and first["verdict"] == "ok"
        assert "with the pointer on the target" in first["note"] and first["box_diff"] < 0.15
        (pages / "hover.html").write_text(HOVER_PAGE.replace("#ok:hover { background:#123", "#ok:hover { "
                                                             "background:#f80"), encoding="utf-8")
        code, report, _ = replay_cli(episode, tmp_path / "runs2")
        assert code == 1 and report["steps"][0]["verdict"] == "diverged", steps_of(report)
    finally:
        site.close()

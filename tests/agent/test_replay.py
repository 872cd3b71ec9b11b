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
    assert code == 0, report
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
    assert code == 0, report
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

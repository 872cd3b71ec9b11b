"""agent.report: the HTML report of a run folder, rendered in Chromium from a file:// URL."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agent.eval import evaluate
from agent.runner import run_episode
from agent.report import build_report
from devices.actions import Action, ActionKind, Point
from devices.settle import SettleConfig
from devices.web import PlaywrightDevice, WebConfig
from agent.oracles import GeneratedOracle as OraclePolicy
from envs.records import Outcome
from envs.task_env import TaskEnv
from envs.tasks import ClickTask
from envs.wrappers import TimeLimit
from envs.trajectory import RunWriter, iter_episodes
from policy.scripted import ScriptedPolicy
from tests.agent.test_eval import Corner
from tests.agent.test_runner import BUTTONS_HTML, NO, OK

_RENDERED_JS = """() => {
  const imgs = Array.from(document.querySelectorAll('.step img'));
  const steps = Array.from(document.querySelectorAll('.step')).map(step => {
    const img = step.querySelector('img');
    const c = step.querySelector('circle.action');
    const r = img.getBoundingClientRect();
    const out = {img: [r.left, r.top, r.width, r.height], natural: img.naturalWidth,
                 raw: step.querySelector('.raw-output').textContent,
                 w: +step.querySelector('.frame').dataset.w, h: +step.querySelector('.frame').dataset.h};
    if (c) {
      const b = c.getBoundingClientRect();
      out.circle = {cx: +c.getAttribute('cx'), cy: +c.getAttribute('cy'), x: +c.dataset.x, y: +c.dataset.y,
                    centre: [b.left + b.width / 2, b.top + b.height / 2], size: [b.width, b.height]};
    }
    return out;
  });
  return {steps, images: imgs.length, loaded: imgs.filter(i => i.complete && i.naturalWidth > 0).length,
          table: document.querySelector('#success').innerText,
          bars: Array.from(document.querySelectorAll('#latency-chart g.bar')).map(g => g.dataset.phase),
          barRects: document.querySelectorAll('#latency-chart rect').length};
}"""


async def _render(report: Path, shot: Path) -> dict:
    device = PlaywrightDevice(WebConfig(viewport_width=1200, viewport_height=900))
    await device.start()
    try:
        page = device.page
        await page.goto(report.as_uri(), wait_until="load")
        data = await page.evaluate(_RENDERED_JS)
        await page.screenshot(path=str(shot), full_page=True)
        return data
    finally:
        await device.close()


def _check_steps(data: dict, run_dir: Path) -> None:
    steps = [s for ep in iter_episodes(run_dir) for s in ep.steps]
    assert data["images"] == len(steps) == data["loaded"] and len(steps) > 0  # one <img> per step, each loaded
    for rendered, step in zip(data["steps"], steps):
        assert rendered["natural"] == step.frame_size[0]
        assert rendered["raw"] == step.raw_output
        point = (step.action or {}).get("point")
        if point is None:
            assert "circle" not in rendered
            continue
        c = rendered["circle"]
        # The attributes: normalized point times the frame size (the overlay's viewBox is 0 0 W H).
        assert (c["x"], c["y"]) == pytest.approx(tuple(point), abs=1e-9)
        assert (c["cx"] / rendered["w"], c["cy"] / rendered["h"]) == pytest.approx(tuple(point), abs=1e-3)
        # Where it is drawn: the circle's centre on screen is the point on the displayed image; it is round.
        left, top, width, height = rendered["img"]
        assert c["centre"][0] == pytest.approx(left + point[0] * width, abs=1.5)
        assert c["centre"][1] == pytest.approx(top + point[1] * height, abs=1.5)
        assert c["size"][0] == pytest.approx(c["size"][1], abs=1)


def test_report_of_an_eval_run(tmp_path):
    async def main():
        oracle = await evaluate(["generated/click", "generated/form"], OraclePolicy, episodes=1, parallel=2,
                                runs_dir=tmp_path / "runs", run_id="oracle")
        return oracle

    result = asyncio.run(main())
    corner = asyncio.run(evaluate(["generated/click-easy"], lambda env: Corner(), episodes=1,
                                  runs_dir=tmp_path / "runs", run_id="corner", max_steps=1))
    for run_dir, rate in ((result.run_dir, "100%"), (corner.run_dir, "0%")):
        report = build_report(run_dir)
        assert report == run_dir / "report.html"
        text = report.read_text()
        assert "<style>" in text and "<script>" in text and "http://" not in text and "https://" not in text
        data = asyncio.run(_render(report, run_dir / "report.png"))
        for name in {e.env for e in (result if rate == "100%" else corner).episodes}:
            assert name in data["table"]
        assert rate in data["table"]
        _check_steps(data, run_dir)
        assert {"reset", "decide", "verify", "act"} <= set(data["bars"]) and data["barRects"] == len(data["bars"])
    # The oracle's verdicts and step rewards are on the page.
    text = (result.run_dir / "report.html").read_text()
    assert "on the target" in text and "step reward" in text


def test_report_of_an_agent_run(tmp_path, site, pages_dir):
    (pages_dir / "buttons.html").write_text(BUTTONS_HTML)
    url = site.url("buttons.html")
    run = RunWriter(tmp_path / "runs", config={"test": True}, run_id="loop")
    task = ClickTask("ok", "click OK", "buttons.html", "ok")
    script = ["not json at all", Action(ActionKind.CLICK, NO), Action(ActionKind.CLICK, OK),
              Action(ActionKind.TYPE, Point(0.5, 0.7), text="hello"), Action(ActionKind.FINISH)]
    device = PlaywrightDevice(WebConfig(viewport_width=800, viewport_height=600), SettleConfig(min_s=0.0, deadline_s=1.0),
                              url=url)
    writer = run.episode(task="click OK")
    env = TaskEnv(device, "click OK", checker=task.check, name="demo/ok")

    async def episode():
        try:
            return (await run_episode(TimeLimit(env, 15), ScriptedPolicy(script), writer)).record
        finally:
            await env.close()

    record = asyncio.run(episode())
    assert record.outcome is Outcome.SUCCESS  # the page checker reads the last click (OK)
    report = build_report(run.path)
    data = asyncio.run(_render(report, tmp_path / "loop-report.png"))
    assert "demo/ok" in data["table"] and "success 1" in data["table"]
    _check_steps(data, run.path)
    assert data["steps"][0]["raw"] == "not json at all"
    assert {"reset", "observe", "decide", "act", "settle"} <= set(data["bars"])
    html = report.read_text()
    assert "not JSON" in html and "type “hello”" in html  # the parse error and the typed-text label

"""The MiniWoB++ suite: registration, seeded resets, the lifted timer, reward reading proven by the DOM
oracle, wrong clicks, step verification, pages that never become ready, and zoom (conformance:
tests/envs/test_conformance.py).

One Chromium serves the module (a module-scoped event loop owns it); environments get it through
``device=``. The zoom test starts its own (zoom is the device pixel ratio).
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from devices.actions import Action, ActionKind, Point
from devices.web import PlaywrightDevice, WebConfig
from envs.miniwob.env import DEFAULT_MAX_STEPS
from envs.wrappers import TimeLimit
from envs.errors import EnvError
from agent.oracles import oracle_for
from envs.miniwob import SUPPORTED_BY_ORACLE, TASKS, MiniWobEnv, html_root
from envs.miniwob.env import EPISODE_MAX_TIME_MS
from envs.registry import all_specs, make
from tests.support.installed import need_module

REQUIRED_ORACLE_TASKS = {"click-button", "click-link", "click-test", "click-test-2", "click-dialog",
                         "click-button-sequence", "focus-text"}


@pytest.fixture(scope="module", autouse=True)
def miniwob_installed():
    """Every test here fails, saying what to install, when the miniwob package (scripts/setup.sh) is missing."""
    need_module("miniwob", "handeye[envs]")


@pytest.fixture(scope="module")
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="module")
def device(loop):
    dev = PlaywrightDevice(WebConfig(viewport_width=160, viewport_height=210))
    loop.run_until_complete(dev.start())
    yield dev
    loop.run_until_complete(dev.close())


@pytest.fixture
def run(loop):
    return loop.run_until_complete


def _centre_of(run, env: MiniWobEnv, selector: str) -> Point:
    x, y = run(env.device.evaluate("""(s) => { const r = document.querySelector(s).getBoundingClientRect();
        return [(r.left + r.right) / 2 / innerWidth, (r.top + r.bottom) / 2 / innerHeight]; }""", selector))
    return Point(x, y)


async def _solve(env: MiniWobEnv, seed: int) -> tuple[float, bool, dict]:
    policy = oracle_for(env)
    obs, info = await env.reset(seed=seed)
    reward, info_step = 0.0, {}
    for _ in range(DEFAULT_MAX_STEPS):
        decision = await policy.decide(info["instruction"], [], obs)
        verdicts = await env.verify([decision.action])
        assert verdicts is not None and verdicts[0].correct, (env.name, seed, verdicts)
        obs, reward, terminated, truncated, info_step = await env.step(decision.action)
        if terminated or truncated:
            return reward, terminated, info_step
    return reward, False, info_step


# -- registration, no browser --------------------------------------------------------------------
def test_registry_holds_every_shipped_task():
    shipped = sorted(p.stem for p in (html_root() / "miniwob").glob("*.html"))
    assert sorted(TASKS) == shipped
    specs = all_specs("miniwob")
    assert len(specs) == len(shipped) >= 120
    assert {s.name for s in specs} == {f"miniwob/{t}" for t in shipped}
    assert all(s.description for s in specs)
    assert REQUIRED_ORACLE_TASKS <= set(SUPPORTED_BY_ORACLE) <= set(TASKS)
    env = make("miniwob/click-test", max_steps=3)
    assert isinstance(env, TimeLimit) and isinstance(env.unwrapped, MiniWobEnv) and env.unwrapped.task == "click-test"
    assert env.max_steps == 3 and make("miniwob/click-test").max_steps == DEFAULT_MAX_STEPS


def test_missing_package_says_how_to_install(monkeypatch):
    import importlib.resources

    def missing(name):
        raise ModuleNotFoundError(f"No module named {name!r}")

    monkeypatch.setattr(importlib.resources, "files", missing)
    with pytest.raises(EnvError, match="pip install miniwob"):
        html_root()


# -- episodes ----------------------------------------------------------------------------------------
def test_reset_is_seeded_and_the_timer_is_lifted(run, device):
    env = MiniWobEnv("click-button", device=device)
    a = [run(env.reset(seed=s))[1]["instruction"] for s in (3, 4, 3)]
    assert a[0] == a[2] and a[0].startswith("Click on the")
    frames = [run(env.reset(seed=s))[0].frame for s in (7, 7)]
    assert (frames[0] == frames[1]).all()
    utterances = {run(env.reset(seed=s))[1]["instruction"] for s in range(8)}
    assert len(utterances) > 1
    state = run(env.state())
    assert state["max_time"] == EPISODE_MAX_TIME_MS and state["outcome"] is None and state["done"] is False
    # the START cover is hidden: the frame's top-left shows the yellow query, not the dark cover
    obs, info = run(env.reset(seed=1))
    assert info["task_area_css"] == [160, 210] and obs.frame.shape == (210, 160, 3)
    query = obs.frame[:50]
    assert ((query == (255, 255, 0)).all(axis=2)).mean() > 0.5
    assert run(env.device.evaluate("() => getComputedStyle(document.getElementById('sync-task-cover')).display")) == "none"
    run(env.close())


def test_oracle_solves_every_supported_task(run, device):
    for task in SUPPORTED_BY_ORACLE:
        env = MiniWobEnv(task, device=device)
        for seed in (0, 1):
            reward, terminated, info = run(_solve(env, seed))
            assert (reward, terminated) == (1.0, True), (task, seed, info)
            assert info["raw_reward"] == 1.0 and info["success"] is True
        run(env.close())
    assert oracle_for(MiniWobEnv("enter-text", device=device)) is None


def test_wrong_clicks_score_zero(run, device):
    env = MiniWobEnv("click-test-2", device=device)
    run(env.reset(seed=2))
    _, reward, terminated, truncated, info = run(env.step(Action(ActionKind.CLICK, point=_centre_of(run, env, "#subbtn2"))))
    assert (reward, terminated, truncated, info["raw_reward"]) == (0.0, True, False, -1.0)
    # the kept outcome wins over a restart that clears core.js's globals
    run(env.device.evaluate("() => core.startEpisodeReal()"))
    state = run(env.state())
    assert state["done"] is False and state["outcome"]["raw"] == -1
    with pytest.raises(EnvError, match="episode is over"):
        run(env.step(Action(ActionKind.WAIT, duration_s=0)))
    # a click on empty space decides nothing on click-button; the step budget truncates
    env = TimeLimit(MiniWobEnv("click-button", device=device), 2)
    run(env.reset(seed=0))
    blank = Action(ActionKind.CLICK, point=Point(0.97, 0.99))
    assert run(env.step(blank))[1:4] == (0.0, False, False)
    assert run(env.step(blank))[1:4] == (0.0, False, True)
    # finish before the page ends the episode is 0
    run(env.reset(seed=0))
    assert run(env.step(Action(ActionKind.FINISH)))[1:4] == (0.0, True, False)


def test_verify_marks_the_target_right_and_another_element_wrong(run, device):
    env = MiniWobEnv("click-test-2", device=device)
    run(env.reset(seed=5))
    target = run(env.target())
    right = Action(ActionKind.CLICK, point=Point(*target["point"]))
    wrong = Action(ActionKind.CLICK, point=_centre_of(run, env, "#subbtn2"))
    query = Action(ActionKind.CLICK, point=Point(0.5, 0.05))
    typed = Action(ActionKind.TYPE, point=Point(*target["point"]), text="x")
    verdicts = run(env.verify([right, wrong, query, typed]))
    assert [v.correct for v in verdicts] == [True, False, False, False]
    assert verdicts[0].reward == 1.0 and verdicts[1].reward == 0.0
    # click-button-sequence: ONE first, then TWO
    env = MiniWobEnv("click-button-sequence", device=device)
    run(env.reset(seed=0))
    one, two = (Action(ActionKind.CLICK, point=_centre_of(run, env, s)) for s in ("#subbtn", "#subbtn2"))
    assert [v.correct for v in run(env.verify([one, two]))] == [True, False]
    run(env.step(one))
    assert [v.correct for v in run(env.verify([one, two]))] == [False, True]
    # tasks without DOM ground truth
    env = MiniWobEnv("enter-text", device=device)
    run(env.reset(seed=0))
    assert run(env.verify([right])) is None


def test_page_that_never_becomes_ready(run, device, tmp_path: Path):
    real = html_root()
    for sub in ("core", "common"):  # copied: the page server serves no symlink that leads out of its folder
        shutil.copytree(real / sub, tmp_path / sub)
    (tmp_path / "miniwob").mkdir()
    page = (real / "miniwob" / "click-test.html").read_text()
    page = page.replace("var genProblem = function() {", "var genProblem = function() {\n  WOB_TASK_READY = false;")
    (tmp_path / "miniwob" / "never-ready.html").write_text(page)
    env = MiniWobEnv("never-ready", device=device, html_dir=tmp_path, ready_timeout_s=0.5)
    with pytest.raises(EnvError, match="never-ready.*never became ready"):
        run(env.reset(seed=0))
    run(env.close())
    with pytest.raises(EnvError, match="no MiniWoB.. task 'no-such-task'"):
        run(MiniWobEnv("no-such-task", device=device).reset(seed=0))
    (tmp_path / "miniwob" / "plain.html").write_text("<html><body>not a task</body></html>")
    with pytest.raises(EnvError, match="not a MiniWoB.. page"):
        run(MiniWobEnv("plain", device=device, html_dir=tmp_path).reset(seed=0))


def test_zoom_scales_the_frame_and_clicks_still_land(run):
    env = MiniWobEnv("click-test-2", zoom=1.5)
    try:
        obs, info = run(env.reset(seed=0))
        assert obs.frame.shape == (315, 240, 3) and info["zoom"] == 1.5
        for seed in (0, 1):
            reward, terminated, _ = run(_solve(env, seed))
            assert (reward, terminated) == (1.0, True)
    finally:
        run(env.close())

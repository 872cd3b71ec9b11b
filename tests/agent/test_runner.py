"""The episode runner on a real Chromium (a TaskEnv: a page, an instruction, an optional checker, as agent run
builds it): outcomes, retries, guard, dry run, secrets, crashes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from agent.guard import KindGuard
from agent.runner import RunOptions, run_episode
from agent.secrets import MASK, Secrets
from devices.actions import Action, ActionKind, Point
from devices.settle import SettleConfig
from devices.web import PlaywrightDevice, WebConfig
from envs.records import Outcome
from envs.task_env import TaskEnv
from envs.tasks import ClickTask
from envs.trajectory import RunWriter, read_episode
from envs.wrappers import DryRun, TimeLimit
from policy.scripted import ScriptedPolicy
from tests.conftest import kill_browsers

# Buttons at known CSS positions in an 800x600 viewport; the page records clicks like the demo page.
BUTTONS_HTML = """<!doctype html><html><body style="margin:0">
<button id="ok" style="position:absolute;left:100px;top:100px;width:200px;height:60px">OK</button>
<button id="no" style="position:absolute;left:500px;top:100px;width:200px;height:60px">No</button>
<input id="pw" type="password" style="position:absolute;left:100px;top:300px;width:300px;height:40px">
<input id="name" style="position:absolute;left:100px;top:400px;width:300px;height:40px">
<script>
window.handeye = {clicks: []};
for (const b of document.querySelectorAll('button')) b.addEventListener('click', () => {
  window.handeye.clicks.push(b.id); document.body.dataset.clicked = b.id; });
</script></body></html>"""

OK = Point(200 / 800, 130 / 600)
NO = Point(600 / 800, 130 / 600)
PW = Point(250 / 800, 320 / 600)
FAST_SETTLE = SettleConfig(min_s=0.0, deadline_s=1.0)


def _device(url: str) -> PlaywrightDevice:
    return PlaywrightDevice(WebConfig(viewport_width=800, viewport_height=600), FAST_SETTLE, url=url)


def _env(device, task="t", *, checker=None, max_steps=15, dry_run=False):
    env = TaskEnv(device, task, checker=checker)
    return TimeLimit(DryRun(env) if dry_run else env, max_steps)


async def _episode(env, policy, writer, **kwargs):
    """One episode; the caller owns the environment, so it closes it (and its browser) here."""
    try:
        return (await run_episode(env, policy, writer, **kwargs)).record
    finally:
        await env.close()


def _run(tmp_path: Path, url: str, script, *, checker=None, options=None, guard=None, secrets=None, task="t", device=None,
         max_steps=15, dry_run=False):
    run = RunWriter(tmp_path / "runs", config={"test": True})
    writer = run.episode(task=task)
    env = _env(device or _device(url), task, checker=checker, max_steps=max_steps, dry_run=dry_run)
    record = asyncio.run(_episode(env, ScriptedPolicy(script), writer, options=options or RunOptions(), guard=guard,
                                  secrets=secrets))
    return record, read_episode(writer.path)


@pytest.fixture
def page_url(site, pages_dir: Path) -> str:
    (pages_dir / "buttons.html").write_text(BUTTONS_HTML)
    return site.url("buttons.html")


OK_TASK = ClickTask("ok", "click OK", "buttons.html", "ok")


def test_success_is_verified_by_the_checker_and_every_step_is_recorded(tmp_path, page_url):
    record, episode = _run(tmp_path, page_url, [Action(ActionKind.CLICK, OK), Action(ActionKind.FINISH)],
                           checker=OK_TASK.check)
    assert record.outcome is Outcome.SUCCESS
    assert record.return_ == 1.0
    assert [s.index for s in episode.steps] == [0, 1]
    click, finish = episode.steps
    assert click.executed and click.action["kind"] == "click"
    assert click.target["id"] == "ok"
    # The element box reported by the device, normalized to the 800x600 frame.
    assert click.target_box == pytest.approx((100 / 800, 100 / 600, 300 / 800, 160 / 600), abs=1e-6)
    assert click.frame_size == (800, 600) and click.model_input_size == (800, 600)
    assert click.step_id == f"{record.run_id}/{record.episode_id}/0"
    assert not finish.executed and finish.reward == 1.0 and finish.verifier["clicked"] == "ok"
    # The stored frame is the observation the policy saw: it decodes to a real 800x600 screenshot.
    frame = episode.frame(click)
    assert frame.shape == (600, 800, 3) and frame.std() > 1
    assert set(record.timings) >= {"observe", "decide", "act", "settle", "record"}
    assert record.timings["observe"] > 0 and record.timings["act"] > 0


def test_wrong_click_is_a_failure(tmp_path, page_url):
    record, _ = _run(tmp_path, page_url, [Action(ActionKind.CLICK, NO), Action(ActionKind.FINISH)], checker=OK_TASK.check)
    assert record.outcome is Outcome.FAILURE
    assert record.return_ == 0.0
    assert record.verifier == {"success": False, "reward": 0.0, "expected": "ok", "clicked": "no", "clicks": ["no"]}


def test_finish_without_checker_is_claimed_with_answer(tmp_path, page_url):
    record, _ = _run(tmp_path, page_url, [Action(ActionKind.FINISH, text="done it")])
    assert record.outcome is Outcome.CLAIMED
    assert record.answer == "done it"


def test_unparseable_output_is_recorded_and_retried_never_executed(tmp_path, page_url):
    script = ['{"kind": "click", "point": [0.25', '{"kind": "teleport"}', json.dumps({"kind": "click", "point": [0.25, 0.2167]}),
              json.dumps({"kind": "finish"})]
    record, episode = _run(tmp_path, page_url, script, checker=OK_TASK.check)
    assert record.outcome is Outcome.SUCCESS
    bad1, bad2, click, _ = episode.steps
    assert bad1.action is None and "not JSON" in bad1.parse_error and not bad1.executed
    assert bad1.raw_output == script[0]
    assert "unknown action kind 'teleport'" in bad2.parse_error
    assert click.executed and click.target["id"] == "ok"


def test_too_many_parse_failures_abort(tmp_path, page_url):
    record, episode = _run(tmp_path, page_url, ["nope"] * 5, options=RunOptions(max_parse_retries=2))
    assert record.outcome is Outcome.ABORTED
    assert record.reason["type"] == "PolicyParseError"
    assert len(episode.steps) == 3  # two retries allowed, the third failure aborts


def test_step_budget_truncates(tmp_path, page_url):
    record, episode = _run(tmp_path, page_url, [Action(ActionKind.WAIT, duration_s=0)] * 10, max_steps=3)
    assert record.outcome is Outcome.TRUNCATED
    assert len(episode.steps) == 3 and all(s.executed for s in episode.steps)


def test_infeasible(tmp_path, page_url):
    record, _ = _run(tmp_path, page_url, [Action(ActionKind.INFEASIBLE, text="no such button")])
    assert record.outcome is Outcome.INFEASIBLE
    assert record.reason == {"type": "Infeasible", "message": "no such button"}


def test_dry_run_records_but_does_not_act(tmp_path, page_url):
    run = RunWriter(tmp_path / "runs", config={"test": True})
    writer = run.episode(task="t", dry_run=True)
    env = _env(_device(page_url), checker=OK_TASK.check, dry_run=True)

    async def main():
        try:
            record = (await run_episode(env, ScriptedPolicy([Action(ActionKind.CLICK, OK), Action(ActionKind.FINISH)]),
                                        writer)).record
            # The page, after the episode: the planned click was never performed.
            return record, await env.unwrapped.device.evaluate("window.handeye.clicks")
        finally:
            await env.close()

    record, clicks = asyncio.run(main())
    assert clicks == []
    # The plan is the outcome: the checker is not asked to judge a screen nothing was done to.
    assert record.outcome is Outcome.PLANNED and record.verifier is None and record.dry_run
    episode = read_episode(writer.path)
    click, finish = episode.steps
    assert not click.executed and click.guard["dry_run"] is True and click.action["kind"] == "click"
    assert finish.action["kind"] == "finish" and finish.info["env_info"] == {"planned": True}


def test_guard_refusal_is_recorded_and_the_policy_goes_on(tmp_path, page_url):
    guard = KindGuard(refuse=frozenset({ActionKind.CLICK}))
    record, episode = _run(tmp_path, page_url, [Action(ActionKind.CLICK, OK), Action(ActionKind.FINISH)],
                           checker=OK_TASK.check, guard=guard)
    assert record.outcome is Outcome.FAILURE
    assert episode.steps[0].guard["verdict"] == "refuse" and not episode.steps[0].executed


def test_unsupported_action_is_not_sent_to_the_device(tmp_path, page_url):
    record, episode = _run(tmp_path, page_url, [Action(ActionKind.HOME), Action(ActionKind.FINISH)])
    assert record.outcome is Outcome.CLAIMED
    assert episode.steps[0].error["type"] == "UnsupportedAction" and not episode.steps[0].executed


def test_password_text_is_masked_and_its_box_blurred(tmp_path, page_url):
    secrets = Secrets({"pw": "env:TEST_PW"}, environ={"TEST_PW": "hunter2-secret"})
    script = [
        Action(ActionKind.TYPE, PW, text="{{secret:pw}}"),  # from a secret: the placeholder is kept
        Action(ActionKind.TYPE, PW, text="typed-in-clear"),  # a literal password: masked
        Action(ActionKind.FINISH),
    ]
    device = _device(page_url)
    record, episode = _run(tmp_path, page_url, script, secrets=secrets, device=device)
    assert record.outcome is Outcome.CLAIMED
    first, second, last = episode.steps
    assert first.sensitive and first.action["text"] == "{{secret:pw}}"
    assert second.sensitive and second.action["text"] == MASK and "typed-in-clear" not in second.raw_output
    everything = "".join(p.read_text() for p in episode.path.glob("*.json*"))
    assert "hunter2-secret" not in everything and "typed-in-clear" not in everything
    # The frame after typing shows the password dots; stored, the field's box is one flat colour.
    frame = episode.frame(last)
    box = frame[302:338, 102:398]
    assert np.ptp(box.reshape(-1, 3), axis=0).max() == 0
    # ...while the clear text field next to it still has its border and background variation.
    assert np.ptp(frame[395:445, 95:405].reshape(-1, 3), axis=0).max() > 0


def test_browser_killed_mid_episode_keeps_finished_steps(tmp_path, page_url):
    class KillingPolicy(ScriptedPolicy):
        async def decide(self, task, history, observation, n=1):
            if self.position == 2:
                assert kill_browsers() > 0
                await asyncio.sleep(0.3)
            return await super().decide(task, history, observation, n)

    run = RunWriter(tmp_path / "runs", config={})
    writer = run.episode(task="t")
    policy = KillingPolicy([Action(ActionKind.CLICK, OK), Action(ActionKind.CLICK, NO), Action(ActionKind.CLICK, OK),
                            Action(ActionKind.FINISH)])
    record = asyncio.run(_episode(_env(_device(page_url)), policy, writer))
    assert record.outcome is Outcome.ABORTED
    assert record.reason["type"] == "DeviceDisconnected"
    assert "browser has gone away" in record.reason["message"]
    episode = read_episode(writer.path)
    assert [s.target["id"] for s in episode.steps[:2]] == ["ok", "no"]
    assert all((episode.path / s.frame_path).exists() for s in episode.steps)
    # The step in flight (decided, then the act failed) is recorded with its error.
    assert episode.steps[-1].error is None or episode.steps[-1].error["type"] == "DeviceDisconnected"


def test_unreachable_url_aborts_with_reason(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    record, episode = _run(tmp_path, f"http://127.0.0.1:{port}/", [Action(ActionKind.FINISH)])
    assert record.outcome is Outcome.ABORTED
    assert record.reason["type"] == "NavigationError"
    assert f"127.0.0.1:{port}" in record.reason["message"] and "ERR_CONNECTION_REFUSED" in record.reason["message"]
    assert episode.steps == ()


def test_cancellation_is_recorded_as_interrupted(tmp_path, page_url):
    run = RunWriter(tmp_path / "runs", config={})
    writer = run.episode(task="t")

    async def main():
        task = asyncio.create_task(
            _episode(_env(_device(page_url), max_steps=1000),
                     ScriptedPolicy([Action(ActionKind.WAIT, duration_s=0.05)] * 1000), writer)
        )
        while writer.num_steps < 3:
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    episode = read_episode(writer.path)
    assert episode.record.outcome is Outcome.INTERRUPTED
    assert len(episode.steps) >= 3 and not episode.truncated_tail


def test_a_stop_request_ends_the_episode_even_if_the_cancellation_was_swallowed(tmp_path, page_url):
    # The CLI's Ctrl-C handler cancels the episode and sets `stop`. Here only `stop` is set (as if a library had
    # swallowed the cancellation): the loop still ends at the next step boundary, recorded as interrupted.
    run = RunWriter(tmp_path / "runs", config={})
    writer = run.episode(task="t")

    async def main():
        stop = asyncio.Event()

        def on_step(step):
            if step.index == 2:
                stop.set()

        with pytest.raises(asyncio.CancelledError):
            await _episode(_env(_device(page_url), max_steps=50),
                           ScriptedPolicy([Action(ActionKind.WAIT, duration_s=0.01)] * 50), writer, on_step=on_step,
                           stop=stop)

    asyncio.run(main())
    episode = read_episode(writer.path)
    assert episode.record.outcome is Outcome.INTERRUPTED
    assert len(episode.steps) == 3 and not episode.truncated_tail


def test_a_key_the_device_lacks_is_recorded_and_the_episode_goes_on(tmp_path, page_url):
    record, episode = _run(tmp_path, page_url, [Action(ActionKind.KEY, keys=("recent",)), Action(ActionKind.CLICK, OK),
                                                Action(ActionKind.FINISH)], checker=OK_TASK.check)
    assert record.outcome is Outcome.SUCCESS
    first = episode.steps[0]
    assert not first.executed and first.error["type"] == "UnsupportedAction" and "phone key" in first.error["message"]


def test_guard_refusals_use_no_budget_and_too_many_in_a_row_abort(tmp_path, page_url):
    # One rule for every decision that cannot be executed (no parse, a kind the device lacks, refused by the guard):
    # it never reaches env.step, so it does not use the step budget, and max_parse_retries of them in a row are
    # retried; one more aborts the episode.
    guard = KindGuard(refuse=frozenset({ActionKind.CLICK}))
    record, episode = _run(tmp_path, page_url, [Action(ActionKind.CLICK, OK)] * 5, guard=guard, max_steps=2,
                           options=RunOptions(max_parse_retries=3))
    assert record.outcome is Outcome.ABORTED and record.reason["type"] == "GuardRefusal"
    assert record.reason["message"].startswith("4 actions in a row could not be executed; last: refused:")
    assert len(episode.steps) == 4  # twice the step budget: refusals did not use it
    assert all(s.guard["verdict"] == "refuse" and not s.executed for s in episode.steps)
    # An executed step in between starts the count again.
    script = [Action(ActionKind.CLICK, OK), Action(ActionKind.WAIT, duration_s=0), Action(ActionKind.CLICK, OK),
              Action(ActionKind.FINISH)]
    record, episode = _run(tmp_path, page_url, script, guard=guard, options=RunOptions(max_parse_retries=1))
    assert record.outcome is Outcome.CLAIMED and len(episode.steps) == 4


def test_a_bug_surfaces_after_the_finished_steps_and_the_outcome_are_on_disk(tmp_path, page_url):
    class Buggy(ScriptedPolicy):
        async def decide(self, task, history, observation, n=1):
            if self.position == 1:
                raise ZeroDivisionError("a bug in the policy")
            return await super().decide(task, history, observation, n)

    run = RunWriter(tmp_path / "runs", config={})
    writer = run.episode(task="t")
    with pytest.raises(ZeroDivisionError, match="a bug in the policy"):
        asyncio.run(_episode(_env(_device(page_url)), Buggy([Action(ActionKind.CLICK, OK)] * 3), writer))
    episode = read_episode(writer.path)
    assert episode.record.outcome is Outcome.ABORTED
    assert episode.record.reason == {"type": "ZeroDivisionError", "message": "a bug in the policy"}
    assert len(episode.steps) == 1 and episode.steps[0].executed and episode.steps[0].target["id"] == "ok"


def test_the_record_names_the_environment_device_policy_and_phases(tmp_path, page_url):
    record, episode = _run(tmp_path, page_url, [Action(ActionKind.CLICK, OK), Action(ActionKind.FINISH)],
                           checker=OK_TASK.check, task="click OK", max_steps=4)
    assert record.task == "click OK" and record.env["name"] == "task" and record.env["max_steps"] == 4
    assert record.device["kind"] == "web" and record.policy["name"] == "scripted"
    click = episode.steps[0]
    # env.step's own phases are split out of it: act, settle and the next observation
    assert {"decide", "verify", "guard", "act", "settle", "observe", "step", "record"} <= set(click.latency)
    assert click.info["env_reward"] == 0.0 and click.info["terminated"] is False and click.settled is True
    assert record.timings["reset"] > 0 and set(record.timings) >= {"act", "settle", "observe", "decide"}


# -- the safe defaults: the person, secrets everywhere ---------------------------------------------------------------
PAY_HTML = """<!doctype html><html><body style="margin:0">
<button id="pay" style="position:absolute;left:100px;top:100px;width:200px;height:60px">Pay now</button>
<button id="look" style="position:absolute;left:500px;top:100px;width:200px;height:60px">Look around</button>
<script>window.handeye = {clicks: []};
for (const b of document.querySelectorAll('button')) b.addEventListener('click', () => {
  window.handeye.clicks.push(b.id); document.body.dataset.clicked = b.id; });</script></body></html>"""


@pytest.fixture
def pay_url(site, pages_dir: Path) -> str:
    (pages_dir / "pay.html").write_text(PAY_HTML)
    return site.url("pay.html")


def _clicks(tmp_path, url, **kwargs):
    from agent.builders import build_guard
    from agent.config import load_config

    script = [Action(ActionKind.CLICK, OK), Action(ActionKind.FINISH)]  # OK's place on this page is "Pay now"
    run = RunWriter(tmp_path / "runs", config={})
    writer = run.episode(task="t")
    guard = build_guard(load_config(None, []))

    async def main():
        env = _env(_device(url))
        try:
            await run_episode(env, ScriptedPolicy(script), writer, guard=guard, **kwargs)
            return await env.device.evaluate("() => window.handeye.clicks")
        finally:
            await env.close()

    clicks = asyncio.run(main())
    return clicks, read_episode(writer.path)


def test_an_irreversible_click_is_refused_with_nobody_to_ask(tmp_path, pay_url):
    clicks, episode = _clicks(tmp_path, pay_url)
    assert clicks == []
    guard = episode.steps[0].guard
    assert guard["verdict"] == "refuse" and "'Pay now'" in guard["reason"] and "nobody is there" in guard["reason"]


def test_the_person_says_yes_or_no_and_yes_flag_says_yes(tmp_path, pay_url):
    from agent.person import CallbackPerson

    asked: list[str] = []

    def no(question):
        asked.append(question)
        return False

    clicks, episode = _clicks(tmp_path, pay_url, person=CallbackPerson(confirm=no))
    assert clicks == [] and "may not be undone" in asked[0] and episode.steps[0].guard["reason"].endswith("said no")
    clicks, episode = _clicks(tmp_path, pay_url, person=CallbackPerson(confirm=lambda q: True))
    assert clicks == ["pay"] and episode.steps[0].guard["reason"].endswith("confirmed by the user")
    clicks, episode = _clicks(tmp_path, pay_url, options=RunOptions(assume_yes=True))
    assert clicks == ["pay"] and "--yes" in episode.steps[0].guard["reason"]


def test_ask_user_hands_control_to_the_person(tmp_path, page_url):
    from agent.person import CallbackPerson

    class Asking(ScriptedPolicy):
        async def decide(self, task, history, observation, n=1):
            if self.position == 1:  # after the question: the answer is in the history
                assert history[-1].note == "the user answered: the OK one"
            return await super().decide(task, history, observation, n)

    script = [Action(ActionKind.ASK_USER, text="Which button?"), Action(ActionKind.CLICK, OK),
              Action(ActionKind.FINISH)]
    run = RunWriter(tmp_path / "runs", config={})
    writer = run.episode(task="t")
    person = CallbackPerson(answer=lambda q: "the OK one")
    record = asyncio.run(_episode(_env(_device(page_url), checker=OK_TASK.check), Asking(script), writer,
                                  person=person))
    assert record.outcome is Outcome.SUCCESS
    asked = read_episode(writer.path).steps[0]
    assert asked.action["kind"] == "ask_user" and asked.info["asked"] == "Which button?"
    assert asked.info["answer"] == "the OK one" and asked.executed
    # with nobody to answer, the agent cannot go on alone
    record, episode = _run(tmp_path, page_url, script)
    assert record.outcome is Outcome.INFEASIBLE and record.reason["type"] == "AskedUser" and len(episode.steps) == 1


def test_a_secret_never_leaves_memory_in_clear(tmp_path, page_url):
    # The model writes the value itself (thought, output, candidates), types it into a plain field through the
    # placeholder, and clicks that field (its text is the target's): every record, every frame after the typing
    # and every line the console got keep it out.
    secret = "hunter2-secret"
    secrets = Secrets({"pw": "env:TEST_PW"}, environ={"TEST_PW": secret})
    name = Point(250 / 800, 420 / 600)
    leaky = f'{{"kind": "click", "point": [{OK.x}, {OK.y}]}} because the password is {secret}'
    script = [Action(ActionKind.TYPE, name, text="{{secret:pw}}"), Action(ActionKind.CLICK, name),
              f'{{"kind": "teleport", "where": "{secret}"}}', Action(ActionKind.FINISH, text=f"typed {secret}")]
    seen: list[str] = []
    run = RunWriter(tmp_path / "runs", config={})
    writer = run.episode(task="t")

    class Leaky(ScriptedPolicy):
        async def decide(self, task, history, observation, n=1):
            d = await super().decide(task, history, observation, n)
            from dataclasses import replace
            return replace(d, info={"thought": leaky, "samples": [{"text": leaky}]})

    record = asyncio.run(_episode(_env(_device(page_url)), Leaky(script), writer, secrets=secrets,
                                  on_step=lambda s: seen.append(repr(s))))
    assert record.outcome is Outcome.CLAIMED
    episode = read_episode(writer.path)
    on_disk = "".join(p.read_text(encoding="utf-8") for p in episode.path.glob("*.json*"))
    assert secret not in on_disk and secret not in "".join(seen)
    typed, clicked, unparsed, _ = episode.steps
    assert typed.action["text"] == "{{secret:pw}}" and not typed.sensitive  # a plain field: not a password
    assert "{{secret:pw}}" in clicked.target["text"]  # the field's own text, redacted
    assert "{{secret:pw}}" in unparsed.raw_output and record.answer == "typed {{secret:pw}}"
    assert "{{secret:pw}}" in clicked.info["policy"]["thought"]
    # Frames from the step after the typing on show the field as one flat colour.
    field = episode.frame(clicked)[402:438, 102:398]
    assert np.ptp(field.reshape(-1, 3), axis=0).max() == 0
    before = episode.frame(typed)[395:445, 95:405]
    assert np.ptp(before.reshape(-1, 3), axis=0).max() > 0  # before the typing it was an ordinary field

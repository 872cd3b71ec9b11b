"""agent.eval: many episodes over generated environments, in parallel, scored with Wilson intervals."""

from __future__ import annotations

import asyncio
import json
import math

import pytest

from agent.eval import AbstentionStats, EvalResult, evaluate, format_abstention, format_table, wilson_interval
from agent.runner import RunOptions
from devices.actions import Action, ActionKind, Point
from agent.oracles import GeneratedOracle as OraclePolicy
from envs.records import Outcome
from envs.trajectory import iter_episodes, read_episode
from policy.base import Decision

ENVS = ["generated/click", "generated/form", "generated/absent"]


class Tracked:
    """Wraps a policy; counts decisions in flight across all episodes (and waits a little in each). The first
    decision also waits (up to 30 s) for a second one to be in flight: on a loaded machine one episode's reset can
    outlast all of the other's 0.15 s decisions, and concurrency is what is tested, not timing luck. A sequential
    evaluation still shows a peak of 1."""

    active = 0
    peak = 0
    waited = False

    def __init__(self, inner, delay: float = 0.15) -> None:
        self.inner, self.delay, self.name = inner, delay, "tracked"

    async def decide(self, task, history, observation, n=1):
        Tracked.active += 1
        Tracked.peak = max(Tracked.peak, Tracked.active)
        try:
            if not Tracked.waited:
                Tracked.waited = True
                deadline = asyncio.get_running_loop().time() + 30
                while Tracked.peak < 2 and asyncio.get_running_loop().time() < deadline:
                    await asyncio.sleep(0.02)
            await asyncio.sleep(self.delay)
            return await self.inner.decide(task, history, observation, n)
        finally:
            Tracked.active -= 1

    def describe(self):
        return {"policy": "tracked-oracle"}


class Corner:
    name = "corner"

    async def decide(self, task, history, observation, n=1):
        a = Action(ActionKind.CLICK, point=Point(0.0, 0.0))
        return Decision(a, raw_output='{"kind": "click", "point": [0, 0]}', candidates=(a,))

    def describe(self):
        return {"policy": self.name}


class Garbage:
    name = "garbage"

    async def decide(self, task, history, observation, n=1):
        return Decision(None, raw_output="I think I should click somewhere", parse_error="not JSON")

    def describe(self):
        return {"policy": self.name}


@pytest.fixture(scope="module")
def oracle_run(tmp_path_factory) -> tuple[EvalResult, dict[str, set[int]], list[str]]:
    Tracked.active = Tracked.peak = 0
    Tracked.waited = False
    envs_seen: dict[str, set[int]] = {}
    finished: list[str] = []

    def factory(env):
        envs_seen.setdefault(env.name, set()).add(id(env))
        return Tracked(OraclePolicy(env))

    result = asyncio.run(evaluate(ENVS, factory, episodes=2, parallel=2, runs_dir=tmp_path_factory.mktemp("runs"),
                                  seed=3, on_episode=lambda r: finished.append(r.env)))
    return result, envs_seen, finished


def test_oracle_solves_everything_with_the_wilson_interval(oracle_run):
    result, _, finished = oracle_run
    assert sorted(finished) == sorted(ENVS * 2)
    assert result.overall.episodes == 6 and result.overall.successes == 6 and result.overall.success_rate == 1.0
    # Wilson at p = 1: the lower bound is n / (n + z^2); by hand, 6 / (6 + 1.96^2) = 0.6097 and 2 / (2 + 1.96^2) = 0.3424.
    assert result.overall.ci95 == pytest.approx((0.6097, 1.0), abs=5e-4)
    assert result.envs["generated/click"].ci95 == pytest.approx((0.3424, 1.0), abs=5e-4)
    assert result.envs["generated/form"].mean_steps >= 2  # type (1 or 2 fields), then Submit
    assert result.envs["generated/click"].mean_steps == 1
    assert {"reset", "decide", "verify", "act", "settle", "record"} <= set(result.overall.latency)
    assert result.overall.latency["decide"] >= 0.15  # the tracked policy sleeps 0.15 s per decision
    table = format_table(result)
    assert [c.header for c in table.columns][:5] == ["env", "episodes", "success", "95% CI", "steps"]
    assert table.row_count == 4
    saved = json.loads((result.run_dir / "eval.json").read_text())
    assert saved["overall"]["successes"] == 6 and len(saved["episodes"]) == 6


def test_abstentions_are_counted_apart_from_success(oracle_run, tmp_path):
    result, _, _ = oracle_run
    # the oracle declares infeasible on both absent episodes and never elsewhere
    assert result.abstention["generated/absent"] == AbstentionStats("generated/absent", 2, 2, 0, 0)
    assert result.abstention["overall"] == AbstentionStats("overall", 2, 2, 4, 0)
    table = format_abstention(result)
    assert table is not None and table.row_count == 1  # only the environment with an absent target or an abstention
    saved = json.loads((result.run_dir / "eval.json").read_text())
    assert saved["abstention"]["generated/absent"]["abstained_correctly"] == 2

    class Shy:  # abstains everywhere: right on absent screens, wrong on the others
        name = "shy"

        async def decide(self, task, history, observation, n=1):
            return Decision(Action(ActionKind.ASK_USER, text="where is it?"))

        def describe(self):
            return {"policy": self.name}

    shy = asyncio.run(evaluate(["generated/click", "generated/absent"], lambda env: Shy(), episodes=1,
                               runs_dir=tmp_path))
    # asking with nobody there ends the episode unjudged (not a success) but is an abstention all the same
    assert shy.overall.successes == 0
    assert shy.abstention["generated/absent"] == AbstentionStats("generated/absent", 1, 1, 0, 0)
    assert shy.abstention["generated/click"] == AbstentionStats("generated/click", 0, 0, 1, 1)


def test_wilson_interval_by_hand():
    # 3 of 10, z = 1.96: centre (0.3 + 0.19208) / 1.38416, half 1.96 * sqrt(0.021 + 0.0096040) / 1.38416
    lo, hi = wilson_interval(3, 10)
    centre, half = 0.49208 / 1.384146, 1.959964 * math.sqrt(0.021 + 0.00960375) / 1.384146
    assert (lo, hi) == pytest.approx((centre - half, centre + half), abs=1e-4)
    assert (lo, hi) == pytest.approx((0.1078, 0.6032), abs=1e-3)
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_parallel_runs_episodes_concurrently_on_separate_reused_envs(oracle_run):
    result, envs_seen, _ = oracle_run
    assert Tracked.peak == 2  # two episodes deciding at once, never more
    # Up to `parallel` instances per name, created on demand and reused (6 episodes, at most 2 envs each).
    assert all(1 <= len(ids) <= 2 for ids in envs_seen.values()) and set(envs_seen) == set(ENVS)
    # Two envs side by side: some episodes overlapped in time.
    spans = sorted((e.record.started_at, e.record.ended_at) for e in result.episodes)
    assert any(b[0] < a[1] for a, b in zip(spans, spans[1:]))


def test_trajectories_hold_step_rewards_from_verify(oracle_run):
    result, _, _ = oracle_run
    episodes = list(iter_episodes(result.run_dir))
    assert len(episodes) == 6
    for ep in episodes:
        again = read_episode(ep.path)
        assert again.record.outcome is Outcome.SUCCESS and again.record.return_ == 1.0
        assert again.record.env["name"] in ENVS and again.record.task
        assert again.record.num_steps == len(again.steps) >= 1
        for step in again.steps:
            assert step.reward == 1.0 and step.verifier["correct"] is True
            assert len(step.verifier["verdicts"]) == 1 + len(step.candidates)
            assert (ep.path / step.frame_path).exists() and step.raw_output and step.action is not None
            assert {"decide", "verify", "step"} <= set(step.latency)
        assert again.steps[-1].info["terminated"] is True
    seeds = sorted((e.record.env["name"], e.record.env["seed"]) for e in episodes)
    assert seeds == sorted((n, s) for n in ENVS for s in (3, 4))


def test_a_policy_clicking_the_corner_scores_zero(tmp_path):
    result = asyncio.run(evaluate(["generated/click", "generated/form"], lambda env: Corner(), episodes=1, parallel=2,
                                  runs_dir=tmp_path, max_steps=2))
    assert result.overall.successes == 0 and result.overall.success_rate == 0.0
    assert result.overall.ci95[0] == 0.0 and result.overall.ci95[1] == pytest.approx(0.6576, abs=5e-4)  # 2 of 2 failed
    for ep in iter_episodes(result.run_dir):
        assert ep.record.outcome in (Outcome.FAILURE, Outcome.TRUNCATED)
        assert ep.steps and all(s.reward == 0.0 and s.verifier["correct"] is False and s.executed for s in ep.steps)
        assert len(ep.steps) <= 2


def test_unparseable_outputs_are_recorded_not_executed_and_bounded_by_the_parse_retries(tmp_path):
    # The same rule as agent run (one runner): outputs that do not parse never reach env.step, so they do not use the
    # step budget; max_parse_retries of them in a row are retried, one more aborts the episode.
    made = []

    def factory(env):
        made.append(env)
        return Garbage()

    result = asyncio.run(evaluate(["generated/click"], factory, episodes=1, runs_dir=tmp_path,
                                  options=RunOptions(max_parse_retries=4)))
    (ep,) = iter_episodes(result.run_dir)
    assert ep.record.outcome is Outcome.ABORTED and ep.record.reason["type"] == "PolicyParseError"
    assert ep.record.reason["message"].startswith("5 outputs in a row did not parse")
    assert len(ep.steps) == 5  # more than generated/click's budget of 3: they did not use it
    for step in ep.steps:
        assert step.action is None and step.parse_error == "not JSON" and not step.executed
        assert step.raw_output == "I think I should click somewhere" and step.reward is None
        assert (ep.path / step.frame_path).exists()
    assert made[0].elapsed_steps == 0  # the env never stepped
    assert result.overall.successes == 0


def test_an_env_error_aborts_one_episode_and_the_others_go_on(tmp_path):
    class Saboteur(OraclePolicy):
        async def decide(self, task, history, observation, n=1):
            if self.truth.screen is not None and self.truth.screen.seed == 1:
                await self.env.device.close()  # the device dies under the env
            return await super().decide(task, history, observation, n)

    result = asyncio.run(evaluate(["generated/click"], Saboteur, episodes=3, parallel=1, runs_dir=tmp_path))
    outcomes = [e.record.outcome for e in result.episodes]
    assert outcomes == [Outcome.SUCCESS, Outcome.ABORTED, Outcome.SUCCESS]
    aborted = result.episodes[1].record
    assert aborted.reason["type"] and aborted.reason["message"]
    assert result.envs["generated/click"].successes == 2

"""agent train --online at a tiny scale: two actors, each with its own Chromium, drive generated screens with the
tiny random Qwen2.5-VL while the learner updates a LoRA adapter; every actor switches to each new version between
steps (visible in the trajectories), a browser that goes away is replaced while the other actor goes on, a corrupt
adapter is refused, a learner error stops the run with a checkpoint, and a stopped run resumes where it was. Full
fine-tuning's sessions are in test_online_full.py."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import time
from pathlib import Path

import pytest

from agent.config import load_train_config
from agent.online import AdapterFollower, OnlineConfig, OnlineError, OnlineSession, TaskSampler, VersionClock
from envs.records import Outcome
from envs.trajectory import iter_episodes
from tests.conftest import REPO, descendants
from train.metrics import read_metrics
from train.config import TrainModelConfig
from train.step_rewards import StepRule

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def config(run_dir: Path, *more: str):
    return load_train_config(None, [
        'model.id="tiny"', f'train.run_dir="{run_dir}"', "data.think=false", "rl.group_size=3",
        "rl.batch_prompts=2", "rl.max_new_tokens=32", 'model.lora_targets=["q_proj", "v_proj", "lm_head"]',
        "rl.lr=0.02", "log.tensorboard=false", "eval.every=0", "data.seeds=50", *more])


class ForceFirstAnswer:
    """Forces the first answer of each request to a parsable click at the screen's centre and leaves the others to
    the random model (noise that does not parse), so that groups have a reward spread to learn from."""

    def __init__(self, tokenizer) -> None:
        from policy.backends.hf import ForceTextLogitsProcessor

        self.inner = ForceTextLogitsProcessor(tokenizer, '[{"point_2d": [140, 84]}]')

    def __call__(self, input_ids, scores):
        scores = scores.clone()
        scores[:1] = self.inner(input_ids[:1], scores[:1])
        return scores


def session_for(cfg, settings: OnlineConfig, **kw) -> OnlineSession:
    holder: list[OnlineSession] = []
    session = OnlineSession(cfg, settings, logits_processor_factory=lambda req: ForceFirstAnswer(
        holder[0].backend.tokenizer), **kw)
    holder.append(session)
    return session


def online(**kw) -> OnlineConfig:
    return OnlineConfig(**{"env": "generated/click", "actors": 2, "progress_every_s": 1000.0, **kw})


async def until(condition, timeout: float = 90.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not condition():
        if loop.time() > end:
            raise AssertionError("the condition was not reached in time")
        await asyncio.sleep(0.05)


def versions(episode) -> list[int]:
    return [int(s.info["policy"]["adapter_version"].split("@")[1]) for s in episode.steps if "policy" in s.info]


def chromium_children() -> list[int]:
    out = []
    for pid in descendants(os.getpid()):
        try:
            if "chrom" in Path(f"/proc/{pid}/comm").read_text():
                out.append(pid)
        except OSError:
            pass
    return out


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """A session that runs until actor-0's browser died, was replaced, and the learner made three updates; then
    it is stopped (as Ctrl-C does) and leaves its run folder."""
    run = tmp_path_factory.mktemp("online") / "run"
    cfg = config(run, "train.steps=100", "checkpoint.every=2", "curriculum.enabled=true",
                 "curriculum.hard_fraction=0.5")
    session = session_for(cfg, online(max_policy_lag=2, max_restarts=2, wire=True))
    crash: dict = {}

    async def scenario():
        task = asyncio.create_task(session.run())
        await until(lambda: session.actors and session.actors[0].decisions >= 1 and session.actors[0].device)
        a0, a1 = session.actors
        crash["at"], a1_episodes = time.time(), a1.episodes
        await a0.device._browser.close()  # the browser goes away under the actor
        await until(lambda: a0.restarts >= 1 and session.follower.current.step >= 1)
        marks = [a.decisions for a in session.actors]  # then both act (recorded) with a version after v0
        await until(lambda: all(a.decisions >= m + 2 for a, m in zip(session.actors, marks))
                    and a1.episodes > a1_episodes and session.trainer.step >= 3)
        session.request_stop("test")
        return await task

    result = asyncio.run(scenario())
    return run, result, session, crash["at"]


def test_actors_switch_adapter_versions_between_steps_and_the_run_folder_holds_everything(first_run):
    run, result, session, _ = first_run
    assert result.stopped_by == "test" and result.updates >= 3
    assert result.checkpoint is not None and result.checkpoint.name == f"step-{result.updates:06d}"
    episodes = list(iter_episodes(run))
    by_actor: dict[str, list[int]] = {}
    for ep in episodes:
        by_actor.setdefault(ep.record.env["actor"], []).extend(versions(ep))
    for actor, seen in by_actor.items():  # every actor switched to newer versions between steps, never back
        assert seen == sorted(seen) and seen[-1] > seen[0], (actor, seen)
    assert min(min(seen) for seen in by_actor.values()) == 0  # the run started with v0
    # each step's samples were recorded with the version that produced them
    step = next(s for ep in episodes for s in ep.steps if "policy" in s.info)
    assert len(step.info["policy"]["samples"]) == 3 and len(step.info["policy"]["sample_rewards"]) == 3
    # "vN written" -> "every actor acting with vN", measured for the versions both actors reached
    # (a version superseded before any actor asked for it is never loaded: the actors went on to a newer one)
    rows = [json.loads(line) for line in (run / "adapters.jsonl").read_text().splitlines()]
    loaded = [r for r in rows if r["load_delay_s"] is not None]
    assert all(r["propagation_s"] >= r["load_delay_s"] >= 0 for r in loaded)
    assert any(r["step"] >= 1 for r in loaded)
    # the learner's metrics, checkpoints, curves, the per-episode curve and the report
    metrics = read_metrics(run / "metrics.jsonl")
    assert [m["step"] for m in metrics] == list(range(1, result.updates + 1))
    assert all("online/episodes" in m and "online/stale_dropped" in m for m in metrics)
    assert max(m["online/actors_alive"] for m in metrics) == 2
    assert all(m["train/samples"] >= 2 for m in metrics)
    for name in ("report.html", "curves.png", "online_curve.png", "online.json", "online_summary.json", "run.json"):
        assert (run / name).is_file(), name
    assert len(list((run / "adapters").glob("v*"))) <= session.online.keep_adapters
    curve = [json.loads(line) for line in (run / "online.jsonl").read_text().splitlines()]
    assert len(curve) == result.episodes and curve[-1]["t"] >= curve[0]["t"]
    assert result.stale_dropped >= 0 and result.samples > 0
    assert not chromium_children()  # every device was closed


def test_an_actor_whose_browser_dies_is_restarted_while_the_other_goes_on(first_run):
    run, result, _, crash_at = first_run
    episodes = sorted(iter_episodes(run), key=lambda e: e.record.started_at)
    a0 = [e for e in episodes if e.record.env["actor"] == "actor-0"]
    a1 = [e for e in episodes if e.record.env["actor"] == "actor-1"]
    aborted = [e for e in a0 if e.record.outcome is Outcome.ABORTED]
    assert aborted and all(e.record.reason["type"] for e in aborted)
    after = [e for e in a0 if e.record.started_at > aborted[-1].record.ended_at]
    assert after and any(versions(e) for e in after)  # back at work with a new browser
    assert result.restarts == len(aborted) and result.dropped_actors == []  # each failure: a restart
    assert not any(e.record.outcome is Outcome.ABORTED for e in a1)
    assert any(e.record.ended_at > crash_at for e in a1 if e.record.outcome is not Outcome.INTERRUPTED)


def test_resume_continues_from_the_checkpoint_with_the_same_curriculum(first_run):
    run, first, _, _ = first_run
    done = first.updates
    state_before = json.loads((run / "checkpoints" / f"step-{done:06d}" / "state.json").read_text())["trainer"]
    n_before = len(list(iter_episodes(run)))
    cfg = config(run, f"train.steps={done + 2}", "checkpoint.every=2", "curriculum.enabled=true",
                 "curriculum.hard_fraction=0.5")
    result = asyncio.run(session_for(cfg, online(max_policy_lag=2), resume=True).run())
    assert result.stopped_by == "learner-done" and result.updates == done + 2
    metrics = read_metrics(run / "metrics.jsonl")
    assert [m["step"] for m in metrics] == list(range(1, done + 3))
    episodes = sorted(iter_episodes(run), key=lambda e: e.record.episode_id)
    new = episodes[n_before:]
    assert new and all(int(e.record.episode_id[2:]) >= n_before for e in new)
    assert min(v for e in new for v in versions(e)) == done  # the resumed run starts from the checkpoint's version
    state_after = json.loads((run / "checkpoints" / f"step-{done + 2:06d}" / "state.json").read_text())["trainer"]
    before, after = state_before["curriculum"], state_after["curriculum"]
    assert before["observations"] > 0 and after["observations"] > before["observations"]
    assert all(after["seen"][k] >= v for k, v in before["seen"].items())  # it remembered, not started over
    pos = lambda d: d["epoch"] * 50 + d["pos"]  # noqa: E731
    assert pos(state_after["data"]) > pos(state_before["data"])  # the task stream went on, not from the start
    assert len(json.loads((run / "online.json").read_text())["sessions"]) == 2


def test_a_learner_error_stops_the_run_with_a_checkpoint_and_a_clear_message(tmp_path, monkeypatch):
    from train.learner import Learner

    real_step, calls = Learner.step, []

    def failing_step(self, groups):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("CUDA out of memory (simulated)")
        return real_step(self, groups)

    monkeypatch.setattr(Learner, "step", failing_step)
    run = tmp_path / "run"
    session = session_for(config(run, "train.steps=5", "checkpoint.every=0"), online(actors=1))
    with pytest.raises(OnlineError) as info:
        asyncio.run(session.run())
    message = str(info.value)
    assert "learner failed at update 2" in message and "simulated" in message and "--resume" in message
    assert (run / "checkpoints" / "step-000001" / "COMPLETE").is_file()  # written after the error
    assert session.result.stopped_by == "learner-error"
    assert not chromium_children()


def test_a_corrupt_adapter_version_is_refused_and_the_actors_keep_the_last_good_one(tmp_path):
    from policy.backends.hf import TransformersBackend
    from policy.presets import preset_for
    from policy.tiny import build_tiny_qwen25vl
    from train.adapters import AdapterStore
    from train.learner import Learner
    from train.transport import InProcessTransport

    model = build_tiny_qwen25vl(tmp_path / "model")
    preset = preset_for("tiny-qwen", "infigui-g1", min_pixels=4 * 28 * 28, max_pixels=16 * 28 * 28)
    learner = Learner(TransformersBackend(model, preset=preset), model=TrainModelConfig(lora_targets=("q_proj", "v_proj")))
    actors = TransformersBackend(model, preset=preset)
    store, transport = AdapterStore(tmp_path / "adapters"), InProcessTransport()
    follower = AdapterFollower(actors, transport, VersionClock(tmp_path / "adapters.jsonl"), root=store.root)

    async def go():
        transport.announce(store.publish(learner))
        await follower.sync()
        assert actors.adapter_version == "learner@0"
        learner.steps = 1
        bad = store.publish(learner)
        weights = Path(bad.path) / "adapter_model.safetensors"
        weights.write_bytes(b"\x00" * 16 + weights.read_bytes()[16:])
        transport.announce(bad)
        await follower.sync()
        await follower.sync()  # asked again between the next steps: not retried
        assert actors.adapter_version == "learner@0" and list(follower.refused) == [f"1:{bad.sha256}"]
        assert "corrupt" in follower.refused[f"1:{bad.sha256}"]
        learner.steps = 2
        transport.announce(store.publish(learner))
        await follower.sync()
        assert actors.adapter_version == "learner@2"

    asyncio.run(go())


def test_the_task_stream_resumes_where_it_was():
    a = TaskSampler("generated/click", seeds=7, seed=3)
    first = [d.seed for d in a.next_prompts(10)]
    assert sorted(first[:7]) == list(range(7))  # every seed once per epoch
    state = a.state_dict()
    b = TaskSampler("generated/click", seeds=7, seed=3)
    b.load_state_dict(json.loads(json.dumps(state)))
    assert [d.seed for d in b.next_prompts(5)] == [d.seed for d in a.next_prompts(5)]
    assert [d.seed for d in a.prompts_for(["generated/click:4", "generated/form:4", "generated/click:99"])] == [4]
    with pytest.raises(OnlineError, match="same env"):
        TaskSampler("generated/form", seeds=7).load_state_dict(state)


def test_bad_settings_are_refused_before_anything_starts(tmp_path, capsys):
    from agent.cli import main

    OnlineSession(config(tmp_path, 'model.finetune="full"'), online())  # full weights too (test_online_full.py)
    with pytest.raises(OnlineError, match="runs on a web device"):
        OnlineSession(config(tmp_path), online(device_kind="android"))
    with pytest.raises(OnlineError, match="did you mean"):
        OnlineSession(config(tmp_path), online(env="generated/clik"))
    assert main(["train", "--env", "generated/click"]) == 2
    assert "only apply to online sessions" in "".join(capsys.readouterr())
    assert main(["train", "--online"]) == 2
    assert "needs the environment the actors run: --env ENV" in "".join(capsys.readouterr())


def test_saved_settings_read_back_into_the_same_config(tmp_path):
    from agent.online import config_overrides

    cfg = config(tmp_path, 'model.lora_targets=["q_proj", "v_proj"]', "rl.lr=3e-05", 'train.resume="auto"',
                 "curriculum.enabled=true")
    assert load_train_config(None, config_overrides(cfg)) == cfg


def test_a_new_session_that_fails_before_its_first_update_leaves_no_folder(tmp_path, monkeypatch):
    from train.learner import Learner

    def failing_step(self, groups):
        raise RuntimeError("CUDA out of memory (simulated)")

    monkeypatch.setattr(Learner, "step", failing_step)
    run = tmp_path / "run"
    session = session_for(config(run, "train.steps=5", "checkpoint.every=0"), online(actors=1))
    with pytest.raises(OnlineError) as info:
        asyncio.run(session.run())
    assert "before the first update" in str(info.value) and "start again" in str(info.value)
    assert not run.exists()  # nothing to resume, so nothing to refuse the next start
    assert not chromium_children()


def test_the_command_line_leaves_nothing_behind_on_bad_settings(tmp_path, monkeypatch, capsys):
    """An empty model.id is bad input (exit 2) found before any folder exists; a model that cannot load stops the
    session (exit 1) and the half-made folder is removed, so the same command can simply be run again."""
    from agent.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["train", "--online", "--env", "generated/click", "--config", str(REPO / "configs" / "train.toml")]) == 2
    assert "model.id is empty" in capsys.readouterr().out and not (tmp_path / "runs").exists()
    bad = ["train", "--online", "--env", "generated/click", "--parallel", "1", "--set", 'model.id="no/such-model"',
           "--set", 'model.format="infigui-g1"', "--set", "train.steps=1"]
    assert main(bad) == 1
    assert "online session stopped" in capsys.readouterr().err
    assert list((tmp_path / "runs").iterdir()) == []
    assert main(["train", "--online", "--resume"]) == 2
    assert "no runs/online-* folder" in capsys.readouterr().out


@pytest.mark.slow
def test_a_resumed_session_without_a_checkpoint_says_it_starts_from_the_base_model(tmp_path):
    run, lines = tmp_path / "run", []
    # The random model's groups all score the same: the session stops on its wall-time limit before any update.
    first = asyncio.run(OnlineSession(config(run, "train.steps=5"), online(actors=1, max_wall_s=2.0)).run())
    assert first.updates == 0 and first.stopped_by == "max-wall" and (run / "online.json").is_file()
    again = OnlineSession(config(run, "train.steps=5"), online(actors=1, max_wall_s=1.0), resume=True,
                          progress=lines.append)
    asyncio.run(again.run())
    assert any("holds no checkpoint yet" in line and "version 0" in line for line in lines), lines


def score_infigui_answers(samples, rule: StepRule = StepRule.AEPO, left_is_right: bool = False
                          ) -> list[tuple[float, dict]]:
    """The online step reward of ``samples`` (InfiGUI-G1 no_think answers to a 224 px screen) through
    ``ActorPolicy._score`` under the session's ``rule``, with a step verifier that finds every action wrong, or with
    ``left_is_right`` every action in the screen's left half right."""
    from types import SimpleNamespace

    from agent.online.actors import ActorPolicy
    from envs.base import StepVerdict
    from policy.backends.base import Generation
    from policy.formats.infigui import InfiGuiG1Format
    from policy.presets import preset_for

    class Env:
        async def verify(self, actions):
            return [StepVerdict(ok, float(ok), "") for ok in (left_is_right and a.point.x < 0.5 for a in actions)]

    preset = preset_for("tiny-qwen", "infigui-g1", variant="no_think")
    policy = object.__new__(ActorPolicy)
    policy.env = Env()
    policy.ctx = SimpleNamespace(policy=SimpleNamespace(format=InfiGuiG1Format(), preset=preset),
                                 settings=SimpleNamespace(env="test", reward=rule), fatal=None)
    return asyncio.run(policy._score(Generation(tuple(samples)), preset.space((224, 224)), ()))


def test_an_answer_cut_off_at_the_token_cap_scores_like_one_that_does_not_parse():
    """An answer that hit the token cap did not end: as a reward, reading what it holds would pay for answers that
    never end. Scored: the same text is -1 when it hit the cap and an ordinary miss (0) when the model ended it."""
    from policy.backends.base import Sample
    from train.step_rewards import cut_off

    text = '[{"point_2d": [14, 14]}]'  # well formed: only the cap decides
    ended, capped = Sample(text=text, finish_reason="stop"), Sample(text=text, finish_reason="length")
    assert (cut_off(ended), cut_off(capped), cut_off(Sample(text=text))) == (False, True, False)
    rewards = score_infigui_answers([ended, capped])
    assert [r for r, _ in rewards] == [0.0, -1.0]
    assert rewards[1][1]["format"] == 0.0 and rewards[0][1]["answers"] == 1.0


def test_a_malformed_infigui_answer_scores_minus_one_though_the_run_time_parser_reads_it():
    """The run-time parser reads the points of a list with broken JSON (right for acting); the reward takes the
    released reward parser's rule (the format's ``strict_parse``), so the same ended answer scores -1, and a
    well-formed miss scores 0."""
    from policy.backends.base import Sample
    from policy.errors import FormatParseError
    from policy.formats import get_format
    from policy.presets import preset_for

    preset = preset_for("tiny-qwen", "infigui-g1", variant="no_think")
    space, fmt = preset.space((224, 224)), get_format("infigui-g1")
    broken, fine = '[{"point_2d": [14, 14]}, {"point_2d": [84, 14]}, {', '[{"point_2d": [14, 14]}]'
    assert len(fmt.parse(broken, space, preset).actions) == 2  # the run-time parser reads the complete items
    with pytest.raises(FormatParseError, match="never closed"):
        fmt.strict_parse(broken, space, preset)
    assert fmt.strict_parse(fine, space, preset).actions == fmt.parse(fine, space, preset).actions
    rewards = score_infigui_answers([Sample(text=t, finish_reason="stop") for t in (broken, fine)])
    assert [r for r, _ in rewards] == [-1.0, 0.0]


def test_the_guir1_step_reward_is_gui_r1s_weighting_of_the_verifiers_verdict():
    """data.reward guir1 online through the actor's scoring: 0.2 x format (one action) + 0.8 x the first action
    right, worked by hand, against AEPO's reward of the same answers (the rules alone are checked in
    tests/train/test_step_rewards.py).
    The rule comes from the reward registry; a reward without an online form is an OnlineError that says why."""
    from agent.online.actors import step_rule
    from policy.backends.base import Sample

    assert [step_rule(r) for r in ("aepo", "aepo_paper", "aepo_no_collinear", "guir1", "guir1_paper")] == [
        StepRule.AEPO, StepRule.AEPO, StepRule.AEPO_NO_COLLINEAR, StepRule.GUIR1, StepRule.GUIR1]
    with pytest.raises(OnlineError, match="data.reward='distance' cannot score online answers: the step verifier"):
        step_rule("distance")
    with pytest.raises(OnlineError, match="unknown reward 'aepoo'.*did you mean 'aepo'"):
        step_rule("aepoo")

    left, right = '{"point_2d": [14, 14]}', '{"point_2d": [200, 14]}'
    texts = [f"[{left}]", f"[{right}]", f"[{left}, {right}]", f"[{right}, {left}]", f"[{left}, {{"]
    samples = [Sample(text=t, finish_reason="stop") for t in texts] + [Sample(text=f"[{left}]", finish_reason="length")]
    guir1 = [r for r, _ in score_infigui_answers(samples, StepRule.GUIR1, left_is_right=True)]
    assert guir1 == pytest.approx([1.0, 0.2, 0.8, 0.0, 0.0, 0.0])
    aepo = [r for r, _ in score_infigui_answers(samples, StepRule.AEPO, left_is_right=True)]
    assert aepo == pytest.approx([2.0, 0.0, 1 + 1 / 2 ** 0.5, 1.5, -1.0, -1.0])  # 1 + 1/sqrt(N k)


def test_the_learners_trainer_holds_the_configured_reward_never_a_stand_in(tmp_path):
    """The actors score the samples; the trainer still holds data.reward's offline form (the registry's), so a prompt
    it would score gets that reward, and one it cannot score is a counted failure, not a silent 0."""
    from train.curriculum import FAILED_PART
    from train.data import RewardAdapter
    from train.samples import RolloutPrompt

    session = OnlineSession(config(tmp_path / "run", 'data.reward="guir1"'), online(actors=1))
    session._setup()
    reward = session.trainer.reward_fn
    assert isinstance(reward, RewardAdapter) and reward.name == "guir1"
    target = {"instruction": "x", "box": (10.0, 10.0, 50.0, 30.0), "point": None, "action": "click", "text": None}
    right = "<think>t</think> <answer>[{'action': 'click', 'point': [20, 20], 'input_text': 'no input text'}]</answer>"
    assert reward(RolloutPrompt([], None, (64, 64), target, {"id": "p"}), right).total == pytest.approx(1.0)
    task = reward(RolloutPrompt([], None, (64, 64), None, {"id": "task"}), right)  # an online task has no target
    assert task.parts[FAILED_PART] == 1.0 and reward.failures == 1


def test_a_reward_without_an_online_form_is_refused_before_anything_starts(tmp_path):
    with pytest.raises(OnlineError, match="use one of aepo, aepo_paper, aepo_no_collinear, guir1, guir1_paper"):
        OnlineSession(config(tmp_path / "run", 'data.reward="distance"'), online())
    assert not (tmp_path / "run").exists()
    session = OnlineSession(config(tmp_path / "ok", 'data.reward="guir1"'), online())
    assert session.step_rule is StepRule.GUIR1


def test_a_session_warns_of_a_lora_rate_and_records_its_actors_prompt(tmp_path, caplog):
    """agent train --online and agent learner build their learner where agent train does (train.build): a LoRA
    session at a full-weight learning rate says so at start. The trained weights' handeye.json records the prompt
    the actors used, their screen's: Qwen2.5-VL's mobile_use on phones, local actors or remote ones."""
    import logging

    phones = online(actors=1, device_kind="android", serials=("emulator-5554",), env="android/wifi")
    for remote in (False, True):
        caplog.clear()
        run = tmp_path / f"run-{remote}"
        session = OnlineSession(config(run, "rl.lr=1e-6", 'model.format="qwen2.5-vl"'),
                                dataclasses.replace(phones, remote_actors=remote))
        with caplog.at_level(logging.WARNING, logger="train.build"):
            session._setup()
        warned = [r.getMessage() for r in caplog.records if r.name == "train.build"]
        assert len(warned) == 1 and warned[0].startswith("rl.lr = 1e-06 is a full-weight learning rate")
        assert session.trainer.prompt_preset.variant == "mobile_use"
        assert session.trainer.learner.lr == 1e-6  # warned, not changed: the rate given is the rate used
        if not remote:
            assert session.model_policy.preset.variant == "mobile_use"

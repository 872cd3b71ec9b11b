"""Success replay in online sessions: a recorded success of a task the policy keeps failing joins that task's groups
in the learner's feed (with ``online.demo_share`` on), as a positive sample without behaviour log-probs; with the
share at 0 the feed is what it was."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from agent.online.context import Counters, LearnerContext
from agent.online.demos import DEMO_EPISODE_REWARD, DEMO_STEP_REWARD, DemoReplay, task_keys
from agent.online.learner import LearnerLoop
from agent.online.settings import OnlineConfig
from devices.actions import Action, ActionKind, Point
from devices.base import Observation
from envs.records import Actor, Outcome, StepRecord
from envs.trajectory import RunWriter
from policy.presets import preset_for
from train.config import FilterConfig
from train.config import RLConfig, TrainModelConfig
from train.errors import TransportClosed
from train.messages import GroupMessage
from train.samples import TrainSample
from train.step_rewards import StepRule

pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")

TASK = "generated/click:3"


def record_success(root: Path, env: dict) -> None:
    """A two-step demonstration (a click on a box, then finish) whose episode record names ``env``."""
    writer = RunWriter(root, config={"kind": "record"}).episode(task="Click the box", actor=Actor.HUMAN, env=env)
    frame = np.full((120, 160, 3), 255, np.uint8)
    frame[40:60, 60:100] = (200, 30, 30)
    for i, action in enumerate((Action(ActionKind.CLICK, Point(0.5, 0.42)), Action(ActionKind.FINISH))):
        path = writer.write_frame(i, Observation(frame))
        writer.write_step(StepRecord(
            step_id=writer.step_id(i), index=i, started_at=0.0, ended_at=0.0, frame_path=path, frame_size=(160, 120),
            model_input_size=(160, 120), action=action.to_dict(), executed=action.kind is ActionKind.CLICK,
            target_box=(0.375, 0.333, 0.625, 0.5) if i == 0 else None))
    writer.finish(Outcome.CLAIMED)


@pytest.fixture
def demos(tmp_path: Path) -> Path:
    record_success(tmp_path / "demos", {"name": "generated/click", "seed": 3})
    record_success(tmp_path / "demos", {"name": "record", "seed": None})  # of no session task
    return tmp_path / "demos"


def replay(demos: Path, share: float = 0.5, **kw) -> DemoReplay:
    return DemoReplay.load(demos, env="generated/click", preset="qwen2.5-vl", tokenize=lambda text: [7, 8, 9],
                           share=share, **kw)


def answers(task: str = TASK, *, correct: float = 0.0, level: str = "step", n: int = 3,
            step: int = 0) -> list[TrainSample]:
    """n scored answers of the policy for one screen of ``task`` (all right or all wrong)."""
    image = np.zeros((28, 28, 3), np.uint8)
    return [TrainSample(messages=[{"role": "user", "content": [{"type": "image"}]}], image=image, frame_size=(160, 120),
                        input_size=(28, 28), response_text="x", response_ids=(1, 2), behaviour_logprobs=(-1.0, -1.0),
                        reward=2.0 * correct, reward_parts={"correct": correct}, adapter_version="online@0",
                        origin={"id": task, "env": "generated/click", "seed": 3, "step": step, "level": level,
                                **({"episode": f"ep{i}"} if level == "episode" else {})},
                        id=f"{task}/{step}/{i}") for i in range(n)]


def ids(group: list[TrainSample]) -> list[str | None]:
    return [s.id for s in group]


def test_recordings_match_their_task_by_environment_and_seed_or_derived_task():
    assert task_keys({"name": "generated/click", "seed": 3}) == {"generated/click:3"}
    assert task_keys({"name": "tasks/subscribe", "seed": 0}) == {"tasks/subscribe:0", "tasks/subscribe"}
    assert task_keys({"name": "record", "seed": None, "task": "subscribe"}) == {"tasks/subscribe"}
    assert task_keys(None) == set()


def test_a_failing_tasks_group_gets_the_recorded_success(demos):
    r = replay(demos)
    group = answers()
    mixed = r.mix(group, room=True)
    assert ids(mixed[:3]) == ids(group) and len(mixed) == 4
    demo = mixed[3]
    assert demo.origin["demo"] is True and demo.origin["id"] == TASK and "episode" not in demo.origin
    assert demo.reward == DEMO_STEP_REWARD and demo.reward_parts["correct"] == 1.0
    assert demo.behaviour_logprobs is None and demo.adapter_version is None and demo.response_ids == (7, 8, 9)
    assert '"left_click"' in demo.response_text  # the recorded click in the family's answer format
    assert demo.image.shape[2] == 3 and demo.messages[-1]["content"][-1] == {"type": "image"}
    # the running success ignores the demonstration: the task is still failing
    assert r.success[TASK] == 0.0 and r.failing(TASK)


def test_nothing_is_added_where_it_does_not_belong(demos):
    r = replay(demos)
    assert ids(r.mix(answers(correct=1.0), room=True)) == ids(answers(correct=1.0))  # a task the policy solves
    other = answers("generated/click:4")
    assert ids(r.mix(other, room=True)) == ids(other)  # no recording of that seed
    assert ids(r.mix(answers(), room=False)) == ids(answers())  # the batch's share is used up
    assert ids(r.mix(answers(step=5), room=True)) == ids(answers(step=5))  # the recording has no step 5
    assert replay(demos, hard=lambda task: True).mix(answers(correct=1.0), room=True)[-1].origin["demo"]


def test_episode_level_groups_get_the_whole_recording_as_one_episode(demos):
    mixed = replay(demos).mix(answers(level="episode"), room=True)
    added = mixed[3:]
    assert len(added) == 2 and {s.origin["episode"] for s in added} == {added[0].origin["episode"]}
    assert added[0].origin["episode"].startswith("demo:") and all(s.reward == DEMO_EPISODE_REWARD for s in added)
    assert ["terminate" in s.response_text for s in added] == [False, True]


class Transport:
    """The learner's side of a transport that delivers ``messages`` once, then closes."""

    def __init__(self, messages: list[GroupMessage]) -> None:
        self.messages = list(messages)

    def receive_group(self, timeout: float = 0.0) -> GroupMessage | None:
        if not self.messages:
            raise TransportClosed("done")
        return self.messages.pop(0)


def feed(groups: list[list[TrainSample]], demos: DemoReplay | None) -> tuple[list[list[TrainSample]], dict]:
    """What ``LearnerLoop.feed`` hands the trainer for these groups (one update of one group)."""
    messages = [GroupMessage(id=f"m{i}", actor="a", group=f"g{i}", parts=1, level="step", samples=tuple(g),
                             created_at=time.time()) for i, g in enumerate(groups)]
    counters = Counters()
    ctx = LearnerContext(transport=Transport(messages), versions=None, filter=FilterConfig(), max_policy_lag=2,
                         prompts_per_batch=1, stopping=lambda: False, request_stop=lambda why: None,
                         counters=counters, episode_stats=dict, alive_actors=list, elapsed=lambda: 0.0, demos=demos)
    trainer = SimpleNamespace(on_start=[], on_update=[], learner=SimpleNamespace(kl_coef=0.0, staleness=lambda s: 0))
    return list(LearnerLoop(ctx, trainer, store=None).feed()), counters.snapshot()


def test_the_feed_trains_on_a_failing_group_only_with_the_share_on(demos):
    wrong = answers()  # every answer wrong, equal rewards: nothing to learn from on its own
    off, counts = feed([wrong], None)
    assert off == [] and counts["groups_no_signal"] == 1 and "demo_groups" not in counts
    on, counts = feed([wrong], replay(demos))
    assert len(on) == 1 and ids(on[0][:3]) == ids(wrong) and on[0][3].origin["demo"] and counts["demo_groups"] == 1
    # a group with its own signal goes through the same way with the share on or off
    mixed = answers(correct=1.0)[:2] + answers()[:1]
    assert [ids(g) for g in feed([mixed], None)[0]] == [ids(mixed)]
    assert [ids(g) for g in feed([mixed], replay(demos, share=0.5, below=0.1))[0]] == [ids(mixed)]


def test_the_share_bounds_the_groups_per_batch_and_settings_check_it(demos, tmp_path, capsys):
    from agent.cli import main as cli_main

    assert cli_main(["train", "--demos", str(demos)]) == 2 and "--online" in capsys.readouterr().out
    assert cli_main(["train", "--online", "--env", "generated/click", "--demo-share", "0.5", "--run-dir",
                     str(tmp_path / "run"), "--set", 'model.id="tiny"']) == 2
    assert "--demos DIR" in capsys.readouterr().out and not (tmp_path / "run").exists()
    assert replay(demos, share=0.25).per_batch(16) == 4 and replay(demos, share=0.1).per_batch(2) == 1
    assert OnlineConfig().demo_share == 0.0
    with pytest.raises(ValueError, match="demos"):
        OnlineConfig(demo_share=0.5)
    with pytest.raises(ValueError, match="between 0"):
        OnlineConfig(demo_share=1.5, demos="x")


def test_a_session_builds_its_replay_from_its_settings(demos):
    from agent.online.demos import session_replay

    tokenizer = SimpleNamespace(get_vocab=lambda: {"<|im_end|>": 5}, eos_token_id=None,
                                encode=lambda text, add_special_tokens=False: [1, 2])
    backend = SimpleNamespace(preset=preset_for("qwen2.5-vl"), tokenizer=tokenizer)
    assert session_replay(OnlineConfig(env="generated/click"), backend) is None  # the share is 0: off
    on = session_replay(OnlineConfig(env="generated/click", demos=str(demos), demo_share=0.5), backend,
                        SimpleNamespace(hard={TASK: 1}))
    assert on is not None and on.hard(TASK) and not on.hard("generated/click:9")
    assert on.mix(answers(correct=1.0), room=True)[-1].response_ids == (1, 2, 5)  # hard: replayed, end-of-turn last
    assert on.mix(answers(correct=1.0), room=True)[-1].reward == DEMO_STEP_REWARD  # AEPO's 1 + 1/sqrt(1 x 1) = 2
    guir1 = session_replay(OnlineConfig(env="generated/click", demos=str(demos), demo_share=0.5), backend,
                           SimpleNamespace(hard={TASK: 1}), rule=StepRule.GUIR1)  # GUI-R1's right single answer
    assert guir1.mix(answers(correct=1.0), room=True)[-1].reward == 1.0


def test_the_learner_takes_a_demonstration_as_a_positive_sample_at_ratio_one(demos, tmp_path):
    """The importance handling: no behaviour log-probs, so pi_old is the policy's own and the ratio starts at 1."""
    from policy.backends.hf import TransformersBackend
    from policy.tiny import build_tiny_qwen25vl
    from train.learner import Learner

    from agent.online.demos import tokens_of

    preset = preset_for("tiny", "qwen2.5-vl", min_pixels=4 * 28 * 28, max_pixels=16 * 28 * 28)
    backend = TransformersBackend(build_tiny_qwen25vl(tmp_path / "tiny", seed=0), preset=preset)
    r = DemoReplay.load(demos, env="generated/click", preset=preset, tokenize=tokens_of(backend.tokenizer), share=1.0)
    group = r.mix(answers(), room=True)
    # the policy's answers without behaviour log-probs too, so that every ratio of this first update is exactly 1
    group = [replace(s, behaviour_logprobs=None, adapter_version=None) for s in group]
    learner = Learner(backend, RLConfig(lr=1e-3), TrainModelConfig(finetune="lora"), algo="aepo")
    adv = learner.group_advantages([group])
    assert adv[3] > 0 and all(a < 0 for a in adv[:3])  # RLOO: the success above the failures
    metrics = learner.step([group])
    assert metrics["train/is_weight_mean"] == pytest.approx(1.0) and metrics["train/ratio_max"] == pytest.approx(1.0)

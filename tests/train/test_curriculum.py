"""Difficulty filtering, dynamic sampling, the adaptive curriculum and the threshold schedule (train/curriculum.py),
checked against hand-worked numbers."""

from __future__ import annotations

import json

import pytest

from train.curriculum import (
    CORRECT_PART,
    FAILED_PART,
    AdaptiveCurriculum,
    Correctness,
    AdaptiveCurriculumConfig,
    ThresholdSchedule,
    dynamic_sample,
    filter_groups,
    is_failed,
)
from train.samples import TrainSample


def sample(reward: float, correct: bool | None = None, pid: str = "p", failed: bool = False) -> TrainSample:
    parts = {FAILED_PART: 1.0} if failed else {CORRECT_PART: float(reward >= 1.0 if correct is None else correct)}
    return TrainSample(messages=[], image=None, frame_size=(1, 1), input_size=(1, 1), response_text="",
                       response_ids=(1,), behaviour_logprobs=None, reward=0.0 if failed else reward,
                       reward_parts=parts, origin={"id": pid})


def group(*rewards: float | None, pid: str = "p") -> list[TrainSample]:
    """Samples with these rewards; a reward >= 1 is correct; None is a failed reward."""
    return [sample(0.0, pid=pid, failed=True) if r is None else sample(r, pid=pid) for r in rewards]


# -- correctness and filtering --------------------------------------------------------------------------------------


def test_correctness_reads_the_part_or_a_threshold():
    s = sample(1.5, correct=False)
    assert Correctness()(s) is False and Correctness(threshold=1.5)(s) is True
    assert Correctness(threshold=1.6)(s) is False
    bare = TrainSample([], None, (1, 1), (1, 1), "", (1,), None, reward=2.0)
    with pytest.raises(ValueError, match="no 'correct' reward part"):
        Correctness()(bare)
    assert is_failed(sample(0, failed=True)) and not is_failed(s)


def test_filter_groups_counts_every_reason():
    groups = [
        group(2.0, 1.5, 1.2),        # all correct
        group(0.0, 0.5),             # all wrong
        group(2.0, 0.0),             # mixed
        group(2.0, None, 0.5),       # mixed once the failed sample is out
        group(2.0, None),            # one usable sample: too small
    ]
    r = filter_groups(groups)
    assert [[s.reward for s in g] for g in r.kept] == [[0.0, 0.5], [2.0, 0.0], [2.0, 0.5]]
    assert (r.total, r.all_correct, r.all_wrong, r.too_small, r.failed_samples) == (5, 1, 0, 1, 2)
    r = filter_groups(groups, drop_all_wrong=True)
    assert len(r.kept) == 2 and r.all_wrong == 1
    assert r.metrics()["rollout/filter/kept"] == 2.0
    # by a reward threshold instead: >= 1.4 is correct, so the first group is mixed, the second all wrong
    r = filter_groups(groups, drop_all_wrong=True, correct=Correctness(threshold=1.4))
    assert len(r.kept) == 3 and (r.all_correct, r.all_wrong) == (0, 1)
    r = filter_groups(groups, drop_all_correct=False, min_size=1)
    assert len(r.kept) == 5 and r.too_small == 0


# -- dynamic sampling -----------------------------------------------------------------------------------------------


def scripted(*batches: list[list[TrainSample]]):
    calls: list[int] = []
    it = iter(batches)

    def draw(k: int) -> list[list[TrainSample]]:
        calls.append(k)
        return next(it)

    return draw, calls


def test_dynamic_sampling_draws_until_enough_informative_groups():
    flat, mixed = group(1.0, 1.0), group(2.0, 0.5)
    draw, calls = scripted([flat, mixed, flat], [mixed, group(0.2, 0.1), mixed, group(0.5, None)])
    b = dynamic_sample(draw, 3, max_draws=5)
    # draw 1 keeps 1 of 3; draw 2 keeps 2 (reaching 3), drops one more informative as surplus, and one group
    # with a failed sample and a single usable one as uninformative
    assert calls == [3, 3] and b.draws == 2 and b.drawn == 7
    assert len(b.groups) == 3 and b.complete and (b.filtered, b.surplus, b.failed_samples) == (3, 1, 1)
    assert b.metrics()["rollout/dynamic/filtered_groups"] == 3.0


def test_dynamic_sampling_stops_at_the_draw_budget():
    draw, calls = scripted([group(1.0, 1.0)], [group(0.0, 1.0)], [group(0.0, 1.0)])
    b = dynamic_sample(draw, 4, max_draws=2, draw_size=1)
    assert calls == [1, 1] and len(b.groups) == 1 and not b.complete and b.filtered == 1
    # atol: a spread of 0.05 counts as flat under atol 0.1
    draw, _ = scripted([group(1.0, 1.05), group(1.0, 1.5)])
    assert len(dynamic_sample(draw, 2, max_draws=1, atol=0.1).groups) == 1
    draw, _ = scripted([group(1.0, 1.0), group(1.0, 1.5)])
    assert len(dynamic_sample(draw, 2, max_draws=1, accept=lambda g: True).groups) == 2
    with pytest.raises(ValueError, match="want and max_draws"):
        dynamic_sample(draw, 0)


# -- adaptive curriculum --------------------------------------------------------------------------------------------


def test_running_success_is_an_ema():
    cur = AdaptiveCurriculum(AdaptiveCurriculumConfig(ema=0.5))
    # rates 1.0, 0.0, 0.5: s = 1.0 (first sets it), 0.5*1 + 0.5*0 = 0.5, 0.5*0.5 + 0.5*0.5 = 0.5
    for rewards, want in (((2.0, 1.0), 1.0), ((0.0, 0.0), 0.5), ((1.0, 0.0), 0.5)):
        cur.observe([group(*rewards)])
        assert cur.success["p"] == pytest.approx(want)
    assert cur.seen["p"] == 3
    cur = AdaptiveCurriculum(AdaptiveCurriculumConfig(ema=0.3, init=0.5))
    cur.observe([group(2.0, 2.0)])  # 0.7 * 0.5 + 0.3 * 1 = 0.65
    assert cur.success["p"] == pytest.approx(0.65)
    cur.observe([group(0.0, 0.0, 2.0, None)])  # rate 1/3 (the failed sample is left out): 0.7*0.65 + 0.1 = 0.555
    assert cur.success["p"] == pytest.approx(0.555)


def test_hard_queue_enters_leaves_and_stays_bounded():
    cur = AdaptiveCurriculum(AdaptiveCurriculumConfig(ema=0.5, hard_below=0.5, max_hard=2))
    cur.observe([group(2.0, 2.0, pid="a"), group(2.0, 0.0, 0.0, 0.0, pid="b"), group(2.0, 2.0, 0.0, pid="c")])
    assert cur.success == {"a": 1.0, "b": 0.25, "c": pytest.approx(2 / 3)}
    assert list(cur.hard) == ["b"]
    cur.observe([group(0.0, 0.0, pid="a")])  # s = 0.5, not below the bar, but the group failed: hard
    assert cur.hard_ids() == ["b", "a"]
    cur.observe([group(0.0, 0.0, 0.0, pid="c")])  # s = 1/3: hard; the queue holds 2: the least hard (a) goes
    assert cur.hard_ids() == ["b", "c"] and "a" not in cur.hard
    cur.observe([group(2.0, 2.0, pid="b")])  # s = 0.625: easy again
    assert cur.hard_ids() == ["c"]
    m = cur.observe([group(None, None, pid="z")])
    assert m["curriculum/skipped_groups"] == 1.0 and "z" not in cur.success


def test_hard_picks_are_weighted_by_failure_rate():
    cur = AdaptiveCurriculum(AdaptiveCurriculumConfig(ema=1.0, seed=3))
    cur.observe([group(2.0, 0.0, 0.0, 0.0, 0.0, pid="a"), group(2.0, 2.0, 2.0, 0.0, 0.0, pid="b")])
    assert cur.success == {"a": 0.2, "b": 0.6} and cur.hard_ids() == ["a"]
    cur.hard["b"] = cur.observations  # queue b too, to compare the two weights
    # weights 1 - s: a 0.8, b 0.4: a is drawn first with probability 0.8 / 1.2 = 2/3
    firsts = [cur.pick_hard(1)[0] for _ in range(3000)]
    assert firsts.count("a") / 3000 == pytest.approx(2 / 3, abs=0.03)
    assert sorted(cur.pick_hard(5)) == ["a", "b"]  # without replacement, capped by the queue
    again = AdaptiveCurriculum(AdaptiveCurriculumConfig(ema=1.0, seed=3))
    again.observe([group(2.0, 0.0, 0.0, 0.0, 0.0, pid="a"), group(2.0, 2.0, 2.0, 0.0, 0.0, pid="b")])
    again.hard["b"] = again.observations
    assert [again.pick_hard(1)[0] for _ in range(3000)] == firsts  # same seed, same picks


class FakeSampler:
    def __init__(self) -> None:
        self.stream = 0

    def _prompt(self, pid: str):
        from train.learner import RolloutPrompt

        return RolloutPrompt([], None, (1, 1), None, {"id": pid})

    def next_prompts(self, n: int):
        out = [self._prompt(f"s{self.stream + i}") for i in range(n)]
        self.stream += n
        return out

    def prompts_for(self, ids):
        return [self._prompt(i) for i in ids if i != "gone"]


def test_next_batch_mixes_a_fixed_share_of_hard_prompts():
    cur = AdaptiveCurriculum(AdaptiveCurriculumConfig(hard_fraction=0.25, seed=1))
    sampler = FakeSampler()
    assert [p.origin["id"] for p in cur.next_batch(sampler, 4)] == ["s0", "s1", "s2", "s3"]  # empty queue
    cur.observe([group(0.0, 0.0, pid=f"h{i}") for i in range(3)])
    # floor(0.25 * 8) = 2 hard prompts, then 6 from the stream
    batch = cur.next_batch(sampler, 8)
    hard = [p for p in batch if p.origin.get("hard")]
    assert len(batch) == 8 and len(hard) == 2 and {p.origin["id"] for p in hard} <= {"h0", "h1", "h2"}
    assert [p.origin["id"] for p in batch[2:]] == [f"s{i}" for i in range(4, 10)]
    assert cur.hard_count(3) == 0 and cur.hard_count(100) == 3  # floor(0.75) = 0; capped by the queue
    cur.hard = {"gone": 1}
    cur.success["gone"] = 0.0
    assert len(cur.next_batch(sampler, 4)) == 4 and cur.hard == {}  # a prompt no longer in the data is forgotten


def test_state_dict_is_json_and_restores_exactly():
    cur = AdaptiveCurriculum(AdaptiveCurriculumConfig(ema=0.4, seed=5))
    cur.observe([group(2.0, 0.0, 0.0, pid=f"q{i}") for i in range(6)] + [group(0.0, 0.0, pid="q0")])
    assert len(cur.hard) == 6
    cur.pick_hard(2)  # move the RNG on
    state = json.loads(json.dumps(cur.state_dict()))
    twin = AdaptiveCurriculum.from_state_dict(state)
    assert twin.config == cur.config and twin.success == cur.success and twin.hard == cur.hard
    assert [twin.pick_hard(3) for _ in range(20)] == [cur.pick_hard(3) for _ in range(20)]
    twin.observe([group(2.0, 2.0, pid="q1")])
    cur.observe([group(2.0, 2.0, pid="q1")])
    assert twin.state_dict() == cur.state_dict()
    with pytest.raises(ValueError, match="version"):
        cur.load_state_dict({**state, "version": 99})


def test_config_checks():
    with pytest.raises(ValueError, match="ema"):
        AdaptiveCurriculumConfig(ema=0.0)
    with pytest.raises(ValueError, match="hard_fraction"):
        AdaptiveCurriculumConfig(hard_fraction=1.5)
    with pytest.raises(ValueError, match="origin has no 'id'"):
        AdaptiveCurriculum().observe([[TrainSample([], None, (1, 1), (1, 1), "", (1,), None, 1.0,
                                                   {CORRECT_PART: 1.0})]])


# -- threshold schedule ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("step", "linear", "stepped"), [
    # start 0.3, end 0.1, 100 steps; step kind with 2 stages: 0.3 until 50, 0.2 until 100, then 0.1
    (-5, 0.3, 0.3), (0, 0.3, 0.3), (25, 0.25, 0.3), (49, 0.202, 0.3), (50, 0.2, 0.2), (99, 0.102, 0.2),
    (100, 0.1, 0.1), (1000, 0.1, 0.1),
])
def test_threshold_schedule_values(step, linear, stepped):
    assert ThresholdSchedule(0.3, 0.1, 100)(step) == pytest.approx(linear)
    assert ThresholdSchedule(0.3, 0.1, 100, kind="step", stages=2)(step) == pytest.approx(stepped)


def test_threshold_schedule_round_trips_and_checks():
    s = ThresholdSchedule(0.2, 0.05, 10, kind="step", stages=3)
    assert ThresholdSchedule.from_dict(json.loads(json.dumps(s.to_dict()))) == s
    # 3 stages over 10 steps: k = floor(step * 3 / 10): steps 0-3 -> 0.2, 4-6 -> 0.15, 7-9 -> 0.1, 10 -> 0.05
    assert [round(s(i), 6) for i in (0, 3, 4, 6, 7, 9, 10)] == [0.2, 0.2, 0.15, 0.15, 0.1, 0.1, 0.05]
    with pytest.raises(ValueError, match="steps"):
        ThresholdSchedule(0.2, 0.1, 0)
    with pytest.raises(ValueError, match="kind"):
        ThresholdSchedule(0.2, 0.1, 5, kind="cosine")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="start"):
        ThresholdSchedule(-0.1, 0.1, 5)

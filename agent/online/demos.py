"""Success replay (ARPO, MobileRL): recorded successful demonstrations mixed into the learner's groups, as
off-policy positive samples, for tasks the policy keeps failing.

    replay = DemoReplay.load("runs/demos", env="tasks/subscribe", preset=backend.preset,
                             tokenize=tokens_of(backend.tokenizer), share=0.25)
    group = replay.mix(group, room=True)      # in the learner's feed, before the difficulty filter

A group of a failing task is, for AEPO's filter and for GRPO's normalised advantage, a group with nothing to learn
from: every answer wrong, every reward equal. One recorded success in it gives the failing answers a baseline to
fall below and the right answer a positive advantage. ``online.demo_share`` (default 0: off) turns it on;
``online.demos`` names the folder of recordings (``agent record`` demonstrations, or successful runs: whatever
``TrajectorySource`` reads with ``sft=True``).

Which task a recording is of. A recording matches the session's task ``ENV:SEED`` when its episode record names
that environment and seed (a person, or an agent, recorded on a registered environment), and every seed of a derived
task ``tasks/NAME`` when its record names that environment, or the task ``NAME`` (what a derived task's reset
reports: ``env.task``), since a derived task has one start state.

When a task is failing: while its running success (an EMA, weight ``EMA`` for the newest group's share of correct
answers, the first group's share to start with; demonstrations never count) is below ``online.demo_below``, or
while the trainer's curriculum holds it in its hard queue.

What is mixed in, with which weight. Step-level groups (n answers to one screen) get the matching recording's step
of the same index (the actor's decision count), when the recording has one its model family can write; episode-level
groups (n episodes of one seed) get the whole recording as one more episode (``origin["episode"] =
"demo:<run>/<episode>"``). The sample's prompt is built from the recorded frame and history exactly as an actor's
(``train.data.build_prompt``), its response is the recorded action in the family's answer format
(``train.data.answers``) followed by the end-of-turn token, and its reward is what a right answer gets:
the step reward of a single right action at step level (``train.step_rewards.step_reward``: ``DEMO_STEP_REWARD``,
1 + 1/sqrt(1·1), under AEPO's; 1 under GUI-R1's),
``DEMO_EPISODE_REWARD`` (a checker's success) at episode level, with the reward part ``correct`` = 1. It counts as
one answer of its group (one episode unit at episode level) and, like every sample, weighs by its share of the
batch's tokens.

Importance: a demonstration has no behaviour log-probs (a person is not a distribution over tokens), so it carries
``behaviour_logprobs=None`` and ``adapter_version=None``. The learner then treats it as on-policy at its first
update (pi_old is the current policy's own log-prob, ratio 1): its gradient is the advantage-weighted log-likelihood
of the recorded answer, an SFT step scaled by its (positive) advantage. Over several PPO epochs or mini-batches its
ratio is measured against the policy at the start of the update and clipped at 1 + clip_high like any sample's, so
one batch cannot push it further than a right on-policy answer; no truncated importance weight applies (there is no
behaviour policy to correct for). At most ``ceil(demo_share × rl.batch_prompts)`` groups of each update carry one.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.trajectory import iter_episodes
from train.samples import TrainSample
from train.step_rewards import StepRule, step_reward

log = logging.getLogger(__name__)

DEMO_STEP_REWARD = step_reward([True], rule=StepRule.AEPO)[0]
"""Reward of a demonstration's step at step level under AEPO's step reward: one right action (2); a session on
GUI-R1's gives 1 instead (``session_replay``'s ``rule``)."""
DEMO_EPISODE_REWARD = 1.0
"""Reward of a demonstration at episode level: what a task checker gives a success."""
EMA = 0.3
"""Weight of the newest group in a task's running success."""


def tokens_of(tokenizer: Any) -> Callable[[str], list[int]]:
    """The response token ids of an answer text: its tokens, then the chat's end-of-turn token (as a sampled answer
    ends)."""
    from train.sft import end_of_turn_id

    end = end_of_turn_id(tokenizer)
    return lambda text: [*tokenizer.encode(text, add_special_tokens=False), end]


def task_keys(env: dict[str, Any] | None) -> set[str]:
    """The task ids a recording with episode record ``env`` matches (see the module docstring)."""
    env = env if isinstance(env, dict) else {}
    name, seed, keys = env.get("name"), env.get("seed"), set()
    if name and seed is not None:
        keys.add(f"{name}:{seed}")
    if isinstance(name, str) and name.startswith("tasks/"):
        keys.add(name)
    if env.get("task"):
        keys.add(f"tasks/{env['task']}")
    return keys


@dataclass(frozen=True, slots=True)
class _Recording:
    key: str
    """<run>/<episode>."""
    steps: dict[int, int]
    """Recorded step index -> the source's item index."""


class DemoReplay:
    """Recorded successes per task, and the running success that says when to mix them in (module docstring)."""

    def __init__(self, source: Any, episodes: dict[str, set[str]], *, tokenize: Callable[[str], list[int]],
                 share: float, below: float = 0.5, hard: Callable[[str], bool] | None = None,
                 step_reward: float = DEMO_STEP_REWARD) -> None:
        """``source``: a ``TrajectorySource(..., sft=True)`` of the recordings; ``episodes``: ``<run>/<episode>`` ->
        the task ids it matches (``task_keys``); ``step_reward``: a demonstrated step's reward at step level."""
        self.source, self.tokenize, self.share, self.below, self.hard = source, tokenize, share, below, hard
        self.step_reward = step_reward
        by_episode: dict[str, dict[int, int]] = {}
        for i in range(len(source)):
            run, episode, step = source.item_id(i).rsplit("/", 2)
            by_episode.setdefault(f"{run}/{episode}", {})[int(step)] = i
        self.recordings: dict[str, list[_Recording]] = {}
        for key, steps in by_episode.items():
            for task in episodes.get(key, ()):
                self.recordings.setdefault(task, []).append(_Recording(key, steps))
        self.success: dict[str, float] = {}
        self._turn = itertools.count()
        self._ids = itertools.count()
        self._cache: dict[int, tuple[Any, list[int]]] = {}

    @classmethod
    def load(cls, folder: str | Path, *, env: str, preset: Any, tokenize: Callable[[str], list[int]], share: float,
             below: float = 0.5, hard: Callable[[str], bool] | None = None,
             step_reward: float = DEMO_STEP_REWARD) -> DemoReplay:
        """The recordings in ``folder`` (a run folder or a folder of them) for the session's environment ``env``;
        a warning when none of them is of it."""
        from train.data import TrajectorySource

        source = TrajectorySource(folder, preset=preset, sft=True)
        folder = Path(folder)
        runs = [folder] if (folder / "run.json").is_file() else sorted(
            p for p in folder.iterdir() if (p / "run.json").is_file())
        episodes = {f"{e.record.run_id}/{e.record.episode_id}": task_keys(e.record.env)
                    for run in runs for e in iter_episodes(run)}
        replay = cls(source, episodes, tokenize=tokenize, share=share, below=below, hard=hard, step_reward=step_reward)
        mine = [t for t in replay.recordings if t == env or t.rpartition(":")[0] == env]
        if not mine:
            log.warning("none of the %d recordings in %s is of %s (their episode records name %s): online.demo_share "
                        "mixes nothing in", len(episodes), folder, env,
                        ", ".join(sorted({k for v in episodes.values() for k in v})[:5]) or "no environment")
        return replay

    # -- when ------------------------------------------------------------------------------------------------------
    def per_batch(self, groups_per_batch: int) -> int:
        """How many groups of one update may carry a demonstration."""
        return math.ceil(self.share * groups_per_batch) if self.share > 0 else 0

    def observe(self, task: str, group: Sequence[TrainSample]) -> float:
        """Update ``task``'s running success with the policy's own answers in ``group``; returns it."""
        own = [s for s in group if not s.origin.get("demo")]
        if not own:
            return self.success.get(task, 0.0)
        rate = sum(float(s.reward_parts.get("correct", 0.0)) >= 0.5 for s in own) / len(own)
        prev = self.success.get(task)
        self.success[task] = rate if prev is None else (1 - EMA) * prev + EMA * rate
        return self.success[task]

    def failing(self, task: str) -> bool:
        return self.success.get(task, 0.0) < self.below or (self.hard is not None and self.hard(task))

    def _recordings_for(self, task: str) -> list[_Recording]:
        env = task.rpartition(":")[0]
        return self.recordings.get(task) or (self.recordings.get(env, []) if env.startswith("tasks/") else [])

    # -- what ------------------------------------------------------------------------------------------------------
    def mix(self, group: Sequence[TrainSample], *, room: bool) -> list[TrainSample]:
        """``group`` with a demonstration added when its task is failing, a recording of it has what the group needs
        and ``room`` (the batch's demonstration share is not used up); otherwise ``group`` as it is. The group's
        answers update the task's running success either way."""
        group = list(group)
        if not group:
            return group
        first = group[0].origin
        task = str(first.get("id", ""))
        self.observe(task, group)
        if not room or not self.failing(task):
            return group
        recordings = self._recordings_for(task)
        if not recordings:
            return group
        start = next(self._turn)
        episode_level = first.get("level") == "episode"
        for k in range(len(recordings)):
            rec = recordings[(start + k) % len(recordings)]
            if episode_level:
                added = [self._sample(rec, i, first, DEMO_EPISODE_REWARD, episode=f"demo:{rec.key}")
                         for _, i in sorted(rec.steps.items())]
            elif int(first.get("step", -1)) in rec.steps:
                added = [self._sample(rec, rec.steps[int(first["step"])], first, self.step_reward)]
            else:
                continue
            return group + [s for s in added if s is not None]
        return group

    def _sample(self, rec: _Recording, index: int, like: dict[str, Any], reward: float,
                episode: str | None = None) -> TrainSample | None:
        """The recording's step ``index`` as a sample of the group whose first sample's origin is ``like``."""
        from train.data import answer_text
        from train.errors import BadItem

        if index not in self._cache:
            try:
                prompt = self.source.prompt(index)
            except BadItem as e:
                log.warning("demonstration step left out: %s", e)
                return None
            text = answer_text(prompt)
            self._cache[index] = (prompt, self.tokenize(text))
        prompt, ids = self._cache[index]
        origin = {k: like[k] for k in ("id", "env", "seed", "level") if k in like}
        origin.update({"demo": True, "source": prompt.origin.get("id"), "step": prompt.origin.get("step")})
        if episode is not None:
            origin["episode"] = episode
        h, w = prompt.image.shape[:2]
        return TrainSample(messages=prompt.messages, image=prompt.image, frame_size=tuple(prompt.frame_size),
                           input_size=(int(w), int(h)), response_text=answer_text(prompt), response_ids=tuple(ids),
                           behaviour_logprobs=None, reward=reward, reward_parts={"correct": 1.0, "demo": 1.0},
                           adapter_version=None, origin=origin, id=f"demo/{prompt.origin.get('id')}/{next(self._ids)}")


def session_replay(online: Any, backend: Any, curriculum: Any = None,
                   rule: StepRule = StepRule.AEPO) -> DemoReplay | None:
    """The success replay an online session's settings ask for (None when ``online.demo_share`` is 0): the
    recordings in ``online.demos`` built with the learner backend's preset and tokenizer, the curriculum's hard
    queue counting as failing; a demonstrated step's reward at step level is what a right single answer gets under
    the session's step reward ``rule`` (2 under AEPO's, 1 under GUI-R1's)."""
    if not online.demo_share:
        return None
    hard = (lambda task: task in curriculum.hard) if curriculum is not None else None
    return DemoReplay.load(online.demos, env=online.env, preset=backend.preset, tokenize=tokens_of(backend.tokenizer),
                           share=online.demo_share, below=online.demo_below, hard=hard,
                           step_reward=step_reward([True], rule=rule)[0])

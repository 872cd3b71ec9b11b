"""Which task seeds the actors run: a resumable seed stream (the trainer's prompt source, so checkpoints carry its
position), the curriculum shared between the learner thread and the actors, and the queue of episodes."""

from __future__ import annotations

import collections
import itertools
import random
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.online.settings import OnlineError


@dataclass(frozen=True, slots=True)
class TaskDraw:
    """One task seed to run (what the curriculum sees as a prompt: ``origin["id"]`` names it)."""

    seed: int
    origin: dict[str, Any] = field(default_factory=dict)


class TaskSampler:
    """Seeds ``0 .. seeds-1`` of one environment in a seeded order, epoch after epoch; resumable.

    It is the trainer's prompt source in an online session, so checkpoints carry its position and the
    curriculum can ask it for particular seeds (``prompts_for``). Thread-safe (the learner thread saves it)."""

    def __init__(self, env: str, seeds: int, seed: int = 0) -> None:
        if seeds < 1:
            raise ValueError(f"seeds must be at least 1, got {seeds}")
        self.env, self.seeds, self.seed = env, seeds, seed
        self.epoch = 0
        self.pos = 0
        self._order = self._shuffled(0)
        self._lock = threading.Lock()

    def _shuffled(self, epoch: int) -> list[int]:
        order = list(range(self.seeds))
        random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def draw(self, seed: int) -> TaskDraw:
        return TaskDraw(seed, {"id": f"{self.env}:{seed}", "env": self.env, "seed": seed})

    def next_prompts(self, n: int) -> list[TaskDraw]:
        out = []
        with self._lock:
            for _ in range(n):
                if self.pos >= len(self._order):
                    self.epoch, self.pos = self.epoch + 1, 0
                    self._order = self._shuffled(self.epoch)
                out.append(self.draw(self._order[self.pos]))
                self.pos += 1
        return out

    def prompts_for(self, ids: Sequence[str]) -> list[TaskDraw]:
        out = []
        for i in ids:
            env, _, seed = str(i).rpartition(":")
            if env == self.env and seed.isdigit() and int(seed) < self.seeds:
                out.append(self.draw(int(seed)))
        return out

    def state_dict(self) -> dict[str, Any]:
        with self._lock:
            return {"env": self.env, "seeds": self.seeds, "seed": self.seed, "epoch": self.epoch, "pos": self.pos}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("env") != self.env or state.get("seeds") != self.seeds:
            raise OnlineError(f"the checkpoint's tasks are {state.get('env')} seeds 0..{state.get('seeds')}, this "
                              f"session's {self.env} seeds 0..{self.seeds}; resume with the same env and data.seeds")
        with self._lock:
            self.epoch, self.pos = int(state["epoch"]), int(state["pos"])
            self._order = self._shuffled(self.epoch)


class LockedCurriculum:
    """The trainer's curriculum, shared by the learner thread (observe, checkpoints) and the actors (next_batch)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._lock = threading.Lock()

    def observe(self, groups: Any) -> dict[str, float]:
        with self._lock:
            return self._inner.observe(groups)

    def next_batch(self, sampler: Any, batch_size: int) -> list[Any]:
        with self._lock:
            return self._inner.next_batch(sampler, batch_size)

    def state_dict(self) -> dict[str, Any]:
        with self._lock:
            return self._inner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with self._lock:
            self._inner.load_state_dict(state)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@dataclass(frozen=True, slots=True)
class Job:
    """One episode for an actor to run."""

    seed: int
    task_id: str
    group: str = ""
    """Episode-level group key ("" for step-level: each step is its own group)."""
    parts: int = 1
    hard: bool = False


class Jobs:
    """Hands episodes to actors: fresh seeds (a curriculum's hard share among them), ``n`` episodes per seed for
    episode-level groups."""

    def __init__(self, sampler: TaskSampler, curriculum: Any, *, level: str, n: int, batch: int, prefix: str) -> None:
        self.sampler, self.curriculum = sampler, curriculum
        self.level, self.n, self.batch = level, n, max(1, batch)
        self.prefix = prefix
        self._queue: collections.deque[Job] = collections.deque()
        self._groups = itertools.count()

    def next(self) -> Job:
        if not self._queue:
            draws = (self.curriculum.next_batch(self.sampler, self.batch) if self.curriculum is not None
                     else self.sampler.next_prompts(self.batch))
            for d in draws:
                hard = bool(d.origin.get("hard"))
                if self.level == "episode":
                    key = f"{self.prefix}g{next(self._groups)}"
                    self._queue.extend(Job(d.seed, d.origin["id"], key, self.n, hard) for _ in range(self.n))
                else:
                    self._queue.append(Job(d.seed, d.origin["id"], hard=hard))
        return self._queue.popleft()

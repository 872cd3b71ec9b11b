"""Which groups to train on and which prompts to draw next: difficulty filtering, DAPO-style dynamic sampling, the
adaptive curriculum of the InfiGUI-G1 write-up, and a schedule that tightens a distance reward's threshold (the
rules and their sources: docs/algorithms.md, "Which groups train, and which prompts come next").

Correctness. A sample is *correct* by the reward's own accuracy notion, which the reward adapter of
``train.data.reward_fn`` stores as the part ``"correct"`` (1.0 or 0.0; not a summand of the total): AEPO and the
distance reward: a point inside the box (or an empty answer on a negative sample); GUI-R1 as released: accuracy 1;
GUI-R1's paper form: action, point and text all right. ``Correctness(threshold=t)`` instead calls ``reward >= t``
correct, for rewards scored elsewhere. A sample whose reward function raised carries the part ``"reward_failed"``
(see ``is_failed``); every function here leaves such samples out and counts them.

- ``filter_groups``: drop groups that are all correct (nothing left to learn; AEPO and GUI-R1) and, optionally, all
  wrong (GUI-R1's filter), and groups too small for a group baseline.
- ``dynamic_sample``: DAPO's dynamic sampling. Draw and score batches of prompts until the wanted number of
  informative groups (rewards not all equal: a zero-spread group has advantage 0 everywhere) is reached, or the
  draw budget is spent.
- ``AdaptiveCurriculum``: a running (EMA) success rate per prompt id and a bounded queue of hard prompts (running
  success below a bar, or the latest group had no correct sample), from which a fixed share of each batch is drawn,
  weighted by failure rate. ``state_dict()`` is plain JSON and restores the curriculum exactly, RNG included.
- ``ThresholdSchedule``: the ``threshold`` of ``train.rewards.distance_reward`` per training step, linear or in
  equal steps from ``start`` to ``end``; the reward adapter reads it at its current step.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal, Protocol

from train.samples import TrainSample

log = logging.getLogger(__name__)

__all__ = [
    "CORRECT_PART", "FAILED_PART", "AdaptiveCurriculum", "AdaptiveCurriculumConfig", "Correctness", "DynamicBatch",
    "FilterResult", "ThresholdSchedule", "dynamic_sample", "filter_groups", "is_failed", "reward_spread",
]

CORRECT_PART = "correct"
"""Reward part the adapter writes: 1.0 when the response is correct by the reward's own notion, else 0.0."""
FAILED_PART = "reward_failed"
"""Reward part (1.0) marking a sample whose reward function raised: its reward means nothing."""

Group = Sequence[TrainSample]


def is_failed(item: Any) -> bool:
    """True for a sample (or RewardResult) whose reward function raised (the ``"reward_failed"`` part is set)."""
    parts = getattr(item, "reward_parts", None)
    if parts is None:
        parts = getattr(item, "parts", None) or {}
    return bool(parts.get(FAILED_PART))


@dataclass(frozen=True, slots=True)
class Correctness:
    """When a sample counts as correct (see the module docstring)."""

    threshold: float | None = None
    """``reward >= threshold`` is correct; None: the reward's own notion, read from the part ``part``."""
    part: str = CORRECT_PART
    """The reward part holding 1.0 for a correct response, when ``threshold`` is None."""

    def __call__(self, sample: TrainSample) -> bool:
        if self.threshold is not None:
            return sample.reward >= self.threshold
        try:
            return sample.reward_parts[self.part] >= 0.5
        except KeyError:
            raise ValueError(
                f"sample has no {self.part!r} reward part (parts: {sorted(sample.reward_parts)}); score with "
                f"train.data.reward_fn, which adds it, or use Correctness(threshold=...)"
            ) from None


def _scored(group: Group) -> tuple[list[TrainSample], int]:
    """The group's samples whose reward is usable, and how many failed."""
    kept = [s for s in group if not is_failed(s)]
    return kept, len(group) - len(kept)


def reward_spread(group: Group) -> float:
    """max - min of the group's rewards (0 for fewer than two samples)."""
    rewards = [s.reward for s in group]
    return max(rewards) - min(rewards) if len(rewards) > 1 else 0.0


# -- difficulty filtering -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FilterResult:
    """Kept groups (failed samples removed) and why the others went."""

    kept: list[list[TrainSample]]
    total: int
    """Groups given."""
    all_correct: int
    all_wrong: int
    too_small: int
    """Groups with fewer than ``min_size`` usable samples."""
    failed_samples: int
    """Samples dropped because their reward function raised."""

    def metrics(self, prefix: str = "rollout/filter") -> dict[str, float]:
        return {f"{prefix}/groups": float(self.total), f"{prefix}/kept": float(len(self.kept)),
                f"{prefix}/all_correct": float(self.all_correct), f"{prefix}/all_wrong": float(self.all_wrong),
                f"{prefix}/too_small": float(self.too_small), f"{prefix}/failed_samples": float(self.failed_samples)}


def filter_groups(groups: Iterable[Group], *, drop_all_correct: bool = True, drop_all_wrong: bool = False,
                  correct: Correctness | None = None, min_size: int = 2) -> FilterResult:
    """Difficulty filtering of scored groups.

    Failed samples are removed first; a group left with fewer than ``min_size`` samples is dropped (a group of one
    has no baseline: its advantage is 0). Then a group whose every sample is correct is dropped when
    ``drop_all_correct`` (AEPO and GUI-R1 both do), and one with no correct sample when ``drop_all_wrong``
    (GUI-R1's filter; AEPO keeps them, since its miss reward 1 - 1/N still varies with N).
    """
    if min_size < 1:
        raise ValueError(f"min_size must be >= 1, got {min_size}")
    correct = correct or Correctness()
    kept: list[list[TrainSample]] = []
    total = all_correct = all_wrong = too_small = failed = 0
    for group in groups:
        total += 1
        usable, n_failed = _scored(group)
        failed += n_failed
        if len(usable) < min_size:
            too_small += 1
            continue
        n_correct = sum(correct(s) for s in usable)
        if n_correct == len(usable) and drop_all_correct:
            all_correct += 1
        elif n_correct == 0 and drop_all_wrong:
            all_wrong += 1
        else:
            kept.append(usable)
    return FilterResult(kept, total, all_correct, all_wrong, too_small, failed)


# -- dynamic sampling -----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DynamicBatch:
    """What ``dynamic_sample`` gathered."""

    groups: list[list[TrainSample]]
    """At most ``want`` informative groups, in the order drawn (failed samples removed)."""
    want: int
    draws: int
    """Calls to ``draw``."""
    drawn: int
    """Groups drawn in all."""
    filtered: int
    """Groups dropped as uninformative (rewards all equal, or too few usable samples)."""
    surplus: int
    """Informative groups drawn beyond ``want`` and left out."""
    failed_samples: int

    @property
    def complete(self) -> bool:
        return len(self.groups) >= self.want

    def metrics(self, prefix: str = "rollout/dynamic") -> dict[str, float]:
        return {f"{prefix}/draws": float(self.draws), f"{prefix}/drawn_groups": float(self.drawn),
                f"{prefix}/filtered_groups": float(self.filtered), f"{prefix}/kept_groups": float(len(self.groups)),
                f"{prefix}/surplus_groups": float(self.surplus), f"{prefix}/failed_samples": float(self.failed_samples),
                f"{prefix}/complete": float(self.complete)}


def dynamic_sample(draw: Callable[[int], Sequence[Group]], want: int, *, max_draws: int = 4,
                   draw_size: int | None = None, atol: float = 0.0,
                   accept: Callable[[list[TrainSample]], bool] | None = None) -> DynamicBatch:
    """DAPO's dynamic sampling: call ``draw(k)`` (sample and score ``k`` prompts, one group each) until ``want``
    informative groups are gathered or ``max_draws`` calls are spent.

    A group is informative when, after removing failed samples, it has at least two samples whose rewards spread
    by more than ``atol`` (``accept`` replaces that test). ``draw_size`` is ``k`` (default ``want``: a full batch
    each time, as DAPO does). Groups beyond ``want`` are dropped (counted in ``surplus``); when the budget runs out
    first the batch is short (``complete`` is False) and the caller decides whether to train on it.
    """
    if want < 1 or max_draws < 1:
        raise ValueError(f"want and max_draws must be >= 1, got want={want}, max_draws={max_draws}")
    k = want if draw_size is None else draw_size
    if k < 1:
        raise ValueError(f"draw_size must be >= 1, got {draw_size}")
    kept: list[list[TrainSample]] = []
    draws = drawn = filtered = surplus = failed = 0
    while len(kept) < want and draws < max_draws:
        groups = draw(k)
        draws += 1
        for group in groups:
            drawn += 1
            usable, n_failed = _scored(group)
            failed += n_failed
            ok = accept(usable) if accept is not None else len(usable) >= 2 and reward_spread(usable) > atol
            if not ok:
                filtered += 1
            elif len(kept) < want:
                kept.append(usable)
            else:
                surplus += 1
    if len(kept) < want:
        log.info("dynamic sampling: %d of %d informative groups after %d draws", len(kept), want, draws)
    return DynamicBatch(kept, want, draws, drawn, filtered, surplus, failed)


# -- adaptive curriculum --------------------------------------------------------------------------------------------


class PromptDrawer(Protocol):
    """What the curriculum needs from a sampler (``train.data.PromptSampler``)."""

    def next_prompts(self, n: int) -> list[Any]: ...

    def prompts_for(self, ids: Sequence[str]) -> list[Any]: ...


@dataclass(frozen=True, slots=True)
class AdaptiveCurriculumConfig:
    """Settings of the adaptive curriculum (see ``AdaptiveCurriculum``)."""

    ema: float = 0.3
    """Weight of the newest group's success rate in the running rate: s <- (1 - ema) s + ema r."""
    init: float | None = None
    """Running rate before the first observation; None: the first group's rate itself."""
    hard_below: float = 0.5
    """A prompt whose running success is below this is hard."""
    hard_fraction: float = 0.25
    """Share of each batch drawn from the hard queue: floor(hard_fraction * batch_size) prompts."""
    max_hard: int = 1024
    """Bound on the hard queue; past it the least hard (highest running success, then oldest) is dropped."""
    min_weight: float = 0.05
    """Floor of a hard prompt's draw weight 1 - s, so that no queued prompt is never drawn."""
    seed: int = 0
    """Seed of the RNG that picks hard prompts."""
    threshold: float | None = None
    """Correctness threshold on the reward; None: the reward's own notion (the ``"correct"`` part)."""

    def __post_init__(self) -> None:
        if not 0 < self.ema <= 1:
            raise ValueError(f"ema must be in (0, 1], got {self.ema}")
        if self.init is not None and not 0 <= self.init <= 1:
            raise ValueError(f"init must be in [0, 1] or None, got {self.init}")
        if not 0 <= self.hard_fraction <= 1:
            raise ValueError(f"hard_fraction must be in [0, 1], got {self.hard_fraction}")
        if self.max_hard < 1:
            raise ValueError(f"max_hard must be >= 1, got {self.max_hard}")
        if not 0 < self.min_weight <= 1:
            raise ValueError(f"min_weight must be in (0, 1], got {self.min_weight}")


STATE_VERSION = 1


class AdaptiveCurriculum:
    """Running success per prompt id and a hard-prompt queue that a share of every batch comes from.

    ``observe(groups)`` updates, for each group's prompt (its samples' ``origin["id"]``), the running rate
    ``s <- (1 - ema) * s + ema * r`` with ``r`` the group's share of correct samples (failed samples left out;
    the first observation sets ``s = r`` unless ``init`` is given; samples whose origin says ``demo``, recorded
    demonstrations mixed into a group by an online session's success replay, are not the policy's answers and are
    left out). A prompt is hard while ``s < hard_below`` or its
    latest group had no correct sample; hard prompts wait in a queue of at most ``max_hard``, most recently failed
    last. ``next_batch(sampler, batch_size)`` draws ``min(floor(hard_fraction * batch_size), queue length)``
    distinct hard prompts, each pick weighted by ``max(1 - s, min_weight)`` without replacement, and fills the rest
    from the sampler's ordinary stream. Hard prompts carry ``origin["hard"] = True``.
    """

    def __init__(self, config: AdaptiveCurriculumConfig | None = None) -> None:
        self.config = config or AdaptiveCurriculumConfig()
        self.correct = Correctness(self.config.threshold)
        self.success: dict[str, float] = {}
        self.seen: dict[str, int] = {}
        self.hard: dict[str, int] = {}
        """Hard prompt id -> the observation count when it last turned out hard (insertion order: oldest first)."""
        self.observations = 0
        self._rng = random.Random(self.config.seed)

    # -- updates ------------------------------------------------------------------------------------------------

    def observe(self, groups: Iterable[Group]) -> dict[str, float]:
        """Update running rates and the hard queue from scored groups; returns metrics."""
        cfg = self.config
        n_groups = skipped = 0
        for group in groups:
            usable = [s for s in _scored(group)[0] if not s.origin.get("demo")]  # a demonstration is no answer
            if not usable:
                skipped += 1
                continue
            pid = usable[0].origin.get("id")
            if pid is None:
                raise ValueError("a sample's origin has no 'id'; prompts from train.data sources carry one")
            pid = str(pid)
            rate = sum(self.correct(s) for s in usable) / len(usable)
            prev = self.success.get(pid, cfg.init)
            s = rate if prev is None else (1 - cfg.ema) * prev + cfg.ema * rate
            self.success[pid] = s
            self.seen[pid] = self.seen.get(pid, 0) + 1
            self.observations += 1
            n_groups += 1
            if s < cfg.hard_below or rate == 0:
                self.hard.pop(pid, None)
                self.hard[pid] = self.observations
            else:
                self.hard.pop(pid, None)
        while len(self.hard) > cfg.max_hard:
            # least hard first; among equals the one that failed longest ago
            easiest = max(self.hard, key=lambda i: (self.success[i], -self.hard[i]))
            del self.hard[easiest]
        rates = list(self.success.values())
        return {"curriculum/groups": float(n_groups), "curriculum/skipped_groups": float(skipped),
                "curriculum/hard_queue": float(len(self.hard)), "curriculum/tracked": float(len(rates)),
                "curriculum/mean_success": sum(rates) / len(rates) if rates else 0.0}

    def hard_ids(self) -> list[str]:
        """Queued hard prompt ids, hardest (lowest running success) first, most recently failed first among equals."""
        return sorted(self.hard, key=lambda i: (self.success[i], -self.hard[i]))

    def pick_hard(self, n: int) -> list[str]:
        """``n`` distinct hard ids (fewer if the queue is shorter), each pick weighted by ``max(1 - s, min_weight)``."""
        pool = list(self.hard)
        weights = [max(1.0 - self.success[i], self.config.min_weight) for i in pool]
        picked: list[str] = []
        for _ in range(min(n, len(pool))):
            r = self._rng.random() * sum(weights)
            j = 0
            while j < len(pool) - 1 and r >= weights[j]:
                r -= weights[j]
                j += 1
            picked.append(pool.pop(j))
            weights.pop(j)
        return picked

    def hard_count(self, batch_size: int) -> int:
        """How many prompts of a batch of ``batch_size`` come from the hard queue."""
        return min(math.floor(self.config.hard_fraction * batch_size), len(self.hard))

    def next_batch(self, sampler: PromptDrawer, batch_size: int) -> list[Any]:
        """``batch_size`` prompts: the hard share from the queue, the rest from ``sampler``'s stream."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        ids = self.pick_hard(self.hard_count(batch_size))
        hard = sampler.prompts_for(ids)
        found = {str(p.origin.get("id")) for p in hard}
        for gone in set(ids) - found:  # no longer in the data (or unreadable): forget it
            self.hard.pop(gone, None)
        hard = [replace(p, origin={**p.origin, "hard": True}) for p in hard]
        return hard + sampler.next_prompts(batch_size - len(hard))

    # -- checkpoints --------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Plain JSON: the config, the running rates, the queue and the RNG state."""
        version, internal, gauss = self._rng.getstate()
        return {"version": STATE_VERSION, "config": asdict(self.config), "success": dict(self.success),
                "seen": dict(self.seen), "hard": [[i, n] for i, n in self.hard.items()],
                "observations": self.observations, "rng": [version, list(internal), gauss]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` saved. This curriculum's own config is kept (a resumed run may change it);
        a different saved config is logged."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"curriculum state version {state.get('version')!r}; this handeye reads {STATE_VERSION}")
        if state.get("config") != asdict(self.config):
            log.info("curriculum config differs from the checkpoint's; keeping the current one: %s", self.config)
        self.success = {str(k): float(v) for k, v in state["success"].items()}
        self.seen = {str(k): int(v) for k, v in state["seen"].items()}
        self.hard = {str(i): int(n) for i, n in state["hard"]}
        self.observations = int(state["observations"])
        version, internal, gauss = state["rng"]
        self._rng.setstate((version, tuple(internal), gauss))

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> AdaptiveCurriculum:
        """A curriculum with the checkpoint's own config and state."""
        cur = cls(AdaptiveCurriculumConfig(**state["config"]))
        cur.load_state_dict(state)
        return cur


# -- threshold schedule ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ThresholdSchedule:
    """A reward threshold per training step, from ``start`` to ``end`` over ``steps`` steps, then held at ``end``.

    ``linear``: ``start + (end - start) * min(step, steps) / steps``.
    ``step``: ``stages`` equal jumps: ``start + (end - start) * k / stages`` with
    ``k = min(floor(step * stages / steps), stages)``.
    """

    start: float
    end: float
    steps: int
    kind: Literal["linear", "step"] = "linear"
    stages: int = 4

    def __post_init__(self) -> None:
        for name in ("start", "end"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.kind not in ("linear", "step"):
            raise ValueError(f"kind must be 'linear' or 'step', got {self.kind!r}")
        if self.stages < 1:
            raise ValueError(f"stages must be >= 1, got {self.stages}")

    def __call__(self, step: int) -> float:
        step = max(int(step), 0)
        if self.kind == "linear":
            frac = min(step, self.steps) / self.steps
        else:
            frac = min(step * self.stages // self.steps, self.stages) / self.stages
        return self.start + (self.end - self.start) * frac

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "steps": self.steps, "kind": self.kind, "stages": self.stages}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ThresholdSchedule:
        return cls(**data)

"""Scoring GUI grounding answers as the official evaluators do, and the report of an evaluation (the datasets are
loaded by ``envs.grounding``; a policy is run on them by ``agent.grounding_eval``).

Scoring (``point_in_box``): SeeClick's ScreenSpot script and ScreenSpot-Pro's ``eval_screenspot_pro.py`` both count a
point as a hit when ``x1 <= x <= x2 and y1 <= y <= y2`` (edges inside, normalized coordinates); ScreenSpot-v2 reuses
SeeClick's script. GUI-R1's evaluator uses the strict form (``x1 < x < x2``); ``strict=True`` reproduces it. A
negative sample (Pro's ``gt_type: negative``: the target is not on screen) is correct when the model declares the
target absent: a parsed action without a point (``infeasible``). An output that did not parse is ``wrong_format``: a
miss on every sample, positive or negative, as in the official scripts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

from devices.base import Box
from envs.errors import EnvError
from envs.grounding import GroundingSample, RejectedRecord


def point_in_box(x: float, y: float, box: Box, *, strict: bool = False) -> bool:
    """The official hit test on normalized coordinates: edges count (``x1 <= x <= x2``) unless strict."""
    if strict:
        return box.x1 < x < box.x2 and box.y1 < y < box.y2
    return box.x1 <= x <= box.x2 and box.y1 <= y <= box.y2


@dataclass(frozen=True, slots=True)
class GroundingPrediction:
    """A model's answer for one sample: normalized points, best first, or none (target absent)."""

    points: tuple[tuple[float, float], ...] = ()
    parse_error: str | None = None
    raw_output: str = ""

    @property
    def absent(self) -> bool:
        """The model parsed and named no point: it says the target is not on the screen."""
        return self.parse_error is None and not self.points

    @classmethod
    def from_decision(cls, decision: Any) -> GroundingPrediction:
        """The decision's action point first, then every candidate's point (duplicates dropped)."""
        if decision.action is None:
            return cls((), decision.parse_error or "no action", decision.raw_output)
        points: list[tuple[float, float]] = []
        for action in (decision.action, *decision.candidates):
            if action.point is not None and (p := (action.point.x, action.point.y)) not in points:
                points.append(p)
        return cls(tuple(points), None, decision.raw_output)


class GroundingOutcome(str, Enum):
    CORRECT = "correct"
    WRONG = "wrong"
    WRONG_FORMAT = "wrong_format"


@dataclass(frozen=True, slots=True)
class SampleResult:
    sample: GroundingSample
    prediction: GroundingPrediction
    outcome: GroundingOutcome
    """Top-1 outcome, as the official scripts report it."""
    any_hit: bool
    """Some candidate point hits (InfiGUI-G1's "exploration success"); equals top-1 for negatives."""

    @property
    def correct(self) -> bool:
        return self.outcome is GroundingOutcome.CORRECT


@dataclass(frozen=True, slots=True)
class BreakdownRow:
    key: str
    total: int
    correct: int
    any_correct: int

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else 0.0

    @property
    def any_accuracy(self) -> float:
        return self.any_correct / self.total if self.total else 0.0


#: the breakdowns a report offers: name -> the sample's key
BREAKDOWNS: dict[str, Callable[[GroundingSample], str]] = {
    "platform": lambda s: s.platform,
    "application": lambda s: s.application,
    "group": lambda s: s.group,
    "element_type": lambda s: s.element_type,
    "platform/element_type": lambda s: f"{s.platform}/{s.element_type}",
    "gt_type": lambda s: "negative" if s.negative else "positive",
}


@dataclass(frozen=True, slots=True)
class Abstention:
    """Abstentions counted apart from accuracy: on negative samples (the target is absent) declaring it absent is
    right; on positive ones it is wrong."""

    negatives: int
    abstained_correctly: int
    positives: int
    abstained_wrongly: int

    def line(self) -> str:
        share = f"{self.abstained_correctly / self.negatives:.1%}" if self.negatives else "-"
        return (f"abstention: {self.abstained_correctly}/{self.negatives} negative samples declared absent ({share}); "
                f"{self.abstained_wrongly}/{self.positives} positive samples declared absent wrongly")


@dataclass(frozen=True, slots=True)
class GroundingReport:
    results: tuple[SampleResult, ...]
    rejected: tuple[RejectedRecord, ...] = ()
    strict: bool = False

    @property
    def total(self) -> int:
        return len(self.results)

    @property
    def correct(self) -> int:
        return sum(r.correct for r in self.results)

    @property
    def any_correct(self) -> int:
        return sum(r.any_hit for r in self.results)

    @property
    def wrong_format(self) -> int:
        return sum(r.outcome is GroundingOutcome.WRONG_FORMAT for r in self.results)

    @property
    def accuracy(self) -> float:
        """Top-1 accuracy: the first point only."""
        return self.correct / self.total if self.total else 0.0

    @property
    def any_accuracy(self) -> float:
        return self.any_correct / self.total if self.total else 0.0

    @property
    def abstention(self) -> Abstention:
        negative = [r for r in self.results if r.sample.negative or r.sample.box is None]
        positive = [r for r in self.results if not (r.sample.negative or r.sample.box is None)]
        return Abstention(len(negative), sum(r.prediction.absent for r in negative), len(positive),
                          sum(r.prediction.absent for r in positive))

    def breakdown(self, by: str) -> tuple[BreakdownRow, ...]:
        """Counts and accuracies per value of one of BREAKDOWNS' keys, sorted by that value."""
        if by not in BREAKDOWNS:
            raise EnvError(f"unknown breakdown {by!r}; choose one of {sorted(BREAKDOWNS)}")
        key = BREAKDOWNS[by]
        rows: dict[str, list[int]] = {}
        for r in self.results:
            row = rows.setdefault(key(r.sample), [0, 0, 0])
            row[0] += 1
            row[1] += r.correct
            row[2] += r.any_hit
        return tuple(BreakdownRow(k, *rows[k]) for k in sorted(rows))

    def metrics(self) -> dict[str, float]:
        """Flat, namespaced numbers for the metrics log."""
        out = {"env/grounding/accuracy": self.accuracy, "env/grounding/any_accuracy": self.any_accuracy,
               "env/grounding/total": float(self.total), "env/grounding/wrong_format": float(self.wrong_format),
               "env/grounding/rejected": float(len(self.rejected))}
        for by in ("platform", "element_type"):
            for row in self.breakdown(by):
                out[f"env/grounding/{by}/{row.key or '-'}/accuracy"] = row.accuracy
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: totals, every breakdown, the rejected records and one line per sample."""
        return {
            "total": self.total, "correct": self.correct, "any_correct": self.any_correct,
            "accuracy": self.accuracy, "any_accuracy": self.any_accuracy, "wrong_format": self.wrong_format,
            "hit_test": "x1 < x < x2 (strict)" if self.strict else "x1 <= x <= x2 (edges inside)",
            "abstention": asdict(self.abstention),
            "breakdowns": {by: [{"key": r.key, "total": r.total, "correct": r.correct, "accuracy": r.accuracy,
                                 "any_correct": r.any_correct, "any_accuracy": r.any_accuracy}
                                for r in self.breakdown(by)] for by in BREAKDOWNS},
            "rejected": [{"file": str(r.file), "index": r.index, "kind": r.kind.value, "reason": r.reason}
                         for r in self.rejected],
            "samples": [{"id": r.sample.id, "outcome": r.outcome.value, "any_hit": r.any_hit,
                         "points": [list(p) for p in r.prediction.points], "parse_error": r.prediction.parse_error}
                        for r in self.results],
        }

    def table(self, by: str = "platform/element_type") -> str:
        """A plain-text table of one breakdown with the overall line, for the CLI to show."""
        lines = [f"{by:<32} {'n':>6} {'top-1':>7} {'any':>7}"]
        for row in self.breakdown(by):
            lines.append(f"{row.key or '-':<32} {row.total:>6} {row.accuracy:>7.1%} {row.any_accuracy:>7.1%}")
        lines.append(f"{'overall':<32} {self.total:>6} {self.accuracy:>7.1%} {self.any_accuracy:>7.1%}")
        if self.rejected:
            lines.append(f"({len(self.rejected)} records rejected at load; see report.rejected)")
        return "\n".join(lines)


def score_sample(sample: GroundingSample, prediction: GroundingPrediction | None, *, strict: bool = False
                 ) -> SampleResult:
    if prediction is None:
        prediction = GroundingPrediction(parse_error="no prediction for this sample")
    if prediction.parse_error is not None:
        return SampleResult(sample, prediction, GroundingOutcome.WRONG_FORMAT, False)
    if sample.negative or sample.box is None:
        ok = prediction.absent
        return SampleResult(sample, prediction, GroundingOutcome.CORRECT if ok else GroundingOutcome.WRONG, ok)
    hits = [point_in_box(x, y, sample.box, strict=strict) for x, y in prediction.points]
    top1 = bool(hits) and hits[0]
    return SampleResult(sample, prediction, GroundingOutcome.CORRECT if top1 else GroundingOutcome.WRONG, any(hits))


def score(samples: Sequence[GroundingSample],
          predictions: Mapping[str, GroundingPrediction] | Sequence[GroundingPrediction | None], *,
          strict: bool = False, rejected: Iterable[RejectedRecord] = ()) -> GroundingReport:
    """Score predictions (by sample id, or in the samples' order); a missing one is a wrong_format miss."""
    if isinstance(predictions, Mapping):
        found = [predictions.get(s.id) for s in samples]
    else:
        found = list(predictions)
        if len(found) != len(samples):
            raise EnvError(f"{len(found)} predictions for {len(samples)} samples; pass one per sample or a dict by id")
    results = tuple(score_sample(s, p, strict=strict) for s, p in zip(samples, found))
    return GroundingReport(results, tuple(rejected), strict)


__all__ = [
    "Abstention", "BREAKDOWNS", "BreakdownRow", "GroundingOutcome", "GroundingPrediction", "GroundingReport",
    "SampleResult", "point_in_box", "score", "score_sample",
]

"""GUI-R1's offline action metrics, Type, GR and SR, as pure functions (docs/algorithms.md, "Offline action
benchmarks", gives each formula with its source: ritzz-ai/GUI-R1 ``guir1/eval/eval_omni.py``).

Per step, with the ground truth's action name ``a``, reference point ``(x*, y*)``, text ``t*`` and the image's
``W x H``, and the prediction's action name, point ``(x, y)`` (both in image pixels) and text:

- type hit: the predicted name equals ``a`` exactly;
- grounding hit, for click-like ``a`` (click, long_press, moveto, doubleclick, rightclick):
  ``((x* - x) / W)^2 + ((y* - y) / H)^2 < 0.14^2``, whatever action was predicted; the reference point is the
  ground truth's first two numbers (a box's top-left corner, as released); a prediction without a point is at
  (0, 0), as the released reader gives it;
- text hit, for text-bearing ``a`` (open_app, type, scroll, select): ``token_f1(text*, text) >= 0.5``.

Aggregates: Type = type hits / steps; GR = grounding hits / click-like steps; SR = (grounding + text hits) /
(click-like + text-bearing steps): the released "step" score, which leaves out the steps that are neither and checks
no action name. The released code counts per category (the record's ``group`` and ``a``, and for GR and SR also the
kind) and only sums the categories that have at least one hit: a category with no hit leaves the numerator and the
denominator both. ``Scores.released`` reproduces that; ``Scores.plain`` counts every step.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["CLICK_LIKE", "GR_RADIUS", "NO_INPUT", "TEXT_ACTIONS", "Counts", "Scores", "StepScore",
           "grounding_hit", "score_step", "scores", "token_f1"]

CLICK_LIKE = ("click", "long_press", "moveto", "doubleclick", "rightclick")
TEXT_ACTIONS = ("open_app", "type", "scroll", "select")
GR_RADIUS = 0.14
NO_INPUT = "no input text"
"""GUI-R1's text for actions that take none; also what its reader gives when an answer has no ``input_text``."""


def token_f1(pred: str, gt: str) -> float:
    """GUI-R1's text match (``calculate_f1_score`` of ``eval_omni.py`` and ``r1gui.py``): every ``[`` and ``]``
    removed, lower-cased, whitespace-split into token sets; two single tokens where one contains the other score 1
    ("a" against "apple"); otherwise the set-overlap F1, 0 when nothing overlaps."""
    p_tokens = pred.replace("[", "").replace("]", "").lower().split()
    g_tokens = gt.replace("[", "").replace("]", "").lower().split()
    p_set, g_set = set(p_tokens), set(g_tokens)
    if len(p_set) == 1 and len(g_set) == 1:
        (p,), (g,) = p_set, g_set
        if p in g or g in p:
            return 1.0
    common = len(p_set & g_set)
    if common == 0:
        return 0.0
    precision, recall = common / len(p_set), common / len(g_set)
    return 2 * precision * recall / (precision + recall)


def grounding_hit(gt: tuple[float, float], pred: tuple[float, float] | None) -> bool:
    """The released GR test on normalized coordinates (x / W, y / H): squared distance under ``GR_RADIUS`` squared;
    no predicted point is the point (0, 0)."""
    x, y = pred if pred is not None else (0.0, 0.0)
    return (gt[0] - x) ** 2 + (gt[1] - y) ** 2 < GR_RADIUS ** 2


@dataclass(frozen=True, slots=True)
class StepScore:
    """One step's outcome: ``grounding`` and ``text`` are None where the ground truth's action has no location or
    no text to check."""

    group: str
    gt_action: str
    pred_action: str | None
    type_hit: bool
    grounding: bool | None
    text: bool | None

    @property
    def step_hit(self) -> bool | None:
        """The step's SR outcome: its grounding or text hit; None when it has neither (left out of SR)."""
        return self.grounding if self.grounding is not None else self.text


def score_step(group: str, gt_action: str, gt_point: tuple[float, float] | None, gt_text: str,
               pred_action: str | None, pred_point: tuple[float, float] | None, pred_text: str) -> StepScore:
    """Score one prediction against one ground truth (normalized points; see the module docstring)."""
    grounding = text = None
    if gt_action in CLICK_LIKE:
        grounding = gt_point is not None and grounding_hit(gt_point, pred_point)
    if gt_action in TEXT_ACTIONS:
        text = token_f1(gt_text, pred_text) >= 0.5
    return StepScore(group, gt_action, pred_action, pred_action == gt_action, grounding, text)


@dataclass(frozen=True, slots=True)
class Counts:
    """Hits over steps of one metric."""

    hits: int
    total: int

    @property
    def rate(self) -> float:
        return self.hits / self.total if self.total else 0.0


@dataclass(frozen=True, slots=True)
class Scores:
    """Type, GR and SR of a set of steps: ``released`` as eval_omni.py sums them, ``plain`` over every step."""

    released: dict[str, Counts]
    plain: dict[str, Counts]

    def to_dict(self) -> dict[str, dict[str, dict[str, float]]]:
        return {kind: {m: {"hits": c.hits, "total": c.total, "rate": c.rate} for m, c in table.items()}
                for kind, table in (("released", self.released), ("plain", self.plain))}


def _sum(hits: Counter, totals: Counter, keys: Iterable[tuple[str, ...]], released: bool) -> Counts:
    kept = [k for k in keys if hits[k] > 0] if released else list(keys)
    return Counts(sum(hits[k] for k in kept), sum(totals[k] for k in kept))


def scores(steps: Sequence[StepScore]) -> Scores:
    """Type, GR and SR of ``steps``, both as released and plain (see the module docstring)."""
    hits: Counter = Counter()
    totals: Counter = Counter()
    for s in steps:
        cat = (s.group, s.gt_action)
        totals[cat] += 1
        hits[cat] += s.type_hit
        for kind, outcome in (("grounding", s.grounding), ("text", s.text)):
            if outcome is not None:
                totals[(*cat, kind)] += 1
                hits[(*cat, kind)] += outcome
    type_keys = [k for k in totals if len(k) == 2]
    gr_keys = [k for k in totals if k[-1] == "grounding" and len(k) == 3]
    text_keys = [k for k in totals if k[-1] == "text" and len(k) == 3]
    out = {}
    for released in (True, False):
        out[released] = {"type": _sum(hits, totals, type_keys, released),
                         "gr": _sum(hits, totals, gr_keys, released),
                         "sr": _sum(hits, totals, gr_keys + text_keys, released)}
    return Scores(out[True], out[False])

"""Collapse monitors: cheap per-step statistics of the scored groups that show an RL run going wrong early.

RL on verifiable rewards fails in a few recognisable ways, each visible in the responses long before the held-out
accuracy moves:

* **No learning signal.** Every group's rewards are equal (all right or all wrong), so every advantage is 0 and the
  update does nothing: ``collapse/zero_std_group_share`` -> 1, ``collapse/group_reward_std`` -> 0.
* **Answer-count hacking.** Without AEPO's collinear penalty the policy learns to emit many points along a line
  (InfiGUI-G1's ablation: 6.6-8.2 answers per sample): ``collapse/answers_per_sample`` explodes,
  ``collapse/collinear_rate`` rises.
* **Mode collapse of the points.** The first point stops depending on the screen and drifts to one place, most
  often the centre: ``collapse/point_std_x`` / ``_y`` shrink, ``collapse/center_share`` -> 1.
* **Format collapse.** Responses stop parsing: ``collapse/parse_fail_rate`` rises.
* **Policy drift.** The KL to the reference or the PPO clip fraction grows past what a stable run shows
  (read from the learner's ``train/kl``, ``train/approx_kl`` and ``train/clipfrac``).

``collapse_metrics(groups)`` computes the statistics; ``CollapseMonitor`` keeps a short history of them and returns
``CollapseWarning``s for the failure modes above (warnings, never exceptions: the caller decides whether to stop).
``EarlyStopping`` watches a held-out metric and says when it has stopped improving.

Points are read from the response text: InfiGUI-G1 point lists ``[{"point_2d": [x, y]}, ...]`` or GUI-R1 action
lists ``[{'action': ..., 'point': [x, y], 'input_text': ...}]`` inside ``<answer>``, after any ``<think>`` block,
in the pixel space of the model-input image (``TrainSample.input_size``), which normalises them to [0, 1].
"""

from __future__ import annotations

import enum
import itertools
import logging
import math
import re
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from train.collinear import is_collinear
from train.rewards import MAX_OUTPUT_CHARS, parse_point_list, read_literal
from train.samples import TrainSample

log = logging.getLogger(__name__)

__all__ = [
    "CollapseKind",
    "CollapseMonitor",
    "CollapseThresholds",
    "CollapseWarning",
    "EarlyStopping",
    "collapse_metrics",
    "response_points",
]

PointXY = tuple[float, float]
ParseFn = Callable[[str], list[PointXY] | None]

_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_NO_TARGET = (-100, -100)  # GUI-R1's "this action has no point"


# --------------------------------------------------------------------------------------------------------------------
# Reading points from a response
# --------------------------------------------------------------------------------------------------------------------


def _action_list_points(answer: str) -> list[PointXY] | None:
    """Points of a GUI-R1 action list (a Python literal list of dicts with ``point``); None if it is not one.
    Actions without a target (``[-100, -100]``) contribute no point."""
    if len(answer) > MAX_OUTPUT_CHARS:
        return None
    try:
        data = read_literal(answer.strip())
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(data, list) or not all(isinstance(item, dict) and "point" in item for item in data):
        return None
    points = []
    for item in data:
        p = item["point"]
        if not isinstance(p, (list, tuple)) or len(p) != 2:
            return None
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in p):
            return None
        if tuple(p) != _NO_TARGET:
            points.append((p[0], p[1]))
    return points


def response_points(text: str) -> list[PointXY] | None:
    """The points a response proposes, in model-input pixels, or None when it does not parse.

    Reads the text after the last ``</think>`` (the whole text without one): first as an InfiGUI-G1 point list
    (``train.rewards.parse_point_list``), then, from inside ``<answer>...</answer>`` when present, as a GUI-R1
    action list. Lenient on purpose: the monitors measure what the model proposes; the reward functions judge the
    format.
    """
    answer = text.rpartition("</think>")[2] if "</think>" in text else text
    m = _ANSWER_RE.search(answer)
    if m is not None:
        answer = m.group(1)
    points = parse_point_list(answer)
    if points is not None:
        return points
    return _action_list_points(answer)


# --------------------------------------------------------------------------------------------------------------------
# Per-step statistics
# --------------------------------------------------------------------------------------------------------------------


def _pstd(values: Sequence[float]) -> float:
    """Population standard deviation (0 for fewer than two values)."""
    if len(values) < 2:
        return 0.0
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def collapse_metrics(
    groups: Sequence[Sequence[TrainSample]],
    *,
    parse: ParseFn = response_points,
    center_radius: float = 0.05,
    zero_std_atol: float = 1e-6,
) -> dict[str, float]:
    """Collapse statistics of one step's scored groups, under ``collapse/`` keys.

    Always present (for at least one sample):

    * ``reward_mean``, ``reward_std``: over all samples (population std).
    * ``group_reward_std``: mean over groups of each group's population reward std (what the advantages see).
    * ``zero_std_group_share``: share of groups whose rewards span at most ``zero_std_atol`` (a group of one counts).
    * ``answers_per_sample``, ``answers_max``: number of proposed points per response; a response that does not
      parse counts 0 here and 1 in ``parse_fail_rate`` (share of responses that do not parse).
    * ``collinear_rate``: share of responses with three or more points of which some three lie on one line
      (``train.collinear.is_collinear``, the AEPO penalty's test).
    * ``response_tokens_mean``: mean number of response token ids.
    * ``samples``, ``groups``: counts.

    Present only when defined (points are normalised by the sample's model-input size, x / w' and y / h'; samples
    with an unknown size ``(0, 0)`` are left out):

    * ``point_std_x``, ``point_std_y``: population std of the first points' normalised x and y over the batch
      (needs two responses with a point).
    * ``center_share``: share of responses with a point whose first point lies within ``center_radius`` (Euclidean,
      normalised units) of the image centre (0.5, 0.5).
    * ``pairwise_dist``: mean over responses with two or more points of the mean Euclidean distance between their
      points, normalised units.

    Args:
        groups: scored groups, each the samples of one prompt.
        parse: response text -> points in model-input pixels, or None when it does not parse.
        center_radius: radius of the "centre" disc, in normalised units (0.05 = 5% of the image side).
        zero_std_atol: largest reward spread still counted as zero.
    """
    samples = [s for g in groups for s in g]
    if not samples:
        return {}
    rewards = [float(s.reward) for s in samples]
    group_stds = [_pstd([float(s.reward) for s in g]) for g in groups if g]
    zero_std = [max(s.reward for s in g) - min(s.reward for s in g) <= zero_std_atol for g in groups if g]

    counts: list[int] = []
    failures = collinear = 0
    first_x: list[float] = []
    first_y: list[float] = []
    centred = 0
    pair_means: list[float] = []
    for s in samples:
        points = parse(s.response_text)
        if points is None:
            failures += 1
            counts.append(0)
            continue
        counts.append(len(points))
        collinear += is_collinear(points)
        w, h = s.input_size
        if not points or w <= 0 or h <= 0:
            continue
        norm = [(x / w, y / h) for x, y in points]
        fx, fy = norm[0]
        first_x.append(fx)
        first_y.append(fy)
        centred += math.hypot(fx - 0.5, fy - 0.5) <= center_radius
        if len(norm) >= 2:
            dists = [math.dist(a, b) for a, b in itertools.combinations(norm, 2)]
            pair_means.append(sum(dists) / len(dists))

    n = len(samples)
    out = {
        "reward_mean": sum(rewards) / n,
        "reward_std": _pstd(rewards),
        "group_reward_std": sum(group_stds) / len(group_stds),
        "zero_std_group_share": sum(zero_std) / len(zero_std),
        "answers_per_sample": sum(counts) / n,
        "answers_max": float(max(counts)),
        "parse_fail_rate": failures / n,
        "collinear_rate": collinear / n,
        "response_tokens_mean": sum(len(s.response_ids) for s in samples) / n,
        "samples": float(n),
        "groups": float(len(group_stds)),
    }
    if len(first_x) >= 2:
        out["point_std_x"] = _pstd(first_x)
        out["point_std_y"] = _pstd(first_y)
    if first_x:
        out["center_share"] = centred / len(first_x)
    if pair_means:
        out["pairwise_dist"] = sum(pair_means) / len(pair_means)
    return {f"collapse/{k}": float(v) for k, v in out.items()}


# --------------------------------------------------------------------------------------------------------------------
# The monitor
# --------------------------------------------------------------------------------------------------------------------


class CollapseKind(enum.Enum):
    """The failure modes ``CollapseMonitor`` flags."""

    REWARD_STD_ZERO = "reward_std_zero"
    """Within-group reward std below the threshold for ``patience`` consecutive steps: no learning signal."""
    ALL_GROUPS_ZERO_STD = "all_groups_zero_std"
    """Every group of this step has equal rewards: this update had no signal at all."""
    ANSWERS_EXPLODING = "answers_exploding"
    """Mean answers per sample above the threshold: the multi-answer reward hack."""
    CENTER_COLLAPSE = "center_collapse"
    """Most first points sit at the image centre: the points no longer depend on the screen."""
    PARSE_FAILURES = "parse_failures"
    """Too many responses do not parse: format collapse."""
    KL_HIGH = "kl_high"
    """KL to the reference policy (``train/kl``) above the threshold."""
    APPROX_KL_HIGH = "approx_kl_high"
    """KL between the sampling and the updated policy (``train/approx_kl``) above the threshold."""
    CLIPFRAC_HIGH = "clipfrac_high"
    """PPO clip fraction (``train/clipfrac``) above the threshold: updates too large for the trust region."""


@dataclass(frozen=True, slots=True)
class CollapseThresholds:
    """When ``CollapseMonitor`` raises each flag. A threshold of None turns that flag off."""

    patience: int = 5
    """Consecutive steps the within-group reward std must stay below ``min_group_reward_std``."""
    min_group_reward_std: float | None = 1e-3
    """``collapse/group_reward_std`` below this counts as no signal."""
    all_zero_std: bool = True
    """Flag a step whose every group has equal rewards."""
    max_answers_per_sample: float | None = 4.0
    """``collapse/answers_per_sample`` above this is flagged (InfiGUI-G1 converges to 1.4-2.1; the hack to 6.6-8.2)."""
    max_center_share: float | None = 0.8
    """``collapse/center_share`` above this is flagged."""
    max_parse_fail_rate: float | None = 0.5
    """``collapse/parse_fail_rate`` above this is flagged."""
    max_kl: float | None = 0.1
    """``train/kl`` above this is flagged."""
    max_approx_kl: float | None = 0.05
    """``train/approx_kl`` above this is flagged."""
    max_clipfrac: float | None = 0.3
    """``train/clipfrac`` above this is flagged."""

    def __post_init__(self) -> None:
        if self.patience < 1:
            raise ValueError(f"patience must be >= 1 step, got {self.patience}")


@dataclass(frozen=True, slots=True)
class CollapseWarning:
    """One raised flag: which failure mode, at which step, the value seen and the threshold it crossed."""

    kind: CollapseKind
    step: int
    value: float
    threshold: float
    message: str

    def __str__(self) -> str:
        return f"step {self.step}: {self.message}"


# kind -> (metric key, thresholds field, what it means) for the flags that compare one value with a bound
_BOUNDS: tuple[tuple[CollapseKind, str, str, str], ...] = (
    (CollapseKind.ANSWERS_EXPLODING, "collapse/answers_per_sample", "max_answers_per_sample",
     "answers per sample {v:.2f} > {t:g}: the policy may be hacking the multi-answer reward (is the collinear "
     "penalty on?)"),
    (CollapseKind.CENTER_COLLAPSE, "collapse/center_share", "max_center_share",
     "{v:.0%} of first points are at the image centre (> {t:.0%}): the points no longer follow the screen"),
    (CollapseKind.PARSE_FAILURES, "collapse/parse_fail_rate", "max_parse_fail_rate",
     "{v:.0%} of responses do not parse (> {t:.0%}): format collapse"),
    (CollapseKind.KL_HIGH, "train/kl", "max_kl",
     "KL to the reference {v:.3g} > {t:g}: the policy is drifting; raise kl_coef or lower the learning rate"),
    (CollapseKind.APPROX_KL_HIGH, "train/approx_kl", "max_approx_kl",
     "approx KL {v:.3g} > {t:g}: the update moved the policy far; lower the learning rate"),
    (CollapseKind.CLIPFRAC_HIGH, "train/clipfrac", "max_clipfrac",
     "clip fraction {v:.2f} > {t:g}: updates are too large for the trust region; lower the learning rate"),
)


class CollapseMonitor:
    """Flags the classic RL failure modes from each step's metrics (see the module docstring).

    Feed it every step with ``update(step, metrics)`` (the ``collapse/`` metrics merged with the learner's
    ``train/`` ones), or ``observe(step, groups, learner_metrics)`` which computes the collapse metrics first. Both
    return the flags raised at this step; a flag is logged at WARNING level when it turns on, not again while it
    stays on. Missing metrics simply raise no flag.

    Args:
        thresholds: when each flag is raised.
        history: how many steps of metrics to keep (``history`` attribute, newest last).
    """

    def __init__(self, thresholds: CollapseThresholds | None = None, *, history: int = 100) -> None:
        self.thresholds = thresholds if thresholds is not None else CollapseThresholds()
        if history < self.thresholds.patience:
            raise ValueError(f"history ({history}) must hold at least patience ({self.thresholds.patience}) steps")
        self.history: deque[tuple[int, dict[str, float]]] = deque(maxlen=history)
        self.active: frozenset[CollapseKind] = frozenset()

    def observe(self, step: int, groups: Sequence[Sequence[TrainSample]],
                learner_metrics: Mapping[str, float] | None = None, *, parse: ParseFn = response_points,
                center_radius: float = 0.05) -> tuple[dict[str, float], list[CollapseWarning]]:
        """``collapse_metrics(groups)`` merged with ``learner_metrics``, then ``update``: (the collapse metrics,
        the flags)."""
        metrics = collapse_metrics(groups, parse=parse, center_radius=center_radius)
        return metrics, self.update(step, {**(learner_metrics or {}), **metrics})

    def update(self, step: int, metrics: Mapping[str, float]) -> list[CollapseWarning]:
        """Record one step's metrics; return the flags raised at this step."""
        finite = {k: float(v) for k, v in metrics.items() if _is_finite_number(v)}
        self.history.append((int(step), finite))
        t = self.thresholds
        flags: list[CollapseWarning] = []

        if t.min_group_reward_std is not None and len(self.history) >= t.patience:
            recent = [m.get("collapse/group_reward_std") for _, m in list(self.history)[-t.patience:]]
            if all(v is not None and v < t.min_group_reward_std for v in recent):
                flags.append(CollapseWarning(
                    CollapseKind.REWARD_STD_ZERO, step, recent[-1], t.min_group_reward_std,
                    f"within-group reward std below {t.min_group_reward_std:g} for {t.patience} steps: the "
                    "advantages are ~0 and nothing is learned; make the tasks harder or easier, or filter groups"))
        share = finite.get("collapse/zero_std_group_share")
        if t.all_zero_std and share is not None and share >= 1.0:
            flags.append(CollapseWarning(
                CollapseKind.ALL_GROUPS_ZERO_STD, step, share, 1.0,
                "every group has equal rewards: this update had no learning signal"))
        for kind, key, field, text in _BOUNDS:
            bound = getattr(t, field)
            value = finite.get(key)
            if bound is not None and value is not None and value > bound:
                flags.append(CollapseWarning(kind, step, value, bound, text.format(v=value, t=bound)))

        now = frozenset(f.kind for f in flags)
        for f in flags:
            if f.kind not in self.active:
                log.warning("collapse monitor: %s", f)
        self.active = now
        return flags

    def state_dict(self) -> dict[str, Any]:
        """The history and active flags, JSON-serialisable (for checkpoints)."""
        return {"history": [[s, m] for s, m in self.history], "active": sorted(k.value for k in self.active)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""
        self.history.clear()
        for s, m in state["history"]:
            self.history.append((int(s), {str(k): float(v) for k, v in m.items()}))
        self.active = frozenset(CollapseKind(k) for k in state.get("active", ()))


def _is_finite_number(v: object) -> bool:
    try:
        return math.isfinite(float(v))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


# --------------------------------------------------------------------------------------------------------------------
# Early stopping
# --------------------------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _EarlyStoppingState:
    best: float | None = None
    best_step: int | None = None
    bad_evals: int = 0
    evals: int = 0


class EarlyStopping:
    """Stop when a held-out metric has not improved for ``patience`` evaluations.

    An evaluation improves when its value beats the best so far by more than ``min_delta`` (``mode="max"``: higher is
    better, as for accuracy; ``"min"``: lower is better, as for a loss). The first evaluation always improves. A
    non-finite value never improves.

    Args:
        patience: evaluations without improvement before ``should_stop`` turns True (>= 1).
        min_delta: smallest change that counts as an improvement (>= 0).
        mode: "max" or "min".
    """

    def __init__(self, patience: int, min_delta: float = 0.0, mode: Literal["max", "min"] = "max") -> None:
        if patience < 1:
            raise ValueError(f"patience must be >= 1 evaluation, got {patience}")
        if not (min_delta >= 0 and math.isfinite(min_delta)):
            raise ValueError(f"min_delta must be a finite number >= 0, got {min_delta}")
        if mode not in ("max", "min"):
            raise ValueError(f"mode must be 'max' (accuracy) or 'min' (loss), got {mode!r}")
        self.patience = patience
        self.min_delta = float(min_delta)
        self.mode = mode
        self._s = _EarlyStoppingState()

    def update(self, value: float, step: int | None = None) -> bool:
        """Record one evaluation (``step``: the training step it was taken at; default: the evaluation's index).
        Returns True when it is a new best."""
        value = float(value)
        self._s.evals += 1
        step = self._s.evals - 1 if step is None else int(step)
        best = self._s.best
        if not math.isfinite(value):
            log.warning("early stopping: non-finite held-out value %s at step %s counts as no improvement", value, step)
            improved = False
        elif best is None:
            improved = True
        elif self.mode == "max":
            improved = value > best + self.min_delta
        else:
            improved = value < best - self.min_delta
        if improved:
            self._s.best, self._s.best_step, self._s.bad_evals = value, step, 0
        else:
            self._s.bad_evals += 1
        return improved

    @property
    def should_stop(self) -> bool:
        """True once ``patience`` evaluations in a row did not improve."""
        return self._s.bad_evals >= self.patience

    @property
    def best(self) -> float | None:
        """The best value so far (None before the first evaluation)."""
        return self._s.best

    @property
    def best_step(self) -> int | None:
        """The step of the best value."""
        return self._s.best_step

    @property
    def bad_evals(self) -> int:
        """Evaluations since the last improvement."""
        return self._s.bad_evals

    def state_dict(self) -> dict[str, Any]:
        """Settings and progress, JSON-serialisable (for checkpoints)."""
        return {"patience": self.patience, "min_delta": self.min_delta, "mode": self.mode, **asdict(self._s)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what ``state_dict`` returned (settings included)."""
        self.patience = int(state["patience"])
        self.min_delta = float(state["min_delta"])
        self.mode = state["mode"]
        best = state["best"]
        best_step = state["best_step"]
        self._s = _EarlyStoppingState(best=None if best is None else float(best),
                                      best_step=None if best_step is None else int(best_step),
                                      bad_evals=int(state["bad_evals"]), evals=int(state["evals"]))

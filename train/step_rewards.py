"""The online step reward: an answer scored from the environment's step verifier (docs/algorithms.md, "The online
step reward").

Offline, a reward compares an answer with a ground-truth box (``train.rewards``); online there is no box: the
environment's step verifier says which of an answer's actions are right, and each reward with an online form keeps
its own weighting of that verdict (``StepRule``; which reward has which rule is ``train.reward_registry``'s
``RewardSpec.online``). The actors of an online session or a fleet (``agent.online.actors``) read each sampled
answer with ``read_answer``, have the verifier check every action, and score it with ``answer_reward``.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Sequence

from policy.backends.base import Sample
from policy.base import HistoryEntry
from policy.coords import ModelSpace
from policy.errors import FormatParseError
from policy.formats import ModelFormat, Parsed
from policy.presets import ModelPreset
from train.collinear import is_collinear

__all__ = ["StepRule", "answer_reward", "cut_off", "read_answer", "step_reward"]

Scored = tuple[float, dict[str, float]]
"""(reward, parts): the parts are format, accuracy, correct (what the curriculum and the filters count), answers."""


class StepRule(enum.Enum):
    """How an online reward weights the step verifier's verdicts on an answer's actions (``step_reward``)."""

    AEPO = "aepo"
    """AEPO's released reward, the verifier in place of the box test (collinear point lists score -1)."""
    AEPO_NO_COLLINEAR = "aepo_no_collinear"
    """The same without the collinear penalty (the paper's ablation)."""
    GUIR1 = "guir1"
    """GUI-R1's released weighting: 0.2 x format (one action) + 0.8 x accuracy (the first action right)."""


def step_reward(hits: Sequence[bool] | None, *, collinear: bool = False, rule: StepRule = StepRule.AEPO) -> Scored:
    """(reward, parts) of one answer from the step verifier's verdicts on its actions, in order; ``hits`` None is an
    answer that does not parse (or was cut off: ``read_answer``), ``collinear`` whether its points hold a collinear
    triple.

    ``StepRule.AEPO``: an answer that does not parse scores -1; N actions (points) of which the first correct one is
    the k-th score 1 + 1/sqrt(N k); none correct, 1 - 1/N; three collinear points, -1. With one action per answer
    (the families other than InfiGUI-G1) that is 2 for a right action, 0 for a wrong one and -1 for no parsable
    answer. ``parts["correct"]`` is 1 when some action is right. ``StepRule.AEPO_NO_COLLINEAR``: the same, a
    collinear list scored like any other.

    ``StepRule.GUIR1``: 0.2 x format + 0.8 x accuracy, each 0 or 1: format is an answer that parses and holds exactly
    one action (GUI-R1 answers one action a step), accuracy is its first action being right. A right single answer
    scores 1, a right first point of a longer list 0.8, a wrong single answer 0.2, an answer that does not parse 0.
    ``parts["correct"]`` is the accuracy (the first action is the one executed)."""
    return _RULES[rule](hits, collinear)


def _aepo(hits: Sequence[bool] | None, collinear: bool) -> Scored:
    if hits is None:
        return -1.0, {"format": 0.0, "accuracy": -1.0, "correct": 0.0, "answers": 0.0}
    n = len(hits)
    if n == 0 or collinear:
        return -1.0, {"format": 0.0, "accuracy": -1.0, "correct": 0.0, "answers": float(n)}
    k = next((i + 1 for i, h in enumerate(hits) if h), None)
    accuracy = 1.0 / math.sqrt(n * k) if k else -1.0 / n
    return 1.0 + accuracy, {"format": 1.0, "accuracy": accuracy, "correct": 1.0 if k else 0.0, "answers": float(n)}


def _aepo_no_collinear(hits: Sequence[bool] | None, collinear: bool) -> Scored:
    return _aepo(hits, False)


def _guir1(hits: Sequence[bool] | None, collinear: bool) -> Scored:
    n = 0 if hits is None else len(hits)
    fmt = 1.0 if n == 1 else 0.0
    accuracy = 1.0 if hits and hits[0] else 0.0
    return 0.2 * fmt + 0.8 * accuracy, {"format": fmt, "accuracy": accuracy, "correct": accuracy, "answers": float(n)}


_RULES: dict[StepRule, Callable[[Sequence[bool] | None, bool], Scored]] = {
    StepRule.AEPO: _aepo, StepRule.AEPO_NO_COLLINEAR: _aepo_no_collinear, StepRule.GUIR1: _guir1,
}


def cut_off(sample: Sample) -> bool:
    """Whether a sampled answer ran into the token cap (``finish_reason`` "length") instead of ending.

    Such an answer is not scored from what the lenient run-time parser recovers from it: the parser reads the points
    of a cut-off list (so that ``agent run`` acts on what the model meant), but as a reward that pays for lists that
    grow past the cap. Seen on hard screens (docs/benchmarks.md): 4-point lists cut mid-point scored 1 - 1/N instead
    of -1, and the policy drifted to answers that never end. The released AEPO reward, which the offline learner
    uses, reads such text as malformed (-1); the online step reward does too."""
    return sample.finish_reason == "length"


def read_answer(sample: Sample, fmt: ModelFormat, space: ModelSpace, preset: ModelPreset,
                history: Sequence[HistoryEntry]) -> Parsed | None:
    """The answer of a sample as the step reward reads it: None when it was cut off at the
    token cap (``cut_off``) or fails the family's reward-side reading (``ModelFormat.strict_parse``: for InfiGUI-G1
    the released reward parser, whose complete JSON list the run-time parser does not demand; on hard screens online
    AEPO and GRPO learned to end answers with broken JSON that the run-time parser still read: docs/benchmarks.md,
    "Setting hard")."""
    if cut_off(sample):
        return None
    try:
        return fmt.strict_parse(sample.text, space, preset, history=history)
    except FormatParseError:
        return None


def answer_reward(answer: Parsed | None, hits: Sequence[bool], rule: StepRule) -> Scored:
    """The step reward of an answer ``read_answer`` gave (None: it scores as one that does not parse) whose actions
    the verifier found right or wrong (``hits``, in order)."""
    if answer is None:
        return step_reward(None, rule=rule)
    return step_reward(hits, collinear=is_collinear(answer.model_points), rule=rule)

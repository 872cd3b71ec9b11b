"""The three arms' rewards and the held-out score, on the InfiGUI-G1 no_think point list.

- ``aepo``: ``train.rewards.aepo_reward(think=False, variant="code")``, the released InfiGUI-G1 reward.
- ``aepo_no_collinear``: the same without the collinear penalty (the paper's ablation): a point list with three
  collinear points is scored like any other (1 + 1/sqrt(N k) on a hit, 1 - 1/N on a miss).
- ``grpo``: single answers, GUI-R1's released weighting applied to this format: 0.2 x format + 0.8 x hit, where
  format = the answer is a list of exactly one point and hit = its first point lies in the box (inclusive).

``top1_hit`` is the held-out metric: the first point of the greedy answer lies in the box.
"""

from __future__ import annotations

import math

from train.learner import RolloutPrompt
from train.rewards import RewardResult, aepo_reward, parse_point_list


def _in_box(point: tuple[float, float], box: tuple[float, float, float, float]) -> bool:
    x1, y1, x2, y2 = box
    return x1 <= point[0] <= x2 and y1 <= point[1] <= y2


def top1_hit(prompt: RolloutPrompt, text: str) -> bool:
    points = parse_point_list(text)
    return bool(points) and _in_box(points[0], prompt.target)


def aepo(prompt: RolloutPrompt, text: str) -> RewardResult:
    return aepo_reward(text, prompt.target, think=False, variant="code")


def aepo_no_collinear(prompt: RolloutPrompt, text: str) -> RewardResult:
    r = aepo_reward(text, prompt.target, think=False, variant="code")
    if not r.info["is_collinear"]:
        return r
    points = parse_point_list(text) or []
    n = len(points)
    rank = next((i for i, p in enumerate(points, 1) if _in_box(p, prompt.target)), None)
    acc = -1.0 / n if rank is None else 1.0 / math.sqrt(n * rank)
    info = {**r.info, "format_ok": True, "has_correct": rank is not None, "first_correct": rank == 1, "rank": rank}
    return RewardResult(1.0 + acc, {"format": 1.0, "accuracy": acc}, info)


def grpo_single(prompt: RolloutPrompt, text: str) -> RewardResult:
    points = parse_point_list(text)
    fmt = 1.0 if points is not None and len(points) == 1 else 0.0
    hit = 1.0 if points and _in_box(points[0], prompt.target) else 0.0
    return RewardResult(0.2 * fmt + 0.8 * hit, {"format": fmt, "accuracy": hit},
                        {"num_pred": len(points) if points is not None else 0, "first_correct": bool(hit)})


ARMS = {
    "aepo": ("aepo", aepo),
    "grpo": ("grpo", grpo_single),
    "aepo_no_collinear": ("aepo", aepo_no_collinear),
}
"""arm name -> (Learner algo, reward function)."""


def answers_per_sample(texts: list[str]) -> float:
    """Mean number of points over the responses that parse (nan when none does)."""
    counts = [len(p) for p in (parse_point_list(t) for t in texts) if p is not None]
    return sum(counts) / len(counts) if counts else math.nan

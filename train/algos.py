"""Policy-gradient math for RL on verifiable rewards: group advantages, the PPO surrogate, the k3 KL term.

Two recipes are covered (the formulas, their papers and released files: docs/algorithms.md, "Advantages" and
"The update"):

* InfiGUI-G1 / AEPO: ``rloo_advantages`` + ``policy_loss(clip_low=0.2, clip_high=0.4, dual_clip=3.0)``,
  token-mean, no KL.
* GUI-R1 / GRPO: ``grpo_advantages`` (unbiased std, eps 1e-6) + ``policy_loss(clip_low=0.2, clip_high=0.2)``
  + ``0.01 * kl_k3(logprobs, ref_logprobs, mask)``.

Every function is pure and synchronous. Shapes: ``B`` samples (responses), ``T`` response tokens, ``V`` vocabulary.
A *group* is the set of samples drawn for one prompt; it is named by an integer id, and ids may come in any order
and need not be contiguous. An advantage is one scalar per sample, broadcast to all of its response tokens.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Literal

import torch
from torch import Tensor

__all__ = [
    "PolicyLossMetrics",
    "grpo_advantages",
    "kl_k3",
    "masked_mean",
    "policy_loss",
    "rloo_advantages",
    "token_logprobs",
    "zero_std_groups",
]

# exp() of a log-ratio beyond this overflows float32 into inf, and inf * 0 gradients into nan; verl clamps the same.
_MAX_LOG_RATIO = 20.0
# verl's low_var_kl clamps the k3 value to [-10, 10]; GUI-R1 inherits it.
_K3_CLAMP = 10.0


# --------------------------------------------------------------------------------------------------------------------
# Group advantages
# --------------------------------------------------------------------------------------------------------------------


def _group_index(rewards: Tensor, group_ids: Tensor) -> tuple[Tensor, int]:
    """Dense group index per sample ``[B]`` (0..G-1) and the number of groups G.

    rewards: ``[B]`` float; group_ids: ``[B]`` integer, any order, not necessarily contiguous.
    """
    if rewards.dim() != 1 or group_ids.shape != rewards.shape:
        raise ValueError(
            f"rewards and group_ids must both be 1-D of the same length, got {tuple(rewards.shape)} and "
            f"{tuple(group_ids.shape)}; pass one scalar reward and one group id per sample"
        )
    if group_ids.dtype.is_floating_point or group_ids.dtype == torch.bool:
        raise ValueError(f"group_ids must be an integer tensor, got {group_ids.dtype}; use e.g. the prompt index")
    uniq, index = torch.unique(group_ids, return_inverse=True)
    return index, uniq.numel()


def _group_sum(values: Tensor, index: Tensor, n_groups: int) -> Tensor:
    """Sum of ``values`` over each sample's group, read back per sample: ``[B] -> [B]``."""
    sums = torch.zeros(n_groups, dtype=values.dtype, device=values.device).index_add_(0, index, values)
    return sums[index]


def _as_float(rewards: Tensor) -> Tensor:
    return rewards if rewards.dtype.is_floating_point else rewards.float()


def rloo_advantages(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """REINFORCE leave-one-out advantage (AEPO; docs/algorithms.md, "RLOO, for AEPO").

    ``A_i = r_i - mean_{j != i, j in g(i)} r_j``, equal to ``n/(n-1) * (r_i - mean_g)`` (verl's form).
    No std normalisation. A group of size 1 has no other member to compare with: its advantage is 0.

    Args:
        rewards: ``[B]`` scalar reward per sample.
        group_ids: ``[B]`` integer group (prompt) id per sample, any order.

    Returns:
        ``[B]`` advantages, float.
    """
    rewards = _as_float(rewards)
    index, n_groups = _group_index(rewards, group_ids)
    others = _group_sum(torch.ones_like(rewards), index, n_groups) - 1
    baseline = (_group_sum(rewards, index, n_groups) - rewards) / others.clamp(min=1)
    return torch.where(others > 0, rewards - baseline, torch.zeros_like(rewards))


def grpo_advantages(
    rewards: Tensor,
    group_ids: Tensor,
    eps: float = 1e-6,
    std: Literal["unbiased", "biased", "none"] = "unbiased",
) -> Tensor:
    """GRPO outcome advantage (GUI-R1): ``A_i = (r_i - mean_g) / (std_g + eps)`` (docs/algorithms.md,
    "Group-normalised, for GRPO").

    ``std="unbiased"`` divides the squared deviations by ``n - 1`` (torch.std's default, as in verl/EasyR1);
    ``"biased"`` by ``n``; ``"none"`` skips the division (Dr. GRPO). A group whose rewards are all equal gets
    advantage 0 (its deviations are 0). A group of size 1 also gets 0; verl instead uses mean 0 and std 1 there,
    which hands a lone sample its raw reward as advantage.

    Args:
        rewards: ``[B]`` scalar reward per sample.
        group_ids: ``[B]`` integer group (prompt) id per sample, any order.
        eps: added to the std before dividing.
        std: which std normalises the centred reward.

    Returns:
        ``[B]`` advantages, float.
    """
    if std not in ("unbiased", "biased", "none"):
        raise ValueError(f"std must be 'unbiased', 'biased' or 'none', got {std!r}")
    rewards = _as_float(rewards)
    index, n_groups = _group_index(rewards, group_ids)
    size = _group_sum(torch.ones_like(rewards), index, n_groups)
    centred = rewards - _group_sum(rewards, index, n_groups) / size
    if std != "none":
        sq = _group_sum(centred.square(), index, n_groups)
        dof = size - 1 if std == "unbiased" else size
        centred = centred / ((sq / dof.clamp(min=1)).sqrt() + eps)
    return torch.where(size > 1, centred, torch.zeros_like(rewards))


def zero_std_groups(rewards: Tensor, group_ids: Tensor, atol: float = 0.0) -> Tensor:
    """Which samples sit in a group whose rewards are all equal (max - min <= atol).

    Such a group gives every member advantage 0, so it teaches nothing: monitors log the fraction, and
    difficulty filtering drops all-correct (AEPO) or all-correct and all-wrong (GUI-R1) prompts with it.
    A group of size 1 counts as zero-std.

    Args:
        rewards: ``[B]`` scalar reward per sample.
        group_ids: ``[B]`` integer group id per sample, any order.
        atol: largest spread still counted as zero.

    Returns:
        ``[B]`` bool, True for every member of a zero-std group. ``mask.float().mean()`` is the fraction of samples.
    """
    rewards = _as_float(rewards)
    index, n_groups = _group_index(rewards, group_ids)
    hi = torch.full((n_groups,), -math.inf, dtype=rewards.dtype, device=rewards.device)
    lo = torch.full((n_groups,), math.inf, dtype=rewards.dtype, device=rewards.device)
    hi = hi.scatter_reduce(0, index, rewards, reduce="amax")
    lo = lo.scatter_reduce(0, index, rewards, reduce="amin")
    return (hi - lo)[index] <= atol


# --------------------------------------------------------------------------------------------------------------------
# Token log-probs and the losses
# --------------------------------------------------------------------------------------------------------------------


def token_logprobs(logits: Tensor, tokens: Tensor) -> Tensor:
    """Log-probability of each chosen token: ``log_softmax(logits)[b, t, tokens[b, t]]``.

    Computed as ``logits[token] - logsumexp(logits)`` one sample at a time, so the forward pass never holds a full
    ``[B, T, V]`` log-softmax next to the logits: the extra memory is one ``[T, V]`` row. Half-precision logits are
    upcast to float32 row by row (bf16 log-probs are too coarse for a ratio near 1).

    Args:
        logits: ``[B, T, V]`` logits aligned with ``tokens`` (already shifted: position t predicts tokens[:, t]).
        tokens: ``[B, T]`` integer token ids, each in ``[0, V)``; pad positions need any valid id and a mask later.

    Returns:
        ``[B, T]`` log-probs, float32 (float64 for float64 logits), differentiable w.r.t. ``logits``.
    """
    if logits.dim() != 3 or tokens.shape != logits.shape[:2]:
        raise ValueError(
            f"logits must be [B, T, V] and tokens [B, T], got {tuple(logits.shape)} and {tuple(tokens.shape)}; "
            "shift logits by one position before calling"
        )
    dtype = torch.promote_types(logits.dtype, torch.float32)
    rows = []
    for row_logits, row_tokens in zip(logits, tokens):
        row_logits = row_logits.to(dtype)
        chosen = row_logits.gather(-1, row_tokens.long().unsqueeze(-1)).squeeze(-1)
        rows.append(chosen - torch.logsumexp(row_logits, dim=-1))
    if not rows:
        return logits.new_zeros(tokens.shape, dtype=dtype)
    return torch.stack(rows)


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``values`` over the positions where ``mask`` is set, over the whole batch (verl's token-mean).

    Masked-out positions are replaced, not multiplied, so an inf or nan there cannot leak in. An all-zero mask
    gives 0.

    Args:
        values: ``[B, T]``.
        mask: ``[B, T]`` bool or 0/1.

    Returns:
        scalar tensor.
    """
    keep = mask.bool()
    total = torch.where(keep, values, torch.zeros_like(values)).sum()
    return total / keep.sum().clamp(min=1)


def kl_k3(logprobs: Tensor, ref_logprobs: Tensor, mask: Tensor) -> Tensor:
    """Low-variance k3 estimate of KL(pi || pi_ref), token-mean over the mask (GUI-R1's "low_var_kl").

    Per token, with ``d = ref_logprobs - logprobs``: ``k3 = exp(d) - d - 1``, which is >= 0 and unbiased for the
    KL when tokens are sampled from pi. ``d`` is clamped to [-20, 20] so exp cannot overflow, and k3 to
    [-10, 10] as in verl. GUI-R1 adds ``0.01 * kl_k3(...)`` to the policy loss; AEPO uses no KL.

    Args:
        logprobs: ``[B, T]`` log-probs under the current policy (with grad).
        ref_logprobs: ``[B, T]`` log-probs under the frozen reference policy.
        mask: ``[B, T]`` response-token mask.

    Returns:
        scalar tensor.
    """
    _check_token_shapes(logprobs, ref_logprobs=ref_logprobs, mask=mask)
    d = (ref_logprobs - logprobs).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    k3 = (torch.exp(d) - d - 1).clamp(-_K3_CLAMP, _K3_CLAMP)
    return masked_mean(k3, mask)


@dataclass(frozen=True, slots=True)
class PolicyLossMetrics:
    """Diagnostics of one ``policy_loss`` call, token-means over the mask (names as in CleanRL / verl)."""

    pg_loss: float
    """The surrogate loss itself (before any KL term)."""
    clipfrac: float
    """Fraction of tokens where the clipped term is the active one (its gradient is 0): verl's pg_clipfrac."""
    clipfrac_lower: float
    """Fraction of tokens held by the dual-clip bound (negative advantage, ratio > dual_clip)."""
    approx_kl: float
    """k3 estimate of KL(pi_old || pi): mean of (ratio - 1) - log(ratio), as in CleanRL."""
    ratio_mean: float
    """Mean of pi / pi_old."""
    ratio_max: float
    """Largest pi / pi_old."""
    is_weight_mean: float
    """Mean truncated importance weight pi_old / pi_behaviour after the cap (1.0 without a behaviour policy)."""
    is_clipfrac: float
    """Fraction of tokens whose importance weight hit max_is_ratio."""

    def as_dict(self, prefix: str = "train/") -> dict[str, float]:
        """The metrics under namespaced keys, for the JSONL / TensorBoard logger."""
        return {prefix + k: v for k, v in asdict(self).items()}


def _check_token_shapes(logprobs: Tensor, **others: Tensor) -> None:
    if logprobs.dim() != 2:
        raise ValueError(f"logprobs must be [B, T], got {tuple(logprobs.shape)}")
    for name, t in others.items():
        if t.shape != logprobs.shape:
            raise ValueError(f"{name} must have the shape of logprobs {tuple(logprobs.shape)}, got {tuple(t.shape)}")


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.4,
    dual_clip: float | None = 3.0,
    behaviour_logprobs: Tensor | None = None,
    max_is_ratio: float | None = None,
) -> tuple[Tensor, PolicyLossMetrics]:
    """PPO clipped surrogate with clip-higher and dual-clip, token-mean over the mask (AEPO and GRPO;
    docs/algorithms.md, "The PPO clipped surrogate, clip-higher and dual-clip" and "Token-mean").

    Per token, with ``ratio = exp(logprobs - old_logprobs)`` and the sample's advantage ``A``::

        pg = max(-A * ratio, -A * clip(ratio, 1 - clip_low, 1 + clip_high))
        pg = min(pg, -A * dual_clip)      if A < 0 and dual_clip is set   (Ye et al. 2020, verl)

    so a positive advantage stops pushing once the ratio passes ``1 + clip_high``, a negative one once it falls
    below ``1 - clip_low``, and a negative advantage on a token whose ratio has exploded costs at most
    ``-dual_clip * A``. The loss is the mean over every unmasked token of the batch (verl's "token-mean"), so long
    responses weigh more than short ones.

    Off-policy correction: when the samples were drawn by an older behaviour policy (an asynchronous rollout
    worker a few adapter versions behind, or an inference engine whose numerics differ from the trainer's),
    pass its log-probs as ``behaviour_logprobs``. Each token's surrogate is then multiplied by the truncated
    importance weight ``w = min(exp(old_logprobs - behaviour_logprobs), max_is_ratio)`` (``max_is_ratio=None``:
    no cap), a constant without gradient. The PPO ratio keeps correcting pi_old -> pi; ``w`` corrects
    pi_behaviour -> pi_old; the cap trades a little bias for bounded variance (truncated IS, as verl's
    rollout correction).

    Args:
        logprobs: ``[B, T]`` log-probs of the sampled tokens under the policy being trained (with grad).
        old_logprobs: ``[B, T]`` log-probs under the policy at the start of this update (no grad).
        advantages: ``[B]`` one advantage per sample, broadcast to its tokens.
        mask: ``[B, T]`` 1 on response tokens, 0 on prompt and padding.
        clip_low: ratio floor is ``1 - clip_low``.
        clip_high: ratio ceiling is ``1 + clip_high`` (0.4 in AEPO, 0.2 in GUI-R1).
        dual_clip: bound ``c`` > 1 for negative advantages; None turns dual-clip off.
        behaviour_logprobs: ``[B, T]`` log-probs under the policy that sampled the tokens, if not ``old``.
        max_is_ratio: cap on the importance weight; needs ``behaviour_logprobs``.

    Returns:
        ``(loss, metrics)``: a scalar tensor to backpropagate and the detached diagnostics.
    """
    _check_token_shapes(logprobs, old_logprobs=old_logprobs, mask=mask)
    if advantages.shape != logprobs.shape[:1]:
        raise ValueError(
            f"advantages must be [B] = {tuple(logprobs.shape[:1])}, got {tuple(advantages.shape)}; "
            "pass one advantage per sample, not per token"
        )
    if not (0 <= clip_low < 1 and clip_high >= 0):
        raise ValueError(f"need 0 <= clip_low < 1 and clip_high >= 0, got clip_low={clip_low}, clip_high={clip_high}")
    if dual_clip is not None and dual_clip <= 1:
        raise ValueError(f"dual_clip must be > 1 (3.0 in verl) or None to turn it off, got {dual_clip}")
    if max_is_ratio is not None and behaviour_logprobs is None:
        raise ValueError("max_is_ratio is set but behaviour_logprobs is None; pass the sampler's log-probs too")
    if max_is_ratio is not None and max_is_ratio <= 0:
        raise ValueError(f"max_is_ratio must be > 0, got {max_is_ratio}")

    keep = mask.bool()
    adv = advantages.to(logprobs.dtype).unsqueeze(-1)  # [B, 1]
    log_ratio = (logprobs - old_logprobs).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    ratio = torch.exp(log_ratio)

    pg_unclipped = -adv * ratio
    pg_clipped = -adv * ratio.clamp(1 - clip_low, 1 + clip_high)
    pg = torch.maximum(pg_unclipped, pg_clipped)
    dual_held = torch.zeros_like(keep)
    if dual_clip is not None:
        bound = -adv * dual_clip
        dual_held = (adv < 0) & (pg > bound)
        pg = torch.where(adv < 0, torch.minimum(pg, bound), pg)

    is_weight = torch.ones_like(ratio)
    is_capped = torch.zeros_like(keep)
    if behaviour_logprobs is not None:
        _check_token_shapes(logprobs, behaviour_logprobs=behaviour_logprobs)
        is_weight = torch.exp((old_logprobs - behaviour_logprobs).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)).detach()
        if max_is_ratio is not None:
            is_capped = is_weight > max_is_ratio
            is_weight = is_weight.clamp(max=max_is_ratio)
        pg = pg * is_weight

    loss = masked_mean(pg, keep)

    with torch.no_grad():
        ratio_kept = ratio[keep]
        metrics = PolicyLossMetrics(
            pg_loss=float(loss),
            clipfrac=float(masked_mean((pg_clipped > pg_unclipped).to(ratio.dtype), keep)),
            clipfrac_lower=float(masked_mean(dual_held.to(ratio.dtype), keep)),
            approx_kl=float(masked_mean((ratio - 1) - log_ratio, keep)),
            ratio_mean=float(ratio_kept.mean()) if ratio_kept.numel() else 1.0,
            ratio_max=float(ratio_kept.max()) if ratio_kept.numel() else 1.0,
            is_weight_mean=float(masked_mean(is_weight, keep)) if keep.any() else 1.0,
            is_clipfrac=float(masked_mean(is_capped.to(ratio.dtype), keep)),
        )
    return loss, metrics

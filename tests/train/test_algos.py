"""train.algos: advantages, the PPO surrogate, k3 and token log-probs, checked against numbers worked out by hand."""

from __future__ import annotations

import math
import time

import pytest
import torch

from train.algos import (
    grpo_advantages,
    kl_k3,
    masked_mean,
    policy_loss,
    rloo_advantages,
    token_logprobs,
    zero_std_groups,
)


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def ids(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.long)


def close(actual: torch.Tensor, expected, atol: float = 1e-5) -> None:
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


# --------------------------------------------------------------------------------------------------------------------
# Advantages
# --------------------------------------------------------------------------------------------------------------------


def test_rloo_one_group():
    # r = [1, 0, 0.5]; each minus the mean of the other two:
    #   1   - (0 + 0.5)/2 = 1   - 0.25 =  0.75
    #   0   - (1 + 0.5)/2 = 0   - 0.75 = -0.75
    #   0.5 - (1 + 0)/2   = 0.5 - 0.5  =  0
    # verl's form agrees: n/(n-1)·(r - mean) = 3/2·([1, 0, 0.5] - 0.5) = [0.75, -0.75, 0].
    close(rloo_advantages(t(1, 0, 0.5), ids(0, 0, 0)), [0.75, -0.75, 0.0])


def test_grpo_unbiased_std_on_two_samples():
    # r = [1, 0]: mean 0.5, deviations ±0.5.
    # unbiased var = (0.5² + 0.5²)/(2 - 1) = 0.5  → std = √0.5 = 0.70711
    # A = ±0.5 / (0.70711 + 1e-6) = ±0.70711
    close(grpo_advantages(t(1, 0), ids(0, 0)), [0.70711, -0.70711])
    # biased var = 0.5/2 = 0.25 → std 0.5 → A = ±0.5/0.500001 ≈ ±1
    close(grpo_advantages(t(1, 0), ids(0, 0), std="biased"), [1.0, -1.0])
    # no std: just centred
    close(grpo_advantages(t(1, 0), ids(0, 0), std="none"), [0.5, -0.5])


def test_grpo_matches_torch_std():
    r = t(0.3, 1.0, 0.0, 0.8, 0.2)
    expected = (r - r.mean()) / (r.std(unbiased=True) + 1e-6)
    close(grpo_advantages(r, ids(4, 4, 4, 4, 4)), expected)


def test_mixed_group_ids_in_any_order():
    # group 2 holds [1, 0, 0.5] (positions 0, 2, 4), group 9 holds [5, 7] (positions 1, 3).
    r = t(1, 5, 0, 7, 0.5)
    g = ids(2, 9, 2, 9, 2)
    # RLOO, group 9: 5 - 7 = -2, 7 - 5 = 2.
    close(rloo_advantages(r, g), [0.75, -2.0, -0.75, 2.0, 0.0])
    # GRPO, group 2: mean 0.5, unbiased var = (0.25 + 0.25 + 0)/2 = 0.25, std 0.5 → [1, -1, 0]
    # GRPO, group 9: mean 6, unbiased var = (1 + 1)/1 = 2, std 1.41421 → [-0.70711, 0.70711]
    close(grpo_advantages(r, g), [1.0, -0.70711, -1.0, 0.70711, 0.0])
    # Shuffling the samples shuffles the advantages the same way.
    perm = torch.tensor([3, 0, 4, 1, 2])
    close(rloo_advantages(r[perm], g[perm]), rloo_advantages(r, g)[perm])
    close(grpo_advantages(r[perm], g[perm]), grpo_advantages(r, g)[perm])


def test_singleton_groups_get_zero():
    r = t(1, 0.5, 0, 3)
    g = ids(7, 1, 1, 42)  # 7 and 42 are alone
    # group 1: RLOO [0.5 - 0, 0 - 0.5]; GRPO mean 0.25, std √((0.0625·2)/1) = 0.35355 → ±0.70711
    close(rloo_advantages(r, g), [0.0, 0.5, -0.5, 0.0])
    close(grpo_advantages(r, g), [0.0, 0.70711, -0.70711, 0.0])


def test_equal_rewards_give_zero_advantage_and_are_flagged():
    r = t(1, 1, 1, 0, 1, 0.5, 0, 0)
    g = ids(0, 0, 0, 1, 1, 2, 3, 3)
    close(grpo_advantages(r, g)[:3], [0.0, 0.0, 0.0])
    close(rloo_advantages(r, g)[:3], [0.0, 0.0, 0.0])
    # group 0 all 1 (zero std), group 1 [0, 1] (not), group 2 singleton (zero std), group 3 all 0 (zero std).
    assert zero_std_groups(r, g).tolist() == [True, True, True, False, False, True, True, True]
    assert zero_std_groups(t(1.0, 1.05), ids(0, 0), atol=0.1).tolist() == [True, True]


def test_integer_rewards_and_bad_inputs():
    close(rloo_advantages(torch.tensor([1, 0]), ids(0, 0)), [1.0, -1.0])
    with pytest.raises(ValueError, match="same length"):
        rloo_advantages(t(1, 0), ids(0))
    with pytest.raises(ValueError, match="integer"):
        grpo_advantages(t(1, 0), t(0, 0))
    with pytest.raises(ValueError, match="std"):
        grpo_advantages(t(1, 0), ids(0, 0), std="population")  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------------------------
# Policy loss
# --------------------------------------------------------------------------------------------------------------------


def one_token_batch(ratios: list[float], advantages: list[float]):
    """B samples of one token each, old log-prob 0, so logprobs = log(ratio)."""
    logprobs = torch.log(torch.tensor(ratios)).unsqueeze(-1).requires_grad_()
    old = torch.zeros_like(logprobs)
    return logprobs, old, torch.tensor(advantages), torch.ones_like(old)


def test_clipped_surrogate_on_hand_picked_ratios():
    # Clip range [0.8, 1.4], dual-clip c = 3. Per token pg = max(-A·r, -A·clip(r)), then min(pg, -3A) when A < 0.
    #   r=1.1, A=+1: max(-1.1, -1.1)            = -1.1   inside the range
    #   r=1.6, A=+1: max(-1.6, -1.4)            = -1.4   clipped high   (clipfrac)
    #   r=0.5, A=-1: max( 0.5,  0.8)            =  0.8   clipped low    (clipfrac)
    #   r=0.5, A=+1: max(-0.5, -0.8)            = -0.5   below range, but unclipped is the pessimistic one
    #   r=5.0, A=-1: max( 5.0,  1.4) = 5, min(5, 3) = 3  dual-clip bound -3·A
    # token-mean = (-1.1 - 1.4 + 0.8 - 0.5 + 3)/5 = 0.8/5 = 0.16
    logprobs, old, adv, mask = one_token_batch([1.1, 1.6, 0.5, 0.5, 5.0], [1, 1, -1, 1, -1])
    loss, m = policy_loss(logprobs, old, adv, mask)
    close(loss, 0.16)
    assert m.pg_loss == pytest.approx(0.16, abs=1e-6)
    assert m.clipfrac == pytest.approx(2 / 5)
    assert m.clipfrac_lower == pytest.approx(1 / 5)
    assert m.ratio_max == pytest.approx(5.0, rel=1e-6)
    assert m.ratio_mean == pytest.approx((1.1 + 1.6 + 0.5 + 0.5 + 5.0) / 5, rel=1e-6)
    # d loss / d logprob = -A·r/5 where the unclipped term is active, 0 where a clip holds:
    #   [-1.1/5, 0, 0, -0.5/5, 0] = [-0.22, 0, 0, -0.1, 0]
    loss.backward()
    close(logprobs.grad.squeeze(-1), [-0.22, 0.0, 0.0, -0.1, 0.0])


def test_dual_clip_bound_scales_with_the_advantage_and_can_be_turned_off():
    # r=5, A=-2: unclipped -A·r = 10; bound -3·A = 6.
    logprobs, old, adv, mask = one_token_batch([5.0], [-2])
    close(policy_loss(logprobs, old, adv, mask)[0], 6.0)
    close(policy_loss(logprobs, old, adv, mask, dual_clip=None)[0], 10.0)
    # r=5, A=+2 is never dual-clipped: max(-10, -2·1.4) = -2.8
    logprobs, old, adv, mask = one_token_batch([5.0], [2])
    close(policy_loss(logprobs, old, adv, mask)[0], -2.8)


def test_symmetric_clip_of_gui_r1():
    # clip 0.2 both ways: r=1.3, A=+1 → max(-1.3, -1.2) = -1.2
    logprobs, old, adv, mask = one_token_batch([1.3], [1])
    loss, m = policy_loss(logprobs, old, adv, mask, clip_low=0.2, clip_high=0.2)
    close(loss, -1.2)
    assert m.clipfrac == 1.0
    # with AEPO's clip-higher 1.4 the same token is inside the range: -1.3
    close(policy_loss(logprobs, old, adv, mask)[0], -1.3)


def test_token_mean_over_the_whole_batch_with_a_mask():
    # Ratios all 1. Row 0 (A=+1) has 2 response tokens, row 1 (A=-1) has 1; pg = -A per token.
    # token-mean = (-1 - 1 + 1)/3 = -1/3 (a mean of row means would give 0).
    # The masked positions hold garbage (log-ratio 1e4 → inf ratio) that must not leak in.
    logprobs = torch.tensor([[0.0, 0.0, 1e4], [0.0, 1e4, float("nan")]], requires_grad=True)
    old = torch.zeros(2, 3)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    loss, m = policy_loss(logprobs, old, t(1, -1), mask)
    close(loss, -1 / 3)
    assert m.clipfrac == 0.0 and m.ratio_max == 1.0 and m.approx_kl == 0.0
    loss.backward()
    # unclipped tokens: d/dlogp = -A·r/3; masked tokens get no gradient.
    close(logprobs.grad, [[-1 / 3, -1 / 3, 0.0], [1 / 3, 0.0, 0.0]])
    # an all-masked batch gives a zero loss, not nan
    loss, _ = policy_loss(logprobs, old, t(1, -1), torch.zeros(2, 3))
    assert loss.item() == 0.0


def test_approx_kl_is_k3_between_old_and_new():
    # log r = 1 → r = e: k3 = (r - 1) - log r = e - 2 = 0.71828; log r = 0 → 0. Mean = 0.35914.
    logprobs = torch.tensor([[1.0, 0.0]])
    _, m = policy_loss(logprobs, torch.zeros(1, 2), t(0), torch.ones(1, 2))
    assert m.approx_kl == pytest.approx((math.e - 2) / 2, abs=1e-6)


def test_importance_weight_from_a_behaviour_policy_and_its_cap():
    # Ratio 1 on both tokens, A=+1 → pg = -1 each before the correction.
    # old - behaviour = [log 2, log 0.5] → w = [2, 0.5].
    logprobs = torch.zeros(1, 2, requires_grad=True)
    old = torch.zeros(1, 2)
    behaviour = torch.log(torch.tensor([[0.5, 2.0]]))
    mask = torch.ones(1, 2)
    # uncapped: (-2 - 0.5)/2 = -1.25
    loss, m = policy_loss(logprobs, old, t(1), mask, behaviour_logprobs=behaviour)
    close(loss, -1.25)
    assert m.is_weight_mean == pytest.approx(1.25) and m.is_clipfrac == 0.0
    # capped at 1.5: w = [1.5, 0.5] → (-1.5 - 0.5)/2 = -1.0
    loss, m = policy_loss(logprobs, old, t(1), mask, behaviour_logprobs=behaviour, max_is_ratio=1.5)
    close(loss, -1.0)
    assert m.is_weight_mean == pytest.approx(1.0) and m.is_clipfrac == pytest.approx(0.5)
    # the weight is a constant: d/dlogp = -A·r·w/2 = [-0.75, -0.25]
    loss.backward()
    close(logprobs.grad, [[-0.75, -0.25]])
    # same behaviour and old policy: weight 1, identical to the on-policy loss
    on, _ = policy_loss(logprobs, old, t(1), mask)
    close(policy_loss(logprobs, old, t(1), mask, behaviour_logprobs=old)[0], on.detach())


def test_policy_loss_rejects_inconsistent_arguments():
    logprobs, old, adv, mask = one_token_batch([1.0, 1.0], [1, 1])
    with pytest.raises(ValueError, match="behaviour_logprobs"):
        policy_loss(logprobs, old, adv, mask, max_is_ratio=2.0)
    with pytest.raises(ValueError, match="one advantage per sample"):
        policy_loss(logprobs, old, torch.ones(2, 1), mask)
    with pytest.raises(ValueError, match="dual_clip"):
        policy_loss(logprobs, old, adv, mask, dual_clip=0.5)
    with pytest.raises(ValueError, match="old_logprobs"):
        policy_loss(logprobs, old[:1], adv, mask)


def test_metrics_are_namespaced_for_the_logger():
    logprobs, old, adv, mask = one_token_batch([1.0], [1])
    d = policy_loss(logprobs, old, adv, mask)[1].as_dict()
    assert {"train/pg_loss", "train/clipfrac", "train/approx_kl", "train/ratio_mean", "train/ratio_max"} <= d.keys()


# --------------------------------------------------------------------------------------------------------------------
# k3 and token log-probs
# --------------------------------------------------------------------------------------------------------------------


def test_kl_k3_small_cases():
    # k3 = exp(d) - d - 1 with d = ref - logp:
    #   d = 0      → 1 - 0 - 1                   = 0
    #   d = log 2  → 2 - 0.693147 - 1           = 0.306853
    #   d = -log 2 → 0.5 + 0.693147 - 1         = 0.193147
    # token-mean over the 3 unmasked tokens = 0.5/3 = 0.166667 (the 4th is masked).
    logp = torch.log(torch.tensor([[0.5, 0.25, 0.5, 0.1]]))
    ref = torch.log(torch.tensor([[0.5, 0.5, 0.25, 0.9]]))
    mask = torch.tensor([[1, 1, 1, 0]])
    close(kl_k3(logp, ref, mask), 0.5 / 3)
    close(kl_k3(logp[:, 1:2], ref[:, 1:2], mask[:, 1:2]), 2 - math.log(2) - 1)
    close(kl_k3(logp[:, 2:3], ref[:, 2:3], mask[:, 2:3]), 0.5 + math.log(2) - 1)


def test_kl_k3_is_clamped_and_stays_finite():
    # d = 20 → exp(20) - 21 ≈ 4.85e8, clamped to 10; d = 500 would overflow exp, clamped too.
    logp = torch.tensor([[-20.0, -500.0]], requires_grad=True)
    loss = kl_k3(logp, torch.zeros(1, 2), torch.ones(1, 2))
    close(loss, 10.0)
    loss.backward()
    assert torch.isfinite(logp.grad).all()


def test_token_logprobs_by_hand_and_against_log_softmax():
    # logits [0, log 3] → softmax [1/4, 3/4]; log p(token 1) = log 0.75 = -0.287682, log p(token 0) = log 0.25
    logits = torch.tensor([[[0.0, math.log(3)], [0.0, math.log(3)]]])
    close(token_logprobs(logits, ids(1, 0).unsqueeze(0)), [[math.log(0.75), math.log(0.25)]])

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 11, generator=g, requires_grad=True)
    tokens = torch.randint(0, 11, (3, 5), generator=g)
    expected = torch.log_softmax(logits, -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    out = token_logprobs(logits, tokens)
    close(out, expected.detach())
    (grad,) = torch.autograd.grad(out.sum(), logits)
    (expected_grad,) = torch.autograd.grad(expected.sum(), logits)
    close(grad, expected_grad)
    # bf16 logits come back as float32
    assert token_logprobs(logits.detach().bfloat16(), tokens).dtype == torch.float32
    with pytest.raises(ValueError, match="shift"):
        token_logprobs(logits, tokens[:, :4])


def test_masked_mean_ignores_garbage():
    close(masked_mean(torch.tensor([[1.0, float("inf")], [3.0, float("nan")]]), torch.tensor([[1, 0], [1, 0]])), 2.0)


# --------------------------------------------------------------------------------------------------------------------
# End to end: GRPO on a toy one-token policy
# --------------------------------------------------------------------------------------------------------------------


def test_grpo_learns_to_prefer_token_3():
    """A 2-layer policy over 6 tokens, one token per response, reward 1 for token 3: 30 AdamW steps raise it."""
    start = time.monotonic()
    torch.manual_seed(0)
    vocab, dim, n_prompts, group = 6, 8, 4, 8
    model = torch.nn.Sequential(torch.nn.Linear(dim, 16), torch.nn.Tanh(), torch.nn.Linear(16, vocab))
    ref_model = torch.nn.Sequential(torch.nn.Linear(dim, 16), torch.nn.Tanh(), torch.nn.Linear(16, vocab))
    ref_model.load_state_dict(model.state_dict())
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.AdamW(model.parameters(), lr=3e-2, weight_decay=0.01)
    prompts = torch.randn(n_prompts, dim)
    x = prompts.repeat_interleave(group, dim=0)  # [B, dim], B = n_prompts · group
    group_ids = torch.arange(n_prompts).repeat_interleave(group)
    mask = torch.ones(x.shape[0], 1)

    def p_token3() -> float:
        with torch.no_grad():
            return torch.softmax(model(prompts), -1)[:, 3].mean().item()

    p_start, rewards_seen = p_token3(), []
    for _ in range(30):
        with torch.no_grad():  # rollout: sample one token per response from the current policy
            logits = model(x).unsqueeze(1)  # [B, 1, V]
            tokens = torch.distributions.Categorical(logits=logits).sample()  # [B, 1]
            old_logprobs = token_logprobs(logits, tokens)
            ref_logprobs = token_logprobs(ref_model(x).unsqueeze(1), tokens)
        rewards = (tokens[:, 0] == 3).float()
        rewards_seen.append(rewards.mean().item())
        advantages = grpo_advantages(rewards, group_ids)

        logprobs = token_logprobs(model(x).unsqueeze(1), tokens)
        loss, metrics = policy_loss(logprobs, old_logprobs, advantages, mask, clip_high=0.2, dual_clip=3.0)
        loss = loss + 0.01 * kl_k3(logprobs, ref_logprobs, mask)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        assert math.isfinite(metrics.pg_loss) and metrics.ratio_mean == pytest.approx(1.0)  # one epoch: on-policy

    p_end = p_token3()
    assert p_end > p_start + 0.3, (p_start, p_end)
    assert sum(rewards_seen[-5:]) / 5 > sum(rewards_seen[:5]) / 5 + 0.2, rewards_seen
    assert any(not torch.equal(b, p.detach()) for b, p in zip(before, model.parameters()))
    assert time.monotonic() - start < 15

"""The learner core on the tiny random Qwen2.5-VL: log-prob agreement with the sampler, learning a trivial reward,
and the training-sample files (JSONL round trip, bad rows skipped, grouping)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from policy.backends.hf import TransformersBackend
from policy.presets import Decoding, preset_for
from policy.tiny import build_tiny_qwen25vl
from train.learner import LORA_TARGETS, Learner, RolloutPrompt, rollout_groups
from train.config import RLConfig, TrainModelConfig
from train.samples import ReadStats, TrainSample, iter_groups, read_jsonl, write_jsonl

# peft calls a transformers property deprecated in 5.x
pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")

PRESET = preset_for("tiny-qwen", fmt="qwen2.5-vl", min_pixels=4 * 28 * 28, max_pixels=16 * 28 * 28,
                    decoding=Decoding(temperature=0.0, max_new_tokens=8))
# The tiny model's lm_head is random with std 0.02, so adapting attention alone moves its logits by ~0.1: the
# tests adapt the output layer too, which makes the reward learnable in a few steps.
TARGETS = (*LORA_TARGETS, "lm_head")


def ascii_share(prompt: RolloutPrompt, text: str) -> float:
    """Share of the response's characters that are ASCII: ~0.5 under the random model (bytes >= 128 decode to
    replacement characters), 1.0 when it learns to emit only ASCII bytes. An empty response scores 0."""
    return sum(ord(c) < 128 for c in text) / len(text) if text else 0.0


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen25vl(tmp_path_factory.mktemp("tiny") / "model", seed=0)


@pytest.fixture
def backend(tiny_dir: Path) -> TransformersBackend:
    return TransformersBackend(tiny_dir, preset=PRESET)  # fresh per test: the learner trains it in place


def prompts(k: int = 4) -> list[RolloutPrompt]:
    out = []
    for i in range(k):
        image = np.random.default_rng(i).integers(0, 256, (56, 56, 3), dtype=np.uint8)
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": f"Task {i}: act."}]}]
        out.append(RolloutPrompt(messages, image, (112, 112), origin={"task": f"t{i}"}))
    return out


def lora_state(learner: Learner) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in learner.peft_model.named_parameters() if p.requires_grad}


def test_recomputed_logprobs_equal_the_samplers(backend):
    # Sampling at temperature 1 with top-p 1 and no processors: the behaviour log-probs are the raw model's
    # log-softmax, so teacher forcing must give the same numbers (same adapter: fresh LoRA B is zero).
    torch.manual_seed(0)
    learner = Learner(backend, model=TrainModelConfig(lora_targets=TARGETS), algo="aepo")
    groups = rollout_groups(backend, prompts(2), 3, ascii_share, max_new_tokens=8, adapter_version="v0")
    assert [len(g) for g in groups] == [3, 3]
    for s in (s for g in groups for s in g):
        assert s.behaviour_logprobs is not None and s.adapter_version == "v0" and s.input_size == (56, 56)
        with torch.no_grad():
            lp = learner.response_logprobs(s)[0]
        assert torch.allclose(lp, torch.tensor(s.behaviour_logprobs), atol=1e-4), (lp, s.behaviour_logprobs)


@pytest.mark.parametrize("algo", ["aepo", "grpo"])
def test_steps_change_the_adapter_and_raise_the_reward(backend, algo):
    torch.manual_seed(0)
    learner = Learner(backend, RLConfig(lr=5e-2), TrainModelConfig(lora_targets=TARGETS), algo=algo)
    assert learner.kl_coef == (0.0 if algo == "aepo" else 0.01)
    assert learner.clip_high == (0.4 if algo == "aepo" else 0.2)
    before = lora_state(learner)
    rewards, metrics = [], {}
    for step in range(12):
        groups = rollout_groups(backend, prompts(4), 4, ascii_share, max_new_tokens=8, first_group_id=10 * step,
                                adapter_version=learner.adapter_version)
        metrics = learner.step(groups)
        rewards.append(metrics["train/reward_mean"])
        assert all(np.isfinite(v) for v in metrics.values()), metrics
    after = lora_state(learner)
    assert any(not torch.equal(before[n], after[n]) for n in before)
    first, last = np.mean(rewards[:2]), np.mean(rewards[-2:])
    assert last > first + 0.2, rewards
    assert learner.adapter_version == "learner@12" and backend.adapter_version == "learner"
    assert {"train/loss", "train/pg_loss", "train/clipfrac", "train/approx_kl", "train/reward_std",
            "train/zero_std_group_share", "train/grad_norm"} <= metrics.keys()
    if algo == "grpo":
        assert metrics["train/kl"] > 0  # the adapter has moved away from the base model


def test_jsonl_round_trip_skips_bad_rows_and_trains(backend, tmp_path, caplog):
    torch.manual_seed(1)
    learner = Learner(backend, model=TrainModelConfig(lora_targets=TARGETS), algo="grpo")
    groups = rollout_groups(backend, prompts(2), 2, ascii_share, max_new_tokens=6)
    path = tmp_path / "samples.jsonl"
    assert write_jsonl(path, [s for g in groups for s in g]) == 4
    good = json.loads(path.read_text().splitlines()[0])
    with path.open("a") as f:
        f.write("{not json\n")
        f.write(json.dumps({**good, "image": "missing.npy"}) + "\n")
        f.write(json.dumps({k: v for k, v in good.items() if k != "response_ids"}) + "\n")
    stats = ReadStats()
    with caplog.at_level(logging.WARNING, logger="train.samples"):
        samples = list(read_jsonl(path, stats))
    assert (stats.read, stats.skipped) == (4, 3)
    assert f"{path}:5" in caplog.text and f"{path}:6" in caplog.text and "missing.npy" in caplog.text
    originals = [s for g in groups for s in g]
    for a, b in zip(samples, originals):
        assert np.array_equal(a.image_array(), b.image) and a.response_ids == b.response_ids
        assert a.behaviour_logprobs == b.behaviour_logprobs and a.reward == b.reward and a.origin == b.origin
    loaded = list(iter_groups(samples))
    assert [[s.group_id for s in g] for g in loaded] == [[0, 0], [1, 1]]
    metrics = learner.step(loaded)
    assert metrics["train/samples"] == 4 and np.isfinite(metrics["train/loss"])


def _sample(group: int, k: int) -> TrainSample:
    return TrainSample([{"role": "user", "content": "x"}], None, (1, 1), (1, 1), "a", (97,), None, float(k),
                       group_id=group, id=f"{group}-{k}")


def test_iter_groups_streams_complete_groups():
    contiguous = [_sample(g, k) for g in (3, 1, 2) for k in range(2)]
    assert [[s.id for s in g] for g in iter_groups(contiguous)] == [["3-0", "3-1"], ["1-0", "1-1"], ["2-0", "2-1"]]

    def interleaved():
        yield _sample(1, 0)
        yield _sample(2, 0)
        yield _sample(1, 1)  # group 1 is complete here, before the stream goes on
        yield _sample(2, 1)
        yield _sample(3, 0)  # never completed: yielded at the end
        raise_if_pulled.append(True)

    raise_if_pulled: list[bool] = []
    it = iter_groups(interleaved(), group_size=2)
    assert [s.id for s in next(it)] == ["1-0", "1-1"] and not raise_if_pulled
    assert [[s.id for s in g] for g in it] == [["2-0", "2-1"], ["3-0"]]


def test_train_sample_rejects_mismatched_logprobs():
    with pytest.raises(ValueError, match="behaviour_logprobs has 1 entries for 2"):
        TrainSample([], None, (1, 1), (1, 1), "ab", (97, 98), (0.0,), 1.0)


def test_episode_level_groups_share_the_episode_advantage(backend):
    learner = Learner(backend, model=TrainModelConfig(lora_targets=TARGETS), algo="aepo")
    messages = [{"role": "user", "content": "x"}]

    def step(episode: str | None, reward: float, k: int) -> TrainSample:
        origin = {"episode": episode} if episode else {}
        return TrainSample(messages, None, (1, 1), (1, 1), "a", (97,), None, reward, group_id=0, origin=origin)

    # one task seed, three episodes of 3, 1 and 2 steps with rewards 1, 0, 0: RLOO over the episodes gives
    # 1 - (0 + 0)/2 = 1, 0 - (1 + 0)/2 = -0.5, -0.5; every step of an episode carries its episode's advantage
    group = [step("e1", 1.0, 0), step("e1", 1.0, 1), step("e1", 1.0, 2), step("e2", 0.0, 0),
             step("e3", 0.0, 0), step("e3", 0.0, 1)]
    adv = learner.group_advantages([group])
    assert adv.tolist() == pytest.approx([1.0, 1.0, 1.0, -0.5, -0.5, -0.5])
    # step-level: each sample is its own unit; the same rewards 1, 0, 0 give the same 1, -0.5, -0.5
    flat = [step(None, 1.0, 0), step(None, 0.0, 0), step(None, 0.0, 0)]
    assert learner.group_advantages([flat]).tolist() == pytest.approx([1.0, -0.5, -0.5])
    with pytest.raises(ValueError, match="episode 'e1' in group 0 has steps with different rewards"):
        learner.group_advantages([[step("e1", 1.0, 0), step("e1", 0.5, 1), step("e2", 0.0, 0)]])


def test_an_unusable_sample_is_skipped_not_fatal(backend, caplog, tmp_path):
    learner = Learner(backend, model=TrainModelConfig(lora_targets=TARGETS), algo="aepo")
    image = np.zeros((56, 56, 3), dtype=np.uint8)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "x"}]}]
    good = [TrainSample(messages, image, (56, 56), (56, 56), "a", (97, 98), None, float(k), group_id=0)
            for k in range(2)]
    out_of_vocab = TrainSample(messages, image, (56, 56), (56, 56), "?", (97, 10**7), None, 1.0, group_id=0,
                               id="s-oov")
    (tmp_path / "gone.npy").write_bytes(b"not an array")
    unreadable = TrainSample(messages, str(tmp_path / "gone.npy"), (56, 56), (56, 56), "a", (97,), None, 0.0,
                             group_id=0, id="s-img")
    with caplog.at_level(logging.WARNING, logger="train.learner"):
        metrics = learner.step([[*good, out_of_vocab, unreadable]])
    assert metrics["train/bad_samples"] == 2 and metrics["train/samples"] == 2
    assert "sample s-oov skipped: response token ids [10000000]" in caplog.text
    assert "sample s-img skipped: its image cannot be read" in caplog.text
    with pytest.raises(ValueError, match=r"needs at least one usable sample \(1 unusable"):
        learner.step([[out_of_vocab]])


def test_full_fine_tuning_learns_too(backend):
    # every weight trains (no adapter); the tiny model's small random weights need a large Adam step
    torch.manual_seed(0)
    learner = Learner(backend, RLConfig(lr=3e-2), TrainModelConfig(finetune="full"), algo="aepo")
    assert backend.peft_model is None and learner.lr == 3e-2
    n_params = sum(p.numel() for p in backend.model.parameters())
    assert sum(p.numel() for p in learner.params) == n_params
    rewards = []
    for step in range(12):
        groups = rollout_groups(backend, prompts(4), 4, ascii_share, max_new_tokens=8, first_group_id=10 * step,
                                adapter_version=learner.adapter_version)
        rewards.append(learner.step(groups)["train/reward_mean"])
    assert np.mean(rewards[-2:]) > np.mean(rewards[:2]) + 0.2, rewards


def test_several_passes_and_minibatches_compare_with_the_first_log_probs(backend):
    # ppo_epochs=2 x minibatches=2: four optimizer steps on one batch. pi_old is fixed before the first pass, so
    # the later steps see the moved policy against it (ratio away from 1, some clipping), whereas a single update
    # on fresh samples has ratio 1 throughout (the sampler's log-probs equal the recomputed ones).
    torch.manual_seed(0)
    single = Learner(backend, RLConfig(lr=5e-2), TrainModelConfig(lora_targets=TARGETS), algo="aepo")
    groups = rollout_groups(backend, prompts(4), 4, ascii_share, max_new_tokens=8,
                            adapter_version=single.adapter_version)
    m1 = single.step(groups)
    assert m1["train/optimizer_steps"] == 1
    assert m1["train/ratio_max"] == pytest.approx(1.0, abs=1e-3) and m1["train/clipfrac"] == 0.0

    several = Learner(backend, RLConfig(lr=5e-2, ppo_epochs=2, minibatches=2), TrainModelConfig(lora_targets=TARGETS), algo="aepo", seed=1)
    groups = rollout_groups(backend, prompts(4), 4, ascii_share, max_new_tokens=8,
                            adapter_version=several.adapter_version)
    m = several.step(groups)
    assert m["train/optimizer_steps"] == 4 and m["train/step"] == 1
    assert m["train/ratio_max"] > 1.01, m
    assert m["train/approx_kl"] > 0
    with pytest.raises(ValueError, match="ppo_epochs and minibatches must be at least 1"):
        RLConfig(ppo_epochs=0)

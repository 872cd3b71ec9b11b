"""Supervised fine-tuning, rejection sampling and greedy accuracy on the tiny random Qwen2.5-VL."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from policy.backends.hf import TransformersBackend
from policy.presets import Decoding, preset_for
from policy.tiny import build_tiny_qwen25vl
from train.learner import RolloutPrompt, encode_example
from train.config import TrainModelConfig
from train.sft import SFTExample, SupervisedLearner, greedy_accuracy, is_correct, rejection_sample

pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")

PRESET = preset_for("tiny-qwen", fmt="qwen2.5-vl", min_pixels=4 * 28 * 28, max_pixels=16 * 28 * 28,
                    decoding=Decoding(temperature=0.0, max_new_tokens=8))
TARGET = '[{"point_2d": [12, 34]}]'


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen25vl(tmp_path_factory.mktemp("tiny") / "model", seed=0)


@pytest.fixture
def backend(tiny_dir: Path) -> TransformersBackend:
    return TransformersBackend(tiny_dir, preset=PRESET)  # fresh per test: training changes it in place


def prompt(i: int) -> RolloutPrompt:
    image = np.random.default_rng(i).integers(0, 256, (56, 56, 3), dtype=np.uint8)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": f"Find item {i}."}]}]
    return RolloutPrompt(messages, image, (112, 112), target=i, origin={"screen": i})


def example(i: int, text: str = TARGET) -> SFTExample:
    p = prompt(i)
    return SFTExample(p.messages, p.image, text, {"screen": i})


def test_loss_is_the_token_mean_cross_entropy_of_target_tokens_only(backend):
    learner = SupervisedLearner(backend, TrainModelConfig(finetune="full"), lr=0.0)
    examples = [example(0, "[1]"), example(1, '{"a": 22}')]
    end = backend.tokenizer.convert_tokens_to_ids("<|im_end|>")
    total, tokens = 0.0, 0
    for e in examples:
        ids = [*backend.tokenizer.encode(e.target_text, add_special_tokens=False), end]
        inputs, prompt_len = encode_example(backend, e.messages, e.image, ids)
        assert inputs["input_ids"].shape[1] == prompt_len + len(ids)
        with torch.no_grad():
            logits = backend.model(**inputs).logits[0]
        # position t predicts token t + 1: the targets are predicted from prompt_len - 1 on; prompt tokens are not
        total += float(F.cross_entropy(logits[prompt_len - 1:-1], torch.tensor(ids), reduction="sum"))
        tokens += len(ids)
    assert tokens == 4 + 10  # byte-level tokens plus one end-of-turn each
    expected = total / tokens
    assert learner.loss(examples) == pytest.approx(expected, rel=1e-5)
    metrics = learner.step(examples)  # lr 0: the reported loss is the same pre-update number
    assert metrics["sft/loss"] == pytest.approx(expected, rel=1e-5)
    assert metrics["sft/tokens"] == tokens and metrics["sft/step"] == 1 and metrics["sft/grad_norm"] > 0


def test_sft_steps_make_the_target_the_greedy_answer(backend):
    torch.manual_seed(0)
    learner = SupervisedLearner(backend, TrainModelConfig(finetune="full"), lr=3e-3)
    examples = [example(0)]
    before_weights = {n: p.detach().clone() for n, p in backend.model.named_parameters()}
    with torch.no_grad():
        before_lp = float(learner.target_logprobs(examples[0]).sum())
    score = lambda p, text: text == TARGET  # noqa: E731
    assert greedy_accuracy(backend, [prompt(0)], score, max_new_tokens=32).accuracy == 0.0
    losses = [learner.step(examples)["sft/loss"] for _ in range(30)]
    with torch.no_grad():
        after_lp = float(learner.target_logprobs(examples[0]).sum())
    assert losses[-1] < 0.1 * losses[0], losses
    assert after_lp > before_lp + 20, (before_lp, after_lp)  # log-prob of the whole target, end-of-turn included
    result = greedy_accuracy(backend, [prompt(0)], score, max_new_tokens=32)
    assert result.texts == (TARGET,) and result.correct == (True,) and result.accuracy == 1.0
    assert any(not torch.equal(before_weights[n], p) for n, p in backend.model.named_parameters()
               if n.startswith("model.visual."))  # full fine-tuning reaches the vision tower too

    state = learner.state_dict()
    fresh = SupervisedLearner(backend, TrainModelConfig(finetune="full"), lr=3e-3)
    fresh.load_state_dict(state)
    assert fresh.steps == 30 and fresh.optimizer.state_dict()["state"].keys() == state["optimizer"]["state"].keys()
    with pytest.raises(ValueError, match="finetune='full'"):
        SupervisedLearner(backend, TrainModelConfig(finetune="lora")).load_state_dict(state)


def test_lora_sft_trains_only_the_adapter(backend):
    torch.manual_seed(0)
    base = {n: p.detach().clone() for n, p in backend.model.named_parameters()}
    learner = SupervisedLearner(backend, TrainModelConfig(finetune="lora", lora_targets=("q_proj", "v_proj", "lm_head")), lr=1e-2)
    assert learner.lr == 1e-2 and all("lora_" in n for n, p in learner.peft_model.named_parameters() if p.requires_grad)
    first = learner.loss([example(0)])
    for _ in range(5):
        learner.step([example(0)])
    assert learner.loss([example(0)]) < first - 0.5
    for n, p in backend.model.named_parameters():
        if "lora_" not in n:
            assert torch.equal(p, base[n.replace(".base_layer", "")]), n


def test_empty_target_text_is_a_value_error_naming_the_example(backend):
    learner = SupervisedLearner(backend)
    with pytest.raises(ValueError, match=r"example 1 \(origin \{'screen': 7\}\) has an empty target_text"):
        learner.step([example(0), example(7, "  ")])
    with pytest.raises(ValueError, match="at least one example"):
        learner.step([])
    with pytest.raises(ValueError, match="finetune 'qlora' is not lora or full"):
        SupervisedLearner(backend, TrainModelConfig(finetune="qlora"))


class EosBias:
    """Adds 5 to the end-of-turn logit so random-weight responses end within a few tokens."""

    def __init__(self, eos: int) -> None:
        self.eos = eos

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        scores = scores.clone()
        scores[:, self.eos] += 5.0
        return scores


@dataclass
class Scored:
    total: float
    parts: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


def test_rejection_sampling_keeps_only_accepted_finished_responses(tiny_dir):
    eos = 257  # <|im_end|> in policy.tiny's byte-level vocabulary
    backend = TransformersBackend(tiny_dir, preset=PRESET, logits_processor_factory=lambda req: EosBias(eos))
    seen: list[str] = []

    def reward(p: RolloutPrompt, text: str) -> Scored:  # even lengths are "correct"; longer scores higher
        seen.append(text)
        return Scored(float(len(text)), info={"first_correct": len(text) % 2 == 0})

    prompts = [prompt(i) for i in range(4)]
    torch.manual_seed(0)
    accepted, stats = rejection_sample(backend, prompts, 6, reward, per_prompt=None, max_new_tokens=6)
    assert stats.prompts == 4 and stats.sampled == len(seen) == 24
    assert stats.accepted == sum(len(t) % 2 == 0 for t in seen) and 0 < stats.accepted < 24
    assert stats.kept == len(accepted) == stats.accepted - stats.truncated - stats.empty
    assert all(len(e.target_text) % 2 == 0 and e.origin["reward"] == len(e.target_text) for e in accepted)
    first_seen = list(seen)

    seen.clear()
    torch.manual_seed(0)  # the same samples again, now keeping the best accepted one per prompt
    best, stats = rejection_sample(backend, prompts, 6, reward, max_new_tokens=6)
    assert seen == first_seen and stats.kept == len(best) == stats.prompts_kept
    for e in best:
        same_prompt = [a.origin["reward"] for a in accepted if a.origin["screen"] == e.origin["screen"]]
        assert e.origin["reward"] == max(same_prompt)
    assert {e.origin["screen"] for e in best} == {a.origin["screen"] for a in accepted}

    seen.clear()
    torch.manual_seed(0)
    everything, stats = rejection_sample(backend, prompts, 6, reward, accept=lambda r: True, per_prompt=None,
                                         max_new_tokens=6)
    assert stats.accepted == 24 and stats.kept == len(everything) == 24 - stats.truncated - stats.empty
    assert stats.empty == seen.count("") > 0  # the end-of-turn bias makes some responses end at once
    assert all(e.target_text and e.target_text in seen for e in everything)
    assert not is_correct(Scored(1.0, {"accuracy": 0.0})) and is_correct(Scored(0.5)) and not is_correct(-1.0)

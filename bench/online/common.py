"""What the online benchmarks share: the tiny model's training settings and constrained first answers."""

from __future__ import annotations

from typing import Any

from agent.config import load_train_config

TINY = [
    'model.id="tiny"', "data.think=false", "rl.group_size=4", "rl.batch_prompts=2", "rl.max_new_tokens=32",
    'model.lora_targets=["q_proj", "v_proj", "lm_head"]', "rl.lr=0.02", "log.tensorboard=false", "log.png=false",
    "eval.every=0", "checkpoint.every=0", "train.steps=100000",
]
"""The tiny random Qwen2.5-VL, 4 answers per screen, 2 groups per update, answers of up to 32 tokens."""


def tiny_config(run_dir: str, *more: str) -> Any:
    return load_train_config(None, [*TINY, f'train.run_dir="{run_dir}"', *more])


class ForceFirstAnswer:
    """Constrained decoding for the random tiny model: the first answer of each request is a parsable click at the
    screen's centre (``text``), the others are the model's noise. Groups then have a reward spread, so the learner
    updates and publishes versions as it would with a real model."""

    def __init__(self, tokenizer: Any, text: str = '[{"point_2d": [140, 84]}]') -> None:
        from policy.backends.hf import ForceTextLogitsProcessor

        self.inner = ForceTextLogitsProcessor(tokenizer, text)

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        scores = scores.clone()
        scores[:1] = self.inner(input_ids[:1], scores[:1])
        return scores


def force_first_answer(session: Any) -> Any:
    """A ``logits_processor_factory`` for ``session``'s actors' backend."""
    return lambda request: ForceFirstAnswer(session.backend.tokenizer)

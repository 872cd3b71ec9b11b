"""Supervised fine-tuning on target texts, rejection sampling, and greedy held-out accuracy.

Three pieces of the recipe around the RL learner (``train.learner``), on the same transformers backend, trained in
place like it:

- ``SupervisedLearner.step(examples)``: one AdamW step of token-mean cross-entropy on each example's target text
  (tokenised with the backend's tokenizer, then the chat's end-of-turn token so the model learns to stop), the
  prompt masked out. Prompt and target are encoded by ``train.learner.encode_example``, exactly as the backend
  encodes a request, so what is trained is what ``agent run`` shows the model. Full fine-tuning (every weight) or
  LoRA (the backend's peft adapter, created when it has none).
- ``rejection_sample(...)``: the recipe's third stage, SFT on the RL policy's own correct outputs. It samples n
  responses per prompt at temperature 1 (``rollout_groups``), keeps those that ``accept``, that ended with
  EOS and are not blank, by default the best-scoring correct one per prompt, and returns them as SFT examples
  with counts.
- ``greedy_accuracy(...)``: held-out top-1 accuracy with greedy decoding, batched through the backend, with
  per-prompt correctness (for a paired bootstrap between two checkpoints on the same prompts).

Examples are forwarded one at a time and their gradients accumulated, each weighted by its share of the batch's
target tokens: the exact token-mean while holding only one example's graph (as the RL learner does).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from policy.backends.base import GenerationRequest
from policy.presets import Decoding
from train.algos import token_logprobs
from train.config import TrainModelConfig
from train.learner import RolloutPrompt, attach_lora, encode_example, rollout_groups
from train.samples import load_image, messages_with_image

if TYPE_CHECKING:
    from policy.backends.hf import TransformersBackend

log = logging.getLogger(__name__)

__all__ = ["AccuracyResult", "RejectionStats", "SFTExample", "SupervisedLearner", "greedy_accuracy", "is_correct",
           "rejection_sample"]

DEFAULT_SFT_LR = {"full": 1e-5, "lora": 1e-4}
END_OF_TURN = "<|im_end|>"
"""Qwen's ChatML end-of-turn token: what the chat template writes after an assistant message."""


@dataclass(frozen=True, slots=True)
class SFTExample:
    """One prompt (messages with a bare ``{"type": "image"}`` part, and the model-input image as an RGB array or a
    path) and the text the model should answer; ``origin`` says where it came from (it names the example in
    errors)."""

    messages: list[dict[str, Any]]
    image: np.ndarray | str | None
    target_text: str
    origin: dict[str, Any] = field(default_factory=dict)

    def image_array(self) -> np.ndarray | None:
        return load_image(self.image) if isinstance(self.image, str) else self.image


def end_of_turn_id(tokenizer: Any) -> int:
    """The token that ends an assistant turn: ``<|im_end|>`` where the vocabulary has it, else the EOS token."""
    vocab = tokenizer.get_vocab()
    if END_OF_TURN in vocab:
        return int(vocab[END_OF_TURN])
    if tokenizer.eos_token_id is None:
        raise ValueError(f"the tokenizer has neither {END_OF_TURN} nor an EOS token to end the target with")
    return int(tokenizer.eos_token_id)


class SupervisedLearner:
    """Cross-entropy updates of ``backend.model`` on target texts (see the module docstring); the trainer uses it
    as a ``train.trainable.Trainable``.

    Args:
        backend: the transformers backend whose model is trained in place.
        model: how it is fine-tuned (``[model]``: "full", every weight, or "lora", the backend's active peft adapter
            or a new one of ``lora_rank`` / ``lora_alpha`` / ``lora_targets``; gradient checkpointing). Default
            ``TrainModelConfig(finetune="full")``.
        lr: AdamW learning rate; default 1e-5 for full fine-tuning, 1e-4 for LoRA (``sft.lr``).
        weight_decay: AdamW weight decay.
        max_grad_norm: gradient-norm clip.
        adapter_name: the name of a created adapter.
        accelerator: an ``accelerate.Accelerator`` for several processes (None: this process alone).
    """

    def __init__(self, backend: TransformersBackend, model: TrainModelConfig | None = None, *,
                 lr: float | None = None, weight_decay: float = 0.0, max_grad_norm: float = 1.0,
                 adapter_name: str = "sft", accelerator: Any = None) -> None:
        model = TrainModelConfig(finetune="full") if model is None else model
        finetune, lora_rank, lora_alpha, lora_targets = (model.finetune, model.lora_rank, model.lora_alpha,
                                                         model.lora_targets)
        gradient_checkpointing = model.gradient_checkpointing
        self.backend = backend
        self.finetune = finetune
        self.lr = DEFAULT_SFT_LR[finetune] if lr is None else lr
        self.max_grad_norm = max_grad_norm
        self.accelerator = accelerator
        self.steps = 0
        """Completed ``step()`` calls."""
        self.end_id = end_of_turn_id(backend.tokenizer)
        if finetune == "lora":
            self.peft_model, self.adapter_name = attach_lora(backend, lora_rank, lora_alpha, lora_targets, adapter_name)
        else:
            self.peft_model = backend.model
            self.adapter_name = adapter_name
            for p in self.peft_model.parameters():
                p.requires_grad_(True)
        if gradient_checkpointing:
            backend.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            if finetune == "lora":
                backend.model.enable_input_require_grads()
        self.params = [p for p in self.peft_model.parameters() if p.requires_grad]
        if not self.params:
            raise RuntimeError("no trainable parameters: check lora_targets against the model's module names")
        self.optimizer = torch.optim.AdamW(self.params, lr=self.lr, weight_decay=weight_decay)
        self._train_model = self.peft_model
        if accelerator is not None:
            self._train_model, self.optimizer = accelerator.prepare(self.peft_model, self.optimizer)

    @property
    def world_size(self) -> int:
        return 1 if self.accelerator is None else int(self.accelerator.num_processes)

    @property
    def adapter_version(self) -> str:
        """The adapter's name and the number of updates applied."""
        return f"{self.adapter_name}@{self.steps}"

    def target_ids(self, example: SFTExample, index: int = 0) -> list[int]:
        """The target's token ids followed by the end-of-turn token; a ValueError naming the example when the
        target text is empty."""
        if not isinstance(example.target_text, str) or not example.target_text.strip():
            raise ValueError(f"example {index} (origin {example.origin or {}}) has an empty target_text "
                             f"({example.target_text!r}): every SFT example needs the text the model should answer")
        return [*self.backend.tokenizer.encode(example.target_text, add_special_tokens=False), self.end_id]

    def target_logprobs(self, example: SFTExample, index: int = 0, model: Any = None) -> torch.Tensor:
        """``[1, T]`` log-probs of the target tokens (end-of-turn included) given the prompt, under ``model``
        (default: the model being trained, with grad when enabled)."""
        ids = self.target_ids(example, index)
        inputs, prompt_len = encode_example(self.backend, example.messages, example.image_array(), ids)
        model = self._train_model if model is None else model
        logits = model(**inputs, use_cache=False).logits
        shifted = logits[:, prompt_len - 1: prompt_len - 1 + len(ids)]
        return token_logprobs(shifted, torch.tensor([ids], dtype=torch.long, device=shifted.device))

    def loss(self, examples: Sequence[SFTExample]) -> float:
        """Token-mean cross-entropy over the examples' target tokens, without updating (no grad)."""
        examples = list(examples)
        with torch.no_grad(), self.backend.lock():
            lps = [self.target_logprobs(e, i) for i, e in enumerate(examples)]
        return float(-torch.cat([lp[0] for lp in lps]).mean())

    def skip_reason(self, examples: Sequence[SFTExample]) -> str:
        """Why a step on ``examples`` would change nothing ("" when it would): there is no example."""
        return "" if examples else "no example to learn from"

    def step(self, examples: Sequence[SFTExample]) -> dict[str, float]:
        """One AdamW step on ``examples`` (this process's share of the batch); returns metrics."""
        examples = list(examples)
        if not examples:
            raise ValueError("step() needs at least one example")
        counts = [len(self.target_ids(e, i)) for i, e in enumerate(examples)]  # validates every target first
        local_tokens = sum(counts)
        total_tokens = self._global_tokens(local_tokens)
        # DDP averages gradients over processes; the world-size factor turns that average back into the global sum.
        scale = self.world_size / total_tokens
        loss_sum = 0.0
        with self.backend.lock():
            self.peft_model.eval()  # no dropout: the same function the sampler computes
            self.optimizer.zero_grad(set_to_none=True)
            for i, example in enumerate(examples):
                sync = i == len(examples) - 1
                with self._no_sync(not sync), torch.enable_grad():
                    nll = -self.target_logprobs(example, i).sum()
                    if self.accelerator is not None:
                        self.accelerator.backward(nll * scale)
                    else:
                        (nll * scale).backward()
                loss_sum += float(nll.detach())
            grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm)
            if torch.isfinite(grad_norm):
                self.optimizer.step()
            else:
                log.warning("non-finite gradient norm %s: SFT update skipped", float(grad_norm))
            self.optimizer.zero_grad(set_to_none=True)
            self.steps += 1
        return {"sft/loss": loss_sum / local_tokens, "sft/tokens": float(local_tokens),
                "sft/examples": float(len(examples)), "sft/grad_norm": float(grad_norm), "sft/step": float(self.steps)}

    def _global_tokens(self, local: int) -> int:
        if self.world_size == 1:
            return local
        t = torch.tensor([local], dtype=torch.long, device=self.accelerator.device)
        return int(self.accelerator.reduce(t, reduction="sum").item())

    def _no_sync(self, skip: bool) -> Any:
        if skip and self.accelerator is not None and self.world_size > 1:
            return self.accelerator.no_sync(self._train_model)
        return contextlib.nullcontext()

    def state_dict(self) -> dict[str, Any]:
        """Optimizer state and step count: what a checkpoint needs besides the weights."""
        return {"optimizer": self.optimizer.state_dict(), "steps": self.steps, "finetune": self.finetune}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("finetune") != self.finetune:
            raise ValueError(f"checkpoint was written with finetune={state.get('finetune')!r}, this learner has "
                             f"finetune={self.finetune!r}; resume with the same setting")
        self.optimizer.load_state_dict(state["optimizer"])
        self.steps = int(state["steps"])


# -- rejection sampling ---------------------------------------------------------------------------


def is_correct(result: Any) -> bool:
    """The default acceptance rule: the first answer is right.

    A RewardResult whose ``info`` has ``first_correct`` (``aepo_reward``) uses it; else a positive ``accuracy``
    part (``guir1_reward``); a bare float is correct when positive."""
    info = getattr(result, "info", None) or {}
    if "first_correct" in info:
        return bool(info["first_correct"])
    parts = getattr(result, "parts", None)
    if parts is not None and "accuracy" in parts:
        return float(parts["accuracy"]) > 0
    return float(getattr(result, "total", result)) > 0


@dataclass(frozen=True, slots=True)
class RejectionStats:
    prompts: int
    sampled: int
    """Responses scored (samples with no tokens are skipped by the rollout)."""
    accepted: int
    """Responses ``accept`` took."""
    truncated: int
    """Accepted responses dropped because they hit max_new_tokens instead of ending with EOS."""
    empty: int
    """Accepted responses dropped because their text is empty (EOS first: there is nothing to learn)."""
    kept: int
    """Examples returned (at most ``per_prompt`` per prompt)."""
    prompts_kept: int
    """Prompts with at least one kept example."""

    @property
    def accept_rate(self) -> float:
        return self.accepted / self.sampled if self.sampled else 0.0


def rejection_sample(backend: TransformersBackend, prompts: Sequence[RolloutPrompt], n: int,
                     reward_fn: Callable[[RolloutPrompt, str], Any], *,
                     accept: Callable[[Any], bool] = is_correct, per_prompt: int | None = 1,
                     max_new_tokens: int = 64) -> tuple[list[SFTExample], RejectionStats]:
    """SFT examples from the policy's own accepted outputs: ``n`` samples per prompt at temperature 1, scored by
    ``reward_fn(prompt, text)``; those ``accept(result)`` takes, that ended with EOS and whose text is
    not blank are ranked by reward and
    the best ``per_prompt`` of each prompt kept (None: all). ``accept`` gets what ``reward_fn`` returned."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if per_prompt is not None and per_prompt < 1:
        raise ValueError(f"per_prompt must be >= 1 or None, got {per_prompt}")
    results: list[Any] = []

    def scored(prompt: RolloutPrompt, text: str) -> Any:
        # rollout_groups keeps only a float and parts; the full result is what ``accept`` reads
        r = reward_fn(prompt, text)
        results.append(r)
        return r

    groups = rollout_groups(backend, prompts, n, scored, max_new_tokens=max_new_tokens)
    stop_ids = {end_of_turn_id(backend.tokenizer)}
    if backend.tokenizer.eos_token_id is not None:
        stop_ids.add(int(backend.tokenizer.eos_token_id))
    examples: list[SFTExample] = []
    sampled = accepted = truncated = empty = prompts_kept = 0
    flat = iter(results)
    for prompt, group in zip(prompts, groups):
        chosen = []
        for sample in group:
            result = next(flat)
            sampled += 1
            if not accept(result):
                continue
            accepted += 1
            if sample.response_ids[-1] not in stop_ids:
                truncated += 1
                continue
            if not sample.response_text.strip():
                empty += 1
                continue
            chosen.append(sample)
        chosen.sort(key=lambda s: -s.reward)  # stable: ties keep sampling order
        chosen = chosen if per_prompt is None else chosen[:per_prompt]
        prompts_kept += bool(chosen)
        examples.extend(SFTExample(prompt.messages, prompt.image, s.response_text,
                                   {**prompt.origin, "sample": s.origin.get("sample"), "reward": s.reward})
                        for s in chosen)
    stats = RejectionStats(len(prompts), sampled, accepted, truncated, empty, len(examples), prompts_kept)
    return examples, stats


# -- held-out accuracy ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AccuracyResult:
    accuracy: float
    correct: tuple[bool, ...]
    """Per prompt, in order (for a paired bootstrap against another checkpoint on the same prompts)."""
    texts: tuple[str, ...]
    """The greedy responses, in order."""


def greedy_accuracy(backend: TransformersBackend, prompts: Sequence[RolloutPrompt],
                    score_fn: Callable[[RolloutPrompt, str], Any], *, batch_size: int = 32,
                    max_new_tokens: int = 64) -> AccuracyResult:
    """Share of ``prompts`` whose greedy (temperature 0) response ``score_fn(prompt, text)`` calls correct (a bool,
    or a result read by ``is_correct``), generated ``batch_size`` prompts per batched ``generate`` call.

    Synchronous (it runs the backend's coroutine with ``asyncio.run``): call it outside an event loop."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    decoding = Decoding(temperature=0.0, max_new_tokens=max_new_tokens)
    texts: list[str] = []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start:start + batch_size]
        requests = [GenerationRequest(messages_with_image(p.messages, p.image), n=1, decoding=decoding) for p in chunk]
        gens = asyncio.run(backend.generate(requests))
        texts.extend(g.samples[0].text for g in gens)
    correct = []
    for p, t in zip(prompts, texts):
        r = score_fn(p, t)
        correct.append(bool(r) if isinstance(r, bool) else is_correct(r))
    accuracy = sum(correct) / len(correct) if correct else math.nan
    return AccuracyResult(accuracy, tuple(correct), tuple(texts))

"""The policy-gradient learner core: one update from scored groups of samples, on a transformers backend's model.

``Learner`` trains a LoRA adapter in place on ``TransformersBackend.model`` (peft), so the backend samples from the
adapter being trained with no copy and no reload. One ``step(groups)``:

1. re-encodes each sample's prompt exactly as the backend does (its processor and chat template, the image as the
   model-input array) and appends the response token ids;
2. computes the response tokens' current log-probs by teacher forcing;
3. takes the old log-probs from the samples' behaviour log-probs (or the detached current ones where missing);
4. computes one advantage per sample from the rewards of its group (RLOO for AEPO, GRPO's std-normalised one);
5. the PPO surrogate (``train.algos.policy_loss``, token-mean over the whole batch) plus, with ``kl_coef > 0``, the
   k3 KL against the base model, computed with the adapter switched off (peft's ``disable_adapter``: no second copy
   of the weights);
6. backward, gradient-norm clipping, one AdamW step.

Samples are forwarded one at a time and their gradients accumulated, each weighted by its share of the batch's
response tokens, which gives exactly the batch token-mean while holding only one sample's graph.

LoRA is a deviation from both papers, which fine-tune all weights at lr 1e-6; a LoRA adapter needs a much larger
step, hence the 1e-4 default here.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

from policy.backends.base import GenerationRequest
from policy.presets import Decoding
from train.algos import grpo_advantages, kl_k3, policy_loss, rloo_advantages, token_logprobs, zero_std_groups
from train.samples import TrainSample, messages_with_image

if TYPE_CHECKING:
    from policy.backends.hf import TransformersBackend

log = logging.getLogger(__name__)

__all__ = ["Learner", "RolloutPrompt", "rollout_groups"]

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
"""The language model's attention projections (the vision tower's are named ``qkv`` / ``proj``: not matched)."""

_DEFAULTS = {  # algo -> (clip_high, kl_coef), per shared/research/algorithms.md §1.4 and §2.4
    "aepo": (0.4, 0.0),
    "grpo": (0.2, 0.01),
}


class Learner:
    """Policy-gradient updates of a LoRA adapter on ``backend.model`` (see the module docstring).

    Args:
        backend: the transformers backend whose model is trained in place (its generation then uses the adapter).
        algo: "aepo" (InfiGUI-G1: RLOO advantages, clip 0.2/0.4, dual-clip 3, no KL) or "grpo" (GUI-R1: GRPO
            advantages, clip 0.2/0.2, dual-clip 3, k3 KL 0.01).
        lr: AdamW learning rate. 1e-4 suits a LoRA adapter; the papers' 1e-6 is for full fine-tuning.
        clip_low / clip_high: PPO ratio bounds; clip_high defaults to 0.4 (aepo) or 0.2 (grpo).
        kl_coef: weight of the k3 KL to the base model; defaults to 0.0 (aepo) or 0.01 (grpo).
        max_grad_norm: gradient-norm clip.
        dual_clip: dual-clip bound for negative advantages (None: off).
        lora_rank / lora_alpha / lora_targets: the adapter created when the model has none (default: the language
            model's q/k/v/o projections; add "lm_head" to adapt the output layer too).
        adapter_name: the name of that adapter.
    """

    def __init__(self, backend: TransformersBackend, *, algo: Literal["aepo", "grpo"] = "aepo", lr: float = 1e-4,
                 clip_low: float = 0.2, clip_high: float | None = None, kl_coef: float | None = None,
                 max_grad_norm: float = 1.0, dual_clip: float | None = 3.0, weight_decay: float = 0.0,
                 lora_rank: int = 8, lora_alpha: int = 16, lora_targets: Sequence[str] = LORA_TARGETS,
                 adapter_name: str = "learner") -> None:
        if algo not in _DEFAULTS:
            raise ValueError(f"algo must be 'aepo' or 'grpo', got {algo!r}")
        self.backend = backend
        self.algo = algo
        self.clip_low = clip_low
        self.clip_high = _DEFAULTS[algo][0] if clip_high is None else clip_high
        self.kl_coef = _DEFAULTS[algo][1] if kl_coef is None else kl_coef
        self.max_grad_norm = max_grad_norm
        self.dual_clip = dual_clip
        self.steps = 0
        self.peft_model = self._attach_adapter(lora_rank, lora_alpha, list(lora_targets), adapter_name)
        self.params = [p for p in self.peft_model.parameters() if p.requires_grad]
        if not self.params:
            raise RuntimeError("no trainable parameters after attaching the LoRA adapter")
        self.optimizer = torch.optim.AdamW(self.params, lr=lr, weight_decay=weight_decay)

    # -- setup --------------------------------------------------------------------------------

    def _attach_adapter(self, rank: int, alpha: int, targets: list[str], name: str) -> Any:
        """The backend's peft model with a trainable active adapter: a new LoRA adapter when the backend has none,
        else the active loaded one made trainable."""
        b = self.backend
        with b._lock:
            if b._peft is None:
                from peft import LoraConfig, get_peft_model

                config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules=targets,
                                    bias="none")
                b._peft = get_peft_model(b.model, config, adapter_name=name)
                b._adapters[name] = None  # type: ignore[assignment]  # created here, not loaded from a folder
                b._peft.base_model.enable_adapter_layers()
                b._active = name
            elif b._active is None:
                raise RuntimeError("the backend's adapters are disabled; call backend.use_adapter(version) first")
            active = b._active
            for pname, p in b._peft.named_parameters():
                p.requires_grad_("lora_" in pname and f".{active}." in pname)
            self.adapter_name = active
            return b._peft

    @property
    def adapter_version(self) -> str:
        """The adapter's name and the number of updates applied: what rollouts should record."""
        return f"{self.adapter_name}@{self.steps}"

    # -- encoding and log-probs ---------------------------------------------------------------

    def encode(self, sample: TrainSample) -> tuple[dict[str, torch.Tensor], int]:
        """Model inputs for prompt + response (the backend's processor and chat template) and the prompt length."""
        from policy.backends.hf import _split_images

        messages, images = _split_images(sample.messages_with_image())
        proc = self.backend.processor
        text = proc.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        enc = proc(text=[text], images=images or None, return_tensors="pt")
        prompt_len = enc["input_ids"].shape[1]
        resp = torch.tensor([sample.response_ids], dtype=enc["input_ids"].dtype)
        # A sampled vision placeholder token (a random or broken model can emit <|image_pad|>) would make the
        # model look for image features that are not there; feed the pad token in its place. Targets keep the
        # sampled ids (the caller reads them from the sample), only later tokens' context differs.
        vision = self._vision_token_ids()
        if vision:
            bad = torch.isin(resp, torch.tensor(sorted(vision), dtype=resp.dtype))
            if bad.any():
                resp = resp.masked_fill(bad, self.backend.tokenizer.pad_token_id or 0)
        enc["input_ids"] = torch.cat([enc["input_ids"], resp], dim=1)
        enc["attention_mask"] = torch.cat([enc["attention_mask"], torch.ones_like(resp)], dim=1)
        if "mm_token_type_ids" in enc:
            enc["mm_token_type_ids"] = torch.cat([enc["mm_token_type_ids"], torch.zeros_like(resp)], dim=1)
        device = self.backend.model.device
        return {k: v.to(device) for k, v in enc.items()}, prompt_len

    def response_logprobs(self, sample: TrainSample, inputs: dict[str, torch.Tensor] | None = None,
                          prompt_len: int | None = None) -> torch.Tensor:
        """``[1, T]`` log-probs of the sample's response tokens under the current model (with grad when enabled)."""
        if inputs is None or prompt_len is None:
            inputs, prompt_len = self.encode(sample)
        logits = self.peft_model(**inputs, use_cache=False).logits
        n = len(sample.response_ids)
        shifted = logits[:, prompt_len - 1: prompt_len - 1 + n]
        targets = torch.tensor([sample.response_ids], dtype=torch.long, device=shifted.device)
        return token_logprobs(shifted, targets)

    def _vision_token_ids(self) -> frozenset[int]:
        cfg = self.backend.model.config
        names = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
        return frozenset(int(v) for v in (getattr(cfg, n, None) for n in names) if v is not None)

    # -- the update ---------------------------------------------------------------------------

    def advantages(self, rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
        return rloo_advantages(rewards, group_ids) if self.algo == "aepo" else grpo_advantages(rewards, group_ids)

    def step(self, groups: Sequence[Sequence[TrainSample]]) -> dict[str, float]:
        """One optimizer step on ``groups`` (each a list of samples sharing a group id); returns metrics."""
        samples = [s for g in groups for s in g]
        if not samples:
            raise ValueError("step() needs at least one sample")
        # Groups are numbered by position, so equal group ids in different lists cannot merge by accident.
        group_ids = torch.tensor([gi for gi, g in enumerate(groups) for _ in g])
        rewards = torch.tensor([s.reward for s in samples], dtype=torch.float32)
        adv = self.advantages(rewards, group_ids)
        total_tokens = sum(len(s.response_ids) for s in samples)

        sums: dict[str, float] = {"loss": 0.0, "pg_loss": 0.0, "kl": 0.0, "clipfrac": 0.0, "approx_kl": 0.0,
                                  "ratio_max": 0.0}
        b = self.backend
        with b._lock:
            self.peft_model.eval()  # no dropout: the recomputed log-probs match the sampler's
            self.optimizer.zero_grad(set_to_none=True)
            for s, a in zip(samples, adv):
                inputs, prompt_len = self.encode(s)
                with torch.enable_grad():
                    logprobs = self.response_logprobs(s, inputs, prompt_len)
                old = (torch.tensor([s.behaviour_logprobs], dtype=logprobs.dtype, device=logprobs.device)
                       if s.behaviour_logprobs is not None else logprobs.detach())
                mask = torch.ones_like(logprobs, dtype=torch.bool)
                loss, m = policy_loss(logprobs, old, a.reshape(1).to(logprobs.device), mask, clip_low=self.clip_low,
                                      clip_high=self.clip_high, dual_clip=self.dual_clip)
                kl_value = 0.0
                if self.kl_coef > 0:
                    with torch.no_grad(), self.peft_model.disable_adapter():
                        ref = self.response_logprobs(s, inputs, prompt_len)
                    kl = kl_k3(logprobs, ref, mask)
                    loss = loss + self.kl_coef * kl
                    kl_value = float(kl.detach())
                weight = len(s.response_ids) / total_tokens
                (loss * weight).backward()
                sums["loss"] += float(loss.detach()) * weight
                sums["pg_loss"] += m.pg_loss * weight
                sums["kl"] += kl_value * weight
                sums["clipfrac"] += m.clipfrac * weight
                sums["approx_kl"] += m.approx_kl * weight
                sums["ratio_max"] = max(sums["ratio_max"], m.ratio_max)
            grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm)
            if torch.isfinite(grad_norm):
                self.optimizer.step()
            else:
                log.warning("non-finite gradient norm %s: update skipped", float(grad_norm))
            self.optimizer.zero_grad(set_to_none=True)
            self.steps += 1

        zero_std = zero_std_groups(rewards, group_ids)
        n_zero_groups = len({int(g) for g, z in zip(group_ids, zero_std) if z})
        return {
            **{f"train/{k}": v for k, v in sums.items()},
            "train/grad_norm": float(grad_norm),
            "train/reward_mean": float(rewards.mean()),
            "train/reward_std": float(rewards.std(unbiased=False)),
            "train/zero_std_group_share": n_zero_groups / len(groups),
            "train/advantage_abs_mean": float(adv.abs().mean()),
            "train/samples": float(len(samples)),
            "train/response_tokens": float(total_tokens),
            "train/step": float(self.steps),
        }


# -- rollouts -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RolloutPrompt:
    """One prompt to sample a group for: messages with a bare ``{"type": "image"}`` part, the model-input image,
    the frame size it came from, and whatever the reward function needs (``target``) plus provenance."""

    messages: list[dict[str, Any]]
    image: np.ndarray | None
    frame_size: tuple[int, int]
    target: Any = None
    origin: dict[str, Any] = field(default_factory=dict)


RewardFn = Callable[[RolloutPrompt, str], Any]
"""``reward_fn(prompt, response_text)`` -> a float, or an object with ``total`` and ``parts`` (a RewardResult)."""


def rollout_groups(backend: TransformersBackend, prompts: Sequence[RolloutPrompt], n: int, reward_fn: RewardFn, *,
                   max_new_tokens: int = 64, first_group_id: int = 0,
                   adapter_version: str | None = None) -> list[list[TrainSample]]:
    """Sample ``n`` responses per prompt through the backend at temperature 1 (top-p 1, no penalties, so the
    behaviour log-probs are the model's own) and score them into one group of TrainSamples per prompt.

    Synchronous (it runs the backend's coroutine with ``asyncio.run``): call it outside an event loop."""
    decoding = Decoding(temperature=1.0, top_p=1.0, max_new_tokens=max_new_tokens)
    requests = [GenerationRequest(messages_with_image(p.messages, p.image), n=n, decoding=decoding) for p in prompts]
    gens = asyncio.run(backend.generate(requests))
    version = adapter_version if adapter_version is not None else backend.adapter_version
    groups = []
    for gi, (p, gen) in enumerate(zip(prompts, gens)):
        group = []
        input_size = (int(p.image.shape[1]), int(p.image.shape[0])) if p.image is not None else (0, 0)
        for si, s in enumerate(gen.samples):
            if not s.token_ids:
                log.warning("prompt %d sample %d has no token ids; skipped", gi, si)
                continue
            r = reward_fn(p, s.text)
            total, parts = (float(r.total), dict(r.parts)) if hasattr(r, "total") else (float(r), {})
            if not math.isfinite(total):
                raise ValueError(f"reward_fn returned a non-finite reward {total} for prompt {gi}")
            group.append(TrainSample(
                messages=p.messages, image=p.image, frame_size=p.frame_size, input_size=input_size,
                response_text=s.text, response_ids=tuple(s.token_ids), behaviour_logprobs=s.logprobs,
                reward=total, reward_parts=parts, group_id=first_group_id + gi, adapter_version=version,
                origin={**p.origin, "sample": si},
            ))
        groups.append(group)
    return groups

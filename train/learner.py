"""The policy-gradient learner: updates from scored groups of samples, on a transformers backend's model.

``Learner`` trains the model that ``TransformersBackend`` samples from, in place: a LoRA adapter (peft, the
default) or every weight (``finetune="full"``). Rollouts therefore use the policy being trained, with no copy and
no reload. One ``step(groups)``:

1. drops samples more than ``max_staleness`` updates behind (their adapter version says how far), counted;
2. computes one advantage per sample from the rewards of its group (RLOO for AEPO, GRPO's std-normalised one);
3. re-encodes the prompts exactly as the backend does (its processor and chat template, the image as the
   model-input array): each distinct prompt once (``train.prefix.UpdatePlan``), or with ``shared_prefix=False``
   each sample's prompt + response on every pass (``encode_example``);
4. fixes the "old" log-probs for the PPO ratio: the samples' behaviour log-probs when they are fresh and there is a
   single update per batch, else the current policy's, recomputed once before the first update; in that case a
   sample with behaviour log-probs also gets the truncated importance weight pi_old / pi_behaviour (capped at
   ``max_is_ratio``) that corrects for the older sampler;
5. for each of ``ppo_epochs`` passes over ``minibatches`` shuffled mini-batches of groups: the PPO surrogate
   (``train.algos.policy_loss``, token-mean over the mini-batch) plus, with ``kl_coef > 0``, the k3 KL against the
   reference (with LoRA: the same model with the adapter switched off, no second copy; full fine-tuning keeps a
   frozen copy, made only when the KL is on), backward, gradient-norm clipping, one AdamW step and a scheduler step.

Each sample's loss is weighted by its share of the mini-batch's response tokens, which gives exactly the token-mean
over the mini-batch. By default (``shared_prefix``) the answers that share a prompt are scored together: the prompt
runs once, the answers continue it in one batch on its KV cache, and one backward covers them (``train.prefix``);
the prompt is encoded once per update, and with the vision tower frozen so is each image. With
``shared_prefix=False`` samples are forwarded one at a time (prompt + answer), each with its own backward, holding
only one sample's graph.

Several processes: pass an ``accelerate.Accelerator``. Under ``accelerate launch`` each process gets its own share
of groups; the per-process token shares are weighted by the global token count and the gradients are averaged by
DDP, so the update equals the single-process one. The model is wrapped by ``accelerator.prepare`` (DDP, or FSDP when
the accelerate config asks for it) and unwrapped for generation.

LoRA is a deviation from both papers, which fine-tune all weights at lr 1e-6; a LoRA adapter needs a much larger
step, hence the 1e-4 default for LoRA and 1e-6 for full fine-tuning.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import math
import random
import re
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

from policy.backends.base import GenerationRequest
from policy.presets import Decoding
from train.config import RLConfig, TrainModelConfig
from train.algos import grpo_advantages, kl_k3, policy_loss, rloo_advantages, token_logprobs, zero_std_groups
from train.prefix import (ImageFeatures, UpdatePlan, encode_prompt, is_vision_parameter, prefix_logprobs,
                          response_inputs, vision_frozen)
from train.samples import RolloutPrompt, TrainSample, messages_with_image

if TYPE_CHECKING:
    from policy.backends.hf import TransformersBackend

log = logging.getLogger(__name__)

__all__ = ["Learner", "RolloutPrompt", "attach_lora", "encode_example", "rollout_groups"]

LORA_TARGETS = TrainModelConfig().lora_targets
"""The language model's attention projections (the vision tower's are named ``qkv`` / ``proj``: not matched)."""

_DEFAULTS = {  # algo -> (clip_high, kl_coef), as released (docs/algorithms.md, "Defaults against the papers")
    "aepo": (0.4, 0.0),
    "grpo": (0.2, 0.01),
}
DEFAULT_LR = {"lora": 1e-4, "full": 1e-6}
_VERSION = re.compile(r"^(?P<name>.+)@(?P<step>\d+)$")


def encode_example(backend: TransformersBackend, messages: list[dict[str, Any]], image: np.ndarray | None,
                   response_ids: Sequence[int]) -> tuple[dict[str, torch.Tensor], int]:
    """Model inputs for prompt + response, encoded exactly as the backend encodes a request (its processor and
    chat template, the image as the model-input array), and the prompt length in tokens. A vision placeholder in
    the response is fed as the pad token (``train.prefix.response_inputs``)."""
    enc = encode_prompt(backend, messages, image)
    prompt_len = enc["input_ids"].shape[1]
    ids = enc["input_ids"]
    resp = torch.tensor([response_inputs(backend, response_ids)], dtype=ids.dtype, device=ids.device)
    enc["input_ids"] = torch.cat([ids, resp], dim=1)
    enc["attention_mask"] = torch.cat([enc["attention_mask"], torch.ones_like(resp)], dim=1)
    if "mm_token_type_ids" in enc:
        enc["mm_token_type_ids"] = torch.cat([enc["mm_token_type_ids"], torch.zeros_like(resp)], dim=1)
    return enc, prompt_len


def attach_lora(backend: TransformersBackend, rank: int, alpha: int, targets: Sequence[str],
                name: str) -> tuple[Any, str]:
    """The backend's peft model with a trainable active adapter, and that adapter's name: a new LoRA adapter
    (``rank``, ``alpha``, ``targets``, named ``name``) when the backend has none, else the active loaded one (e.g.
    the previous stage's, from ``model.adapter``) made trainable. Only the active adapter's LoRA weights train."""
    from peft import LoraConfig

    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules=list(targets), bias="none")
    return backend.trainable_adapter(name, config)


def version_step(version: str | None) -> int | None:
    """The update count in an adapter version ``name@step`` (None when the version has no count)."""
    m = _VERSION.match(version or "")
    return int(m["step"]) if m else None


class Learner:
    """Policy-gradient updates of ``backend.model`` (see the module docstring); the trainer uses it as a
    ``train.trainable.Trainable``.

    Args:
        backend: the transformers backend whose model is trained in place (its generation then uses the update).
        rl: the update's settings (``[rl]``: learning rate, clip bounds, KL weight, passes, staleness, importance
            cap, schedule, shared prefix; unset fields take the algorithm's values). Default ``RLConfig()``.
        model: how the model is fine-tuned (``[model]``: "lora", a peft adapter whose reference for the KL is the
            adapter switched off, or "full", every weight, the vision tower too unless ``freeze_vision``; the adapter
            created when the model has none; gradient checkpointing). Default ``TrainModelConfig()``.
        algo: "aepo" (InfiGUI-G1: RLOO advantages, clip 0.2/0.4, dual-clip 3, no KL) or "grpo" (GUI-R1: GRPO
            advantages, clip 0.2/0.2, dual-clip 3, k3 KL 0.01).
        total_steps: optimizer steps of the run, which a cosine schedule needs.
        adapter_name: the name of the adapter created when the model has none.
        accelerator: an ``accelerate.Accelerator`` for several processes (None: this process alone).
        seed: seeds the mini-batch shuffling.

    The learning rate defaults to 1e-4 for LoRA and 1e-6 (the papers') for full fine-tuning; ``clip_high`` to 0.4
    (aepo) or 0.2 (grpo); ``kl_coef`` to 0.0 (aepo) or 0.01 (grpo).
    """

    def __init__(self, backend: TransformersBackend, rl: RLConfig | None = None, model: TrainModelConfig | None = None,
                 *, algo: Literal["aepo", "grpo"] = "aepo", total_steps: int | None = None,
                 adapter_name: str = "learner", accelerator: Any = None, seed: int = 0) -> None:
        rl = RLConfig() if rl is None else rl
        model = TrainModelConfig() if model is None else model
        if algo not in _DEFAULTS:
            raise ValueError(f"algo must be 'aepo' or 'grpo', got {algo!r}")
        if rl.schedule == "cosine" and not total_steps:
            raise ValueError("a cosine schedule needs total_steps (the number of optimizer steps)")
        self.backend = backend
        self.algo = algo
        self.finetune = model.finetune
        self.lr = DEFAULT_LR[model.finetune] if rl.lr is None else rl.lr
        self.clip_low = rl.clip_low
        self.clip_high = _DEFAULTS[algo][0] if rl.clip_high is None else rl.clip_high
        self.kl_coef = _DEFAULTS[algo][1] if rl.kl_coef is None else rl.kl_coef
        self.ppo_epochs = rl.ppo_epochs
        self.minibatches = rl.minibatches
        self.max_staleness = rl.max_staleness
        self.max_is_ratio = rl.max_is_ratio
        self.max_grad_norm = rl.max_grad_norm
        self.dual_clip = rl.dual_clip
        self.shared_prefix = rl.shared_prefix
        self.accelerator = accelerator
        self.steps = 0
        """Completed ``step()`` calls (the adapter version's count)."""
        self.optimizer_steps = 0
        self._rng = random.Random(seed)
        self._ref_model: Any = None
        if model.finetune == "lora":
            self.peft_model = self._attach_adapter(model.lora_rank, model.lora_alpha, list(model.lora_targets),
                                                   adapter_name)
        else:
            self.peft_model = backend.model
            self.adapter_name = adapter_name
            for name, p in backend.model.named_parameters():
                p.requires_grad_(not (model.freeze_vision and is_vision_parameter(name)))
            if self.kl_coef > 0:
                self._ref_model = copy.deepcopy(backend.model).eval().requires_grad_(False)
        if model.gradient_checkpointing:
            backend.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            if model.finetune == "lora":
                backend.model.enable_input_require_grads()
        self.params = [p for p in self.peft_model.parameters() if p.requires_grad]
        if not self.params:
            raise RuntimeError("no trainable parameters: check lora_targets against the model's module names")
        self.optimizer = torch.optim.AdamW(self.params, lr=self.lr, weight_decay=rl.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, _lr_lambda(rl.warmup_steps, total_steps, rl.schedule))
        self._train_model = self.peft_model
        if accelerator is not None:
            self._train_model, self.optimizer, self.scheduler = accelerator.prepare(
                self.peft_model, self.optimizer, self.scheduler)

    # -- setup --------------------------------------------------------------------------------

    def _attach_adapter(self, rank: int, alpha: int, targets: list[str], name: str) -> Any:
        model, self.adapter_name = attach_lora(self.backend, rank, alpha, targets, name)
        return model

    @property
    def adapter_version(self) -> str:
        """The adapter's name and the number of updates applied: what rollouts should record."""
        return f"{self.adapter_name}@{self.steps}"

    @property
    def world_size(self) -> int:
        return 1 if self.accelerator is None else int(self.accelerator.num_processes)

    @property
    def rank(self) -> int:
        return 0 if self.accelerator is None else int(self.accelerator.process_index)

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """The trained weights by name (the LoRA tensors, or every weight for full fine-tuning), detached copies."""
        return {n: p.detach().clone() for n, p in self.peft_model.named_parameters() if p.requires_grad}

    # -- encoding and log-probs ---------------------------------------------------------------

    def encode(self, sample: TrainSample) -> tuple[dict[str, torch.Tensor], int]:
        """Model inputs for prompt + response (the backend's processor and chat template) and the prompt length."""
        return encode_example(self.backend, sample.messages, sample.image_array(), sample.response_ids)

    def response_logprobs(self, sample: TrainSample, inputs: dict[str, torch.Tensor] | None = None,
                          prompt_len: int | None = None, model: Any = None) -> torch.Tensor:
        """``[1, T]`` log-probs of the sample's response tokens under ``model`` (default: the model being trained,
        with grad when enabled)."""
        if inputs is None or prompt_len is None:
            inputs, prompt_len = self.encode(sample)
        model = self._train_model if model is None else model
        logits = model(**inputs, use_cache=False).logits
        n = len(sample.response_ids)
        shifted = logits[:, prompt_len - 1: prompt_len - 1 + n]  # token_logprobs upcasts half precision by row
        targets = torch.tensor([sample.response_ids], dtype=torch.long, device=shifted.device)
        return token_logprobs(shifted, targets)

    def _reference(self, forward: Callable[[Any], torch.Tensor]) -> torch.Tensor:
        """``forward(model)`` under the reference policy, without grad: the frozen copy (full fine-tuning), else the
        same model with the adapter switched off."""
        with torch.no_grad():
            if self._ref_model is not None:
                return forward(self._ref_model)
            with self.peft_model.disable_adapter():
                return forward(self.peft_model)

    def _unit_logprobs(self, plan: UpdatePlan, unit: tuple[int, ...], samples: list[TrainSample],
                       reference: bool) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
        """Each of the unit's samples' ``[1, T]`` log-probs under the trained model (grad when enabled), and with
        ``reference`` under the reference (no grad): one shared-prefix forward, or one sample's full forward."""
        if plan.shared:
            shared, mm = plan.prompts[unit], plan.image_outputs(unit)
            lp = prefix_logprobs(self._train_model, shared, mm, self.backend.model)
            ref = self._reference(lambda m: prefix_logprobs(m, shared, mm, self.backend.model)) if reference else None
            rows = [slice(0, n) for n in shared.lengths]
            return ([lp[j:j + 1, r] for j, r in enumerate(rows)],
                    [ref[j:j + 1, r] for j, r in enumerate(rows)] if ref is not None else None)
        s = samples[unit[0]]
        inputs, prompt_len = self.encode(s)
        lp = self.response_logprobs(s, inputs, prompt_len)
        if not reference:
            return [lp], None
        return [lp], [self._reference(lambda m: self.response_logprobs(s, inputs, prompt_len, model=m))]

    # -- the update ---------------------------------------------------------------------------

    def advantages(self, rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
        return rloo_advantages(rewards, group_ids) if self.algo == "aepo" else grpo_advantages(rewards, group_ids)

    def group_advantages(self, groups: Sequence[Sequence[TrainSample]]) -> torch.Tensor:
        """One advantage per sample, in order.

        Step-level groups (samples without ``origin["episode"]``): each sample is one answer and the advantage
        compares the answers of its group. Episode-level groups (samples carrying ``origin["episode"]``): the
        group's units are its episodes; each episode's reward (its samples must agree on it) is compared with the
        other episodes' and the advantage is shared by every step of the episode, so a long episode does not weigh
        more in the baseline than a short one."""
        unit_rewards: list[float] = []
        unit_group: list[int] = []
        sample_unit: list[int] = []
        for gi, g in enumerate(groups):
            units: dict[Any, int] = {}
            for si, s in enumerate(g):
                key = s.origin.get("episode", ("sample", si)) if isinstance(s.origin, dict) else ("sample", si)
                if key not in units:
                    units[key] = len(unit_rewards)
                    unit_rewards.append(float(s.reward))
                    unit_group.append(gi)
                elif not math.isclose(unit_rewards[units[key]], float(s.reward), rel_tol=1e-6, abs_tol=1e-9):
                    raise ValueError(f"episode {key!r} in group {gi} has steps with different rewards "
                                     f"({unit_rewards[units[key]]} and {s.reward}); an episode-level group gives "
                                     f"every step of an episode the episode's reward")
                sample_unit.append(units[key])
        unit_adv = self.advantages(torch.tensor(unit_rewards, dtype=torch.float32), torch.tensor(unit_group))
        return unit_adv[torch.tensor(sample_unit, dtype=torch.long)]

    def staleness(self, sample: TrainSample) -> int:
        """How many updates behind the current policy the sample's adapter version is (0 when unknown or a
        different adapter: a loaded adapter, a base-model rollout)."""
        step = version_step(sample.adapter_version)
        if step is None or not (sample.adapter_version or "").startswith(f"{self.adapter_name}@"):
            return 0
        return max(0, self.steps - step)

    def skip_reason(self, groups: Sequence[Sequence[TrainSample]]) -> str:
        """Why a step on ``groups`` would change nothing ("" when it would): no group; every group with equal
        rewards and no KL term (every advantage is 0: a step would only apply weight decay and stale momentum); or,
        under several processes, fewer groups than mini-batches."""
        if not groups:
            return "no informative group left after filtering"
        if self.kl_coef == 0 and all(len({s.reward for s in g}) == 1 for g in groups):
            return "every group has equal rewards"
        if len(groups) < self.minibatches and self.world_size > 1:
            return f"fewer groups ({len(groups)}) than mini-batches ({self.minibatches})"
        return ""

    def step(self, groups: Sequence[Sequence[TrainSample]]) -> dict[str, float]:
        """One batch update on ``groups`` (each a list of scored samples: the answers to one prompt, or at episode
        level the steps of a task seed's episodes); returns metrics.

        Under several processes, ``groups`` is this process's share of the batch."""
        groups, dropped_stale, bad = self._filter(groups)
        samples = [s for g in groups for s in g]
        if not samples:
            raise ValueError("step() needs at least one usable sample" +
                             (f" ({dropped_stale} dropped as staler than max_staleness="
                              f"{self.max_staleness})" if dropped_stale else "") +
                             (f" ({bad} unusable, see the warnings)" if bad else ""))
        # Groups are numbered by position, so equal group ids in different lists cannot merge by accident.
        group_ids = torch.tensor([gi for gi, g in enumerate(groups) for _ in g])
        rewards = torch.tensor([s.reward for s in samples], dtype=torch.float32)
        adv = self.group_advantages(groups)
        lags = [self.staleness(s) for s in samples]
        max_stale = max(lags)
        recompute_old = self.ppo_epochs * self.minibatches > 1 or max_stale > 0

        totals: dict[str, float] = {}
        with self.backend.lock():
            self.peft_model.eval()  # no dropout: the recomputed log-probs match the sampler's
            plan = UpdatePlan(self.backend, groups, shared=self.shared_prefix,
                              image_features=vision_frozen(self.peft_model) and ImageFeatures.supported(
                                  self.backend.model))
            old: list[torch.Tensor | None] = [None] * len(samples)
            if recompute_old:
                with torch.no_grad():
                    for unit in (u for units in plan.units for u in units):
                        for i, lp in zip(unit, self._unit_logprobs(plan, unit, samples, reference=False)[0]):
                            old[i] = lp.detach()
            index = list(range(len(groups)))
            n_updates = 0
            for _ in range(self.ppo_epochs):
                self._rng.shuffle(index)
                for mb in _split(index, self.minibatches):  # under DDP the trainer ensures enough groups
                    m = self._update(plan, [u for gi in mb for u in plan.units[gi]], samples, adv, old)
                    n_updates += 1
                    for k, v in m.items():
                        totals[k] = max(totals.get(k, v), v) if k.endswith("_max") else totals.get(k, 0.0) + v
            self.steps += 1

        metrics = {k: (v if k.endswith("_max") else v / n_updates) for k, v in totals.items()}
        zero_std = zero_std_groups(rewards, group_ids)
        n_zero_groups = len({int(g) for g, z in zip(group_ids, zero_std) if z})
        return {
            **{f"train/{k}": v for k, v in metrics.items()},
            "train/reward_mean": float(rewards.mean()),
            "train/reward_std": float(rewards.std(unbiased=False)),
            "train/zero_std_group_share": n_zero_groups / len(groups),
            "train/advantage_abs_mean": float(adv.abs().mean()),
            "train/samples": float(len(samples)),
            "train/response_tokens": float(sum(len(s.response_ids) for s in samples)),
            "train/stale_dropped": float(dropped_stale),
            "train/bad_samples": float(bad),
            "train/staleness_max": float(max_stale),
            "train/staleness_mean": sum(lags) / len(lags),
            "train/lr": float(self.scheduler.get_last_lr()[0]),
            "train/optimizer_steps": float(self.optimizer_steps),
            "train/step": float(self.steps),
        }

    def _filter(self, groups: Sequence[Sequence[TrainSample]]) -> tuple[list[list[TrainSample]], int, int]:
        """The groups without samples staler than ``max_staleness`` and unusable ones (``_usable``), empty groups
        dropped; and how many samples each rule removed."""
        groups = [list(g) for g in groups if g]
        dropped_stale = 0
        if self.max_staleness is not None:
            kept = []
            for g in groups:
                fresh = [s for s in g if self.staleness(s) <= self.max_staleness]
                dropped_stale += len(g) - len(fresh)
                if fresh:
                    kept.append(fresh)
            groups = kept
        bad = 0
        checked = []
        for g in groups:
            good = [s for s in g if self._usable(s)]
            bad += len(g) - len(good)
            if good:
                checked.append(good)
        return checked, dropped_stale, bad

    def _usable(self, s: TrainSample) -> bool:
        """Whether a sample can be trained on: response ids inside the vocabulary, its image readable. A bad one
        is logged (naming it) and left out of the update, never allowed to stop training."""
        vocab = int(self.backend.model.get_output_embeddings().weight.shape[0])
        where = s.id or s.origin.get("id") or f"group {s.group_id}"
        bad_ids = [t for t in s.response_ids if not 0 <= t < vocab]
        if bad_ids:
            log.warning("sample %s skipped: response token ids %s are outside the vocabulary (size %d)", where,
                        bad_ids[:3], vocab)
            return False
        try:
            s.image_array()
        except (OSError, ValueError) as e:
            log.warning("sample %s skipped: its image cannot be read: %s", where, e)
            return False
        return True

    def _global_tokens(self, local: int) -> int:
        if self.world_size == 1:
            return local
        t = torch.tensor([local], dtype=torch.long, device=self.accelerator.device)
        return int(self.accelerator.reduce(t, reduction="sum").item())

    def _update(self, plan: UpdatePlan, units: list[tuple[int, ...]], samples: list[TrainSample],
                adv: torch.Tensor, old: list[torch.Tensor | None]) -> dict[str, float]:
        """One optimizer step on a mini-batch's units (this process's share of it); one backward per unit."""
        local_tokens = sum(len(samples[i].response_ids) for u in units for i in u)
        total_tokens = self._global_tokens(local_tokens)
        # DDP averages gradients over processes; scaling by the world size turns that average into the sum of
        # every process's token-share-weighted loss, i.e. the global token-mean.
        scale = self.world_size / total_tokens
        sums = {"loss": 0.0, "pg_loss": 0.0, "kl": 0.0, "clipfrac": 0.0, "approx_kl": 0.0, "is_weight_mean": 0.0,
                "is_clipfrac": 0.0, "ratio_max": 0.0}
        self.optimizer.zero_grad(set_to_none=True)
        for k, unit in enumerate(units):
            with self._no_sync(k < len(units) - 1), torch.enable_grad():
                logprobs, refs = self._unit_logprobs(plan, unit, samples, reference=self.kl_coef > 0)
                total: torch.Tensor | float = 0.0
                for j, i in enumerate(unit):
                    s = samples[i]
                    loss, m, kl_value = self._sample_loss(s, logprobs[j], adv[i], old[i],
                                                          refs[j] if refs is not None else None)
                    total = total + loss * (len(s.response_ids) * scale)
                    w = len(s.response_ids) / local_tokens
                    for key, value in (("loss", float(loss.detach())), ("pg_loss", m.pg_loss), ("kl", kl_value),
                                       ("clipfrac", m.clipfrac), ("approx_kl", m.approx_kl),
                                       ("is_weight_mean", m.is_weight_mean), ("is_clipfrac", m.is_clipfrac)):
                        sums[key] += value * w
                    sums["ratio_max"] = max(sums["ratio_max"], m.ratio_max)
                if self.accelerator is not None:
                    self.accelerator.backward(total)
                else:
                    total.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm)
        if torch.isfinite(grad_norm):
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer_steps += 1
        else:
            log.warning("non-finite gradient norm %s: update skipped", float(grad_norm))
        self.optimizer.zero_grad(set_to_none=True)
        return {**sums, "grad_norm": float(grad_norm)}

    def _sample_loss(self, s: TrainSample, logprobs: torch.Tensor, a: torch.Tensor, o: torch.Tensor | None,
                     ref: torch.Tensor | None) -> tuple[torch.Tensor, Any, float]:
        """One sample's loss (its token-mean PPO surrogate, plus the KL to ``ref`` when given), its metrics and
        its KL value."""
        behaviour = (torch.tensor([s.behaviour_logprobs], dtype=logprobs.dtype, device=logprobs.device)
                     if s.behaviour_logprobs is not None else None)
        if o is None:  # fresh sample, single update: the sampler's own log-probs are pi_old
            o, behaviour = (behaviour if behaviour is not None else logprobs.detach()), None
        mask = torch.ones_like(logprobs, dtype=torch.bool)
        loss, m = policy_loss(logprobs, o, a.reshape(1).to(logprobs.device), mask, clip_low=self.clip_low,
                              clip_high=self.clip_high, dual_clip=self.dual_clip, behaviour_logprobs=behaviour,
                              max_is_ratio=self.max_is_ratio if behaviour is not None else None)
        if ref is None:
            return loss, m, 0.0
        kl = kl_k3(logprobs, ref, mask)
        return loss + self.kl_coef * kl, m, float(kl.detach())

    def _no_sync(self, skip: bool) -> Any:
        if skip and self.accelerator is not None and self.world_size > 1:
            return self.accelerator.no_sync(self._train_model)
        return contextlib.nullcontext()

    # -- state ----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Optimizer, scheduler, counters and the shuffling RNG: what a checkpoint needs besides the weights."""
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "steps": self.steps, "optimizer_steps": self.optimizer_steps, "rng": self._rng.getstate(),
                "algo": self.algo, "finetune": self.finetune}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in ("algo", "finetune"):
            if state.get(key) != getattr(self, key):
                raise ValueError(f"checkpoint was written with {key}={state.get(key)!r}, this learner has "
                                 f"{key}={getattr(self, key)!r}; resume with the same settings")
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.steps = int(state["steps"])
        self.optimizer_steps = int(state["optimizer_steps"])
        self._rng.setstate(_as_rng_state(state["rng"]))


def _as_rng_state(state: Any) -> tuple:
    """random.Random state back from a (possibly JSON / torch.load round-tripped) nested list."""
    version, internal, gauss = state
    return int(version), tuple(int(x) for x in internal), gauss


def _split(items: list[int], parts: int) -> Iterator[list[int]]:
    """``items`` in ``parts`` contiguous near-equal non-empty chunks (fewer when there are fewer items)."""
    parts = min(parts, len(items))
    size, extra = divmod(len(items), parts)
    start = 0
    for p in range(parts):
        end = start + size + (1 if p < extra else 0)
        yield items[start:end]
        start = end


def _lr_lambda(warmup: int, total: int | None, schedule: str) -> Callable[[int], float]:
    def f(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if schedule == "cosine" and total:
            progress = min(1.0, (step - warmup) / max(1, total - warmup))
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return 1.0
    return f


# -- rollouts -----------------------------------------------------------------------------------


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

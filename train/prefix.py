"""The shared-prefix forward: the n answers to one prompt scored as continuations of one pass over that prompt.

A step-level group holds n answers to one screen. They share the whole prompt (the system text, about 1,200 image
tokens for a 1280x720 screenshot, the instruction) and differ only in their ~40 answer tokens. The unshared path
(``Learner(shared_prefix=False)``) runs prompt + answer through the model once per answer, forward and backward,
and again for the old and reference log-probs. ``prefix_logprobs`` instead:

1. runs the prompt once with ``use_cache=True``, keeping the graph when grad is on, and only the last position's
   logits (they predict every answer's first token);
2. expands the prompt's KV cache to the n answers (a view: the prompt's keys and values are not copied);
3. runs the n answers, right-padded, as one batch on that cache. Their position ids are exactly those the unshared
   full sequence gives them: Qwen2.5-VL's 3-D rope positions (``get_rope_index`` with ``image_grid_thw``) are
   computed once for prompt + the longest answer and sliced, so an answer's j-th token sits at the same position
   whatever the other answers' lengths. An attention mask hides each shorter answer's padding.

The caller runs one backward through both passes: the prompt's gradient is then the sum over its answers, which is
what the unshared path's per-answer backwards accumulate. Log-probs and gradients equal the unshared path's
(``tests/train/test_prefix.py`` checks 1e-5 in float64 on the tiny model, LoRA and full fine-tuning, PPO epochs x
mini-batches, the KL's reference pass, two processes under DDP).

``ImageFeatures`` keeps each image's vision-tower output for one update when the vision tower is frozen
(``freeze_vision``, or LoRA without vision targets): one vision pass per screen per update instead of one per pass
(old log-probs, every epoch and mini-batch, the reference).

transformers 5.24 names the cache argument ``cache`` (``past_key_values`` before) and has no ``cache_position``:
the mask's offsets come from the cache's length. Gradient checkpointing cannot hold a cache (transformers drops it
in training mode); the learner runs the model in eval mode (no dropout), where checkpointing is off, and a prompt
pass that returns no cache is an error rather than a silent unshared forward.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from train.algos import token_logprobs
from train.samples import TrainSample, messages_with_image

if TYPE_CHECKING:
    from policy.backends.hf import TransformersBackend

log = logging.getLogger(__name__)

__all__ = ["ImageFeatures", "SharedPrompt", "UpdatePlan", "encode_prompt", "encode_shared", "image_key", "is_vision_parameter",
           "prefix_logprobs", "prompt_groups", "prompt_key", "response_inputs", "rope_positions", "vision_frozen"]

VISION_TOKEN_NAMES = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")


@dataclass(frozen=True, slots=True)
class SharedPrompt:
    """One prompt, encoded once, and the n answers that continue it."""

    inputs: dict[str, torch.Tensor]
    """The prompt's model inputs, batch 1 (``input_ids``, ``attention_mask``, and for an image ``pixel_values``,
    ``image_grid_thw``, ``mm_token_type_ids``)."""
    answers: torch.Tensor
    """``[n, L]`` the answers' input ids (vision placeholders replaced), right-padded to the longest, L."""
    targets: torch.Tensor
    """``[n, L]`` the sampled ids the log-probs are taken at (padding: 0)."""
    lengths: tuple[int, ...]
    """Each answer's length in tokens."""
    position_ids: torch.Tensor | None
    """``[3, 1, P + L]`` rope positions of prompt + the longest answer (None: a text-only prompt, 1-D positions)."""
    image_key: str | None = None
    """Names the prompt's image for ``ImageFeatures`` (None: no image)."""

    @property
    def prompt_len(self) -> int:
        return int(self.inputs["input_ids"].shape[1])

    @property
    def mask(self) -> torch.Tensor:
        """``[n, L]`` True on each answer's real tokens."""
        steps = torch.arange(self.answers.shape[1], device=self.answers.device)
        return steps[None, :] < torch.tensor(self.lengths, device=self.answers.device)[:, None]


# -- encoding -------------------------------------------------------------------------------------


def encode_prompt(backend: TransformersBackend, messages: list[dict[str, Any]],
                  image: np.ndarray | None) -> dict[str, torch.Tensor]:
    """The prompt's model inputs (batch 1, on the model's device), encoded exactly as the backend encodes a
    request: its processor and chat template, the generation prompt appended, the image as the model-input array."""
    from policy.backends.hf import split_images

    msgs, images = split_images(messages_with_image(messages, image))
    proc = backend.processor
    text = proc.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    enc = proc(text=[text], images=images or None, return_tensors="pt")
    device = backend.model.device
    return {k: v.to(device) for k, v in enc.items()}


def response_inputs(backend: TransformersBackend, response_ids: Sequence[int]) -> list[int]:
    """The response's ids as model inputs: a vision placeholder token (a random or broken model can emit
    ``<|image_pad|>``) would make the model look for image features that are not there, so the pad token is fed
    in its place. Targets keep the sampled ids; only later tokens' context differs."""
    cfg = backend.model.config
    vision = {int(v) for v in (getattr(cfg, n, None) for n in VISION_TOKEN_NAMES) if v is not None}
    pad = backend.tokenizer.pad_token_id or 0
    return [pad if t in vision else int(t) for t in response_ids]


def rope_positions(hf_model: Any, inputs: dict[str, torch.Tensor], continuation: torch.Tensor) -> torch.Tensor | None:
    """``[3, 1, P + L]`` rope positions of the prompt followed by ``continuation`` (``[1, L]`` text ids), as the
    model computes them for that full sequence (Qwen2/2.5-VL: ``get_rope_index`` with ``image_grid_thw``), or None
    for a prompt without an image (plain 1-D positions, which the model infers from the cache length)."""
    inner = getattr(hf_model, "model", None)
    get_rope_index = getattr(inner, "get_rope_index", None)
    if get_rope_index is None or "image_grid_thw" not in inputs or "mm_token_type_ids" not in inputs:
        return None
    ids = torch.cat([inputs["input_ids"], continuation.to(inputs["input_ids"])], dim=1)
    types = inputs["mm_token_type_ids"]
    types = torch.cat([types, types.new_zeros(continuation.shape)], dim=1)
    positions, _ = get_rope_index(ids, mm_token_type_ids=types, image_grid_thw=inputs["image_grid_thw"],
                                  attention_mask=torch.ones_like(ids))
    return positions


def encode_shared(backend: TransformersBackend, samples: Sequence[TrainSample],
                  image_key: str | None = None) -> SharedPrompt:
    """The samples' common prompt, encoded once, and their answers (all samples must share messages and image:
    ``prompt_groups`` makes such sets)."""
    first = samples[0]
    inputs = encode_prompt(backend, first.messages, first.image_array())
    device = inputs["input_ids"].device
    lengths = tuple(len(s.response_ids) for s in samples)
    width = max(lengths)
    answers = torch.zeros(len(samples), width, dtype=torch.long)
    targets = torch.zeros(len(samples), width, dtype=torch.long)
    for i, s in enumerate(samples):
        answers[i, :lengths[i]] = torch.tensor(response_inputs(backend, s.response_ids))
        targets[i, :lengths[i]] = torch.tensor(s.response_ids)
    longest = answers[lengths.index(width)].unsqueeze(0)
    positions = rope_positions(backend.model, inputs, longest.to(device))
    return SharedPrompt(inputs, answers.to(device), targets.to(device), lengths, positions,
                        image_key if "pixel_values" in inputs else None)


def image_key(sample: TrainSample, memo: dict[int, str] | None = None) -> str | None:
    """Names the sample's image: its path, or a hash of the array's shape and bytes (``memo`` keeps the hash by
    array identity for one update, so a group's shared array is hashed once); None without an image."""
    image = sample.image
    if image is None:
        return None
    if isinstance(image, str):
        return f"path:{image}"
    memo = memo if memo is not None else {}
    if id(image) not in memo:
        array = np.ascontiguousarray(image)
        memo[id(image)] = f"{array.shape}:{hashlib.blake2b(array.tobytes(), digest_size=16).hexdigest()}"
    return memo[id(image)]


def prompt_key(sample: TrainSample, memo: dict[int, str] | None = None) -> str:
    """What makes two samples' prompts the same: their messages and their image (``image_key``)."""
    return json.dumps(sample.messages, sort_keys=True, default=repr) + "|" + str(image_key(sample, memo))


def prompt_groups(samples: Sequence[TrainSample], memo: dict[int, str] | None = None) -> list[list[int]]:
    """Indices of ``samples`` split by prompt (``prompt_key``), each set in order, sets in order of first
    appearance. A step-level group is one set; an episode-level group has one per step."""
    sets: dict[str, list[int]] = {}
    for i, s in enumerate(samples):
        sets.setdefault(prompt_key(s, memo), []).append(i)
    return list(sets.values())


class UpdatePlan:
    """One update's samples in units, each unit a tuple of row indices (into the groups' samples, concatenated)
    whose log-probs come from one forward.

    Shared (``shared=True``): a unit is the samples of one group that share a prompt (``prompt_groups``), its
    prompt encoded once here for the whole update (old log-probs, every epoch and mini-batch, the reference); with
    ``image_features`` each image also goes through the vision tower once. Unshared: a unit is one sample, encoded
    on every pass (the path before the shared prefix, kept for comparison and as a fallback)."""

    def __init__(self, backend: TransformersBackend, groups: Sequence[Sequence[TrainSample]], *, shared: bool,
                 image_features: bool = False) -> None:
        self.shared = shared
        self.units: list[list[tuple[int, ...]]] = []
        """Per group, its units."""
        self.prompts: dict[tuple[int, ...], SharedPrompt] = {}
        memo: dict[int, str] = {}
        start = 0
        for g in groups:
            sets = prompt_groups(g, memo) if shared else [[i] for i in range(len(g))]
            units = []
            for rows in sets:
                unit = tuple(start + r for r in rows)
                if shared:
                    self.prompts[unit] = encode_shared(backend, [g[r] for r in rows], image_key(g[rows[0]], memo))
                units.append(unit)
            self.units.append(units)
            start += len(g)
        self.features = ImageFeatures(backend.model) if shared and image_features else None

    def image_outputs(self, unit: tuple[int, ...]) -> dict[str, Any] | None:
        """The unit's precomputed vision outputs (None: the forward runs the vision tower itself)."""
        return self.features.get(self.prompts[unit]) if self.features is not None else None


# -- the forward ------------------------------------------------------------------------------------


def vision_frozen(model: Any) -> bool:
    """Whether the vision tower's output cannot change during an update and is the same with the adapter switched
    off: no vision parameter trains and no LoRA layer sits in the vision tower."""
    return not any(is_vision_parameter(n) and (p.requires_grad or "lora_" in n) for n, p in model.named_parameters())


def is_vision_parameter(name: str) -> bool:
    """Whether a parameter name lies in the vision tower (Qwen's ``visual``, or a ``vision_tower``)."""
    return ".visual." in f".{name}" or ".vision_tower." in f".{name}"


class ImageFeatures:
    """Vision-tower outputs by image key, for one update with the vision tower frozen (``vision_frozen``)."""

    def __init__(self, hf_model: Any) -> None:
        self.hf_model = hf_model
        self._features: dict[str, tuple[torch.Tensor, ...]] = {}
        self.computed = 0
        """Vision passes run (one per distinct image)."""

    @staticmethod
    def supported(hf_model: Any) -> bool:
        """Whether the model takes precomputed vision outputs (``mm_encoder_outputs``, transformers >= 5.24)."""
        return (hasattr(hf_model, "get_image_features")
                and "mm_encoder_outputs" in inspect.signature(hf_model.forward).parameters)

    def get(self, shared: SharedPrompt) -> dict[str, Any] | None:
        """``mm_encoder_outputs`` for the prompt's image (computed without grad on first use), None without one."""
        if shared.image_key is None:
            return None
        if shared.image_key not in self._features:
            with torch.no_grad():
                out = self.hf_model.get_image_features(shared.inputs["pixel_values"], shared.inputs["image_grid_thw"],
                                                       return_dict=True)
            self._features[shared.image_key] = tuple(t.detach() for t in out.pooler_output)
            self.computed += 1
        from transformers.modeling_outputs import BaseModelOutputWithPooling

        return {"image": BaseModelOutputWithPooling(pooler_output=self._features[shared.image_key])}


def prefix_logprobs(model: Any, shared: SharedPrompt, mm_encoder_outputs: dict[str, Any] | None = None,
                    hf_model: Any = None) -> torch.Tensor:
    """``[n, L]`` log-probs of the answers' tokens (padding: meaningless, mask with ``shared.mask``) under
    ``model`` (the model being trained, possibly DDP- or peft-wrapped, or the reference), differentiable when grad
    is on. ``mm_encoder_outputs``: the prompt's precomputed vision outputs (``ImageFeatures.get``).
    ``hf_model``: the transformers model inside ``model`` (to name the cache argument; default ``model``)."""
    cache_arg = _cache_argument(hf_model if hf_model is not None else model)
    n, width = shared.answers.shape
    p = shared.prompt_len
    prompt = dict(shared.inputs)
    if mm_encoder_outputs is not None:
        prompt.pop("pixel_values", None)
        prompt["mm_encoder_outputs"] = mm_encoder_outputs
    if shared.position_ids is not None:
        prompt["position_ids"] = shared.position_ids[:, :, :p]
    out = model(**prompt, use_cache=True, logits_to_keep=1)
    first = out.logits[:, -1:].expand(n, 1, -1)
    if width == 1:
        return token_logprobs(first, shared.targets)
    cache = getattr(out, cache_arg, None)
    if cache is None:
        raise RuntimeError("the prompt pass returned no KV cache (gradient checkpointing in training mode drops it): "
                           "run the model in eval mode, or use the unshared path (rl.shared_prefix = false)")
    _expand_cache(cache, n)
    keys = torch.arange(p + width - 1, device=shared.answers.device)
    lengths = torch.tensor(shared.lengths, device=shared.answers.device)
    attention = (keys[None, :] < p + lengths[:, None]).long()  # the prompt, then each answer's own tokens
    rest: dict[str, Any] = {"input_ids": shared.answers[:, :-1], "attention_mask": attention, cache_arg: cache}
    if shared.position_ids is not None:
        rest["position_ids"] = shared.position_ids[:, :, p:p + width - 1].expand(-1, n, -1)
    else:
        rest["position_ids"] = (torch.arange(p, p + width - 1, device=keys.device)[None].expand(n, -1))
    tail = model(**rest, use_cache=True).logits
    return token_logprobs(torch.cat([first, tail], dim=1), shared.targets)


def _cache_argument(hf_model: Any) -> str:
    """``cache`` (transformers >= 5.24) or ``past_key_values`` (earlier): the forward's name for the KV cache."""
    target = hf_model.get_base_model() if hasattr(hf_model, "get_base_model") else hf_model
    target = getattr(target, "module", target)  # DDP
    params = inspect.signature(target.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _expand_cache(cache: Any, n: int) -> None:
    """The batch-1 cache viewed as n rows (no copy); the answers' pass concatenates onto it, and backward sums the
    n rows' gradients into the prompt's keys and values."""
    if n == 1:
        return
    layers = getattr(cache, "layers", None)
    if layers is None or not all(hasattr(layer, "keys") and hasattr(layer, "values") for layer in layers):
        cache.batch_repeat_interleave(n)  # a copy, same gradient
        return
    for layer in layers:
        layer.keys = layer.keys.expand(n, *layer.keys.shape[1:])
        layer.values = layer.values.expand(n, *layer.values.shape[1:])

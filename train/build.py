"""A run's parts built from a ``TrainConfig``: the model's backend, the learner of the stage, and the data (prompt
sampler, held-out prompts, reward adapter, supervised targets). ``Trainer.from_config`` calls these; tests and the
benchmarks build some parts themselves and pass them to ``Trainer``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from policy.formats import get_format
from policy.presets import GROUNDING_FAMILY, ModelPreset
from train.config import TrainConfig
from train.curriculum import ThresholdSchedule
from train.data import GeneratedSource, GroundingSource, PromptSampler, RewardAdapter, TrajectorySource, reward_fn
from train.data.actions import ActionSource
from train.data.answers import answer_text
from train.data.combine import Subset
from train.learner import DEFAULT_LR, Learner
from train.reward_registry import get_reward
from train.samples import RolloutPrompt
from train.sft import DEFAULT_SFT_LR, SupervisedLearner
from train.trainable import Trainable

if TYPE_CHECKING:
    from policy.backends.hf import TransformersBackend

log = logging.getLogger(__name__)

__all__ = ["LORA_FIGURES", "TargetText", "TrainData", "build_backend", "build_data", "build_learner", "build_reward", "model_preset",
           "warn_lora_rate"]

TargetText = Callable[[RolloutPrompt], str]
"""The answer an SFT example teaches for a prompt (its target written in the model's output format)."""


# -- the model ---------------------------------------------------------------------------------------


def _with_think(preset: ModelPreset, think: bool) -> ModelPreset:
    """``data.think = false`` selects the family's prompt variant without a think block, where it has one
    (``ModelFormat.no_think_variant``: InfiGUI-G1's released no_think prompt, no think system message)."""
    variant = get_format(preset.family).no_think_variant
    return preset if think or variant is None else replace(preset, variant=variant)


def build_backend(config: TrainConfig, accelerator: Any = None) -> TransformersBackend:
    """The transformers backend for ``config.model`` (a hub id, a local folder, or "tiny"). Under several
    processes the main one builds (or downloads) first and the others then read what it wrote."""
    if accelerator is not None and accelerator.num_processes > 1:
        with accelerator.main_process_first():
            return build_backend(config)
    from policy.backends.hf import TransformersBackend

    m = config.model
    path, preset = model_preset(config)
    return TransformersBackend(path, preset=preset, device=m.device, dtype=m.dtype,
                               adapter=m.adapter or None, adapter_version=Path(m.adapter).name if m.adapter else None)


def model_preset(config: TrainConfig) -> tuple[str, ModelPreset]:
    """(what to load: a folder or a hub id, the preset) of ``config.model``, its pixel budget and think variant
    applied. "tiny" is built under ``train.run_dir`` first (the same seed gives the same weights everywhere)."""
    from policy.presets import preset_for

    m = config.model
    path = m.id
    overrides: dict[str, Any] = m.preset_overrides()  # the variant and pixel budget the config sets
    if not path:
        raise ValueError("model.id is empty: name the model to train (a local folder or a hub id, e.g. "
                         "Qwen/Qwen2.5-VL-3B-Instruct), or \"tiny\" for the tiny random test model")
    if path == "tiny":
        from policy.tiny import build_tiny_qwen25vl

        target = Path(config.train.run_dir) / "tiny-model"
        if not (target / "config.json").is_file():
            build_tiny_qwen25vl(target, seed=config.train.seed)
        overrides.setdefault("min_pixels", 4 * 28 * 28)
        overrides.setdefault("max_pixels", 64 * 28 * 28)
        return str(target), _with_think(preset_for("tiny-qwen", m.format or GROUNDING_FAMILY, **overrides),
                                        config.data.think)
    return path, _with_think(preset_for(m.id, m.format or None, **overrides), config.data.think)


LORA_FIGURES = 'docs/benchmarks.md, "LoRA online: which rank and learning rate"'
"""Where the measured effect of a LoRA adapter's learning rate is written down."""


def build_learner(config: TrainConfig, backend: TransformersBackend, accelerator: Any = None) -> Trainable:
    """The learner of ``config.train.stage`` on ``backend``'s model: the policy-gradient ``Learner`` for rl (on
    ``[rl]`` and ``[model]``), the ``SupervisedLearner`` for sft and rft. Every run builds its learner here
    (``agent train``, ``agent train --online``, ``agent learner``), so this is where a LoRA run at a full-weight
    learning rate is warned about (``warn_lora_rate``)."""
    m, rl = config.model, config.rl
    warn_lora_rate(config)
    if config.train.stage == "rl":
        return Learner(backend, rl, m, algo=config.train.algo,  # type: ignore[arg-type]
                       total_steps=config.train.steps * rl.ppo_epochs * rl.minibatches, accelerator=accelerator,
                       seed=config.train.seed)
    return SupervisedLearner(backend, m, lr=config.sft.lr, weight_decay=rl.weight_decay,
                             max_grad_norm=rl.max_grad_norm, accelerator=accelerator)


def warn_lora_rate(config: TrainConfig) -> str:
    """Log (and return) a one-line warning when a LoRA run's learning rate is set at a tenth of the LoRA default or
    below, which covers the full-weight defaults (rl 1e-6, sft 1e-5): measured, the adapter then learns almost
    nothing, and nothing else would say so before the curves stay flat. "" when there is nothing to warn about."""
    if config.model.finetune != "lora":
        return ""
    key, lr, default = (("rl.lr", config.rl.lr, DEFAULT_LR["lora"]) if config.train.stage == "rl"
                        else ("sft.lr", config.sft.lr, DEFAULT_SFT_LR["lora"]))
    if lr is None or lr > default / 10:
        return ""
    message = (f"{key} = {lr:g} is a full-weight learning rate, but model.finetune = \"lora\": the LoRA adapter will "
               f"learn almost nothing; leave {key} unset for the LoRA default {default:g} (figures: {LORA_FIGURES})")
    log.warning("%s", message)
    return message


# -- data from a config ------------------------------------------------------------------------------


@dataclass
class TrainData:
    """What ``build_data`` assembles for a run."""

    prompts: PromptSampler
    """The training items' stream."""
    heldout: list[RolloutPrompt]
    reward_fn: RewardAdapter
    target_text: TargetText
    sources: list[Any] = field(default_factory=list)
    """Sources to close at the end (a generated source holds a browser)."""

    def close(self) -> None:
        for s in self.sources:
            close = getattr(s, "close", None)
            if close is not None:
                close()


def build_reward(config: TrainConfig, preset: ModelPreset) -> RewardAdapter:
    """The reward ``config.data.reward`` names (``train.reward_registry``), for prompts of ``preset``: ``data.think``
    sets the think gate of a family with a no-think variant (the others' prompts say it), the curriculum's threshold
    schedule is the distance reward's."""
    d, c = config.data, config.curriculum
    schedule = ThresholdSchedule(c.threshold_start, c.threshold_end, c.threshold_steps) \
        if c.threshold_start is not None else None
    think = d.think if get_format(preset.family).no_think_variant is not None else None
    return reward_fn(d.reward, think=think, preset=preset, schedule=schedule)


def build_data(config: TrainConfig, preset: ModelPreset) -> TrainData:
    """The prompt sampler, held-out prompts, reward and SFT targets for ``config.data``."""
    d = config.data
    seed = config.train.seed
    sources: list[Any] = []
    if d.source == "generated":
        train_src = GeneratedSource(range(d.seeds), preset=preset)
        sources.append(train_src)
        held_src: Any = GeneratedSource(range(d.seeds, d.seeds + d.heldout_size), preset=preset) \
            if d.heldout_size and not d.heldout_path else None
    elif d.source == "grounding":
        train_src = GroundingSource(d.path, preset=preset)
        held_src = None
    elif d.source == "trajectories":
        train_src = TrajectorySource(d.path, preset=preset, sft=config.train.stage == "sft")
        held_src = None
    elif d.source == "actions":
        train_src = ActionSource(d.path, preset=preset, need_box=get_reward(d.reward).reads_point_list)
        held_src = None
    else:
        raise ValueError("data.source = \"samples\" trains on scored samples: use Trainer.run_stream "
                         "(agent train does this for you)")
    if held_src is not None:
        sources.append(held_src)
    if d.heldout_path:
        held_src = GroundingSource(d.heldout_path, preset=preset)
    elif held_src is None and d.heldout_size:
        # hold out a seeded share of the training file itself
        order = torch.randperm(len(train_src), generator=torch.Generator().manual_seed(seed)).tolist()
        n = min(d.heldout_size, max(0, len(train_src) - 1))
        held_src, train_src = Subset(train_src, order[:n], "heldout"), Subset(train_src, order[n:], "train")
    heldout: list[RolloutPrompt] = []
    if held_src is not None:
        sampler = PromptSampler(held_src, seed=seed, shuffle=False)
        heldout = sampler.next_prompts(min(len(held_src), d.heldout_size or len(held_src)))
    prompts = PromptSampler(train_src, seed=seed)
    return TrainData(prompts, heldout, build_reward(config, preset), lambda p: answer_text(p, think=d.think), sources)

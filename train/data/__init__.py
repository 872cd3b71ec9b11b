"""Prompts for RL (and SFT): the sources (grounding files, generated screens, recorded trajectories), a resumable
sampler, and the reward adapter that scores a response against its prompt's target.

Every source yields ``RolloutPrompt``s built exactly as ``agent run`` builds a model's input, with a ``Target`` (the
ground truth in the model's coordinate space) and a stable ``origin["id"]``. Modules, in reading order:

- ``prompts``: ``Target``, the ``PromptSource`` protocol, ``build_prompt`` (the preset's space, the model-input
  resize and the family's prompt builder, as ``agent run`` does);
- ``grounding``: ``GroundingSource``, ScreenSpot / -v2 / -Pro files or our own JSONL, one prompt per row;
- ``generated``: ``GeneratedSource``, generated screens rendered live in Chromium, one per seed, on the private
  event loop of ``background``;
- ``actions``: ``ActionSource``, GUI-R1-style action records (GUI-R1-3K's Parquet, benchmark files, exported runs);
- ``trajectories``: ``TrajectorySource``, GUI-R1-style step prompts from recorded runs (scored ``TrainSample``
  JSONL needs no source: ``train.samples.read_jsonl`` reads it and the trainer trains on it as it is);
- ``combine``: ``ConcatSource`` (several sources as one) and ``Subset`` (a held-out split);
- ``sampler``: ``PromptSampler``, a seeded shuffle per epoch that a checkpoint resumes exactly;
- ``reward_adapter``: ``reward_fn(name, ...)``, the ``reward_fn(prompt, text)`` of ``rollout_groups``: the named
  reward (``train.reward_registry``) applied to ``prompt.target``, plus the part ``"correct"``; a reward that raises
  marks its sample failed instead of stopping training;
- ``answers``: ``answer_text``, the answer a supervised example teaches for a prompt (written by the family's
  format, ``policy.formats``).

Sources that cannot produce any prompt raise ``PromptSourceError``; one item that cannot be made now is a
``BadItem``, skipped and counted by the sampler (both in ``train.errors``).
"""

from train.data.actions import ActionSource
from train.data.answers import answer_text
from train.data.combine import ConcatSource, Subset
from train.data.generated import GeneratedSource
from train.data.grounding import GroundingSource
from train.data.prompts import PromptSource, Skipped, Target, build_prompt, skip_counts
from train.data.reward_adapter import RewardAdapter, reward_fn
from train.data.sampler import PromptSampler
from train.data.trajectories import TrajectorySource
from train.errors import BadItem, PromptSourceError

__all__ = [
    "ActionSource", "BadItem", "ConcatSource", "GeneratedSource", "GroundingSource", "PromptSampler", "PromptSource",
    "PromptSourceError", "RewardAdapter", "Skipped", "Subset", "Target", "TrajectorySource", "answer_text",
    "build_prompt", "reward_fn", "skip_counts",
]

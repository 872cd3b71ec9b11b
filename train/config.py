"""The training configuration: sections of frozen dataclasses, every field with a default and a docstring.

``agent train --config FILE [--set section.key=value ...]`` reads a TOML file into ``TrainConfig`` (the reading,
type checks and "did you mean" hints are ``agent.config.load_train_config``'s); ``configs/train.toml`` lists every
option at its default and is generated from these classes. A field that may be unset (None: the algorithm's
or the model's default, or off, as its docstring says) is written ``none`` in a file or a ``--set``; the values that
meant "unset" before (``lr = 0``, ``kl_coef = -1``: each field's ``was`` metadata) still read, with a warning.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from devices.registry import DEFAULT_KIND
from policy.model_config import ModelSettings

__all__ = ["OnlineConfig", "TrainConfig", "TRAIN_SECTIONS", "TRAIN_SECTION_DOCS", "RUN_KINDS", "new_run_dir", "latest_run_dir",
           "with_run_dir"]

STAGES = ("sft", "rl", "rft")
SOURCES = ("generated", "grounding", "trajectories", "actions", "samples")


@dataclass(frozen=True, slots=True)
class RunConfig:
    stage: str = "rl"
    """What to run: sft (cold-start supervised fine-tuning on the data's targets), rl (AEPO / GRPO), or rft (rejection-sampling SFT on the policy's own correct answers)."""
    algo: str = "aepo"
    """RL algorithm: aepo (InfiGUI-G1: RLOO advantages, clip [0.8, 1.4], no KL) or grpo (GUI-R1: group-normalised advantages, clip 0.2, k3 KL 0.01)."""
    run_dir: str = ""
    """Folder of this run: metrics.jsonl, tb/, curves.png, checkpoints/, the final adapter. Empty = a new folder runs/train-<time> (agent train) or runs/online-<time> (agent train --online), so no two runs share one (agent train --run-dir DIR names it)."""
    steps: int = 100
    """Updates to run (RL: one batch of groups each; SFT / RFT: one batch of examples each). A batch with nothing to learn from (every group filtered out or with equal rewards) still counts as one, reported in train/skipped_batches."""
    seed: int = 0
    """Seeds data order, sampling and initialisation."""
    resume: str = ""
    """Resume from a checkpoint folder, or "auto" for the newest one in run_dir (agent train --resume); empty = start fresh (run_dir must then hold no checkpoint)."""

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise ValueError(f"stage {self.stage!r} is not one of {', '.join(STAGES)}")
        if self.algo not in ("aepo", "grpo"):
            raise ValueError(f"algo {self.algo!r} is not aepo or grpo")
        if self.steps < 1:
            raise ValueError(f"steps must be at least 1, got {self.steps}")


@dataclass(frozen=True, slots=True)
class TrainModelConfig(ModelSettings):
    """``[model]`` of a training file: the shared model settings (``policy.model_config``; ``id`` is required) and
    how the model is fine-tuned."""

    finetune: str = "lora"
    """lora (a peft adapter; the KL reference is the adapter switched off) or full (every weight, as both papers)."""
    lora_rank: int = 8
    """LoRA rank."""
    lora_alpha: int = 16
    """LoRA alpha."""
    lora_targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    """Module names the adapter wraps (the language model's attention by default; add lm_head for tiny models)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass: less memory, ~30% more time. On for 3B+ models on a GPU."""
    freeze_vision: bool = False
    """Full fine-tuning only: keep the vision tower fixed (GUI-R1 trains it; off by default)."""

    def __post_init__(self) -> None:
        ModelSettings.__post_init__(self)
        if self.finetune not in ("lora", "full"):
            raise ValueError(f"finetune {self.finetune!r} is not lora or full")
        if self.lora_rank < 1 or self.lora_alpha < 1:
            raise ValueError(f"lora_rank and lora_alpha must be positive, got {self.lora_rank} and {self.lora_alpha}")


@dataclass(frozen=True, slots=True)
class DataConfig:
    source: str = "generated"
    """Where prompts come from: generated (screens drawn live from envs/generated, rendered in Chromium), grounding (a ScreenSpot-style file or our JSONL), trajectories (recorded runs whose steps carry a target box), actions (GUI-R1-style action records: GUI-R1-3K's Parquet, a benchmark file, or an export of agent data export), samples (scored TrainSample JSONL, trained on as is)."""
    path: str = ""
    """The grounding file, trajectories run folder, action records (file or folder) or samples JSONL (not used by generated)."""
    seeds: int = 1000
    """generated: screens are drawn from seeds 0..seeds-1 (held-out screens use seeds above that)."""
    heldout_path: str = ""
    """A held-out grounding file for accuracy and early stopping; empty = a held-out split of the source."""
    heldout_size: int = 64
    """Held-out prompts scored with greedy decoding at every evaluation."""
    reward: str = "aepo"
    """Reward function: aepo, aepo_paper, guir1, guir1_paper, or distance (partial credit, see [curriculum])."""
    think: bool = True
    """The answer starts with <think>...</think> (InfiGUI-G1's think mode); false = the released no_think mode."""

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"source {self.source!r} is not one of {', '.join(SOURCES)}")
        if self.source != "generated" and not self.path:
            raise ValueError(f"source {self.source!r} needs data.path (a file or folder)")
        if self.seeds < 1 or self.heldout_size < 0:
            raise ValueError(f"need seeds >= 1 and heldout_size >= 0, got {self.seeds} and {self.heldout_size}")


@dataclass(frozen=True, slots=True)
class RLConfig:
    group_size: int = 8
    """Responses sampled per prompt (AEPO: 8, GUI-R1: 5)."""
    batch_prompts: int = 16
    """Prompts per update (InfiGUI-G1: 128, on 16 GPUs; GUI-R1: 128 per optimizer step out of 512 per rollout, on 8); batch = batch_prompts * group_size responses."""
    batch_size: int | None = field(default=None, metadata={"was": 0})
    """Responses per update, if you prefer to set it: must be a multiple of group_size; unset = batch_prompts * group_size."""
    max_new_tokens: int = 256
    """Longest response sampled (the papers allow 1024)."""
    lr: float | None = field(default=None, metadata={"was": 0.0})
    """AdamW learning rate; unset = 1e-4 for LoRA, 1e-6 (the papers') for full fine-tuning."""
    weight_decay: float = 0.01
    """AdamW weight decay (both papers: 0.01)."""
    clip_low: float = 0.2
    """PPO ratio floor is 1 - clip_low."""
    clip_high: float | None = field(default=None, metadata={"was": 0.0})
    """PPO ratio ceiling is 1 + clip_high; unset = the algorithm's (aepo 0.4, grpo 0.2)."""
    dual_clip: float | None = field(default=3.0, metadata={"was": 0.0})
    """Dual-clip bound for negative advantages (> 1); none = off."""
    kl_coef: float | None = field(default=None, metadata={"was": -1.0})
    """Weight of the k3 KL to the reference; unset = the algorithm's (aepo 0, grpo 0.01)."""
    ppo_epochs: int = 1
    """Passes over each batch (both papers: 1)."""
    minibatches: int = 1
    """Optimizer steps per pass, the batch split by group (both papers: 1)."""
    max_staleness: int | None = field(default=None, metadata={"was": -1})
    """Drop samples more than this many updates behind the current policy; unset = keep all."""
    max_is_ratio: float | None = field(default=2.0, metadata={"was": 0.0})
    """Cap of the importance weight for samples from an older policy; none = no cap."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip."""
    warmup_steps: int = 0
    """Linear learning-rate warm-up, in optimizer steps."""
    schedule: str = "constant"
    """Learning-rate schedule after warm-up: constant (both papers) or cosine."""
    shared_prefix: bool = True
    """Score the answers to one prompt as continuations of one pass over the prompt (same log-probs and gradients,
    faster); false runs prompt + answer once per answer."""

    def __post_init__(self) -> None:
        if self.group_size < 2:
            raise ValueError(f"group_size must be at least 2 (advantages compare answers within a group), got {self.group_size}")
        if self.batch_size is not None and (self.batch_size < 1 or self.batch_size % self.group_size):
            raise ValueError(f"batch_size {self.batch_size} does not divide by group_size {self.group_size}: "
                             f"use a multiple, e.g. {max(1, self.batch_size // self.group_size) * self.group_size}")
        if self.batch_prompts < 1 or self.max_new_tokens < 1 or self.ppo_epochs < 1 or self.minibatches < 1:
            raise ValueError("batch_prompts, max_new_tokens, ppo_epochs and minibatches must be at least 1")
        if self.schedule not in ("constant", "cosine"):
            raise ValueError(f"schedule {self.schedule!r} is not constant or cosine")
        unset = {"lr": (0, "is the default learning rate"), "clip_high": (0, "is the algorithm's ceiling"),
                 "kl_coef": (-1, "is the algorithm's KL weight"), "max_staleness": (-1, "keeps every sample"),
                 "dual_clip": (0, "turns dual-clip off"), "max_is_ratio": (0, "leaves the weight uncapped")}
        for name, (old, means) in unset.items():
            value = getattr(self, name)
            if value is not None and value == old:
                raise ValueError(f"{name}={value} was the old way to write unset; None {means}")
        if self.lr is not None and self.lr <= 0:
            raise ValueError(f"lr must be positive, got {self.lr} (None: the default for the fine-tuning mode)")
        if self.dual_clip is not None and self.dual_clip <= 1:
            raise ValueError(f"dual_clip must be > 1 (3.0 in verl), got {self.dual_clip}; None turns it off")
        if self.max_is_ratio is not None and self.max_is_ratio <= 0:
            raise ValueError(f"max_is_ratio must be positive, got {self.max_is_ratio}; None leaves it uncapped")
        if self.max_staleness is not None and self.max_staleness < 0:
            raise ValueError(f"max_staleness must be 0 or more, got {self.max_staleness}; None keeps every sample")
        if self.clip_high is not None and self.clip_high < 0:
            raise ValueError(f"clip_high must be 0 or more, got {self.clip_high}")

    @property
    def prompts_per_batch(self) -> int:
        return self.batch_prompts if self.batch_size is None else self.batch_size // self.group_size


@dataclass(frozen=True, slots=True)
class FilterConfig:
    drop_all_correct: bool = True
    """Drop groups whose answers are all correct (InfiGUI-G1's difficulty filter; they carry no gradient)."""
    drop_all_wrong: bool = False
    """Drop groups whose answers are all wrong too (GUI-R1's filter)."""
    dynamic_sampling: bool = False
    """DAPO-style: draw more prompts until the batch is full of informative groups (or max_draws is reached)."""
    max_draws: int = 4
    """Most rollout rounds per update under dynamic sampling."""

    def __post_init__(self) -> None:
        if self.max_draws < 1:
            raise ValueError(f"max_draws must be at least 1, got {self.max_draws}")


@dataclass(frozen=True, slots=True)
class CurriculumConfig:
    enabled: bool = False
    """The adaptive curriculum: a running success rate per item and a hard-sample queue that oversamples failures."""
    ema: float = 0.3
    """Weight of the newest group in each prompt's running success rate: s <- (1 - ema) s + ema r."""
    hard_below: float = 0.5
    """A prompt whose running success is below this (or whose latest group had no correct answer) is hard."""
    hard_fraction: float = 0.25
    """Share of each batch drawn from the hard-sample queue, weighted by failure rate."""
    queue_size: int = 1024
    """Most prompts the hard-sample queue holds (the least hard leave first)."""
    threshold_start: float | None = field(default=None, metadata={"was": 0.0})
    """Reward "distance": the partial-credit radius (fraction of the image diagonal) at the start; unset = no schedule."""
    threshold_end: float = 0.0
    """... and at the end of threshold_steps (tightened linearly)."""
    threshold_steps: int = 0
    """Steps over which the radius goes from threshold_start to threshold_end."""

    def __post_init__(self) -> None:
        if not 0 < self.ema <= 1 or not 0 <= self.hard_fraction <= 1 or self.queue_size < 1:
            raise ValueError("need 0 < ema <= 1, 0 <= hard_fraction <= 1 and queue_size >= 1")
        if self.threshold_start is not None and (self.threshold_start <= 0 or self.threshold_steps < 1):
            raise ValueError("a threshold schedule needs threshold_start > 0 and threshold_steps >= 1 (leave "
                             "threshold_start unset for none)")


@dataclass(frozen=True, slots=True)
class SFTConfig:
    batch_size: int = 16
    """Examples per SFT / RFT update."""
    lr: float | None = field(default=None, metadata={"was": 0.0})
    """SFT learning rate; unset = 1e-5 full, 1e-4 LoRA."""
    stop_accuracy: float | None = field(default=None, metadata={"was": 0.0})
    """Stop SFT once held-out top-1 accuracy reaches this (the learning benchmark starts RL from 0.3-0.6); unset = run all steps."""
    rft_samples: int = 8
    """rft: answers sampled per prompt; the best correct one becomes an SFT example."""

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.rft_samples < 1:
            raise ValueError("need batch_size >= 1 and rft_samples >= 1")
        if self.stop_accuracy is not None and not 0 < self.stop_accuracy <= 1:
            raise ValueError(f"stop_accuracy must be in (0, 1], got {self.stop_accuracy}; None runs every step")
        if self.lr is not None and self.lr <= 0:
            raise ValueError(f"lr must be positive, got {self.lr} (None: the default for the fine-tuning mode)")


@dataclass(frozen=True, slots=True)
class EvalConfig:
    every: int = 10
    """Score the held-out prompts every this many updates (and at the end); 0 = only at the end."""
    patience: int | None = field(default=None, metadata={"was": 0})
    """Early stopping: stop after this many evaluations without a better held-out accuracy; unset = never."""
    min_delta: float = 0.0
    """The least gain in held-out accuracy that counts as better."""

    def __post_init__(self) -> None:
        if self.every < 0:
            raise ValueError(f"every must be >= 0, got {self.every}")
        if self.patience is not None and self.patience < 1:
            raise ValueError(f"patience must be at least 1, got {self.patience}; None never stops early")


@dataclass(frozen=True, slots=True)
class CheckpointConfig:
    every: int = 50
    """Write a checkpoint every this many updates (and at the end); 0 = only at the end."""
    keep: int | None = field(default=3, metadata={"was": 0})
    """Checkpoints kept (the newest); none = all."""

    def __post_init__(self) -> None:
        if self.every < 0:
            raise ValueError(f"every must be >= 0, got {self.every}")
        if self.keep is not None and self.keep < 1:
            raise ValueError(f"keep must be at least 1, got {self.keep}; None keeps every checkpoint")


@dataclass(frozen=True, slots=True)
class LogConfig:
    tensorboard: bool = True
    """Write TensorBoard scalars to run_dir/tb."""
    png: bool = True
    """Draw run_dir/curves.png at every evaluation and at the end."""
    progress: bool = True
    """Show a progress bar with the key numbers when the output is a terminal."""


@dataclass(frozen=True, slots=True)
class OnlineConfig:
    """``[online]``: the settings of an online session, ``agent train --online`` and ``agent learner`` (the model, the
    RL update and the outputs are the rest of the ``TrainConfig``'s)."""

    env: str = ""
    """Registered environment the actors run (required; ``agent envs`` lists them), e.g. generated/click."""
    RENAMED: ClassVar[dict[str, str]] = {"devices": "actors"}
    """Keys an older file or online.json may use, and the key that holds their value now."""

    actors: int = 2
    """Actors in this process, each with its own device."""
    device_kind: str = DEFAULT_KIND
    """The actors' device kind (``devices.registry``): web (a Chromium per actor), android (one phone per actor,
    ``serials``) or desktop (one per process)."""
    group_level: str = "step"
    """step (n answers per screen, scored by the step verifier) or episode (n episodes per task seed)."""
    max_policy_lag: int | None = field(default=2, metadata={"was": -1})
    """Drop samples more than this many adapter versions behind the learner; none = keep all."""
    max_steps: int | None = field(default=None, metadata={"was": 0})
    """Step budget per episode; unset = the environment's."""
    max_pending: int | None = field(default=None, metadata={"was": 0})
    """Backlog (groups queued for the learner) at which actors pause; unset = rl.batch_prompts x max_policy_lag."""
    max_restarts: int = 2
    """Device failures in a row after which an actor is dropped."""
    max_episodes: int | None = field(default=None, metadata={"was": 0})
    """Stop after this many episodes; unset = when the learner has done train.steps updates."""
    max_wall_s: float | None = field(default=None, metadata={"was": 0.0})
    """Stop after this many seconds; unset = no limit."""
    keep_adapters: int = 4
    """Published adapter versions kept on disk."""
    serials: tuple[str, ...] = ()
    """The devices' addresses, one per actor, for kinds that take one (android: the phones' adb serials)."""
    wire: bool = False
    """Send every message through the bus codec (JSON header + binary parts), as a fleet would."""
    batch_decode: bool = True
    """Batch the actors' concurrent generate calls into one."""
    torch_threads: int | None = field(default=None, metadata={"was": 0})
    """torch.set_num_threads for the session; unset = leave torch's default."""
    progress_every_s: float = 10.0
    """Seconds between progress lines."""
    report: bool = True
    """Write report.html at the end."""
    demos: str = ""
    """Success replay: a folder of recorded demonstrations (run folders) of the session's tasks (docs/online.md)."""
    demo_share: float = 0.0
    """Success replay: share of each update's groups that may carry a recorded success, at most
    ceil(demo_share x rl.batch_prompts), only for failing tasks; 0 = off."""
    demo_below: float = 0.5
    """Success replay: a task is failing while its running success is below this (or the curriculum holds it as
    hard)."""
    group_timeout_s: float = 600.0
    """A group still incomplete this long after its first part (an actor died in the middle of it) is trained on
    with the parts it has (``GroupAssembler``)."""
    remote_actors: bool = False
    """The actors run in other processes (``agent actor``) and reach this learner over the transport (a fleet,
    docs/fleet.md); ``actors`` is then only how many the progress line expects."""

    def __post_init__(self) -> None:
        if self.actors < 1:
            raise ValueError(f"actors must be at least 1, got {self.actors}")
        from devices.registry import device_kind

        device_kind(self.device_kind)  # UnknownDeviceKind (a ValueError) naming the closest kind
        if self.group_level not in ("step", "episode"):
            raise ValueError(f"group_level {self.group_level!r} is not step or episode")
        if self.max_policy_lag is not None and self.max_policy_lag < 0:
            raise ValueError(f"max_policy_lag must be 0 or more, got {self.max_policy_lag}; None keeps every sample")
        if self.max_restarts < 0:
            raise ValueError(f"max_restarts must be 0 or more, got {self.max_restarts}")
        for name in ("max_steps", "max_episodes", "max_pending", "torch_threads"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}; None leaves it unset")
        if self.max_wall_s is not None and self.max_wall_s <= 0:
            raise ValueError(f"max_wall_s must be positive, got {self.max_wall_s}; None sets no limit")
        if self.keep_adapters < 1:
            raise ValueError(f"keep_adapters must be at least 1, got {self.keep_adapters}")
        if not 0 <= self.demo_share <= 1:
            raise ValueError(f"demo_share must be a share between 0 (off) and 1, got {self.demo_share}")
        if self.demo_share > 0 and not self.demos:
            raise ValueError("demo_share > 0 replays recorded successes: name their folder with demos (--demos DIR)")
        if self.group_timeout_s <= 0:
            raise ValueError(f"group_timeout_s must be positive, got {self.group_timeout_s}")
        if not 0 < self.demo_below <= 1:
            raise ValueError(f"demo_below must be in (0, 1], got {self.demo_below}")


@dataclass(frozen=True, slots=True)
class TrainConfig:
    train: RunConfig = field(default_factory=RunConfig)
    model: TrainModelConfig = field(default_factory=TrainModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rl: RLConfig = field(default_factory=RLConfig)
    filter: FilterConfig = field(default_factory=FilterConfig)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    log: LogConfig = field(default_factory=LogConfig)
    online: OnlineConfig = field(default_factory=OnlineConfig)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: dataclasses.asdict(getattr(self, f.name)) for f in dataclasses.fields(self)}


TRAIN_SECTIONS: dict[str, type] = {f.name: f.default_factory for f in dataclasses.fields(TrainConfig)}  # type: ignore[misc]

TRAIN_SECTION_DOCS = {
    "train": "What to run and where its outputs go.",
    "model": "The model being trained and how (LoRA or full).",
    "data": "Prompts and rewards.",
    "rl": "The RL update (AEPO / GRPO).",
    "filter": "Difficulty filtering and dynamic sampling.",
    "curriculum": "The adaptive curriculum and the reward-threshold schedule.",
    "sft": "Supervised stages: cold-start SFT and rejection-sampling SFT.",
    "eval": "Held-out accuracy and early stopping.",
    "checkpoint": "Checkpoints for resuming and for using the adapter.",
    "log": "Metrics outputs.",
    "online": "agent train --online and agent learner: the actors, their devices and the session's limits.",
}


# -- run folders ------------------------------------------------------------------------------------------------

RUN_KINDS = ("train", "online")
"""The default run folders' prefixes: runs/train-<time> for agent train, runs/online-<time> for --online."""


def new_run_dir(kind: str, root: str | Path = "runs") -> str:
    """A new run folder name, ``root/<kind>-<YYYYmmdd-HHMMSS>-<4 hex>``: timestamped like agent run's, never shared."""
    from envs.trajectory import new_run_id

    if kind not in RUN_KINDS:
        raise ValueError(f"run kind {kind!r} is not one of {', '.join(RUN_KINDS)}")
    return str(Path(root) / f"{kind}-{new_run_id()}")


def latest_run_dir(kind: str, root: str | Path = "runs") -> Path | None:
    """The newest ``root/<kind>-<time>`` folder that ``new_run_dir`` named (what ``agent train --resume`` continues
    when no folder is named); folders named by hand (``--run-dir runs/train-big``) are not guessed at."""
    named = re.compile(rf"{re.escape(kind)}-\d{{8}}-\d{{6}}-[0-9a-f]{{4}}")
    found = sorted(p for p in Path(root).glob(f"{kind}-*") if p.is_dir() and named.fullmatch(p.name)) \
        if Path(root).is_dir() else []
    return found[-1] if found else None


def with_run_dir(config: TrainConfig, kind: str) -> TrainConfig:
    """``config`` with ``train.run_dir`` filled in: a new folder of ``kind`` when it is empty.

    Raises ValueError under several processes (``accelerate launch``, WORLD_SIZE > 1) with an empty run_dir: each
    process would name its own folder, so the folder must be given (``--run-dir DIR``)."""
    if config.train.run_dir:
        return config
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if world > 1:
        raise ValueError(f"{world} processes (WORLD_SIZE) must write one run folder: name it with --run-dir DIR "
                         f"(or train.run_dir in the config)")
    return replace(config, train=replace(config.train, run_dir=new_run_dir(kind)))

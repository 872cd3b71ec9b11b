"""The training loop behind ``agent train``: the three-stage recipe (cold-start SFT, RL, rejection-sampling SFT) on
one model, with checkpoints, metrics, collapse monitors and early stopping.

``Trainer(config, backend=..., prompts=..., heldout=..., reward_fn=...)`` takes its parts ready-made (tests and the
benchmarks build them in code); ``Trainer.from_config(config)`` builds them from a ``TrainConfig`` (``train.build``:
the model, the data source of ``train.data``, the reward). The learner of the stage (``train.learner.Learner`` for
rl, ``train.sft.SupervisedLearner`` for sft and rft) is used only through ``train.trainable.Trainable``: the trainer
steps, checkpoints, resumes and exports either the same way. ``run()`` runs the configured stage:

- ``rl``: every update draws ``prompts_per_batch`` prompts (a share from the curriculum's hard-sample queue when it
  is on), samples ``group_size`` answers to each through the backend, scores them, drops uninformative groups
  (difficulty filter, or DAPO dynamic sampling that draws again until the batch is full), and runs one
  ``Learner.step``. Groups can also come from a stream instead (``run_stream``): scored samples from files or from
  live actors, trained on as they complete.
- ``sft``: supervised steps on the data's targets, written in the model's answer format; stops early once the
  held-out accuracy reaches ``sft.stop_accuracy``.
- ``rft``: samples ``sft.rft_samples`` answers per prompt from the current policy, keeps the best correct one per
  prompt, and takes a supervised step on them.

Every update logs its metrics (``run_dir/metrics.jsonl``, TensorBoard, ``curves.png``), feeds the collapse monitor,
and every ``eval.every`` updates scores the held-out prompts with greedy decoding (early stopping on that accuracy).
Checkpoints (``train.checkpoint``) carry the data position, the curriculum and the early-stopping state, so a
resumed run continues exactly where the interrupted one was: the same prompts, the same samples, the same metrics.

One bad sample never stops training: a reward function that raises marks its sample failed (``train.data``), the
sample is left out and counted (``rollout/failed_samples``); a batch with nothing left to learn from is skipped and
counted (``train/skipped_batches``).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from train.build import TargetText, TrainData, build_backend, build_data, build_learner, build_reward
from train.checkpoint import CheckpointError, latest_checkpoint, load_checkpoint, save_adapter, save_checkpoint
from train.config import TrainConfig, with_run_dir
from train.curriculum import (AdaptiveCurriculum, AdaptiveCurriculumConfig, Correctness, PromptDrawer, dynamic_sample,
                              filter_groups)
from train.learner import rollout_groups
from train.metrics import MetricsLogger, Progress
from train.monitors import CollapseMonitor, EarlyStopping
from train.samples import RolloutPrompt, TrainSample
from train.sft import SFTExample, greedy_accuracy, is_correct, rejection_sample
from train.trainable import Trainable

if TYPE_CHECKING:
    from policy.backends.hf import TransformersBackend

log = logging.getLogger(__name__)

__all__ = ["PromptStream", "Trainer", "TrainResult", "run_from_config"]


class PromptStream(PromptDrawer, Protocol):
    """Where prompts come from (``train.data.PromptSampler``): an endless, seeded stream that a checkpoint resumes
    (the curriculum draws from it too)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@dataclass
class TrainResult:
    """What a run did."""

    stage: str
    steps: int
    """Updates done in all (including those before a resume)."""
    stopped_early: bool = False
    best_accuracy: float | None = None
    best_step: int | None = None
    final_accuracy: float | None = None
    run_dir: Path | None = None
    output: Path | None = None
    """The trained weights: a peft adapter folder or a model folder."""
    warnings: list[str] = field(default_factory=list)


class Trainer:
    """One training stage on one model (see the module docstring).

    Args:
        config: the run's settings.
        backend: the transformers backend holding the model (trained in place).
        prompts: the prompt stream (``PromptStream``); not needed by ``run_stream``.
        heldout: prompts scored with greedy decoding for accuracy and early stopping (may be empty).
        reward_fn: ``reward_fn(prompt, text)`` -> RewardResult (``train.data.reward_fn``) or float.
        target_text: for ``sft``, the answer to teach for a prompt.
        accelerator: an ``accelerate.Accelerator`` for several processes.
    """

    def __init__(self, config: TrainConfig, *, backend: TransformersBackend, prompts: PromptStream | None = None,
                 heldout: Sequence[RolloutPrompt] = (), reward_fn: Callable[[RolloutPrompt, str], Any],
                 target_text: TargetText | None = None, accelerator: Any = None) -> None:
        config = with_run_dir(config, "train")  # an empty train.run_dir: a new runs/train-<time>
        self.config = config
        self.backend = backend
        self.prompts = prompts
        self.heldout = list(heldout)
        self.reward_fn = reward_fn
        self.target_text = target_text
        self.accelerator = accelerator
        self.run_dir = Path(config.train.run_dir)
        self.step = 0
        self._next_group_id = 0
        self._skipped_batches = 0
        self.warnings: list[str] = []
        self.on_start: list[Callable[[int], None]] = []
        """Called once with the starting step, after a resume restored the state and before the first update: the
        online session publishes the adapter version the actors start with here."""
        self.on_update: list[Callable[[int, dict[str, float]], None]] = []
        """Called after every update with (step, metrics), before metrics are logged and checkpoints written: the
        online session publishes the new adapter version here (and may add metrics to the dict)."""
        self.prompt_preset = backend.preset
        """The preset the trained prompts were built with, which the exported weights' ``handeye.json`` records
        (``policy.trained``): the backend's; an online session sets its actors' (their screen's prompt variant)."""
        torch.manual_seed(config.train.seed)  # before the learner: a new LoRA adapter's initial weights
        self.learner: Trainable = build_learner(config, backend, accelerator)
        self.data: TrainData | None = None
        """What ``from_config`` built (``close()`` closes its sources); None when the parts were passed in."""
        c = config.curriculum
        self.curriculum = AdaptiveCurriculum(AdaptiveCurriculumConfig(
            ema=c.ema, hard_below=c.hard_below, hard_fraction=c.hard_fraction, max_hard=c.queue_size,
            seed=config.train.seed)) if c.enabled else None
        self.monitor = CollapseMonitor()
        e = config.eval
        self.early = EarlyStopping(patience=e.patience, min_delta=e.min_delta, mode="max") if e.patience is not None else None
        self.best: tuple[float, int] | None = None

    # -- set-up from a config ------------------------------------------------------------------

    @classmethod
    def from_config(cls, config: TrainConfig, *, accelerator: Any = None) -> Trainer:
        """Build the backend, the data source, the held-out prompts and the reward from ``config``."""
        config = with_run_dir(config, "train")  # before the backend: the tiny model is built in the run folder
        backend = build_backend(config, accelerator)
        data = build_data(config, backend.preset)
        trainer = cls(config, backend=backend, prompts=data.prompts, heldout=data.heldout, reward_fn=data.reward_fn,
                      target_text=data.target_text, accelerator=accelerator)
        trainer.data = data
        return trainer

    def close(self) -> None:
        """Close the data sources ``from_config`` opened (a generated source holds a browser)."""
        if self.data is not None:
            self.data.close()

    # -- state -----------------------------------------------------------------------------------

    @property
    def is_main(self) -> bool:
        return self.accelerator is None or bool(self.accelerator.is_main_process)

    def _trainer_state(self) -> dict[str, Any]:
        return {
            "stage": self.config.train.stage, "step": self.step, "next_group_id": self._next_group_id,
            "skipped_batches": self._skipped_batches,
            "data": self.prompts.state_dict() if self.prompts is not None else None,
            "curriculum": self.curriculum.state_dict() if self.curriculum is not None else None,
            "early_stopping": self.early.state_dict() if self.early is not None else None,
            "best": list(self.best) if self.best else None,
            "monitor": self.monitor.state_dict(),
        }

    def _restore(self, state: dict[str, Any]) -> None:
        if state.get("stage") != self.config.train.stage:
            raise CheckpointError(f"the checkpoint is of stage {state.get('stage')!r}, this run is "
                                  f"{self.config.train.stage!r}; start the next stage from its adapter instead "
                                  f"(model.adapter = <checkpoint>/adapter)")
        self.step = int(state["step"])
        self._next_group_id = int(state.get("next_group_id", 0))
        self._skipped_batches = int(state.get("skipped_batches", 0))
        if self.prompts is not None and state.get("data") is not None:
            self.prompts.load_state_dict(state["data"])
        if self.curriculum is not None and state.get("curriculum") is not None:
            self.curriculum.load_state_dict(state["curriculum"])
        if self.early is not None and state.get("early_stopping") is not None:
            self.early.load_state_dict(state["early_stopping"])
        if state.get("best"):
            self.best = (float(state["best"][0]), int(state["best"][1]))
        if state.get("monitor") is not None:
            self.monitor.load_state_dict(state["monitor"])

    def _resume(self) -> int | None:
        """Apply ``train.resume``; returns the step resumed from (None: a fresh start)."""
        resume = self.config.train.resume
        if not resume:
            found = latest_checkpoint(self.run_dir)
            if found is not None:
                raise CheckpointError(f"{self.run_dir} already holds checkpoints (newest {found.name}): continue that "
                                      f"run with agent train --resume {self.run_dir} (train.resume = \"auto\"), or "
                                      f"leave train.run_dir empty for a new folder")
            return None
        path = self.run_dir if resume == "auto" else Path(resume)
        if resume == "auto" and latest_checkpoint(self.run_dir) is None:
            # Said at the default log level: a resume that silently starts over would look like a resumed run.
            log.warning("--resume: %s holds no checkpoint yet (its run stopped before the first one): starting from "
                        "step 0", self.run_dir)
            return None
        ck = load_checkpoint(path, self.learner)
        self._restore(ck.state)
        log.info("resumed from %s at step %d", ck.path, ck.step)
        return ck.step

    def checkpoint(self) -> None:
        """Write a checkpoint of the current step (the main process only; see ``train.checkpoint``)."""
        if not self.is_main:
            return
        save_checkpoint(self.run_dir, self.step, self.learner, self._trainer_state(),
                        keep=self.config.checkpoint.keep)

    def checkpoint_unless_saved(self) -> None:
        """``checkpoint()``, unless no update ran yet or the newest checkpoint already holds this step (a run
        stopped by Ctrl-C, an error or its end keeps what its finished updates learned, once)."""
        latest = latest_checkpoint(self.run_dir)
        if self.step and (latest is None or latest.name != f"step-{self.step:06d}"):
            self.checkpoint()

    # -- the run --------------------------------------------------------------------------------

    def run(self) -> TrainResult:
        """Run the configured stage to ``train.steps`` updates (or early stopping)."""
        if self.prompts is None:
            raise ValueError("this trainer has no prompt source; use run_stream(groups) for scored samples")
        stage = self.config.train.stage
        if stage == "sft" and self.target_text is None:
            raise ValueError("stage sft needs target_text: the data source must know each prompt's answer")
        update = {"rl": self._rl_update, "sft": self._sft_update, "rft": self._rft_update}[stage]
        return self._loop(update)

    def run_stream(self, groups: Iterable[Sequence[TrainSample]]) -> TrainResult:
        """RL on scored groups from a stream (files, or live actors): one update per ``prompts_per_batch``
        complete groups, until the stream ends or ``train.steps`` updates are done."""
        if self.config.train.stage != "rl":
            raise ValueError("run_stream trains with RL: set train.stage = \"rl\"")
        it = iter(groups)

        def update() -> dict[str, float] | None:
            t0 = time.perf_counter()
            batch: list[list[TrainSample]] = []
            for g in it:
                batch.append(list(g))
                if len(batch) == self.config.rl.prompts_per_batch:
                    break
            if not batch:
                raise StopIteration
            self._stream_wait_s = time.perf_counter() - t0
            if self.accelerator is not None and self.accelerator.num_processes > 1:
                # every process reads the same stream: each trains on every world-th group of the batch
                batch = batch[self.accelerator.process_index::self.accelerator.num_processes]
            return self._learn(batch, {})

        return self._loop(update)

    def _loop(self, update: Callable[[], dict[str, float] | None]) -> TrainResult:
        cfg = self.config
        self.run_dir.mkdir(parents=True, exist_ok=True)
        start = self._resume()
        if self.is_main:
            (self.run_dir / "train_config.json").write_text(json.dumps(cfg.to_dict(), indent=1), encoding="utf-8")
        result = TrainResult(stage=cfg.train.stage, steps=self.step, run_dir=self.run_dir)
        for hook in self.on_start:
            hook(self.step)
        logger = MetricsLogger(self.run_dir, tensorboard=cfg.log.tensorboard, png=cfg.log.png,
                               resume_step=start) if self.is_main else None
        progress = Progress(cfg.train.steps, enabled=None if cfg.log.progress and self.is_main else False,
                            start_step=self.step)
        try:
            with progress:
                while self.step < cfg.train.steps:
                    t0 = time.perf_counter()
                    self._stream_wait_s = 0.0
                    try:
                        metrics = update()
                    except StopIteration:
                        log.info("the sample stream ended after %d updates", self.step)
                        break
                    self.step += 1
                    if metrics is None:
                        metrics = {}
                    # the update's own time; waiting for a sample stream to deliver the batch is reported apart
                    metrics["time/step_s"] = time.perf_counter() - t0 - self._stream_wait_s
                    if self._stream_wait_s:
                        metrics["time/stream_wait_s"] = self._stream_wait_s
                    if metrics.get("train/samples"):
                        metrics["time/samples_per_s"] = metrics["train/samples"] / metrics["time/step_s"]
                    metrics["train/skipped_batches"] = float(self._skipped_batches)
                    for hook in self.on_update:
                        hook(self.step, metrics)
                    stop = False
                    e = cfg.eval
                    if self.heldout and ((e.every and self.step % e.every == 0) or self.step == cfg.train.steps):
                        acc = self.evaluate()
                        metrics["eval/accuracy"] = acc
                        stop = self._after_eval(acc, result)
                    for w in self.monitor.update(self.step, metrics):
                        self.warnings.append(str(w))
                    if logger is not None:
                        logger.log(self.step, metrics)
                    progress.update(self.step, metrics)
                    ck = cfg.checkpoint.every
                    if (ck and self.step % ck == 0) or self.step == cfg.train.steps or stop:
                        self.checkpoint_unless_saved()  # a hook may have written it already (a fleet learner)
                    if stop:
                        result.stopped_early = True
                        break
        except KeyboardInterrupt:
            # Ctrl-C: keep what the finished updates learned; --resume continues from here
            self.checkpoint_unless_saved()
            raise
        finally:
            if logger is not None:
                logger.close()
        result.steps = self.step
        result.warnings = list(self.warnings)
        if self.best is not None:
            result.best_accuracy, result.best_step = self.best
        if self.is_main:
            if not result.stopped_early:
                self.checkpoint_unless_saved()
            result.output = self._export()
        return result

    def _after_eval(self, acc: float, result: TrainResult) -> bool:
        result.final_accuracy = acc
        if math.isfinite(acc) and (self.best is None or acc > self.best[0]):
            self.best = (acc, self.step)
        stop_at = self.config.sft.stop_accuracy
        if self.config.train.stage == "sft" and stop_at is not None and acc >= stop_at:
            log.info("held-out accuracy %.3f reached sft.stop_accuracy %.3f: stopping SFT", acc,
                     self.config.sft.stop_accuracy)
            return True
        if self.early is not None:
            self.early.update(acc, self.step)
            if self.early.should_stop:
                log.info("early stopping: no better held-out accuracy than %.3f (step %s) for %d evaluations",
                         self.early.best, self.early.best_step, self.config.eval.patience)
                return True
        return False

    def _export(self) -> Path:
        """The final weights as a usable folder: ``run_dir/adapter`` (LoRA) or ``run_dir/model`` (full), with the
        ``handeye.json`` that says what they were trained with (``policy.trained``: the family, prompt variant,
        pixel budget and base model, which ``agent run --policy transformers:RUN_DIR`` restores)."""
        import shutil

        from policy.trained import Finetune, TrainedSettings

        finetune = Finetune(self.config.model.finetune)
        out = self.run_dir / finetune.folder
        shutil.rmtree(out, ignore_errors=True)
        tmp = self.run_dir / ".export"
        shutil.rmtree(tmp, ignore_errors=True)
        saved = save_adapter(self.learner, tmp)
        TrainedSettings.of(self.prompt_preset, finetune.value, self._base_model(out)).write(saved)
        saved.rename(out)
        shutil.rmtree(tmp, ignore_errors=True)
        return out

    def _base_model(self, weights: Path) -> str:
        """The model this run started from, as ``handeye.json`` names it: a hub id as given, a folder inside the run
        folder (the tiny test model) relative to ``weights``, another folder as an absolute path."""
        import os

        base = Path(self.backend.model_id)
        if not base.is_dir():
            return self.backend.model_id
        base = base.resolve()
        if base.is_relative_to(self.run_dir.resolve()):
            return os.path.relpath(base, weights.resolve())
        return str(base)

    # -- evaluation ------------------------------------------------------------------------------

    def evaluate(self) -> float:
        """Greedy top-1 accuracy on the held-out prompts."""
        self._model_eval()
        res = greedy_accuracy(self.backend, self.heldout, self.reward_fn,
                              max_new_tokens=self.config.rl.max_new_tokens)
        return res.accuracy

    def _model_eval(self) -> None:
        self.backend.model.eval()

    # -- one update per stage -----------------------------------------------------------------------

    def _draw(self, n: int) -> list[RolloutPrompt]:
        """``n`` prompts, or under several processes this process's share of them (every process draws the same
        seeded batch and keeps every world-th prompt, so together they cover it once)."""
        assert self.prompts is not None
        if self.curriculum is not None:
            batch = self.curriculum.next_batch(self.prompts, n)
        else:
            batch = self.prompts.next_prompts(n)
        if self.accelerator is not None and self.accelerator.num_processes > 1:
            batch = batch[self.accelerator.process_index::self.accelerator.num_processes]
        return batch

    def _rollout(self, prompts: Sequence[RolloutPrompt]) -> list[list[TrainSample]]:
        groups = rollout_groups(self.backend, prompts, self.config.rl.group_size, self.reward_fn,
                                max_new_tokens=self.config.rl.max_new_tokens, first_group_id=self._next_group_id,
                                adapter_version=self.learner.adapter_version)
        self._next_group_id += len(prompts)
        return groups

    def _rl_update(self) -> dict[str, float] | None:
        set_step = getattr(self.reward_fn, "set_step", None)
        if set_step is not None:  # the distance reward's threshold schedule
            set_step(self.step)
        rl, flt = self.config.rl, self.config.filter
        want = rl.prompts_per_batch
        seen: list[list[TrainSample]] = []
        if flt.dynamic_sampling:
            def draw(k: int) -> list[list[TrainSample]]:
                groups = self._rollout(self._draw(k))
                seen.extend(groups)
                return groups

            correct = Correctness()

            def informative(g: list[TrainSample]) -> bool:
                n_ok = sum(correct(s) for s in g)
                if len(g) < 2 or len({s.reward for s in g}) < 2:
                    return False
                return not ((flt.drop_all_correct and n_ok == len(g)) or (flt.drop_all_wrong and n_ok == 0))

            batch = dynamic_sample(draw, want, max_draws=flt.max_draws, accept=informative)
            kept, extra = batch.groups, batch.metrics()
        else:
            seen = self._rollout(self._draw(want))
            res = filter_groups(seen, drop_all_correct=flt.drop_all_correct, drop_all_wrong=flt.drop_all_wrong)
            kept, extra = res.kept, res.metrics()
        return self._learn(kept, extra, seen)

    def _learn(self, kept: list[list[TrainSample]], extra: dict[str, float],
               seen: list[list[TrainSample]] | None = None) -> dict[str, float] | None:
        from train.curriculum import is_failed
        from train.monitors import collapse_metrics

        seen = seen if seen is not None else kept
        metrics = dict(extra)
        usable = [[s for s in g if not is_failed(s)] for g in seen]
        usable = [g for g in usable if g]
        metrics["rollout/failed_samples"] = float(sum(is_failed(s) for g in seen for s in g))
        if usable:
            metrics.update(collapse_metrics(usable))
            flat = [s for g in usable for s in g]
            metrics["rollout/reward_mean"] = sum(s.reward for s in flat) / len(flat)
            if all("correct" in s.reward_parts for s in flat):  # scored by train.data's reward adapter
                correct = Correctness()
                metrics["rollout/accuracy"] = sum(correct(s) for s in flat) / len(flat)
        if self.curriculum is not None:
            metrics.update(self.curriculum.observe(seen))
        kept = [[s for s in g if not is_failed(s)] for g in kept]
        return self._step([g for g in kept if len(g) >= 2], metrics)

    def _step(self, batch: Sequence[Any], metrics: dict[str, float]) -> dict[str, float]:
        """One learner step on ``batch``, added to ``metrics``; skipped (and counted) in every process when the
        learner says a step would change nothing in any of them (equal rewards and no KL: every advantage is 0, a
        step would only apply weight decay and stale momentum; the collapse monitor reports the zero spread)."""
        why = self.learner.skip_reason(batch)
        if not self._all_processes(not why):
            self._skipped_batches += 1
            log.info("update %d: no step taken: %s", self.step + 1, why or "another process had nothing to learn")
            return metrics
        metrics.update(self.learner.step(batch))
        return metrics

    def _all_processes(self, ok: bool) -> bool:
        """Whether ``ok`` holds in every process: under DDP every process must take the same steps (a backward
        pass waits for all of them), so one process with nothing to learn makes all of them skip the update."""
        if self.accelerator is None or self.accelerator.num_processes == 1:
            return ok
        flags = self.accelerator.gather(torch.tensor([1 if ok else 0], device=self.accelerator.device))
        return bool(flags.min().item())

    def _sft_update(self) -> dict[str, float]:
        assert self.target_text is not None  # run() checked
        prompts = self._draw(self.config.sft.batch_size)
        examples = [SFTExample(p.messages, p.image, self.target_text(p), p.origin) for p in prompts]
        return self._step(examples, {})

    def _rft_update(self) -> dict[str, float] | None:
        prompts = self._draw(self.config.sft.batch_size)
        examples, stats = rejection_sample(self.backend, prompts, self.config.sft.rft_samples, self.reward_fn,
                                           accept=is_correct, max_new_tokens=self.config.rl.max_new_tokens)
        metrics = {"rft/prompts": float(stats.prompts), "rft/sampled": float(stats.sampled),
                   "rft/accepted": float(stats.accepted), "rft/kept": float(stats.kept),
                   "rft/accept_rate": stats.accept_rate}
        return self._step(examples, metrics)


def run_from_config(config: TrainConfig) -> TrainResult:
    """What ``agent train`` does: build everything from ``config``, run the stage, close the data sources.

    Under ``accelerate launch`` (several processes) an ``Accelerator`` joins them; alone, none is made."""
    import os

    import dataclasses

    config = with_run_dir(config, "train")
    accelerator = None
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from accelerate import Accelerator

        accelerator = Accelerator(cpu=config.model.device == "cpu")
        if config.model.device == "cuda":  # one GPU per process
            local = dataclasses.replace(config.model, device=f"cuda:{accelerator.local_process_index}")
            config = dataclasses.replace(config, model=local)
    result = _run_stage(config, accelerator)
    if accelerator is not None:
        # the ranks leave together: one that exits while another still talks over gloo can abort the run at its
        # very end (seen in the two-process test: "terminate called without an active exception")
        accelerator.wait_for_everyone()
        accelerator.end_training()  # destroys the process group
    return result


def _run_stage(config: TrainConfig, accelerator: Any) -> TrainResult:
    if config.data.source == "samples":
        from train.samples import ReadStats, iter_groups, read_jsonl

        backend = build_backend(config, accelerator)
        stats = ReadStats()
        # The samples come scored; the trainer still holds the config's reward (``build_reward``), so nothing it
        # might score (a held-out prompt) would get a stand-in 0.
        trainer = Trainer(config, backend=backend, reward_fn=build_reward(config, backend.preset),
                          accelerator=accelerator)
        groups = iter_groups(read_jsonl(config.data.path, stats))
        result = trainer.run_stream(groups)
        if stats.skipped:
            result.warnings.append(f"{stats.skipped} bad sample rows skipped (first: {stats.reasons[0]})")
        return result
    trainer = Trainer.from_config(config, accelerator=accelerator)
    try:
        return trainer.run()
    finally:
        trainer.close()

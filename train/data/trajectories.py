"""Recorded trajectories as a prompt source: GUI-R1-style step prompts from the steps of recorded runs.

``TrajectorySource(run_dir, preset="gui-r1")`` turns recorded steps with a target box into step samples: the
family's prompt with the episode's task and the steps before it as history, the ground truth being the recorded
action (its GUI-R1 name from ``policy.formats.guir1_prompts.action_name``, box, point and text). Only steps of
successful episodes (or of human demonstrations that were not aborted) count by default; every step left out is
counted with its reason.

Each step's target also carries ``"answer"``: the recorded action written in the family's output format
(``train.data.answers.answer_for_action``), which is what SFT teaches. With ``sft=True`` (``agent train --stage
sft``) a step needs no target box and no GUI-R1 name, only an action its family can write: key presses, typing,
scrolls, drags and the final ``finish`` of a demonstration become examples too. Pauses (the ``wait`` a recorder's
pause key makes) are neither samples nor history; text masked in a password field is never a sample.

(Scored samples already written as ``TrainSample`` JSONL are no prompt source: ``train.samples.read_jsonl`` reads
them and the trainer trains on them as they are.)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from devices.actions import TERMINAL_KINDS, Action
from devices.errors import DeviceError, InvalidAction
from envs.errors import RecordFormatError
from envs.records import Actor, Outcome, StepRecord
from envs.trajectory import Episode, read_episode
from policy.base import HistoryEntry
from policy.formats.guir1_prompts import action_name
from policy.presets import STEP_FAMILY, ModelPreset
from train.data.answers import answer_for_action
from train.data.prompts import ListedItems, Skipped, build_prompt, make_target, resolve_preset, skip_counts
from train.errors import BadItem, PromptSourceError, UnwritableAction
from train.samples import RolloutPrompt

log = logging.getLogger(__name__)

__all__ = ["TrajectorySource"]


@dataclass(frozen=True, slots=True)
class _StepItem:
    id: str
    episode: Episode
    step: StepRecord
    history: tuple[HistoryEntry, ...]
    instruction: str
    action: Action
    gt_action: str
    gt_text: str | None
    answer: str | None


def _episode_dirs(run_dir: Path) -> list[Path]:
    """Episode folders of a run folder, or of every run folder inside ``run_dir``."""
    runs = [run_dir] if (run_dir / "run.json").exists() else sorted(
        d for d in run_dir.iterdir() if d.is_dir() and (d / "run.json").exists())
    if not runs:
        raise PromptSourceError(f"{run_dir} is neither a run folder (no run.json) nor a folder of runs")
    return [c for r in runs for c in sorted(r.iterdir()) if c.is_dir() and (c / "episode.json").exists()]


def _usable_episode(episode: Episode) -> bool:
    rec = episode.record
    if rec.outcome is Outcome.SUCCESS:
        return True
    return rec.actor is Actor.HUMAN and rec.outcome in (Outcome.CLAIMED, Outcome.INFEASIBLE)


def _paused(step: StepRecord) -> bool:
    """The ``wait`` a recorder's pause key made (``info.env_info.demo.paused_s``)."""
    env_info = step.info.get("env_info") if isinstance(step.info, dict) else None
    demo = env_info.get("demo") if isinstance(env_info, dict) else None
    return isinstance(demo, dict) and "paused_s" in demo


class TrajectorySource(ListedItems):
    """GUI-R1-style step prompts from recorded trajectories (see the module docstring).

    Args:
        run_dir: a run folder (``runs/<run_id>``) or a folder of them.
        preset: the model preset (or id / family name) whose prompt ``agent run`` uses; GUI-R1 by default.
        only_successful: keep only steps of episodes a checker verified (outcome success) and of human
            demonstrations that ended as claimed or infeasible; False keeps every step with a target box.
        sft: keep every step whose action the family can write (its answer), box or not (for SFT); False keeps
            the GUI-R1-style step samples a reward can score (a target box and a GUI-R1 action).
    """

    def __init__(self, run_dir: str | Path, *, preset: ModelPreset | str = STEP_FAMILY,
                 only_successful: bool = True, sft: bool = False) -> None:
        self.run_dir = Path(run_dir)
        if not self.run_dir.is_dir():
            raise PromptSourceError(f"trajectory folder {self.run_dir} does not exist")
        self.preset = resolve_preset(preset)
        self.sft = sft
        self.name = f"trajectories:{self.run_dir.name}"
        self.skipped: list[Skipped] = []
        self._items: list[_StepItem] = []
        for ep_dir in _episode_dirs(self.run_dir):
            try:
                episode = read_episode(ep_dir)
            except RecordFormatError as e:
                self.skipped.append(Skipped(str(ep_dir), "bad_episode", str(e)))
                continue
            self._add_episode(episode, only_successful)
        for kind, n in skip_counts(self.skipped).items():
            log.info("%s: %d steps skipped: %s", self.name, n, kind)
        if not self._items:
            counts = ", ".join(f"{k}: {n}" for k, n in skip_counts(self.skipped).items()) or "no steps"
            raise PromptSourceError(f"no usable step in {self.run_dir} ({counts})")

    def _add_episode(self, episode: Episode, only_successful: bool) -> None:
        history: list[HistoryEntry] = []
        usable = not only_successful or _usable_episode(episode)
        outcome = episode.record.outcome.value if episode.record.outcome else "unfinished"
        for step in episode.steps:
            action = None
            if step.action is not None:
                try:
                    action = Action.from_dict(step.action)
                except InvalidAction:
                    action = None
            if _paused(step):
                self.skipped.append(Skipped(step.step_id, "pause", "a pause in the recording, not part of the task"))
                continue
            reason = self._skip_reason(episode, step, action, usable, outcome)
            answer = None
            if reason is None:
                assert action is not None
                answer, reason = self._answer(episode, step, action, history)
            if reason is not None:
                self.skipped.append(Skipped(step.step_id, *reason))
            else:
                assert action is not None
                gt = action_name(action) or (action.kind.value, action.text)
                self._items.append(_StepItem(step.step_id, episode, step, tuple(history), episode.record.task,
                                             action, gt[0], gt[1], answer))
            history.append(HistoryEntry(action, step.raw_output, executed=step.executed and action is not None))

    def _answer(self, episode: Episode, step: StepRecord, action: Action, history: list[HistoryEntry]
                ) -> tuple[str | None, tuple[str, str] | None]:
        """(the step's answer in the family's format, None when it cannot be written; why the step is left out)."""
        try:
            answer = answer_for_action(self.preset, self.preset.space(step.frame_size), action,
                                       instruction=episode.record.task, box=step.target_box, history=history)
        except UnwritableAction as e:
            return None, (("unwritable", str(e)) if self.sft else None)
        return answer, None

    def _skip_reason(self, episode: Episode, step: StepRecord, action: Action | None, usable: bool,
                     outcome: str) -> tuple[str, str] | None:
        if not usable:
            return "episode_outcome", f"episode ended {outcome}, not a verified success"
        if step.target_box is None and not self.sft:
            return "no_target_box", "the step recorded no target box"
        if action is None:
            return "no_action", "the step has no valid action"
        if not step.executed and action.kind not in TERMINAL_KINDS:
            return "not_executed", "the action was not performed (refused, or the device could not do it)"
        if action_name(action) is None and not self.sft:
            return "no_guir1_action", f"GUI-R1 has no action for {action.kind.value}"
        if step.sensitive:
            return "sensitive", "typed text went into a password field and is masked"
        try:
            frame = episode.frame_file(step)
        except RecordFormatError as e:
            return "missing_frame", str(e)
        if not frame.is_file():
            return "missing_frame", f"frame {frame} does not exist"
        return None

    def prompt(self, index: int) -> RolloutPrompt:
        item = self._items[index]
        try:
            frame = item.episode.frame(item.step)
        except (RecordFormatError, DeviceError, ValueError) as e:  # DeviceError: a stored frame that does not decode
            raise BadItem(f"{item.id}: {e}") from None
        messages, image, space = build_prompt(self.preset, item.instruction, frame, history=item.history)
        point = item.action.point.as_list() if item.action.point is not None else None
        target = make_target(self.preset, space, item.instruction, item.step.target_box, action=item.gt_action,
                             point=(point[0], point[1]) if point else None, text=item.gt_text)
        if item.answer is not None:
            target["answer"] = item.answer
        rec = item.episode.record
        origin = {"id": item.id, "source": "trajectory", "run": rec.run_id, "episode": rec.episode_id,
                  "step": item.step.index, "task": rec.task}
        return RolloutPrompt(messages, image, (int(frame.shape[1]), int(frame.shape[0])), target, origin)

    def close(self) -> None:
        pass

"""GUI-R1-style action records as a prompt source: GUI-R1-3K's training Parquet, the benchmarks' test files, and
datasets ``agent data export`` wrote (a Parquet file or a dataset folder), read by ``envs.action_bench.records``.

``ActionSource(path, preset="gui-r1")`` makes one step prompt per record, built as ``agent run`` builds it: the
family's prompt with the record's instruction, and for GUI-R1 its history string (``HistoryEntry.recorded``). The
target (``train.data.prompts.Target``) is the record's ground truth: ``action`` its ``gt_action``, ``box`` a four-
number ``gt_bbox`` (normalized in the file, scaled to the model's space here), ``point`` a two-number one, ``text``
its ``gt_input_text`` (None for "no input text"); an ``impossible`` record is a negative sample (no box).

``need_box=True`` (what ``data.reward`` = an InfiGUI-G1 point-list reward needs: those score a box) leaves out the
records with only a point; records without an action name (an exported step that did not parse) are always left
out. Every record left out, at load or here, is counted with its reason in ``source.skipped``.
"""

from __future__ import annotations

import logging
from pathlib import Path

from envs.action_bench.records import ActionRecord, decode_image, load_actions, read_image
from envs.errors import EnvError
from policy.base import HistoryEntry
from policy.presets import STEP_FAMILY, ModelPreset
from train.data.prompts import ListedItems, Skipped, build_prompt, make_target, resolve_preset
from train.errors import BadItem, PromptSourceError
from train.samples import RolloutPrompt

log = logging.getLogger(__name__)

__all__ = ["ActionSource"]


class ActionSource(ListedItems):
    """Step prompts from action records (see the module docstring)."""

    def __init__(self, path: str | Path, *, preset: ModelPreset | str = STEP_FAMILY, need_box: bool = False) -> None:
        self.path = Path(path)
        self.preset = resolve_preset(preset)
        self.name = f"actions:{self.path.name}"
        try:
            datasets = load_actions(self.path, any_records=True)
        except EnvError as e:
            raise PromptSourceError(f"action records {self.path}: {e}") from e
        self.skipped = [Skipped(f"{r.file}:{r.index}", r.kind.value, r.reason) for d in datasets for r in d.rejected]
        self._items: list[ActionRecord] = []
        for record in (r for d in datasets for r in d.records):
            if need_box and len(record.gt_numbers) != 4 and record.gt_action != "impossible":
                self.skipped.append(Skipped(f"{record.file}:{record.row}", "no_box",
                                            "the reward scores a box and the record has only a point"))
                continue
            self._items.append(record)
        if not self._items:
            shown = "; ".join(str(s) for s in self.skipped[:5]) or "no records"
            raise PromptSourceError(f"no usable record in {self.path} ({len(self.skipped)} skipped: {shown})")

    def prompt(self, index: int) -> RolloutPrompt:
        record = self._items[index]
        where = f"{record.file}:{record.row}"
        try:
            data = read_image(record)
            if data is None:
                raise EnvError("no image")
            frame = decode_image(data)
        except (EnvError, OSError) as e:
            raise BadItem(f"{where}: {e}") from None
        size = (int(frame.shape[1]), int(frame.shape[0]))
        history = (HistoryEntry(None, recorded=record.history),) if record.history not in ("", "None") else ()
        messages, image, space = build_prompt(self.preset, record.instruction, frame, history=history)
        box = record.gt_box(size) if record.gt_action != "impossible" else None
        point = None if box is not None else record.gt_point(size)
        text = None if record.gt_text == "no input text" else record.gt_text
        target = make_target(self.preset, space, record.instruction, box, action=record.gt_action, point=point,
                             text=text)
        return RolloutPrompt(messages, image, size, target,
                             {"id": record.id, "source": "actions", "file": str(record.file), "where": where})

    def close(self) -> None:
        pass

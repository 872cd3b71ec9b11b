"""Grounding files as a prompt source: single-step grounding prompts, one per row.

``GroundingSource(path, preset=...)`` reads ScreenSpot / -v2 / -Pro files (``envs.grounding.load_grounding``) or
our own JSONL, one object a line::

    {"image": "shots/0001.png", "instruction": "open settings", "box": [x1, y1, x2, y2], "box_space": "pixels"}
    {"image": "shots/0002.png", "instruction": "click the red logo", "negative": true}

``image`` is relative to ``image_dir`` (default: the JSONL's folder) and stays inside it (an absolute path, ``..``
or a symlink out of the folder is a rejected row: a file may come from anywhere); ``box`` is the target's corners,
``box_space`` "pixels" (default; the image's own pixels) or "normalized" (fractions of its width and height);
``"negative": true`` means the target is not on the screen (no box); an optional ``"id"`` names the row (default:
its line number). Rows that cannot be used (malformed, bad box: not four numbers, x2 <= x1 or y2 <= y1, outside
the image; missing or unreadable image; nested deeper than ``devices.bounded_json.MAX_DEPTH`` or a number longer
than ``MAX_NUMBER_CHARS``) are skipped, counted and named (``file:line: kind: reason``) in ``source.skipped``; a
file with no usable row, or over ``MAX_FILE_BYTES``, is a ``PromptSourceError``. An image that passed its header
check at load but cannot be decoded (cut off) is skipped when its prompt is made (``BadItem``, counted by the
sampler).
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devices.base import Box
from devices.bounded_json import loads_bounded, read_bounded
from devices.files import confined
from envs.errors import EnvError
from envs.grounding import GroundingSample, RejectKind, image_size, load_grounding, read_rgb
from policy.presets import GROUNDING_FAMILY, ModelPreset
from train.data.prompts import ListedItems, Skipped, build_prompt, make_target, resolve_preset
from train.errors import BadItem, BadRow, PromptSourceError
from train.samples import RolloutPrompt

log = logging.getLogger(__name__)

__all__ = ["GroundingSource"]


@dataclass(frozen=True, slots=True)
class _GroundingItem:
    id: str
    where: str
    image_path: Path
    frame_size: tuple[int, int]
    instruction: str
    box: Box | None
    """Normalized frame box; None on a negative sample."""


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _jsonl_row(row: Any, root: Path) -> tuple[Path, tuple[int, int], str, Box | None]:
    if not isinstance(row, dict):
        raise BadRow(RejectKind.MALFORMED, f"a row must be a JSON object, got {type(row).__name__}")
    name, instruction = row.get("image"), row.get("instruction")
    if not isinstance(name, str) or not name.strip():
        raise BadRow(RejectKind.MALFORMED, "no 'image' path")
    if not isinstance(instruction, str) or not instruction.strip():
        raise BadRow(RejectKind.MALFORMED, "no 'instruction' text")
    negative = row.get("negative", False)
    if not isinstance(negative, bool):
        raise BadRow(RejectKind.MALFORMED, f"'negative' must be true or false, got {negative!r}")
    space = row.get("box_space", "pixels")
    if space not in ("pixels", "normalized"):
        raise BadRow(RejectKind.MALFORMED, f"'box_space' must be 'pixels' or 'normalized', got {space!r}")
    try:
        path = confined(root, name, "image path")
    except ValueError as e:
        raise BadRow(RejectKind.UNSAFE_PATH, f"{e} (image_dir: {root})") from None
    if not path.is_file():
        raise BadRow(RejectKind.MISSING_IMAGE, f"image {path} does not exist")
    size = image_size(path)
    if size is None:
        raise BadRow(RejectKind.UNREADABLE_IMAGE, f"image {path} is not a readable image")
    box = row.get("box")
    if negative:
        if box is not None:
            raise BadRow(RejectKind.MALFORMED, "a negative row (target absent) must have no 'box'")
        return path, size, instruction.strip(), None
    if not (isinstance(box, list) and len(box) == 4 and all(_finite(v) for v in box)):
        raise BadRow(RejectKind.MALFORMED, f"'box' must be four numbers [x1, y1, x2, y2], got {box!r}")
    x1, y1, x2, y2 = box
    if x2 <= x1 or y2 <= y1:
        raise BadRow(RejectKind.MALFORMED, f"box {box} must have x2 > x1 and y2 > y1")
    w, h = (1.0, 1.0) if space == "normalized" else (float(size[0]), float(size[1]))
    if x1 < 0 or y1 < 0 or x2 > w or y2 > h:
        extent = "[0, 1]" if space == "normalized" else f"the {size[0]}x{size[1]} image"
        raise BadRow(RejectKind.BOX_OUTSIDE, f"box {box} ({space}) reaches outside {extent}")
    return path, size, instruction.strip(), Box(x1 / w, y1 / h, x2 / w, y2 / h)


def _load_jsonl(file: Path, image_dir: Path | None) -> tuple[list[_GroundingItem], list[Skipped]]:
    root = image_dir if image_dir is not None else file.parent
    items: list[_GroundingItem] = []
    skipped: list[Skipped] = []
    seen: set[str] = set()
    try:
        lines = read_bounded(file).splitlines()
    except (OSError, ValueError) as e:  # missing, unreadable, not UTF-8, or over MAX_FILE_BYTES
        raise PromptSourceError(f"grounding file {file} cannot be read: {e}") from e
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{file}:{lineno}"
        try:
            try:
                row = loads_bounded(line, first_line=lineno, records=False)
            except json.JSONDecodeError as e:
                raise BadRow(RejectKind.MALFORMED, f"not JSON: {e.msg}") from None
            except ValueError as e:  # nested deeper than MAX_DEPTH, a number longer than MAX_NUMBER_CHARS
                raise BadRow(RejectKind.MALFORMED, str(e)) from None
            path, size, instruction, box = _jsonl_row(row, root)
            item_id = f"{file.stem}:{row.get('id', lineno)}"
            if item_id in seen:
                raise BadRow(RejectKind.MALFORMED, f"duplicate id {item_id!r}")
        except BadRow as e:
            skipped.append(Skipped(where, e.kind.value, e.reason))
            continue
        seen.add(item_id)
        items.append(_GroundingItem(item_id, where, path, size, instruction, box))
    return items, skipped



class GroundingSource(ListedItems):
    """Single-step grounding prompts from a grounding file (see the module docstring).

    Args:
        path: a ScreenSpot / -v2 / -Pro JSON file or folder, or a ``.jsonl`` file in our format.
        preset: the model preset (or a model id / family name) whose prompt and resizing ``agent run`` uses.
        image_dir: where the images are (default: found next to the file).
        language: ScreenSpot-Pro's instruction language ("en" or "cn").
    """

    def __init__(self, path: str | Path, *, preset: ModelPreset | str = GROUNDING_FAMILY,
                 image_dir: str | Path | None = None, language: str = "en") -> None:
        self.path = Path(path)
        self.preset = resolve_preset(preset)
        self.name = f"grounding:{self.path.name}"
        img_dir = Path(image_dir) if image_dir is not None else None
        if self.path.suffix == ".jsonl":
            if not self.path.is_file():
                raise PromptSourceError(f"grounding file {self.path} does not exist")
            self._items, self.skipped = _load_jsonl(self.path, img_dir)
        else:
            dataset = load_grounding(self.path, image_dir=img_dir, language=language)
            self.skipped = [Skipped(f"{r.file}:{r.index}", r.kind.value, r.reason) for r in dataset.report.rejected]
            self._items = [_GroundingItem(s.id, s.id, s.image_path, s.image_size, s.instruction,
                                          None if s.negative else s.box) for s in dataset.samples]
        for s in self.skipped:
            log.warning("skipping grounding row %s", s)
        if not self._items:
            shown = "; ".join(str(s) for s in self.skipped[:5]) or "the file holds no rows"
            raise PromptSourceError(f"no usable row in {self.path} ({len(self.skipped)} skipped: {shown})")

    def grounding_samples(self) -> list[GroundingSample]:
        """The usable rows as ``envs.grounding.GroundingSample``s (for ``agent data show``, which draws them)."""
        return [GroundingSample(item.id, item.image_path, item.frame_size, item.instruction, item.box, "", "",
                                "", negative=item.box is None, source="jsonl")
                for item in self._items]

    def prompt(self, index: int) -> RolloutPrompt:
        item = self._items[index]
        try:
            frame = read_rgb(item.image_path)
        except EnvError as e:
            raise BadItem(f"{item.where}: {e}") from None
        if (frame.shape[1], frame.shape[0]) != item.frame_size:
            raise BadItem(f"{item.where}: image is {frame.shape[1]}x{frame.shape[0]}, was {item.frame_size} at load")
        messages, image, space = build_prompt(self.preset, item.instruction, frame)
        action = "click" if item.box is not None else "impossible"
        target = make_target(self.preset, space, item.instruction, item.box, action=action)
        return RolloutPrompt(messages, image, item.frame_size, target,
                             {"id": item.id, "source": "grounding", "file": str(self.path), "where": item.where})

    def close(self) -> None:
        pass

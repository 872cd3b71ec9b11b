"""What a training prompt is: the ``Target`` a reward scores against, the ``PromptSource`` protocol every source
implements, and prompts built exactly as ``agent run`` builds a model's input.

Every source yields ``RolloutPrompt``s made by ``build_prompt``: the preset's ``ModelSpace`` for the frame, the
frame resized to the model-input size (``policy.model.resize_for_model``) and the family's own prompt builder
(``policy.formats``), with the image part left bare (``{"type": "image"}``).

``prompt.target`` is a ``Target`` dict in the model's coordinate space (model-input pixels for absolute-coordinate
families, the 0-1000 grid for relative ones), made by ``make_target``:

    instruction  the task text
    box          (x1, y1, x2, y2) of the target, or None on a negative sample (the target is not on screen)
    point        a ground-truth point (the centre of the box, or the recorded action's point), or None
    action       the GUI-R1 action name of the ground truth: click, type, scroll, impossible, ...
    text         the ground-truth input text (typed text, scroll direction, app name), or None
    negative     True when the target is absent
    think        whether the preset's prompt asks for a think block (``ModelFormat.thinks``: GUI-R1 and InfiGUI-G1's
                 think variant)
    coord_size   (w, h) of the model's coordinate space (the distance reward's diagonal)
    family       the preset's model family, whose prompt this is
    answer_form  what its answers look like (``ModelFormat.answer_form``), which a reward checks it can read
    answer       (recorded steps only) the recorded action written in the family's output format, what SFT teaches
                 (``train.data.answers``)

``prompt.origin`` has a stable ``"id"`` (what the curriculum tracks) and ``"source"``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict

import numpy as np

from devices.base import Box
from policy.base import HistoryEntry
from policy.coords import ModelSpace
from policy.formats import AnswerForm, get_format
from policy.model import resize_for_model
from policy.presets import ModelPreset, preset_for
from train.samples import RolloutPrompt

__all__ = ["ListedItems", "PromptSource", "Skipped", "Target", "build_prompt", "make_target", "resolve_preset",
           "skip_counts", "think_enabled"]


class Target(TypedDict, total=False):
    """What the reward adapter scores against (the fields are in the module docstring)."""

    instruction: str
    box: tuple[float, float, float, float] | None
    point: tuple[float, float] | None
    action: str
    text: str | None
    negative: bool
    think: bool
    coord_size: tuple[float, float]
    family: str
    answer_form: AnswerForm
    answer: str


@dataclass(frozen=True, slots=True)
class Skipped:
    """An item a source left out: where (``file:index`` or a step id), the kind of problem, and why."""

    where: str
    kind: str
    reason: str

    def __str__(self) -> str:
        return f"{self.where}: {self.kind}: {self.reason}"


class PromptSource(Protocol):
    """A finite, indexable set of prompt items (``GroundingSource``, ``GeneratedSource``, ``TrajectorySource``,
    ``ConcatSource``, ``Subset``)."""

    name: str
    skipped: list[Skipped]

    def __len__(self) -> int: ...

    def item_id(self, index: int) -> str:
        """The stable id of item ``index`` (cheap: nothing is read or rendered)."""
        ...

    def prompt(self, index: int) -> RolloutPrompt:
        """The prompt of item ``index``; ``BadItem`` when it cannot be made."""
        ...


def skip_counts(skipped: Iterable[Skipped]) -> dict[str, int]:
    """Skipped items per kind."""
    return dict(Counter(s.kind for s in skipped))


class ListedItems:
    """A source whose items are listed up front in ``self._items`` (each with an ``id``)."""

    _items: list[Any]

    def __len__(self) -> int:
        return len(self._items)

    def item_id(self, index: int) -> str:
        return self._items[index].id


# -- building prompts as `agent run` does ---------------------------------------------------------------------------


def resolve_preset(preset: ModelPreset | str) -> ModelPreset:
    """A preset, or the preset of a model id / family name."""
    return preset if isinstance(preset, ModelPreset) else preset_for(preset)


def _bare_images(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The current screenshot's part as a bare ``{"type": "image"}``; earlier screenshots' parts dropped (a
    training prompt carries one image, as ``ModelPolicy`` does when it no longer keeps past frames)."""
    out, images = [], 0
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            parts = []
            for part in content:
                if part.get("type") != "image":
                    parts.append(part)
                elif part.get("image") == "current":
                    parts.append({"type": "image"})
                    images += 1
            m = {**m, "content": parts}
        out.append(m)
    if images != 1:
        raise ValueError(f"a training prompt needs exactly one current-screen image part, the format built {images}")
    return out


def build_prompt(preset: ModelPreset, instruction: str, frame: np.ndarray, *,
                 history: Sequence[HistoryEntry] = ()) -> tuple[list[dict[str, Any]], np.ndarray, ModelSpace]:
    """(messages with a bare image part, the model-input image, the model space) for one frame: the preset's
    space, ``resize_for_model`` and the family's ``build_prompt``, as ``ModelPolicy.request`` does."""
    frame_size = (int(frame.shape[1]), int(frame.shape[0]))
    space = preset.space(frame_size)
    built = get_format(preset.family).build_prompt(instruction, list(history), space, preset)
    return _bare_images(built.messages), resize_for_model(frame, space.input_size), space


def think_enabled(preset: ModelPreset) -> bool:
    """Whether the preset's prompt asks for a think block (its format says: ``ModelFormat.thinks``)."""
    return get_format(preset.family).thinks(preset)


def _scaled_box(box: Box | tuple[float, float, float, float], space: ModelSpace) -> tuple[float, float, float, float]:
    sx, sy = space.extent
    x1, y1, x2, y2 = box.as_list() if isinstance(box, Box) else box
    return (x1 * sx, y1 * sy, x2 * sx, y2 * sy)


def make_target(preset: ModelPreset, space: ModelSpace, instruction: str,
                norm_box: Box | tuple[float, float, float, float] | None, *, action: str,
                point: tuple[float, float] | None = None, text: str | None = None) -> Target:
    """A Target from a normalized frame box (None: negative) and, optionally, a normalized point."""
    box = _scaled_box(norm_box, space) if norm_box is not None else None
    sx, sy = space.extent
    if point is not None:
        model_point: tuple[float, float] | None = (point[0] * sx, point[1] * sy)
    elif box is not None:
        model_point = ((box[0] + box[2]) / 2, (box[1] + box[3]) / 2)
    else:
        model_point = None
    return Target(instruction=instruction, box=box, point=model_point, action=action, text=text,
                  negative=norm_box is None and action == "impossible", think=think_enabled(preset),
                  coord_size=(sx, sy), family=preset.family,
                  answer_form=get_format(preset.family).answer_form(preset))

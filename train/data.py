"""Prompt sources for RL (and SFT): grounding files, generated screens, recorded trajectories; a resumable sampler;
and the reward adapter that scores a response against its prompt's target.

Every source yields ``RolloutPrompt``s built exactly as ``agent run`` builds a model's input: the preset's
``ModelSpace`` for the frame, the frame resized to the model-input size (``policy.model.resize_for_model``) and the
family's own prompt builder (``policy.formats``), with the image part left bare (``{"type": "image"}``).

``prompt.target`` is a ``Target`` dict in the model's coordinate space (model-input pixels for absolute-coordinate
families, the 0-1000 grid for relative ones):

    instruction  the task text
    box          (x1, y1, x2, y2) of the target, or None on a negative sample (the target is not on screen)
    point        a ground-truth point (the centre of the box, or the recorded action's point), or None
    action       the GUI-R1 action name of the ground truth: click, type, scroll, impossible, ...
    text         the ground-truth input text (typed text, scroll direction, app name), or None
    negative     True when the target is absent
    think        whether the preset's prompt asks for a think block (InfiGUI-G1's no_think variant: False)
    coord_size   (w, h) of the model's coordinate space (the distance reward's diagonal)
    family       the preset's model family, whose prompt this is

``prompt.origin`` has a stable ``"id"`` (what the curriculum tracks) and ``"source"``.

Sources
-------
``GroundingSource(path, preset=...)`` reads ScreenSpot / -v2 / -Pro files (``envs.grounding.load_grounding``) or
our own JSONL, one object a line::

    {"image": "shots/0001.png", "instruction": "open settings", "box": [x1, y1, x2, y2], "box_space": "pixels"}
    {"image": "shots/0002.png", "instruction": "click the red logo", "negative": true}

``image`` is relative to ``image_dir`` (default: the JSONL's folder) or absolute; ``box`` is the target's corners,
``box_space`` "pixels" (default; the image's own pixels) or "normalized" (fractions of its width and height);
``"negative": true`` means the target is not on the screen (no box); an optional ``"id"`` names the row (default:
its line number). Rows that cannot be used (malformed, bad box: not four numbers, x2 <= x1 or y2 <= y1, outside
the image; missing or unreadable image) are skipped, counted and named (``file:line: kind: reason``) in
``source.skipped``; a file with no usable row is a ``PromptSourceError``.

``GeneratedSource(seeds, params)`` renders generated screens (``envs.generated``) in Chromium, one per seed, on a
private event loop in a background thread, so the trainer calls it synchronously, and code inside an event loop
can call it too (it blocks; ``asyncio.to_thread`` keeps that loop free). The browser starts on the first prompt;
``close()`` (or leaving a ``with`` block) stops it.

``TrajectorySource(run_dir, preset="gui-r1")`` turns recorded steps with a target box into step samples: the
family's prompt with the episode's task and the steps before it as history, the ground truth being the recorded
action (its GUI-R1 name, box, point and text). Only steps of successful episodes (or of human demonstrations that
were not aborted) count by default; every step left out is counted with its reason.

Sampling and rewards
--------------------
``PromptSampler(source, seed)`` walks a seeded shuffle per epoch; ``state_dict()`` / ``load_state_dict()`` resume it
where a checkpoint left it. An item that fails when its prompt is built (an image that no longer reads) is skipped,
counted, and not tried again.

``reward_fn(name, ...)`` returns a ``RewardAdapter``, the ``reward_fn(prompt, text)`` of ``rollout_groups``: it calls
``train.rewards``' function with the prompt's target and adds the part ``"correct"`` (see ``train.curriculum``). A
reward function that raises never stops training: the adapter logs each distinct message once, counts it, and
returns ``RewardResult(0.0, {"reward_failed": 1.0}, {"reward_failed": "<type>: <message>"})``;
``train.curriculum.is_failed`` recognises it and the filters leave such samples out.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import math
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypedDict

import numpy as np

from devices.actions import Action, ActionKind
from devices.base import Box
from devices.errors import DeviceError, InvalidAction
from envs.errors import EnvError, RecordFormatError
from envs.grounding import RejectKind, image_size, load_grounding, read_rgb
from envs.records import Actor, Outcome, StepRecord
from envs.trajectory import Episode, read_episode
from policy.base import HistoryEntry
from policy.coords import ModelSpace
from policy.formats import get_format
from policy.formats.guir1 import KEY_ACTIONS, PLAIN, POINTED
from policy.model import resize_for_model
from policy.presets import ModelPreset, preset_for
from train.errors import BadItem, BadRow, PromptSourceError
from train.curriculum import CORRECT_PART, FAILED_PART, ThresholdSchedule
from train.samples import RolloutPrompt
from train.reward_registry import get_reward
from train.rewards import RewardResult

log = logging.getLogger(__name__)

__all__ = [
    "BadItem", "ConcatSource", "GeneratedSource", "GroundingSource", "PromptSampler", "PromptSource",
    "PromptSourceError", "RewardAdapter", "Skipped", "Target", "TrajectorySource", "build_prompt",
    "guir1_ground_truth", "reward_fn", "skip_counts",
]


class Target(TypedDict, total=False):
    """What the reward adapter scores against (see the module docstring)."""

    instruction: str
    box: tuple[float, float, float, float] | None
    point: tuple[float, float] | None
    action: str
    text: str | None
    negative: bool
    think: bool
    coord_size: tuple[float, float]
    family: str


@dataclass(frozen=True, slots=True)
class Skipped:
    """An item a source left out: where (``file:index`` or a step id), the kind of problem, and why."""

    where: str
    kind: str
    reason: str

    def __str__(self) -> str:
        return f"{self.where}: {self.kind}: {self.reason}"


class PromptSource(Protocol):
    """A finite, indexable set of prompt items."""

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


# -- building prompts as `agent run` does ---------------------------------------------------------------------------


def _resolve_preset(preset: ModelPreset | str) -> ModelPreset:
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


def _think(preset: ModelPreset) -> bool:
    return not (preset.family == "infigui-g1" and preset.variant == "no_think")


def _scaled_box(box: Box | tuple[float, float, float, float], space: ModelSpace) -> tuple[float, float, float, float]:
    sx, sy = space.extent
    x1, y1, x2, y2 = box.as_list() if isinstance(box, Box) else box
    return (x1 * sx, y1 * sy, x2 * sx, y2 * sy)


def _target(preset: ModelPreset, space: ModelSpace, instruction: str,
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
                  negative=norm_box is None and action == "impossible", think=_think(preset), coord_size=(sx, sy),
                  family=preset.family)


# -- grounding files ------------------------------------------------------------------------------------------------


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
    path = Path(name)
    path = path if path.is_absolute() else root / path
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
        lines = file.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise PromptSourceError(f"grounding file {file} cannot be read: {e}") from e
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{file}:{lineno}"
        try:
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise BadRow(RejectKind.MALFORMED, f"not JSON: {e.msg}") from None
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


class _ListedItems:
    """A source whose items are listed up front in ``self._items`` (each with an ``id``)."""

    _items: list[Any]

    def __len__(self) -> int:
        return len(self._items)

    def item_id(self, index: int) -> str:
        return self._items[index].id


class GroundingSource(_ListedItems):
    """Single-step grounding prompts from a grounding file (see the module docstring).

    Args:
        path: a ScreenSpot / -v2 / -Pro JSON file or folder, or a ``.jsonl`` file in our format.
        preset: the model preset (or a model id / family name) whose prompt and resizing ``agent run`` uses.
        image_dir: where the images are (default: found next to the file).
        language: ScreenSpot-Pro's instruction language ("en" or "cn").
    """

    def __init__(self, path: str | Path, *, preset: ModelPreset | str = "infigui-g1",
                 image_dir: str | Path | None = None, language: str = "en") -> None:
        self.path = Path(path)
        self.preset = _resolve_preset(preset)
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
        target = _target(self.preset, space, item.instruction, item.box, action=action)
        return RolloutPrompt(messages, image, item.frame_size, target,
                             {"id": item.id, "source": "grounding", "file": str(self.path), "where": item.where})

    def close(self) -> None:
        pass


# -- generated screens ----------------------------------------------------------------------------------------------


class _BackgroundLoop:
    """An event loop on its own thread. Playwright objects belong to the loop that made them, so one private loop
    drives the browser whoever calls: synchronous code (the trainer) or a thread of code that has its own loop."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.lock = threading.Lock()

    def run(self, coro: Any, timeout: float) -> Any:
        """Run ``coro`` on the loop and wait for it; hold ``lock`` around calls that must not interleave."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, name=self.name, daemon=True)
            self._thread.start()
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"{self.name}: no result after {timeout:g} s") from None

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop.close()
        self._loop = self._thread = None


class GeneratedSource:
    """Prompts from generated screens rendered live in Chromium (see the module docstring).

    The ground truth is the first step of the task's plan: click tasks click the named widget; form tasks start by
    typing into the first field (action "type" with its text); absent-target tasks are negative samples (no box,
    action "impossible").

    Args:
        seeds: one screen per seed (``range(1000)``, a list).
        params: ``envs.generated.ScreenParams`` or a mapping of its fields (task_kind, difficulty, language, theme,
            form_factor); default: a medium English click task on a desktop screen.
        preset: the model preset (or id / family name) whose prompt and resizing ``agent run`` uses.
        timeout_s: the longest one screen may take to render.
    """

    def __init__(self, seeds: Iterable[int], params: Any = None, *, preset: ModelPreset | str = "infigui-g1",
                 timeout_s: float = 60.0) -> None:
        from envs.generated.layout import ScreenParams

        self.seeds = [int(s) for s in seeds]
        if not self.seeds:
            raise PromptSourceError("GeneratedSource needs at least one seed")
        if len(set(self.seeds)) != len(self.seeds):
            raise PromptSourceError("GeneratedSource seeds must be distinct (each seed is one screen and one id)")
        if params is None:
            params = ScreenParams()
        elif isinstance(params, Mapping):
            params = ScreenParams(**params)
        self.params = params
        self.preset = _resolve_preset(preset)
        self.timeout_s = timeout_s
        p = params
        self.key = f"{p.task_kind.value}-{p.difficulty}-{p.language}-{p.theme}-{p.form_factor}"
        self.name = f"generated:{self.key}"
        self.skipped: list[Skipped] = []
        self.rendered = 0
        self._loop = _BackgroundLoop(f"handeye-{self.name}")
        self._env: Any = None

    def __len__(self) -> int:
        return len(self.seeds)

    def item_id(self, index: int) -> str:
        return f"generated/{self.key}:{self.seeds[index]}"

    async def _render(self, seed: int) -> tuple[Any, Any]:
        if self._env is None:
            from envs.generated import GeneratedEnv

            p = self.params
            self._env = GeneratedEnv(p.task_kind.value, p.difficulty, p.language, p.theme, p.form_factor)
        obs, _ = await self._env.reset(seed=seed)
        return obs, self._env.screen

    def prompt(self, index: int) -> RolloutPrompt:
        from envs.generated.layout import TaskKind

        seed = self.seeds[index]
        with self._loop.lock:
            try:
                obs, screen = self._loop.run(self._render(seed), self.timeout_s)
            except (EnvError, DeviceError, TimeoutError) as e:
                if self.rendered == 0:  # the browser never worked: a set-up problem, not a bad item
                    raise PromptSourceError(f"{self.name}: Chromium could not render a screen: "
                                            f"{type(e).__name__}: {e}") from e
                raise BadItem(f"{self.item_id(index)}: {type(e).__name__}: {e}") from None
            self.rendered += 1
        task = screen.task
        messages, image, space = build_prompt(self.preset, task.instruction, obs.frame)
        if task.kind is TaskKind.ABSENT:
            target = _target(self.preset, space, task.instruction, None, action="impossible")
        else:
            step = task.plan[0]
            action = "type" if step.kind == "type" else "click"
            target = _target(self.preset, space, task.instruction, screen.norm_box(step.widget_id), action=action,
                             text=step.text if action == "type" else None)
        origin = {"id": self.item_id(index), "source": "generated", "env": self.key, "seed": seed,
                  "task_kind": task.kind.value}
        return RolloutPrompt(messages, image, obs.size, target, origin)

    def close(self) -> None:
        """Close the browser and stop the background loop (a later prompt starts them again)."""
        with self._loop.lock:
            if self._env is not None:
                try:
                    self._loop.run(self._env.close(), self.timeout_s)
                except (EnvError, DeviceError, TimeoutError) as e:
                    log.warning("%s: closing the browser failed: %s", self.name, e)
                self._env = None
            self._loop.stop()

    def __enter__(self) -> GeneratedSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- trajectories ---------------------------------------------------------------------------------------------------

_KIND_TO_GUIR1 = {kind: name for name, kind in {**POINTED, **PLAIN}.items()}
_KEY_TO_GUIR1 = {key: name for name, key in KEY_ACTIONS.items() if name not in ("press_enter",)}


def guir1_ground_truth(action: Action) -> tuple[str, str | None] | None:
    """(GUI-R1 action name, ground-truth text) of a unified action; None when GUI-R1 has no such action (drag,
    open_url). Text: typed text, app name, scroll direction, hotkey keys; None for the others."""
    kind = action.kind
    if kind in _KIND_TO_GUIR1:
        return _KIND_TO_GUIR1[kind], None
    if kind is ActionKind.TYPE:
        return "type", action.text
    if kind is ActionKind.OPEN_APP:
        return "open_app", action.text
    if kind is ActionKind.SCROLL:
        return "scroll", action.direction.value if action.direction else None
    if kind is ActionKind.INFEASIBLE:
        return "impossible", None
    if kind is ActionKind.KEY:
        key = action.keys[0]
        if key == "Escape":
            return "close/delete", None
        if key in _KEY_TO_GUIR1:
            return _KEY_TO_GUIR1[key], None
        return "hotkey", key.lower()
    if kind is ActionKind.HOTKEY:
        return "hotkey", " ".join(k.lower() for k in action.keys)
    return None


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


class TrajectorySource(_ListedItems):
    """GUI-R1-style step prompts from recorded trajectories (see the module docstring).

    Args:
        run_dir: a run folder (``runs/<run_id>``) or a folder of them.
        preset: the model preset (or id / family name) whose prompt ``agent run`` uses; GUI-R1 by default.
        only_successful: keep only steps of episodes a checker verified (outcome success) and of human
            demonstrations that ended as claimed or infeasible; False keeps every step with a target box.
    """

    def __init__(self, run_dir: str | Path, *, preset: ModelPreset | str = "gui-r1",
                 only_successful: bool = True) -> None:
        self.run_dir = Path(run_dir)
        if not self.run_dir.is_dir():
            raise PromptSourceError(f"trajectory folder {self.run_dir} does not exist")
        self.preset = _resolve_preset(preset)
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
            reason = self._skip_reason(episode, step, action, usable, outcome)
            if reason is not None:
                self.skipped.append(Skipped(step.step_id, *reason))
            else:
                assert action is not None
                gt = guir1_ground_truth(action)
                assert gt is not None
                self._items.append(_StepItem(step.step_id, episode, step, tuple(history), episode.record.task,
                                             action, gt[0], gt[1]))
            history.append(HistoryEntry(action, step.raw_output, executed=step.executed and action is not None))

    @staticmethod
    def _skip_reason(episode: Episode, step: StepRecord, action: Action | None, usable: bool,
                     outcome: str) -> tuple[str, str] | None:
        if not usable:
            return "episode_outcome", f"episode ended {outcome}, not a verified success"
        if step.target_box is None:
            return "no_target_box", "the step recorded no target box"
        if action is None:
            return "no_action", "the step has no valid action"
        if guir1_ground_truth(action) is None:
            return "no_guir1_action", f"GUI-R1 has no action for {action.kind.value}"
        if step.sensitive:
            return "sensitive", "typed text went into a password field and is masked"
        if not (episode.path / step.frame_path).is_file():
            return "missing_frame", f"frame {episode.path / step.frame_path} does not exist"
        return None

    def prompt(self, index: int) -> RolloutPrompt:
        item = self._items[index]
        try:
            frame = item.episode.frame(item.step)
        except (RecordFormatError, ValueError) as e:
            raise BadItem(f"{item.id}: {e}") from None
        messages, image, space = build_prompt(self.preset, item.instruction, frame, history=item.history)
        point = item.action.point.as_list() if item.action.point is not None else None
        target = _target(self.preset, space, item.instruction, item.step.target_box, action=item.gt_action,
                         point=(point[0], point[1]) if point else None, text=item.gt_text)
        rec = item.episode.record
        origin = {"id": item.id, "source": "trajectory", "run": rec.run_id, "episode": rec.episode_id,
                  "step": item.step.index, "task": rec.task}
        return RolloutPrompt(messages, image, (int(frame.shape[1]), int(frame.shape[0])), target, origin)

    def close(self) -> None:
        pass


# -- several sources ------------------------------------------------------------------------------------------------


class ConcatSource:
    """Several sources as one, in order; ids must be distinct across them."""

    def __init__(self, sources: Sequence[PromptSource]) -> None:
        if not sources:
            raise PromptSourceError("ConcatSource needs at least one source")
        self.sources = list(sources)
        self.name = "+".join(s.name for s in self.sources)
        self._offsets = np.cumsum([0] + [len(s) for s in self.sources])
        ids = [s.item_id(i) for s in self.sources for i in range(len(s))]
        dup = [i for i, n in Counter(ids).items() if n > 1]
        if dup:
            raise PromptSourceError(f"sources share item ids ({dup[:3]}); ids must be distinct across sources")

    @property
    def skipped(self) -> list[Skipped]:
        return [k for s in self.sources for k in s.skipped]

    def __len__(self) -> int:
        return int(self._offsets[-1])

    def _locate(self, index: int) -> tuple[PromptSource, int]:
        if not 0 <= index < len(self):
            raise IndexError(index)
        k = int(np.searchsorted(self._offsets, index, side="right")) - 1
        return self.sources[k], index - int(self._offsets[k])

    def item_id(self, index: int) -> str:
        source, i = self._locate(index)
        return source.item_id(i)

    def prompt(self, index: int) -> RolloutPrompt:
        source, i = self._locate(index)
        return source.prompt(i)

    def close(self) -> None:
        for s in self.sources:
            close = getattr(s, "close", None)
            if close is not None:
                close()


# -- sampling -------------------------------------------------------------------------------------------------------

SAMPLER_STATE_VERSION = 1


class PromptSampler:
    """Endless prompts from a source: a seeded permutation per epoch (``shuffle``) walked in order.

    ``state_dict()`` holds the seed, epoch, position and the items found bad; ``load_state_dict()`` resumes
    exactly there (the same source, by name and length, is required).
    """

    def __init__(self, source: PromptSource, *, seed: int = 0, shuffle: bool = True) -> None:
        if len(source) == 0:
            raise PromptSourceError(f"source {source.name} is empty")
        self.source = source
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 0
        self.position = 0
        self.skipped: list[Skipped] = []
        self._bad: set[int] = set()
        self._order_epoch = -1
        self._order = np.arange(0)
        self._index_of: dict[str, int] | None = None

    def _epoch_order(self) -> np.ndarray:
        if self._order_epoch != self.epoch:
            n = len(self.source)
            self._order = (np.random.default_rng([self.seed, self.epoch]).permutation(n) if self.shuffle
                           else np.arange(n))
            self._order_epoch = self.epoch
        return self._order

    def _make(self, index: int) -> RolloutPrompt | None:
        try:
            return self.source.prompt(index)
        except BadItem as e:
            self._bad.add(index)
            self.skipped.append(Skipped(self.source.item_id(index), "bad_item", str(e)))
            log.warning("skipping prompt item %s", e)
            return None

    def next_prompts(self, n: int) -> list[RolloutPrompt]:
        """The next ``n`` prompts of the stream (crossing into the next epoch as needed)."""
        out: list[RolloutPrompt] = []
        while len(out) < n:
            if len(self._bad) >= len(self.source):
                shown = "; ".join(s.reason for s in self.skipped[:3])
                raise PromptSourceError(f"every item of {self.source.name} failed to make a prompt: {shown}")
            if self.position >= len(self.source):
                self.epoch += 1
                self.position = 0
            index = int(self._epoch_order()[self.position])
            self.position += 1
            if index not in self._bad and (prompt := self._make(index)) is not None:
                out.append(prompt)
        return out

    def prompts_for(self, ids: Sequence[str]) -> list[RolloutPrompt]:
        """Prompts of the items with these ids, in order; ids the source does not have (or bad items) are left out.
        The stream's position does not move."""
        if self._index_of is None:
            self._index_of = {self.source.item_id(i): i for i in range(len(self.source))}
        out = []
        for item_id in ids:
            index = self._index_of.get(item_id)
            if index is not None and index not in self._bad and (prompt := self._make(index)) is not None:
                out.append(prompt)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"version": SAMPLER_STATE_VERSION, "source": self.source.name, "size": len(self.source),
                "seed": self.seed, "shuffle": self.shuffle, "epoch": self.epoch, "position": self.position,
                "bad": sorted(self._bad)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("version") != SAMPLER_STATE_VERSION:
            raise PromptSourceError(f"sampler state version {state.get('version')!r}; "
                                    f"this handeye reads {SAMPLER_STATE_VERSION}")
        if state["source"] != self.source.name or state["size"] != len(self.source):
            raise PromptSourceError(
                f"the checkpoint's data position is for {state['source']} with {state['size']} items, but the "
                f"source is {self.source.name} with {len(self.source)}; resume with the same data, or start the "
                f"sampler afresh")
        self.seed, self.shuffle = int(state["seed"]), bool(state["shuffle"])
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._bad = {int(i) for i in state["bad"]}
        self._order_epoch = -1


# -- the reward adapter ---------------------------------------------------------------------------------------------


class RewardAdapter:
    """``reward(prompt, text) -> RewardResult``: one of ``train.rewards``' functions applied to ``prompt.target``,
    plus the part ``"correct"``; a reward that raises gives a failed result (see the module docstring).

    ``step`` is the training step the trainer last set (``set_step``); the distance reward reads its threshold
    from ``schedule(step)`` when a schedule is given.
    """

    def __init__(self, name: str, *, think: bool | None = None, threshold: float | None = None,
                 schedule: ThresholdSchedule | None = None) -> None:
        self.spec = get_reward(name)
        if self.spec.needs_threshold and threshold is None and schedule is None:
            raise ValueError(f"the {name} reward needs threshold=... or schedule=ThresholdSchedule(...)")
        if not self.spec.needs_threshold and (threshold is not None or schedule is not None):
            raise ValueError(f"threshold and schedule apply to the distance reward only, not {name!r}")
        self.name = name
        self.think = think
        self.fixed_threshold = threshold
        self.schedule = schedule
        self.step = 0
        self.calls = 0
        self.failures = 0
        self._logged: set[str] = set()

    def set_step(self, step: int) -> None:
        self.step = int(step)

    def threshold(self) -> float:
        """The distance reward's threshold now: the schedule's value at ``step``, else the fixed one."""
        if self.schedule is not None:
            return self.schedule(self.step)
        assert self.fixed_threshold is not None
        return self.fixed_threshold

    def think_for(self, target: Mapping[str, Any]) -> bool:
        """The think-gate flag: the adapter's option, else the target's (from the preset), else True."""
        return self.think if self.think is not None else bool(target.get("think", True))

    def __call__(self, prompt: RolloutPrompt, text: str) -> RewardResult:
        self.calls += 1
        try:
            target = prompt.target
            if not isinstance(target, Mapping):
                raise TypeError(f"prompt.target must be a Target dict, got {type(target).__name__}")
            if self.spec.reads_point_list and target.get("family", "infigui-g1") != "infigui-g1":
                self._log_once(f"reward {self.name!r} reads InfiGUI-G1 point lists, but the prompt is "
                               f"{target.get('family')!r}'s")
            threshold = self.threshold() if self.spec.needs_threshold else None
            result = self.spec.score(target, text, think=self.think_for(target), threshold=threshold)
            correct = self.spec.correct(result)
        except Exception as e:  # noqa: BLE001 - a broken reward must not stop training (module docstring)
            self.failures += 1
            message = f"{type(e).__name__}: {e}"
            self._log_once(f"reward {self.name!r} failed on prompt {getattr(prompt, 'origin', {}).get('id')!r}: "
                           f"{message}", key=message)
            return RewardResult(0.0, {FAILED_PART: 1.0}, {FAILED_PART: message})
        return RewardResult(result.total, {**result.parts, CORRECT_PART: float(correct)}, result.info)

    def _log_once(self, message: str, key: str | None = None) -> None:
        key = key or message
        if key not in self._logged:
            self._logged.add(key)
            log.warning("%s", message)

    def metrics(self, prefix: str = "rollout/reward") -> dict[str, float]:
        out = {f"{prefix}/calls": float(self.calls), f"{prefix}/failures": float(self.failures)}
        if self.spec.needs_threshold:
            out[f"{prefix}/threshold"] = self.threshold()
        return out


def reward_fn(name: str, *, think: bool | None = None, no_think: bool | None = None,
              preset: ModelPreset | str | None = None, threshold: float | None = None,
              schedule: ThresholdSchedule | None = None) -> RewardAdapter:
    """The reward adapter for ``name`` (aepo, aepo_paper, aepo_no_collinear, guir1, guir1_paper, distance).

    The think gate (AEPO and distance) follows, first, ``think`` / ``no_think``; then ``preset`` (InfiGUI-G1's
    no_think variant turns it off); then each prompt's target. ``threshold`` (fixed) or ``schedule`` (per step) is
    the distance reward's.
    """
    if think is not None and no_think is not None and think == no_think:
        raise ValueError(f"think={think} and no_think={no_think} contradict each other; pass one of them")
    flag = think if think is not None else (not no_think if no_think is not None else None)
    if flag is None and preset is not None:
        flag = _think(_resolve_preset(preset))
    return RewardAdapter(name, think=flag, threshold=threshold, schedule=schedule)

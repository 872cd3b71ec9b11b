"""Training samples (docs/design.md, "Trajectories and training samples"): one response to one prompt, with
what the learner needs.

A ``TrainSample`` holds the prompt (chat messages whose image part is a bare ``{"type": "image"}`` placeholder,
plus the image itself: a path or an RGB uint8 array already at the model-input size), the frame and model-input
sizes, the response text and token ids, the behaviour policy's per-token logprobs (None when the backend gives
none), the scalar reward and its parts, the group id, the adapter version that produced it and its origin (env,
task, episode, step).

On disk samples are JSONL, one sample a line, images referenced by path (arrays are saved next to the file as
``.npy`` when written). A bad row (malformed JSON, missing fields, an image file that is not there) is counted and
skipped with a warning naming the file and line, never fatal.

``iter_groups`` turns a stream of samples into groups (all samples of one group id), yielding each group as soon as
it is complete, so an online learner can consume an endless stream.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from devices.files import MAX_IMAGE_PIXELS

log = logging.getLogger(__name__)

__all__ = ["ReadStats", "RolloutPrompt", "TrainSample", "iter_groups", "load_image", "messages_with_image", "read_jsonl",
           "write_jsonl"]

SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class TrainSample:
    """One response to one prompt, scored (see the module docstring)."""

    messages: list[dict[str, Any]]
    """Chat messages; the image part is ``{"type": "image"}`` without the pixels (they are in ``image``)."""
    image: str | np.ndarray | None
    """Path to the model-input image (``.npy`` or any PIL-readable file), or the RGB uint8 array itself."""
    frame_size: tuple[int, int]
    """(W, H) of the screen frame the image was resized from."""
    input_size: tuple[int, int]
    """(w', h') of the image the model sees."""
    response_text: str
    response_ids: tuple[int, ...]
    behaviour_logprobs: tuple[float, ...] | None
    """Per-token logprobs of ``response_ids`` under the policy that sampled them, or None."""
    reward: float
    reward_parts: dict[str, float] = field(default_factory=dict)
    group_id: int = 0
    adapter_version: str | None = None
    origin: dict[str, Any] = field(default_factory=dict)
    """Where it came from: env, task, episode, step, ..."""
    id: str | None = None
    """Optional unique id (the learner can drop duplicates by it)."""

    def __post_init__(self) -> None:
        if not self.response_ids:
            raise ValueError("a training sample needs at least one response token id")
        if self.behaviour_logprobs is not None and len(self.behaviour_logprobs) != len(self.response_ids):
            raise ValueError(f"behaviour_logprobs has {len(self.behaviour_logprobs)} entries for "
                             f"{len(self.response_ids)} response tokens")

    def image_array(self) -> np.ndarray | None:
        """The model-input image as an RGB uint8 array (loaded from disk when a path)."""
        return load_image(self.image) if isinstance(self.image, str) else self.image

    def messages_with_image(self) -> list[dict[str, Any]]:
        """``messages`` with the image array put into the first image part (what a backend request takes)."""
        return messages_with_image(self.messages, self.image_array())

    def to_json(self, image_path: str | None = None) -> dict[str, Any]:
        """A JSON-ready dict; the image must be a path (pass ``image_path`` when it is an array)."""
        image = image_path if image_path is not None else self.image
        if image is not None and not isinstance(image, str):
            raise ValueError("an image array cannot go into JSON: save it and pass image_path")
        return {
            "v": SCHEMA_VERSION, "id": self.id, "messages": _strip_images(self.messages), "image": image,
            "frame_size": list(self.frame_size), "input_size": list(self.input_size),
            "response_text": self.response_text, "response_ids": list(self.response_ids),
            "behaviour_logprobs": None if self.behaviour_logprobs is None else list(self.behaviour_logprobs),
            "reward": self.reward, "reward_parts": dict(self.reward_parts), "group_id": self.group_id,
            "adapter_version": self.adapter_version, "origin": dict(self.origin),
        }

    @classmethod
    def from_json(cls, row: dict[str, Any], base_dir: Path | None = None) -> TrainSample:
        """Inverse of ``to_json``; a relative image path is taken relative to ``base_dir``. Raises ValueError
        (or KeyError / TypeError) on a malformed row and FileNotFoundError on a missing image."""
        if not isinstance(row, dict):
            raise ValueError(f"a sample row must be a JSON object, got {type(row).__name__}")
        image = row.get("image")
        if image is not None:
            if not isinstance(image, str):
                raise ValueError("image must be a path string")
            p = Path(image)
            if not p.is_absolute() and base_dir is not None:
                p = base_dir / p
            if not p.is_file():
                raise FileNotFoundError(f"image {p} does not exist")
            image = str(p)
        lps = row.get("behaviour_logprobs")
        return cls(
            messages=list(row["messages"]), image=image,
            frame_size=_pair(row["frame_size"]), input_size=_pair(row["input_size"]),
            response_text=str(row["response_text"]), response_ids=tuple(int(t) for t in row["response_ids"]),
            behaviour_logprobs=None if lps is None else tuple(float(x) for x in lps),
            reward=float(row["reward"]), reward_parts={str(k): float(v) for k, v in (row.get("reward_parts") or {}).items()},
            group_id=int(row["group_id"]), adapter_version=row.get("adapter_version"),
            origin=dict(row.get("origin") or {}), id=row.get("id"),
        )


@dataclass(frozen=True, slots=True)
class RolloutPrompt:
    """One prompt to sample a group for: messages with a bare ``{"type": "image"}`` part, the model-input image,
    the frame size it came from, and whatever the reward function needs (``target``) plus provenance."""

    messages: list[dict[str, Any]]
    image: np.ndarray | None
    frame_size: tuple[int, int]
    target: Any = None
    origin: dict[str, Any] = field(default_factory=dict)


def messages_with_image(messages: list[dict[str, Any]], image: np.ndarray | None) -> list[dict[str, Any]]:
    """``messages`` with ``image`` put into the first ``{"type": "image"}`` part (None: left as is)."""
    out, done = [], image is None
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            parts = []
            for part in content:
                if part.get("type") == "image" and not done:
                    part, done = {"type": "image", "image": image}, True
                parts.append(part)
            m = {**m, "content": parts}
        out.append(m)
    return out


def _pair(v: Any) -> tuple[int, int]:
    if len(v) != 2:
        raise ValueError(f"expected a (w, h) pair, got {v!r}")
    return int(v[0]), int(v[1])


def _strip_images(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            m = {**m, "content": [{"type": "image"} if p.get("type") == "image" else p for p in content]}
        out.append(m)
    return out


def load_image(path: str | Path) -> np.ndarray:
    """An RGB uint8 array from a ``.npy`` file or any image PIL reads; ``ValueError`` when it has more than
    ``devices.files.MAX_IMAGE_PIXELS`` pixels (the ``.npy`` shape and the image's size are read from the header,
    before anything is decoded)."""
    path = Path(path)
    if path.suffix == ".npy":
        array = np.load(path, allow_pickle=False, mmap_mode="r")
        if array.ndim < 2 or array.shape[0] * array.shape[1] > MAX_IMAGE_PIXELS:
            raise ValueError(f"{path}: an array of shape {array.shape} is no image of at most {MAX_IMAGE_PIXELS:,} "
                             "pixels")
        return np.array(array)
    from PIL import Image

    try:
        im = Image.open(path)  # reads the header only
    except Image.DecompressionBombError as e:  # PIL's own bound, twice its MAX_IMAGE_PIXELS
        raise ValueError(f"{path}: {e}") from None
    with im:
        width, height = im.size
        if width * height > MAX_IMAGE_PIXELS:
            raise ValueError(f"{path} declares {width}x{height} pixels, more than {MAX_IMAGE_PIXELS:,} "
                             "(MAX_IMAGE_PIXELS); scale it down first")
        return np.asarray(im.convert("RGB"))


def write_jsonl(path: str | Path, samples: Iterable[TrainSample], *, image_dir: str | Path | None = None,
                append: bool = False) -> int:
    """Write samples as JSONL; array images are saved as ``.npy`` under ``image_dir`` (default: ``<path>.images``)
    and referenced by path relative to the JSONL's folder. Returns the number written."""
    path = Path(path)
    img_dir = Path(image_dir) if image_dir is not None else path.with_name(path.name + ".images")
    count = 0
    start = len(list(img_dir.glob("*.npy"))) if append and img_dir.is_dir() else 0
    with path.open("a" if append else "w", encoding="utf-8") as f:
        for s in samples:
            image_path = None
            if isinstance(s.image, np.ndarray):
                img_dir.mkdir(parents=True, exist_ok=True)
                name = f"{start + count:08d}-g{s.group_id}.npy"
                np.save(img_dir / name, s.image, allow_pickle=False)
                try:
                    image_path = str((img_dir / name).relative_to(path.parent))
                except ValueError:
                    image_path = str((img_dir / name).resolve())
            f.write(json.dumps(s.to_json(image_path), ensure_ascii=False) + "\n")
            count += 1
    return count


@dataclass
class ReadStats:
    """What ``read_jsonl`` saw: rows read into samples, rows skipped and why."""

    read: int = 0
    skipped: int = 0
    reasons: list[str] = field(default_factory=list)


def read_jsonl(path: str | Path, stats: ReadStats | None = None) -> Iterator[TrainSample]:
    """Samples from a JSONL file, lazily. A bad row is skipped with a warning naming ``path:line`` and counted in
    ``stats`` (pass a ``ReadStats`` to see the counts)."""
    path = Path(path)
    stats = stats if stats is not None else ReadStats()
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                sample = TrainSample.from_json(json.loads(line), base_dir=path.parent)
            except (ValueError, KeyError, TypeError, FileNotFoundError) as exc:
                reason = f"{path}:{lineno}: {type(exc).__name__}: {exc}"
                stats.skipped += 1
                stats.reasons.append(reason)
                log.warning("skipping bad training sample row %s", reason)
                continue
            stats.read += 1
            yield sample


def iter_groups(samples: Iterable[TrainSample], group_size: int | None = None) -> Iterator[list[TrainSample]]:
    """Group samples by ``group_id``, yielding each group when complete.

    With ``group_size`` a group is complete as soon as it holds that many samples (stream-friendly: an endless
    stream yields groups as they fill; interleaved groups are fine). Without it, a group is complete when a sample
    of a *different* group id follows (contiguous groups, as one rollout writes them), and the last one at the end
    of the stream. Either way, groups still open when the stream ends are yielded then, in first-seen order.
    """
    if group_size is not None and group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    open_groups: dict[int, list[TrainSample]] = {}
    for s in samples:
        if group_size is None and open_groups and s.group_id not in open_groups:
            yield from open_groups.values()
            open_groups.clear()
        group = open_groups.setdefault(s.group_id, [])
        group.append(s)
        if group_size is not None and len(group) >= group_size:
            yield open_groups.pop(s.group_id)
    yield from open_groups.values()

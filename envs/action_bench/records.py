"""Reading GUI-R1's released action-benchmark files, and the same records as JSONL with an image folder.

Parquet (``androidcontrol_low_test.parquet`` ...; pyarrow, ``pip install 'handeye[data]'``), one row per step with
the columns the released loaders read (``verl/utils/dataset.py``, ``guir1/inference/*.py``):

    image          the screenshot: a struct {bytes, path} (a Hugging Face ``Image`` column), raw bytes, or a path
    instruction    the task (AndroidControl-High: the goal; -Low: the step's own instruction)
    history        the earlier steps as one string ("None" when there are none)
    task_type      "high" or "low"
    gt_action      the true action's name in the benchmark's list
    gt_bbox        [x, y] or [x1, y1, x2, y2]: normalized to [0, 1] in GUI-R1's data, or image pixels
    gt_input_text  the true text ("no input text" when the action takes none)
    group          optional: the platform, which the released scorer counts categories by

JSONL: one object a line with the same fields, ``image`` a path relative to the JSONL's folder (or ``image_dir``).
Every image path (a JSONL's, a Parquet row's ``{"path": ...}``) is confined to that folder (the Parquet file's, a
dataset folder itself): absolute, with ``..``, or leading out through a symlink, it is refused; only regular files
of at most ``MAX_IMAGE_BYTES`` are read, and no image whose header declares more than
``devices.files.MAX_IMAGE_PIXELS`` pixels is decoded.
A Hugging Face dataset folder (``Dataset.save_to_disk``, as ``agent data export --format hf`` writes it) holds the
same columns, its images read whole at load.

Units: a file whose every non-negative ``gt_bbox`` number is at most 1 is normalized, any other is in pixels
(``units`` forces one). Negative numbers are GUI-R1's "no location" (``[-100, -100]``). Bad rows never stop a load:
each is a ``RejectedRecord`` (envs.grounding) naming the file, the row and why. Images are decoded only when a
batch is evaluated (``iter_images``), so a test set of several GB is read a batch at a time.
"""

from __future__ import annotations

import bisect
import functools
import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from devices.bounded_json import loads_bounded, read_bounded
from devices.files import MAX_IMAGE_BYTES, check_image, confined, read_regular
from envs.action_bench.benchmarks import GENERIC, Benchmark, benchmark, infer_benchmark
from envs.errors import EnvError
from envs.grounding import RejectedRecord, RejectKind

log = logging.getLogger(__name__)

__all__ = ["ActionDataset", "ActionRecord", "decode_image", "is_hf_folder", "iter_images", "load_actions", "read_image"]

COLUMNS = ("instruction", "history", "task_type", "gt_action", "gt_bbox", "gt_input_text")
INSTALL_HINT = "pip install 'handeye[data]' (pyarrow)"


@dataclass(frozen=True, slots=True)
class ActionRecord:
    """One step of an action benchmark. ``gt_numbers`` are the file's ``gt_bbox`` as they are, in ``units``."""

    id: str
    file: Path
    row: int
    instruction: str
    history: str
    task_type: str
    gt_action: str
    gt_numbers: tuple[float, ...]
    gt_text: str
    group: str
    units: str
    """normalized or pixels."""
    image_path: Path | None = None
    """The image file (JSONL); None for Parquet, whose bytes are read by ``iter_images``."""
    image_bytes: bytes | None = field(default=None, repr=False)
    """The encoded image, for a Hugging Face dataset folder (read whole at load)."""

    def gt_point(self, size: tuple[int, int]) -> tuple[float, float] | None:
        """The released GR reference point, normalized: the first two numbers (a box's top-left corner); None when
        the record has no location (negative numbers)."""
        x, y = self.gt_numbers[0], self.gt_numbers[1]
        if x < 0 or y < 0:
            return None
        return (x, y) if self.units == "normalized" else (x / size[0], y / size[1])

    def gt_box(self, size: tuple[int, int]) -> tuple[float, float, float, float] | None:
        """The normalized box when the record has four numbers (for drawing), else None."""
        if len(self.gt_numbers) != 4 or min(self.gt_numbers) < 0:
            return None
        x1, y1, x2, y2 = self.gt_numbers
        w, h = (1.0, 1.0) if self.units == "normalized" else size
        return x1 / w, y1 / h, x2 / w, y2 / h


@dataclass(frozen=True, slots=True)
class ActionDataset:
    """The records of one benchmark file, the benchmark it is, and what was rejected."""

    file: Path
    benchmark: Benchmark
    records: tuple[ActionRecord, ...]
    rejected: tuple[RejectedRecord, ...]
    units: str


def _text(value: Any, default: str = "") -> str:
    if value is None:
        return default
    return value if isinstance(value, str) else str(value)


def _record(raw: dict[str, Any], file: Path, row: int, bench: Benchmark, units: str,
            image_path: Path | None, image_bytes: bytes | None = None) -> ActionRecord:
    """A record from one row's fields; ValueError saying what is wrong."""
    instruction, action = raw.get("instruction"), raw.get("gt_action")
    if not isinstance(instruction, str) or not instruction.strip():
        raise ValueError("no 'instruction' text")
    if not isinstance(action, str) or not action.strip():
        raise ValueError("no 'gt_action' name")
    bbox = raw.get("gt_bbox")
    if not (isinstance(bbox, (list, tuple)) and len(bbox) in (2, 4)
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in bbox)):
        raise ValueError(f"'gt_bbox' must be [x, y] or [x1, y1, x2, y2], got {bbox!r}")
    history = raw.get("history")
    return ActionRecord(
        id=f"{file.stem}:{raw.get('id', row)}", file=file, row=row, instruction=instruction.strip(),
        history=_text(history, "None") if not isinstance(history, (list, tuple)) else str(list(history)),
        task_type=_text(raw.get("task_type")), gt_action=action.strip(), gt_numbers=tuple(float(v) for v in bbox),
        gt_text=_text(raw.get("gt_input_text"), "no input text"), group=_text(raw.get("group")) or bench.group,
        units=units, image_path=image_path, image_bytes=image_bytes)


def _units(rows: Sequence[dict[str, Any]], forced: str) -> str:
    if forced != "auto":
        if forced not in ("normalized", "pixels"):
            raise EnvError(f"units={forced!r} must be auto, normalized or pixels")
        return forced
    values = [v for r in rows if isinstance(r.get("gt_bbox"), (list, tuple))
              for v in r["gt_bbox"] if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0]
    return "normalized" if all(v <= 1.0 for v in values) else "pixels"


def _parquet_rows(file: Path) -> list[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise EnvError(f"reading {file} needs pyarrow ({e}); {INSTALL_HINT}") from e
    try:
        schema = pq.read_schema(file)
    except Exception as e:  # pyarrow raises its own types for a broken file
        raise EnvError(f"{file} is not a readable Parquet file: {type(e).__name__}: {e}") from e
    if "image" not in schema.names:
        raise EnvError(f"{file} has no 'image' column (columns: {', '.join(schema.names)})")
    try:
        wanted = [c for c in (*COLUMNS, "group", "id") if c in schema.names]
        return pq.read_table(file, columns=wanted).to_pylist()
    except Exception as e:  # pyarrow raises its own types for a broken file
        raise EnvError(f"{file} is not a readable Parquet file: {type(e).__name__}: {e}") from e


def _hf_rows(folder: Path) -> list[dict[str, Any]]:
    """The rows of a Hugging Face dataset folder (``Dataset.save_to_disk``; ``agent data export --format hf``),
    images as their encoded bytes."""
    try:
        import datasets
    except ImportError as e:
        raise EnvError(f"reading the dataset folder {folder} needs the datasets package ({e}); {INSTALL_HINT}") from e
    try:
        data = datasets.load_from_disk(str(folder))
        if "image" in data.features:
            data = data.cast_column("image", datasets.Image(decode=False))
        return data.to_list()
    except Exception as e:  # datasets raises its own types for a broken folder
        raise EnvError(f"{folder} is not a readable dataset folder: {type(e).__name__}: {e}") from e


def is_hf_folder(path: Path) -> bool:
    """Whether ``path`` is a folder ``Dataset.save_to_disk`` wrote."""
    return path.is_dir() and (path / "dataset_info.json").is_file() and (path / "state.json").is_file()


def _jsonl_rows(file: Path) -> list[dict[str, Any] | str]:
    out: list[dict[str, Any] | str] = []
    try:
        lines = read_bounded(file).splitlines()
    except (OSError, ValueError) as e:
        raise EnvError(f"{file} cannot be read: {e}") from e
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = loads_bounded(line, first_line=lineno, records=False)
        except ValueError as e:  # JSONDecodeError included
            out.append(f"line {lineno}: not JSON: {e}")
            continue
        out.append(value if isinstance(value, dict) else f"line {lineno}: not a JSON object")
    return out


def _image_path(raw: dict[str, Any], root: Path) -> Path:
    name = raw.get("image", raw.get("image_path"))
    if not isinstance(name, str) or not name.strip():
        raise ValueError("no 'image' path")
    path = confined(root, name, "image path")  # ValueError: absolute, '..', a symlink out of the folder
    if not path.is_file():
        raise ValueError(f"image {path} does not exist")
    return path


def load_actions(path: str | Path, *, bench: str | None = None, units: str = "auto",
                 image_dir: str | Path | None = None, any_records: bool = False) -> list[ActionDataset]:
    """Every benchmark file at ``path`` (a ``.parquet`` or ``.jsonl`` file, a Hugging Face dataset folder, or a
    folder of them), each with the benchmark ``bench`` names or its file name implies; EnvError when there is none
    or a benchmark is unknown. ``any_records``: files that are no benchmark (training data, exported runs) are read
    as ``GENERIC`` records."""
    root = Path(path)
    if not root.exists():
        raise EnvError(f"{root} does not exist")
    if root.is_file() or is_hf_folder(root):
        files = [root]
    else:
        files = sorted(p for p in root.iterdir() if p.suffix in (".parquet", ".jsonl") or is_hf_folder(p))
    if not files:
        raise EnvError(f"{root} holds no .parquet or .jsonl file and no dataset folder")
    return [_load_file(f, bench, units, Path(image_dir) if image_dir else f.parent, any_records) for f in files]


def _load_file(file: Path, bench: str | None, units: str, image_root: Path, any_records: bool) -> ActionDataset:
    found = benchmark(bench) if bench else infer_benchmark(file.name) or (GENERIC if any_records else None)
    if found is None:
        raise EnvError(f"cannot tell which benchmark {file.name} is: name it with --benchmark "
                       f"(androidcontrol-low, androidcontrol-high, guiodyssey, omniact-web, omniact-desktop, "
                       f"guiact-web)")
    if is_hf_folder(file):
        rows: list[Any] = _hf_rows(file)
    elif file.suffix == ".parquet":
        rows = _parquet_rows(file)
    elif file.suffix == ".jsonl":
        rows = _jsonl_rows(file)
    else:
        raise EnvError(f"{file} is neither .parquet nor .jsonl")
    unit = _units([r for r in rows if isinstance(r, dict)], units)
    records, rejected = [], []
    for row, raw in enumerate(rows):
        try:
            if isinstance(raw, str):
                raise ValueError(raw)
            image = _image_path(raw, image_root) if file.suffix == ".jsonl" else None
            data = _image_bytes(raw.get("image"), file) if is_hf_folder(file) else None
            if is_hf_folder(file) and data is None:
                raise ValueError("no image bytes")
            records.append(_record(raw, file, row, found, unit, image, data))
        except ValueError as e:
            kind = RejectKind.MISSING_IMAGE if "does not exist" in str(e) else RejectKind.MALFORMED
            rejected.append(RejectedRecord(file, row, kind, str(e)))
    for r in rejected[:20]:
        log.warning("rejected action record %s", r)
    return ActionDataset(file, found, tuple(records), tuple(rejected), unit)


def decode_image(data: bytes) -> np.ndarray:
    """Encoded image bytes (PNG, JPEG, ...) as an RGB uint8 array; EnvError when they do not decode or their header
    declares more than ``devices.files.MAX_IMAGE_PIXELS`` pixels (checked before decoding)."""
    try:
        check_image(data)
    except ValueError as e:
        raise EnvError(str(e)) from None
    array = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if array is None:
        raise EnvError(f"{len(data)} bytes that are not a decodable image")
    return cv2.cvtColor(array, cv2.COLOR_BGR2RGB)


def image_root(file: Path) -> Path:
    """The folder a file's image paths are relative to: a dataset folder itself, else the file's folder."""
    return file if file.is_dir() else file.parent


def read_image_file(path: Path) -> bytes | None:
    """An image file's bytes (a regular file within ``MAX_IMAGE_BYTES``); None, with a warning, otherwise."""
    try:
        return read_regular(path, MAX_IMAGE_BYTES, "image")
    except (OSError, ValueError) as e:
        log.warning("image %s not read: %s", path, e)
        return None


def _image_bytes(value: Any, root: Path) -> bytes | None:
    """A row's image: its bytes, or the file its path names under ``root`` (never outside it)."""
    if isinstance(value, dict):
        value = value.get("bytes") or value.get("path")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str) and value:
        try:
            path = confined(root, value, "image path")
        except ValueError as e:
            log.warning("image not read: %s", e)
            return None
        return read_image_file(path) if path.exists() else None
    return None


def iter_images(dataset: ActionDataset, records: Sequence[ActionRecord], batch: int = 32
                ) -> Iterator[tuple[ActionRecord, bytes | None]]:
    """``(record, encoded image bytes or None when missing)`` for ``records`` (in their order), reading a Parquet
    file's image column ``batch`` rows at a time."""
    if dataset.file.suffix != ".parquet":
        for r in records:
            if r.image_bytes is not None:
                yield r, r.image_bytes
            else:
                yield r, read_image_file(r.image_path) if r.image_path is not None else None
        return
    import pyarrow.parquet as pq

    wanted = {r.row: r for r in records}
    row, root = 0, image_root(dataset.file)
    for chunk in pq.ParquetFile(dataset.file).iter_batches(batch_size=batch, columns=["image"]):
        for value in chunk.column(0).to_pylist():
            if row in wanted:
                yield wanted.pop(row), _image_bytes(value, root)
            row += 1
        if not wanted:
            return
    for r in wanted.values():  # rows the file does not have
        yield r, None


@functools.lru_cache(maxsize=16)
def _row_groups(file: str) -> tuple[int, ...]:
    """The first row of each row group of a Parquet file."""
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(file).metadata
    starts, row = [], 0
    for i in range(meta.num_row_groups):
        starts.append(row)
        row += meta.row_group(i).num_rows
    return tuple(starts)


@functools.lru_cache(maxsize=2)
def _group_images(file: str, group: int) -> list[Any]:
    import pyarrow.parquet as pq

    return pq.ParquetFile(file).read_row_group(group, columns=["image"]).column(0).to_pylist()


def read_image(record: ActionRecord) -> bytes | None:
    """One record's encoded image, for random access (training prompts); a Parquet file is read a row group at a
    time, the last two kept."""
    if record.image_bytes is not None:
        return record.image_bytes
    if record.image_path is not None:
        return read_image_file(record.image_path)
    starts = _row_groups(str(record.file))
    group = bisect.bisect_right(starts, record.row) - 1
    images = _group_images(str(record.file), group)
    offset = record.row - starts[group]
    return _image_bytes(images[offset], image_root(record.file)) if 0 <= offset < len(images) else None

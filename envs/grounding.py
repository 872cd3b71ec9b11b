"""GUI grounding benchmarks: load ScreenSpot, ScreenSpot-v2 and ScreenSpot-Pro (scoring: ``envs.grounding_score``;
running a policy: ``agent.grounding_eval``).

    dataset = load_grounding("data/screenspot_v2/")            # GroundingDataset(samples, report)
    report = await evaluate_grounding(dataset.samples, policy, rejected=dataset.report.rejected)
    report.accuracy, report.any_accuracy, report.breakdown("platform/element_type")

Formats, as published (field aliases in ``_ALIASES``; the layouts and where to get them: docs/environments.md):

- ScreenSpot (SeeClick) and ScreenSpot-v2 (OS-Atlas): one JSON list per split (``screenspot_mobile.json``,
  ``screenspot_desktop_v2.json``...), records ``{img_filename, bbox: [x, y, w, h] image pixels, instruction,
  data_type: text|icon, data_source: ios|android|windows|macos|shop|forum|tool|gitlab...}``. Images sit next to the
  JSON or in ``screenspot_imgs/`` (v1) / ``screenspotv2_image/`` (v2). ``platform`` is the split (mobile / desktop /
  web: the official table's columns), ``application`` the data source.
- ScreenSpot-Pro: ``annotations/<application>_<platform>.json`` with records ``{img_filename, bbox: [x1, y1, x2, y2]
  image pixels, img_size: [w, h], instruction, instruction_cn, application, platform, ui_type: text|icon, group,
  gt_type: positive|negative}``; images under ``images/`` (``img_filename`` is relative to it). ``language="cn"``
  reads ``instruction_cn``; a record without one is rejected (``missing_language``), never scored in English.

Boxes become normalized frame boxes exactly as the official scripts normalise them (x / W with the xywh corners
summed in pixels first), so a point on a box edge compares equal to the edge.

Scoring (``point_in_box``, the official hit test, and the reports): ``envs.grounding_score``.

Bad input never stops a load: each rejected record is listed in the LoadReport with its file, index, kind and reason;
only a dataset path that does not exist (or holds no JSON) is an EnvError. A file over the limits of
``devices.bounded_json`` (``MAX_FILE_BYTES``, nesting deeper than ``MAX_DEPTH``, a number longer than
``MAX_NUMBER_CHARS``) is rejected whole as ``bad_file``, its reason naming the record and line. An image that passes
its header check at load but cannot be decoded later (a cut-off file) is a rejected sample of the evaluation
(``agent.grounding_eval``), never a crash.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import cv2
import numpy as np

from devices.base import Box
from devices.bounded_json import loads_bounded, read_bounded
from devices.files import MAX_IMAGE_BYTES, check_image, header_size, read_regular
from envs.errors import EnvError

log = logging.getLogger(__name__)

HEAD_BYTES = 256 * 1024
"""How much of an image a load reads for its size (a JPEG's frame header may follow long metadata)."""


class DatasetFormat(str, Enum):
    SCREENSPOT = "screenspot"
    SCREENSPOT_V2 = "screenspot-v2"
    SCREENSPOT_PRO = "screenspot-pro"


class Language(str, Enum):
    """The instructions a load reads: English, or Chinese (ScreenSpot-Pro's ``instruction_cn``; -v1/-v2 have none)."""

    EN = "en"
    CN = "cn"


class RejectKind(str, Enum):
    """Why a record was left out of a load."""

    MALFORMED = "malformed"
    """Not an object, a required field missing or of the wrong type, a degenerate box."""
    UNSAFE_PATH = "unsafe_path"
    """The image path is absolute or climbs out of the image folder (``..``, a symlink out)."""
    MISSING_IMAGE = "missing_image"
    UNREADABLE_IMAGE = "unreadable_image"
    SIZE_MISMATCH = "size_mismatch"
    """The record's ``img_size`` is not the image's size, so its box would be normalized wrongly."""
    BOX_OUTSIDE = "box_outside"
    """The box reaches past the image's edges."""
    MISSING_LANGUAGE = "missing_language"
    """The record has no instruction in the language asked for (``instruction_cn`` for ``Language.CN``)."""
    BAD_FILE = "bad_file"
    """The whole JSON file is unreadable or not a list (index -1)."""


@dataclass(frozen=True, slots=True)
class GroundingSample:
    """One instruction on one screenshot. ``box`` is the target as a normalized frame box; it is None
    only for negative samples (the target is not on the screen)."""

    id: str
    image_path: Path
    image_size: tuple[int, int]
    """(W, H) in pixels."""
    instruction: str
    box: Box | None
    platform: str
    application: str
    element_type: str
    """"text" or "icon" in both datasets."""
    negative: bool = False
    source: str = ""
    """The dataset format: screenspot, screenspot-v2 or screenspot-pro."""
    group: str = ""
    """ScreenSpot-Pro's application group (Dev, Creative, CAD, Scientific, Office, OS)."""


@dataclass(frozen=True, slots=True)
class RejectedRecord:
    file: Path
    index: int
    """Position of the record in the file's list; -1 for the whole file."""
    kind: RejectKind
    reason: str

    def __str__(self) -> str:
        where = f"{self.file}" if self.index < 0 else f"{self.file}[{self.index}]"
        return f"{where}: {self.kind.value}: {self.reason}"


@dataclass(frozen=True, slots=True)
class LoadReport:
    files: tuple[Path, ...]
    loaded: int
    rejected: tuple[RejectedRecord, ...] = ()

    def counts(self) -> dict[str, int]:
        """Rejected records per RejectKind value."""
        return dict(Counter(r.kind.value for r in self.rejected))


def rejection_summary(rejected: Sequence[RejectedRecord], *, shown: int = 5) -> str:
    """``N rejected (kind: count, ...): the first reasons`` for an error message about unusable records."""
    if not rejected:
        return "the dataset holds no records"
    counts = ", ".join(f"{kind}: {n}" for kind, n in sorted(Counter(r.kind.value for r in rejected).items()))
    first = "; ".join(str(r) for r in rejected[:shown])
    more = f"; and {len(rejected) - shown} more" if len(rejected) > shown else ""
    return f"{len(rejected)} rejected ({counts}): {first}{more}"


@dataclass(frozen=True, slots=True)
class GroundingDataset:
    samples: tuple[GroundingSample, ...]
    report: LoadReport


# --- loading -----------------------------------------------------------------------------------

_ALIASES = {
    "image": ("img_filename", "image_path", "img_path", "file_name", "image"),
    "instruction": ("instruction", "question", "query"),
    "element_type": ("data_type", "ui_type", "element_type"),
    "gt_type": ("gt_type", "ground_truth"),
}
#: folders, relative to the JSON file's folder, where the published layouts keep the images
_IMAGE_DIRS = (".", "images", "screenspot_imgs", "screenspotv2_image", "screenspot_v2_imgs", "imgs",
               "../images", "../screenspot_imgs", "../screenspotv2_image")
_SPLITS = ("mobile", "desktop", "web")
_SOURCE_PLATFORM = {"ios": "mobile", "android": "mobile", "windows": "desktop", "macos": "desktop",
                    "mac": "desktop", "linux": "desktop"}


class _Reject(Exception):
    def __init__(self, kind: RejectKind, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


def load_grounding(path: str | Path, *, image_dir: str | Path | None = None,
                   format: DatasetFormat | str | None = None, language: Language | str = Language.EN,
                   limit: int | None = None) -> GroundingDataset:
    """Load a ScreenSpot / ScreenSpot-v2 / ScreenSpot-Pro JSON file, or every ``*.json`` of a folder
    (or of its ``annotations/`` folder).

    ``image_dir`` defaults, per file, to whichever of the published layouts' image folders holds the
    file's images. ``format`` defaults to detection per file (Pro records carry ``img_size``; a
    ``v2`` in the file name marks ScreenSpot-v2). ``language="cn"`` uses Pro's ``instruction_cn``
    (a record without one is rejected as ``missing_language``). ``limit``: the first N usable
    records of each file (None: all; a Pro folder has a file per application and platform).
    """
    try:
        language = Language(language)
    except ValueError:
        raise EnvError(f"unknown instruction language {language!r}; use one of "
                       f"{', '.join(v.value for v in Language)}") from None
    if limit is not None and limit < 1:
        raise EnvError(f"limit must be at least 1 (or None for every record), got {limit}")
    path = Path(path)
    if not path.exists():
        raise EnvError(f"grounding dataset {path} does not exist; "
                       "pass a ScreenSpot JSON file or the folder holding them")
    if path.is_dir():
        files = sorted(path.glob("*.json")) or sorted((path / "annotations").glob("*.json"))
        if not files:
            raise EnvError(f"grounding dataset folder {path} holds no *.json files (nor does {path / 'annotations'})")
    else:
        files = [path]
    fmt = DatasetFormat(format) if format is not None else None
    samples: list[GroundingSample] = []
    rejected: list[RejectedRecord] = []
    for file in files:
        got, bad = _load_file(file, Path(image_dir) if image_dir is not None else None, fmt, language, limit)
        samples.extend(got)
        rejected.extend(bad)
    for r in rejected:
        log.warning("rejected grounding record %s", r)
    return GroundingDataset(tuple(samples), LoadReport(tuple(files), len(samples), tuple(rejected)))


def _load_file(file: Path, image_dir: Path | None, fmt: DatasetFormat | None, language: Language,
               limit: int | None) -> tuple[list[GroundingSample], list[RejectedRecord]]:
    try:
        records = loads_bounded(read_bounded(file))
    except OSError as e:
        return [], [RejectedRecord(file, -1, RejectKind.BAD_FILE, f"cannot be read: {e.strerror or e}")]
    except ValueError as e:  # not UTF-8, not JSON, or beyond the limits of devices.bounded_json (size, depth, numbers)
        return [], [RejectedRecord(file, -1, RejectKind.BAD_FILE, f"not readable as JSON: {e}")]
    if not isinstance(records, list):
        return [], [RejectedRecord(file, -1, RejectKind.BAD_FILE,
                                   f"must hold a JSON list of records, got {type(records).__name__}")]
    fmt = fmt or _detect_format(file, records)
    root = image_dir if image_dir is not None else _find_image_dir(file, records)
    sizes: dict[Path, tuple[int, int] | None] = {}
    samples, rejected = [], []
    for index, record in enumerate(records):
        if limit is not None and len(samples) >= limit:
            break
        try:
            samples.append(_parse_record(record, index, file, root, fmt, language, sizes))
        except _Reject as r:
            rejected.append(RejectedRecord(file, index, r.kind, r.reason))
    return samples, rejected


def _detect_format(file: Path, records: list[Any]) -> DatasetFormat:
    first = next((r for r in records if isinstance(r, dict)), {})
    if "img_size" in first or "ui_type" in first or "application" in first:
        return DatasetFormat.SCREENSPOT_PRO
    return DatasetFormat.SCREENSPOT_V2 if "v2" in file.stem.lower() else DatasetFormat.SCREENSPOT


def _find_image_dir(file: Path, records: list[Any]) -> Path:
    names = [n for r in records[:20] if isinstance(r, dict) and isinstance(n := _field(r, "image"), str)]
    best, best_hits = file.parent, 0
    for rel in _IMAGE_DIRS:
        folder = (file.parent / rel).resolve()
        if not folder.is_dir():
            continue
        hits = sum(1 for n in names if _safe_relative(n) is not None and (folder / n).is_file())
        if hits > best_hits:
            best, best_hits = folder, hits
    return best


def _field(record: dict[str, Any], name: str) -> Any:
    for key in _ALIASES[name]:
        if key in record:
            return record[key]
    return None


def _safe_relative(name: str) -> PurePosixPath | None:
    """The image name as a relative path, or None when it is absolute or climbs with ``..``."""
    posix = PurePosixPath(name.replace("\\", "/"))
    if posix.is_absolute() or PureWindowsPath(name).drive or ".." in posix.parts or not posix.parts:
        return None
    return posix


def _parse_record(record: Any, index: int, file: Path, root: Path, fmt: DatasetFormat, language: Language,
                  sizes: dict[Path, tuple[int, int] | None]) -> GroundingSample:
    if not isinstance(record, dict):
        raise _Reject(RejectKind.MALFORMED, f"a record must be a JSON object, got {type(record).__name__}")
    name = _field(record, "image")
    if not isinstance(name, str) or not name.strip():
        raise _Reject(RejectKind.MALFORMED, f"no image file name (one of {list(_ALIASES['image'])})")
    instruction = _field(record, "instruction")
    if language is Language.CN:
        instruction = record.get("instruction_cn")
        if not isinstance(instruction, str) or not instruction.strip():
            raise _Reject(RejectKind.MISSING_LANGUAGE, "no Chinese instruction (instruction_cn), which only "
                                                       "ScreenSpot-Pro has; load it in English (language en)")
    if not isinstance(instruction, str) or not instruction.strip():
        raise _Reject(RejectKind.MALFORMED, "no instruction text")
    element_type = _field(record, "element_type")
    element_type = element_type if isinstance(element_type, str) else ""
    gt_type = _field(record, "gt_type")
    negative = isinstance(gt_type, str) and gt_type.strip().lower() == "negative"

    rel = _safe_relative(name)
    if rel is None:
        raise _Reject(RejectKind.UNSAFE_PATH, f"image path {name!r} is absolute or leaves the image folder {root}")
    image_path = (root / rel).resolve()
    if not image_path.is_relative_to(root.resolve()):
        raise _Reject(RejectKind.UNSAFE_PATH, f"image path {name!r} resolves to {image_path}, outside {root}")
    if not image_path.is_file():
        raise _Reject(RejectKind.MISSING_IMAGE, f"image {image_path} does not exist")
    if image_path not in sizes:
        sizes[image_path] = image_size(image_path)
    size = sizes[image_path]
    if size is None:
        raise _Reject(RejectKind.UNREADABLE_IMAGE, f"image {image_path} is not a readable image")
    width, height = size

    box: Box | None = None
    if fmt is DatasetFormat.SCREENSPOT_PRO:
        declared = record.get("img_size")
        if declared is not None:
            if not (isinstance(declared, list) and len(declared) == 2 and all(_is_number(v) for v in declared)):
                raise _Reject(RejectKind.MALFORMED, f"img_size must be [w, h], got {declared!r}")
            if (int(declared[0]), int(declared[1])) != size:
                raise _Reject(RejectKind.SIZE_MISMATCH,
                              f"img_size {declared} but image {image_path.name} is {width}x{height}")
        if not negative:
            x1, y1, x2, y2 = _four_numbers(record.get("bbox"), "[x1, y1, x2, y2]")
            if x2 <= x1 or y2 <= y1:
                raise _Reject(RejectKind.MALFORMED, f"bbox {record['bbox']} must have x2 > x1 and y2 > y1")
            box = _normalized(x1, y1, x2, y2, width, height, record["bbox"])
        platform = str(record.get("platform") or "")
        application = str(record.get("application") or "")
        group = str(record.get("group") or "")
    else:
        x, y, w, h = _four_numbers(record.get("bbox"), "[x, y, width, height]")
        if w <= 0 or h <= 0:
            raise _Reject(RejectKind.MALFORMED, f"bbox {record['bbox']} must have width > 0 and height > 0")
        box = _normalized(x, y, x + w, y + h, width, height, record["bbox"])
        application = str(record.get("data_source") or "")
        split = next((s for s in _SPLITS if s in file.stem.lower()), None)
        platform = split or _SOURCE_PLATFORM.get(application.lower(), "web")
        group = ""
    sample_id = f"{file.stem}:{record.get('id', index)}"
    return GroundingSample(sample_id, image_path, size, instruction.strip(), box, platform, application,
                           element_type, negative, fmt.value, group)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _four_numbers(bbox: Any, form: str) -> tuple[float, float, float, float]:
    if not (isinstance(bbox, list) and len(bbox) == 4 and all(_is_number(v) for v in bbox)):
        raise _Reject(RejectKind.MALFORMED, f"bbox must be four numbers {form} in image pixels, got {bbox!r}")
    return bbox[0], bbox[1], bbox[2], bbox[3]


def _normalized(x1: float, y1: float, x2: float, y2: float, width: int, height: int, raw: Any) -> Box:
    if x1 < 0 or y1 < 0 or x2 > width or y2 > height:
        raise _Reject(RejectKind.BOX_OUTSIDE,
                      f"bbox {raw} spans x {x1}..{x2}, y {y1}..{y2}, outside the {width}x{height} image")
    return Box(x1 / width, y1 / height, x2 / width, y2 / height)


def image_size(path: Path) -> tuple[int, int] | None:
    """(W, H) of an image from its header (PNG, JPEG, GIF, BMP, WebP: ``devices.files.header_size``), so loading
    1,500 screenshots stays quick and nothing is decoded; None when it is no such image or not a regular file."""
    try:
        head = read_regular(path, HEAD_BYTES, "image", head=True)
    except (OSError, ValueError):
        return None
    size = header_size(head)
    if size is None and len(head) == HEAD_BYTES:  # a JPEG whose frame header follows large metadata
        try:
            size = header_size(read_regular(path, MAX_IMAGE_BYTES, "image"))
        except (OSError, ValueError):
            return None
    return (int(size[0]), int(size[1])) if size and size[0] > 0 and size[1] > 0 else None


def read_rgb(path: Path) -> np.ndarray:
    """The image as RGB uint8 H x W x 3; EnvError saying why when it cannot be read or decoded (a load checks
    only the header, so a file cut off after it is found here), is not a regular file of at most
    ``MAX_IMAGE_BYTES``, or declares more than ``devices.files.MAX_IMAGE_PIXELS`` pixels."""
    try:
        data = read_regular(path, MAX_IMAGE_BYTES, "image")
        check_image(data, f"image {path}")
    except OSError as e:
        raise EnvError(f"image {path} could not be read ({e.strerror or e}); was the dataset moved or changed after "
                       f"loading?") from None
    except ValueError as e:
        raise EnvError(f"{e}; replace the file or remove its record") from None
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR) if data else None
    if image is None:
        raise EnvError(f"image {path} ({len(data)} bytes) cannot be decoded: it is cut off, damaged or not an "
                       f"image; replace the file or remove its record")
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)


__all__ = [
    "DatasetFormat", "GroundingDataset", "GroundingSample", "Language", "LoadReport", "RejectKind", "RejectedRecord",
    "image_size", "load_grounding", "read_rgb", "rejection_summary",
]

"""Full weights into a loaded model, in place: what ``TransformersBackend.load_weights`` does.

An online session that fine-tunes every weight publishes each version as safetensors files named by the model's own
``state_dict`` (``train.full_versions``). An actor's backend takes a version without building a second model:

1. every file's header is read (the safetensors layout: an 8-byte little-endian length, a JSON header of
   ``name -> {dtype, shape, data_offsets}``, then the tensors' bytes) and checked against the model: the same tensor
   names, shapes and dtypes, every tensor inside its file. A file of another model is refused with a
   ``BackendError`` naming what differs, before a single weight is touched;
2. each tensor's bytes are then read into the existing parameter: on the host straight from the file into the
   tensor's memory, on a GPU through one reusable staging buffer (``STAGING_BYTES``) and a host-to-device ``copy_``
   per chunk. The memory a swap needs is at most that buffer, whatever the model's size.

Files are taken as open binary files (or paths): ``train.full_versions`` hashes a file and hands over the same open
file, so a file replaced (renamed over) between the check and the load cannot slip in.

Tied weights (an output layer that is the input embedding) are one tensor with two names; ``unique_state`` keeps the
first name only, on both the writing and the reading side.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from policy.errors import BackendError

if TYPE_CHECKING:
    import torch

__all__ = ["STAGING_BYTES", "SwapPlan", "TensorEntry", "copy_in", "read_header", "safetensors_dtype", "unique_state",
           "weights_problems"]

STAGING_BYTES = 64 << 20
"""The staging buffer a swap reads through: 64 MiB, whatever the model's size (a larger tensor goes in chunks)."""
MAX_HEADER_BYTES = 100 << 20
"""A safetensors header longer than this is not a weights file (7B models' headers are ~100 KB)."""

_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64", "I64": "int64",
           "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
           "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}
"""safetensors dtype codes -> torch dtype names."""


@dataclass(frozen=True, slots=True)
class TensorEntry:
    """One tensor of a safetensors file, as its header describes it."""

    name: str
    dtype: str
    """torch dtype name ("bfloat16", "float32", ...)."""
    shape: tuple[int, ...]
    start: int
    """Byte offset in the file (the header included)."""
    nbytes: int


def safetensors_dtype(dtype: torch.dtype) -> str:
    """The safetensors code of a torch dtype ("BF16" for torch.bfloat16)."""
    name = str(dtype).removeprefix("torch.")
    for code, torch_name in _DTYPES.items():
        if torch_name == name:
            return code
    raise BackendError(f"dtype {name} has no safetensors code here")


def read_header(f: IO[bytes], label: str) -> list[TensorEntry]:
    """The tensors of the safetensors file open as ``f`` (read from its start), checked to lie inside it.

    ``label`` names the file in errors. A ``BackendError`` when the header is not a safetensors header."""
    import torch

    f.seek(0, os.SEEK_END)
    size = f.tell()
    f.seek(0)
    head = f.read(8)
    if len(head) < 8:
        raise BackendError(f"{label} is not a safetensors file: {size} bytes, shorter than its header length")
    (length,) = struct.unpack("<Q", head)
    if length > min(MAX_HEADER_BYTES, size - 8):
        raise BackendError(f"{label} is not a safetensors file: its header says {length} bytes, the file has {size}")
    try:
        header = json.loads(f.read(length))
    except ValueError as exc:
        raise BackendError(f"{label} is not a safetensors file: its header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise BackendError(f"{label} is not a safetensors file: its header is not a JSON object")
    data_start, data_size = 8 + length, size - 8 - length
    entries = []
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = _DTYPES[spec["dtype"]]
            shape = tuple(int(d) for d in spec["shape"])
            begin, end = (int(x) for x in spec["data_offsets"])
        except (KeyError, TypeError, ValueError) as exc:
            raise BackendError(f"{label}: tensor {name!r} has an unreadable or unsupported entry {spec!r:.120} "
                               f"({type(exc).__name__}: {exc})") from None
        numel = 1
        for d in shape:
            numel *= d
        itemsize = torch.empty((), dtype=getattr(torch, dtype)).element_size()
        if min(shape, default=0) < 0 or not 0 <= begin <= end <= data_size or end - begin != numel * itemsize:
            raise BackendError(f"{label}: tensor {name!r} ({dtype} {list(shape)}) claims bytes {begin}..{end} of "
                               f"{data_size}: the file is truncated or not a safetensors file")
        entries.append(TensorEntry(name, dtype, shape, data_start + begin, end - begin))
    return sorted(entries, key=lambda e: e.start)


def unique_state(model: Any) -> dict[str, torch.Tensor]:
    """``model.state_dict()`` with each tensor once: a tied weight keeps its first name (what a version holds)."""
    seen: set[tuple[Any, ...]] = set()
    out = {}
    for name, t in model.state_dict().items():
        key = (t.device, t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()),
               t.dtype)
        if key in seen:
            continue
        seen.add(key)
        out[name] = t
    return out


def weights_problems(targets: dict[str, torch.Tensor], entries: Iterable[TensorEntry]) -> list[str]:
    """What keeps ``entries`` from filling ``targets`` exactly ([] when nothing): tensors missing from the files,
    tensors the model lacks, named twice, or with another shape or dtype."""
    found: dict[str, TensorEntry] = {}
    problems = []
    for e in entries:
        if e.name in found:
            problems.append(f"{e.name} is in the files twice")
        found[e.name] = e
    missing = sorted(set(targets) - set(found))
    extra = sorted(set(found) - set(targets))
    if missing:
        problems.append(f"{len(missing)} of the model's tensors are not in the files (e.g. {', '.join(missing[:3])})")
    if extra:
        problems.append(f"{len(extra)} tensors in the files are not in the model (e.g. {', '.join(extra[:3])})")
    for name in sorted(set(found) & set(targets)):
        e, t = found[name], targets[name]
        model_dtype = str(t.dtype).removeprefix("torch.")
        if e.shape != tuple(t.shape) or e.dtype != model_dtype:
            problems.append(f"{name} is {e.dtype} {list(e.shape)} in the files, {model_dtype} {list(t.shape)} in "
                            f"the model")
    return problems


def copy_in(targets: dict[str, torch.Tensor], files: Sequence[tuple[IO[bytes], list[TensorEntry]]],
            staging_bytes: int = STAGING_BYTES) -> int:
    """Copy every entry's bytes from its open file into its target tensor, in place; returns the bytes copied. The
    entries must have passed ``weights_problems``.

    A contiguous tensor in host memory is read into straight from the file, ``staging_bytes`` at a time: no staging
    copy, and no ``copy_``, whose parallel loop costs a thread barrier per call on a busy CPU. Any other tensor (on a
    GPU, or not contiguous) is read through one staging buffer of ``staging_bytes`` and copied in chunk by chunk."""
    import torch

    staging: bytearray | None = None
    copied = 0
    with torch.no_grad():
        for f, entries in files:
            for e in entries:
                target = targets[e.name]
                f.seek(e.start)
                if target.device.type == "cpu" and target.is_contiguous():
                    own = memoryview(target.view(-1).view(torch.uint8).numpy())  # the tensor's own bytes
                    _read_into(f, own, e, staging_bytes)
                else:
                    if staging is None:
                        largest = max(x.nbytes for _, xs in files for x in xs)
                        staging = bytearray(max(8, min(staging_bytes, largest)))
                    _read_through(f, target, e, staging)
                copied += e.nbytes
    return copied


def _read_into(f: IO[bytes], dest: memoryview, e: TensorEntry, chunk: int) -> None:
    done = 0
    while done < e.nbytes:
        n = min(chunk, e.nbytes - done)
        got = f.readinto(dest[done:done + n])
        if got != n:
            raise BackendError(f"{e.name}: the file ended {e.nbytes - done - (got or 0)} bytes early while its "
                               f"weights were being copied")
        done += n


def _read_through(f: IO[bytes], target: torch.Tensor, e: TensorEntry, staging: bytearray) -> None:
    import torch

    flat = target.view(-1) if target.is_contiguous() else torch.empty(target.numel(), dtype=target.dtype,
                                                                      device=target.device)
    itemsize = target.element_size()
    chunk = max(itemsize, len(staging) // itemsize * itemsize)
    view = memoryview(staging)
    done = 0
    while done < e.nbytes:
        n = min(chunk, e.nbytes - done)
        _read_into(f, view[:n], TensorEntry(e.name, e.dtype, e.shape, e.start + done, n), n)
        src = torch.frombuffer(staging, dtype=torch.uint8, count=n).view(target.dtype)
        flat[done // itemsize:(done + n) // itemsize].copy_(src)  # host to device on a GPU
        done += n
    if not target.is_contiguous():
        target.copy_(flat.view(target.shape))


class SwapPlan:
    """Full weights checked against a model and ready to be copied in (see the module docstring).

    Building it opens the files (paths, or open binary files handed over), reads their headers and checks them
    against ``model``: a ``BackendError`` naming what differs when they do not fit, nothing touched. ``run()`` then
    copies the weights in; an error there (a file cut short, a read error) leaves the model half-updated, which the
    caller must treat as broken. ``close()`` closes the files opened here."""

    def __init__(self, model: Any, files: Sequence[str | Path | IO[bytes]], model_id: str) -> None:
        self.model_id = model_id
        self._opened: list[IO[bytes]] = []
        try:
            handles = []
            for f in files:
                if isinstance(f, (str, Path)):
                    f = open(f, "rb")  # noqa: SIM115 - closed by close()
                    self._opened.append(f)
                handles.append(f)
            self.files = [(h, read_header(h, str(getattr(h, "name", "a weights file")))) for h in handles]
            self.targets = unique_state(model)
            problems = weights_problems(self.targets, [e for _, entries in self.files for e in entries])
        except BaseException:
            self.close()
            raise
        if problems:
            self.close()
            shown = "; ".join(problems[:4]) + (f"; and {len(problems) - 4} more" if len(problems) > 4 else "")
            raise BackendError(f"these weights do not fit {model_id}: {shown}. They were written for another model "
                               f"(or another transformers version's names): give every actor the learner's model")
        self.nbytes = sum(e.nbytes for _, entries in self.files for e in entries)

    def run(self, version: str, staging_bytes: int = STAGING_BYTES) -> int:
        """Copy the weights of ``version`` in (see ``copy_in``); returns the bytes copied. A ``BackendError`` that
        says the model is now a mix of two versions when a read fails half-way."""
        try:
            return copy_in(self.targets, self.files, staging_bytes)
        except (OSError, BackendError) as exc:
            raise BackendError(f"copying full weights {version} into {self.model_id} failed half-way ({exc}); the "
                               f"model holds a mix of two versions and will not generate: restart this process"
                               ) from exc

    def close(self) -> None:
        for f in self._opened:
            f.close()
        self._opened = []

    def __enter__(self) -> SwapPlan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

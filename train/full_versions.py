"""Full-weight versions: an online session that fine-tunes every weight (``model.finetune=full``) publishes each
version as the model's weights, and actors copy a version into the model they have, in place.

A full-weight version is a folder of the adapter store (``train.adapters``, the same ``manifest.json``, sha256 and
atomic rename; its ``AdapterRef`` says ``kind: full``)::

    v000003/config.json              the model's config: from_pretrained(folder) builds the model from it too
    v000003/model.safetensors        the weights, in the model's dtype, named by its state_dict (tied weights once)
    v000003/manifest.json

A model larger than ``SHARD_BYTES`` is written as ``model-00001-of-0000N.safetensors`` files plus the usual
``model.safetensors.index.json``. Writing goes shard by shard through ``safetensors``' ``save_file``: a model on the
CPU is written straight from its tensors, one on a GPU is copied to the host a shard at a time, so writing needs at
most one shard of host memory. No pickle is written or read.

Loading (``swap_verified``) opens every weights file once, hashes it through that open file, and only when every
file matches the announcement hands the same open files to the backend's ``load_weights``, which checks the tensor
names, shapes and dtypes against its model and copies the bytes in through one small staging buffer
(``policy.backends.swap``). A corrupt or altered file is therefore refused before any weight changes, and a file
renamed over between the check and the load cannot slip in (the open file is the one that was hashed). What is not
covered: a process with write access to the store rewriting a file in place during the swap (it could as well
rewrite the code).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from pathlib import Path
from typing import IO, Any

from train.errors import AdapterChecksumError, AdapterError

log = logging.getLogger(__name__)

__all__ = ["SHARD_BYTES", "WEIGHTS_SUFFIX", "swap_verified", "write_full_weights"]

SHARD_BYTES = 1 << 30
"""Weights per file (1 GiB): the host memory writing a version from a GPU needs, and a file size HTTP serves well."""
WEIGHTS_SUFFIX = ".safetensors"
_CHUNK = 1 << 20


def write_full_weights(model: Any, folder: str | Path, *, shard_bytes: int = SHARD_BYTES) -> Path:
    """Write ``model``'s weights (and its config) into the new folder ``folder``; returns it."""
    from safetensors.torch import save_file

    from policy.backends.swap import unique_state

    folder = Path(folder)
    folder.mkdir(parents=True)
    state = unique_state(model)
    shards: list[list[str]] = [[]]
    size = 0
    for name, t in state.items():
        nbytes = t.numel() * t.element_size()
        if shards[-1] and size + nbytes > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    names = (["model.safetensors"] if len(shards) == 1 else
             [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))])
    for file_name, shard in zip(names, shards):
        # contiguous() and cpu() return the tensor itself when it is both already: nothing is copied on a CPU
        save_file({n: state[n].detach().contiguous().cpu() for n in shard}, str(folder / file_name),
                  metadata={"format": "pt"})
    if len(shards) > 1:
        total = sum(t.numel() * t.element_size() for t in state.values())
        index = {"metadata": {"total_size": total},
                 "weight_map": {n: f for f, shard in zip(names, shards) for n in shard}}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=1), encoding="utf-8")
    model.config.to_json_file(str(folder / "config.json"))
    return folder


def swap_verified(backend: Any, version: str, paths: dict[str, Path], hashes: dict[str, str]) -> tuple[float, float]:
    """Copy the weights files among ``paths`` (name -> confined path) into ``backend`` once every one of them hashes
    to ``hashes[name]``; returns (verify seconds, load seconds). ``AdapterChecksumError`` when a file is missing,
    unreadable or altered (nothing is loaded then); the backend's ``BackendError`` when the weights do not fit."""
    weights = sorted(name for name in paths if name.endswith(WEIGHTS_SUFFIX))
    if not weights:
        raise AdapterError(f"full-weight version {version} lists no {WEIGHTS_SUFFIX} file: {sorted(paths)}")
    t0 = time.perf_counter()
    handles: list[IO[bytes]] = []
    try:
        for name in weights:
            try:
                f = open(paths[name], "rb")  # noqa: SIM115 - closed in the finally below
            except OSError as exc:
                raise AdapterChecksumError(f"full-weight version {version}: {paths[name]} cannot be read "
                                           f"({exc.strerror or exc})") from exc
            handles.append(f)
            actual = _sha256(f)
            if actual != hashes[name]:
                raise AdapterChecksumError(
                    f"full-weight version {version}: {paths[name]} has sha256 {actual[:12]}..., the announcement says "
                    f"{hashes[name][:12]}...; the file is corrupt or was changed after publishing: not loading it")
        t1 = time.perf_counter()
        backend.load_weights(handles, version)
        return t1 - t0, time.perf_counter() - t1
    finally:
        for f in handles:
            f.close()


def _sha256(f: IO[bytes]) -> str:
    h = hashlib.sha256()
    f.seek(0)
    while chunk := f.read(_CHUNK):
        h.update(chunk)
    return h.hexdigest()

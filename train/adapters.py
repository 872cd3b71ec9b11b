"""Versioned adapters for online sessions: the learner publishes adapter vN; actors load it only after its bytes
check out.

Layout under ``<run>/adapters/``::

    v000003/adapter_config.json          a standard peft folder (train.checkpoint.save_adapter)
    v000003/adapter_model.safetensors
    v000003/manifest.json                {"format": 1, "version": "learner@3", "step": 3,
                                          "files": {name: sha256}, "sha256": digest, "written_at": t}

Publishing writes the folder under a temporary name, fsyncs every file and renames it into place, so a reader
never sees half a version. The adapter's digest is the sha256 of the sorted ``name sha256`` lines of its files
(the manifest itself excluded); the announcement that tells actors about vN (``AdapterRef``) carries it.

``verify_adapter(ref)`` recomputes every file's hash and compares it with the announcement: a missing, extra-short
or altered file raises ``AdapterChecksumError`` and the adapter must not be loaded. The check is against the
announcement, not the manifest next to the files, so a corrupted folder cannot vouch for itself.

Only LoRA adapters are published: a hot swap replaces the adapter of a loaded base model, while full fine-tuning
would need the whole model reloaded.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from train.errors import AdapterChecksumError, AdapterError

if TYPE_CHECKING:
    from train.trainable import Trainable

log = logging.getLogger(__name__)

__all__ = ["AdapterChecksumError", "AdapterError", "AdapterRef", "AdapterStore", "LoadTimes", "adapter_digest",
           "load_verified", "unload_adapters", "verify_adapter"]

FORMAT = 1
MANIFEST = "manifest.json"
_FOLDER = re.compile(r"^v(\d{6,})$")
_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class AdapterRef:
    """The announcement of one published adapter version (what the ``policy`` topic carries)."""

    version: str
    """``<adapter name>@<updates>``, as ``Learner.adapter_version`` names it and samples record it."""
    step: int
    """Learner updates behind this version."""
    path: str
    """The version's folder (a peft adapter folder plus ``manifest.json``)."""
    sha256: str
    """Digest over the folder's files (see the module docstring)."""
    files: dict[str, str] = field(default_factory=dict)
    """File name -> sha256 of each file."""
    written_at: float = 0.0
    """Wall time (``time.time()``) when the folder was renamed into place: "vN written"."""

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": self.version, "step": self.step, "path": self.path,
                "sha256": self.sha256, "files": dict(self.files), "written_at": self.written_at}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AdapterRef:
        if data.get("format") != FORMAT:
            raise AdapterError(f"adapter announcement format {data.get('format')!r}; this handeye reads {FORMAT}")
        try:
            return cls(version=str(data["version"]), step=int(data["step"]), path=str(data["path"]),
                       sha256=str(data["sha256"]), files={str(k): str(v) for k, v in data["files"].items()},
                       written_at=float(data.get("written_at", 0.0)))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise AdapterError(f"malformed adapter announcement ({type(exc).__name__}: {exc}): {data!r:.200}") from exc


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _digest(files: dict[str, str]) -> str:
    return hashlib.sha256("".join(f"{name} {files[name]}\n" for name in sorted(files)).encode()).hexdigest()


def adapter_digest(folder: str | Path) -> tuple[str, dict[str, str]]:
    """(digest, {file name: sha256}) of the files directly in ``folder``, the manifest left out."""
    folder = Path(folder)
    files = {p.name: _file_sha256(p) for p in sorted(folder.iterdir()) if p.is_file() and p.name != MANIFEST}
    if not files:
        raise AdapterError(f"{folder} holds no files to publish")
    return _digest(files), files


def verify_adapter(ref: AdapterRef) -> Path:
    """The adapter folder of ``ref`` once every file matches the announced hashes; ``AdapterChecksumError`` if not.

    Checks that the announced file list hashes to ``ref.sha256`` (a tampered announcement), that every announced
    file exists with its hash, and that no file the loader would read is unannounced."""
    folder = Path(ref.path)
    if _digest(ref.files) != ref.sha256:
        raise AdapterChecksumError(f"adapter {ref.version}: the announced file hashes do not add up to its sha256 "
                                   f"{ref.sha256[:12]}; the announcement is corrupt")
    if not folder.is_dir():
        raise AdapterChecksumError(f"adapter {ref.version}: folder {folder} is missing (pruned or never written)")
    present = {p.name for p in folder.iterdir() if p.is_file() and p.name != MANIFEST}
    extra = present - set(ref.files)
    if extra:
        raise AdapterChecksumError(f"adapter {ref.version}: {folder} holds files the announcement does not list: "
                                   f"{sorted(extra)}")
    for name, expected in sorted(ref.files.items()):
        path = folder / name
        if not path.is_file():
            raise AdapterChecksumError(f"adapter {ref.version}: {path} is missing")
        actual = _file_sha256(path)
        if actual != expected:
            raise AdapterChecksumError(
                f"adapter {ref.version}: {path} has sha256 {actual[:12]}..., the announcement says {expected[:12]}...; "
                f"the file is corrupt or was changed after publishing: not loading it")
    return folder


def _fsync_tree(folder: Path) -> None:
    for p in folder.iterdir():
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class AdapterStore:
    """Published adapter versions of one run, under ``root`` (``<run>/adapters``); the newest ``keep`` are kept.

    ``publish(learner)`` writes the learner's current adapter as version ``learner.adapter_version``;
    ``publish_folder(src, version, step)`` publishes an adapter folder written elsewhere (moved in).
    """

    def __init__(self, root: str | Path, *, keep: int = 4) -> None:
        if keep < 1:
            raise ValueError(f"keep must be at least 1 (the newest version is always kept), got {keep}")
        self.root = Path(root)
        self.keep = keep
        self.root.mkdir(parents=True, exist_ok=True)

    def folder(self, step: int) -> Path:
        return self.root / f"v{step:06d}"

    def publish(self, learner: Trainable) -> AdapterRef:
        """Write the learner's adapter as version ``learner.adapter_version`` (step ``learner.steps``)."""
        from train.checkpoint import save_adapter

        if learner.finetune != "lora":
            raise AdapterError("online sessions publish LoRA adapters; full fine-tuning (model.finetune=full) would "
                               "need every actor to reload the whole model: use model.finetune=lora")
        tmp = self.root / f".build-{learner.steps:06d}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        written = save_adapter(learner, tmp)
        try:
            return self.publish_folder(written, learner.adapter_version, learner.steps)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def publish_folder(self, src: str | Path, version: str, step: int) -> AdapterRef:
        """Move the adapter folder ``src`` into the store as ``version`` (step ``step``), atomically."""
        src = Path(src)
        final = self.folder(step)
        tmp = self.root / f".tmp-v{step:06d}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(src, tmp)
        digest, files = adapter_digest(tmp)
        if final.exists():  # a resumed run publishes its start version again
            shutil.rmtree(final)
        written_at = time.time()  # the rename below makes vN visible, a few milliseconds later
        manifest = {"format": FORMAT, "version": version, "step": step, "files": files, "sha256": digest,
                    "written_at": written_at}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
        _fsync_tree(tmp)
        os.replace(tmp, final)
        ref = AdapterRef(version=version, step=step, path=str(final), sha256=digest, files=files,
                         written_at=written_at)
        self.prune()
        log.info("published adapter %s (%s...) at %s", version, digest[:12], final)
        return ref

    def versions(self) -> list[Path]:
        """Published version folders, oldest first."""
        return sorted((p for p in self.root.iterdir() if p.is_dir() and _FOLDER.match(p.name)),
                      key=lambda p: int(_FOLDER.match(p.name)[1]))  # type: ignore[index]

    def latest(self) -> AdapterRef | None:
        """The newest published version read back from its manifest (None when there is none)."""
        for folder in reversed(self.versions()):
            try:
                data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
                return AdapterRef(version=data["version"], step=int(data["step"]), path=str(folder),
                                  sha256=data["sha256"], files=dict(data["files"]),
                                  written_at=float(data.get("written_at", 0.0)))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("adapter folder %s has no readable manifest (%s); skipped", folder, exc)
        return None

    def prune(self) -> None:
        for old in self.versions()[:-self.keep]:
            shutil.rmtree(old, ignore_errors=True)


# -- the actors' side: load a version only after its bytes check out ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoadTimes:
    """Seconds spent loading one version into a backend."""

    verify_s: float
    """Reading and hashing the files."""
    load_s: float
    """Injecting the adapter into the loaded base model and switching to it."""


def load_verified(backend: Any, ref: AdapterRef, *, unload_others: bool = True) -> LoadTimes:
    """Load ``ref`` into a ``TransformersBackend`` and make it active, only if its files match the announcement.

    The files are read once into memory, hashed, and the loader reads those same bytes from a private copy, so a
    file changed between the check and the load cannot slip in. ``AdapterChecksumError`` when they do not match
    (nothing is loaded); the backend's ``BackendError`` when the adapter does not fit the model. With
    ``unload_others`` the previously loaded versions are removed from the backend (the base model stays)."""
    import tempfile

    t0 = time.perf_counter()
    folder = Path(ref.path)
    if _digest(ref.files) != ref.sha256:
        raise AdapterChecksumError(f"adapter {ref.version}: the announced file hashes do not add up to its sha256 "
                                   f"{ref.sha256[:12]}; the announcement is corrupt")
    blobs: dict[str, bytes] = {}
    for name, expected in sorted(ref.files.items()):
        try:
            data = (folder / name).read_bytes()
        except OSError as exc:
            raise AdapterChecksumError(f"adapter {ref.version}: {folder / name} cannot be read "
                                       f"({exc.strerror or exc})") from exc
        actual = hashlib.sha256(data).hexdigest()
        if actual != expected:
            raise AdapterChecksumError(
                f"adapter {ref.version}: {folder / name} has sha256 {actual[:12]}..., the announcement says "
                f"{expected[:12]}...; the file is corrupt or was changed after publishing: not loading it")
        blobs[name] = data
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="handeye-adapter-") as tmp:
        for name, data in blobs.items():
            (Path(tmp) / name).write_bytes(data)
        backend.load_adapter(tmp, ref.version)
    if unload_others:
        unload_adapters(backend, keep=ref.version)
    return LoadTimes(verify_s=t1 - t0, load_s=time.perf_counter() - t1)


def unload_adapters(backend: Any, *, keep: str) -> list[str]:
    """Remove every loaded adapter version but ``keep`` (and the active one) from a ``TransformersBackend``;
    returns the removed names. An online session loads a new version after every update; without this the old
    ones would pile up in memory."""
    removed = []
    for name in backend.loaded_adapters:
        if name not in (keep, backend.adapter_version):
            backend.unload_adapter(name)
            removed.append(name)
    return removed

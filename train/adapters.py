"""Versioned adapters (and full weights) for online sessions: the learner publishes version vN; actors load it only
after its bytes check out.

Layout under ``<run>/adapters/``::

    v000003/adapter_config.json          a standard peft folder (train.checkpoint.save_adapter)
    v000003/adapter_model.safetensors
    v000003/manifest.json                {"format": 1, "version": "learner@3", "step": 3,
                                          "files": {name: sha256}, "sha256": digest, "written_at": t}

Publishing writes the folder under a temporary name, fsyncs every file and renames it into place, so a reader
never sees half a version. The adapter's digest is the sha256 of the sorted ``name sha256`` lines of its files
(the manifest itself excluded); the announcement that tells actors about vN (``AdapterRef``) carries it.

``verify_adapter(ref, root=...)`` recomputes every file's hash and compares it with the announcement: a missing,
extra-short or altered file raises ``AdapterChecksumError`` and the adapter must not be loaded. The check is against
the announcement, not the manifest next to the files, so a corrupted folder cannot vouch for itself.

An announcement is data from another process, so where it points is checked before anything is read or written
(``AdapterPathError``): its folder must lie inside the store the reader trusts (``root``, ``<run>/adapters``), its
file names must be plain names inside that folder (no separator, no ``..``, no absolute path, no NUL), and every
path is resolved, so a symlink leading out of the folder is refused too. Otherwise ``load_verified`` would write
``../x`` outside its private copy, and the verifier would hash any file on the machine.

A version has a kind (``VersionKind``): a LoRA ``adapter`` (a peft folder, swapped in as a new adapter of the
loaded base model) or ``full`` weights (``model.finetune=full``: the model's safetensors and config, copied into the
loaded model in place; ``train.full_versions``). Both go through this store, its manifest, its checks and
``load_verified``; an announcement says its kind only when it is ``full``, so an adapter's announcement (and its
signature) is the same as before kinds existed. Full weights are big (bytes = parameters x 2 in bf16), so a store
of full versions keeps only ``FULL_VERSIONS_KEPT`` of them.
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
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from train.errors import AdapterChecksumError, AdapterError, AdapterPathError
from train.full_versions import swap_verified, write_full_weights

if TYPE_CHECKING:
    from train.trainable import Trainable

log = logging.getLogger(__name__)

__all__ = ["FULL_VERSIONS_KEPT", "AdapterChecksumError", "AdapterError", "AdapterPathError", "AdapterRef",
           "AdapterStore", "LoadTimes", "VersionKind", "adapter_digest", "check_digest", "confined_files",
           "load_verified", "unload_adapters", "verify_adapter"]

FORMAT = 1
MANIFEST = "manifest.json"
_FOLDER = re.compile(r"^v(\d{6,})$")
_CHUNK = 1 << 20
FULL_VERSIONS_KEPT = 2
"""Full-weight versions a store keeps (the learner's, and each fleet actor's): the newest, which actors load now,
and the one before, which a slower actor may still be fetching or reading (older ones are never loaded: an actor
always jumps to the newest). At 16 GB a version for a 7B model in bf16 that is 32 GB of disk, against 64 GB for the
four adapter versions an adapter store keeps by default (``OnlineConfig.keep_adapters``)."""


class VersionKind(str, Enum):
    """What a published version holds."""

    ADAPTER = "adapter"
    """A LoRA adapter (peft folder), swapped in as a new adapter of the loaded base model."""
    FULL = "full"
    """Every weight of the model (``model.finetune=full``), copied into the loaded model in place."""


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
    kind: VersionKind = VersionKind.ADAPTER
    """An adapter or full weights."""
    sizes: dict[str, int] = field(default_factory=dict)
    """File name -> bytes of each file, as the fleet learner announces them (``agent.fleet.versions`` reads no byte
    past them); empty in a store's manifests, which the files themselves measure."""

    @property
    def title(self) -> str:
        """"adapter learner@3" or "full weights learner@3", for messages."""
        return f"{'adapter' if self.kind is VersionKind.ADAPTER else 'full weights'} {self.version}"

    def to_json(self) -> dict[str, Any]:
        data = {"format": FORMAT, "version": self.version, "step": self.step, "path": self.path,
                "sha256": self.sha256, "files": dict(self.files), "written_at": self.written_at}
        if self.kind is not VersionKind.ADAPTER:  # an adapter's announcement stays what it was before kinds
            data["kind"] = self.kind.value
        if self.sizes:
            data["sizes"] = dict(self.sizes)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AdapterRef:
        if data.get("format") != FORMAT:
            raise AdapterError(f"adapter announcement format {data.get('format')!r}; this handeye reads {FORMAT}")
        try:
            return cls(version=str(data["version"]), step=int(data["step"]), path=str(data["path"]),
                       sha256=str(data["sha256"]), files={str(k): str(v) for k, v in data["files"].items()},
                       written_at=float(data.get("written_at", 0.0)),
                       kind=VersionKind(data.get("kind", VersionKind.ADAPTER.value)),
                       sizes=_sizes(data.get("sizes") or {}))
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise AdapterError(f"malformed adapter announcement ({type(exc).__name__}: {exc}): {data!r:.200}") from exc


def _sizes(data: dict[str, Any]) -> dict[str, int]:
    sizes = {str(k): v for k, v in data.items()}
    if not all(type(v) is int and v >= 0 for v in sizes.values()):
        raise ValueError("file sizes must be integers of at least 0")
    return sizes


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


def _name_problem(name: str) -> str:
    """Why ``name`` is not a plain file name ("" when it is one)."""
    if not name:
        return "is empty"
    if "\0" in name:
        return "contains a NUL byte"
    if name.startswith("/") or Path(name).is_absolute():
        return "is an absolute path"
    if "/" in name or "\\" in name or os.sep in name:
        return "contains a path separator"
    if name in (".", ".."):
        return "is a relative step (. or ..)"
    return ""


def confined_files(ref: AdapterRef, root: str | Path) -> tuple[Path, dict[str, Path]]:
    """(folder, {name: resolved path}) of ``ref``, every path checked to lie inside the store ``root``.

    ``AdapterPathError`` when the folder is not inside ``root``, a file name is not a plain name, or a path leads
    (through a symlink) out of the folder; nothing has been read then. Files need not exist yet: a missing file is
    the checksum check's to report."""
    trusted = Path(root).resolve()
    folder = None if "\0" in ref.path else Path(ref.path).resolve()
    if folder is None or not folder.is_relative_to(trusted) or folder == trusted:
        raise AdapterPathError(f"adapter {ref.version}: its folder {ref.path!r} is not inside the adapter store "
                               f"{trusted} this process reads from; the announcement is corrupt or forged: not "
                               f"reading it")
    paths: dict[str, Path] = {}
    for name in sorted(ref.files):
        if why := _name_problem(name):
            raise AdapterPathError(f"adapter {ref.version}: the announced file name {name!r} {why}; an adapter's "
                                   f"files are plain names inside its folder: not reading or writing anything for it")
        path = (folder / name).resolve()
        if path.parent != folder:
            raise AdapterPathError(f"adapter {ref.version}: {folder / name} leads to {path}, outside the adapter "
                                   f"folder {folder} (a symlink): not reading it")
        paths[name] = path
    return folder, paths


def check_digest(ref: AdapterRef) -> None:
    """``AdapterChecksumError`` unless the announced file hashes add up to the announced sha256."""
    if _digest(ref.files) != ref.sha256:
        raise AdapterChecksumError(f"adapter {ref.version}: the announced file hashes do not add up to its sha256 "
                                   f"{ref.sha256[:12]}; the announcement is corrupt")


def verify_adapter(ref: AdapterRef, *, root: str | Path) -> Path:
    """The adapter folder of ``ref`` once every file matches the announced hashes; ``AdapterChecksumError`` if not.

    Checks that the folder and its files lie inside the store ``root`` (``AdapterPathError``, before anything is
    read), that the announced file list hashes to ``ref.sha256`` (a tampered announcement), that every announced
    file exists with its hash, and that no file the loader would read is unannounced."""
    folder, paths = confined_files(ref, root)
    check_digest(ref)
    if not folder.is_dir():
        raise AdapterChecksumError(f"adapter {ref.version}: folder {folder} is missing (pruned or never written)")
    present = {p.name for p in folder.iterdir() if p.is_file() and p.name != MANIFEST}
    extra = present - set(ref.files)
    if extra:
        raise AdapterChecksumError(f"adapter {ref.version}: {folder} holds files the announcement does not list: "
                                   f"{sorted(extra)}")
    for name, expected in sorted(ref.files.items()):
        path = paths[name]
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
    """Published versions of one run, under ``root`` (``<run>/adapters``); the newest ``keep`` are kept (full
    weights: at most ``FULL_VERSIONS_KEPT``).

    ``publish(learner)`` writes the learner's current adapter, or with full fine-tuning its weights, as version
    ``learner.adapter_version``; ``publish_folder(src, version, step)`` publishes a folder written elsewhere.
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
        """Write the learner's adapter (LoRA) or weights (full fine-tuning) as version ``learner.adapter_version``
        (step ``learner.steps``)."""
        from train.checkpoint import save_adapter

        tmp = self.root / f".build-{learner.steps:06d}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            if learner.finetune == "lora":
                written, kind = save_adapter(learner, tmp), VersionKind.ADAPTER
            else:  # the weights, in the model's dtype, a shard at a time
                written, kind = write_full_weights(learner.backend.model, tmp / "weights"), VersionKind.FULL
            return self.publish_folder(written, learner.adapter_version, learner.steps, kind=kind, move=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def publish_folder(self, src: str | Path, version: str, step: int, *, kind: VersionKind = VersionKind.ADAPTER,
                       move: bool = False) -> AdapterRef:
        """Put the folder ``src`` into the store as ``version`` (step ``step``), atomically: copied, or with
        ``move`` moved (``src`` must then be on the store's file system; full weights are not copied twice)."""
        src = Path(src)
        final = self.folder(step)
        tmp = self.root / f".tmp-v{step:06d}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        if move:
            os.replace(src, tmp)
        else:
            shutil.copytree(src, tmp)
        digest, files = adapter_digest(tmp)
        if final.exists():  # a resumed run publishes its start version again
            shutil.rmtree(final)
        written_at = time.time()  # the rename below makes vN visible, a few milliseconds later
        ref = AdapterRef(version=version, step=step, path=str(final), sha256=digest, files=files,
                         written_at=written_at, kind=kind)
        manifest = {k: v for k, v in ref.to_json().items() if k != "path"}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
        _fsync_tree(tmp)
        os.replace(tmp, final)
        self.prune(min(self.keep, FULL_VERSIONS_KEPT) if kind is VersionKind.FULL else self.keep)
        log.info("published %s (%s...) at %s", ref.title, digest[:12], final)
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
                                  written_at=float(data.get("written_at", 0.0)),
                                  kind=VersionKind(data.get("kind", VersionKind.ADAPTER.value)))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("adapter folder %s has no readable manifest (%s); skipped", folder, exc)
        return None

    def prune(self, keep: int | None = None) -> None:
        """Remove all but the newest ``keep`` versions (default: the store's ``keep``)."""
        for old in self.versions()[:-(keep or self.keep)]:
            shutil.rmtree(old, ignore_errors=True)


# -- the actors' side: load a version only after its bytes check out ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoadTimes:
    """Seconds spent loading one version into a backend."""

    verify_s: float
    """Reading and hashing the files."""
    load_s: float
    """Injecting the adapter into the loaded base model and switching to it (full weights: copying them in)."""


def load_verified(backend: Any, ref: AdapterRef, *, root: str | Path, unload_others: bool = True) -> LoadTimes:
    """Load ``ref`` into a ``TransformersBackend`` and make it active, only if its files match the announcement.

    ``root`` is the adapter store this process trusts: a folder or file outside it is refused with
    ``AdapterPathError`` before anything is read (see the module docstring). The files are read once into memory,
    hashed, and the loader reads those same bytes from a private copy, so a file changed between the check and the
    load cannot slip in. ``AdapterChecksumError`` when they do not match (nothing is loaded); the backend's
    ``BackendError`` when the adapter does not fit the model. With ``unload_others`` the previously loaded versions
    are removed from the backend (the base model stays).

    Full weights (``ref.kind`` full) are too big to hold twice in memory: each file is hashed through an open file
    and the same open files are copied into the loaded model in place (``train.full_versions.swap_verified``)."""
    import tempfile

    t0 = time.perf_counter()
    _, paths = confined_files(ref, root)
    check_digest(ref)
    if ref.kind is VersionKind.FULL:
        _, load_s = swap_verified(backend, ref.version, paths, ref.files)
        return LoadTimes(verify_s=time.perf_counter() - t0 - load_s, load_s=load_s)
    blobs: dict[str, bytes] = {}
    for name, expected in sorted(ref.files.items()):
        try:
            data = paths[name].read_bytes()
        except OSError as exc:
            raise AdapterChecksumError(f"adapter {ref.version}: {paths[name]} cannot be read "
                                       f"({exc.strerror or exc})") from exc
        actual = hashlib.sha256(data).hexdigest()
        if actual != expected:
            raise AdapterChecksumError(
                f"adapter {ref.version}: {paths[name]} has sha256 {actual[:12]}..., the announcement says "
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

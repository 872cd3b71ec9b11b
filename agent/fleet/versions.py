"""Adapter versions to other machines: the learner serves its adapter store over HTTP, actors fetch and check.

Why HTTP and not chunks over the bus: a version is tens of megabytes for a LoRA adapter and gigabytes for full
weights; over MQTT it would sit in every actor's queue and the broker's memory (retained), be copied to every
subscriber whether it needs it or not, and hold up the samples behind it. Over HTTP each actor fetches once, when it
needs it, straight from the learner, and the bus carries only the signed announcement (a few hundred bytes). The
announcement's folder is then a URL (``http://learner:8765/v000042``) and its file hashes say what the bytes must be,
so the server needs no trust: a proxy or a cache in between can corrupt a file but not slip one in.

- ``VersionServer(root)`` serves ``root/vNNNNNN/<file>`` read-only (a thread, ``ThreadingHTTPServer``): only folder
  names of that form and plain file names, never a path outside ``root`` (symlinks resolved); everything else 404.
  It serves whatever the store holds, an adapter or a full-weight folder (``kind: full``: the model's config and
  safetensors files, parameters x 2 bytes in bf16, e.g. 16.6 GB for a 7B model, fetched once per actor).
- ``fetch_version(ref, root)`` downloads the announced files of ``ref`` into the actor's own store ``root`` (under a
  temporary name, renamed when whole), checking each file's sha256 as it arrives (``AdapterChecksumError`` at the first
  mismatch, nothing kept), and returns the ref with its folder there. It reads no byte past the size the signed
  announcement states for each file (``AdapterRef.sizes``): a server that announces a longer ``Content-Length`` is
  refused before the body is read, and one that sends more stops being read at the stated size plus one byte, so a
  hostile or broken server cannot fill the actor's disk; an announcement that states no sizes (an older learner)
  is refused. The actor's store keeps the newest ``keep``
  versions, full-weight ones at most ``FULL_VERSIONS_KEPT`` (the one in memory is not needed on disk). The follower then loads it with
  ``train.adapters.load_verified(..., root=root)``, which checks the bytes again as it reads them once.
  A server that cannot be reached is an ``OSError``: the follower tries again later, keeping its version.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import threading
import urllib.error
import urllib.request
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from train.adapters import FULL_VERSIONS_KEPT, AdapterRef, VersionKind, confined_files
from train.errors import AdapterChecksumError, AdapterError, AdapterPathError, TransportError

log = logging.getLogger(__name__)

_FOLDER = re.compile(r"^v\d{6,}$")
_FILE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,200}$")
_CHUNK = 1 << 20


class VersionServer:
    """Serves an adapter store over HTTP (see the module docstring). ``url`` is what actors are told."""

    def __init__(self, root: str | Path, *, host: str = "0.0.0.0", port: int = 8765, advertise: str = "") -> None:
        self.root = Path(root).resolve()
        self._httpd = ThreadingHTTPServer((host, port), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="version-server", daemon=True)
        bound_host, bound_port = self._httpd.server_address[:2]
        if not advertise:
            shown = bound_host if bound_host not in ("0.0.0.0", "::") else _hostname()
            advertise = f"http://{shown}:{bound_port}"
        self.url = advertise.rstrip("/")
        self.served = 0
        """Files served so far."""

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def start(self) -> VersionServer:
        self._thread.start()
        log.info("serving adapter versions from %s at %s", self.root, self.url)
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> VersionServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def file_for(self, url_path: str) -> Path | None:
        """The file a request path names, or None when it names nothing this server may serve."""
        parts = url_path.split("?", 1)[0].strip("/").split("/")
        if len(parts) != 2 or not _FOLDER.match(parts[0]) or not _FILE.match(parts[1]):
            return None
        path = (self.root / parts[0] / parts[1]).resolve()
        if path.parent != self.root / parts[0] or not path.is_file():
            return None
        return path

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, fmt: str, *args: Any) -> None:
                log.debug("%s " + fmt, self.address_string(), *args)

            def do_GET(self) -> None:
                path = server.file_for(self.path)
                if path is None:
                    self.send_error(404, "no such version file")
                    return
                try:
                    size = path.stat().st_size
                    with open(path, "rb") as f:
                        self.send_response(200)
                        self.send_header("Content-Type", "application/octet-stream")
                        self.send_header("Content-Length", str(size))
                        self.end_headers()
                        server.served += 1
                        shutil.copyfileobj(f, self.wfile, _CHUNK)
                except FileNotFoundError:  # pruned between the check and the read
                    self.send_error(404, "no such version file")
                except (BrokenPipeError, ConnectionResetError):
                    pass

        return Handler


def _hostname() -> str:
    import socket

    return socket.getfqdn() or socket.gethostname()


def sized(ref: AdapterRef) -> AdapterRef:
    """``ref`` (a version in this machine's store) with the size of each of its files, what its announcement states
    (``fetch_version`` reads no more); a ref that has them is returned as it is."""
    if ref.sizes:
        return ref
    try:
        return replace(ref, sizes={name: (Path(ref.path) / name).stat().st_size for name in ref.files})
    except OSError as exc:
        raise TransportError(f"cannot announce {ref.title}: its file {exc.filename} is not in the store "
                             f"({exc.strerror})") from None


def is_remote(ref: AdapterRef) -> bool:
    return ref.path.startswith(("http://", "https://"))


def fetch_version(ref: AdapterRef, root: str | Path, *, timeout_s: float = 60.0, keep: int = 3) -> AdapterRef:
    """``ref`` with its files in the local store ``root`` (see the module docstring). A ref whose folder is not a URL
    is returned as it is (one machine, or a shared file system)."""
    if not is_remote(ref):
        return ref
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    name = ref.path.rstrip("/").rsplit("/", 1)[-1]
    if not _FOLDER.match(name):
        raise AdapterPathError(f"adapter {ref.version}: the announced URL {ref.path!r} does not end in a version "
                               f"folder (vNNNNNN); not fetching it")
    local = replace(ref, path=str(root / name))
    folder, paths = confined_files(local, root)  # plain file names only, before anything is written
    unsized = sorted(set(ref.files) - set(ref.sizes))
    if unsized:
        raise AdapterError(f"adapter {ref.version}: the announcement states no size for {', '.join(unsized)[:200]}, "
                           f"so its download would have no bound; not fetching it (run the same handeye on the "
                           f"learner)")
    part = root / f".part-{name}-{os.getpid()}"
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir()
    try:
        for file_name, expected in sorted(ref.files.items()):
            _download(f"{ref.path.rstrip('/')}/{file_name}", part / file_name, expected, ref.sizes[file_name],
                      ref.version, timeout_s)
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(part, folder)
    finally:
        shutil.rmtree(part, ignore_errors=True)
    _prune(root, min(keep, FULL_VERSIONS_KEPT) if ref.kind is VersionKind.FULL else keep)
    log.info("fetched %s from %s (%d files)", ref.title, ref.path, len(paths))
    return local


def _download(url: str, dest: Path, expected: str, size: int, version: str, timeout_s: float) -> None:
    """``url`` into ``dest``: at most ``size`` bytes (one more is read to see that it ends there), its sha256
    ``expected``."""
    h, got = hashlib.sha256(), 0
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response, open(dest, "wb") as out:  # noqa: S310
            declared = response.headers.get("Content-Length")
            if declared is not None and declared.isdigit() and int(declared) > size:
                raise AdapterChecksumError(f"adapter {version}: {url} is {declared} bytes long, the announcement "
                                           f"states {size}; not reading it")
            while got <= size and (chunk := response.read(min(_CHUNK, size + 1 - got))):
                got += len(chunk)
                h.update(chunk)
                out.write(chunk)
        if got > size:
            raise AdapterChecksumError(f"adapter {version}: {url} sent more than the {size} bytes the announcement "
                                       f"states; stopped reading there, not loading it")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:  # pruned on the learner (a newer version is out) or never there
            raise AdapterChecksumError(f"adapter {version}: {url} is not on the learner's server (404): pruned or "
                                       f"never published") from None
        raise OSError(f"{url}: HTTP {exc.code} {exc.reason}") from None
    if h.hexdigest() != expected:
        raise AdapterChecksumError(f"adapter {version}: {url} has sha256 {h.hexdigest()[:12]}..., the announcement "
                                   f"says {expected[:12]}...; corrupt on the way or on the server: not loading it")


def _prune(root: Path, keep: int) -> None:
    folders = sorted((p for p in root.iterdir() if p.is_dir() and _FOLDER.match(p.name)), key=lambda p: int(p.name[1:]))
    for old in folders[:-keep]:
        shutil.rmtree(old, ignore_errors=True)

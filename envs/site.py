"""A local web server for built-in and test pages: 127.0.0.1, a free port, a background thread.

It serves only what lies inside its folder: a request whose path leads out through a symlink, or names something
that is neither a regular file nor a folder (a FIFO would hold the server's thread forever), is answered 404. A
derived task's ``start.page`` is served from the task's folder this way (``envs/derived``)."""

from __future__ import annotations

import functools
import logging
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

log = logging.getLogger(__name__)

PAGES_DIR = Path(__file__).parent / "pages"


class _QuietHandler(SimpleHTTPRequestHandler):
    # Pages are UTF-8; saying so keeps Chinese text readable on pages without a <meta charset>.
    extensions_map = {**SimpleHTTPRequestHandler.extensions_map, ".html": "text/html; charset=utf-8",
                      ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's name
        log.debug("site: " + format, *args)

    def translate_path(self, path: str) -> str:
        local = super().translate_path(path)
        root, target = Path(self.directory).resolve(), Path(local).resolve()
        if not target.is_relative_to(root) or (target.exists() and not (target.is_file() or target.is_dir())):
            log.info("site: refused %s (outside %s, or not a regular file)", path[:200], root)
            return str(root / ".refused" / "missing")
        return local

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-store")
        super().end_headers()


class LocalSite:
    """Serves ``root`` on http://127.0.0.1:<port>/ until closed. Use as a context manager."""

    def __init__(self, root: str | Path = PAGES_DIR, port: int = 0) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise FileNotFoundError(f"cannot serve {self.root}: not a folder")
        handler = functools.partial(_QuietHandler, directory=str(self.root))
        self._server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="handeye-site", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> LocalSite:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

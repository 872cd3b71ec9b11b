"""A local web server for built-in and test pages: 127.0.0.1, a free port, a background thread."""

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

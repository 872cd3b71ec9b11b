"""An event loop on its own thread, for a source whose async objects must stay on one loop (a browser).

Playwright objects belong to the loop that made them, so one private loop drives the browser whoever calls:
synchronous code (the trainer), or code running in its own event loop (it blocks; ``asyncio.to_thread`` keeps that
loop free).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any

__all__ = ["BackgroundLoop"]


class BackgroundLoop:
    """An event loop on its own thread. Playwright objects belong to the loop that made them, so one private loop
    drives the browser whoever calls: synchronous code (the trainer) or a thread of code that has its own loop."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.lock = threading.Lock()

    def run(self, coro: Any, timeout: float) -> Any:
        """Run ``coro`` on the loop and wait for it; hold ``lock`` around calls that must not interleave."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, name=self.name, daemon=True)
            self._thread.start()
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"{self.name}: no result after {timeout:g} s") from None

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop.close()
        self._loop = self._thread = None

"""Stopping cleanly on a signal.

Ctrl-C (SIGINT), SIGTERM (``kill``, a job scheduler, ``docker stop``, systemd) and SIGHUP (the terminal
closed) all ask a command to stop the way Ctrl-C always did: ``agent run`` ends its episode as
``interrupted``, ``agent eval`` and ``agent train --online`` stop cleanly. Without this, SIGTERM and SIGHUP
killed the process on the spot and left its episode without an outcome.

The first such signal starts the clean stop; every handler is then removed, so a second signal gets the
default: a KeyboardInterrupt for Ctrl-C, the immediate end of the process for SIGTERM and SIGHUP (its episode
then reads as crashed, docs/trajectories.md). A signal the process ignores (``nohup`` ignores SIGHUP, a shell
ignores SIGINT for background jobs) stays ignored. The exit code after a clean stop is 128 + the signal's
number, as a shell reports for a process that signal killed (docs/errors.md).
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable, Iterable

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals that mean "stop cleanly"."""


def exit_code(signum: int) -> int:
    """The exit code of a command that stopped cleanly on ``signum``: 130 Ctrl-C, 143 SIGTERM, 129 SIGHUP."""
    return 128 + int(signum)


def signal_name(signum: int) -> str:
    """``Ctrl-C`` for SIGINT, else the signal's name (``SIGTERM``)."""
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


class StopSignals:
    """Handlers on the running event loop for ``signals``: the first one that arrives is kept in ``received``
    and handed to ``on_stop``, and every handler is removed (see the module docstring).

    ``install`` must run inside the loop, in the main thread; elsewhere (a worker thread, a platform without
    loop signal handlers) it installs nothing and signals keep their default effect."""

    def __init__(self, on_stop: Callable[[int], None], signals: Iterable[int] = STOP_SIGNALS) -> None:
        self.on_stop = on_stop
        self.signals = tuple(signals)
        self.received: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._installed: list[int] = []

    def install(self, loop: asyncio.AbstractEventLoop | None = None) -> StopSignals:
        """Install on ``loop`` (default: the running one); returns self."""
        if threading.current_thread() is not threading.main_thread():
            return self
        self._loop = loop or asyncio.get_running_loop()
        for signum in self.signals:
            if signal.getsignal(signum) is signal.SIG_IGN:  # nohup, a background job: the user asked for that
                continue
            try:
                self._loop.add_signal_handler(signum, self._on_signal, signum)
            except (NotImplementedError, RuntimeError, ValueError):
                continue
            self._installed.append(signum)
        return self

    def remove(self) -> None:
        """Remove the handlers still installed (each signal gets its default back)."""
        while self._installed:
            signum = self._installed.pop()
            try:
                assert self._loop is not None
                self._loop.remove_signal_handler(signum)
            except (NotImplementedError, RuntimeError, ValueError):
                pass

    def _on_signal(self, signum: int) -> None:
        if self.received is None:
            self.received = signum
        self.remove()
        self.on_stop(signum)

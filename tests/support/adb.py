"""A private, real adb server for a test (never the user's on 5037), on a free port, ended afterwards."""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support import procs


def adb_binary() -> str:
    """The adb the tests drive: $HANDEYE_TEST_ADB, else the one on PATH, else adbutils' own."""
    import adbutils

    return os.environ.get("HANDEYE_TEST_ADB") or shutil.which("adb") or adbutils.adb_path()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def private_adb_server(home: Path) -> Iterator[int]:
    """An adb server of its own (its keys under ``home``), listening on a free port; its port. Killed on the way
    out, however the block ends."""
    adb, port = adb_binary(), free_port()
    (home / ".android").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "ANDROID_ADB_SERVER_PORT": str(port), "HOME": str(home),
           "ANDROID_USER_HOME": str(home / ".android")}
    procs.run([adb, "-P", str(port), "start-server"], env=env, check=True, timeout=60, capture_output=True)
    try:
        yield port
    finally:
        procs.run([adb, "-P", str(port), "kill-server"], env=env, timeout=60, capture_output=True)

"""A private Xvfb for a test.

- ``-noreset``: by default Xvfb resets itself whenever its last client disconnects, and a client that connects
  during the reset is dropped ("connection reset by peer"); a test that opens, closes and opens again lost that race
  under load.
- ``-displayfd``: the server picks a free display number itself and writes it to a pipe once it accepts
  connections, instead of the test guessing a number from the socket files (two test sessions could pick the same)
  and waiting for the socket file (which comes before the server is ready)."""

from __future__ import annotations

import os
import select
import subprocess
import time

import pytest

from tests.support import procs
from tests.support.installed import need_program


def start_xvfb(size: str = "1024x768", *extra: str, timeout: float = 20.0) -> tuple[subprocess.Popen[bytes], str]:
    """(the Xvfb process, its display ":N"), ready for clients; ``extra``: more Xvfb arguments. Fails the test when
    Xvfb is not installed (scripts/setup.sh installs it) or the server does not come up."""
    binary = need_program("Xvfb", "xvfb")
    read, write = os.pipe()
    try:
        proc = procs.start([binary, "-displayfd", str(write), "-noreset", "-screen", "0", f"{size}x24",
                            "-nolisten", "tcp", *extra], pass_fds=(write,), stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE)
    finally:
        os.close(write)
    got, deadline = b"", time.monotonic() + timeout
    try:
        while not got.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([read], [], [], left)[0]:
                break
            chunk = os.read(read, 64)
            if not chunk:  # the server exited
                break
            got += chunk
    finally:
        os.close(read)
    if not got.strip().isdigit():
        procs.stop(proc, grace=0)
        err = proc.communicate(timeout=5)[1].decode(errors="replace")[-500:]
        pytest.fail(f"Xvfb did not start within {timeout:.0f} s: {err}")
    assert proc.stderr is not None
    proc.stderr.close()  # nothing reads it from here on: a full pipe must not block the server
    return proc, f":{int(got)}"


def stop_xvfb(proc: subprocess.Popen[bytes]) -> None:
    procs.stop(proc)

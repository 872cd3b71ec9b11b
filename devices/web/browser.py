"""Finding a Chromium to drive: the configured path, Playwright's own download, then the system's."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from devices.errors import DeviceUnavailable

#: system browsers tried in order when no path is configured and Playwright has no browser of its own
SYSTEM_BROWSERS = ("chromium", "chromium-browser", "google-chrome-stable", "google-chrome", "chrome")

INSTALL_HINT = (
    "run `make setup` (installs Debian's chromium, or Playwright's on Ubuntu), "
    "or `python -m playwright install --with-deps chromium`, "
    "or point web.browser_path at a Chromium/Chrome executable"
)


def _runs(path: str) -> bool:
    p = Path(path)
    if not (p.is_file() and os.access(p, os.X_OK)):
        return False
    # Ubuntu's apt "chromium" is a shell stub that asks for the snap, which does not run in containers.
    try:
        head = p.read_bytes()[:4096]
    except OSError:
        return False
    return not (head.startswith(b"#!") and b"snap" in head)


def find_browser(configured: str = "", playwright_path: str | None = None) -> str:
    """The Chromium executable to launch, or DeviceUnavailable saying how to get one."""
    if configured:
        if _runs(configured):
            return configured
        raise DeviceUnavailable(f"web.browser_path={configured!r} is not an executable browser; {INSTALL_HINT}")
    if playwright_path and _runs(playwright_path):
        return playwright_path
    for name in SYSTEM_BROWSERS:
        found = shutil.which(name)
        if found and _runs(found):
            return found
    raise DeviceUnavailable(
        f"no Chromium found (looked for Playwright's browser and {', '.join(SYSTEM_BROWSERS)}); {INSTALL_HINT}"
    )


def has_cjk_font() -> bool | None:
    """Whether fontconfig knows a font covering Chinese; None when fontconfig cannot be asked."""
    fc_list = shutil.which("fc-list")
    if not fc_list:
        return None
    import subprocess

    try:
        out = subprocess.run([fc_list, ":lang=zh", "family"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return bool(out.strip())

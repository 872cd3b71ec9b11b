"""``agent doctor``: check that the browser, fonts, OCR engine and run folder are in place, and say what to
install where they are not. Exit code 1 when something is missing."""

from __future__ import annotations

import argparse
from importlib import metadata
from pathlib import Path
from typing import Any

from agent.cli.common import EXIT_EPISODE_FAILED, EXIT_OK, make_console

NAME = "doctor"


def add_parser(sub: Any) -> None:
    sub.add_parser(NAME, help="check the browser, fonts, OCR models and run folder")


def main(args: argparse.Namespace) -> int:
    from devices.browser import find_browser, has_cjk_font
    from devices.errors import DeviceUnavailable
    from envs.errors import RecordError
    from envs.trajectory import check_writable

    console = make_console()
    problems = 0

    def report(ok: bool | None, what: str, detail: str) -> None:
        nonlocal problems
        mark = "[green]ok[/]" if ok else "[yellow]?[/]" if ok is None else "[red]missing[/]"
        problems += ok is False
        console.print(f"{mark:>18} {what}: {detail}", soft_wrap=True)

    try:
        import playwright  # noqa: F401

        report(True, "playwright", metadata.version("playwright"))
    except ImportError:
        report(False, "playwright", "pip install 'handeye[web]'")
    try:
        report(True, "browser", find_browser())
    except DeviceUnavailable as e:
        report(False, "browser", str(e))
    cjk = has_cjk_font()
    report(cjk, "CJK font", "found" if cjk else "install fonts-noto-cjk" if cjk is False else "fc-list not available")
    try:
        import rapidocr  # noqa: F401

        report(True, "OCR engine", f"rapidocr {metadata.version('rapidocr')} (models inside the package)")
    except ImportError:
        report(False, "OCR engine", "pip install 'handeye[ocr]'")
    try:
        check_writable(Path("runs"))
        report(True, "run folder", str(Path("runs").resolve()))
    except RecordError as e:
        report(False, "run folder", str(e))
    return EXIT_OK if problems == 0 else EXIT_EPISODE_FAILED

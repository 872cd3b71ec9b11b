"""``agent doctor``: check that the parts handeye needs are in place, and say what to install where they are not.

Required (``agent run`` on a web page with the OCR policy needs them; one missing makes the exit code 1): the
Playwright package, a Chromium, a CJK font, the OCR engine and a writable run folder. Optional (reported with
their install hint, never failing the check): adb (``--device android``), xdotool (``--device desktop``), torch
(in-process models and training) and a GPU ("none: CPU only" is a valid answer). Exit code 0 otherwise.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from agent.cli.common import EXIT_EPISODE_FAILED, EXIT_OK, make_console
from agent.terminal import plain

NAME = "doctor"


def add_parser(sub: Any) -> None:
    sub.add_parser(NAME, help="check the browser, fonts, OCR models, run folder, adb, xdotool, torch and GPU",
                   description="Check each part handeye uses and say what to install where one is missing. Exit "
                               "code 1 when a required part (playwright, browser, CJK font, OCR engine, run folder) "
                               "is missing; optional parts (adb, xdotool, torch, GPU) are reported but never fail.")


@dataclass(frozen=True, slots=True)
class Finding:
    """One line of the report."""

    what: str
    ok: bool | None
    """True found, False missing, None could not tell."""
    detail: str
    """The version or place when found; what to install when not."""
    required: bool = True


def main(args: argparse.Namespace) -> int:
    console = make_console()
    problems = 0
    for check in (*REQUIRED, *OPTIONAL):
        found = check()
        mark = "[green]ok[/]" if found.ok else "[yellow]?[/]" if found.ok is None else "[red]missing[/]"
        note = "" if found.required or found.ok else " (optional)"
        problems += found.required and found.ok is False
        console.print(f"{mark:>18} {found.what}: {plain(found.detail)}{note}", soft_wrap=True)  # [web] is no tag
    return EXIT_OK if problems == 0 else EXIT_EPISODE_FAILED


# -- required -------------------------------------------------------------------------------------------------------


def _playwright() -> Finding:
    try:
        import playwright  # noqa: F401
    except ImportError:
        return Finding("playwright", False, "pip install 'handeye[web]'")
    return Finding("playwright", True, metadata.version("playwright"))


def _browser() -> Finding:
    from devices.errors import DeviceUnavailable
    from devices.web.browser import find_browser

    try:
        return Finding("browser", True, find_browser())
    except DeviceUnavailable as e:
        return Finding("browser", False, str(e))


def _cjk_font() -> Finding:
    from devices.web.browser import has_cjk_font

    cjk = has_cjk_font()
    return Finding("CJK font", cjk, "found" if cjk else "install fonts-noto-cjk" if cjk is False
                   else "fc-list not available")


def _ocr() -> Finding:
    try:
        import rapidocr  # noqa: F401
    except ImportError:
        return Finding("OCR engine", False, "pip install 'handeye[ocr]'")
    return Finding("OCR engine", True, f"rapidocr {metadata.version('rapidocr')} (models inside the package)")


def _run_folder() -> Finding:
    from envs.errors import RecordError
    from envs.trajectory import check_writable

    try:
        check_writable(Path("runs"))
    except RecordError as e:
        return Finding("run folder", False, str(e))
    return Finding("run folder", True, str(Path("runs").resolve()))


# -- optional -------------------------------------------------------------------------------------------------------


def _version_line(command: list[str]) -> str | None:
    """The first line ``command`` prints, or None when it cannot be run."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0].strip() if done.returncode == 0 and lines else None


def _adb() -> Finding:
    hint = "needed for --device android: apt-get install adb (or the Android SDK platform-tools)"
    try:
        import adbutils
    except ImportError:
        return Finding("adb", False, f"pip install 'handeye[android]'; {hint}", required=False)
    try:
        exe = adbutils.adb_path()
    except Exception:  # adbutils raises its own error types when no adb binary is found
        exe = shutil.which("adb")
    version = _version_line([exe, "version"]) if exe else None
    if version is None:
        return Finding("adb", False, hint, required=False)
    return Finding("adb", True, f"{version.removeprefix('Android Debug Bridge ')} ({exe})", required=False)


def _xdotool() -> Finding:
    exe = shutil.which("xdotool")
    version = _version_line([exe, "--version"]) if exe else None
    if version is None:
        return Finding("xdotool", False, "needed for --device desktop: apt-get install xdotool (scripts/setup.sh)",
                       required=False)
    return Finding("xdotool", True, f"{version} ({exe})", required=False)


def _torch() -> Finding:
    try:
        import torch
    except ImportError:
        return Finding("torch", False, "needed for transformers: policies and agent train: pip install "
                       "'handeye[model]' (without a GPU, torch from the CPU index first: see README)", required=False)
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU build"
    return Finding("torch", True, f"{torch.__version__} ({build})", required=False)


def _gpu() -> Finding:
    try:
        import torch
    except ImportError:
        return Finding("GPU", None, "unknown: install torch to check", required=False)
    if not torch.cuda.is_available():
        return Finding("GPU", True, "none: CPU only (models run, slowly; training wants a GPU)", required=False)
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return Finding("GPU", True, f"{len(names)} x {', '.join(sorted(set(names)))}", required=False)


REQUIRED: tuple[Callable[[], Finding], ...] = (_playwright, _browser, _cjk_font, _ocr, _run_folder)
OPTIONAL: tuple[Callable[[], Finding], ...] = (_adb, _xdotool, _torch, _gpu)

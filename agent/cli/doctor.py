"""``agent doctor``: check that the parts handeye needs are in place, and say what to install where they are not.

Each device kind says what it needs (``devices.registry``: ``DeviceKindSpec.requirements``). Required (``agent run``
on a web page with the OCR policy needs them; one missing makes the exit code 1): the web's parts (the Playwright
package, a Chromium, a CJK font), the OCR engine and a writable run folder. Optional (reported with their install
hint, never failing the check): the other kinds' parts (xdotool for ``--device desktop``, adb for ``--device
android``), torch (in-process models and training) and a GPU ("none: CPU only" is a valid answer). Exit code 0
otherwise.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from agent.cli.common import EXIT_EPISODE_FAILED, EXIT_OK, make_console
from agent.terminal import plain
from devices.registry import Requirement as Finding

NAME = "doctor"


def add_parser(sub: Any) -> None:
    sub.add_parser(NAME, help="check the browser, fonts, OCR models, run folder, adb, xdotool, torch and GPU",
                   description="Check each part handeye uses and say what to install where one is missing. Exit "
                               "code 1 when a required part (playwright, browser, CJK font, OCR engine, run folder) "
                               "is missing; optional parts (adb, xdotool, torch, GPU) are reported but never fail.")


def checks() -> list[Callable[[], list[Finding]]]:
    """What the report checks, in its order: each device kind's parts (``devices.registry``: the web's are required,
    as the default device's), then ``REQUIRED`` and ``OPTIONAL``."""
    from devices.registry import all_device_kinds

    return [*(kind.requirements for kind in all_device_kinds()), *REQUIRED, *OPTIONAL]


def main(args: argparse.Namespace) -> int:
    console = make_console()
    problems = 0
    findings = [found for check in checks() for found in check()]
    for found in sorted(findings, key=lambda f: not f.required):
        mark = "[green]ok[/]" if found.ok else "[yellow]?[/]" if found.ok is None else "[red]missing[/]"
        note = "" if found.required or found.ok else " (optional)"
        problems += found.required and found.ok is False
        console.print(f"{mark:>18} {found.what}: {plain(found.detail)}{note}", soft_wrap=True)  # [web] is no tag
    return EXIT_OK if problems == 0 else EXIT_EPISODE_FAILED


# -- required -------------------------------------------------------------------------------------------------------


def _ocr() -> Finding:
    try:
        import rapidocr  # noqa: F401
    except ImportError:
        return Finding("OCR engine", False, "pip install 'handeye[ocr]'", required=True)
    return Finding("OCR engine", True, f"rapidocr {metadata.version('rapidocr')} (models inside the package)",
                   required=True)


def _run_folder() -> Finding:
    from envs.errors import RecordError
    from envs.trajectory import check_writable

    try:
        check_writable(Path("runs"))
    except RecordError as e:
        return Finding("run folder", False, str(e), required=True)
    return Finding("run folder", True, str(Path("runs").resolve()), required=True)


# -- optional -------------------------------------------------------------------------------------------------------


def _torch() -> Finding:
    try:
        import torch
    except ImportError:
        return Finding("torch", False, "needed for transformers: policies and agent train: pip install "
                       "'handeye[model]' (without a GPU, torch from the CPU index first: see README)")
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU build"
    return Finding("torch", True, f"{torch.__version__} ({build})")


def _gpu() -> Finding:
    try:
        import torch
    except ImportError:
        return Finding("GPU", None, "unknown: install torch to check")
    if not torch.cuda.is_available():
        return Finding("GPU", True, "none: CPU only (models run, slowly; training wants a GPU)")
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return Finding("GPU", True, f"{len(names)} x {', '.join(sorted(set(names)))}")


def _one(check: Callable[[], Finding]) -> Callable[[], list[Finding]]:
    return lambda: [check()]


REQUIRED: tuple[Callable[[], list[Finding]], ...] = (_one(_ocr), _one(_run_folder))
"""Checks beyond the device kinds' that fail the report: what the OCR policy and every run need."""
OPTIONAL: tuple[Callable[[], list[Finding]], ...] = (_one(_torch), _one(_gpu))
"""Checks reported with their install hint that never fail it."""

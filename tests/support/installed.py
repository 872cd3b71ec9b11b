"""What the suite needs installed, checked where it is first used: a part that scripts/setup.sh installs and that is
missing fails the test with what is missing and how to install it; it never skips the test."""

from __future__ import annotations

import importlib.util
import shutil

import pytest


def need_program(name: str, apt: str) -> str:
    """The path of the program ``name``; fails the test when it is not on PATH (``apt``: its Debian packages)."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed; run scripts/setup.sh (apt-get install {apt})", pytrace=False)
    return path


def need_module(name: str, pip: str) -> None:
    """Fails the test when the Python package ``name`` cannot be imported (``pip``: what to install)."""
    if importlib.util.find_spec(name) is None:
        pytest.fail(f"the Python package {name} is not installed; run scripts/setup.sh (pip install '{pip}')",
                    pytrace=False)

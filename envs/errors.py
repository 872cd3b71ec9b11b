"""Errors raised by environments and trajectory records.

    EnvError                  base class
    ├── RecordError           a trajectory could not be written (disk full, permissions)
    └── RecordFormatError     a trajectory on disk is not readable (corrupt line, wrong version)
"""

from __future__ import annotations


class EnvError(Exception):
    """Base class for environment and record failures."""


class RecordError(EnvError, OSError):
    """Writing a trajectory failed."""


class RecordFormatError(EnvError, ValueError):
    """A trajectory on disk cannot be read."""

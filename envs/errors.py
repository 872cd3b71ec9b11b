"""Errors raised by environments and trajectory records.

    EnvError                  base class
    ├── RecordError           a trajectory could not be written (disk full, permissions)
    ├── RecordFormatError     a trajectory on disk is not readable (corrupt line, wrong version)
    └── TaskFileError         a derived task's file is not a valid task (names the file and the field)
"""

from __future__ import annotations


class EnvError(Exception):
    """Base class for environment and record failures."""


class RecordError(EnvError, OSError):
    """Writing a trajectory failed."""


class RecordFormatError(EnvError, ValueError):
    """A trajectory on disk cannot be read."""


class TaskFileError(EnvError, ValueError):
    """A derived task's file (envs/derived) cannot be used; the message names the file and the field."""

"""Errors raised by environments and trajectory records.

    EnvError                  base class
    ├── RecordError           a trajectory could not be written (disk full, permissions); also an OSError
    ├── RecordFormatError     a trajectory on disk is not readable (corrupt line, wrong version); also a
    │                         ValueError
    ├── TaskFileError         a derived task's file is not a valid task (names the file and the field); also a
    │                         ValueError
    ├── UnknownEnv            no environment registered under that name (suggests the closest); also a KeyError
    ├── LayoutError           a generated screen cannot be drawn with the requested parameters
    ├── TaskSetupError        an Android task's set-up could not put the phone in its starting state
    └── ConformanceError      an environment breaks the Env contract (``check_env``; names the rule); also an
                              AssertionError
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


class UnknownEnv(EnvError, KeyError):
    """No environment registered under that name (``envs.registry.make``); the message suggests the closest."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class LayoutError(EnvError):
    """A screen could not be generated with the requested parameters."""


class TaskSetupError(EnvError):
    """A task's set-up could not put the phone in its starting state; the message says which."""


class ConformanceError(EnvError, AssertionError):
    """An environment broke the Env contract; the message says which rule."""

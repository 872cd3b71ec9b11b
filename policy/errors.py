"""Errors raised by policies.

    PolicyError               base class
    ├── PolicyParseError      a model output that is not a valid action (recorded, never executed); also a ValueError
    │   └── FormatParseError  a model output breaks its family's grammar; carries the position
    │       └── CoordinateError   a model-space point outside the image the model saw (never clamped)
    ├── PolicyUnavailable     the policy cannot run here (missing package, model, or script file)
    ├── UnknownModel          a model id with no preset and no --format (suggests the closest ids); also a KeyError
    ├── BackendError          the backend could not produce an answer (server down, timeout, HTTP error, garbage,
    │                         bad model files, a family the backend cannot run)
    ├── TrainedSettingsError  a run's handeye.json (what its weights were trained with) that cannot be read or
    │                         that disagrees with the settings given (``policy.trained``); also a ValueError
    ├── JsonError             a JSON value in a model answer that does not decode (``policy.formats.jsonscan``;
    │                         the parsers turn it into a FormatParseError with its position)
    └── NoAnswerForm          a family has no answer that writes an action or a target (SFT: the step is left out,
                              saying why); also a ValueError
"""

from __future__ import annotations

__all__ = ["BackendError", "CoordinateError", "FormatParseError", "JsonError", "NoAnswerForm", "PolicyError",
           "PolicyParseError", "PolicyUnavailable", "TrainedSettingsError", "UnknownModel"]


class PolicyError(Exception):
    """Base class for policy failures."""


class PolicyParseError(PolicyError, ValueError):
    """A model output could not be turned into an action."""


class PolicyUnavailable(PolicyError):
    """The policy cannot be built or run on this machine."""


class FormatParseError(PolicyParseError):
    """A model's output does not follow its family's grammar.

    ``position`` is the character offset in the output where the problem was found, when known;
    the message quotes the text around it.
    """

    def __init__(self, message: str, text: str = "", position: int | None = None) -> None:
        if position is not None and text:
            lo, hi = max(0, position - 30), min(len(text), position + 30)
            message = f"{message} (at character {position}: ...{text[lo:hi]!r}...)"
        super().__init__(message)
        self.position = position


class CoordinateError(FormatParseError):
    """A model-space point outside the image the model saw (never clamped)."""


class UnknownModel(PolicyError, KeyError):
    """A model id with no preset and no --format override."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class BackendError(PolicyError):
    """The backend could not produce an answer (server down, timeout, HTTP error, bad model files)."""


class JsonError(PolicyError):
    """A JSON value that does not decode: ``msg`` at offset ``pos``."""

    def __init__(self, msg: str, pos: int) -> None:
        super().__init__(msg)
        self.msg, self.pos = msg, pos


class NoAnswerForm(PolicyError, ValueError):
    """A model family cannot write an answer for this action or target (the message says why)."""


class TrainedSettingsError(PolicyError, ValueError):
    """A run's ``handeye.json`` that cannot be read, or that disagrees with the model settings given."""

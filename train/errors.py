"""Errors raised by training.

    TrainError                  base class; every training failure is one of these
    ├── PromptSourceError       a prompt source cannot produce any prompt (no usable row, every item failed, a
    │                           changed dataset); also a ValueError
    ├── BadItem                 one item cannot be made into a prompt now: the sampler skips and counts it
    ├── BadRow                  one row of a grounding file cannot be used: the source skips and names it;
    │                           also a ValueError
    ├── UnknownReward           no reward of that name (the message names the closest); also a ValueError
    ├── NoOnlineForm            a reward with no online form (the step verifier cannot score it): refused before an
    │                           online session or an actor starts; also a ValueError
    ├── UnwritableAction        a recorded action the model family cannot write as an answer that parses back to it
    │                           (the SFT step is left out, saying why); also a ValueError
    ├── CheckpointError         a checkpoint that cannot be used: missing, incomplete, or written for another model
    │                           or setup; also a RuntimeError
    ├── AdapterError            an adapter version that cannot be published or used; also a RuntimeError
    │   ├── AdapterChecksumError    its files do not match the announced sha256 (corrupt, truncated,
    │   │                           missing)
    │   └── AdapterPathError        its announcement names a folder outside the trusted store or a file name
    │                               that is not a plain name (``..``, a separator, NUL): nothing is read
    └── TransportError          a message that cannot be encoded, decoded or sent; also a RuntimeError
        └── TransportClosed     the transport was closed (the session is ending)

The second bases are there for callers that catch ``ValueError`` / ``RuntimeError`` (``agent train`` reports a
``ValueError`` as a configuration problem). Messages say what failed, with which values, and what to do next.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envs.grounding import RejectKind

__all__ = ["AdapterChecksumError", "AdapterError", "AdapterPathError", "BadItem", "BadRow", "CheckpointError",
           "NoOnlineForm", "PromptSourceError", "TrainError", "TransportClosed", "TransportError", "UnknownReward",
           "UnwritableAction"]


class TrainError(Exception):
    """Base class for every training failure."""


class PromptSourceError(TrainError, ValueError):
    """A prompt source cannot produce any prompt (no usable row, every item failed, a changed dataset)."""


class BadItem(TrainError):
    """One item cannot be made into a prompt now; the sampler skips it and counts it."""


class BadRow(TrainError, ValueError):
    """One row of a grounding file cannot be used: ``kind`` (a ``RejectKind``) says which problem, ``reason`` why."""

    def __init__(self, kind: RejectKind, reason: str) -> None:
        super().__init__(reason)
        self.kind, self.reason = kind, reason


class UnknownReward(TrainError, ValueError):
    """No reward registered under that name (``train.reward_registry``)."""


class NoOnlineForm(TrainError, ValueError):
    """A registered reward that has no online form: the step verifier says whether an action is right, and this
    reward scores something it cannot say (``train.reward_registry.online_rule``)."""


class UnwritableAction(TrainError, ValueError):
    """The family cannot write the recorded action as an answer that parses back to it (the message says why)."""


class CheckpointError(TrainError, RuntimeError):
    """A checkpoint that cannot be used: missing, incomplete, or written for another model or setup."""


class AdapterError(TrainError, RuntimeError):
    """An adapter version that cannot be published or used."""


class AdapterChecksumError(AdapterError):
    """A published adapter whose files do not match its announced digest: never load it."""


class AdapterPathError(AdapterError):
    """An adapter announcement that points outside the store its reader trusts: never read or written."""


class TransportError(TrainError, RuntimeError):
    """A message that cannot be encoded, decoded or sent."""


class TransportClosed(TransportError):
    """The transport is closed: nothing more is sent or received."""

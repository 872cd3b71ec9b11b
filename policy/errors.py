"""Errors raised by policies.

    PolicyError               base class
    ├── PolicyParseError      a model output that is not a valid action (recorded, never executed)
    └── PolicyUnavailable     the policy cannot run here (missing package, model, or script file)
"""

from __future__ import annotations


class PolicyError(Exception):
    """Base class for policy failures."""


class PolicyParseError(PolicyError, ValueError):
    """A model output could not be turned into an action."""


class PolicyUnavailable(PolicyError):
    """The policy cannot be built or run on this machine."""

"""Policies: what to do next, given the task, the history and the screen.

Built in: ``ScriptedPolicy`` (a fixed list of actions) and ``OcrPolicy`` (offline text grounding,
the default with no model). Model families and backends live beside them.
"""

from policy.base import Decision, HistoryEntry, Policy
from policy.errors import PolicyError, PolicyParseError, PolicyUnavailable

__all__ = ["Decision", "HistoryEntry", "Policy", "PolicyError", "PolicyParseError", "PolicyUnavailable"]

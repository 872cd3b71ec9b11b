"""A policy that replays a fixed list of actions: for tests, demos and reproducing a trajectory.

Each entry is an Action, or the text a model would have written: a JSON object in the action's
dict form (docs/actions.md), parsed exactly as a model output would be, so a malformed entry is
a recorded parse failure rather than a crash. When the script runs out the policy finishes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from devices.actions import Action, ActionKind
from devices.base import Observation
from devices.bounded_json import loads_bounded, read_bounded
from devices.errors import InvalidAction
from policy.base import Decision, HistoryEntry
from policy.errors import PolicyParseError, PolicyUnavailable


def parse_action_json(text: str) -> Action:
    """Parse handeye's own action format: one JSON object as in ``Action.to_dict``."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise PolicyParseError(f"not JSON ({e.msg} at column {e.colno}): {text[:80]!r}") from e
    try:
        return Action.from_dict(data)
    except InvalidAction as e:
        raise PolicyParseError(f"not a valid action: {e}") from e


class ScriptedPolicy:
    """Returns the scripted entries in order, one per decision."""

    name = "scripted"

    def __init__(self, script: Sequence[Action | str]) -> None:
        self.script = list(script)
        self.position = 0

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedPolicy:
        """A script file: a JSON list whose items are action objects (or strings, kept as raw outputs).

        ``PolicyUnavailable`` naming the file (and the entry's index and line) when it is missing, not a JSON list,
        or beyond the limits of ``devices.bounded_json``: over ``MAX_FILE_BYTES``, nested deeper than
        ``MAX_DEPTH``, or holding a number longer than ``MAX_NUMBER_CHARS``."""
        path = Path(path)
        try:
            items = loads_bounded(read_bounded(path))
        except FileNotFoundError:
            raise PolicyUnavailable(f"script file {path} does not exist; pass --script FILE with a JSON list of "
                                    f"actions") from None
        except (OSError, ValueError) as e:  # unreadable, not UTF-8 or JSON, beyond devices.bounded_json's limits
            raise PolicyUnavailable(f"script file {path} is not a JSON list of actions: {e}") from None
        if not isinstance(items, list):
            raise PolicyUnavailable(f"script file {path} must hold a JSON list of actions, got {type(items).__name__}")
        return cls([item if isinstance(item, str) else json.dumps(item, ensure_ascii=False) for item in items])

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "steps": len(self.script)}

    async def decide(self, task: str, history: Sequence[HistoryEntry], observation: Observation, n: int = 1) -> Decision:
        if self.position >= len(self.script):
            return Decision(Action(ActionKind.FINISH), raw_output="", info={"note": "script exhausted"})
        entry = self.script[self.position]
        self.position += 1
        if isinstance(entry, Action):
            return Decision(entry, raw_output=json.dumps(entry.to_dict(), ensure_ascii=False))
        try:
            return Decision(parse_action_json(entry), raw_output=entry)
        except PolicyParseError as e:
            return Decision(None, raw_output=entry, parse_error=str(e))

"""Reading one JSON object of a task file strictly: each field taken with its type checked, unknown fields refused,
every error a ``TaskFileError`` naming the file and the field (``envs/derived/spec.py`` reads task files with it)."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

from devices.base import Box
from envs.errors import TaskFileError

E = TypeVar("E", bound=Enum)

_MISSING: Any = object()


class Fields:
    """The fields of one JSON object of a task file, taken one by one with their types checked; ``done`` refuses
    the ones nobody took. Every error names the file and the field."""

    def __init__(self, data: Any, where: str, path: Path, limit: int = 4000) -> None:
        self.where, self.path = where, path
        if not isinstance(data, dict):
            raise TaskFileError(f"{path}: {where} must be a JSON object, got {json_type(data)}")
        self.data = data
        self.taken: set[str] = set()
        self.limit = limit
        """The most characters, and list entries, a field may hold."""

    def fail(self, name: str, message: str) -> Any:
        prefix = "" if self.where == "the task" else f"{self.where}."
        raise TaskFileError(f"{self.path}: {prefix}{name} {message}")

    def take(self, name: str, default: Any = _MISSING) -> Any:
        self.taken.add(name)
        if name in self.data:
            return self.data[name]
        if default is _MISSING:
            self.fail(name, "is missing")
        return default

    def text(self, name: str, default: Any = _MISSING, *, empty: bool = False) -> Any:
        value = self.take(name, default)
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, str):
            self.fail(name, f"must be a string, got {json_type(value)}")
        if not empty and not value.strip():
            self.fail(name, "must not be empty")
        if len(value) > self.limit:
            self.fail(name, f"has {len(value)} characters, more than {self.limit}")
        return value

    def text_list(self, name: str, most: int = 64) -> tuple[str, ...]:
        value = self.take(name, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            self.fail(name, f"must be a list of non-empty strings, got {json.dumps(value)[:80]}")
        if len(value) > most:
            self.fail(name, f"has {len(value)} entries, more than {most}")
        return tuple(value)

    def boolean(self, name: str, default: Any) -> Any:
        value = self.take(name, default)
        if value is not default and not isinstance(value, bool):
            self.fail(name, f"must be true or false, got {json_type(value)}")
        return value

    def integer(self, name: str, default: int, low: int, high: int) -> int:
        value = self.take(name, default)
        if type(value) is not int or not low <= value <= high:
            self.fail(name, f"must be a whole number from {low} to {high}, got {json.dumps(value)[:40]}")
        return value

    def number(self, name: str, default: float, low: float, high: float) -> float:
        value = self.take(name, default)
        if type(value) not in (int, float) or not low <= value <= high:
            self.fail(name, f"must be a number from {low} to {high}, got {json.dumps(value)[:40]}")
        return float(value)

    def choice(self, name: str, default: E, allowed: tuple[E, ...]) -> E:
        """One of the ``allowed`` members of an Enum, written as its value."""
        value = self.text(name, default.value)
        if value not in {m.value for m in allowed}:
            self.fail(name, f"is {value!r}; use one of {', '.join(m.value for m in allowed)}")
        return type(default)(value)

    def box(self, name: str) -> Box:
        value = self.take(name)
        if not (isinstance(value, list) and len(value) == 4 and all(type(v) in (int, float) for v in value)
                and all(0 <= v <= 1 for v in value) and value[0] < value[2] and value[1] < value[3]):
            self.fail(name, f"must be [x1, y1, x2, y2] normalized to the frame (0..1, x1 < x2, y1 < y2), got "
                      f"{json.dumps(value)[:80]}")
        return Box(*(float(v) for v in value))

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.taken)
        if unknown:
            prefix = "" if self.where == "the task" else f"{self.where}."
            raise TaskFileError(f"{self.path}: {prefix}{unknown[0]} is not a field of {self.where}; its fields are "
                                f"{', '.join(sorted(self.taken))}")


def json_type(value: Any) -> str:
    """The JSON name of a decoded value's type, for messages."""
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(value), type(value).__name__)

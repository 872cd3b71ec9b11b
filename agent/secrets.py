"""Credentials: only from environment variables named in config, never stored, shown or logged in clear.

An action refers to a secret as ``{{secret:NAME}}``; the runner substitutes the value just before
the device acts (and marks the action ``mask``, so the device masks the field in later frames), and
records keep the placeholder. One redaction pass (``redact_value``) runs over every field of every
step and episode record before it is written, over every console line of a run (the records it
prints are redacted ones) and over every log line (``RedactingFilter``, installed by the CLI on its
log handlers): any registered secret value found anywhere, whoever wrote it (the model, the page,
the user), is replaced by its placeholder. docs/security.md says what this promises.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, TypeVar

from agent.errors import SecretError
from devices.actions import Action

PLACEHOLDER = re.compile(r"\{\{secret:([A-Za-z_][A-Za-z0-9_]*)\}\}")
MASK = "••••••"
MIN_SECRET_LENGTH = 4
"""Shorter values are refused: replacing every "ab" in every record would redact ordinary text, and a
secret that short is not one."""

T = TypeVar("T")


class Secrets:
    """Resolved secrets: name -> value, read from the environment once, at start."""

    def __init__(self, refs: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None) -> None:
        environ = os.environ if environ is None else environ
        self._values: dict[str, str] = {}
        for name, ref in (refs or {}).items():
            var = ref.removeprefix("env:")
            if var not in environ:
                raise SecretError(f"secret {name!r} reads environment variable {var}, which is not set; export {var}=... first")
            value = environ[var]
            if len(value) < MIN_SECRET_LENGTH:
                raise SecretError(f"secret {name!r} (from {var}) is {len(value)} characters long; secrets of fewer than "
                                  f"{MIN_SECRET_LENGTH} characters cannot be told apart from ordinary text, so they "
                                  f"cannot be kept out of records: use a longer value")
            self._values[name] = value
        # Longest first, so a secret that contains another is replaced whole.
        self._ordered = sorted(self._values.items(), key=lambda kv: -len(kv[1]))

    @property
    def names(self) -> list[str]:
        return sorted(self._values)

    def __bool__(self) -> bool:
        return bool(self._values)

    def resolve(self, action: Action) -> Action:
        """The action with every {{secret:NAME}} in its text replaced by the secret's value, marked ``mask``."""
        if action.text is None or "{{secret:" not in action.text:
            return action

        def value(m: re.Match[str]) -> str:
            name = m.group(1)
            if name not in self._values:
                raise SecretError(f"the action refers to secret {name!r}, which is not in [secrets]; add {name} = \"env:VAR\"")
            return self._values[name]

        return replace(action, text=PLACEHOLDER.sub(value, action.text), mask=True)

    def redact(self, text: str) -> str:
        """``text`` with every secret value replaced by its placeholder."""
        for name, secret in self._ordered:
            if secret in text:
                text = text.replace(secret, "{{secret:" + name + "}}")
        return text

    def redact_value(self, value: T) -> T:
        """``value`` with every string inside it (dict keys and values, list and tuple items, dataclass fields)
        redacted; other values are returned as they are."""
        if not self._values:
            return value
        return self._walk(value)

    def _walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, dict):
            return {self._walk(k): self._walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._walk(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self._walk(v) for v in value)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            changes = {f.name: self._walk(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
            return replace(value, **changes)
        return value


class RedactingFilter(logging.Filter):
    """A log filter that replaces every secret value in a record's message (its arguments merged in) by the
    secret's placeholder. Put it on the handlers, so records from every logger pass through it."""

    def __init__(self, secrets: Secrets) -> None:
        super().__init__()
        self.secrets = secrets

    def filter(self, record: logging.LogRecord) -> bool:
        if self.secrets:
            message = record.getMessage()
            redacted = self.secrets.redact(message)
            if redacted != message:
                record.msg, record.args = redacted, None
            if record.exc_info and record.exc_info[1] is not None:
                text = self.secrets.redact(logging.Formatter().formatException(record.exc_info))
                record.exc_info, record.exc_text = None, text
        return True


def redact_logs(secrets: Secrets) -> RedactingFilter:
    """Install a ``RedactingFilter`` for ``secrets`` on every handler of the root logger; returns it."""
    flt = RedactingFilter(secrets)
    for handler in logging.getLogger().handlers:
        handler.addFilter(flt)
    return flt

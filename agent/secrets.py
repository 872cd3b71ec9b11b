"""Credentials: only from environment variables named in config, never stored in clear.

An action refers to a secret as ``{{secret:NAME}}``; the loop substitutes the value just before
the device acts, and records keep the placeholder. Any secret value that appears in a model's
output is replaced by its placeholder before it is written.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import replace

from agent.errors import SecretError
from devices.actions import Action

PLACEHOLDER = re.compile(r"\{\{secret:([A-Za-z_][A-Za-z0-9_]*)\}\}")
MASK = "••••••"


class Secrets:
    """Resolved secrets: name -> value, read from the environment once, at start."""

    def __init__(self, refs: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None) -> None:
        environ = os.environ if environ is None else environ
        self._values: dict[str, str] = {}
        for name, ref in (refs or {}).items():
            var = ref.removeprefix("env:")
            if var not in environ:
                raise SecretError(f"secret {name!r} reads environment variable {var}, which is not set; export {var}=... first")
            self._values[name] = environ[var]

    @property
    def names(self) -> list[str]:
        return sorted(self._values)

    def resolve(self, action: Action) -> Action:
        """The action with every {{secret:NAME}} in its text replaced by the secret's value."""
        if action.text is None or "{{secret:" not in action.text:
            return action

        def value(m: re.Match[str]) -> str:
            name = m.group(1)
            if name not in self._values:
                raise SecretError(f"the action refers to secret {name!r}, which is not in [secrets]; add {name} = \"env:VAR\"")
            return self._values[name]

        return replace(action, text=PLACEHOLDER.sub(value, action.text))

    def redact(self, text: str) -> str:
        """``text`` with every secret value replaced by its placeholder."""
        for name, secret in sorted(self._values.items(), key=lambda kv: -len(kv[1])):
            if secret:
                text = text.replace(secret, "{{secret:" + name + "}}")
        return text

"""Errors raised by the agent layer (the loop, the CLI, configuration).

    AgentError              base class
    ├── ConfigError         a config file, --set override or CLI value is wrong (exit code 2)
    └── SecretError         a secret named in config has no value in the environment
"""

from __future__ import annotations


class AgentError(Exception):
    """Base class for agent failures."""


class ConfigError(AgentError, ValueError):
    """Configuration or command-line input is wrong; the message says which value and what to do."""


class SecretError(AgentError):
    """A secret referenced by the config or an action cannot be resolved."""


class OnlineError(AgentError):
    """An online session that cannot start or had to stop: a bad setting, every actor dropped, a learner error."""

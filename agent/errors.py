"""Errors raised by the agent layer (the loop, the CLI, configuration).

    AgentError              base class
    ├── ConfigError         a config file, --set override or CLI value is wrong (exit code 2)
    ├── SecretError         a secret named in config has no value in the environment
    ├── OnlineError         an online session that cannot start or had to stop
    └── FleetError          a fleet setting, key or version download that cannot be used (agent/fleet/)
        ├── BadSignature    a version announcement not signed with the fleet key: ignored, counted
        └── SpoolFull       an actor's disk spool is at its limit; also a train TransportError
"""

from __future__ import annotations

from train.errors import TransportError


class AgentError(Exception):
    """Base class for agent failures."""


class ConfigError(AgentError, ValueError):
    """Configuration or command-line input is wrong; the message says which value and what to do."""


class SecretError(AgentError):
    """A secret referenced by the config or an action cannot be resolved."""


class OnlineError(AgentError):
    """An online session that cannot start or had to stop: a bad setting, every actor dropped, a learner error."""


class FleetError(AgentError):
    """A fleet setting, key, broker address or version download that cannot be used; the message says which."""


class BadSignature(FleetError):
    """A version announcement whose signature does not match the fleet key: the actor keeps its version."""


class SpoolFull(FleetError, TransportError):
    """An actor's spool (messages the broker has not acknowledged yet) reached its size limit."""

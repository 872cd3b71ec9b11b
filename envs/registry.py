"""The environment registry: names -> factories, listed by `agent envs`.

``make(name)`` builds the environment and wraps it in ``TimeLimit`` with the step budget its
registration names (``max_steps=`` overrides it), as Gymnasium's ``make`` does with
``max_episode_steps``: the budget lives in one wrapper, not in every environment.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from envs.base import Env
from envs.errors import EnvError, UnknownEnv


@dataclass(frozen=True, slots=True)
class EnvSpec:
    name: str
    """Unique id, "<suite>/<task>", e.g. "generated/click-button" or "miniwob/click-test"."""
    entry_point: str
    """"module:callable" building the environment from keyword arguments."""
    suite: str
    description: str = ""
    kwargs: tuple[tuple[str, Any], ...] = ()
    max_steps: int = 10
    """The step budget ``make`` gives the environment (``TimeLimit``) unless told another."""
    device_kind: str | None = None
    """The kind of device it runs on (a ``devices.registry`` kind: "web", "desktop", "android"); None only for a
    registration that cannot be made (a task file that does not load: ``make`` raises its error)."""

    def make(self, *, max_steps: int | None = None, **overrides: Any) -> Env:
        """The environment, wrapped in ``TimeLimit(max_steps or self.max_steps)``."""
        from envs.wrappers import TimeLimit

        module, attr = self.entry_point.split(":")
        factory: Callable[..., Any] = getattr(importlib.import_module(module), attr)
        return TimeLimit(factory(**{**dict(self.kwargs), **overrides}), self.max_steps if max_steps is None else max_steps)


REGISTRY: dict[str, EnvSpec] = {}


def register(name: str, entry_point: str, suite: str, description: str = "", *, device_kind: str | None,
             max_steps: int = 10, **kwargs: Any) -> None:
    """Register ``name`` on devices of ``device_kind`` (``devices.registry``); ``kwargs`` go to the factory,
    ``max_steps`` is the default step budget."""
    from devices.errors import UnknownDeviceKind
    from devices.registry import device_kind as known_kind

    if name in REGISTRY:
        raise EnvError(f"environment {name!r} is registered twice")
    if max_steps < 1:
        raise EnvError(f"environment {name!r}: max_steps={max_steps} must be at least 1")
    if device_kind is not None:
        try:
            known_kind(device_kind)
        except UnknownDeviceKind as e:
            raise EnvError(f"environment {name!r}: {e}") from None
    REGISTRY[name] = EnvSpec(name, entry_point, suite, description, tuple(kwargs.items()), max_steps, device_kind)


def spec(name: str) -> EnvSpec:
    """The spec of a registered environment; unknown names suggest the closest."""
    _load_suites()
    if name not in REGISTRY:
        close = difflib.get_close_matches(name, list(REGISTRY), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UnknownEnv(f"no environment {name!r}{hint} (`agent envs` lists them)")
    return REGISTRY[name]


def make(name: str, *, max_steps: int | None = None, **kwargs: Any) -> Env:
    """The registered environment ``name``, in a ``TimeLimit`` (see the module docstring)."""
    return spec(name).make(max_steps=max_steps, **kwargs)


def all_specs(suite: str | None = None) -> list[EnvSpec]:
    _load_suites()
    return [s for s in REGISTRY.values() if suite is None or s.suite == suite]


SUITE_MODULES = ("envs.generated", "envs.miniwob", "envs.android", "envs.derived", "envs.desktop")
"""Modules whose import registers a suite's environments."""


def _load_suites() -> None:
    for module in SUITE_MODULES:
        importlib.import_module(module)

"""The environment API: Gymnasium's signatures and semantics, asyncio, on handeye's devices.

    obs, info = await env.reset(seed=..., options=...)
    obs, reward, terminated, truncated, info = await env.step(action)
    await env.close()

``terminated`` means the task's checker decided (success or failure, read from device state, never
from what the agent claims); ``truncated`` means the step budget ran out. ``info["instruction"]``
(after reset) is the task's instruction. Where an environment can judge an action before it is
executed, ``await env.verify(candidates)`` scores each candidate with a ``StepVerdict``: does this
point land on the element this step needs (from the DOM, the UI hierarchy or a generator's ground
truth). Environments that cannot verify steps return None.

Every registered environment passes ``check_env`` (envs/conformance.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from devices.actions import Action
from devices.base import Observation


@dataclass(frozen=True, slots=True)
class StepVerdict:
    """A step verifier's judgement of one proposed action."""

    correct: bool
    reward: float
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Env(Protocol):
    """A task environment on a device."""

    name: str
    max_steps: int

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
                    ) -> tuple[Observation, dict[str, Any]]: ...

    async def step(self, action: Action) -> tuple[Observation, float, bool, bool, dict[str, Any]]: ...

    async def verify(self, candidates: Sequence[Action]) -> list[StepVerdict] | None: ...

    async def close(self) -> None: ...


class OwnsDevice:
    """Device ownership for environments: a device passed in is borrowed (the caller closes it);
    otherwise the environment creates one on first reset and closes it in ``close``."""

    name: str
    _device: Any
    _owns_device: bool

    def _adopt_device(self, device: Any) -> None:
        self._device = device
        self._owns_device = device is None

    @property
    def device(self) -> Any:
        if self._device is None:
            from envs.errors import EnvError

            raise EnvError(f"{self.name}: no device yet; call `await env.reset()` first")
        return self._device

    async def _close_owned_device(self) -> None:
        if self._owns_device and self._device is not None:
            await self._device.close()
            self._device = None

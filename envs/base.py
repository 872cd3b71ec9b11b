"""The environment API: Gymnasium's signatures and semantics, asyncio, on handeye's devices.

    obs, info = await env.reset(seed=..., options=...)
    obs, reward, terminated, truncated, info = await env.step(action)
    await env.close()

``terminated`` means the task's checker decided (success or failure, read from device state, never
from what the agent claims); ``truncated`` means the step budget ran out, which is the job of one
wrapper, ``envs.wrappers.TimeLimit`` (``envs.registry.make`` applies it, as Gymnasium's ``make``
does), not of each environment. ``info["instruction"]`` (after reset) is the task's instruction.
Where an environment can judge an action before it is executed, ``await env.verify(candidates)``
scores each candidate with a ``StepVerdict``: does this point land on the element this step needs
(from the DOM, the UI hierarchy or a generator's ground truth). Environments that cannot verify
steps return None.

What a step's ``info`` may hold, read by the episode runner (``agent/runner.py``):

- ``"effect"``: a ``StepEffect``, what performing the action did on the device (the element under
  the point, whether text went into a password field, how the screen settled, seconds per phase).
  Environments act through ``perform(device, action)``, which acts, settles and times both.
- ``"success"`` and ``"verdict"``: the task checker's judgement, when the step ended the episode.
- ``"dry_run"``: True when the action was deliberately not performed (``envs.wrappers.DryRun``).

What the runner (and every other caller) reads of an environment is the ``Env`` protocol below, nothing else:

- ``name``: the environment's name in records ("generated/click");
- ``device``: the ``Device`` it acts on (the runner checks action kinds against it, the guard reads elements through
  it, the record describes it); None until the first ``reset`` makes one (a device passed in is there from the
  start), or for an environment that acts on none (a recording);
- ``max_steps``: the step budget, None when there is none (an environment is unbounded; ``TimeLimit`` sets it);
- ``rewarded``: False for an environment without a checker: its rewards are all 0 and mean nothing, so records of
  its episodes store no return;
- ``unwrapped``: the environment inside every wrapper (itself, for an environment).

``BaseEnv`` gives an environment class those defaults (no device, no budget, rewarded, itself unwrapped). Wrappers
forward exactly this contract; what else an environment offers (the ground truth an oracle plays: ``current_step``,
``oracle_action``, ``check``) is reached through ``env.unwrapped``, typed by its class.

Every registered environment passes ``check_env`` (envs/conformance.py).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, Self, runtime_checkable

from devices.actions import Action
from devices.base import ActionResult, Device, Observation
from devices.settle import SettleResult


@dataclass(frozen=True, slots=True)
class StepVerdict:
    """A step verifier's judgement of one proposed action."""

    correct: bool
    reward: float
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StepEffect:
    """What performing one action did on the device (``info["effect"]`` of a step)."""

    result: ActionResult
    settle: SettleResult | None = None
    """None when the environment did not wait for the screen to settle."""
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds spent per phase inside the step: ``act``, ``settle`` (and ``observe``, ``check`` where measured)."""


async def perform(device: Device, action: Action, *, settle: bool = True) -> StepEffect:
    """Act on ``device``, then wait until its screen stops changing; the one way environments act."""
    t0 = time.perf_counter()
    result = await device.act(action)
    t1 = time.perf_counter()
    settled = await device.settle() if settle else None
    timings = {"act": t1 - t0}
    if settled is not None:
        timings["settle"] = time.perf_counter() - t1
    return StepEffect(result, settled, timings)


async def timed_observe(device: Device, effect: StepEffect | None) -> Observation:
    """``device.observe()``, its seconds added to ``effect.timings["observe"]`` when there is an effect."""
    t0 = time.perf_counter()
    obs = await device.observe()
    if effect is not None:
        effect.timings["observe"] = effect.timings.get("observe", 0.0) + time.perf_counter() - t0
    return obs


StepResult = tuple[Observation, float, bool, bool, dict[str, Any]]
"""What ``step`` returns: (obs, reward, terminated, truncated, info)."""


@runtime_checkable
class Env(Protocol):
    """A task environment on a device (see the module docstring). The step budget is not part of an environment:
    see ``envs.wrappers``."""

    @property
    def name(self) -> str: ...

    @property
    def device(self) -> Device | None: ...

    @property
    def max_steps(self) -> int | None: ...

    @property
    def rewarded(self) -> bool: ...

    @property
    def unwrapped(self) -> Env: ...

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
                    ) -> tuple[Observation, dict[str, Any]]: ...

    async def step(self, action: Action) -> StepResult: ...

    async def verify(self, candidates: Sequence[Action]) -> list[StepVerdict] | None: ...

    async def close(self) -> None: ...


class BaseEnv:
    """The defaults of the ``Env`` contract for an environment class (wrappers forward them instead)."""

    device: Device | None = None
    """No device the runner may use, unless the environment says which (``OwnsDevice``, ``TaskEnv``)."""
    max_steps: int | None = None
    """No budget of its own: the step budget is ``TimeLimit``'s."""
    rewarded: bool = True
    """Its rewards come from a checker, unless it says otherwise (``TaskEnv`` without one, ``RecordingEnv``)."""

    @property
    def unwrapped(self) -> Self:
        return self


class OwnsDevice(BaseEnv):
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
        """The device; None until the first reset made one, unless one was passed in."""
        return self._device

    def _started_device(self) -> Any:
        """The device, for the environment's own calls: EnvError before the first reset made one."""
        if self._device is None:
            from envs.errors import EnvError

            raise EnvError(f"{self.name}: no device yet; call `await env.reset()` first")
        return self._device

    async def _close_owned_device(self) -> None:
        if self._owns_device and self._device is not None:
            await self._device.close()
            self._device = None

"""check_env: the checks every registered environment passes (after Gymnasium's env_checker)."""

from __future__ import annotations

from typing import Any

import numpy as np

from devices.actions import Action, ActionKind, Point
from devices.base import Device, Observation
from envs.base import Env, StepVerdict
from envs.errors import ConformanceError
from envs.wrappers import TimeLimit, Wrapper


def _require(ok: bool, env: Any, message: str) -> None:
    if not ok:
        raise ConformanceError(f"{getattr(env, 'name', type(env).__name__)}: {message}")


def _check_obs(env: Any, obs: Any, where: str) -> None:
    _require(isinstance(obs, Observation), env, f"{where} returned {type(obs).__name__}, not an Observation")
    f = obs.frame
    _require(isinstance(f, np.ndarray) and f.dtype == np.uint8 and f.ndim == 3 and f.shape[2] == 3
             and f.shape[0] > 0 and f.shape[1] > 0, env, f"{where}: the frame is not a non-empty RGB uint8 array")


async def check_env(env: Any, seeds: tuple[int, int] = (0, 1), *, same_frames: bool = True) -> None:
    """Raise ConformanceError on the first broken rule; closes the environment at the end. ``same_frames`` False:
    ``reset`` with one seed twice need not give the same frame (a screen that moves on its own), only the same
    instruction and frame size."""
    try:
        _require(isinstance(env, Env), env, "does not implement envs.base.Env (name, device, max_steps, rewarded, "
                                            "unwrapped, reset, step, verify, close)")
        _require(isinstance(env.name, str) and env.name, env, "name must be a non-empty string")
        _require(isinstance(env, TimeLimit) and env.max_steps >= 1, env,
                 "must come from envs.registry.make, wrapped in TimeLimit with a step budget of at least 1")
        inner = env.unwrapped
        _require(isinstance(inner, Env) and not isinstance(inner, Wrapper) and inner.unwrapped is inner, env,
                 "unwrapped must be the environment inside every wrapper, and its own unwrapped")
        _require(isinstance(env.rewarded, bool), env, f"rewarded must be a bool, got {env.rewarded!r}")
        first: dict[int, tuple[str, np.ndarray]] = {}
        for seed in (*seeds, seeds[0]):
            obs, info = await env.reset(seed=seed)
            _check_obs(env, obs, f"reset(seed={seed})")
            _require(env.device is None or isinstance(env.device, Device), env,
                     f"device must be a devices.base.Device or None after reset, got {type(env.device).__name__}")
            _require(isinstance(info, dict), env, "reset's info must be a dict")
            instruction = info.get("instruction")
            _require(isinstance(instruction, str) and instruction.strip() != "", env,
                     "reset's info['instruction'] must be a non-empty string")
            if seed in first:
                before, frame = first[seed]
                _require(before == instruction, env, f"reset(seed={seed}) twice gave different instructions")
                _require(frame.shape == obs.frame.shape and (not same_frames or np.array_equal(frame, obs.frame)),
                         env, f"reset(seed={seed}) twice gave different frames")
            else:
                first[seed] = (instruction, obs.frame)
        verdicts = await env.verify([Action(ActionKind.CLICK, point=Point(0.5, 0.5)), Action(ActionKind.WAIT, duration_s=0)])
        _require(verdicts is None or (isinstance(verdicts, list) and len(verdicts) == 2
                                      and all(isinstance(v, StepVerdict) for v in verdicts)), env,
                 "verify must return None or one StepVerdict per candidate")
        result = await env.step(Action(ActionKind.WAIT, duration_s=0))
        _require(isinstance(result, tuple) and len(result) == 5, env, "step must return (obs, reward, terminated, truncated, info)")
        obs, reward, terminated, truncated, info = result
        _check_obs(env, obs, "step")
        _require(isinstance(reward, float), env, f"reward must be a float, got {type(reward).__name__}")
        _require(isinstance(terminated, bool) and isinstance(truncated, bool), env, "terminated and truncated must be bools")
        _require(not (terminated and truncated), env, "terminated and truncated are both true")
        _require(isinstance(info, dict), env, "step's info must be a dict")
    finally:
        await env.close()

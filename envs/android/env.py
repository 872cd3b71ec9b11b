"""AndroidTaskEnv: one Android task (envs/android/tasks.py) on a phone reached through an adb server.

Construction is lazy: nothing connects until the first ``reset``. ``reset(seed)`` tears down the
previous episode's task, samples the task's parameters from the seed, goes to the home screen,
runs the task's set-up and returns the first frame with the instruction.

Outcomes: after every executed action the task's checker reads the phone; once the goal holds the
episode terminates with reward 1. ``finish`` is checked like any step (the goal would already have
ended the episode, so a finish is 0 unless the phone was changed from outside), and ``infeasible``
is 0 (every task here is feasible); both terminate. Otherwise the episode runs until its step
budget (``TimeLimit``; each task class names its own ``max_steps``) truncates it. ``verify``
scores candidates against the task's ``next_step``, read from the UI hierarchy; ``oracle`` plays
those steps until the episode ends.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from devices.actions import Action, ActionKind, Point
from devices.android import AndroidConfig, AndroidDevice
from devices.base import Observation
from envs.android.tasks import TASKS, AndroidTask, PhoneStep, StepKind
from envs.base import StepVerdict
from envs.checked import CheckedEnv
from envs.errors import EnvError
from envs.tasks import TaskVerdict


class AndroidTaskEnv(CheckedEnv):
    """An Android task on a phone (see the module docstring)."""

    def __init__(
        self,
        task: str | type[AndroidTask],
        serial: str = "",
        adb_port: int = 5037,
        adb_host: str = "127.0.0.1",
        device: AndroidDevice | None = None,
        env_name: str | None = None,
    ) -> None:
        if isinstance(task, str):
            if task not in TASKS:
                raise EnvError(f"no android task {task!r}; the tasks are {', '.join(sorted(TASKS))}")
            task = TASKS[task]
        self.task_class = task
        self.name = env_name or f"android/{task.name}"
        self.config = AndroidConfig(serial=serial, adb_host=adb_host, adb_port=adb_port)
        self._adopt_device(device)
        self._rng = random.Random()
        self.task: AndroidTask | None = None
        self._set_up = False
        self._last_tap: tuple[float, float] | None = None

    # -- life cycle -----------------------------------------------------------------------------
    async def _ensure_device(self) -> AndroidDevice:
        if self._device is None:
            device = AndroidDevice(self.config)
            await device.start()
            self._device = device
        return self._device

    async def _tear_down(self) -> None:
        if self.task is not None and self._set_up and self._device is not None:
            self._set_up = False
            await self.task.tear_down(self._device)

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
                    ) -> tuple[Observation, dict[str, Any]]:
        if seed is not None:
            self._rng.seed(seed)
            task_seed = seed
        else:
            task_seed = self._rng.getrandbits(31)
        device = await self._ensure_device()
        await self._tear_down()
        self.task = self.task_class.sample(random.Random(task_seed))
        await device.shell("input keyevent KEYCODE_HOME", "go to the home screen")
        await self.task.set_up(device)
        self._set_up = True
        self._last_tap = None
        self.begin_episode()
        obs = await device.observe()
        info = {"instruction": self.task.instruction, "task": self.task.name, "params": self.task.params(),
                "seed": task_seed}
        return obs, info

    async def close(self) -> None:
        try:
            await self._tear_down()
        finally:
            await self._close_owned_device()

    # -- stepping -------------------------------------------------------------------------------
    def _task(self) -> AndroidTask:
        if self.task is None:
            raise EnvError(f"{self.name}: call `await env.reset()` before stepping")
        return self.task

    async def check(self) -> TaskVerdict:
        """The task's state read from the phone now (success or not yet)."""
        return await self._task().check(self.device)

    async def judge_infeasible(self) -> TaskVerdict:
        return TaskVerdict(False, 0.0, {"reason": "declared infeasible; the task is feasible"})

    async def judge_finish(self) -> TaskVerdict:
        verdict = await self.check()
        if verdict.success:
            return verdict
        return TaskVerdict(False, 0.0, {**verdict.details, "reason": "finished before the task was done"})

    async def judge_step(self, action: Action) -> TaskVerdict | None:
        self._track_focus(action)
        verdict = await self.check()
        return verdict if verdict.success else None

    def _track_focus(self, action: Action) -> None:
        """Remember the last tap: text goes to the field it focused until something else happens."""
        if action.kind is ActionKind.CLICK or (action.kind is ActionKind.TYPE and action.point is not None):
            assert action.point is not None
            self._last_tap = (action.point.x, action.point.y)
        elif action.kind not in (ActionKind.TYPE, ActionKind.KEY, ActionKind.WAIT):
            self._last_tap = None

    # -- ground truth ---------------------------------------------------------------------------
    async def current_step(self) -> PhoneStep:
        """The step the task needs now (FINISH once the episode is over)."""
        if self.done:
            return PhoneStep(StepKind.FINISH)
        return await self._task().next_step(self.device, self._last_tap)

    async def verify(self, candidates: Sequence[Action]) -> list[StepVerdict]:
        """Score each candidate against the step the task needs, without executing anything."""
        needed = await self.current_step()
        return [_judge(a, needed) for a in candidates]

    async def oracle(self) -> tuple[float, list[Action]]:
        """Play the ground-truth steps until the episode ends, at most the task's ``max_steps``:
        (the last reward, the actions taken)."""
        actions: list[Action] = []
        reward = 0.0
        while not self.done and len(actions) < self.task_class.max_steps:
            action = action_for(await self.current_step())
            actions.append(action)
            _, reward, _, _, _ = await self.step(action)
        return reward, actions


def action_for(step: PhoneStep) -> Action:
    """The action that carries out a plan step."""
    if step.kind is StepKind.FINISH:
        return Action(ActionKind.FINISH)
    if step.kind is StepKind.OPEN_APP:
        return Action(ActionKind.OPEN_APP, text=step.package)
    if step.kind is StepKind.KEY:
        return Action(ActionKind.KEY, keys=(step.text,))
    if step.kind is StepKind.TYPE:
        return Action(ActionKind.TYPE, text=step.text)
    assert step.box is not None
    b = step.box
    return Action(ActionKind.CLICK, point=Point((b.x1 + b.x2) / 2, (b.y1 + b.y2) / 2))


def _judge(action: Action, needed: PhoneStep) -> StepVerdict:
    def verdict(ok: bool, reason: str) -> StepVerdict:
        return StepVerdict(ok, 1.0 if ok else 0.0, reason, {"needed": needed.to_dict()})

    on_box = needed.box is not None and action.point is not None and needed.box.contains(action.point.x, action.point.y)
    if needed.kind is StepKind.FINISH:
        return verdict(action.kind is ActionKind.FINISH, "the task is done: only finish is right")
    if needed.kind is StepKind.OPEN_APP:
        if action.kind is ActionKind.OPEN_APP:
            name = (action.text or "").strip()
            ok = name.split("/")[0] == needed.package or name.lower() == needed.label.lower()
            return verdict(ok, f"opens {needed.label}" if ok else f"opens {name!r}, not {needed.label}")
        if action.kind is ActionKind.CLICK and needed.box is not None:
            return verdict(on_box, f"on the {needed.label} icon" if on_box else f"not on the {needed.label} icon")
        return verdict(False, f"this step needs {needed.label} opened, not {action.kind.value}")
    if needed.kind is StepKind.CLICK:
        if action.kind is not ActionKind.CLICK:
            return verdict(False, f"this step needs a click on {needed.label}, not {action.kind.value}")
        return verdict(on_box, f"on {needed.label}" if on_box else f"outside {needed.label}")
    if needed.kind is StepKind.KEY:
        ok = action.kind is ActionKind.KEY and action.keys == (needed.text,)
        return verdict(ok, f"this step needs the {needed.text} key")
    if action.kind is not ActionKind.TYPE:
        return verdict(False, f"this step needs typing into {needed.label}, not {action.kind.value}")
    if action.text != needed.text:
        return verdict(False, f"types {action.text!r}, {needed.label} needs {needed.text!r}")
    ok = action.point is None or on_box
    return verdict(ok, f"into {needed.label}" if ok else f"taps outside {needed.label} before typing")

"""GeneratedEnv: a generated screen (envs/generated/layout.py) loaded into Chromium, with a checker
that reads the page's own record of clicks and typed values, and a step verifier that scores
candidate actions against the generator's exact boxes.

Outcomes: on a click task the first click on any widget decides (the target: reward 1, anything
else: 0). On a form task clicks on text fields are neutral; the first click on another widget
decides (Submit with every field holding its text: 1, otherwise 0). On an absent-target task
``infeasible`` is the right answer (1) and a click on any non-field widget is wrong (0); the step verifier
counts any abstention (``devices.actions.ABSTAIN_KINDS``: infeasible, or asking the user) as right there. ``finish``
is checked like any step (it succeeds only if the task is already done, which ends the episode
first, so a finish is always 0) and ``infeasible`` on a feasible task is 0.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from devices.actions import Action, ActionKind, is_abstention
from devices.base import Box, Observation
from devices.web import PlaywrightDevice, WebConfig
from envs.base import StepVerdict
from envs.checked import CheckedEnv
from envs.errors import EnvError
from envs.generated.layout import PlanStep, Role, Screen, ScreenParams, TaskKind, generate
from envs.tasks import TaskVerdict

_STATE_JS = """() => {
  const s = window.handeye || {clicks: [], values: {}, checked: {}};
  const a = document.activeElement;
  return {clicks: s.clicks, values: s.values, checked: s.checked, focused: (a && a.dataset && a.dataset.wid) || null};
}"""


class GeneratedEnv(CheckedEnv):
    """Procedurally generated screens with exact ground truth (see the module docstring)."""

    def __init__(
        self,
        task_kind: str = "click",
        difficulty: str = "medium",
        language: str = "en",
        theme: str = "light",
        form_factor: str = "desktop",
        device: PlaywrightDevice | None = None,
        env_name: str | None = None,
        phrasing: bool = False,
    ) -> None:
        self.params = ScreenParams(TaskKind(task_kind), difficulty, language, theme, form_factor, phrasing)
        self.name = env_name or f"generated/{task_kind}"
        self._adopt_device(device)
        self._rng = random.Random()
        self.screen: Screen | None = None

    # -- life cycle -----------------------------------------------------------------------------
    async def _ensure_device(self) -> PlaywrightDevice:
        width, height = self.params.size
        if self._device is None:
            self._device = PlaywrightDevice(WebConfig(viewport_width=width, viewport_height=height))
            await self._device.start()
        page = self._device.page
        if page.viewport_size != {"width": width, "height": height}:
            await page.set_viewport_size({"width": width, "height": height})
        return self._device

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
                    ) -> tuple[Observation, dict[str, Any]]:
        if seed is not None:
            self._rng.seed(seed)
            screen_seed = seed
        else:
            screen_seed = self._rng.getrandbits(31)
        device = await self._ensure_device()
        self.screen = generate(screen_seed, self.params)
        await device.page.set_content(self.screen.html, wait_until="load")
        self.begin_episode()
        obs = await device.observe()
        task = self.screen.task
        info = {
            "instruction": task.instruction,
            "task_kind": task.kind.value,
            "target_ids": list(task.target_ids),
            "target_boxes": [list(self.screen.norm_box(t)) for t in task.target_ids],
            "seed": screen_seed,
            **({"phrasing": task.phrasing} if task.phrasing else {}),
            "params": {k: (v.value if isinstance(v, TaskKind) else v) for k, v in asdict(self.params).items()},
        }
        return obs, info

    async def close(self) -> None:
        await self._close_owned_device()

    # -- stepping -------------------------------------------------------------------------------
    def _screen(self) -> Screen:
        if self.screen is None:
            raise EnvError(f"{self.name}: call `await env.reset()` before stepping")
        return self.screen

    async def judge_infeasible(self) -> TaskVerdict:
        ok = self._screen().task.kind is TaskKind.ABSENT
        return TaskVerdict(ok, 1.0 if ok else 0.0, {"reason": "declared infeasible"})

    async def judge_finish(self) -> TaskVerdict:
        return await self.check() or TaskVerdict(False, 0.0, {"reason": "finished before the task was done"})

    async def judge_step(self, action: Action) -> TaskVerdict | None:
        return await self.check()

    async def _state(self) -> dict[str, Any]:
        state = await self._started_device().evaluate(_STATE_JS)
        if not isinstance(state, dict):
            raise EnvError(f"{self.name}: the page returned {state!r} instead of its state")
        return state

    async def check(self) -> TaskVerdict | None:
        """The task's outcome read from the page, or None while it is undecided."""
        screen = self._screen()
        task = screen.task
        state = await self._state()
        roles = {w.id: w.role for w in screen.widgets}
        neutral = {Role.TEXT_FIELD} if task.kind is not TaskKind.CLICK else set()
        decisive = [c for c in state["clicks"] if roles.get(c) not in neutral]
        if not decisive:
            return None
        clicked = decisive[0]
        details = {"clicked": clicked, "clicked_label": screen.widget(clicked).label, "values": state["values"]}
        if task.kind is TaskKind.CLICK:
            ok = clicked == task.target_ids[0]
        elif task.kind is TaskKind.FORM:
            typed = all(state["values"].get(s.widget_id) == s.text for s in task.plan if s.kind == "type")
            ok = clicked == task.target_ids[-1] and typed
        else:
            ok = False
        return TaskVerdict(ok, 1.0 if ok else 0.0, details)

    # -- ground truth ---------------------------------------------------------------------------
    async def current_step(self) -> PlanStep | None:
        """The plan step the task needs next, read from the page (None once the episode is over)."""
        screen = self._screen()
        if self.done:
            return None
        task = screen.task
        if task.kind is not TaskKind.FORM:
            return task.plan[0]
        values = (await self._state())["values"]
        for s in task.plan:
            if s.kind != "type" or values.get(s.widget_id) != s.text:
                return s
        return task.plan[-1]

    def target_box(self, widget_id: str) -> Box:
        return Box(*self._screen().norm_box(widget_id))

    async def verify(self, candidates: Sequence[Action]) -> list[StepVerdict] | None:
        """Score each candidate against the widget this step needs, without executing anything."""
        needed = await self.current_step()
        focused = (await self._state())["focused"] if needed is not None and needed.kind == "type" else None
        return [self._judge(a, needed, focused) for a in candidates]

    def _judge(self, action: Action, needed: PlanStep | None, focused: str | None) -> StepVerdict:
        def verdict(ok: bool, reason: str) -> StepVerdict:
            return StepVerdict(ok, 1.0 if ok else 0.0, reason, {"needed": asdict(needed) if needed else None})

        if needed is None:
            return verdict(action.kind is ActionKind.FINISH, "the episode is over: only finish is right")
        if needed.kind == "infeasible":
            return verdict(is_abstention(action), "the named widget is absent: abstaining (infeasible, or asking the "
                                                  "user) is right")
        if is_abstention(action):
            return verdict(False, "the step's widget is on the screen: abstaining is wrong")
        assert needed.widget_id is not None
        box = self.target_box(needed.widget_id)
        on_target = action.point is not None and box.contains(action.point.x, action.point.y)
        if needed.kind == "click":
            if action.kind is not ActionKind.CLICK:
                return verdict(False, f"this step needs a click, not {action.kind.value}")
            return verdict(on_target, "on the target" if on_target else "outside the target's box")
        if action.kind is not ActionKind.TYPE:
            return verdict(False, f"this step needs typing into a field, not {action.kind.value}")
        if action.text != needed.text:
            return verdict(False, f"types {action.text!r}, the field needs {needed.text!r}")
        in_field = on_target if action.point is not None else focused == needed.widget_id
        return verdict(in_field, "into the right field" if in_field else "not into the field the task names")

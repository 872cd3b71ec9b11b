"""Generated screens as a prompt source: one screen per seed, rendered live in Chromium.

``GeneratedSource(seeds, params)`` renders generated screens (``envs.generated``) in Chromium, one per seed, on a
private event loop in a background thread (``train.data.background``), so the trainer calls it synchronously, and
code inside an event loop can call it too (it blocks; ``asyncio.to_thread`` keeps that loop free). The browser
starts on the first prompt; ``close()`` (or leaving a ``with`` block) stops it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from devices.errors import DeviceError
from envs.errors import EnvError
from policy.presets import GROUNDING_FAMILY, ModelPreset
from train.data.background import BackgroundLoop
from train.data.prompts import Skipped, build_prompt, make_target, resolve_preset
from train.errors import BadItem, PromptSourceError
from train.samples import RolloutPrompt

log = logging.getLogger(__name__)

__all__ = ["GeneratedSource"]


class GeneratedSource:
    """Prompts from generated screens rendered live in Chromium (see the module docstring).

    The ground truth is the first step of the task's plan: click tasks click the named widget; form tasks start by
    typing into the first field (action "type" with its text); absent-target tasks are negative samples (no box,
    action "impossible").

    Args:
        seeds: one screen per seed (``range(1000)``, a list).
        params: ``envs.generated.ScreenParams`` or a mapping of its fields (task_kind, difficulty, language, theme,
            form_factor); default: a medium English click task on a desktop screen.
        preset: the model preset (or id / family name) whose prompt and resizing ``agent run`` uses.
        timeout_s: the longest one screen may take to render.
    """

    def __init__(self, seeds: Iterable[int], params: Any = None, *, preset: ModelPreset | str = GROUNDING_FAMILY,
                 timeout_s: float = 60.0) -> None:
        from envs.generated.layout import ScreenParams

        self.seeds = [int(s) for s in seeds]
        if not self.seeds:
            raise PromptSourceError("GeneratedSource needs at least one seed")
        if len(set(self.seeds)) != len(self.seeds):
            raise PromptSourceError("GeneratedSource seeds must be distinct (each seed is one screen and one id)")
        if params is None:
            params = ScreenParams()
        elif isinstance(params, Mapping):
            params = ScreenParams(**params)
        self.params = params
        self.preset = resolve_preset(preset)
        self.timeout_s = timeout_s
        p = params
        self.key = f"{p.task_kind.value}-{p.difficulty}-{p.language}-{p.theme}-{p.form_factor}"
        self.name = f"generated:{self.key}"
        self.skipped: list[Skipped] = []
        self.rendered = 0
        self._loop = BackgroundLoop(f"handeye-{self.name}")
        self._env: Any = None

    def __len__(self) -> int:
        return len(self.seeds)

    def item_id(self, index: int) -> str:
        return f"generated/{self.key}:{self.seeds[index]}"

    async def _render(self, seed: int) -> tuple[Any, Any]:
        if self._env is None:
            from envs.generated import GeneratedEnv

            p = self.params
            self._env = GeneratedEnv(p.task_kind.value, p.difficulty, p.language, p.theme, p.form_factor)
        obs, _ = await self._env.reset(seed=seed)
        return obs, self._env.screen

    def prompt(self, index: int) -> RolloutPrompt:
        from envs.generated.layout import TaskKind

        seed = self.seeds[index]
        with self._loop.lock:
            try:
                obs, screen = self._loop.run(self._render(seed), self.timeout_s)
            except (EnvError, DeviceError, TimeoutError) as e:
                if self.rendered == 0:  # the browser never worked: a set-up problem, not a bad item
                    raise PromptSourceError(f"{self.name}: Chromium could not render a screen: "
                                            f"{type(e).__name__}: {e}") from e
                raise BadItem(f"{self.item_id(index)}: {type(e).__name__}: {e}") from None
            self.rendered += 1
        task = screen.task
        messages, image, space = build_prompt(self.preset, task.instruction, obs.frame)
        if task.kind is TaskKind.ABSENT:
            target = make_target(self.preset, space, task.instruction, None, action="impossible")
        else:
            step = task.plan[0]
            action = "type" if step.kind == "type" else "click"
            target = make_target(self.preset, space, task.instruction, screen.norm_box(step.widget_id),
                                 action=action, text=step.text if action == "type" else None)
        origin = {"id": self.item_id(index), "source": "generated", "env": self.key, "seed": seed,
                  "task_kind": task.kind.value}
        return RolloutPrompt(messages, image, obs.size, target, origin)

    def close(self) -> None:
        """Close the browser and stop the background loop (a later prompt starts them again)."""
        with self._loop.lock:
            if self._env is not None:
                try:
                    self._loop.run(self._env.close(), self.timeout_s)
                except (EnvError, DeviceError, TimeoutError) as e:
                    log.warning("%s: closing the browser failed: %s", self.name, e)
                self._env = None
            self._loop.stop()

    def __enter__(self) -> GeneratedSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""``bench/shapes``: the learning benchmark's shape screens (bench/learning/screens.py) shown in Chromium, as an
environment for online runs that a ~1M-parameter model can learn on a CPU.

A screen is one 224 x 224 image drawn 1:1 in a 224 x 224 viewport, so the frame is the model's input. The task is
the screen's instruction ("the red circle"). The first click decides the episode: reward 1 when the page recorded
it inside the target's box (inclusive, CSS pixels = image pixels), 0 otherwise; ``finish`` and ``infeasible`` end it
with 0. The step verifier scores a candidate click the same way without executing it. Importing this module
registers the environment (suite "bench", web devices).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from typing import Any

import numpy as np

from devices.actions import Action, ActionKind
from envs.base import StepVerdict
from envs.checked import CheckedEnv
from envs.errors import EnvError
from envs.registry import REGISTRY, register
from envs.tasks import TaskVerdict

SIZE = 224
NAME = "bench/shapes"

_PAGE = """<!doctype html><html><head><meta charset="utf-8"><style>html,body{{margin:0;overflow:hidden;background:#000}}
img{{display:block;width:{s}px;height:{s}px}}</style></head><body>
<img id="screen" src="data:image/png;base64,{png}" width="{s}" height="{s}">
<script>window.handeye={{clicks:[]}};document.addEventListener('click',e=>handeye.clicks.push([e.clientX,e.clientY]));
</script></body></html>"""


def _png(image: np.ndarray) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


class ShapesEnv(CheckedEnv):
    """Shape screens in a browser (see the module docstring)."""

    SETTLE = False  # a static image: nothing to wait for

    def __init__(self, distractors: int = 3, background: str = "gradient", device: Any = None,
                 env_name: str = NAME, grid: int = 2, mode: str = "share") -> None:
        self.name, self.distractors, self.background = env_name, distractors, background
        self.grid, self.mode = grid, mode
        self._adopt_device(device)
        self.screen: Any = None

    async def _ensure_device(self) -> Any:
        if self._device is None:
            from devices.web import PlaywrightDevice, WebConfig

            self._device = PlaywrightDevice(WebConfig(viewport_width=SIZE, viewport_height=SIZE))
            await self._device.start()
        page = self._device.page
        if page.viewport_size != {"width": SIZE, "height": SIZE}:
            await page.set_viewport_size({"width": SIZE, "height": SIZE})
        return self._device

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        from bench.learning.screens import make_screen

        self.screen = make_screen(np.random.default_rng(seed), self.distractors, self.background, self.grid, self.mode)
        device = await self._ensure_device()
        await device.page.set_content(_PAGE.format(s=SIZE, png=_png(self.screen.image)), wait_until="load")
        self.begin_episode()
        obs = await device.observe()
        if obs.size != (SIZE, SIZE):
            raise EnvError(f"{self.name}: the frame is {obs.size}, expected {SIZE}x{SIZE} (device pixel ratio 1)")
        return obs, {"instruction": self.screen.instruction, "seed": seed, "box": list(self.screen.box)}

    def _inside(self, x: float, y: float) -> bool:
        x1, y1, x2, y2 = self.screen.box
        return x1 <= x <= x2 and y1 <= y <= y2

    async def judge_infeasible(self) -> TaskVerdict:
        return TaskVerdict(False, 0.0, {"reason": "infeasible on a screen whose target is there"})

    async def judge_finish(self) -> TaskVerdict:
        return TaskVerdict(False, 0.0, {"reason": "finish on a screen whose target is there"})

    async def judge_step(self, action: Action) -> TaskVerdict | None:
        clicks = await self._started_device().evaluate("() => window.handeye.clicks")
        if not clicks:
            return None
        x, y = clicks[0]
        ok = self._inside(x, y)
        return TaskVerdict(ok, 1.0 if ok else 0.0, {"click": [x, y], "box": list(self.screen.box)})

    async def verify(self, candidates: Sequence[Action]) -> list[StepVerdict]:
        out = []
        for a in candidates:
            ok = a.kind is ActionKind.CLICK and a.point is not None and self._inside(a.point.x * SIZE, a.point.y * SIZE)
            out.append(StepVerdict(ok, 1.0 if ok else 0.0, "inside the target's box" if ok else "not on the target"))
        return out

    async def close(self) -> None:
        await self._close_owned_device()


SETTINGS = {
    NAME: ("find a coloured shape on a 224 px screen (benchmark)", {}),
    f"{NAME}-a": ("the learning benchmark's setting a: one distractor differing in colour and shape, 2 x 2 grid",
                  {"distractors": 1, "grid": 2, "mode": "differ"}),
    f"{NAME}-hard": ("the learning benchmark's hard setting: three look-alike distractors, 4 x 4 grid",
                     {"distractors": 3, "grid": 4, "mode": "share"}),
}
"""Registered names -> (description, ShapesEnv arguments); the ``-a`` and ``-hard`` screens are
``bench.learning``'s settings of the same names (``bench/learning/__main__.py``, SETTINGS)."""

for _name, (_about, _look) in SETTINGS.items():
    if _name not in REGISTRY:
        register(_name, "bench.online.shapes:ShapesEnv", "bench", _about, device_kind="web", max_steps=3,
                 env_name=_name, **_look)

"""MiniWobEnv: a MiniWoB++ task page (the ``miniwob`` package's html/, served by LocalSite) in a
PlaywrightDevice, driven the way BrowserGym drives it, without Selenium.

Reset loads ``miniwob/<task>.html``, hides the human-only UI (the START cover, the reward HUD and
the click canvas), measures the task area (``#wrap``: 160 x 210 CSS px on almost every task) and
fits the viewport to it, lifts the episode timer (``core.EPISODE_MAX_TIME``), seeds
``Math.seedrandom(seed)``, calls ``core.startEpisodeReal()``, waits for ``WOB_TASK_READY`` and lets the screen
settle (the images a task's own elements show, such as the email inbox's icons, arrive after the page's load; a
frame taken at once can miss them). The instruction is the page's utterance (the natural-language tasks' parsed
answer that comes with it is left out).

Outcome: core.js's ``core.endEpisode`` is wrapped so that the first outcome of the episode is kept
in ``window.__handeye_outcome`` whatever the page does next (it shows the START cover again at once;
a restart would clear ``WOB_DONE_GLOBAL``), and each step reads it right after the action. Reward:
raw reward 1 -> 1.0, anything else 0.0 (the raw and the time-scaled values are in info).
``terminated`` when the page ended the episode (the step budget is ``TimeLimit``'s). ``finish`` and
``infeasible`` end the episode with 0 (every MiniWoB task is feasible and is over only when the
page says so).

Zoom is the device pixel ratio: the CSS layout stays the one the tasks were written for (their
scripts read ``pageX`` and fixed pixel sizes), and the frame is zoom times larger (BrowserGym uses
1.5 for visual agents). An environment given a device uses that device's pixel ratio as its zoom.

Step verification and the oracle cover the click-style tasks in ``TARGET_TASKS``: the element the
next step needs is found in the DOM, and a candidate is right when the element under its point is
that element (or inside it), which also handles overlapping buttons.
"""

from __future__ import annotations

import importlib.resources
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from devices.actions import Action, ActionKind, Point
from devices.base import Box, Observation
from devices.web import PlaywrightDevice, WebConfig
from envs.base import OwnsDevice, StepVerdict, perform, timed_observe
from envs.errors import EnvError
from envs.site import LocalSite

TASK_WIDTH, TASK_HEIGHT = 160, 210
"""The task area (``#wrap``, query included) of a standard MiniWoB++ page, CSS px."""
EPISODE_MAX_TIME_MS = 1_000_000_000
"""The lifted episode timer (11.6 days; setTimeout's limit is 2**31 - 1 ms)."""
DEFAULT_MAX_STEPS = 10
"""The step budget ``envs.registry.make`` gives every MiniWoB++ task."""

_SETUP_JS = """([maxTime]) => {
  if (typeof core !== 'object' || typeof core.startEpisodeReal !== 'function') return null;
  const style = document.createElement('style');
  style.textContent = '#sync-task-cover, #reward-display, #click-canvas {display: none !important;}';
  document.head.appendChild(style);
  core.EPISODE_MAX_TIME = maxTime;
  const end = core.endEpisode;
  window.__handeye_outcome = null;
  core.endEpisode = function () {
    const live = core.EP_TIMER !== null;
    const result = end.apply(this, arguments);
    if (live && window.__handeye_outcome === null) {
      window.__handeye_outcome = {raw: WOB_RAW_REWARD_GLOBAL, reward: WOB_REWARD_GLOBAL,
                                  reason: WOB_REWARD_REASON, done: WOB_DONE_GLOBAL};
    }
    return result;
  };
  const w = document.getElementById('wrap');
  const r = w ? w.getBoundingClientRect() : null;
  return {wrap: r ? [Math.ceil(r.right), Math.ceil(r.bottom)] : null};
}"""

_START_JS = """([seed]) => {
  window.__handeye_outcome = null;
  Math.seedrandom(seed);
  core.startEpisodeReal();
  return true;
}"""

_UTTERANCE_JS = """() => {
  const u = core.getUtterance();
  return typeof u === 'string' ? u : u.utterance;
}"""
"""The task's instruction. The natural-language tasks (email-inbox-nl-turk, ...) answer ``{utterance, fields}``
outside their test mode, ``fields`` being the answer parsed from the utterance: only the utterance is the task."""

_STATE_JS = """() => ({outcome: window.__handeye_outcome, done: WOB_DONE_GLOBAL, raw: WOB_RAW_REWARD_GLOBAL,
                      reward: WOB_REWARD_GLOBAL, reason: WOB_REWARD_REASON, episode: WOB_EPISODE_ID,
                      max_time: core.EPISODE_MAX_TIME})"""

# The element(s) the next step needs, per task; `q` is the utterance and `quoted` its "..." part.
TARGET_TASKS: dict[str, str] = {
    "click-button": "[...document.querySelectorAll('#area button')].filter(b => b.textContent === quoted)",
    "click-link": "[...document.querySelectorAll('#area .alink')].filter(b => b.textContent === quoted)",
    "click-test": "[document.getElementById('subbtn')]",
    "click-test-2": "[document.getElementById('subbtn')]",
    "click-test-transfer": "[...document.querySelectorAll('#area button')].filter(b => b.textContent === (q.match(/button (\\w+)/) || [])[1])",
    "click-dialog": "[...document.querySelectorAll('.ui-dialog-titlebar-close')]",
    "click-button-sequence": "(buttonsPushed.length < 2 ? [document.getElementById(EXPECTED_SEQUENCE[buttonsPushed.length])] : [])",
    "focus-text": "[document.getElementById('tt')]",
    "focus-text-2": "[document.getElementById('tt' + (['1st', '2nd', '3rd'].findIndex(p => q.includes(p)) + 1))]",
}

_TARGET_JS = """([points]) => {
  const q = core.getUtterance();
  const quoted = (q.match(/"(.*)"/) || [])[1];
  const els = (%s).filter(Boolean);
  const vv = window.visualViewport;
  const toCss = ([x, y]) => [vv.offsetLeft + x * vv.width, vv.offsetTop + y * vv.height];
  const norm = ([x, y]) => [(x - vv.offsetLeft) / vv.width, (y - vv.offsetTop) / vv.height];
  const onTarget = (x, y) => {
    const e = document.elementFromPoint(x, y);
    return !!e && els.some(t => t === e || t.contains(e));
  };
  let point = null;
  for (const t of els) {
    const r = t.getBoundingClientRect();
    const tries = [[(r.left + r.right) / 2, (r.top + r.bottom) / 2]];
    for (let i = 1; i < 8; i++) for (let j = 1; j < 8; j++) tries.push([r.left + r.width * i / 8, r.top + r.height * j / 8]);
    point = tries.find(([x, y]) => x >= vv.offsetLeft && y >= vv.offsetTop && x < vv.offsetLeft + vv.width
                                   && y < vv.offsetTop + vv.height && onTarget(x, y)) || null;
    if (point) break;
  }
  return {
    count: els.length,
    point: point && norm(point),
    boxes: els.map(t => { const r = t.getBoundingClientRect(); return [...norm([r.left, r.top]), ...norm([r.right, r.bottom])]; }),
    labels: els.map(t => (t.textContent || t.id || t.tagName).trim().slice(0, 40)),
    hits: points.map(p => p === null ? false : onTarget(...toCss(p))),
  };
}"""


def html_root() -> Path:
    """The ``miniwob`` package's html/ folder."""
    try:
        root = importlib.resources.files("miniwob") / "html"
    except ModuleNotFoundError as e:
        raise EnvError("the MiniWoB++ tasks need the miniwob package: pip install miniwob") from e
    path = Path(str(root))
    if not (path / "miniwob").is_dir() or not (path / "core" / "core.js").is_file():
        raise EnvError(f"the miniwob package has no task pages under {path}; reinstall it: pip install miniwob")
    return path


class MiniWobEnv(OwnsDevice):
    """One MiniWoB++ task (see the module docstring)."""

    def __init__(
        self,
        task: str,
        zoom: float = 1.0,
        device: PlaywrightDevice | None = None,
        ready_timeout_s: float = 10.0,
        html_dir: str | Path | None = None,
        env_name: str | None = None,
    ) -> None:
        self.task = task
        self.name = env_name or f"miniwob/{task}"
        if not 0.5 <= zoom <= 4:
            raise EnvError(f"{self.name}: zoom={zoom} must be between 0.5 and 4")
        self.zoom = float(device.config.device_scale_factor) if device is not None else float(zoom)
        self.ready_timeout_s = ready_timeout_s
        self._html_dir = Path(html_dir) if html_dir is not None else None
        self._adopt_device(device)
        self._site: LocalSite | None = None
        self._rng = random.Random()
        self.done = False
        self.seed: int | None = None
        self._started = False

    # -- life cycle -----------------------------------------------------------------------------
    def _page_url(self) -> str:
        root = self._html_dir or html_root()
        if not (root / "miniwob" / f"{self.task}.html").is_file():
            raise EnvError(f"{self.name}: no MiniWoB++ task {self.task!r} (no miniwob/{self.task}.html in {root})")
        if self._site is None:
            self._site = LocalSite(root)
        return self._site.url(f"miniwob/{self.task}.html")

    async def _ensure_device(self) -> PlaywrightDevice:
        if self._device is None:
            self._device = PlaywrightDevice(WebConfig(viewport_width=TASK_WIDTH, viewport_height=TASK_HEIGHT,
                                                      device_scale_factor=self.zoom))
            await self._device.start()
        return self._device

    async def _fit_viewport(self, size: tuple[int, int]) -> None:
        page = self.device.page
        want = {"width": max(100, size[0]), "height": max(100, size[1])}
        if page.viewport_size != want:
            await page.set_viewport_size(want)

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
                    ) -> tuple[Observation, dict[str, Any]]:
        if seed is not None:
            self._rng.seed(seed)
            episode_seed = seed
        else:
            episode_seed = self._rng.getrandbits(31)
        url = self._page_url()
        device = await self._ensure_device()
        await self._fit_viewport((TASK_WIDTH, TASK_HEIGHT))
        await device.goto(url)
        setup = await device.evaluate(_SETUP_JS, [EPISODE_MAX_TIME_MS])
        if not isinstance(setup, dict):
            raise EnvError(f"{self.name}: {url} is not a MiniWoB++ page (no core.js `core` object)")
        wrap = setup.get("wrap") or [TASK_WIDTH, TASK_HEIGHT]
        await self._fit_viewport((int(wrap[0]), int(wrap[1])))
        await device.evaluate(_START_JS, [episode_seed])
        await self._wait_ready()
        await device.settle()
        self.done = False
        self.seed = episode_seed
        self._started = True
        instruction = await device.evaluate(_UTTERANCE_JS)
        obs = await device.observe()
        info = {
            "instruction": instruction,
            "task": self.task,
            "seed": episode_seed,
            "zoom": self.zoom,
            "task_area_css": [int(wrap[0]), int(wrap[1])],
            "verifiable": self.task in TARGET_TASKS,
        }
        return obs, info

    async def _wait_ready(self) -> None:
        from playwright.async_api import TimeoutError as PlaywrightTimeout

        try:
            await self.device.page.wait_for_function("() => WOB_TASK_READY === true",
                                                     timeout=self.ready_timeout_s * 1000)
        except PlaywrightTimeout as e:
            raise EnvError(f"{self.name}: the task page never became ready (WOB_TASK_READY stayed false for "
                           f"{self.ready_timeout_s:g} s)") from e

    async def close(self) -> None:
        await self._close_owned_device()
        if self._site is not None:
            self._site.close()
            self._site = None

    # -- stepping -------------------------------------------------------------------------------
    def _require_started(self) -> None:
        if not self._started:
            raise EnvError(f"{self.name}: call `await env.reset()` before stepping")

    async def state(self) -> dict[str, Any]:
        """core.js's globals and the kept outcome of this episode (None while it is open)."""
        state = await self._started_device().evaluate(_STATE_JS)
        if not isinstance(state, dict):
            raise EnvError(f"{self.name}: the page returned {state!r} instead of its state")
        return state

    async def step(self, action: Action) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        self._require_started()
        if self.done:
            raise EnvError(f"{self.name}: the episode is over; call `await env.reset()` to start another")
        info: dict[str, Any] = {}
        effect = None
        if action.kind in (ActionKind.FINISH, ActionKind.INFEASIBLE):
            terminated, reward = True, 0.0
            info.update(success=False, raw_reward=None, reason=f"{action.kind.value} before the page ended the episode")
        else:
            # No settling before the outcome is read: the page restarts its episode (and clears its globals) at once.
            effect = await perform(self.device, action, settle=False)
            outcome = (await self.state())["outcome"]
            info["effect"] = effect
            terminated = outcome is not None
            reward = 1.0 if terminated and outcome["raw"] == 1 else 0.0
            if terminated:
                info.update(success=reward == 1.0, raw_reward=float(outcome["raw"]),
                            time_reward=float(outcome["reward"]), reason=outcome["reason"])
        self.done = terminated
        obs = await timed_observe(self.device, effect)
        return obs, reward, terminated, False, info

    # -- ground truth ---------------------------------------------------------------------------
    async def target(self, points: Sequence[Point | None] = ()) -> dict[str, Any] | None:
        """The element(s) the next step needs (count, boxes, a visible point on one, labels) and
        whether each of ``points`` lands on one; None for tasks without DOM ground truth."""
        expr = TARGET_TASKS.get(self.task)
        if expr is None:
            return None
        self._require_started()
        return await self.device.evaluate(_TARGET_JS % expr, [[None if p is None else [p.x, p.y] for p in points]])

    async def verify(self, candidates: Sequence[Action]) -> list[StepVerdict] | None:
        """Score each candidate against the element the next step needs, without executing it."""
        if self.task not in TARGET_TASKS:
            return None
        if self.done:
            return [StepVerdict(a.kind is ActionKind.FINISH, float(a.kind is ActionKind.FINISH),
                                "the episode is over: only finish is right") for a in candidates]
        target = await self.target([a.point if a.kind is ActionKind.CLICK else None for a in candidates])
        assert target is not None
        details = {"target_boxes": target["boxes"], "target_labels": target["labels"]}
        verdicts = []
        for action, hit in zip(candidates, target["hits"]):
            if action.kind is not ActionKind.CLICK:
                verdicts.append(StepVerdict(False, 0.0, f"this step needs a click, not {action.kind.value}", details))
            else:
                verdicts.append(StepVerdict(bool(hit), float(bool(hit)),
                                            "on the target" if hit else "not on the target element", details))
        return verdicts

    async def oracle_action(self) -> tuple[Action, Box | None]:
        """The action that solves the next step, read from the DOM (FINISH once the episode is over)."""
        if self.done:
            return Action(ActionKind.FINISH), None
        target = await self.target()
        if target is None:
            raise EnvError(f"{self.name}: the oracle does not support this task")
        if target["point"] is None:
            raise EnvError(f"{self.name}: no visible point on the target ({target['count']} candidate elements)")
        box = Box(*target["boxes"][0]).clipped() if target["boxes"] else None
        return Action(ActionKind.CLICK, point=Point(*target["point"])), box


"""DerivedTaskEnv: a task derived from a demonstration (``envs/derived/spec.py``), run on its device.

    env = make("tasks/subscribe")                 # registered from tasks/subscribe.json
    obs, info = await env.reset()                  # the start state: the page, the app, the command

Making one refuses a task whose start runs a command (a desktop ``start.command``, an Android shell line other than a
force-stop) unless its folder is trusted (``envs/derived/trust.py``, ``--trust-tasks DIR``).

``reset`` puts the device in the task's start state each time: the web opens the start page in a fresh page (the
other tabs closed, cookies and the origin's storage cleared, the recorded viewport); Android goes home, runs the
recipe's commands and starts the app; the desktop starts the task's command (stopping the previous one). Seeds
change nothing: a recorded task has one start state.

Outcomes, as the other checked environments: after every executed action the conditions are read from the device;
once they all hold the episode terminates with reward 1. ``finish`` is judged the same way (reward 1 only if they
hold), ``infeasible`` is 0 (a person did the task); both terminate. There is no step verifier (``verify`` is
None). Desktop tasks with ``ocr_text`` conditions need a ``text_reader`` (``agent.derived_tasks.OcrTextReader``);
their OCR runs only once every other condition holds.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from devices.actions import Action
from devices.base import Observation
from devices.errors import DeviceDisconnected, DeviceError
from envs.base import StepVerdict
from envs.checked import CheckedEnv
from envs.derived.checkers import check, verdict
from envs.derived.spec import (AndroidStart, DesktopStart, DeviceKind, OcrTextCondition, TaskSpec, WebStart,
                               load_task)
from envs.derived.states import (TextReader, newest_page, read_android_state, read_desktop_state, read_web_state,
                                 wanted_selectors)
from envs.derived.trust import check_trusted
from envs.errors import EnvError
from envs.tasks import TaskVerdict

log = logging.getLogger(__name__)

SETTLE_ATTEMPTS = 3
"""Tries at letting the start page settle (a capture right after a navigation can fail once)."""


class DerivedTaskEnv(CheckedEnv):
    """A derived task on its device (see the module docstring)."""

    def __init__(self, path: str | Path, device: Any = None, serial: str = "", adb_port: int = 5037,
                 adb_host: str = "127.0.0.1", text_reader: TextReader | None = None, env_name: str | None = None
                 ) -> None:
        self.spec: TaskSpec = load_task(path)
        check_trusted(self.spec, path)  # a start that runs a command: only from a folder --trust-tasks names
        self.name = env_name or f"tasks/{self.spec.name}"
        self.text_reader = text_reader
        self.adb = (serial, adb_host, adb_port)
        if any(isinstance(c, OcrTextCondition) for c in self.spec.conditions) and text_reader is None:
            raise EnvError(f"{self.name} checks text on the screen with OCR (ocr_text conditions): give the "
                           "environment a text_reader (agent.derived_tasks.OcrTextReader); environments cannot run "
                           "OCR themselves")
        self._adopt_device(device)
        self._site: Any = None
        self._app: subprocess.Popen[bytes] | None = None
        self._wanted = wanted_selectors(self.spec.conditions)

    # -- life cycle -------------------------------------------------------------------------------------------------
    def _new_device(self) -> Any:
        kind = self.spec.device
        if kind is DeviceKind.WEB:
            from devices.web import PlaywrightDevice, WebConfig

            viewport = self.spec.start.viewport if isinstance(self.spec.start, WebStart) else None
            size = {"viewport_width": viewport[0], "viewport_height": viewport[1]} if viewport else {}
            return PlaywrightDevice(WebConfig(**size))
        if kind is DeviceKind.ANDROID:
            from devices.android import AndroidConfig, AndroidDevice

            serial, host, port = self.adb
            return AndroidDevice(AndroidConfig(serial=serial, adb_host=host, adb_port=port))
        from devices.desktop import DesktopDevice

        return DesktopDevice()

    async def _ensure_device(self) -> Any:
        if self._device is None:
            device = self._new_device()
            await device.start()
            self._device = device
        return self._device

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
                    ) -> tuple[Observation, dict[str, Any]]:
        device = await self._ensure_device()
        start = self.spec.start
        if isinstance(start, WebStart):
            await self._reset_web(device, start)
        elif isinstance(start, AndroidStart):
            await reset_android(device, start, self.name)
        else:
            await self._reset_desktop(device, start)
        self.begin_episode()
        obs = await device.observe()
        spec = self.spec
        return obs, {"instruction": spec.instruction, "task": spec.name, "language": spec.language,
                     "device": spec.device.value, "conditions": len(spec.conditions)}

    def start_url(self) -> str:
        """The address the web task starts at (its ``start.page`` served from the task's folder)."""
        start = self.spec.start
        assert isinstance(start, WebStart)
        if start.url:
            return start.url
        if self._site is None:
            from envs.site import LocalSite

            self._site = LocalSite(self.spec.folder or Path("."))
        return self._site.url(Path(start.page).as_posix())

    async def _reset_web(self, device: Any, start: WebStart) -> None:
        await open_fresh(device, self.start_url(), start.viewport)

    async def _reset_desktop(self, device: Any, start: DesktopStart) -> None:
        self._stop_app()
        if start.command:
            try:
                self._app = subprocess.Popen(list(start.command), start_new_session=True,
                                             env={**os.environ, "DISPLAY": device.display},
                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            except OSError as e:
                raise EnvError(f"{self.name}: cannot start {start.command[0]!r}: {e.strerror or e}") from e
            await asyncio.sleep(start.wait_s)
        await device.settle()

    def _stop_app(self) -> None:
        app, self._app = self._app, None
        if app is None or app.poll() is not None:
            return
        try:
            os.killpg(app.pid, signal.SIGTERM)
            app.wait(timeout=5)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(app.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    async def close(self) -> None:
        self._stop_app()
        if self._site is not None:
            self._site.close()
            self._site = None
        await self._close_owned_device()

    # -- checking ---------------------------------------------------------------------------------------------------
    async def state(self, *, ocr: bool = True) -> dict[str, Any]:
        """The device's state as the conditions read it (``envs/derived/checkers.py``); works on a borrowed device
        before any reset (the end of a demonstration, say)."""
        device = self._started_device()
        kind = self.spec.device
        if kind is DeviceKind.WEB:
            return await read_web_state(newest_page(device.context, device.page), self._wanted)
        if kind is DeviceKind.ANDROID:
            return await read_android_state(device)
        return await read_desktop_state(device, self.text_reader, ocr=ocr)

    async def check(self) -> TaskVerdict:
        """Whether every condition holds now; the details say what each found."""
        conditions = self.spec.conditions
        cheap = [c for c in conditions if not isinstance(c, OcrTextCondition)]
        results = check(cheap, await self.state(ocr=False))
        if len(cheap) < len(conditions) and all(r.holds for r in results):
            results = check(conditions, await self.state(ocr=True))  # OCR only when it can decide
        elif len(cheap) < len(conditions):
            results += [r for r in check(conditions, {"ocr": []}) if isinstance(r.condition, OcrTextCondition)]
        return verdict(results)

    async def judge_infeasible(self) -> TaskVerdict:
        return TaskVerdict(False, 0.0, {"reason": "declared infeasible; a person did this task"})

    async def judge_finish(self) -> TaskVerdict:
        return await self.check()

    async def judge_step(self, action: Action) -> TaskVerdict | None:
        result = await self.check()
        return result if result.success else None

    async def verify(self, candidates: Sequence[Action]) -> list[StepVerdict] | None:
        return None


async def open_fresh(device: Any, url: str, viewport: tuple[int, int] | None = None) -> None:
    """Open ``url`` on a started ``PlaywrightDevice`` as if for the first time: its other tabs closed, cookies and
    the origin's storage cleared, the viewport ``viewport`` (CSS pixels) when given; then let the page settle."""
    page, context = device.page, device.context
    for other in list(context.pages):
        if other is not page:
            await other.close()
    if viewport and page.viewport_size != {"width": viewport[0], "height": viewport[1]}:
        await page.set_viewport_size({"width": viewport[0], "height": viewport[1]})
    await page.goto("about:blank")
    await context.clear_cookies()
    await clear_origin_storage(context, page, url)
    await device.goto(url)
    for attempt in range(SETTLE_ATTEMPTS):
        try:
            await device.settle()
            return
        except DeviceDisconnected:
            raise
        except DeviceError as e:
            # Chromium sometimes refuses a capture just after a navigation ("Unable to capture screenshot") while
            # the new document's first frame is not composited yet; a moment later it works.
            if attempt == SETTLE_ATTEMPTS - 1:
                raise
            log.debug("settling after opening %s: %s; trying again", url, e)
            await asyncio.sleep(0.2 * (attempt + 1))


async def clear_origin_storage(context: Any, page: Any, url: str) -> None:
    """Drop what the start page's origin stored (local storage, IndexedDB, caches) so a reset starts fresh."""
    parts = urlparse(url)
    if parts.scheme not in ("http", "https"):
        return
    cdp = await context.new_cdp_session(page)
    try:
        await cdp.send("Storage.clearDataForOrigin", {"origin": f"{parts.scheme}://{parts.netloc}",
                                                      "storageTypes": "all"})
    finally:
        await cdp.detach()


async def reset_android(device: Any, start: AndroidStart, name: str) -> None:
    """Home, the recipe's commands, then the app (stopped first when ``restart``)."""
    import shlex

    await device.shell("input keyevent KEYCODE_HOME", "go to the home screen")
    for command in start.commands:
        out, rc = await device.shell_rc(command, f"run the start recipe of {name}", idempotent=False)
        if rc != 0:
            raise EnvError(f"{name}: the start recipe's `{command}` exited with {rc}: {out.strip()[:200]}")
    if start.package:
        package = shlex.quote(start.package)
        if start.restart:
            await device.shell(f"am force-stop {package}", f"stop {start.package}")
        if start.activity:
            component = shlex.quote(f"{start.package}/{start.activity}")
            out = await device.shell(f"am start -W -n {component}", f"start {start.package}")
        else:
            out = await device.shell(f"monkey -p {package} -c android.intent.category.LAUNCHER 1",
                                     f"start {start.package}")
        if "Error" in out or "aborted" in out:
            raise EnvError(f"{name}: cannot start {start.package}: {out.strip()[:300]}")
    await device.settle()

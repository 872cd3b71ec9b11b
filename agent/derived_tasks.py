"""``agent record --make-task NAME``: a demonstration becomes a task that ``agent eval --suite tasks`` runs.

    maker = TaskMaker("subscribe", tasks_dir(), kind="web")     # refuses a bad name, a taken one, a kind without tasks
    maker.watch(recorder)                                        # phone, desktop: the start state once it starts
    ...record the demonstration...
    await maker.read_final(recorder, writer.path)                # after the stop key, before the recorder closes
    ...close the recorder...
    ok = maker.finish(console, recorder, writer.path, section)  # start state, derive, review, write

The states are read through the recorder, as its device kind reads them (``envs.derived.demo_states``: the web's
active page; a phone; an X display, with OCR); where the start cannot be opened again (a phone, a desktop) the start
state is read as soon as the recorder has started (``watch``; a recorder's own ``start_state`` is used when it has
one). The task is
derived (``envs.derived.derive_task``), written, shown, and with a terminal the person keeps it, drops it or edits it
in $VISUAL / $EDITOR (the file is read again strictly after each edit).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from devices.base import Box
from devices.errors import DeviceError
from devices.registry import DEFAULT_KIND
from envs.derived import TaskSpec, derive_task, load_task, tasks_dir
from envs.derived.demo_states import demo_states
from envs.derived.spec import WebStart, condition_dict, task_path, write_task
from envs.errors import EnvError, TaskFileError
from envs.site import PAGES_DIR
from envs.trajectory import read_episode
from agent.terminal import plain

log = logging.getLogger(__name__)


class OcrTextReader:
    """``envs.derived.TextReader`` through the OCR policy's engine (RapidOCR): lines with normalized boxes."""

    def __init__(self, config: Any = None) -> None:
        from policy.ocr import OcrPolicy

        self.ocr = OcrPolicy(config)

    def read_lines(self, frame: np.ndarray) -> list[tuple[str, Box]]:
        height, width = frame.shape[:2]
        return [(line.text, Box(line.box.left / width, line.box.top / height, line.box.right / width,
                                line.box.bottom / height).clipped()) for line in self.ocr.read(frame)]


class TaskMaker:
    """Derives one task from the demonstration being recorded (see the module docstring)."""

    def __init__(self, name: str, folder: str | Path | None = None, *, kind: str = DEFAULT_KIND,
                 builtin_page: bool = False, text_reader: Any = None) -> None:
        self.folder = Path(folder) if folder is not None else tasks_dir()
        self.path = task_path(self.folder, name)  # TaskFileError for a name that cannot name a file
        if self.path.exists():
            raise TaskFileError(f"{self.path} exists; choose another --make-task name or remove the file first")
        self.name = name
        self.kind = kind
        self.states = demo_states(kind, text_reader=lambda: text_reader or OcrTextReader())
        """How this kind's states are read (``envs.derived.demo_states``); TaskFileError for a kind without tasks."""
        self.builtin_page = builtin_page
        """The recording started on a page of the built-in site: the page is copied next to the task."""
        self.final: dict[str, Any] | None = None
        self.problem = ""

    def watch(self, recorder: Any) -> None:
        """Read the start state as soon as ``recorder`` has started, where the device cannot be put back later (a
        phone, a desktop) and the recorder does not read one itself (``start_state``). A replayable kind's (the
        web's) is read again after the recording, from a fresh page."""
        if self.states.replayable:
            return
        start = recorder.start

        async def start_then_read() -> None:
            await start()
            if getattr(recorder, "start_state", None):
                return
            try:
                recorder.start_state = await self.states.read(recorder)
            except (DeviceError, EnvError) as e:
                log.warning("could not read the start state (%s); the derived conditions may hold at the start", e)

        recorder.start = start_then_read

    async def read_final(self, recorder: Any, episode_path: str | Path) -> None:
        """Read the final state through ``recorder`` (still open); a failure is kept for ``finish`` to report."""
        try:
            self.final = await self.states.final(recorder, read_episode(episode_path))
        except (DeviceError, EnvError) as e:
            self.problem = (f"could not read the final state from the device ({e}); end the demonstration with the "
                            "stop key while the page or app is still open")

    def derive(self, recorder: Any, episode_path: str | Path, section: Any) -> TaskSpec:
        """The derived task (after ``read_final``); TaskFileError / EnvError saying why there is none. ``section``:
        the device kind's config section (the web's, for the fresh browser its start state is read again in)."""
        if self.final is None:
            raise EnvError(self.problem or "the demonstration did not end with the stop key: no final state to "
                           "derive a task from")
        episode = read_episode(episode_path)
        start = asyncio.run(self.states.start(recorder, episode, section))
        spec = derive_task(episode, start, self.final, self.name)
        if self.builtin_page and isinstance(spec.start, WebStart):
            spec = self.with_builtin_page(spec)
        if isinstance(spec.start, WebStart) and spec.start.url.lower().startswith("file:"):
            spec = self.with_local_page(spec)
        return spec

    def with_local_page(self, spec: TaskSpec) -> TaskSpec:
        """A demonstration started at a ``file:`` page (``--url file:///...``, which the person gave): a task file
        starts only at http(s) addresses, so the page goes next to the task file and is named by ``start.page``
        (only the page itself is copied; a page that loads other local files needs them copied too)."""
        from urllib.parse import unquote, urlparse
        from urllib.request import url2pathname

        assert isinstance(spec.start, WebStart)
        source = Path(url2pathname(unquote(urlparse(spec.start.url).path)))
        target = self.folder / source.name
        if not source.is_file():
            raise TaskFileError(f"the demonstration started at {spec.start.url}, which is not a file here; a task "
                                f"starts at an http(s) address or at a page next to its file: copy the page into "
                                f"{self.folder} and record again from it")
        if target.exists() and target.read_bytes() != source.read_bytes():
            raise TaskFileError(f"{target} exists and differs from the start page {source}; rename one of them "
                                "and record again")
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            shutil.copyfile(source, target)
        return replace(spec, start=replace(spec.start, url="", page=source.name), folder=self.folder)

    def with_builtin_page(self, spec: TaskSpec) -> TaskSpec:
        """The built-in site lives only while ``agent record`` runs: its page goes next to the task file."""
        from urllib.parse import urlparse

        assert isinstance(spec.start, WebStart)
        relative = urlparse(spec.start.url).path.lstrip("/") or "demo.html"
        source, target = PAGES_DIR / relative, self.folder / relative
        if not source.is_file():
            return spec
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            shutil.copyfile(source, target)
        return replace(spec, start=replace(spec.start, url="", page=relative), folder=self.folder)

    def finish(self, console: Any, recorder: Any, episode_path: str | Path, section: Any, *,
               ask: Callable[[str], str] | None = None) -> bool:
        """Derive, write, show and (with a terminal) review the task; False when no task could be made (the
        message printed), True otherwise (written, or dropped by the person)."""
        try:
            spec = self.derive(recorder, episode_path, section)
            path = write_task(spec, self.folder)
        except (TaskFileError, EnvError, OSError) as e:
            console.print(f"[bold red]no task made:[/] {plain(e)}", soft_wrap=True)
            return False
        interactive = ask is not None or sys.stdin.isatty()
        kept = review(console, path, ask=ask or input) if interactive else show(console, spec, path)
        if kept is None:
            return True
        hint = "" if self.folder.resolve() == tasks_dir().resolve() else \
            f"HANDEYE_TASKS_DIR={shlex.quote(str(self.folder))} "
        console.print(f"task written: [bold]{plain(path)}[/]\nedit it, then "
                      f"`{plain(hint)}agent eval --suite tasks --tasks {plain(self.name)}`", soft_wrap=True)
        return True


def show(console: Any, spec: TaskSpec, path: Path) -> TaskSpec:
    """Print the task's start and conditions, one per line."""
    import json

    console.print(f"[bold]task {plain(spec.name)}[/] ({spec.device.value}): {plain(spec.instruction)}", soft_wrap=True)
    console.print(f"  start: {plain(json.dumps(spec.to_dict()['start'], ensure_ascii=False))}", soft_wrap=True)
    for i, condition in enumerate(spec.conditions, 1):
        console.print(f"  {i}. {plain(json.dumps(condition_dict(condition), ensure_ascii=False))}", soft_wrap=True)
    return spec


def review(console: Any, path: Path, *, ask: Callable[[str], str]) -> TaskSpec | None:
    """Show the task in ``path`` and ask whether to keep it; edit opens $VISUAL / $EDITOR and reads it again. None
    when the person drops it (the file is removed)."""
    spec: TaskSpec | None = show(console, load_task(path), path)
    while True:
        prompt = "keep these conditions? [Y/n/e(dit)] " if spec is not None else "fix it? [E(dit)/n] "
        try:
            answer = ask(prompt).strip().lower()
        except EOFError:
            answer = "y" if spec is not None else "n"
        if answer in ("", "y", "yes") and spec is not None:
            return spec
        if answer in ("n", "no"):
            path.unlink(missing_ok=True)
            console.print("task not saved")
            return None
        if answer in ("e", "edit", ""):
            edit(path)
            try:
                spec = show(console, load_task(path), path)
            except TaskFileError as e:
                console.print(f"[bold red]the task file is not valid:[/] {plain(e)}", soft_wrap=True)
                spec = None


def edit(path: Path) -> None:
    """Open ``path`` in the person's editor ($VISUAL, $EDITOR, else vi) and wait for it."""
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    try:
        subprocess.run([*shlex.split(editor), str(path)], check=False)
    except OSError as e:
        log.warning("could not start the editor %r: %s; edit %s by hand", editor, e, path)

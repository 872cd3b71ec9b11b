"""``agent record``: a person does the task while handeye writes the same trajectory an agent run writes.

    agent record "Sign in as alice" --url https://example.com/login      # a browser opens; do the task
    agent record "Turn on Wi-Fi" --device android                          # on the phone
    agent record "Rename the file" --device desktop                        # on the X display

The demonstration goes to ``record.demos_dir`` (default ``runs/demos``, where training on demonstrations reads;
``--runs-dir`` sets it). The recording ends with the stop key (web and desktop: Control+Alt+S), Enter in the
terminal (web and Android), by closing the browser, or with Ctrl-C in the terminal (then it is marked interrupted;
every step so far is kept). The pause key (web and desktop: Control+Alt+P), or on a phone ``p`` and Enter in the
terminal, pauses and resumes; the pause is marked in the episode. The recorders' settings are the
``[web_record]``, ``[desktop_record]`` and ``[android_record]`` sections (``--pause-key`` / ``--stop-key`` win).
Exit codes: 0 the demonstration was recorded, 1 it ended on an error, 2 bad input, 128 + signal when stopped by one.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import stat
import sys
from collections.abc import Callable
from typing import Any

from agent.cli.common import (DEVICE_HELP, add_window_options, EXIT_EPISODE_FAILED, EXIT_OK, add_set_option, config_path, device_arg,
                              device_overrides, make_console, print_error, versions)
from agent.terminal import plain
from devices.recording import PausesOnRequest, StopsOnRequest

log = logging.getLogger(__name__)

NAME = "record"
PAUSE_WORD = "p"
"""What the person types, then Enter, in the terminal to pause and resume a recorder that pauses on request."""


def add_parser(sub: Any) -> None:
    rec = sub.add_parser(NAME, help="record a person doing a task, in the trajectory format agent runs write",
                         description=(
        "Open the device, watch what the person does, and write each action with the screen just before it "
        "and the element it hit (actor = human), into runs/demos (record.demos_dir). End with the stop key "
        "(Control+Alt+S), Enter in the terminal, by closing the browser, or with Ctrl-C; pause with the pause key "
        "(Control+Alt+P), on a phone with p and Enter in the terminal. docs/recording.md has the whole picture."))
    rec.add_argument("task", help='what the person is about to do, e.g. "Subscribe to the newsletter"')
    rec.add_argument("--device", type=device_arg, metavar="DEVICE", help=f"{DEVICE_HELP} (default web)")
    rec.add_argument("--url", help="the start page on the web (default: the built-in demo page)")
    add_window_options(rec, shown=True)  # a person does the task: the window is shown unless --headless
    rec.add_argument("--pause-key", help="pauses and resumes the recording on the web and the desktop (config: "
                                         "web_record.pause_key, desktop_record.pause_keys; default Control+Alt+p)")
    rec.add_argument("--stop-key", help="ends the recording on the web and the desktop (config: web_record.stop_key, "
                                        "desktop_record.stop_keys; default Control+Alt+s)")
    rec.add_argument("--runs-dir", help="where the demonstration's run folder goes (config: record.demos_dir; "
                                        "default runs/demos)")
    rec.add_argument("--make-task", metavar="NAME",
                     help="after the stop key, derive a task from what the demonstration changed and write it as "
                          "NAME.json for `agent eval --suite tasks` (docs/recording.md, Derived tasks)")
    rec.add_argument("--tasks-dir", metavar="DIR",
                     help="where --make-task writes (default: $HANDEYE_TASKS_DIR, else ./tasks)")
    rec.add_argument("--config", help="config file (default: ./config.toml when present)")
    add_set_option(rec, "override one config option; repeatable")


def main(args: argparse.Namespace) -> int:
    import json

    from agent.config import load_config
    from agent.errors import AgentError
    from agent.secrets import Secrets

    overrides = list(args.overrides)
    if args.runs_dir:
        overrides.insert(0, f"record.demos_dir={json.dumps(args.runs_dir)}")
    if args.device is not None:
        overrides[:0] = device_overrides(*args.device)
    try:
        cfg = load_config(config_path(args.config), overrides)
        secrets = Secrets(dict(cfg.secrets))
        maker = None
        if args.make_task:  # a bad or taken name is refused before the person does the task
            from agent.derived_tasks import TaskMaker

            maker = TaskMaker(args.make_task, args.tasks_dir, kind=cfg.device.kind)
        recorder, site = make_recorder(cfg, args)
    except (AgentError, ValueError, OSError) as e:
        return print_error(str(e))
    if maker is not None:
        maker.builtin_page = site is not None
        maker.watch(recorder)
    try:
        return record(cfg, recorder, args.task, secrets, maker=maker)
    finally:
        if site is not None:
            site.close()


def make_recorder(cfg: Any, args: argparse.Namespace) -> tuple[Any, Any]:
    """The recorder of the configured device kind (``devices.registry``), and the built-in pages' server when a
    recording on a device that opens pages starts on them."""
    from agent.errors import ConfigError
    from devices.registry import RecordOptions, device_kind

    kind = device_kind(cfg.device.kind)
    if kind.recorder is None:
        raise ConfigError(f"the {kind.name} device cannot record a person's demonstration yet")
    if not kind.opens_url and args.url:
        raise ConfigError(f"--url is for a device that opens pages (the web); the {kind.name} device is recorded as "
                          f"it is")
    site, url = None, args.url or ""
    if kind.opens_url and not url:
        from envs.site import LocalSite

        site = LocalSite()
        url = site.url("demo.html")
    options = RecordOptions(url=url, headless=bool(args.headless),  # headless None: shown
                            settings=cfg.record_settings(kind.name), pause_key=args.pause_key, stop_key=args.stop_key)
    try:
        return kind.recorder(cfg.section(), cfg.settle, options), site
    except BaseException:
        if site is not None:
            site.close()
        raise


def _stop_key(recorder: Any) -> str:
    """The stop key of this recording, as the console says it ("" for a recorder without one)."""
    interpreter = getattr(recorder, "interpreter", None)
    if interpreter is not None:
        return str(interpreter.stop_key)
    combo = getattr(getattr(recorder, "record", None), "stop_combo", None)
    return combo.describe() if combo is not None else ""


class TerminalControls:
    """The recording's controls in ``agent record``'s terminal, for a recorder that takes them
    (``devices.recording``'s ``StopsOnRequest`` and ``PausesOnRequest``; a phone has no key to spare): Enter alone
    ends the recording as the stop key does, ``p`` and Enter pauses it and, again, resumes it. Lines are read from
    ``fd`` as they come (a terminal, or a pipe from a program playing the person) and handled one after another;
    the end of the input leaves the recording running (its keys or Ctrl-C end it)."""

    def __init__(self, recorder: Any, fd: int, say: Callable[[str], None]) -> None:
        self.recorder, self.fd, self.say = recorder, fd, say
        self.stops = isinstance(recorder, StopsOnRequest)
        self.pauses = isinstance(recorder, PausesOnRequest)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lines: asyncio.Queue[str] = asyncio.Queue()
        self._worker: asyncio.Task[None] | None = None
        self._pending = b""

    @staticmethod
    def input_fd(stream: Any) -> int | None:
        """``stream``'s file descriptor when lines can be awaited on it (a terminal, a pipe, a socket); None for a
        file, /dev/null or no stream at all."""
        try:
            fd = int(stream.fileno())
            mode = os.fstat(fd).st_mode
        except (AttributeError, OSError, ValueError):
            return None
        return fd if os.isatty(fd) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) else None

    def hint(self) -> str:
        """What the terminal does for this recording, for the console ("" when nothing)."""
        return "; ".join(([f"{PAUSE_WORD} and Enter here pauses and resumes"] if self.pauses else []) +
                         (["Enter here ends it"] if self.stops else []))

    def attach(self) -> None:
        if self.stops or self.pauses:
            self._loop = asyncio.get_running_loop()
            self._worker = asyncio.create_task(self._work(), name="record-terminal")
            self._loop.add_reader(self.fd, self._readable)

    async def detach(self) -> None:
        self._unwatch()
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
            self._worker = None

    def _unwatch(self) -> None:
        if self._loop is not None:
            self._loop.remove_reader(self.fd)
            self._loop = None

    def _readable(self) -> None:
        try:
            chunk = os.read(self.fd, 4096)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:  # the input ended: nothing more will come from it
            self._unwatch()
            return
        *lines, self._pending = (self._pending + chunk).split(b"\n")
        for line in lines:
            self._lines.put_nowait(line.decode("utf-8", "replace"))

    async def _work(self) -> None:
        while True:
            await self.handle(await self._lines.get())

    async def handle(self, line: str) -> None:
        """One line the person typed (a resume returns once the recorder sees the screen again)."""
        word = line.strip().lower()
        if not word and self.stops:
            self.recorder.request_stop()
        elif word == PAUSE_WORD and self.pauses and not self.recorder.paused:
            self.recorder.pause()
            self.say(f"paused: nothing is recorded until {PAUSE_WORD} and Enter again")
        elif word == PAUSE_WORD and self.pauses:
            try:
                await self.recorder.resume()
            except Exception as e:  # the device's error ends the recording through next_event; say it here too
                log.warning("could not resume the recording: %s", e)
                return
            self.say("recording again")
        else:
            self.say(f"{line.strip()!r} does nothing here: {self.hint() or 'end with the stop key or Ctrl-C'}")


def _print_refused(console: Any, record: Any) -> None:
    """The recorder's refused reports, for a recorder that counts them (the web's: ``describe()["refused"]``)."""
    described = (record.env or {}).get("recorder") or {}
    refused = described.get("refused")
    if not isinstance(refused, int):
        return
    kinds = described.get("refused_by_kind") or {}
    which = ", ".join(f"{plain(kind)} {count}" for kind, count in kinds.items()) if isinstance(kinds, dict) else ""
    console.print(f"  refused:    {refused} input report{'s' if refused != 1 else ''}"
                  + (f" ({which}; the log says why)" if refused else " (none)"), soft_wrap=True)


def record(cfg: Any, recorder: Any, task: str, secrets: Any, *, maker: Any = None) -> int:
    """Record one demonstration; print each step as it comes and the summary; the exit code. With ``maker``
    (``agent.derived_tasks.TaskMaker``), a demonstration ended by the stop key becomes a task."""
    from agent.cli.run import stop_on_signals
    from agent.record import record_demonstration
    from agent.secrets import redact_logs
    from agent.summary import print_step, print_summary
    from envs.records import Actor, Outcome
    from envs.recording import RecordingEnv
    from envs.trajectory import RunWriter

    from devices.registry import device_kind

    console = make_console()
    run = RunWriter(cfg.record.demos_folder(), config={"kind": "record", "config": cfg.to_dict(),
                                                       "versions": versions()},
                    frame_format=cfg.record.frame_format, fsync=cfg.record.fsync)
    writer = run.episode(task=secrets.redact(task), actor=Actor.HUMAN)
    env = RecordingEnv(recorder, task)
    redact_logs(secrets)
    stopped_by: list[int] = []
    fd = TerminalControls.input_fd(sys.stdin)
    terminal = TerminalControls(recorder, fd, lambda text: console.print(plain(text))) if fd is not None else None
    ends = [key for key in (_stop_key(recorder),) if key]
    ends += ["Enter here"] if terminal is not None and terminal.stops else []
    ends += ["by closing the browser"] if device_kind(cfg.device.kind).opens_url else []
    pause = f"; {PAUSE_WORD} and Enter here pauses and resumes" if terminal is not None and terminal.pauses else ""
    ways = ", ".join(ends) + ", or with " if ends else ""
    console.print(f"[bold]recording[/] {plain(secrets.redact(task))}: do the task; end with {plain(ways)}Ctrl-C "
                  f"(which keeps the steps, marked interrupted){pause}")

    async def main() -> None:
        stop = stop_on_signals(stopped_by.append)
        if terminal is not None:
            terminal.attach()
        try:
            result = await record_demonstration(env, writer, secrets=secrets,
                                                on_step=lambda s: print_step(console, s), stop=stop)
            if maker is not None and not stopped_by and result.record.outcome is Outcome.CLAIMED:
                await maker.read_final(recorder, writer.path)  # before the recorder closes
        finally:
            if terminal is not None:
                await terminal.detach()
            await asyncio.shield(env.close())

    try:
        asyncio.run(main())
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass
    record_ = writer.record
    print_summary(console, record_, writer.path)
    _print_refused(console, record_)
    if maker is not None and stopped_by:
        console.print("no task made: the recording was interrupted; end it with the stop key to make a task")
    elif maker is not None and not maker.finish(console, recorder, writer.path, cfg.section()):
        return EXIT_EPISODE_FAILED
    if stopped_by:
        from agent.signals import exit_code

        return exit_code(stopped_by[0])
    return EXIT_OK if record_.outcome is Outcome.CLAIMED else EXIT_EPISODE_FAILED

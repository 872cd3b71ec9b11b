"""``agent record``: a person does the task while handeye writes the same trajectory an agent run writes.

    agent record "Sign in as alice" --url https://example.com/login      # a browser opens; do the task
    agent record "Turn on Wi-Fi" --device android                          # on the phone
    agent record "Rename the file" --device desktop                        # on the X display

The recording ends with the stop key (web and desktop: Control+Alt+S), by closing the browser, or
with Ctrl-C in the terminal (then it is marked interrupted; every step so far is kept). The pause
key (Control+Alt+P) pauses and resumes; the pause is marked in the episode. Exit codes: 0 the
demonstration was recorded, 1 it ended on an error, 2 bad input, 128 + signal when stopped by one.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from agent.cli.common import (DEVICE_HELP, add_window_options, EXIT_EPISODE_FAILED, EXIT_OK, add_set_option, config_path, device_arg,
                              device_overrides, make_console, print_error, versions)
from agent.terminal import plain

NAME = "record"


def add_parser(sub: Any) -> None:
    rec = sub.add_parser(NAME, help="record a person doing a task, in the trajectory format agent runs write",
                         description=(
        "Open the device, watch what the person does, and write each action with the screen just before it "
        "and the element it hit (actor = human). End with the stop key (Control+Alt+S), by closing the browser, "
        "or with Ctrl-C. docs/recording.md has the whole picture."))
    rec.add_argument("task", help='what the person is about to do, e.g. "Subscribe to the newsletter"')
    rec.add_argument("--device", type=device_arg, metavar="DEVICE", help=f"{DEVICE_HELP} (default web)")
    rec.add_argument("--url", help="the start page on the web (default: the built-in demo page)")
    add_window_options(rec, shown=True)  # a person does the task: the window is shown unless --headless
    rec.add_argument("--pause-key", default="Control+Alt+p", help="pauses and resumes the recording")
    rec.add_argument("--stop-key", default="Control+Alt+s", help="ends the recording")
    rec.add_argument("--runs-dir", help="where run folders go (config: record.runs_dir)")
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
        overrides.insert(0, f"record.runs_dir={json.dumps(args.runs_dir)}")
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
    options = RecordOptions(url=url, headless=bool(args.headless), pause_key=args.pause_key,  # None: shown
                            stop_key=args.stop_key)
    try:
        return kind.recorder(cfg.section(), cfg.settle, options), site
    except BaseException:
        if site is not None:
            site.close()
        raise


def _stop_key(recorder: Any) -> str:
    """How the person ends this recording, as the console says it."""
    interpreter = getattr(recorder, "interpreter", None)
    if interpreter is not None:
        return str(interpreter.stop_key)
    combo = getattr(getattr(recorder, "record", None), "stop_combo", None)
    return combo.describe() if combo is not None else "Ctrl-C"


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

    console = make_console()
    run = RunWriter(cfg.record.runs_dir, config={"kind": "record", "config": cfg.to_dict(), "versions": versions()},
                    frame_format=cfg.record.frame_format, fsync=cfg.record.fsync)
    writer = run.episode(task=secrets.redact(task), actor=Actor.HUMAN)
    env = RecordingEnv(recorder, task)
    redact_logs(secrets)
    stopped_by: list[int] = []
    enter = sys.stdin.isatty() and hasattr(recorder, "request_stop")
    console.print(f"[bold]recording[/] {plain(secrets.redact(task))}: do the task; end with "
                  f"{plain(_stop_key(recorder))}{', Enter here' if enter else ''}, by closing the browser, or with "
                  "Ctrl-C (which keeps the steps, marked interrupted)")

    async def main() -> None:
        stop = stop_on_signals(stopped_by.append)
        if enter:  # Enter in the terminal ends the recording as the stop key does (a phone has no stop key)
            loop = asyncio.get_running_loop()
            loop.add_reader(sys.stdin.fileno(), lambda: (sys.stdin.readline(), recorder.request_stop()))
        try:
            result = await record_demonstration(env, writer, secrets=secrets,
                                                on_step=lambda s: print_step(console, s), stop=stop)
            if maker is not None and not stopped_by and result.record.outcome is Outcome.CLAIMED:
                await maker.read_final(recorder, writer.path)  # before the recorder closes
        finally:
            if enter:
                asyncio.get_running_loop().remove_reader(sys.stdin.fileno())
            await asyncio.shield(env.close())

    try:
        asyncio.run(main())
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass
    record_ = writer.record
    print_summary(console, record_, writer.path)
    if maker is not None and stopped_by:
        console.print("no task made: the recording was interrupted; end it with the stop key to make a task")
    elif maker is not None and not maker.finish(console, recorder, writer.path, cfg.section()):
        return EXIT_EPISODE_FAILED
    if stopped_by:
        from agent.signals import exit_code

        return exit_code(stopped_by[0])
    return EXIT_OK if record_.outcome is Outcome.CLAIMED else EXIT_EPISODE_FAILED

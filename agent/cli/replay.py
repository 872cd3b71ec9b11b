"""``agent replay EPISODE``: re-execute a recorded episode (a demonstration, or any run's) and say, step by step,
where the screen diverged from the recording.

    agent replay runs/20250101-120000-ab12/ep0000                      # on the web, from the recorded page
    agent replay runs/.../ep0000 --url http://localhost:8000/login      # the recorded page moved
    agent replay runs/.../ep0000 --secret-for '#password=PASSWORD'       # type the secret PASSWORD where the
                                                                          # recording masked a password
    agent replay runs/.../ep0000 --device android:emulator-5554

The replay is a recorded run of its own (``runs/<id>/``) with ``replay.json`` beside its episode. Exit codes: 0 every
replayed step matched (skipped steps aside), 1 a step diverged, 2 bad input, 128 + signal when stopped by one.
docs/recording.md, "Replay", has the rules.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from agent.cli.common import (DEVICE_HELP, add_window_options, window_overrides, EXIT_EPISODE_FAILED, EXIT_OK, add_set_option, config_path, device_arg,
                              device_overrides, make_console,
                              print_error, terminal_person, versions)
from agent.terminal import plain

NAME = "replay"


def secret_for_arg(text: str) -> tuple[str, str]:
    """``--secret-for SELECTOR=NAME``: the secret NAME goes where the recording masked text typed into SELECTOR."""
    selector, _, name = text.rpartition("=")
    if not selector or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"{text!r} is not SELECTOR=NAME (e.g. '#password=PASSWORD', the secret's "
                                         f"name as in the config's [secrets])")
    return selector, name


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not a share between 0 and 1")
    return value


def add_parser(sub: Any) -> None:
    rep = sub.add_parser(NAME, help="re-execute a recorded episode and report where the screen diverged",
                         description=(
        "Replay each recorded action (on the web at its recorded element where it is found again) through the "
        "episode runner, compare each screen before an action with the recorded one, print a table and write "
        "replay.json in the replay's run folder. docs/recording.md has the whole picture."))
    rep.add_argument("episode", help="an episode folder (runs/<run>/ep0000), or a run folder with one episode")
    rep.add_argument("--device", type=device_arg, metavar="DEVICE",
                     help=f"{DEVICE_HELP} (default: the device the episode was recorded on)")
    rep.add_argument("--url", help="web: the start page (default: the page of the first recorded step)")
    rep.add_argument("--secret-for", type=secret_for_arg, action="append", default=[], metavar="SELECTOR=NAME",
                     help="type the secret NAME (config [secrets]) where the recording masked the text typed into "
                          "the element SELECTOR; repeatable. Without it such steps are skipped")
    # Defaults resolved in main: agent.replay (frames, the runner) is too heavy to import for `agent --help`.
    rep.add_argument("--frame-tolerance", type=fraction,
                     help="share of the screen that may differ before a step counts as diverged "
                          "(default: agent.replay.FRAME_TOLERANCE)")
    rep.add_argument("--box-tolerance", type=fraction,
                     help="share of the target box that may differ (default: agent.replay.BOX_TOLERANCE)")
    add_window_options(rep)
    rep.add_argument("--yes", action="store_true", help="say yes to every action the guard would ask about")
    rep.add_argument("--runs-dir", help="where run folders go (config: record.runs_dir)")
    rep.add_argument("--config", help="config file (default: ./config.toml when present)")
    add_set_option(rep, "override one config option; repeatable")


def main(args: argparse.Namespace) -> int:
    from agent.config import load_config
    from agent.errors import AgentError
    from devices.errors import DeviceError
    from devices.registry import device_kind
    from envs.errors import RecordError, RecordFormatError

    try:
        episode = find_episode(args.episode)
        kind, address = args.device or (recorded_kind(episode), "")
        url = start_url(episode, args.url) if device_kind(kind).opens_url else ""
        cfg = load_config(config_path(args.config), overrides(args, kind, address, url))
    except (AgentError, DeviceError, RecordFormatError, RecordError, ValueError, OSError) as e:
        return print_error(str(e))
    return replay(cfg, episode, args)


def recorded_kind(episode: Any) -> str:
    """The device kind the episode was recorded on (its ``device.kind``; the default device when it names none)."""
    from devices.registry import DEFAULT_KIND

    return str((episode.record.device or {}).get("kind") or DEFAULT_KIND)


def find_episode(path: str) -> Any:
    """The episode at ``path``: an episode folder, or a run folder holding exactly one episode."""
    from agent.errors import ConfigError
    from envs.trajectory import iter_episodes, read_episode

    folder = Path(path)
    if not folder.is_dir():
        raise ConfigError(f"{path} is not a folder; pass an episode folder (runs/<run>/ep0000) to replay")
    if (folder / "episode.json").is_file():
        return read_episode(folder)
    episodes = list(iter_episodes(folder))
    if len(episodes) != 1:
        names = ", ".join(e.path.name for e in episodes[:5]) or "none"
        raise ConfigError(f"{path} holds {len(episodes)} episodes ({names}); pass the episode folder to replay")
    return episodes[0]


def start_url(episode: Any, given: str | None) -> str:
    """``--url``, else the page the first recorded step was on."""
    from agent.errors import ConfigError
    from devices.errors import NavigationError
    from devices.web import check_url

    url = given or next((str(s.info["url"]) for s in episode.steps if isinstance(s.info, dict) and s.info.get("url")),
                        "")
    if not url:
        raise ConfigError(f"{episode.path} records no page address; give the start page with --url URL")
    try:
        return check_url(url)
    except NavigationError as e:
        raise ConfigError(str(e)) from None


def overrides(args: argparse.Namespace, kind: str, address: str, url: str) -> list[str]:
    out = device_overrides(kind, address)
    if url:
        out.append(f"device.url={json.dumps(url)}")
    out += window_overrides(args)
    if args.runs_dir:
        out.append(f"record.runs_dir={json.dumps(args.runs_dir)}")
    return out + list(args.overrides)


def replay(cfg: Any, episode: Any, args: argparse.Namespace) -> int:
    """Replay ``episode`` on the configured device, print the table, write replay.json; the exit code."""
    from agent.builders import build_device, build_guard
    from agent.cli.run import stop_on_signals
    from agent.replay import BOX_TOLERANCE, FRAME_TOLERANCE, Tolerances, plan_replay, replay_episode
    from agent.secrets import Secrets, redact_logs
    from agent.summary import print_step
    from envs.records import Actor
    from envs.task_env import TaskEnv
    from envs.trajectory import RunWriter

    console = make_console()
    secrets = Secrets(dict(cfg.secrets))
    missing = sorted({name for _, name in args.secret_for} - set(dict(cfg.secrets)))
    if missing:
        return print_error(f"--secret-for names {', '.join(missing)}, which the config's [secrets] does not hold; "
                           f"add them (docs/security.md) or leave those steps out")
    plan = plan_replay(episode, dict(args.secret_for))
    run = RunWriter(cfg.record.runs_dir, config={"kind": "replay", "source": str(episode.path),
                                                 "config": cfg.to_dict(), "versions": versions()},
                    frame_format=cfg.record.frame_format, fsync=cfg.record.fsync)
    task = episode.record.task or f"replay of {episode.path.name}"
    writer = run.episode(task=task, actor=Actor.POLICY)
    env = TaskEnv(build_device(cfg, cfg.device.url), task, name="replay",
                  info={"replay_of": str(episode.path), **({"url": cfg.device.url} if cfg.device.url else {})})
    redact_logs(secrets)
    console.print(f"[bold]replaying[/] {plain(episode.path)} ({len(plan)} recorded steps) on {plain(cfg.device.kind)}")
    stopped_by: list[int] = []
    results: list[Any] = []

    async def main() -> None:
        stop = stop_on_signals(stopped_by.append)
        try:
            results.append(await replay_episode(
                episode, plan, env, writer, tolerances=Tolerances(
                    FRAME_TOLERANCE if args.frame_tolerance is None else args.frame_tolerance,
                    BOX_TOLERANCE if args.box_tolerance is None else args.box_tolerance),
                secrets=secrets, guard=build_guard(cfg), person=terminal_person(), assume_yes=args.yes,
                on_step=lambda s: print_step(console, s), stop=stop))
        finally:
            await asyncio.shield(_close(env))

    try:
        asyncio.run(main())
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass
    if not results:
        from agent.signals import exit_code

        console.print(f"replay stopped; its steps so far are in {plain(writer.path)}")
        return exit_code(stopped_by[0]) if stopped_by else EXIT_EPISODE_FAILED
    result = results[0]
    out = run.path / "replay.json"
    out.write_text(json.dumps(result.to_dict(str(episode.path)), ensure_ascii=False, indent=1) + "\n",
                   encoding="utf-8")
    print_table(console, result)
    verdict = "[green]every replayed step matched[/]" if result.matched else \
        f"[bold red]{sum(s.verdict.value == 'diverged' for s in result.steps)} step(s) diverged[/]"
    console.print(f"{verdict}; replay in {plain(writer.path)}, report {plain(out)}")
    return EXIT_OK if result.matched else EXIT_EPISODE_FAILED


def print_table(console: Any, result: Any) -> None:
    from rich.table import Table

    table = Table(title="replay", show_lines=False)
    for column in ("step", "action", "element found?", "difference (screen / box)", "verdict", "note"):
        table.add_column(column)
    style = {"ok": "green", "diverged": "bold red", "skipped": "dim"}
    for s in result.steps:
        found = {"found": "yes", "moved": "yes (moved)", "renamed": "renamed", "missing": "no"}.get(s.element, "-")
        diff = "-" if s.frame_diff is None else f"{s.frame_diff:.1%}" + (
            "" if s.box_diff is None else f" / {s.box_diff:.1%}")
        table.add_row(str(s.index), plain(s.action[:40]), found, diff,
                      f"[{style[s.verdict.value]}]{s.verdict.value}[/]", plain(s.note[:80]))
    console.print(table)


async def _close(env: Any) -> None:
    import logging

    try:
        await asyncio.wait_for(env.close(), timeout=15)
    except (Exception, asyncio.CancelledError) as e:  # closing is best effort
        logging.getLogger(__name__).warning("closing the device failed: %s: %s", type(e).__name__, e)

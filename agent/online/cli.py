"""``agent train --online``: the session built from the command line."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from agent.online.session import OnlineSession
from agent.online.settings import OnlineConfig, OnlineError, load_session


def run_cli(args: Any) -> int:
    """``agent train --online``: build the session from the arguments, run it, print what happened."""
    from agent.config import load_train_config
    from agent.errors import ConfigError

    explicit = {k: v for k, v in {
        "env": args.env, "devices": args.devices, "device_kind": args.device_kind, "group_level": args.group_level,
        "max_policy_lag": args.max_policy_lag,
        "max_wall_s": None if args.minutes is None else args.minutes * 60}.items() if v is not None}
    try:
        if args.resume:
            run_dir = Path(args.resume) if args.resume != "auto" else Path(
                load_train_config(args.config, list(args.overrides)).train.run_dir)
            saved, online = load_session(run_dir)
            online = replace(online, **explicit)
            config = load_train_config(None, [*saved, *args.overrides, f"train.run_dir={json.dumps(str(run_dir))}"])
        else:
            if "env" not in explicit:
                raise ConfigError("agent train --online needs --env ENV (e.g. generated/click; agent envs lists them)")
            config = load_train_config(args.config, [*args.overrides, 'train.stage="rl"'])
            online = OnlineConfig(**explicit)
    except (ConfigError, OnlineError, ValueError) as exc:
        from agent.cli import _error

        return _error(str(exc))
    from rich.console import Console

    from envs.errors import EnvError
    from policy.errors import PolicyError
    from train.checkpoint import CheckpointError

    console = Console(stderr=True)
    try:
        session = OnlineSession(config, online, resume=bool(args.resume),
                                progress=lambda line: console.print(line, highlight=False))
        result = asyncio.run(session.run())
    except (OnlineError, CheckpointError, PolicyError, EnvError) as exc:
        console.print(f"[red]online session stopped:[/] {type(exc).__name__}: {exc}", soft_wrap=True)
        return 1
    except KeyboardInterrupt:
        console.print(f"[yellow]aborted[/]: the newest checkpoint in {config.train.run_dir}/checkpoints resumes this "
                      f"run (--resume {config.train.run_dir})")
        return 130
    console.print(f"[bold]online[/] {result.stopped_by}: {result.updates} updates, {result.episodes} episodes "
                  f"({result.success_rate:.0%} success), {result.steps} steps in {result.wall_s:.0f} s "
                  f"({result.steps_per_s:.2f} steps/s); {result.stale_dropped} stale samples dropped, "
                  f"{result.restarts} device restarts, {len(result.dropped_actors)} actors dropped")
    console.print(f"run folder: {result.run_dir}  (report.html, online_curve.png, curves.png, checkpoints/)")
    if result.stopped_by == "interrupted":
        console.print(f"resume with: agent train --online --resume {result.run_dir}")
        return 130
    return 0

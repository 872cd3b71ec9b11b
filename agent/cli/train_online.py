"""``agent train --online``: the online session (``agent.online``) built from the command line, run, and summed up.

Its flags are an argument group of ``agent train``. ``agent.online`` is imported only when a session starts: it
pulls in the trainer, and ``agent --help`` must stay light.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from agent.cli.common import (EXIT_EPISODE_FAILED, EXIT_INTERRUPTED, EXIT_OK, add_trust_tasks_option, device_arg,
                              device_kind_arg, existing, positive_int, print_error, resume_run_dir,
                              trust_given_tasks)
from agent.terminal import plain

ONLINE_ONLY = {dest: f"--{dest.replace('_', '-')}" for dest in (
    "env", "device_kind", "device", "group_level", "max_policy_lag", "minutes", "demos", "demo_share",
    "group_timeout", "trust_tasks")} | {"actors": "--parallel", "old_devices": "--devices"}
"""The flags only an online session reads: the parsed arguments' attribute -> the flag."""


def add_arguments(train: argparse.ArgumentParser) -> None:
    """The ``online`` argument group of ``agent train``."""
    on = train.add_argument_group("online", "agent train --online: actors on live devices stream verified experience "
                                  "to the learner, which publishes a new adapter after every update (docs/training.md)")
    on.add_argument("--online", action="store_true", help="run actors and the learner together, in this process")
    on.add_argument("--env", help="environment the actors run, e.g. generated/click (agent envs lists them)")
    add_trust_tasks_option(on, none_when_absent=True)  # ONLINE_ONLY: None unless given
    on.add_argument("--device", type=device_arg, action="append", metavar="DEVICE",
                    help="the actors' device: a kind (web, the default; agent devices lists them) for every actor, "
                         "or KIND:ADDRESS (android:SERIAL) once per actor (config: online.device_kind, online.serials)")
    on.add_argument("--parallel", dest="actors", type=positive_int, metavar="N",
                    help="actors at once in this process, each on its own device, as agent eval --parallel (default "
                         "2, or one per --device KIND:ADDRESS; config: online.actors)")
    # the names before --device and --parallel: still read, with a note saying the new ones
    on.add_argument("--devices", dest="old_devices", type=positive_int, help=argparse.SUPPRESS)
    on.add_argument("--device-kind", dest="device_kind", type=device_kind_arg, help=argparse.SUPPRESS)
    on.add_argument("--group-level", choices=("step", "episode"),
                    help="step: n answers per screen scored by the step verifier (default); episode: n episodes "
                         "per task seed scored by the task checker")
    on.add_argument("--max-policy-lag", type=int, metavar="K",
                    help="drop samples more than K adapter versions behind the learner (default 2; -1 keeps all)")
    on.add_argument("--group-timeout", type=float, metavar="S",
                    help="train on a group still incomplete S seconds after its first part (an actor died in the "
                         "middle of it) with the parts it has (default 600)")
    on.add_argument("--minutes", type=float, metavar="M",
                    help="stop the session after M minutes of wall time, whatever the update count (default: none)")
    on.add_argument("--demos", metavar="DIR",
                    help="success replay: recorded demonstrations of the tasks (agent record), mixed into the groups "
                         "of tasks the policy keeps failing (docs/online.md)")
    on.add_argument("--demo-share", type=float, metavar="F",
                    help="success replay: share of each update's groups that may carry a demonstration (default 0: "
                         "off)")


def main(args: argparse.Namespace) -> int:
    """Build the session from the arguments (a new one in a new ``runs/online-<time>`` or ``--run-dir``, or
    ``--resume [RUN_DIR]`` with its saved settings), run it, print what happened. Exit codes: 0 done, 1 the session stopped on an error, 2 bad input, 130 Ctrl-C; SIGTERM
    and SIGHUP stop it like Ctrl-C, with 128 + the signal's number (143, 129)."""
    from agent.errors import ConfigError
    from agent.online import OnlineError
    from train.errors import CheckpointError

    try:
        trust_given_tasks(args.trust_tasks, [args.env] if args.env else [])
        config, online = session_settings(args)
    except (ConfigError, OnlineError, CheckpointError, ValueError) as exc:
        return print_error(str(exc))
    return run_session(args, config, online)


def session_settings(args: argparse.Namespace) -> tuple[Any, Any]:
    """(training config, its online settings): the config file's ``[online]`` and the ``--set online.*`` overrides,
    then the flags given (which win). A resumed session starts from its saved settings. A resumed session whose
    checkpoint is of another model than the config's is refused here (``CheckpointError``), before a learner, a
    version server or an actor starts."""
    from agent.config import load_train_config
    from agent.errors import ConfigError
    from agent.online import load_session, online_overrides
    from train.config import with_run_dir
    from train.model_identity import check_resume

    explicit = online_overrides({k: v for k, v in {
        "env": args.env, "actors": actors_flag(args), "device_kind": args.device_kind,
        "group_level": args.group_level,
        "max_policy_lag": args.max_policy_lag, "demos": args.demos, "demo_share": args.demo_share,
        "max_wall_s": None if args.minutes is None else args.minutes * 60,
        "group_timeout_s": args.group_timeout}.items() if v is not None})
    explicit += device_flags(args)
    run_dir_flag = [f"train.run_dir={json.dumps(args.run_dir)}"] if args.run_dir else []
    if args.resume:
        configured = load_train_config(args.config, [*args.overrides, *run_dir_flag]).train.run_dir
        run_dir, _ = resume_run_dir(args.resume, configured, "online")
        config = load_train_config(None, [*load_session(run_dir), *args.overrides, *explicit,
                                          f"train.run_dir={json.dumps(str(run_dir))}"])
        check_resume(config, run_dir)
        return config, config.online
    config = load_train_config(args.config, [*args.overrides, *run_dir_flag, *explicit, 'train.stage="rl"'])
    if not config.online.env:
        raise ConfigError("agent train --online needs the environment the actors run: --env ENV (or online.env; e.g. "
                          "generated/click; agent envs lists them)")
    if not config.model.id:  # before the run folder exists: nothing is left behind
        raise ConfigError("model.id is empty: name the model to train (a local folder or a hub id, e.g. "
                          "--set model.id='\"Qwen/Qwen2.5-VL-3B-Instruct\"'), or --set model.id='\"tiny\"' "
                          "for the tiny random test model")
    config = with_run_dir(config, "online")
    return config, config.online


def actors_flag(args: argparse.Namespace) -> int | None:
    """``--parallel``, or the older ``--devices`` (with a note to write ``--parallel``)."""
    if args.old_devices is not None:
        import logging

        logging.getLogger(__name__).warning("--devices is now --parallel (the actors in this process, each on its "
                                            "own device): --parallel %d", args.old_devices)
        return args.actors if args.actors is not None else args.old_devices
    return args.actors


def device_flags(args: argparse.Namespace) -> list[str]:
    """The ``online.*`` overrides that ``--device KIND:ADDRESS`` (repeated, one per actor) stands for: the kind, the
    addresses in order, and as many actors unless ``--devices`` says otherwise. ``ConfigError`` for two kinds, or
    a kind other than ``--device-kind``."""
    from agent.errors import ConfigError
    from agent.online import online_overrides

    given = args.device or []
    if not given:
        return []
    kinds = sorted({kind for kind, _ in given})
    if len(kinds) > 1 or (args.device_kind and args.device_kind != kinds[0]):
        named = sorted({*kinds, *([args.device_kind] if args.device_kind else [])})
        raise ConfigError(f"--device names {' and '.join(named)} devices: an online session's actors drive one "
                          f"kind; run the others as agent actor processes of a fleet (docs/fleet.md)")
    if any(not address for _, address in given) and len(given) > 1:
        raise ConfigError("--device KIND names the kind of every actor: give it once, or KIND:ADDRESS once per actor")
    addresses = [address for _, address in given if address]
    values: dict[str, Any] = {"device_kind": kinds[0]}
    if addresses:
        values["serials"] = addresses
    if actors_flag(args) is None and addresses:
        values["actors"] = len(given)
    return online_overrides(values)


def run_session(args: argparse.Namespace, config: Any, online: Any, *, transport: Any = None) -> int:
    """Run the session and print what it did; returns the exit code. ``transport``: the actors' and learner's
    (default in-process; a fleet learner's is MQTT, ``agent learner``)."""
    from rich.console import Console

    from agent.online import OnlineError, OnlineSession
    from envs.errors import EnvError
    from policy.errors import PolicyError
    from train.errors import CheckpointError

    console = Console(stderr=True)
    try:
        session = OnlineSession(config, online, resume=bool(args.resume), transport=transport,
                                progress=lambda line: console.print(plain(line), highlight=False))
        result = asyncio.run(session.run())
    except (OnlineError, CheckpointError, PolicyError, EnvError, ValueError) as exc:
        console.print(f"[red]online session stopped:[/] {type(exc).__name__}: {plain(exc)}", soft_wrap=True)
        return EXIT_EPISODE_FAILED
    except KeyboardInterrupt:
        run_dir = plain(config.train.run_dir)
        console.print(f"[yellow]aborted[/]: continue with agent train --online --resume {run_dir} (from its newest "
                      f"checkpoint, if an update finished)")
        return EXIT_INTERRUPTED
    _print_result(console, result)
    if result.stopped_by == "interrupted":
        from agent.signals import exit_code

        again = "agent learner --broker ..." if online.remote_actors else "agent train --online"
        console.print(f"resume with: {again} --resume {plain(result.run_dir)}")
        return exit_code(session.stop_signal) if session.stop_signal else EXIT_INTERRUPTED
    return EXIT_OK


def _print_result(console: Any, result: Any) -> None:
    """What the session did, why it made no update if it made none, and the files it wrote (only those)."""
    console.print(f"[bold]online[/] {result.stopped_by}: {result.updates} updates, {result.episodes} episodes "
                  f"({result.success_rate:.0%} success), {result.steps} steps in {result.wall_s:.0f} s "
                  f"({result.steps_per_s:.2f} steps/s); {result.stale_dropped} stale samples dropped, "
                  f"{result.restarts} device restarts, {len(result.dropped_actors)} actors dropped")
    if not result.updates and result.no_signal:
        console.print(f"no update: the {result.no_signal} groups received had no reward spread (every answer of a "
                      f"group scored the same), so there was nothing to learn from. A random model (model.id "
                      f"\"tiny\") never answers in format: it checks the wiring, not learning.")
    files = existing(result.run_dir, ("report.html", "online_curve.png", "curves.png", "checkpoints/", "adapter/",
                                      "tb/"))
    console.print(f"run folder: {plain(result.run_dir)}" + (f"  ({', '.join(files)})" if files else ""))

"""``agent actor``: one device of a fleet, on any machine, sending its experience to the learner (docs/fleet.md).

    agent actor --broker mqtt://HOST:PORT --device web|desktop|android[:SERIAL] --env ENV
                [--policy openai:URL] [--name NAME] [--config FILE] [--set ...] [--run-dir DIR]

One device per process; run several on one machine with different ``--name``s. The model and the group size come
from the training config (the learner's); ``--policy openai:URL`` acts through a policy server (vLLM) instead of
a model in this process, loading each new version there. Ctrl-C or SIGTERM stops it cleanly (the episode in flight
is recorded as interrupted, the spool flushed as far as the broker allows; the rest is sent at the next start).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import socket
from typing import Any

from agent.cli.common import (DEVICE_HELP, EXIT_EPISODE_FAILED, EXIT_OK, add_set_option, add_trust_tasks_option,
                              device_arg, policy_arg, positive_int, print_error, trust_given_tasks)
from agent.cli.fleet import add_bus_arguments, bus_settings

NAME = "actor"


def add_parser(sub: Any) -> None:
    ac = sub.add_parser(NAME, help="one device of a fleet: act, and send the experience to the learner over MQTT",
                        description=(
        "Drive one device through an environment with the session's policy and send every scored sample to the "
        "learner (agent learner) over an MQTT broker, spooling to disk while the broker is away. Adapter versions "
        "are fetched from the learner, checked and loaded between steps (docs/fleet.md)."))
    ac.add_argument("--device", type=device_arg, required=True, metavar="DEVICE",
                    help=f"the device this actor drives: {DEVICE_HELP}")
    ac.add_argument("--env", required=True, help="the environment it runs, e.g. generated/click (agent envs)")
    add_trust_tasks_option(ac)
    ac.add_argument("--policy", type=policy_arg, metavar="openai:URL",
                    help="act through an OpenAI-compatible policy server (vLLM with runtime LoRA) instead of the "
                         "model in this process")
    ac.add_argument("--name", help="the actor's name on the bus (default <host>-<device>); also its broker user "
                                   "under the ACL of docs/fleet.md")
    ac.add_argument("--config", help="training config file (the learner's: model, rl.group_size, data.seeds)")
    add_set_option(ac, "override one option, e.g. --set rl.group_size=8 (repeatable)")
    ac.add_argument("--run-dir", metavar="DIR", help="where episodes, the spool and fetched versions go (default "
                                                     "runs/actor-<name>; continued when it exists)")
    ac.add_argument("--group-level", choices=("step", "episode"), default="step",
                    help="as the learner's: step (n answers per screen) or episode (n episodes per task seed)")
    ac.add_argument("--max-steps", type=positive_int, metavar="N", help="step budget per episode (default: the env's)")
    ac.add_argument("--episodes", type=positive_int, metavar="N", help="stop after N episodes (default: never)")
    ac.add_argument("--minutes", type=float, metavar="M", help="stop after M minutes (default: never)")
    ac.add_argument("--spool-mb", type=int, default=2048, metavar="MB",
                    help="the spool's size limit: messages the broker has not acknowledged (default 2048)")
    ac.add_argument("--fsync", action="store_true", help="fsync every spooled message (survives a power cut)")
    ac.add_argument("--raw-frames", action="store_true",
                    help="send frames as raw pixels instead of deflated (less CPU, 10-30x more bytes)")
    add_bus_arguments(ac)


def _default_name(kind: str, address: str) -> str:
    host = socket.gethostname().split(".")[0]
    return re.sub(r"[^A-Za-z0-9_.-]", "-", f"{host}-{kind}" + (f"-{address}" if address else ""))[:64].strip("-.")


def main(args: argparse.Namespace) -> int:
    from agent.config import load_train_config
    from agent.errors import ConfigError, FleetError, OnlineError
    from agent.fleet.actor import ActorOptions, FleetActor

    kind, address = args.device
    policy_kind, policy_url = args.policy or ("", "")
    if policy_kind and policy_kind != "openai":
        return print_error(f"--policy {policy_kind}: an actor acts with the session's model, in this process or "
                           f"through a server (openai:URL)")
    name = args.name or _default_name(kind, address)
    try:
        trust_given_tasks(args.trust_tasks, [args.env])
        config = load_train_config(args.config, [*args.overrides, 'train.stage="rl"'])
        if not config.model.id:
            raise ConfigError("model.id is empty: give the learner's config (--config) or --set model.id=...")
        options = ActorOptions(name=name, env=args.env, device=kind, address=address, policy_url=policy_url,
                               run_dir=args.run_dir or "", group_level=args.group_level, max_steps=args.max_steps,
                               spool_mb=args.spool_mb, fsync=args.fsync, compress="" if args.raw_frames else "zlib",
                               max_episodes=args.episodes,
                               max_wall_s=None if args.minutes is None else args.minutes * 60)
        broker, key = bus_settings(args)
        actor = FleetActor(_with_run_dir(config, options), options, broker, key)
    except (ConfigError, FleetError, OnlineError, ValueError) as exc:
        return print_error(str(exc))
    from devices.errors import DeviceError
    from envs.errors import EnvError
    from policy.errors import PolicyError
    from train.errors import TransportError

    try:
        episodes = asyncio.run(actor.run())
    except KeyboardInterrupt:
        return EXIT_EPISODE_FAILED
    except (OnlineError, FleetError, TransportError, PolicyError, EnvError, DeviceError) as exc:
        print_error(f"actor {name} stopped: {type(exc).__name__}: {exc}")
        return EXIT_EPISODE_FAILED
    print(f"actor {name}: {episodes} episodes; run folder {actor.run_dir}")
    return EXIT_OK


def _with_run_dir(config: Any, options: Any) -> Any:
    """The actor's run folder is where the tiny test model is built too (``model.id = "tiny"``)."""
    from dataclasses import replace

    run_dir = options.run_dir or f"runs/actor-{options.name}"
    return replace(config, train=replace(config.train, run_dir=run_dir))

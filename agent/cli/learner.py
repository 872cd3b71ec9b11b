"""``agent learner``: the learner of an online session as its own process, its actors on the bus (docs/fleet.md).

    agent learner --broker mqtt://HOST:PORT --env generated/click [--config FILE] [--set ...] [--run-dir DIR]
                  [--resume [RUN_DIR]] [--serve HOST:PORT] [--advertise URL] [--actors NAME,...]

It is ``agent train --online`` without local actors: the same settings, run folder, checkpoints, ``--resume`` and
progress line, with an MQTT transport (``agent.fleet.mqtt``) and an HTTP server for its adapter versions
(``agent.fleet.versions``). ``agent.online`` is imported only when the session starts. The flags of ``agent train
--online`` that configure its local actors (``FOR_ACTORS``) are refused, saying where they belong; a broker that
refuses the learner's user or password, or whose certificate does not verify, stops it at start.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Any

from agent.cli import train_online
from agent.cli.common import add_set_option, print_error
from agent.cli.fleet import add_bus_arguments, bus_settings

NAME = "learner"

_NO_ACTORS = ("agent learner has no actors of its own: start one agent actor per device, on any machine "
              "(agent actor --device KIND[:ADDRESS] ...; docs/fleet.md)")
FOR_ACTORS = {
    "online": ("--online", "agent learner is always an online session: leave out --online"),
    "actors": ("--parallel", _NO_ACTORS),
    "old_devices": ("--devices", _NO_ACTORS),
    "device": ("--device", "the device is each actor's: agent actor --device KIND[:ADDRESS] ... (docs/fleet.md)"),
    "device_kind": ("--device-kind", "the device kind is each actor's: agent actor --device KIND[:ADDRESS] ... "
                                     "(docs/fleet.md)"),
    "trust_tasks": ("--trust-tasks", "a task's start runs on each actor's machine: agent actor --trust-tasks DIR ... "
                                     "(docs/recording.md, Derived tasks)"),
}
"""The flags of ``agent train --online`` (``train_online.add_arguments``) that mean nothing for a learner, by
attribute name: the flag and where it belongs. Every other flag of that group is the learner's too."""


def add_parser(sub: Any) -> None:
    ln = sub.add_parser(NAME, help="the learner of a fleet: actors on other machines (agent actor) over MQTT",
                        description=(
        "The online learner as its own process: actors (agent actor, on any machine) send their samples over an "
        "MQTT broker; after every update the learner publishes the new adapter version, signed with the fleet "
        "key, and serves its files over HTTP. Settings, run folder and --resume as agent train --online "
        "(docs/online.md); the fleet in docs/fleet.md."))
    ln.add_argument("--config", help="training config file (TOML, see configs/train.toml); the same on every actor")
    add_set_option(ln, "override one option, e.g. --set rl.group_size=8 (repeatable)")
    ln.add_argument("--run-dir", metavar="DIR", help="the run folder (default: a new runs/online-<time>)")
    ln.add_argument("--resume", nargs="?", const="auto", metavar="RUN_DIR",
                    help="continue a stopped learner from its newest checkpoint (alone: --run-dir, else the newest "
                         "runs/online-*)")
    train_online.add_arguments(ln)
    add_bus_arguments(ln)
    fl = ln.add_argument_group("versions", "where actors fetch the adapter versions")
    fl.add_argument("--serve", default="0.0.0.0:8765", metavar="HOST:PORT",
                    help="address the version server listens on (default 0.0.0.0:8765; port 0: any free one)")
    fl.add_argument("--advertise", default="", metavar="URL",
                    help="the server's URL as actors reach it (default http://<this host's name>:PORT)")
    fl.add_argument("--actors", dest="allow", default="", metavar="NAME,...",
                    help="accept samples only from these actors (default: any actor that has published its status)")


def _serve_address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"--serve {text!r} is not HOST:PORT")
    return host, int(port)


def main(args: argparse.Namespace) -> int:
    from agent.errors import ConfigError, FleetError
    from agent.fleet.mqtt import MqttTransport
    from agent.fleet.record import FleetRecord
    from agent.fleet.settings import check_actor_name
    from agent.fleet.versions import VersionServer
    from agent.online import OnlineError
    from train.errors import CheckpointError

    given = [f"{flag}: {where}" for dest, (flag, where) in FOR_ACTORS.items()
             if getattr(args, dest, None) not in (None, False)]
    if given:
        return print_error("; ".join(given))
    args.online = True
    try:
        config, online = train_online.session_settings(args)
        broker, key = bus_settings(args)
        host, port = _serve_address(args.serve)
        allow = tuple(check_actor_name(a.strip()) for a in args.allow.split(",") if a.strip())
    except (ConfigError, OnlineError, FleetError, CheckpointError, ValueError) as exc:
        return print_error(str(exc))
    online = replace(online, remote_actors=True, actors=len(allow) or online.actors)  # the progress line's count
    try:
        server = VersionServer(Path(config.train.run_dir) / "adapters", host=host, port=port,
                               advertise=args.advertise).start()
    except OSError as exc:
        return print_error(f"the version server cannot listen on {args.serve}: {exc.strerror or exc}; choose "
                           f"another --serve HOST:PORT")
    run_dir = Path(config.train.run_dir)
    transport = MqttTransport(broker, role="learner", key=key, allow=allow, announce_url=server.url,
                              journal_dir=run_dir / "inbox").start()
    try:
        transport.wait_admitted()
    except FleetError as exc:
        transport.close(flush_s=0)
        server.stop()
        return print_error(str(exc))
    record = FleetRecord(run_dir, transport.counts_now, status=lambda: _status(transport),
                         publish=transport.set_learner_status)
    code = 1
    try:
        record.start()  # written from the start: a kill -9 leaves this process's counts, a few seconds old
        code = train_online.run_session(args, config, online, transport=transport)
    finally:
        record.stop("stopped" if code == 0 else f"exit {code}")
        transport.close()
        server.stop()
        if transport.journal is not None:
            transport.journal.close()
    return code


def _status(transport: Any) -> dict[str, Any]:
    """The changing part of the learner's status: its announced version, the step, what waits to be trained."""
    ref = transport.policy()
    return {"version": ref.version if ref else None, "step": ref.step if ref else None,
            "pending": transport.pending_groups()}

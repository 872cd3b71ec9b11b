"""``agent fleet``: a fleet's state and its key (docs/fleet.md).

    agent fleet status --broker mqtt://HOST:PORT[/PREFIX]   every actor's state, device, version, steps/s, last seen
    agent fleet key FILE                                     write a new fleet key (mode 600)

Also the options every fleet command shares (``add_bus_arguments``: the broker, its password and CA, the fleet
key) and how they become settings (``bus_settings``), used by ``agent learner`` and ``agent actor``.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from agent.cli.common import EXIT_EPISODE_FAILED, EXIT_OK, make_console, print_error
from agent.terminal import plain

NAME = "fleet"
EXIT_UNREACHABLE = EXIT_EPISODE_FAILED
"""The broker could not be reached (1): the command was right, the world was not."""


def add_bus_arguments(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    """--broker, --password-file, --ca, --fleet-key."""
    bus = parser.add_argument_group("the bus", "the broker and the fleet key (docs/fleet.md)")
    bus.add_argument("--broker", required=required, metavar="URL",
                     help="mqtt://[USER@]HOST[:PORT][/PREFIX] or mqtts://... (TLS); PREFIX names the session's "
                          "topics (default handeye/default); the password comes from $HANDEYE_MQTT_PASSWORD or "
                          "--password-file")
    bus.add_argument("--password-file", metavar="FILE", help="the broker password, in a file")
    bus.add_argument("--ca", metavar="FILE", help="mqtts: the CA certificate that signed the broker's")
    bus.add_argument("--fleet-key", metavar="FILE",
                     help="the fleet key that signs version announcements (default: $HANDEYE_FLEET_KEY; agent fleet "
                          "key FILE makes one)")


def bus_settings(args: argparse.Namespace, *, need_key: bool = True) -> tuple[Any, bytes | None]:
    """(BrokerConfig, fleet key) from the arguments; ``FleetError`` saying what is wrong."""
    from agent.errors import FleetError
    from agent.fleet.keys import load_key
    from agent.fleet.settings import parse_broker

    broker = parse_broker(args.broker, password_file=args.password_file or "", ca_file=args.ca or "")
    try:
        key = load_key(args.fleet_key or "")
    except FleetError:
        if need_key:
            raise
        key = None
    return broker, key


def add_parser(sub: Any) -> None:
    fl = sub.add_parser(NAME, help="a fleet's actors and key (agent fleet status | key)",
                        description="The actors of a fleet session as their retained statuses say, or a new fleet "
                                    "key (docs/fleet.md).")
    cmd = fl.add_subparsers(dest="fleet_command", metavar="SUBCOMMAND")
    st = cmd.add_parser("status", help="every actor's state, device, version, steps/s and last seen")
    add_bus_arguments(st)
    st.add_argument("--wait", type=float, default=2.0, metavar="S",
                    help="seconds to collect the retained statuses (default 2)")
    st.add_argument("--json", action="store_true", help="print JSON instead of a table")
    key = cmd.add_parser("key", help="write a new random fleet key to FILE (readable by you only)")
    key.add_argument("file", metavar="FILE")


def main(args: argparse.Namespace) -> int:
    from agent.errors import FleetError

    if args.fleet_command == "key":
        from agent.fleet.keys import write_key

        try:
            fingerprint = write_key(args.file)
        except (FleetError, OSError) as exc:
            return print_error(str(exc))
        make_console().print(f"wrote a new fleet key to {plain(args.file)} (fingerprint {fingerprint}); copy it to "
                             f"the learner and every actor: --fleet-key {plain(args.file)}")
        return EXIT_OK
    if args.fleet_command != "status":
        return print_error("say what: agent fleet status --broker URL, or agent fleet key FILE")
    try:
        broker, key = bus_settings(args, need_key=False)
    except FleetError as exc:
        return print_error(str(exc))
    return _status(broker, key, args.wait, args.json)


def _status(broker: Any, key: bytes | None, wait: float, as_json: bool) -> int:
    from agent.errors import FleetError
    from agent.fleet.mqtt import MqttTransport
    from agent.fleet.record import learner_row
    from agent.fleet.status import status_rows, status_table

    transport = MqttTransport(broker, role="observer", key=key).start()
    try:
        transport.wait_admitted(max(wait, 5.0))
        if not transport.wait_connected(max(wait, 5.0)):
            print_error(f"cannot reach the broker {broker.url}; is it running, and are the address, password and "
                        f"CA right?")
            return EXIT_UNREACHABLE
        time.sleep(wait)  # retained messages arrive right after the subscription
        statuses, policy = transport.statuses(), transport.policy()
        learner = learner_row(*transport.learner_status(), now=time.time())
    except FleetError as exc:  # refused: a wrong user or password, or a certificate that does not verify
        print_error(str(exc))
        return EXIT_UNREACHABLE
    finally:
        transport.close(flush_s=0)
    rows = status_rows(statuses, now=time.time())
    if as_json:
        print(json.dumps({"broker": broker.url, "policy": policy.version if policy else None, "learner": learner,
                          "actors": rows}, indent=1))
    else:
        status_table(make_console(), broker.url, policy.version if policy else None, rows, learner=learner)
    return EXIT_OK

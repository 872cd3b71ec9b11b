"""``agent devices``: the screens handeye can drive, per device kind (``devices.registry``): the browser the web device
would use, monitors of the X display, phones on the adb server."""

from __future__ import annotations

import argparse
from typing import Any

from agent.cli.common import EXIT_OK, add_set_option, config_path, make_console, print_error
from agent.terminal import plain

NAME = "devices"


def add_parser(sub: Any) -> None:
    devices = sub.add_parser(NAME, help="list the screens handeye can drive: monitors, phones, browsers")
    devices.add_argument("--config", help="config file (default: ./config.toml when present)")
    add_set_option(devices)


def main(args: argparse.Namespace) -> int:
    from agent.config import load_config
    from agent.errors import AgentError
    from devices.errors import DeviceError
    from devices.registry import all_device_kinds

    try:
        cfg = load_config(config_path(args.config), list(args.overrides))
    except AgentError as e:
        return print_error(str(e))
    console = make_console()
    for kind in all_device_kinds():
        console.print(f"[bold]{kind.name}[/] (--device {' or --device '.join(kind.forms())}): {plain(kind.summary)}",
                      soft_wrap=True)
        try:
            for line in kind.screens(cfg.section(kind.name)):
                console.print(f"  {plain(line)}", soft_wrap=True)
        except (DeviceError, ImportError, OSError) as e:
            console.print(f"  none: {plain(e)}", soft_wrap=True)
    return EXIT_OK

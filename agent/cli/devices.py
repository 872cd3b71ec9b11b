"""``agent devices``: the screens handeye can drive: monitors of the X display, phones on the adb server, and the
browser the web device would use."""

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
    from devices.web.browser import find_browser

    try:
        cfg = load_config(config_path(args.config), list(args.overrides))
    except AgentError as e:
        return print_error(str(e))
    console = make_console()
    console.print("[bold]desktop[/] (--device desktop, desktop.monitor = N)")
    try:
        from devices.desktop import list_monitors

        for m in list_monitors(cfg.desktop.display):
            console.print(f"  monitor {m.index}: {m.width}x{m.height} at ({m.left}, {m.top})")
    except (DeviceError, ImportError) as e:
        console.print(f"  none: {plain(e)}", soft_wrap=True)
    console.print("[bold]android[/] (--device android:SERIAL)")
    try:
        from devices.android import list_devices

        phones = list_devices(cfg.android.adb_host, cfg.android.adb_port)
        for phone in phones:
            console.print(f"  {plain(phone)}")
        if not phones:
            console.print("  none connected (adb devices is empty)")
    except (DeviceError, ImportError) as e:
        console.print(f"  none: {plain(e)}", soft_wrap=True)
    console.print("[bold]web[/] (--device web)")
    try:
        console.print(f"  {plain(find_browser(cfg.web.browser_path))}")
    except DeviceError as e:
        console.print(f"  none: {plain(e)}", soft_wrap=True)
    return EXIT_OK

"""``agent envs``: the registered environments (task suites whose rewards are checked by code)."""

from __future__ import annotations

import argparse
from typing import Any

from agent.cli.common import EXIT_OK, make_console, print_error
from agent.terminal import plain

NAME = "envs"


def add_parser(sub: Any) -> None:
    envs = sub.add_parser(NAME, help="list the registered environments (task suites with verifiable checks)")
    envs.add_argument("--suite", help="only this suite (e.g. generated)")


def main(args: argparse.Namespace) -> int:
    from rich.table import Table

    from envs.registry import all_specs

    specs = all_specs(args.suite)
    if not specs:
        return print_error(f"no environments in suite {args.suite!r}; `agent envs` lists every suite")
    table = Table(box=None, header_style="bold")
    for col in ("name", "suite", "description"):
        table.add_column(col)
    for s in specs:
        table.add_row(plain(s.name), plain(s.suite), plain(s.description))  # a task file's text is never markup
    make_console().print(table)
    return EXIT_OK

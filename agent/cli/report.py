"""``agent report RUN_DIR``: build report.html for a run folder written by ``agent run`` or ``agent eval``."""

from __future__ import annotations

import argparse
from typing import Any

from agent.cli.common import EXIT_OK, make_console, print_error
from agent.terminal import plain

NAME = "report"


def add_parser(sub: Any) -> None:
    rep = sub.add_parser(NAME, help="build report.html for a run folder (agent run or agent eval)")
    rep.add_argument("run_dir", help="runs/<run_id>")


def main(args: argparse.Namespace) -> int:
    from agent.report import build_report
    from envs.errors import RecordFormatError

    try:
        path = build_report(args.run_dir)
    except (RecordFormatError, FileNotFoundError) as e:
        return print_error(str(e))
    make_console().print(f"report: [bold]{plain(path)}[/] (open it in a browser; no server needed)")
    return EXIT_OK

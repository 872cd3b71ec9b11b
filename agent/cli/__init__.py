"""The ``agent`` command line.

    agent run [TASK] [--device web] [--url URL] [--policy ocr|scripted] [--script FILE]
              [--max-steps N] [--dry-run] [--config FILE] [--set section.key=value ...]
    agent record TASK [--url URL]    record a person doing the task (docs/recording.md)
    agent replay EPISODE       re-execute a recorded episode, report where the screen diverged
    agent show PATH            print a recorded run or episode
    agent parse --format F --size WxH TEXT    show how a model's output is read and where it lands
    agent doctor               check that the browser, fonts and OCR models are in place
    agent eval | report | data show | envs | devices | train [--online]    (agent COMMAND --help)
    agent learner | actor | fleet status    an online session across machines, over MQTT (docs/fleet.md)

Exit codes: 0 success, claimed or planned (--dry-run); 1 the episode ended otherwise (failure, infeasible, truncated,
aborted); 2 bad input (arguments, config, unwritable run folder); 128 + the signal's number when Ctrl-C (130),
SIGTERM (143) or SIGHUP (129) stopped it.

One module per command (``run``, ``record``, ``replay``, ``show``, ``doctor``, ``evaluate`` for ``eval``,
``report``, ``data``, ``envs``, ``devices``, ``train`` with ``train_online``, ``parse``, ``learner``, ``actor``,
``fleet``), each with its name
(``NAME``), ``add_parser(sub)``, which adds its subcommand and flags, and ``main(args) -> int``, which runs it and
returns the exit code; ``common`` holds what they share. Command modules import their heavy libraries inside
``main``: ``agent --help`` builds every parser.
"""

from __future__ import annotations

import argparse
from types import ModuleType

from agent.cli import (actor, data, devices, doctor, envs, evaluate, fleet, learner, parse, record, replay, report,
                       run, show, train)
from agent.cli.common import EXIT_USAGE, setup_logging

# In the order ``agent --help`` lists them.
COMMANDS: dict[str, ModuleType] = {m.NAME: m for m in (run, record, replay, show, doctor, evaluate, report, data, envs,
                                                        devices, train, learner, actor, fleet, parse)}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agent",
        description="handeye: let a policy see and operate a screen, and record every step.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS.values():
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    return COMMANDS[args.command].main(args)

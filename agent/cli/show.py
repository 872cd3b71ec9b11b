"""``agent show PATH``: print a recorded run (every episode of it) or one episode, step by step.

An episode without an outcome shows as ``running`` (a live process still writes it) or ``crashed`` (the process
died; every finished step is listed): both exit 0, since the trajectory itself reads fine (docs/trajectories.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from agent.cli.common import EXIT_OK, make_console, print_error

NAME = "show"


def add_parser(sub: Any) -> None:
    show = sub.add_parser(NAME, help="print a recorded run or episode")
    show.add_argument("path", help="a run folder (runs/<run_id>) or an episode folder")


def main(args: argparse.Namespace) -> int:
    from agent.summary import print_episode
    from envs.errors import RecordFormatError
    from envs.trajectory import iter_episodes, read_episode

    path = Path(args.path)
    try:
        episodes = list(iter_episodes(path)) if (path / "run.json").exists() else [read_episode(path)]
    except RecordFormatError as e:
        return print_error(str(e))
    console = make_console()
    for episode in episodes:
        print_episode(console, episode)
    return EXIT_OK

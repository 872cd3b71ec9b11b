"""``agent data show FILE``: load a grounding dataset, list the records it rejected, draw a sample's boxes; or
``agent data show RUN``: draw every recorded step of a run (or episode) folder, an agent's or a demonstration's, with
its target box and its action's point on its frame.

Exit codes: 0 when at least one record loaded (the rejected ones are listed) or one step was drawn, 2 when none did
(the error lists why) or the path does not exist."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from agent.cli.common import EXIT_OK, make_console, positive_int, print_error
from agent.terminal import plain

NAME = "data"


def add_parser(sub: Any) -> None:
    data = sub.add_parser(NAME, help="grounding datasets and recorded runs")
    data_sub = data.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    show_data = data_sub.add_parser("show", help="draw the boxes of a random sample of a dataset's images, or of "
                                                 "every step of a recorded run")
    show_data.add_argument("file", help="a ScreenSpot / ScreenSpot-v2 JSON file, a ScreenSpot-Pro folder, or a run "
                                        "folder (runs/<run>, or one episode folder: agent run, agent record)")
    show_data.add_argument("--out", help="folder for the drawn images (default: a new folder under runs/)")
    show_data.add_argument("-n", type=positive_int, default=16, help="how many images (a dataset; a run draws every "
                                                                   "step)")
    show_data.add_argument("--seed", type=int, default=0)


def main(args: argparse.Namespace) -> int:
    """``data show``, the only action so far (argparse requires one)."""
    from envs.errors import EnvError
    from envs.grounding import load_grounding, rejection_summary
    from envs.grounding_draw import draw_samples
    from envs.trajectory import new_run_id

    folder = Path(args.file)
    if (folder / "run.json").is_file() or (folder / "episode.json").is_file():
        return show_run(folder, Path(args.out) if args.out else Path("runs") / f"data-{new_run_id()}")
    try:
        dataset = load_grounding(args.file)
    except EnvError as e:
        return print_error(str(e))
    if not dataset.samples:
        return print_error(f"no usable record in {args.file}: {rejection_summary(dataset.report.rejected)}; fix "
                           f"those records, or pass a ScreenSpot / -v2 JSON file or a ScreenSpot-Pro folder")
    out = Path(args.out) if args.out else Path("runs") / f"data-{new_run_id()}"
    paths = draw_samples(dataset.samples, out, n=args.n, seed=args.seed)
    console = make_console()
    console.print(f"{dataset.report.loaded} samples loaded, {len(dataset.report.rejected)} rejected")
    for r in dataset.report.rejected[:20]:
        console.print(f"  rejected: {plain(r)}", soft_wrap=True)
    console.print(f"drew {len(paths)} images in [bold]{plain(out)}[/]")
    return EXIT_OK


def show_run(folder: Path, out: Path) -> int:
    """Draw every step of a recorded run (or episode) folder with its target box and point."""
    from envs.errors import EnvError
    from envs.grounding_draw import draw_run

    try:
        paths = draw_run(folder, out)
    except EnvError as e:
        return print_error(str(e))
    if not paths:
        return print_error(f"{folder} holds no recorded step with a frame to draw")
    make_console().print(f"drew {len(paths)} steps of {plain(folder)} in [bold]{plain(out)}[/]")
    return EXIT_OK

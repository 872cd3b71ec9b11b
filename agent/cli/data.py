"""``agent data show FILE``: load a grounding dataset, list the records it rejected, draw a sample's boxes.

Exit codes: 0 when at least one record loaded (the rejected ones are listed), 2 when none did (the error lists
why) or the path does not exist."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from agent.cli.common import EXIT_OK, make_console, positive_int, print_error
from agent.terminal import plain

NAME = "data"


def add_parser(sub: Any) -> None:
    data = sub.add_parser(NAME, help="grounding datasets")
    data_sub = data.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    show_data = data_sub.add_parser("show", help="draw the boxes of a random sample of a dataset's images")
    show_data.add_argument("file", help="a ScreenSpot / ScreenSpot-v2 JSON file, or a ScreenSpot-Pro folder")
    show_data.add_argument("--out", help="folder for the drawn images (default: a new folder under runs/)")
    show_data.add_argument("-n", type=positive_int, default=16, help="how many images")
    show_data.add_argument("--seed", type=int, default=0)


def main(args: argparse.Namespace) -> int:
    """``data show``, the only action so far (argparse requires one)."""
    from envs.errors import EnvError
    from envs.grounding import load_grounding, rejection_summary
    from envs.grounding_draw import draw_samples
    from envs.trajectory import new_run_id

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

"""``agent data show PATH``: draw what handeye reads, so a systematic offset shows at a glance. PATH is

- a grounding dataset (ScreenSpot / -v2 JSON, a ScreenSpot-Pro folder): a random sample with its boxes;
- a training JSONL (``{"image", "instruction", "box"}`` rows, ``train.data.grounding``): the same;
- action records (GUI-R1's ``.parquet`` test or training files, ``.jsonl`` with ``gt_action``, or a Hugging Face
  dataset folder such as ``agent data export`` writes): a random sample with the true point, box and GR ellipse;
- a run (or episode) folder, an agent's or a demonstration's: every recorded step with its target box and point.

``agent data export RUN --format parquet|hf [--out PATH]``: the steps of a run folder as a Parquet file or a Hugging
Face dataset folder with an image column (``envs.export``).

Exit codes: 0 when at least one record loaded (the rejected ones are listed), one step was drawn or one row
exported, 2 when none did (the error lists why) or the path does not exist."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from agent.cli.common import EXIT_OK, make_console, positive_int, print_error
from agent.terminal import plain

NAME = "data"


def add_parser(sub: Any) -> None:
    data = sub.add_parser(NAME, help="datasets and recorded runs: draw them, export runs")
    data_sub = data.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    show_data = data_sub.add_parser("show", help="draw the boxes of a random sample of a dataset's images, or of "
                                                 "every step of a recorded run")
    show_data.add_argument("file", help="a ScreenSpot / ScreenSpot-v2 JSON file, a ScreenSpot-Pro folder, a training "
                                        "JSONL, action records (.parquet, .jsonl, a dataset folder), or a run folder "
                                        "(runs/<run>, or one episode folder: agent run, agent record)")
    show_data.add_argument("--out", help="folder for the drawn images (default: a new folder under runs/)")
    show_data.add_argument("-n", type=positive_int, default=16, help="how many images (a dataset; a run draws every "
                                                                   "step)")
    show_data.add_argument("--seed", type=int, default=0)
    export = data_sub.add_parser("export", help="write a run's steps as a Parquet file or a Hugging Face dataset")
    export.add_argument("run", help="a run folder (runs/<run>: agent run, agent eval, an online session, agent "
                                    "record) or one episode folder")
    export.add_argument("--format", dest="fmt", choices=("parquet", "hf"), default="parquet",
                        help="parquet: one file; hf: a datasets.save_to_disk folder (default: parquet)")
    export.add_argument("--out", help="where (default: next to the run, <run>-steps.parquet or <run>-steps-hf/)")


def main(args: argparse.Namespace) -> int:
    """``data show`` or ``data export``."""
    from envs.errors import EnvError
    from envs.grounding import load_grounding, rejection_summary
    from envs.grounding_draw import draw_samples
    from envs.trajectory import new_run_id

    if args.data_command == "export":
        return export(Path(args.run), args.fmt, Path(args.out) if args.out else None)
    folder = Path(args.file)
    out = Path(args.out) if args.out else Path("runs") / f"data-{new_run_id()}"
    if (folder / "run.json").is_file() or (folder / "episode.json").is_file():
        return show_run(folder, out)
    kind = data_kind(folder)
    if kind == "actions":
        return show_actions(folder, out, args.n, args.seed)
    try:
        dataset = load_grounding(args.file) if kind == "grounding" else training_jsonl(folder)
    except EnvError as e:
        return print_error(str(e))
    if not dataset.samples:
        return print_error(f"no usable record in {args.file}: {rejection_summary(dataset.report.rejected)}; fix "
                           f"those records, or pass a ScreenSpot / -v2 JSON file or a ScreenSpot-Pro folder")
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


def data_kind(path: Path) -> str:
    """actions, training (our grounding JSONL) or grounding, by the path and a JSONL's first row."""
    from envs.action_bench.records import is_hf_folder

    if path.suffix == ".parquet" or is_hf_folder(path):
        return "actions"
    if path.suffix == ".jsonl" and path.is_file():
        with path.open(encoding="utf-8", errors="replace") as f:
            first = next((line for line in f if line.strip()), "")
        try:
            row = json.loads(first)
        except json.JSONDecodeError:
            return "training"
        return "actions" if isinstance(row, dict) and "gt_action" in row else "training"
    return "grounding"


def training_jsonl(path: Path) -> Any:
    """Our grounding JSONL (``train.data.grounding``) as a grounding dataset to draw; EnvError when it has no row."""
    from envs.errors import EnvError
    from envs.grounding import GroundingDataset, LoadReport, RejectedRecord, RejectKind
    from train.data.grounding import GroundingSource
    from train.errors import PromptSourceError

    try:
        source = GroundingSource(path)
    except PromptSourceError as e:
        raise EnvError(str(e)) from e
    rejected = tuple(RejectedRecord(path, -1, RejectKind.MALFORMED, str(s)) for s in source.skipped)
    samples = tuple(source.grounding_samples())
    return GroundingDataset(samples, LoadReport((path,), len(samples), rejected))


def show_actions(path: Path, out: Path, n: int, seed: int) -> int:
    """Draw a random sample of each action-record file at ``path``."""
    from envs.action_bench.draw import draw_actions
    from envs.action_bench.records import load_actions
    from envs.errors import EnvError

    try:
        datasets = load_actions(path, any_records=True)
    except EnvError as e:
        return print_error(str(e))
    console, drawn = make_console(), 0
    for d in datasets:
        console.print(f"{plain(d.file)}: {d.benchmark.title}, {len(d.records)} records loaded, {len(d.rejected)} "
                      f"rejected, gt_bbox in {d.units}", soft_wrap=True)
        for r in d.rejected[:20]:
            console.print(f"  rejected: {plain(r)}", soft_wrap=True)
        drawn += len(draw_actions(d, out / d.file.stem if len(datasets) > 1 else out, n=n, seed=seed))
    if not drawn:
        return print_error(f"no record of {path} could be drawn")
    console.print(f"drew {drawn} images in [bold]{plain(out)}[/]")
    return EXIT_OK


def export(run: Path, fmt: str, out: Path | None) -> int:
    """``data export``: the steps of ``run`` as ``fmt`` at ``out``."""
    from envs.errors import EnvError
    from envs.export import export_run as write

    name = run.resolve().name
    target = out or run.resolve().parent / (f"{name}-steps.parquet" if fmt == "parquet" else f"{name}-steps-hf")
    try:
        rows = write(run, target, fmt)
    except EnvError as e:
        return print_error(str(e))
    make_console().print(f"exported {rows} steps of {plain(run)} to [bold]{plain(target)}[/]", soft_wrap=True)
    return EXIT_OK

"""``agent eval --suite actions --data FILE_OR_FOLDER``: a policy on GUI-R1's offline action benchmarks.

Each benchmark file (Parquet as released, or JSONL with an image folder: ``envs.action_bench.records``) is decided
``--batch`` samples at a time (``agent.action_eval``) and scored with GUI-R1's Type / GR / SR; the console shows the
tables (``agent.action_report``) and samples per second, and a run folder ``runs/actions-<run_id>/`` gets
``results.json``, ``report.html`` and each benchmark's screenshots under ``<benchmark>/images/``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from agent.builders import build_policy, close_policy
from agent.cli.common import EXIT_OK, make_console, print_error
from agent.terminal import plain

__all__ = ["add_action_options", "run_actions"]


def add_action_options(ev: Any) -> None:
    """The options only ``--suite actions`` reads (``--limit``, shared with ``--suite screenspot``, is
    ``agent.cli.evaluate``'s)."""
    ev.add_argument("--benchmark", help="for --suite actions: androidcontrol-low, androidcontrol-high, guiodyssey, "
                                        "omniact-web, omniact-desktop or guiact-web (default: from the file name)")
    ev.add_argument("--batch", type=int, default=8, help="for --suite actions: samples decided together")
    ev.add_argument("--gt-units", default="auto", choices=("auto", "normalized", "pixels"),
                    help="for --suite actions: the units of gt_bbox (default: normalized when every number is <= 1)")


def run_actions(args: argparse.Namespace, cfg: Any, kind: str) -> int:
    from agent.action_eval import evaluate_actions
    from agent.action_report import build_action_report, format_action_tables
    from envs.action_bench.records import load_actions
    from envs.errors import EnvError
    from envs.trajectory import new_run_id

    if not args.data:
        return print_error("--suite actions needs --data FILE_OR_FOLDER (GUI-R1's test .parquet files, or .jsonl "
                           "records next to their images)")
    if kind == "oracle":
        return print_error("the action benchmarks have no oracle: use --policy ocr, scripted or a model")
    if args.batch < 1 or (args.limit is not None and args.limit < 1):
        return print_error("--batch and --limit must be at least 1")
    try:
        datasets = load_actions(args.data, bench=args.benchmark, units=args.gt_units)
    except EnvError as e:
        return print_error(str(e))
    policy = build_policy(cfg)
    console = make_console()
    out = Path(cfg.record.runs_dir) / f"actions-{new_run_id()}"

    def progress(result: Any) -> None:
        console.print(f"  {result.benchmark.name}: {len(result.steps)} decided, {result.samples_per_s:.2f} samples/s",
                      highlight=False)

    async def grade() -> list[Any]:
        try:
            return [await evaluate_actions(d, policy, batch=args.batch, limit=args.limit,
                                           out_dir=out / d.benchmark.name, on_batch=progress) for d in datasets]
        finally:
            await close_policy(policy)

    results = [r.to_dict() for r in asyncio.run(grade())]
    for result in results:
        console.print(f"{plain(result['file'])}: {result['steps']} samples scored, {result['rejected_count']} "
                      f"rejected, gt_bbox in {result['units']}", soft_wrap=True)
        for r in result["rejected"][:10]:
            console.print(f"  rejected: {plain(r['file'])}[{r['index']}]: {plain(r['reason'])}", soft_wrap=True)
        for table in format_action_tables(result):
            console.print(table)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, ensure_ascii=False, indent=1), encoding="utf-8")
    page = build_action_report(results, [r["benchmark"] for r in results], out / "report.html",
                               title=f"action benchmarks: {args.data}")
    console.print(f"results: [bold]{plain(out / 'results.json')}[/]   report: [bold]{plain(page)}[/]", soft_wrap=True)
    return EXIT_OK

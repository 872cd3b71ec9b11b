"""``agent eval --suite screenspot --data FILE_OR_FOLDER``: a policy's accuracy on ScreenSpot / -v2 / -Pro.

The dataset is loaded (``envs.grounding.load_grounding``: ``--language``, ``--limit``), a model is prompted with its
family's grounding variant unless ``model.variant`` is set (``agent.grounding_eval.with_grounding_prompt``), and each
sample is asked and scored (``agent.grounding_eval.evaluate_grounding``) with a progress line every few samples
(``GroundingProgress``); then the accuracy table, and a run folder ``runs/grounding-<run_id>/`` with
``results.json`` and ``report.html``. The layouts, where to get each dataset and how it is scored:
docs/environments.md#grounding-benchmarks-screenspot-screenspot-v2-screenspot-pro.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.builders import build_policy, close_policy
from agent.cli.common import EXIT_OK, make_console, print_error
from agent.terminal import plain

__all__ = ["GroundingProgress", "add_grounding_options", "run_grounding"]

PROGRESS_EVERY = 50
"""A progress line every this many samples (every 5 % of a smaller dataset)..."""
PROGRESS_INTERVAL_S = 30.0
"""... and with the first sample scored after this many seconds without one (a model on a CPU takes seconds per
sample, so 50 of them would leave the console silent for minutes)."""


def add_grounding_options(ev: Any) -> None:
    """The options only ``--suite screenspot`` reads (``--limit`` is shared with ``--suite actions``)."""
    ev.add_argument("--language", choices=("en", "cn"),
                    help="for --suite screenspot: the instructions' language; cn is ScreenSpot-Pro's instruction_cn "
                         "(default: en)")


class GroundingProgress:
    """The ``on_result`` of ``evaluate_grounding`` that prints how far the evaluation is: samples scored, the
    running top-1 accuracy, the unparsed answers and the rate, every ``every`` samples, and with the first sample
    scored ``interval_s`` seconds or more after the last line. The last sample prints nothing: the table follows."""

    def __init__(self, total: int, emit: Callable[[str], None], *, every: int | None = None,
                 interval_s: float = PROGRESS_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.total, self.emit, self.interval_s, self.clock = total, emit, interval_s, clock
        self.every = every if every is not None else max(1, min(PROGRESS_EVERY, math.ceil(total / 20)))
        self.done = self.correct = self.unparsed = 0
        self.started = self.last = clock()

    def __call__(self, result: Any) -> None:
        self.done += 1
        self.correct += result.correct
        self.unparsed += result.prediction.parse_error is not None
        now = self.clock()
        if self.done >= self.total or (self.done % self.every and now - self.last < self.interval_s):
            return
        self.last = now
        rate = self.done / (now - self.started) if now > self.started else 0.0
        self.emit(f"[{self.done}/{self.total}] top-1 {self.correct / self.done:.3f} ({self.correct}/{self.done}), "
                  f"unparsed {self.unparsed}, {rate:.2f} samples/s")


def run_grounding(args: argparse.Namespace, cfg: Any, kind: str) -> int:
    """``--suite screenspot``: ask the policy for each sample's target, print progress and the accuracy table,
    write results.json and report.html in a new run folder."""
    from agent.grounding_eval import evaluate_grounding, with_grounding_prompt
    from agent.report import build_grounding_report
    from envs.grounding import Language, RejectKind, load_grounding, rejection_summary
    from envs.trajectory import new_run_id

    if not args.data:
        return print_error("--suite screenspot needs --data FILE (a ScreenSpot / -v2 JSON file or a ScreenSpot-Pro "
                           "folder)")
    if kind in ("oracle", "scripted"):
        return print_error("grounding datasets are evaluated with a model or the ocr policy "
                           "(--policy ocr|transformers:..|openai:..)")
    language = Language(args.language or Language.EN)
    dataset = load_grounding(args.data, language=language, limit=args.limit)
    rejected = dataset.report.rejected
    if not dataset.samples:  # nothing to score: bad input, not an accuracy of 0
        if rejected and all(r.kind is RejectKind.MISSING_LANGUAGE for r in rejected):
            return print_error(f"{args.data} has no Chinese instructions (instruction_cn): only ScreenSpot-Pro has "
                               f"them; leave out --language cn for the English ones")
        return print_error(f"no usable record in {args.data}: {rejection_summary(rejected)}; fix "
                           f"those records, or pass a ScreenSpot / -v2 JSON file or a ScreenSpot-Pro folder")
    policy = with_grounding_prompt(build_policy(cfg), variant_chosen=bool(cfg.model.variant))
    console = make_console()
    _print_loaded(console, dataset, args.limit, policy)
    progress = GroundingProgress(len(dataset.samples), lambda line: console.print(f"  {plain(line)}"))

    async def grade() -> Any:
        try:
            return await evaluate_grounding(dataset.samples, policy, rejected=rejected, on_result=progress)
        finally:
            await close_policy(policy)

    report = asyncio.run(grade())
    for r in report.rejected[len(rejected):][:20]:  # images that could not be decoded
        console.print(f"  rejected: {plain(r)}", soft_wrap=True)
    if not report.total:
        return print_error(f"no sample of {args.data} could be evaluated: {rejection_summary(report.rejected)}")
    console.print(f"top-1 accuracy {report.accuracy:.3f}   any-candidate {report.any_accuracy:.3f}   "
                  f"unparsed {report.wrong_format}")
    if report.abstention.negatives or report.abstention.abstained_wrongly:
        console.print(plain(report.abstention.line()))
    console.print(plain(report.table("platform/element_type")))
    out = Path(cfg.record.runs_dir) / f"grounding-{new_run_id()}"
    out.mkdir(parents=True, exist_ok=True)
    result = {**report.to_dict(), "language": language.value, "limit": args.limit, "policy": policy.describe()}
    (out / "results.json").write_text(json.dumps(result, ensure_ascii=False, indent=1))
    page = build_grounding_report(result, out / "report.html", title=f"grounding evaluation of {args.data}")
    console.print(f"results: [bold]{plain(out / 'results.json')}[/]   report: [bold]{plain(page)}[/]")
    return EXIT_OK


def _print_loaded(console: Any, dataset: Any, limit: int | None, policy: Any) -> None:
    """What was loaded (and left out), and the prompt a model is asked with."""
    from policy.model import ModelPolicy

    files = len(dataset.report.files)
    limited = f" (the first {limit} of each of {files} files: --limit)" if limit is not None else ""
    console.print(f"{dataset.report.loaded} samples loaded{limited}, {len(dataset.report.rejected)} rejected")
    for r in dataset.report.rejected[:20]:
        console.print(f"  rejected: {plain(r)}", soft_wrap=True)
    if isinstance(policy, ModelPolicy):
        preset = policy.preset
        console.print(f"prompt: {plain(preset.family)} variant {plain(preset.variant or 'default')} "
                      f"(--set model.variant=... for another)", soft_wrap=True)

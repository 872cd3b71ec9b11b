"""Running a policy over an offline action benchmark and scoring it as GUI-R1 does (``agent eval --suite actions``).

    datasets = load_actions("data/GUI-R1/")                  # envs.action_bench.records: one per test file
    result = await evaluate_actions(datasets[0], policy, batch=8, out_dir=run / "guiodyssey")
    result.scores.released["sr"].rate, result.breakdown(), result.confusion()

Each step is one decision on one screenshot: the instruction is the task. A family whose released inference scripts
run these benchmarks (``ModelFormat.released_scripts``: GUI-R1's) is prompted as those scripts prompt it: the
record's history string as its prompt's history (``HistoryEntry.recorded``), the benchmark's own action list (the
preset's variant set to the benchmark's), the scripts' image size (no training-size cap); other families see the
instruction alone. Decisions are made a batch at a time: a model policy's requests go to its
backend in one ``generate`` call (the backends batch them), other policies decide the batch concurrently.

What is scored: such a family's raw output read as its released scripts read it (``ReleasedScripts.read``), any
other policy's unified action mapped to the benchmark's names (``from_action``). A screenshot that cannot be decoded is a
rejected record, never a crash; a policy error other than a parse error (a backend that is down) stops the run.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devices.base import Observation
from envs.action_bench.benchmarks import Benchmark
from envs.action_bench.mapping import Prediction, from_action
from envs.action_bench.metrics import Scores, StepScore, score_step, scores
from envs.action_bench.records import ActionDataset, ActionRecord, decode_image, iter_images
from envs.errors import EnvError
from envs.grounding import RejectedRecord, RejectKind
from policy.base import Decision, HistoryEntry, Policy
from policy.errors import PolicyParseError
from policy.formats import ReleasedScripts
from policy.model import ModelPolicy

log = logging.getLogger(__name__)

__all__ = ["ActionStepResult", "BenchResult", "decide_batch", "evaluate_actions", "for_benchmark"]


@dataclass(frozen=True, slots=True)
class ActionStepResult:
    record: ActionRecord
    prediction: Prediction
    score: StepScore
    image_size: tuple[int, int]
    image: str = ""
    """The screenshot's file, relative to the output folder ("" when none was written)."""


@dataclass(slots=True)
class BenchResult:
    """One benchmark file's evaluation: per step, the scores, the breakdowns."""

    benchmark: Benchmark
    file: Path
    units: str
    steps: list[ActionStepResult] = field(default_factory=list)
    rejected: list[RejectedRecord] = field(default_factory=list)
    wall_s: float = 0.0
    policy: dict[str, Any] = field(default_factory=dict)

    @property
    def scores(self) -> Scores:
        return scores([s.score for s in self.steps])

    @property
    def samples_per_s(self) -> float:
        return len(self.steps) / self.wall_s if self.wall_s > 0 else 0.0

    def breakdown(self) -> list[dict[str, Any]]:
        """Per true action: steps, type hits, and GR / text hits over the steps they apply to (plain counts)."""
        rows = []
        for action in sorted({s.score.gt_action for s in self.steps}):
            mine = [s.score for s in self.steps if s.score.gt_action == action]
            grounded = [s.grounding for s in mine if s.grounding is not None]
            texted = [s.text for s in mine if s.text is not None]
            rows.append({"action": action, "steps": len(mine), "type_hits": sum(s.type_hit for s in mine),
                         "gr_hits": sum(grounded) if grounded else None, "gr_steps": len(grounded),
                         "text_hits": sum(texted) if texted else None, "text_steps": len(texted)})
        return rows

    def confusion(self) -> dict[str, dict[str, int]]:
        """True action -> predicted action -> steps; "(none)" where nothing was read."""
        out: dict[str, Counter] = {}
        for s in self.steps:
            out.setdefault(s.score.gt_action, Counter())[s.score.pred_action or "(none)"] += 1
        return {gt: dict(sorted(c.items())) for gt, c in sorted(out.items())}

    def to_dict(self) -> dict[str, Any]:
        b = self.benchmark
        return {
            "benchmark": b.name, "title": b.title, "file": str(self.file), "units": self.units,
            "policy": self.policy, "steps": len(self.steps), "rejected_count": len(self.rejected),
            "wall_s": round(self.wall_s, 3), "samples_per_s": round(self.samples_per_s, 3),
            "scores": self.scores.to_dict(), "published": {k: list(v) for k, v in b.published.items()},
            "breakdown": self.breakdown(), "confusion": self.confusion(),
            "rejected": [{"file": str(r.file), "index": r.index, "kind": r.kind.value, "reason": r.reason}
                         for r in self.rejected],
            "samples": [_sample_dict(s) for s in self.steps],
        }


def _sample_dict(s: ActionStepResult) -> dict[str, Any]:
    r, p = s.record, s.prediction
    return {"id": r.id, "image": s.image, "size": list(s.image_size), "instruction": r.instruction,
            "history": r.history, "gt_action": r.gt_action, "gt_point": r.gt_point(s.image_size),
            "gt_box": r.gt_box(s.image_size), "gt_text": r.gt_text, "pred_action": p.action, "pred_point": p.point,
            "pred_text": p.text, "unified": p.unified, "parse_error": p.parse_error, "raw_output": p.raw_output,
            "type_hit": s.score.type_hit, "gr_hit": s.score.grounding, "text_hit": s.score.text}


def _released(policy: Policy, variant: str) -> ReleasedScripts | None:
    """The released scripts of a model policy's family for a benchmark of action list ``variant`` (None: none)."""
    return policy.format.released_scripts(policy.preset, variant) if isinstance(policy, ModelPolicy) else None


def for_benchmark(policy: Policy, bench: Benchmark) -> Policy:
    """The policy to run on ``bench``: a model whose family has released scripts for it gets the preset they prompt
    with (GUI-R1: the benchmark's action list, qwen-vl-utils' image size without the training cap of run time)."""
    scripts = _released(policy, bench.variant)
    if scripts is not None and isinstance(policy, ModelPolicy):
        return ModelPolicy(policy.backend, scripts.preset, n=policy.n, fmt=policy.format)
    return policy


async def decide_batch(policy: Policy, items: Sequence[tuple[str, tuple[HistoryEntry, ...], Observation]]
                       ) -> list[Decision]:
    """One decision per (task, history, observation): a model policy's in one backend call, others concurrently."""
    if isinstance(policy, ModelPolicy):
        requests = [policy.request(task, history, obs) for task, history, obs in items]
        generations = await policy.backend.generate([r for r, _ in requests])
        return [policy.decision(g, space, history)
                for g, (_, space), (_, history, _) in zip(generations, requests, items)]

    async def one(task: str, history: tuple[HistoryEntry, ...], obs: Observation) -> Decision:
        try:
            return await policy.decide(task, history, obs)
        except PolicyParseError as e:
            return Decision(None, parse_error=str(e))

    return list(await asyncio.gather(*(one(*item) for item in items)))


def _prediction(scripts: ReleasedScripts | None, decision: Decision, frame_size: tuple[int, int]) -> Prediction:
    if scripts is not None:
        read = scripts.read(decision.raw_output, decision.model_input_size or frame_size)
        return Prediction(read.action, read.point, read.text, decision.raw_output, read.error)
    return from_action(decision.action, raw_output=decision.raw_output, parse_error=decision.parse_error)


def _save_image(data: bytes, out_dir: Path | None, index: int) -> str:
    if out_dir is None:
        return ""
    ext = ".png" if data[:8] == b"\x89PNG\r\n\x1a\n" else ".jpg" if data[:3] == b"\xff\xd8\xff" else ".img"
    name = f"images/{index:05d}{ext}"
    (out_dir / "images").mkdir(parents=True, exist_ok=True)
    (out_dir / name).write_bytes(data)
    return name


async def evaluate_actions(dataset: ActionDataset, policy: Policy, *, batch: int = 8, limit: int | None = None,
                           out_dir: str | Path | None = None,
                           on_batch: Callable[[BenchResult], None] | None = None) -> BenchResult:
    """Decide every record of ``dataset`` (the first ``limit``), ``batch`` at a time, and score them; the
    screenshots are written under ``out_dir/images`` for the report when ``out_dir`` is given."""
    if batch < 1:
        raise EnvError(f"batch must be at least 1, got {batch}")
    bench = dataset.benchmark
    policy = for_benchmark(policy, bench)
    out = Path(out_dir) if out_dir is not None else None
    result = BenchResult(bench, dataset.file, dataset.units, rejected=list(dataset.rejected),
                         policy=policy.describe())
    records = list(dataset.records[:limit] if limit else dataset.records)
    pending: list[tuple[ActionRecord, bytes]] = []
    t0 = time.perf_counter()
    for record, data in iter_images(dataset, records, batch=max(batch, 32)):
        if data is None:
            result.rejected.append(RejectedRecord(record.file, record.row, RejectKind.MISSING_IMAGE,
                                                  f"{record.id}: no image bytes"))
            continue
        pending.append((record, data))
        if len(pending) >= batch:
            await _run_batch(policy, pending, result, out)
            pending = []
            result.wall_s = time.perf_counter() - t0
            if on_batch is not None:
                on_batch(result)
    if pending:
        await _run_batch(policy, pending, result, out)
    result.wall_s = time.perf_counter() - t0
    return result


async def _run_batch(policy: Policy, pending: list[tuple[ActionRecord, bytes]], result: BenchResult,
                     out: Path | None) -> None:
    items, kept = [], []
    scripts = _released(policy, result.benchmark.variant)
    for record, data in pending:
        try:
            frame = await asyncio.to_thread(decode_image, data)
        except EnvError as e:
            result.rejected.append(RejectedRecord(record.file, record.row, RejectKind.UNREADABLE_IMAGE,
                                                  f"{record.id}: {e}"))
            continue
        history = (HistoryEntry(None, recorded=record.history),) if scripts is not None else ()
        items.append((record.instruction, history, Observation(frame, meta={"sample_id": record.id})))
        kept.append((record, data, (frame.shape[1], frame.shape[0])))
    decisions = await decide_batch(policy, items) if items else []
    for (record, data, size), decision in zip(kept, decisions):
        prediction = _prediction(scripts, decision, size)
        score = score_step(record.group, record.gt_action, record.gt_point(size), record.gt_text,
                           prediction.action, prediction.point, prediction.text)
        image = _save_image(data, out, len(result.steps))
        result.steps.append(ActionStepResult(record, prediction, score, size, image))

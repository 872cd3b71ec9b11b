"""The phrasing suite: the OCR policy's success per instruction form (docs/benchmarks.md, "Phrasing suite").

Runs ``agent eval``'s evaluation of ``generated/phrasing`` (21 English forms) and ``generated/phrasing-zh`` (16
Chinese forms) with one shared OCR policy: ``--per-form K`` episodes of every form (seed s uses form s % forms, so
seeds 0..K*forms-1 give each form K different screens), then groups the episodes by the form their instruction used
(``info["phrasing"]`` in each episode's record) and writes success per form, per language and overall, each with its
95% Wilson interval, plus whether the instruction parser reads every form's label (``policy.instructions``) for each
label the generator draws.

The trajectories go to a run folder under ``--runs-dir`` (an ordinary eval run with report.html).
Run: .venv/bin/python bench/phrasing.py [--per-form 3] [--parallel 2] [--out docs/results/phrasing.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent.eval import evaluate, wilson_interval  # noqa: E402
from envs.generated.layout import VOCAB  # noqa: E402
from envs.generated.phrasing import PHRASINGS, forms  # noqa: E402
from policy.instructions import parse_instruction  # noqa: E402
from policy.ocr import OcrPolicy, rapidocr_version  # noqa: E402

ENVS = {"en": "generated/phrasing", "zh": "generated/phrasing-zh"}


def parser_reads(language: str, form_id: str) -> tuple[int, int]:
    """(labels of the generator's vocabulary whose label this form's instruction yields, labels tried)."""
    form = next(p for p in PHRASINGS if p.id == form_id)
    labels = [entry[0] if language == "en" else entry[1] for entry in VOCAB]
    right = sum(1 for label in labels if (parsed := parse_instruction(form.instruction(label))) is not None
                and parsed.label == label)
    return right, len(labels)


def row(name: str, wins: int, n: int, **extra: object) -> dict:
    low, high = wilson_interval(wins, n)
    return {"name": name, "episodes": n, "successes": wins, "success_rate": wins / n if n else 0.0,
            "ci95": [low, high], **extra}


async def measure(per_form: int, parallel: int, runs_dir: str) -> dict:
    policy = OcrPolicy()
    out: dict = {"forms": [], "languages": []}
    t0 = time.perf_counter()
    run_ids = []
    for language, env in ENVS.items():
        count = len(forms(language))
        result = await evaluate([env], lambda _env: policy, episodes=per_form * count, parallel=parallel,
                                runs_dir=runs_dir, config={"bench": "phrasing"})
        run_ids.append(result.run_id)
        by_form: dict[str, list[bool]] = defaultdict(list)
        for episode in result.episodes:
            by_form[(episode.record.env or {}).get("phrasing", "?")].append(episode.success)
        for form in forms(language):
            wins = by_form.get(form.id, [])
            read, tried = parser_reads(language, form.id)
            out["forms"].append(row(form.id, sum(wins), len(wins), language=language,
                                    example=form.instruction(VOCAB[11][0 if language == "en" else 1]),
                                    parser_reads=f"{read}/{tried}"))
        stats = result.envs[env]
        out["languages"].append(row(language, stats.successes, stats.episodes, env=env))
    wins = sum(r["successes"] for r in out["languages"])
    n = sum(r["episodes"] for r in out["languages"])
    out["overall"] = row("overall", wins, n)
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    out["runs"] = run_ids
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-form", type=int, default=3, help="episodes per instruction form")
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--runs-dir", default="runs")
    parser.add_argument("--out", default="bench/results/phrasing.json")
    args = parser.parse_args()
    result = await_main(args)
    result.update({"command": "bench/phrasing.py " + " ".join(sys.argv[1:]), "date": time.strftime("%Y-%m-%d"),
                   "machine": f"{platform.machine()}, {platform.python_version()}",
                   "rapidocr": rapidocr_version()})
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    for r in result["forms"]:
        print(f"{r['name']:<22} {r['successes']}/{r['episodes']}  parser {r['parser_reads']:>6}  {r['example']}")
    for r in (*result["languages"], result["overall"]):
        print(f"{r['name']:<22} {r['successes']}/{r['episodes']} {r['success_rate']:.0%} "
              f"[{r['ci95'][0]:.0%}, {r['ci95'][1]:.0%}]")
    print(f"wrote {args.out}")


def await_main(args: argparse.Namespace) -> dict:
    return asyncio.run(measure(args.per_form, args.parallel, args.runs_dir))


if __name__ == "__main__":
    main()

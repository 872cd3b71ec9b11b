"""``python -m bench.fuzz``: the fuzz run, the naive paths and the growth table (see ``bench.fuzz``)."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import time
from pathlib import Path
from typing import Any

from bench.fuzz.naive import growth, naive_paths
from bench.fuzz.run import HANG_S, fuzz, summary
from bench.fuzz.wire import wire_fuzz, within_budget
from policy.formats.base import MAX_OUTPUT_CHARS

REPO = Path(__file__).resolve().parent.parent.parent

# -- main ---------------------------------------------------------------------------------------------

def _print(result: dict[str, Any]) -> None:
    f = result["fuzz"]
    print(f"inputs {f['inputs']:,}  calls {f['calls']:,}  parse errors {f['parse_errors']:,}  "
          f"crashes {f['crashes']}  hangs {f['hangs']}  out-of-screen {f['out_of_screen']}")
    for kinds in ("crash_kinds", "hang_kinds", "out_of_screen_kinds"):
        for key, v in f[kinds].items():
            print(f"  {kinds[:-6]} {key}: {v['count']} (shortest {v['shortest_chars']} chars: {v['shortest'][:120]!r})")
    print(f"\n{'family':<12} {'inputs':>8} {'median ms':>10} {'p99 ms':>8} {'max ms':>8}")
    for family, t in f["time_per_input_ms"].items():
        print(f"{family:<12} {t['inputs']:>8,} {t['median']:>10} {t['p99']:>8} {t['max']:>8}")
    print(f"\n{'case':<46} {'naive s':>10} {'handeye s':>10} {'speedup':>9}")
    for r in result["naive"]:
        if r["naive_limit_s"] is None:
            naive, speedup = "-", "-"
        elif r["naive_s"] is None:
            naive, speedup = f">{r['naive_limit_s']:g}", f">{r['speedup_at_least']:,}"
        else:
            naive, speedup = f"{r['naive_s']:.3f}", f"{r['speedup']:,}"
        print(f"{r['case']:<46} {naive:>10} {r['handeye_s']:>10.4f} {speedup:>9}")
    _print_wire(result["wire"])
    print(f"\n{'tenfold input':<46} {'n':>6} {'size at 10n':>11} {'s at n':>9} {'s at 10n':>9} {'ratio':>6}")
    for r in result["growth"]:
        print(f"{r['case']:<46} {r['n']:>6} {r['sizes'][1]:>11,} {r['seconds'][0]:>9.4f} {r['seconds'][1]:>9.4f} "
              f"{r['ratio']:>6}")


def _print_wire(w: dict[str, Any]) -> None:
    rss = w["rss_mib"]
    print(f"\nwire messages {w['messages']:,}  accepted {w['accepted']:,}  refused (TransportError) "
          f"{w['refused']:,}  errors {w['errors']}  bad accepted {w['bad_accepted']}")
    for kinds in ("error_kinds", "bad_accepted_kinds"):
        for key, v in w[kinds].items():
            print(f"  {key}: {v['count']} (shortest {v['shortest_bytes']} bytes: {v['shortest_hex'][:80]}...)")
    t = w["time_per_message_ms"]
    print(f"  per message: median {t['median']} ms, p99 {t['p99']} ms, max {t['max']} ms;  resident memory "
          f"{rss['before']} -> {rss['after']} MiB, peak growth {rss['peak_growth']} MiB (budget {w['budget_mib']} "
          f"MiB: {'within' if w['within_budget'] else 'OVER'})")
    print(f"  inbox refusals: {', '.join(f'{k} {v:,}' for k, v in sorted(w['inbox_counts'].items()))}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fuzz",
                                     description="Fuzz the model-output parsers, the rewards and the fleet's wire messages.")
    parser.add_argument("--inputs", type=int, default=100_000, help="mutated inputs (default 100,000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--wire", type=int, default=20_000, help="mutated fleet messages (default 20,000)")
    parser.add_argument("--limit", type=float, default=60.0, help="seconds the naive path may take per case")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "fuzz.json"))
    args = parser.parse_args(argv)
    start = time.perf_counter()
    tally = fuzz(args.inputs, args.seed)
    result: dict[str, Any] = {
        "command": f"python -m bench.fuzz --inputs {args.inputs} --wire {args.wire} --seed {args.seed} "
                   f"--limit {args.limit:g}",
        "machine": {"python": platform.python_version(), "platform": platform.platform(),
                    "cpus": multiprocessing.cpu_count()},
        "max_output_chars": MAX_OUTPUT_CHARS, "hang_threshold_s": HANG_S,
        "fuzz": summary(tally), "fuzz_seconds": round(time.perf_counter() - start, 1),
    }
    start = time.perf_counter()
    result["wire"] = wire_fuzz(args.wire, args.seed)  # before the naive paths: their children would not count
    result["wire"]["within_budget"] = within_budget(result["wire"])
    result["wire_seconds"] = round(time.perf_counter() - start, 1)
    result["naive"] = naive_paths(args.limit)
    result["growth"] = growth()
    _print(result)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()

"""Proof that the recipe learns: SFT, then AEPO, against GRPO with single answers and AEPO without the collinear
penalty, on generated screens with a ~1M-parameter random-init Qwen2.5-VL, on a CPU.

Screens (``bench/learning/screens.py``): 224 x 224, a 2 x 2 grid, the target ("the red circle") and one distractor
that differs from it in both colour and shape (``--mode differ``, the default; ``--mode share``: it shares one of
the two), on a position-coding gradient background. Harder settings (``BenchConfig.grid`` 4, more distractors) did
not leave chance level within the SFT budget; see docs/benchmarks.md, section bench/learning.

Per seed (see ``bench/learning/run.py``):

1. build the random model (the seed sets its weights and the training screens);
2. full-weight SFT on ``[{"point_2d": [cx, cy]}]`` answers (InfiGUI-G1 ``no_think``, lr warm-up), checked every 25
   steps on 200 validation screens, stopped once two consecutive checks (after at least 100 steps) sit in
   [30%, 60%]; if the time cap comes first, the latest in-band checkpoint is kept;
3. from that checkpoint, each arm (AEPO; GRPO with single answers; AEPO without the collinear penalty) trains on
   the same screens with the same number of sampled responses;
4. every checkpoint is scored greedily on the same 1,000 held-out screens; the paired bootstrap (10,000
   resamples, seeded) gives the 95% interval of (arm - SFT).

Writes ``<out>/learning.json`` and ``<out>/learning_curves.png``, prints a table. ``--trl`` instead measures the
Learner's AEPO steps (shared-prefix and unshared update) against TRL's GRPOTrainer steps, on 224 px and 1280 x 720
screens, several alternating runs, medians (``bench/learning/trl_compare.py``): ``<out>/trl_compare.json`` and
``.md``.

Each seed's SFT checkpoint is saved as a model folder with ``sft.json`` under ``--sft-dir`` (default
``<out>/sft``), one per seed and SFT settings; a later run with the same ones starts from it, and
``python -m bench.online curve`` runs its online arm from the same folder. ``--setting hard`` is where AEPO's
multi-answer exploration should pay (``SETTINGS``).

Run from the repository root:
    .venv/bin/python -m bench.learning --quick                 # ~5 min smoke run, one seed
    .venv/bin/python -m bench.learning --seeds 0          # one seed of the reported setting (~40 min alone)
    .venv/bin/python -m bench.learning --merge a.json b.json c.json  # seeds run side by side -> one result
    .venv/bin/python -m bench.learning --setting hard --seeds 0      # AEPO against GRPO on hard screens
    .venv/bin/python -m bench.learning --trl --out docs/results/learning   # ~40 min: 2 settings x 4 sides x 3 runs
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

DEFAULT_OUT = Path("bench/results/learning")


SETTINGS = {
    "a": {},
    "hard": dict(grid=4, distractors=3, mode="share", sft_multi=0.5, sft_multi_points=4, sft_band=(0.10, 0.15),
                 sft_eval_every=10, sft_max_minutes=45.0, sft_max_steps=1000, arms=("aepo", "grpo")),
    "hard-v1": dict(grid=4, distractors=3, mode="share", sft_multi=0.5, sft_multi_points=4, sft_band=(0.05, 0.15),
                    sft_max_minutes=30.0, sft_max_steps=600, arms=("aepo", "grpo")),
}
"""Named settings: fields of ``BenchConfig`` over its defaults. ``hard`` is where AEPO's multi-answer exploration
should pay: four shapes on a 4 x 4 grid of 56 px cells (small targets), two distractors sharing the target's colour
or shape (look-alikes), half of the SFT answers listing all four shapes, target first (answers of several points in
the policy's support), and SFT stopped after two validation checks in a row with top-1 in [10%, 15%]: above chance
(1/16 = 6.25%: a policy that ranks the target first more often than a blind guess), below 15%, and not one lucky
check (a blind guess scores 10% or more on 200 validation screens with probability 2.6%). Validation every 10 steps,
since SFT can cross the narrow band between two checks. AEPO against GRPO. ``hard-v1`` is the first version, kept
so that its results (docs/benchmarks.md) can be reproduced: it stopped in [5%, 15%], whose lower edge is chance."""


def budget_config(minutes: float | None, quick: bool, arms: list[str] | None, setting: str = "a"):
    """The reported setting (``BenchConfig``'s defaults), the quick smoke run, or a config whose stages fit
    ``minutes`` per seed on a 2-core CPU (measured: an SFT step of 16 examples ~0.6 s, an RL step of 8 prompts x
    8 samples ~3 s, 200 greedy validation screens ~4 s, 1,000 test ~20 s)."""
    from bench.learning.run import BenchConfig

    base = BenchConfig(**SETTINGS[setting])
    if quick:
        cfg = dataclasses.replace(base, sft_max_minutes=1.5, sft_max_steps=0, sft_eval_every=25, rl_steps=6,
                                  rl_eval_every=3, val_size=100, test_size=200, bootstrap=2000)
    elif minutes is None:
        cfg = base
    else:
        # SFT gets ~40% of the time at most; the rest goes to the arms, ~4 s per RL step with evaluation.
        n_arms = len(arms or base.arms)
        rl_minutes = minutes * 0.6 - 0.4 * n_arms  # each arm's 1,000-screen test and start
        steps = max(5, int(rl_minutes * 60 / 4.0 / n_arms))
        cfg = dataclasses.replace(base, sft_max_minutes=minutes * 0.4, rl_steps=steps,
                                  rl_eval_every=max(1, steps // 6))
    if arms:
        cfg = dataclasses.replace(cfg, arms=tuple(arms))
    return cfg


def markdown_table(data: dict, window: int = 20) -> str:
    """The result as a markdown table (what docs/benchmarks.md shows); ``window``: updates averaged at each end of
    an arm's curve for the sampled (T = 1) hit rate and points per response."""
    import numpy as np

    def ends(curve: list[dict], key: str) -> str:
        pts = [p[key] for p in curve if p["step"] > 0]
        if not pts:
            return ""
        first, last = np.nanmean(pts[:window]), np.nanmean(pts[-window:])
        return f"{first:.2f} -> {last:.2f}"

    rows = ["| seed | checkpoint | SFT steps / RL samples | top-1 | arm - SFT | 95% interval | points per answer "
            f"| sampled hit rate, first -> last {window} updates | points per sampled response, first -> last "
            f"{window} | collinear share | wall s |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in data["seeds"]:
        sft = s["sft"]
        rows.append(f"| {s['seed']} | SFT | {sft['steps']} steps ({sft['examples']:,} examples), stop: {sft['stop']}, "
                    f"val {sft['val_accuracy']:.3f} | {sft['test_accuracy']:.3f} | | | "
                    f"{sft['test_answers_per_sample']:.2f} | | | | {sft['seconds']:.0f} |")
        for arm, a in s["arms"].items():
            lo, hi = a["delta_ci95"]
            bold = "**" if lo > 0 else ""
            collinear = max((p.get("collinear_share", 0.0) for p in a["curve"] if p["step"] > 0), default=0.0)
            rows.append(f"| {s['seed']} | {arm} | {a['samples']:,} samples | {a['test_accuracy']:.3f} | "
                        f"{bold}{a['delta_vs_sft']:+.3f}{bold} | {bold}[{lo:+.3f}, {hi:+.3f}]{bold} | "
                        f"{a['test_answers_per_sample']:.2f} | {ends(a['curve'], 'sample_top1')} | "
                        f"{ends(a['curve'], 'answers_per_sample')} | max {collinear:.2f} | {a['seconds']:.0f} |")
    summary = data["summary"]
    lines = [f"Mean over seeds: SFT {summary['sft']['mean']:.3f}"]
    for arm, v in summary.items():
        if arm == "sft":
            continue
        lines.append(f"{arm} {v['test_accuracy']['mean']:.3f} (mean delta {v['delta_vs_sft']['mean']:+.3f}; interval "
                     f"above 0 on {v['seeds_ci_excludes_0_positive']} of {len(v['seeds'])} seeds, below 0 on "
                     f"{v.get('seeds_ci_excludes_0_negative', 0)})")
    return "\n".join(rows) + "\n\n" + "; ".join(lines) + ".\n"


def print_table(data: dict) -> None:
    seeds = data["seeds"]
    print(f"\n{'seed':>4} {'arm':<18} {'samples':>7} {'top-1':>6} {'vs SFT':>7} {'95% CI':>17} {'answers':>7}")
    for s in seeds:
        sft = s["sft"]
        print(f"{s['seed']:>4} {'SFT (' + str(sft['steps']) + ' steps)':<18} {sft['examples']:>7} "
              f"{sft['test_accuracy']:>6.3f} {'':>7} {'':>17} {sft['test_answers_per_sample']:>7.2f}")
        for arm, a in s["arms"].items():
            lo, hi = a["delta_ci95"]
            print(f"{s['seed']:>4} {arm:<18} {a['samples']:>7} {a['test_accuracy']:>6.3f} {a['delta_vs_sft']:>+7.3f} "
                  f"[{lo:+.3f}, {hi:+.3f}] {a['curve'][-1]['answers_per_sample']:>7.2f}")
    print("answers = points per sampled response at the arm's last training step (SFT: per greedy test answer)")


SFT_CAPS = ("sft_max_minutes", "sft_max_steps")


def merge_runs(paths: list[Path]) -> dict:
    """One result from several runs' JSON, e.g. one seed per process run side by side, or a further arm run later
    from the same SFT start. The configs must be equal except for:

    - ``arms``: the merged result has the union; a seed found in several runs must have the same SFT result in each
      (the same start) and no arm twice;
    - the SFT caps (``SFT_CAPS``): only if every seed's SFT stopped on the validation band, i.e. no cap decided the
      start; the merged config then lists them per seed.

    The summary is recomputed (per arm, over the seeds that ran it)."""
    from bench.learning.rewards import ARMS
    from bench.learning.run import BenchConfig, SeedResult, summarize

    runs = []
    for path in paths:
        try:
            runs.append(json.loads(Path(path).read_text()))
        except (OSError, ValueError) as exc:
            raise SystemExit(f"--merge: cannot read {path}: {exc}") from None

    def normal(config: dict) -> dict:  # fields added since a run was made take their defaults
        return dataclasses.asdict(BenchConfig(**{k: tuple(v) if isinstance(v, list) else v
                                                 for k, v in config.items()}))

    try:
        configs = [normal(run["config"]) for run in runs]
    except (KeyError, TypeError) as exc:
        raise SystemExit(f"--merge: not a bench.learning result ({exc})") from None
    config = configs[0]
    caps_differ = False
    for path, other in zip(paths[1:], configs[1:]):
        diff = sorted(k for k in set(config) | set(other) if config.get(k) != other.get(k))
        if set(diff) - set(SFT_CAPS) - {"arms"}:
            raise SystemExit(f"--merge: {path} was run with a different config ({', '.join(diff)}) from {paths[0]}")
        caps_differ = caps_differ or bool(set(diff) & set(SFT_CAPS))
    if caps_differ:  # the SFT caps may differ only where no cap decided where SFT stopped
        capped = [(str(p), s["seed"], s["sft"].get("stop", "")) for p, run in zip(paths, runs) for s in run["seeds"]
                  if not str(s["sft"].get("stop", "")).startswith(("band", "above band"))]
        if capped:
            raise SystemExit(f"--merge: the runs differ in their SFT caps ({', '.join(SFT_CAPS)}) and these seeds' "
                             f"SFT was stopped by a cap, so the caps shaped the result: {capped}")
    merged: dict[int, dict] = {}
    origin: dict[int, str] = {}
    for path, run in zip(paths, runs):
        for seed in run["seeds"]:
            n = seed["seed"]
            if n not in merged:
                merged[n], origin[n] = {**seed, "arms": dict(seed["arms"])}, str(path)
                continue
            start = ("steps", "stop", "test_accuracy", "val_accuracy")
            if any(merged[n]["sft"].get(k) != seed["sft"].get(k) for k in start):
                here, there = merged[n]["sft"], seed["sft"]
                what = ", ".join(f"{k}: {here.get(k)} vs {there.get(k)}" for k in start)
                raise SystemExit(f"--merge: seed {n} has a different SFT result in {path} than in {origin[n]} "
                                 f"({what}); arms can only be combined from the same start")
            twice = sorted(set(merged[n]["arms"]) & set(seed["arms"]))
            if twice:
                raise SystemExit(f"--merge: seed {n} has arm(s) {', '.join(twice)} in both {origin[n]} and {path}; "
                                 "merge each arm once")
            merged[n]["arms"].update(seed["arms"])
            merged[n]["seconds"] = merged[n].get("seconds", 0.0) + seed.get("seconds", 0.0)
    arms = tuple(a for a in ARMS if any(a in s["arms"] for s in merged.values()))
    config = {**config, "arms": list(arms)}
    seeds = [merged[n] for n in sorted(merged)]
    for s in seeds:
        s["arms"] = {a: s["arms"][a] for a in arms if a in s["arms"]}
    cfg = BenchConfig(**{**config, "arms": arms})
    results = [SeedResult(**s) for s in seeds]
    if caps_differ:
        config = {**config, **{k: None for k in SFT_CAPS},
                  "sft_caps_per_seed": {str(s["seed"]): {k: c[k] for k in SFT_CAPS}
                                        for run, c in zip(runs, configs) for s in run["seeds"]}}
    return {"config": config, "seeds": seeds, "summary": summarize(results, cfg),
            "run": {"merged_from": [{"path": str(p), **run.get("run", {})} for p, run in zip(paths, runs)],
                    "seconds": max(run.get("run", {}).get("seconds", 0.0) for run in runs)}}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.learning", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--minutes-per-seed", type=float,
                    help="fit SFT and the arms into this many minutes per seed (default: the reported setting, "
                         "~40 min per seed with three arms)")
    ap.add_argument("--setting", choices=sorted(SETTINGS), default="a",
                    help="a: the reported setting (BenchConfig's defaults); hard: where single answers rarely hit; "
                         "hard-v1: its first version (see SETTINGS); other flags override its fields")
    ap.add_argument("--quick", action="store_true", help="~5 minute smoke run (small budgets, 200 test screens)")
    ap.add_argument("--arms", nargs="+", choices=["aepo", "grpo", "aepo_no_collinear"])
    ap.add_argument("--rl-steps", type=int, help="override the RL updates per arm")
    ap.add_argument("--sft-minutes", type=float, help="override the SFT time cap")
    ap.add_argument("--sft-max-steps", type=int, help="SFT step cap (0: none); with a generous --sft-minutes the "
                    "SFT stop no longer depends on the machine's load")
    ap.add_argument("--rl-lr", type=float)
    ap.add_argument("--rl-warmup", type=int, help="RL learning-rate warm-up steps")
    ap.add_argument("--mode", choices=["share", "differ"], help="distractors share colour or shape, or differ in both")
    ap.add_argument("--distractors", type=int, help="shapes besides the target on each screen")
    ap.add_argument("--sft-lr", type=float)
    ap.add_argument("--sft-batch", type=int)
    ap.add_argument("--sft-warmup", type=int, help="SFT learning-rate warm-up steps")
    ap.add_argument("--sft-multi", type=float, help="share of SFT answers listing distractors after the target")
    ap.add_argument("--sft-multi-points", type=int, help="points in such an answer at most (default 2)")
    ap.add_argument("--grid", type=int, choices=[2, 4, 8], help="cells per side (default 2)")
    ap.add_argument("--sft-consecutive", type=int, help="consecutive in-band validation checks to stop SFT")
    ap.add_argument("--sft-eval-every", type=int)
    ap.add_argument("--sft-min-steps", type=int)
    ap.add_argument("--val-size", type=int)
    ap.add_argument("--test-size", type=int)
    ap.add_argument("--sft-dir", type=Path, help="where SFT checkpoints are saved and reused from (default "
                    "<out>/sft): one model folder per seed and settings, loadable as model.id; a run with the "
                    "same seed and SFT settings starts from it instead of training again")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 leaves the other core free)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--name", default="learning", help="basename of the JSON / PNG files")
    ap.add_argument("--trl", action="store_true", help="compare the Learner's steps with TRL GRPOTrainer's")
    ap.add_argument("--trl-runs", type=int, default=3, help="--trl: runs per side (medians are reported)")
    ap.add_argument("--trl-settings", nargs="+", choices=["224", "1280x720"], default=["224", "1280x720"])
    ap.add_argument("--trl-sides", nargs="+", choices=["ours", "ours_unshared", "trl", "trl_no_gc"],
                    default=["ours", "ours_unshared", "trl", "trl_no_gc"])
    ap.add_argument("--merge", type=Path, nargs="+", metavar="JSON",
                    help="combine the JSON of runs made side by side (one seed each, same config) into one "
                         "<out>/<name>.json and curves PNG; runs nothing")
    return ap


CONFIG_FLAGS = {"rl_steps": "rl_steps", "sft_max_minutes": "sft_minutes", "sft_max_steps": "sft_max_steps",
                "rl_lr": "rl_lr", "rl_warmup": "rl_warmup", "mode": "mode", "distractors": "distractors",
                "sft_lr": "sft_lr", "sft_batch": "sft_batch", "sft_warmup": "sft_warmup", "sft_multi": "sft_multi",
                "sft_multi_points": "sft_multi_points", "grid": "grid", "sft_consecutive": "sft_consecutive",
                "sft_eval_every": "sft_eval_every", "sft_min_steps": "sft_min_steps", "val_size": "val_size",
                "test_size": "test_size"}
"""BenchConfig field: the command-line flag (its argparse name) that overrides it."""


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s",
                        handlers=[logging.StreamHandler(sys.stderr)])
    for noisy in ("httpx", "transformers", "peft"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    import torch

    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.merge:
        write_merged(args)
    elif args.trl:
        from bench.learning.trl_compare import compare, markdown_table as trl_table

        path = args.out / "trl_compare.json"
        result = compare(path, threads=args.threads, runs=args.trl_runs, settings=tuple(args.trl_settings),
                         sides=tuple(args.trl_sides))
        print(trl_table(result))
        print(f"wrote {path} and {path.with_suffix('.md')}")
    else:
        run_seeds(args, config_from(args), " ".join(argv if argv is not None else sys.argv[1:]))
    return 0


def write_merged(args: argparse.Namespace) -> None:
    """--merge: one JSON, curves PNG and table of the runs named."""
    from bench.learning.plots import plot_curves

    data = merge_runs(args.merge)
    json_path, png_path = args.out / f"{args.name}.json", args.out / f"{args.name}_curves.png"
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    plot_curves(data, png_path)
    (args.out / f"{args.name}.md").write_text(markdown_table(data))
    print_table(data)
    print(f"\nwrote {json_path}, {png_path} and {args.out / f'{args.name}.md'}")


def config_from(args: argparse.Namespace):
    """The setting's BenchConfig within the time budget, with the fields the flags set (``CONFIG_FLAGS``)."""
    cfg = budget_config(args.minutes_per_seed, args.quick, args.arms, args.setting)
    overrides = {field: getattr(args, flag) for field, flag in CONFIG_FLAGS.items() if getattr(args, flag) is not None}
    cfg = dataclasses.replace(cfg, **overrides)
    if overrides.get("rl_steps"):
        cfg = dataclasses.replace(cfg, rl_eval_every=max(1, cfg.rl_steps // 6))
    return cfg


def run_seeds(args: argparse.Namespace, cfg, command: str) -> None:
    """Every seed of ``args.seeds`` in turn; the JSON, PNG and table rewritten after each (a crash keeps what ran)."""
    import torch

    from bench.learning.plots import plot_curves
    from bench.learning.run import as_json, run_seed, sft_folder

    results = []
    t0 = time.perf_counter()
    json_path, png_path = args.out / f"{args.name}.json", args.out / f"{args.name}_curves.png"
    with tempfile.TemporaryDirectory(prefix="handeye-learning-") as work:
        for seed in args.seeds:
            results.append(run_seed(seed, cfg, Path(work), sft_folder(args.sft_dir or args.out / "sft", seed, cfg)))
            data = as_json(results, cfg)
            data["run"] = {"command": f"python -m bench.learning {command}",
                           "quick": args.quick, "minutes_per_seed": args.minutes_per_seed, "threads": args.threads,
                           "seconds": time.perf_counter() - t0, "torch": torch.__version__,
                           "python": platform.python_version(), "machine": platform.machine(),
                           "cpus": os.cpu_count(), "finished_seeds": len(results), "planned_seeds": args.seeds}
            json_path.write_text(json.dumps(data, indent=2) + "\n")
            plot_curves(data, png_path)
            (args.out / f"{args.name}.md").write_text(markdown_table(data))
    print_table(data)
    print(f"\nwrote {json_path} and {png_path}")


if __name__ == "__main__":
    sys.exit(main())

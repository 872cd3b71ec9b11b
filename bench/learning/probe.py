"""How far does SFT get on a setting's screens? The SFT stage alone, watched: its validation top-1 every few steps,
beside the loss of a model that has learned the answer's format and nothing of the image.

The learning benchmark needs an SFT start inside a band (``bench.learning``); on a setting where SFT never leaves
chance there is no such start, and this probe is how one finds out cheaply which lever moves it: another start
(``--init``, a saved SFT checkpoint of another setting: a curriculum), another model size (``--size``), or easier
screens (``--mode``, ``--grid``, ``--distractors``). It never stops early: the band plays no part.

The floor. With single-point answers on a ``grid`` x ``grid`` grid, the target's cell is uniform over ``grid**2``
cells; a model that writes the format perfectly and guesses the cell without looking pays ln(grid**2) nats per
answer, i.e. ``ln(grid**2) / T`` per token with T the mean answer length in tokens (end-of-turn included), which is
how the SFT loss is averaged. A loss that settles on that floor has learned the format and the cells' frequencies,
and nothing about where the target is. (With multi-point answers the floor has no such closed form: not printed.)

Writes ``<out>/<name>.json`` and prints a table. Run from the repository root:
    .venv/bin/python -m bench.learning.probe --setting hard --steps 300
    .venv/bin/python -m bench.learning.probe --setting hard --mode differ --sft-multi 0 --steps 300 \\
        --init bench/results/learning/sft/seed0-59ad160c      # setting a's seed-0 SFT checkpoint as the start
    .venv/bin/python -m bench.learning.probe --setting hard --mode differ --sft-multi 0 --size 4m --steps 300
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

log = logging.getLogger(__name__)


def format_floor(tokenizer: Any, grid: int, answers: list[str], end_id: int | None = None) -> float:
    """``ln(grid**2) / mean tokens per answer`` (end-of-turn counted, as the SFT loss counts it): the per-token loss
    of a model that writes single-point answers perfectly and picks the cell uniformly at random."""
    if grid < 1 or not answers:
        raise ValueError(f"format_floor needs grid >= 1 and at least one answer (got grid={grid}, "
                         f"{len(answers)} answers)")
    extra = 1 if end_id is not None else 0
    tokens = [len(tokenizer.encode(a, add_special_tokens=False)) + extra for a in answers]
    return math.log(grid * grid) / (sum(tokens) / len(tokens))


def probe(cfg: Any, seed: int, init: str, size: str, work: Path) -> dict[str, Any]:
    """Run the SFT stage of ``cfg`` (no band stop) from ``init`` (``"random"`` or a model folder) and return its
    curve with the floor."""
    import numpy as np
    import torch

    from bench.learning.model import build_model, count_parameters
    from bench.learning.run import held_out, sft_stage
    from bench.learning.screens import PRESET, make_screen, target_text
    from policy.backends.hf import TransformersBackend
    from train.sft import end_of_turn_id

    torch.manual_seed(seed)
    if init == "random":
        model_dir = build_model(work / f"model-seed{seed}-{size}", seed, size)
    else:
        model_dir = Path(init)
        if not (model_dir / "config.json").is_file():
            raise SystemExit(f"--init {init}: not a model folder (no config.json); give 'random' or a folder "
                             f"bench.learning saved under its --sft-dir")
    backend = TransformersBackend(model_dir, preset=PRESET, dtype="float32")
    val, _ = held_out(dataclasses.replace(cfg, test_size=1))
    floor = None
    if cfg.sft_multi == 0:
        rng = np.random.default_rng([seed, 3])
        answers = [target_text(make_screen(rng, cfg.distractors, cfg.background, cfg.grid, cfg.mode))
                   for _ in range(500)]
        floor = format_floor(backend.tokenizer, cfg.grid, answers, end_of_turn_id(backend.tokenizer))
    t0 = time.perf_counter()
    info = sft_stage(seed, cfg, backend, val)
    return {"seed": seed, "init": init, "size": size, "parameters": count_parameters(backend.model),
            "format_floor": floor, "steps": info["steps"], "curve": info["curve"],
            "seconds": time.perf_counter() - t0}


def table(result: dict[str, Any]) -> str:
    floor = result["format_floor"]
    rows = [f"| step | loss | validation top-1 | loss - floor ({'n/a' if floor is None else f'{floor:.3f}'}) |",
            "|---|---|---|---|"]
    for p in result["curve"]:
        gap = "" if floor is None else f"{p['loss'] - floor:+.3f}"
        rows.append(f"| {p['step']} | {p['loss']:.3f} | {p['val_accuracy']:.3f} | {gap} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    from bench.learning.__main__ import SETTINGS

    ap = argparse.ArgumentParser(prog="python -m bench.learning.probe", description=__doc__.split("\n\n")[0])
    ap.add_argument("--setting", choices=sorted(SETTINGS), default="hard")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--init", default="random", help="'random' or a model folder to start SFT from")
    ap.add_argument("--size", default="1m", help="the random model's size: 1m (the benchmark's) or 4m")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--sft-lr", type=float)
    ap.add_argument("--mode", choices=["share", "differ"])
    ap.add_argument("--grid", type=int, choices=[2, 4, 8])
    ap.add_argument("--distractors", type=int)
    ap.add_argument("--sft-multi", type=float)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("bench/results/learning"))
    ap.add_argument("--name", default="probe")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.eval_every < 1:
        ap.error(f"--steps and --eval-every must be >= 1 (got {args.steps}, {args.eval_every})")
    if args.init != "random" and args.size != "1m":
        ap.error("--size sets the size of a random start; a folder given to --init has its own")

    import torch

    from bench.learning.run import BenchConfig

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    torch.set_num_threads(args.threads)
    fields = dict(SETTINGS[args.setting])
    fields.pop("arms", None)
    for key in ("sft_lr", "mode", "grid", "distractors", "sft_multi"):
        if getattr(args, key) is not None:
            fields[key] = getattr(args, key)
    try:
        cfg = BenchConfig(**fields)
    except (TypeError, ValueError) as exc:
        ap.error(str(exc))
    # no band stop: a band no accuracy reaches, the step count as the only cap
    cfg = dataclasses.replace(cfg, sft_band=(2.0, 3.0), sft_max_steps=args.steps, sft_max_minutes=24 * 60.0,
                              sft_eval_every=args.eval_every, sft_min_steps=0)
    with tempfile.TemporaryDirectory(prefix="probe-") as tmp:
        try:
            result = probe(cfg, args.seed, args.init, args.size, Path(tmp))
        except ValueError as exc:
            ap.error(str(exc))
    result["config"] = dataclasses.asdict(cfg)
    result["command"] = "python -m bench.learning.probe " + " ".join(sys.argv[1:] if argv is None else argv)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{args.name}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    print(f"\n{result['parameters']:,} parameters, {result['steps']} steps in {result['seconds']:.0f} s -> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

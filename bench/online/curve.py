"""Learning curves of online runs: success rate over wall time, step-level against episode-level groups.

The starting point is a supervised (SFT) checkpoint of the learning benchmark's ~1M-parameter Qwen2.5-VL on its
shape screens (bench/learning): ``--sft PATH`` takes a model folder, otherwise one is trained here with that
benchmark's own model, screens and recipe (full-weight SFT at lr 1e-3, stopped once greedy top-1 accuracy on 100
validation screens is in [30%, 60%] or at ``--sft-minutes``). Each online run then starts from it with a fresh LoRA
adapter: ``--devices`` browser actors on ``bench/shapes`` (bench/online/shapes.py: the same screens in Chromium),
8 answers per screen (step level) or 8 episodes per task seed (episode level), 4 groups per update, AEPO, for
``--minutes`` of wall time each, with torch on one thread.

Reported per run: episodes, updates, the success rate of the executed actions per tenth of the wall time with
Wilson 95% intervals, and the change from the first quarter of the episodes to the last quarter with a Newcombe
95% interval. Writes ``bench/results/online_curve.json`` and ``bench/results/online_curve.png``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import shutil
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

BAND = (0.30, 0.60)


def sft_model(work: Path, minutes: float, seed: int = 0) -> tuple[Path, dict[str, Any]]:
    """A model folder SFT'd with the learning benchmark's recipe (see the module docstring)."""
    import numpy as np
    import torch

    from bench.learning import rewards
    from bench.learning.model import build_model
    from bench.learning.run import VAL_SEED
    from bench.learning.screens import PRESET, make_screen, screens, target_text, to_prompt
    from policy.backends.hf import TransformersBackend
    from train.sft import SFTExample, SupervisedLearner, greedy_accuracy

    torch.manual_seed(seed)
    base = build_model(work / "base-model", seed)
    backend = TransformersBackend(base, preset=PRESET, dtype="float32")
    learner = SupervisedLearner(backend, finetune="full", lr=1e-3)
    val = [to_prompt(s) for s in screens(VAL_SEED, 100, 3, "gradient")]
    rng = np.random.default_rng([seed, 1])
    t0, step, acc, curve = time.perf_counter(), 0, 0.0, []
    while time.perf_counter() - t0 < minutes * 60:
        batch = [make_screen(rng, 3, "gradient") for _ in range(16)]
        learner.step([SFTExample(to_prompt(s).messages, s.image, target_text(s)) for s in batch])
        step += 1
        if step % 25 == 0:
            acc = greedy_accuracy(backend, val, rewards.top1_hit, batch_size=50, max_new_tokens=40).accuracy
            curve.append({"step": step, "val_accuracy": acc, "seconds": time.perf_counter() - t0})
            log.info("SFT step %d: validation top-1 %.2f", step, acc)
            if acc >= BAND[0]:
                break
    out = work / "sft-model"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for f in base.iterdir():
        if f.name not in ("model.safetensors", "config.json"):
            shutil.copy2(f, out / f.name)
    backend.model.save_pretrained(str(out))
    return out, {"steps": step, "val_accuracy": acc, "seconds": time.perf_counter() - t0, "curve": curve,
                 "in_band": BAND[0] <= acc <= BAND[1]}


def online_run(model: Path, level: str, minutes: float, devices: int, work: Path) -> dict[str, Any]:
    import bench.online.shapes  # noqa: F401 - registers bench/shapes
    from agent.config import load_train_config
    from agent.online import OnlineConfig, OnlineSession, curve_points

    run_dir = work / f"online-{level}"
    shutil.rmtree(run_dir, ignore_errors=True)
    cfg = load_train_config(None, [
        f'model.path="{model}"', 'model.format="infigui-g1"', "model.min_pixels=3136", "model.max_pixels=50176",
        "data.think=false", 'model.lora_targets=["q_proj", "k_proj", "v_proj", "o_proj", "lm_head"]',
        "rl.lr=5e-4", "rl.group_size=8", "rl.batch_prompts=4", "rl.max_new_tokens=40", "train.steps=100000",
        "checkpoint.every=0", "log.tensorboard=false", "eval.every=0", "data.seeds=100000",
        f'train.run_dir="{run_dir}"'])
    session = OnlineSession(cfg, OnlineConfig(env="bench/shapes", devices=devices, group_level=level,
                                              max_wall_s=minutes * 60, torch_threads=1, progress_every_s=60,
                                              report=False))
    result = asyncio.run(session.run())
    rows = [json.loads(line) for line in (run_dir / "online.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["outcome"] not in ("aborted", "interrupted")]
    q = max(1, len(rows) // 4)
    first, last = rows[:q], rows[-q:]
    s1, s2 = sum(r["outcome"] == "success" for r in first), sum(r["outcome"] == "success" for r in last)
    return {"level": level, "episodes": len(rows), "updates": result.updates, "wall_s": result.wall_s,
            "steps": result.steps, "success_rate": result.success_rate, "stale_dropped": result.stale_dropped,
            "samples": result.samples, "curve": curve_points(rows, bins=10),
            "first_quarter": {"episodes": len(first), "successes": s1, "rate": s1 / len(first)},
            "last_quarter": {"episodes": len(last), "successes": s2, "rate": s2 / len(last)},
            "change": newcombe(s1, len(first), s2, len(last)), "run_dir": str(run_dir)}


def newcombe(s1: int, n1: int, s2: int, n2: int) -> dict[str, float]:
    """p2 - p1 with Newcombe's hybrid-score 95% interval (from the two Wilson intervals)."""
    from agent.eval import wilson_interval

    p1, p2 = s1 / n1, s2 / n2
    l1, u1 = wilson_interval(s1, n1)
    l2, u2 = wilson_interval(s2, n2)
    d = p2 - p1
    return {"diff": d, "low": d - math.sqrt((p2 - l2) ** 2 + (u1 - p1) ** 2),
            "high": d + math.sqrt((u2 - p2) ** 2 + (p1 - l1) ** 2)}


def plot(runs: list[dict[str, Any]], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in runs:
        xs = [p["t_mid"] / 60 for p in r["curve"]]
        ax.plot(xs, [p["success_rate"] for p in r["curve"]], marker="o",
                label=f"{r['level']}-level groups ({r['episodes']} episodes, {r['updates']} updates)")
        ax.fill_between(xs, [p["ci_low"] for p in r["curve"]], [p["ci_high"] for p in r["curve"]], alpha=0.15)
    ax.set_xlabel("wall time (min)")
    ax.set_ylabel("success rate (executed action)")
    ax.set_ylim(0, 1)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("online AEPO from SFT, bench/shapes, 2 browser actors, CPU")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def table(runs: list[dict[str, Any]]) -> str:
    lines = ["| groups | episodes | updates | first quarter | last quarter | change [95% CI] |",
             "|---|---|---|---|---|---|"]
    for r in runs:
        f, last, c = r["first_quarter"], r["last_quarter"], r["change"]
        lines.append(f"| {r['level']} | {r['episodes']} | {r['updates']} | {f['rate']:.0%} ({f['successes']}/"
                     f"{f['episodes']}) | {last['rate']:.0%} ({last['successes']}/{last['episodes']}) | "
                     f"{c['diff']:+.0%} [{c['low']:+.0%}, {c['high']:+.0%}] |")
    return "\n".join(lines)


def main(args: Any, work: Path) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    if args.sft is not None:
        model, sft = args.sft, {"given": str(args.sft)}
    else:
        model, sft = sft_model(work, args.sft_minutes)
    runs = [online_run(model, level, args.minutes, args.devices, work) for level in args.levels]
    plot(runs, args.out.with_suffix(".png"))
    return {"sft": sft, "model": str(model), "runs": runs, "table": table(runs), "minutes_per_run": args.minutes}

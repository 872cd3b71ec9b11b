"""Does online RL learn as much as offline RL from the same start? ``python -m bench.online curve``.

Per seed:

1. the learning benchmark's SFT checkpoint for its setting (``--setting a``: bench/learning's reported setting;
   ``hard``), reused from ``--sft-dir`` (default bench/results/learning/sft, where ``python -m bench.learning``
   saves them) or trained there with that benchmark's recipe;
2. **offline arm**: bench/learning's AEPO arm from it, ``--updates`` updates of 8 screens x 8 answers
   (``bench.learning.run.rl_arm``: full fine-tuning, lr 1e-4 with 2 warm-up updates, T = 1, 128 new tokens);
3. **online arm**: an ``OnlineSession`` from the same checkpoint with the same RL settings and the same number of
   updates, on the same kind of screens shown in Chromium (``bench/shapes-a`` / ``bench/shapes-hard``) to
   ``--devices`` browser actors, step-level groups (8 answers to one screen, each scored by the page's verifier
   with AEPO's reward), full fine-tuning published as versioned full weights and swapped into the actors' model
   between steps (``--finetune lora`` instead: a fresh adapter);
4. both arms' models scored greedily on the learning benchmark's 1,000 held-out screens; the paired bootstrap
   (10,000 resamples) gives each arm's lift over SFT with its 95% interval.

The arms take the same number of updates and of trained samples (64 per update). They differ in what reaches an
update: the offline arm trains on every group, the online learner leaves out groups whose 8 rewards are equal
(they carry no gradient without a KL term, docs/online.md), so the actors sample more answers than it trains on;
both counts are reported. Also reported for the online arm: the success rate of the executed action per tenth of
the wall time (Wilson 95%), samples dropped as stale, the staleness of trained samples (mean and max over updates)
and the mean truncated importance weight.

Writes ``--out`` (JSON) and a PNG beside it; prints a table.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

ENVS = {"a": "bench/shapes-a", "hard": "bench/shapes-hard", "hard-v1": "bench/shapes-hard"}
"""The learning benchmark's setting -> the environment showing its screens in a browser."""


def bench_config(setting: str, updates: int, quick: bool) -> Any:
    """The learning benchmark's config for ``setting`` with ``updates`` RL updates (``quick``: its smoke budget)."""
    from bench.learning.__main__ import budget_config

    cfg = budget_config(None, quick, ["aepo"], setting)
    if not quick:  # the band, not the machine's load, decides where SFT stops (a step cap as the backstop)
        cfg = replace(cfg, sft_max_minutes=max(cfg.sft_max_minutes, 30.0), sft_max_steps=cfg.sft_max_steps or 400)
    return replace(cfg, rl_steps=updates, rl_eval_every=max(1, updates // 6))


def offline_arm(model: Path, seed: int, cfg: Any, sft_correct: np.ndarray, algo: str = "aepo") -> dict[str, Any]:
    from bench.learning.run import held_out, rl_arm
    from bench.learning.screens import PRESET
    from policy.backends.hf import TransformersBackend

    val, test = held_out(cfg)
    backend = TransformersBackend(model, preset=PRESET, dtype="float32")
    return {**rl_arm(algo, seed, cfg, backend, sft_correct, val, test), "updates": cfg.rl_steps}


ONLINE_REWARD = {"aepo": "aepo", "grpo": "guir1"}
"""The online arm's step reward per algorithm, as the offline arm of that name scores: AEPO's multi-answer reward,
or GUI-R1's single-answer weighting (0.2 x one point + 0.8 x the first point right; ``bench.learning.rewards``)."""

def _lora_default() -> dict[str, Any]:
    from train.config import TrainModelConfig

    m = TrainModelConfig()
    return {"rank": m.lora_rank, "alpha": m.lora_alpha, "targets": list(m.lora_targets)}


LORA_DEFAULT = _lora_default()
"""The online arm's adapter with ``--finetune lora`` and no ``--lora-*`` flags: the trainer's (``TrainModelConfig``)."""

RUN_KEYS = ("setting", "config", "devices", "finetune", "algo", "lora")
"""What a run's result must share with another to be merged with it, or continued by a later run."""


def online_config(model: Path, seed: int, cfg: Any, run_dir: Path, finetune: str, algo: str = "aepo",
                  lora_spec: dict[str, Any] | None = None) -> Any:
    from agent.config import load_train_config

    spec = {**LORA_DEFAULT, **(lora_spec or {})}
    lora = [f"model.lora_rank={int(spec['rank'])}", f"model.lora_alpha={int(spec['alpha'])}",
            f"model.lora_targets={json.dumps(list(spec['targets']))}"] if finetune == "lora" else []
    return load_train_config(None, [
        f'model.id="{model}"', 'model.format="infigui-g1"', "model.min_pixels=3136", "model.max_pixels=50176",
        'model.dtype="float32"', f'model.finetune="{finetune}"', *lora, "data.think=false",
        f'train.algo="{algo}"', f'data.reward="{ONLINE_REWARD[algo]}"', f"train.seed={seed}",
        f"train.steps={cfg.rl_steps}", f'train.run_dir="{run_dir}"',
        f"rl.lr={cfg.rl_lr}", f"rl.warmup_steps={cfg.rl_warmup}", f"rl.group_size={cfg.group_size}",
        f"rl.batch_prompts={cfg.prompts_per_step}", f"rl.max_new_tokens={cfg.max_new_tokens}",
        "filter.drop_all_correct=false", "checkpoint.every=0", "log.tensorboard=false", "eval.every=0",
        "data.seeds=100000"])


def online_arm(model: Path, seed: int, cfg: Any, sft_correct: np.ndarray, *, env: str, devices: int, work: Path,
               finetune: str, algo: str = "aepo", lora_spec: dict[str, Any] | None = None) -> dict[str, Any]:
    import bench.online.shapes  # noqa: F401 - registers bench/shapes*
    from agent.online import OnlineConfig, OnlineSession, curve_points
    from bench.learning.run import evaluate, held_out, paired_bootstrap
    from bench.learning.screens import PRESET
    from policy.backends.hf import TransformersBackend
    from train.adapters import AdapterStore, load_verified

    run_dir = work / f"online-seed{seed}"
    shutil.rmtree(run_dir, ignore_errors=True)
    session = OnlineSession(online_config(model, seed, cfg, run_dir, finetune, algo, lora_spec),
                            OnlineConfig(env=env, actors=devices, group_level="step", torch_threads=1,
                                         progress_every_s=60, report=False))
    t0 = time.perf_counter()
    result = asyncio.run(session.run())
    wall = time.perf_counter() - t0
    if result.updates < cfg.rl_steps:
        raise RuntimeError(f"the online session stopped after {result.updates} of {cfg.rl_steps} updates "
                           f"({result.stopped_by}); see {run_dir}")
    store = AdapterStore(run_dir / "adapters")
    ref = store.latest()  # the version published after the last update: what the actors would act with next
    if ref is None or ref.step != result.updates:
        raise RuntimeError(f"{run_dir}/adapters: expected the version of update {result.updates}, found "
                           f"{ref.step if ref else 'none'}")
    backend = TransformersBackend(model, preset=PRESET, dtype="float32")
    load_verified(backend, ref, root=store.root)
    val, test = held_out(cfg)
    acc, correct, aps = evaluate(backend, test, cfg)
    mean, lo, hi = paired_bootstrap(correct, sft_correct, cfg.bootstrap, seed)
    rows = [json.loads(line) for line in (run_dir / "online.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["outcome"] not in ("aborted", "interrupted")]
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    metrics = [m for m in metrics if "train/samples" in m]

    def series(key: str) -> list[float]:
        return [float(m[key]) for m in metrics if key in m]

    lag_mean, lag_max, is_w = series("train/staleness_mean"), series("train/staleness_max"), series(
        "train/is_weight_mean")
    return {"finetune": finetune, "env": env, "devices": devices, "updates": result.updates,
            "samples": int(sum(series("train/samples"))), "samples_generated": result.steps * cfg.group_size,
            "groups_no_signal": result.no_signal,
            "episodes": len(rows), "success_rate": result.success_rate, "stale_dropped": result.stale_dropped,
            "staleness_mean": float(np.mean(lag_mean)) if lag_mean else math.nan,
            "staleness_max": max(lag_max) if lag_max else math.nan,
            "staleness_hist": {str(int(k)): int(v) for k, v in zip(*np.unique(lag_max, return_counts=True))},
            "is_weight_mean": float(np.mean(is_w)) if is_w else math.nan,
            "test_accuracy": acc, "test_answers_per_sample": aps, "delta_vs_sft": mean, "delta_ci95": [lo, hi],
            "curve": curve_points(rows, bins=10), "wall_s": wall, "run_dir": str(run_dir)}


def run_seed(seed: int, args: Any, cfg: Any, work: Path, done: dict[str, Any] | None = None) -> dict[str, Any]:
    """The seed's SFT start and arms; ``done``: this seed's entry of an earlier run with the same config, whose arms
    are kept (``--arms offline`` now, ``--arms online`` later, one result)."""
    from bench.learning.run import sft_checkpoint, sft_folder

    model, sft, sft_correct, _ = sft_checkpoint(seed, cfg, work, sft_folder(args.sft_dir, seed, cfg))
    out: dict[str, Any] = {"seed": seed, "sft_model": str(model),
                           "sft": {k: sft[k] for k in ("steps", "stop", "val_accuracy", "test_accuracy")}}
    if done and done.get("sft") == out["sft"]:
        out.update({arm: done[arm] for arm in ("offline", "online") if arm in done and arm not in args.arms})
    if "offline" in args.arms:
        out["offline"] = offline_arm(model, seed, cfg, sft_correct, args.algo)
    if "online" in args.arms:
        out["online"] = online_arm(model, seed, cfg, sft_correct, env=ENVS[args.setting], devices=args.devices,
                                   work=work, finetune=args.finetune, algo=args.algo,
                                   lora_spec=getattr(args, "lora", None))
    if "offline" in out and "online" in out:
        off, on = out["offline"]["delta_vs_sft"], out["online"]["delta_vs_sft"]
        out["online_over_offline"] = on / off if off > 0 else math.nan
    return out


def table(seeds: list[dict[str, Any]]) -> str:
    lines = ["| seed | SFT top-1 | arm | updates | samples trained (drawn) | top-1 | lift over SFT [95% CI] | "
             "stale dropped | staleness mean (max) | IS weight | wall |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in seeds:
        for arm in ("offline", "online"):
            a = s.get(arm)
            if a is None:
                continue
            lo, hi = a["delta_ci95"]
            bold = "**" if lo > 0 else ""
            drawn = f" ({a['samples_generated']:,})" if arm == "online" else ""
            extra = (f"{a['stale_dropped']} | {a['staleness_mean']:.2f} ({a['staleness_max']:.0f}) | "
                     f"{a['is_weight_mean']:.3f} | {a['wall_s'] / 60:.0f} min" if arm == "online"
                     else f" | | | {a['seconds'] / 60:.0f} min")
            lines.append(f"| {s['seed']} | {s['sft']['test_accuracy']:.3f} | {arm} | {a['updates']} | "
                         f"{a['samples']:,}{drawn} | {a['test_accuracy']:.3f} | {bold}{a['delta_vs_sft']:+.3f} "
                         f"[{lo:+.3f}, {hi:+.3f}]{bold} | {extra} |")
        if "online_over_offline" in s:
            ratio = s["online_over_offline"]
            shown = "– (no offline lift)" if math.isnan(ratio) else f"{ratio:.2f}x"
            lines.append(f"| {s['seed']} | | online / offline lift | | | | {shown} | | | | |")
    return "\n".join(lines)


def plot(seeds: list[dict[str, Any]], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for s in seeds:
        on = s.get("online")
        if not on:
            continue
        xs = [p["t_mid"] / 60 for p in on["curve"]]
        ax.plot(xs, [p["success_rate"] for p in on["curve"]], marker="o", label=f"seed {s['seed']}")
        ax.fill_between(xs, [p["ci_low"] for p in on["curve"]], [p["ci_high"] for p in on["curve"]], alpha=0.15)
    ax.set_xlabel("wall time (min)")
    ax.set_ylabel("success rate of the executed action")
    ax.set_ylim(0, 1)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("online AEPO from the learning benchmark's SFT checkpoint, CPU")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def merge(paths: list[Path]) -> dict[str, Any]:
    """One result from runs made side by side (one seed each): their settings must be equal; a seed in two runs
    is refused."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    for path, run in zip(paths[1:], runs[1:]):
        diff = [k for k in RUN_KEYS if run.get(k) != runs[0].get(k)]
        if diff:
            raise SystemExit(f"--merge: {path} differs from {paths[0]} in {', '.join(diff)}")
    seeds = [s for run in runs for s in run["seeds"]]
    numbers = [s["seed"] for s in seeds]
    if len(set(numbers)) != len(numbers):
        raise SystemExit(f"--merge: a seed appears twice: {sorted(numbers)}")
    seeds.sort(key=lambda s: s["seed"])
    return {**{k: runs[0][k] for k in RUN_KEYS if k in runs[0]}, "seeds": seeds, "summary": summary(seeds),
            "table": table(seeds), "merged_from": [str(p) for p in paths]}


def summary(seeds: list[dict[str, Any]]) -> dict[str, Any]:
    """The targets: online lift's interval above 0 on how many seeds, and the online / offline lift ratio of the
    mean lifts (a per-seed ratio is unstable when an offline lift is near 0)."""
    out: dict[str, Any] = {"seeds": len(seeds)}
    for arm in ("offline", "online"):
        ran = [s[arm] for s in seeds if arm in s]
        if ran:
            out[arm] = {"lift_mean": float(np.mean([a["delta_vs_sft"] for a in ran])),
                        "ci_above_0": sum(a["delta_ci95"][0] > 0 for a in ran),
                        "ci_below_0": sum(a["delta_ci95"][1] < 0 for a in ran), "runs": len(ran)}
    if "offline" in out and "online" in out and out["offline"]["lift_mean"] > 0:
        out["online_over_offline"] = out["online"]["lift_mean"] / out["offline"]["lift_mean"]
    return out


def main(args: Any, work: Path) -> dict[str, Any]:
    """Every seed in turn; ``args.out`` is rewritten after each, so a stopped run keeps what finished."""
    work.mkdir(parents=True, exist_ok=True)
    cfg = bench_config(args.setting, args.updates, args.quick)
    if getattr(args, "lr", None):
        cfg = replace(cfg, rl_lr=args.lr)
    data: dict[str, Any] = {"setting": args.setting, "config": {k: getattr(cfg, k) for k in (
        "rl_steps", "rl_lr", "rl_warmup", "prompts_per_step", "group_size", "max_new_tokens", "test_size",
        "grid", "distractors", "mode", "sft_max_steps", "sft_max_minutes")}, "devices": args.devices,
        "finetune": args.finetune, "algo": args.algo, "seeds": []}
    if getattr(args, "lora", None):
        data["lora"] = args.lora
    earlier: dict[int, dict[str, Any]] = {}
    if args.out.exists():  # arms of an earlier run with the same config are kept, other seeds carried over
        try:
            old = json.loads(args.out.read_text())
        except ValueError:
            old = {}
        if {k: old.get(k) for k in RUN_KEYS} == {k: json.loads(json.dumps(data.get(k))) for k in RUN_KEYS}:
            earlier = {s["seed"]: s for s in old.get("seeds", [])}
    for seed in sorted(set(args.seeds) | set(earlier)):
        if seed not in args.seeds:
            data["seeds"].append(earlier[seed])
            continue
        data["seeds"].append(run_seed(seed, args, cfg, work, earlier.get(seed)))
        data["table"], data["summary"] = table(data["seeds"]), summary(data["seeds"])
        args.out.write_text(json.dumps(data, indent=1, default=str) + "\n")
        plot(data["seeds"], args.out.with_suffix(".png"))
    return data

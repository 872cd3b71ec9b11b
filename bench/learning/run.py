"""One seed of the learning benchmark: SFT until held-out accuracy sits in a band, then each RL arm from that
checkpoint with the same sample budget, each scored greedily on the same held-out screens."""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.learning import rewards
from bench.learning.model import build_model, count_parameters
from bench.learning.screens import PRESET, make_screen, screens, target_text, to_prompt
from policy.backends.hf import TransformersBackend
from train.learner import Learner, rollout_groups
from train.config import RLConfig, TrainModelConfig
from train.sft import SFTExample, SupervisedLearner, greedy_accuracy

log = logging.getLogger(__name__)

TEST_SEED = 1_000_003
VAL_SEED = 1_000_033


@dataclass(frozen=True)
class BenchConfig:
    distractors: int = 1
    """Shapes besides the target on each screen."""
    grid: int = 2
    """Cells per side; shapes sit at cell centres (2: four 112 px cells)."""
    background: str = "gradient"
    mode: str = "differ"
    """"share": a single distractor shares the target's colour or its shape; "differ": distractors differ from the
    target in both (see ``screens.make_screen``)."""
    sft_lr: float = 1e-3
    sft_batch: int = 16
    sft_max_minutes: float = 4.0
    """Wall-clock cap of the SFT stage (it stops earlier once validation accuracy is in the band). Under CPU
    contention it fires earlier in steps: give ``sft_max_steps`` and a generous time cap for a run that does not
    depend on the machine's load."""
    sft_max_steps: int = 0
    """Step cap of the SFT stage (0: none). When a cap comes first, or validation jumps above the band, SFT falls
    back to the latest in-band checkpoint if it had one."""
    sft_eval_every: int = 25
    """SFT steps between validation checks."""
    sft_band: tuple[float, float] = (0.30, 0.60)
    """Stop SFT once validation top-1 accuracy is inside this band."""
    sft_jitter: int = 0
    """Max px the SFT answer point moves from the target centre (inside the box)."""
    sft_warmup: int = 20
    """SFT steps of linear learning-rate warm-up."""
    sft_multi: float = 0.0
    """Share of SFT answers that list distractors after the target."""
    sft_multi_points: int = 2
    """Points in such an answer at most: the target, then distractors in drawing order."""
    sft_consecutive: int = 2
    """Consecutive validation checks inside the band needed to stop SFT."""
    sft_min_steps: int = 100
    """No stopping before this many SFT steps."""
    rl_lr: float = 1e-4  # 5e-4 lowered top-1 on every seed; 1e-4 x 120 updates raised it (docs/benchmarks.md)
    rl_steps: int = 120
    rl_warmup: int = 2
    """Updates per RL arm; the sample budget is rl_steps x prompts_per_step x group_size, equal for every arm."""
    prompts_per_step: int = 8
    group_size: int = 8
    rl_eval_every: int = 20
    max_new_tokens: int = 128
    """Sampling and greedy cap: one point is ~25 byte tokens, so 128 leaves room for ~5 points."""
    val_size: int = 200
    """Validation screens (SFT stopping and RL curves); a different seed from the test screens."""
    test_size: int = 1000
    """Held-out screens for the reported accuracies (the same for every seed and arm)."""
    bootstrap: int = 10_000
    arms: tuple[str, ...] = ("aepo", "grpo", "aepo_no_collinear")
    eval_batch: int = 50


@dataclass
class SeedResult:
    seed: int
    parameters: int = 0
    sft: dict[str, Any] = field(default_factory=dict)
    arms: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: float = 0.0


def paired_bootstrap(a: np.ndarray, b: np.ndarray, resamples: int, seed: int) -> tuple[float, float, float]:
    """Mean of (a - b) over paired items and its percentile 95% interval from ``resamples`` resamples of the
    items (seeded)."""
    diff = a.astype(np.float64) - b.astype(np.float64)
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    chunk = 1000
    for start in range(0, resamples, chunk):
        idx = rng.integers(0, len(diff), (min(chunk, resamples - start), len(diff)))
        means[start:start + len(idx)] = diff[idx].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(diff.mean()), float(lo), float(hi)


def evaluate(backend, prompts, cfg: BenchConfig) -> tuple[float, np.ndarray, float]:
    r = greedy_accuracy(backend, prompts, rewards.top1_hit, batch_size=cfg.eval_batch,
                        max_new_tokens=cfg.max_new_tokens)
    return r.accuracy, np.array(r.correct, dtype=bool), rewards.answers_per_sample(list(r.texts))


SFT_FIELDS = ("distractors", "grid", "background", "mode", "sft_lr", "sft_batch", "sft_max_minutes", "sft_max_steps",
              "sft_eval_every", "sft_band", "sft_jitter", "sft_warmup", "sft_multi", "sft_multi_points",
              "sft_consecutive", "sft_min_steps", "val_size", "test_size", "max_new_tokens")
"""The settings that decide an SFT checkpoint and its held-out score: a saved one is reused only when they match."""
SFT_FILE = "sft.json"


def look(cfg: BenchConfig) -> tuple[int, str, int, str]:
    """``make_screen``'s arguments after the generator: (distractors, background, grid, mode)."""
    return cfg.distractors, cfg.background, cfg.grid, cfg.mode


def held_out(cfg: BenchConfig) -> tuple[list, list]:
    """(validation, test) prompts: the same screens for every seed and arm."""
    val = [to_prompt(s, {"set": "val", "i": i}) for i, s in enumerate(screens(VAL_SEED, cfg.val_size, *look(cfg)))]
    test = [to_prompt(s, {"set": "test", "i": i})
            for i, s in enumerate(screens(TEST_SEED, cfg.test_size, *look(cfg)))]
    return val, test


def sft_stage(seed: int, cfg: BenchConfig, backend: TransformersBackend, val: list) -> dict[str, Any]:
    """Full-weight SFT until validation accuracy is in the band (see the package docstring); leaves the chosen
    checkpoint in ``backend.model`` and returns what happened (no test score yet)."""
    sft = SupervisedLearner(backend, TrainModelConfig(finetune="full"), lr=cfg.sft_lr)
    rng = np.random.default_rng([seed, 1])
    curve, t0, step, val_acc, stop, in_band = [], time.perf_counter(), 0, 0.0, "time", 0
    last_in_band = None
    lo, hi = cfg.sft_band
    while time.perf_counter() - t0 < cfg.sft_max_minutes * 60:
        if cfg.sft_max_steps and step >= cfg.sft_max_steps:
            stop = "steps"
            break
        batch = [make_screen(rng, *look(cfg)) for _ in range(cfg.sft_batch)]
        if cfg.sft_warmup:
            for g in sft.optimizer.param_groups:
                g["lr"] = cfg.sft_lr * min(1.0, (step + 1) / cfg.sft_warmup)
        m = sft.step([SFTExample(to_prompt(s).messages, s.image,
                                 target_text(s, rng, cfg.sft_jitter, cfg.sft_multi, cfg.sft_multi_points))
                      for s in batch])
        step += 1
        if step % cfg.sft_eval_every == 0:
            val_acc, _, aps = evaluate(backend, val, cfg)
            curve.append({"step": step, "examples": step * cfg.sft_batch, "loss": m["sft/loss"],
                          "val_accuracy": val_acc, "val_answers_per_sample": aps,
                          "seconds": time.perf_counter() - t0})
            log.info("seed %d SFT step %d loss %.3f val acc %.3f", seed, step, m["sft/loss"], val_acc)
            in_band = in_band + 1 if lo <= val_acc <= hi else 0
            if in_band:  # the latest in-band checkpoint: the fallback when the time cap comes first
                last_in_band = (step, val_acc, {k: v.detach().clone() for k, v in backend.model.state_dict().items()})
            if step < cfg.sft_min_steps:
                continue
            if in_band >= cfg.sft_consecutive:
                stop = "band"
                break
            if val_acc > hi:
                stop = "above band"
                break
    if stop in ("time", "steps", "above band") and last_in_band is not None:  # the latest in-band check
        step, val_acc, state = last_in_band
        backend.model.load_state_dict(state)
        stop = f"{stop}, latest in-band checkpoint"
    return {"steps": step, "examples": step * cfg.sft_batch, "stop": stop, "val_accuracy": val_acc, "curve": curve,
            "seconds": time.perf_counter() - t0}


def save_sft(folder: Path, model_dir: Path, backend: TransformersBackend, seed: int, cfg: BenchConfig,
             info: dict[str, Any], test_correct: np.ndarray) -> None:
    """The SFT checkpoint as a model folder any handeye command loads (``model.id``), with ``sft.json``: the seed,
    the settings that made it (``SFT_FIELDS``), what SFT did and the held-out answers' correctness."""
    import shutil

    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for f in model_dir.iterdir():  # tokenizer, chat template, processor: the builder's files
        if f.is_file() and f.name not in ("model.safetensors", "config.json"):
            shutil.copy2(f, tmp / f.name)
    backend.model.save_pretrained(str(tmp))
    meta = {"seed": seed, "settings": {k: _plain(getattr(cfg, k)) for k in SFT_FIELDS}, "sft": info,
            "test_correct": "".join("1" if c else "0" for c in test_correct)}
    (tmp / SFT_FILE).write_text(json.dumps(meta, indent=1) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)


def sft_folder(root: Path, seed: int, cfg: BenchConfig) -> Path:
    """Where the seed's SFT checkpoint for these settings lives under ``root``: ``seed<N>-<hash of SFT_FIELDS>``, so
    runs with other settings do not meet, and a run with the same ones reuses it."""
    import hashlib

    key = json.dumps({k: _plain(getattr(cfg, k)) for k in SFT_FIELDS}, sort_keys=True)
    return root / f"seed{seed}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def load_sft(folder: Path, seed: int, cfg: BenchConfig) -> tuple[dict[str, Any], np.ndarray]:
    """(SFT info, held-out correctness) of a checkpoint ``save_sft`` wrote; refuses one made with another seed or
    other settings, naming the differences."""
    try:
        meta = json.loads((folder / SFT_FILE).read_text())
        saved, info, bits = meta["settings"], meta["sft"], meta["test_correct"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{folder} is not an SFT checkpoint of bench.learning ({type(exc).__name__}: {exc}); "
                         f"make one with python -m bench.learning --save-sft") from None
    want = {k: _plain(getattr(cfg, k)) for k in SFT_FIELDS}
    diff = [f"{k}: {saved.get(k)!r} there, {want[k]!r} here" for k in SFT_FIELDS if saved.get(k) != want[k]]
    if meta.get("seed") != seed:
        diff.insert(0, f"seed: {meta.get('seed')!r} there, {seed!r} here")
    if diff:
        raise ValueError(f"{folder} was made with other settings: {'; '.join(diff)}")
    if len(bits) != cfg.test_size or set(bits) - {"0", "1"}:
        raise ValueError(f"{folder}/{SFT_FILE}: test_correct must be {cfg.test_size} characters 0/1")
    return info, np.array([b == "1" for b in bits], dtype=bool)


def sft_checkpoint(seed: int, cfg: BenchConfig, work: Path, folder: Path | None) -> tuple[Path, dict[str, Any],
                                                                                         np.ndarray, int]:
    """The seed's SFT checkpoint: ``folder`` when it holds one made with these settings, else trained here (and
    saved to ``folder`` when given, else under ``work``). Returns (model folder, SFT info with its test score,
    held-out correctness, parameter count)."""
    if folder is not None and (folder / SFT_FILE).exists():
        info, correct = load_sft(folder, seed, cfg)
        log.info("seed %d: SFT checkpoint reused from %s (test acc %.3f)", seed, folder, info["test_accuracy"])
        backend = TransformersBackend(folder, preset=PRESET, dtype="float32")
        return folder, info, correct, count_parameters(backend.model)
    torch.manual_seed(seed)
    model_dir = build_model(work / f"model-seed{seed}", seed)
    backend = TransformersBackend(model_dir, preset=PRESET, dtype="float32")
    val, test = held_out(cfg)
    info = sft_stage(seed, cfg, backend, val)
    t0 = time.perf_counter()
    info["test_accuracy"], correct, info["test_answers_per_sample"] = evaluate(backend, test, cfg)
    info["seconds"] += time.perf_counter() - t0
    log.info("seed %d SFT done: %d steps (%s), test acc %.3f", seed, info["steps"], info["stop"],
             info["test_accuracy"])
    folder = folder or work / f"sft-seed{seed}"
    save_sft(folder, model_dir, backend, seed, cfg, info, correct)
    return folder, info, correct, count_parameters(backend.model)


def rl_arm(arm: str, seed: int, cfg: BenchConfig, backend: TransformersBackend, sft_correct: np.ndarray,
           val: list, test: list) -> dict[str, Any]:
    """One RL arm from the weights in ``backend`` (the SFT checkpoint), ``cfg.rl_steps`` updates on the seed's
    screens, scored on ``test`` against the SFT answers (paired bootstrap)."""
    algo, reward_fn = rewards.ARMS[arm]
    torch.manual_seed(seed)
    learner = Learner(backend, RLConfig(lr=cfg.rl_lr, warmup_steps=cfg.rl_warmup), TrainModelConfig(finetune="full"), algo=algo, seed=seed)
    arm_rng = np.random.default_rng([seed, 2])  # every arm trains on the same screens
    t_arm = time.perf_counter()
    v_acc, _, v_aps = evaluate(backend, val, cfg)
    curve = [{"step": 0, "samples": 0, "val_accuracy": v_acc, "val_answers_per_sample": v_aps}]
    for k in range(1, cfg.rl_steps + 1):
        prompts = [to_prompt(make_screen(arm_rng, *look(cfg))) for _ in range(cfg.prompts_per_step)]
        groups = rollout_groups(backend, prompts, cfg.group_size, reward_fn, max_new_tokens=cfg.max_new_tokens,
                                first_group_id=k * cfg.prompts_per_step, adapter_version=learner.adapter_version)
        texts = [s.response_text for g in groups for s in g]
        hits = [rewards.top1_hit(p, s.response_text) for p, g in zip(prompts, groups) for s in g]
        collinear = [rewards.aepo(p, s.response_text).info["is_collinear"] for p, g in zip(prompts, groups)
                     for s in g]
        m = learner.step(groups)
        point = {"step": k, "samples": k * cfg.prompts_per_step * cfg.group_size,
                 "reward_mean": m["train/reward_mean"], "sample_top1": float(np.mean(hits)),
                 "answers_per_sample": rewards.answers_per_sample(texts),
                 "collinear_share": float(np.mean(collinear)), "loss": m["train/loss"],
                 "clipfrac": m["train/clipfrac"], "grad_norm": m["train/grad_norm"]}
        if k % cfg.rl_eval_every == 0 or k == cfg.rl_steps:
            point["val_accuracy"], _, point["val_answers_per_sample"] = evaluate(backend, val, cfg)
            log.info("seed %d %s step %d reward %.3f answers %.2f val acc %.3f", seed, arm, k,
                     point["reward_mean"], point["answers_per_sample"], point["val_accuracy"])
        curve.append(point)
    acc, correct, aps = evaluate(backend, test, cfg)
    mean, ci_lo, ci_hi = paired_bootstrap(correct, sft_correct, cfg.bootstrap, seed)
    log.info("seed %d %s: test acc %.3f, delta %.3f [%.3f, %.3f]", seed, arm, acc, mean, ci_lo, ci_hi)
    return {"algo": algo, "lr": cfg.rl_lr, "samples": cfg.rl_steps * cfg.prompts_per_step * cfg.group_size,
            "test_accuracy": acc, "test_answers_per_sample": aps, "delta_vs_sft": mean,
            "delta_ci95": [ci_lo, ci_hi], "ci_excludes_0": bool(ci_lo > 0 or ci_hi < 0),
            "curve": curve, "seconds": time.perf_counter() - t_arm}


def run_seed(seed: int, cfg: BenchConfig, work: Path, sft_dir: Path | None = None) -> SeedResult:
    """SFT (or the checkpoint in ``sft_dir`` made with the same settings; a new one is saved there), then every
    arm from it."""
    t_seed = time.perf_counter()
    folder, info, sft_correct, parameters = sft_checkpoint(seed, cfg, work, sft_dir)
    out = SeedResult(seed, parameters=parameters, sft=info)
    val, test = held_out(cfg)
    for arm in cfg.arms:
        backend = TransformersBackend(folder, preset=PRESET, dtype="float32")
        out.arms[arm] = rl_arm(arm, seed, cfg, backend, sft_correct, val, test)
        del backend
    out.seconds = time.perf_counter() - t_seed
    return out


def summarize(results: list[SeedResult], cfg: BenchConfig) -> dict[str, Any]:
    def stats(values: list[float]) -> dict[str, float]:
        v = np.array(values, dtype=float)
        return {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if len(v) > 1 else math.nan,
                "values": [float(x) for x in v]}

    summary: dict[str, Any] = {"sft": stats([r.sft["test_accuracy"] for r in results])}
    for arm in cfg.arms:
        ran = [r for r in results if arm in r.arms]  # a merged result may lack an arm on some seeds
        if not ran:
            continue
        summary[arm] = {
            "seeds": [r.seed for r in ran],
            "test_accuracy": stats([r.arms[arm]["test_accuracy"] for r in ran]),
            "delta_vs_sft": stats([r.arms[arm]["delta_vs_sft"] for r in ran]),
            "answers_per_sample": stats([r.arms[arm]["curve"][-1]["answers_per_sample"] for r in ran]),
            "seeds_ci_excludes_0_positive": sum(r.arms[arm]["delta_ci95"][0] > 0 for r in ran),
            "seeds_ci_excludes_0_negative": sum(r.arms[arm]["delta_ci95"][1] < 0 for r in ran),
        }
    return summary


def as_json(results: list[SeedResult], cfg: BenchConfig) -> dict[str, Any]:
    return {"config": asdict(cfg), "seeds": [asdict(r) for r in results], "summary": summarize(results, cfg)}

"""handeye's Learner against TRL's GRPOTrainer, same model, same data, same update, side by side in one run.

Both sides get the benchmark's ~1M-parameter random Qwen2.5-VL (the same seed, hence the same weights), the same
generated screens (InfiGUI-G1 no_think prompts), 8 samples per prompt at temperature 1 with at most 48 new tokens,
the AEPO reward (``train.rewards.aepo_reward``, no_think), full fine-tuning (vision tower included) with AdamW at lr
1e-4 and one optimizer step per batch. TRL is configured as close to AEPO as it goes: ``beta=0`` (no KL),
``epsilon=0.2, epsilon_high=0.4``, ``scale_rewards="none"`` (mean-centred advantages: RLOO's up to the factor
n/(n-1)), ``loss_type="dapo"`` (token-mean over the batch), ``num_iterations=1``.

Two settings (``SETTINGS``):

- ``224``: the learning benchmark's 224 x 224 screens (64 image tokens), 8 prompts per step (64 responses);
- ``1280x720``: the same scenes on a 1280 x 720 frame, model input 1288 x 728 (1,196 image tokens, a prompt of
  ~1,410 tokens: a real screenshot's size), 2 prompts per step (16 responses; 8 would take ~4x as long on a CPU).

Four sides, each in its own subprocess so each one's peak memory is its own: ``ours`` (``Learner``, the
shared-prefix update, with ``rollout_groups``), ``ours_unshared`` (the same with ``shared_prefix=False``: prompt +
answer once per answer), ``trl`` (GRPOConfig's defaults otherwise, which turn gradient checkpointing on: less
memory, more compute) and ``trl_no_gc`` (gradient checkpointing off, as the Learner runs). Memory is ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` (peak resident set
size) after loading and before the first step, and after each step; ``peak_rss_delta_mb`` is how far the steps
raised the process's peak above its loaded state (tracemalloc would miss torch's tensors). Three steps per run; the
first is cold, ``samples_per_s`` is over the other two: sampled responses / (generation + update seconds). Each
side's generation is timed apart (TRL's by wrapping the model's ``generate``). Runs alternate the sides, and the
reported figures are medians over ``runs``.
"""

from __future__ import annotations

from train.config import RLConfig, TrainModelConfig
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

GROUP, MAX_NEW, LR, STEPS = 8, 48, 1e-4, 3
SIDES = ("ours", "ours_unshared", "trl", "trl_no_gc")
BASELINES = ("trl", "trl_no_gc")


@dataclass(frozen=True, slots=True)
class Setting:
    name: str
    prompts: int
    """Prompts per step (each with GROUP responses)."""
    wide: bool
    """The 1280 x 720 frame (``screens.to_wide_prompt``) instead of the 224 px screen."""


SETTINGS = {"224": Setting("224", 8, False), "1280x720": Setting("1280x720", 2, True)}


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _screens(setting: Setting):
    from bench.learning.screens import screens, to_prompt, to_wide_prompt

    make = to_wide_prompt if setting.wide else to_prompt
    return [make(s) for s in screens(4242, setting.prompts * STEPS)]


def _preset(setting: Setting):
    from bench.learning.screens import PRESET, WIDE_PRESET

    return WIDE_PRESET if setting.wide else PRESET


def worker_ours(model_dir: str, setting: Setting, shared: bool = True) -> dict[str, Any]:
    import torch

    from bench.learning import rewards
    from policy.backends.hf import TransformersBackend
    from train.learner import Learner, rollout_groups

    torch.manual_seed(0)
    backend = TransformersBackend(model_dir, preset=_preset(setting), dtype="float32")
    learner = Learner(backend, RLConfig(lr=LR, shared_prefix=shared), TrainModelConfig(finetune="full"), algo="aepo")
    prompts = _screens(setting)
    rss0 = _rss_mb()
    steps = []
    n = setting.prompts
    for k in range(STEPS):
        t0 = time.perf_counter()
        groups = rollout_groups(backend, prompts[k * n:(k + 1) * n], GROUP, rewards.aepo, max_new_tokens=MAX_NEW,
                                adapter_version=learner.adapter_version)
        t1 = time.perf_counter()
        m = learner.step(groups)
        t2 = time.perf_counter()
        steps.append({"generate_s": t1 - t0, "update_s": t2 - t1, "step_s": t2 - t0, "samples": int(m["train/samples"]),
                      "response_tokens": int(m["train/response_tokens"]), "reward_mean": m["train/reward_mean"],
                      "peak_rss_mb": _rss_mb()})
    return {"rss_loaded_mb": rss0, "steps": steps}


def worker_trl(model_dir: str, setting: Setting, gradient_checkpointing: bool = True) -> dict[str, Any]:
    import numpy as np
    import torch
    import trl
    from datasets import Dataset
    from PIL import Image
    from transformers import AutoModelForImageTextToText, TrainerCallback

    from policy.backends.hf import load_processor
    from train.rewards import aepo_reward

    torch.manual_seed(0)
    prompts = _screens(setting)
    rows = [{"prompt": p.messages, "image": Image.fromarray(np.asarray(p.image)), "box": list(p.target)}
            for p in prompts]
    dataset = Dataset.from_list(rows)

    def aepo(prompts, completions, box, **kwargs):  # TRL's reward signature: columns arrive as keyword lists
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [aepo_reward(t, tuple(b), think=False, variant="code").total for t, b in zip(texts, box)]

    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32)
    processor = load_processor(model_dir, _preset(setting))
    batch = setting.prompts * GROUP
    config = trl.GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-grpo-"), per_device_train_batch_size=batch,
        gradient_accumulation_steps=1, num_generations=GROUP, steps_per_generation=1, num_iterations=1,
        max_steps=STEPS, learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        max_grad_norm=1.0, beta=0.0, epsilon=0.2, epsilon_high=0.4, scale_rewards="none", loss_type="dapo",
        max_completion_length=MAX_NEW, temperature=1.0, top_p=1.0, use_cpu=True, bf16=False, fp16=False,
        report_to="none", logging_steps=1, save_strategy="no", shuffle_dataset=False, seed=0,
        remove_unused_columns=False, dataloader_num_workers=0, gradient_checkpointing=gradient_checkpointing,
    )
    times: list[dict[str, float]] = []
    rss0: list[float] = []
    generate = model.generate

    def timed_generate(*args, **kwargs):  # TRL generates through the model's own generate (no vLLM here)
        t = time.perf_counter()
        try:
            return generate(*args, **kwargs)
        finally:
            if times:
                times[-1]["generate_s"] = times[-1].get("generate_s", 0.0) + time.perf_counter() - t

    model.generate = timed_generate

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            if not rss0:
                rss0.append(_rss_mb())
            times.append({"t0": time.perf_counter()})

        def on_step_end(self, args, state, control, **kw):
            times[-1]["step_s"] = time.perf_counter() - times[-1].pop("t0")
            times[-1]["peak_rss_mb"] = _rss_mb()

    trainer = trl.GRPOTrainer(model=model, reward_funcs=aepo, args=config, train_dataset=dataset,
                              processing_class=processor, callbacks=[Timer()])
    trainer.train()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    return {"trl": trl.__version__, "rss_loaded_mb": rss0[0] if rss0 else None,
            "steps": [{**t, "update_s": t["step_s"] - t.get("generate_s", 0.0), "samples": batch,
                       "reward_mean": (logs[i]["reward"] if i < len(logs) else None)} for i, t in enumerate(times)]}


def _run_worker(kind: str, model_dir: str, threads: int, setting: Setting, timeout: float = 1800) -> dict[str, Any]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONWARNINGS": "ignore"}
    cmd = [sys.executable, "-m", "bench.learning.trl_compare", "--worker", kind, model_dir, str(threads), setting.name]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    try:
        return json.loads(last)
    except json.JSONDecodeError:
        return {"error": f"worker exited {proc.returncode} without a result", "stderr_tail": proc.stderr[-3000:]}


def _summary(side: dict[str, Any]) -> dict[str, Any]:
    """One run of one side: samples / s over the warm steps, their generation and update seconds, the peak rise."""
    if "error" in side:
        return side
    steps = side["steps"]
    warm = steps[1:] or steps
    seconds = sum(s["step_s"] for s in warm)
    peak = max(s["peak_rss_mb"] for s in steps)
    return {**side, "samples_per_s": sum(s["samples"] for s in warm) / seconds if seconds else None,
            "generate_s": sum(s.get("generate_s", 0.0) for s in warm) / len(warm),
            "update_s": sum(s.get("update_s", 0.0) for s in warm) / len(warm),
            "peak_rss_delta_mb": peak - side["rss_loaded_mb"] if side["rss_loaded_mb"] else None,
            "peak_rss_mb": peak}


def _medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return {"error": "no run finished", "errors": [r.get("error") for r in runs]}
    keys = ("samples_per_s", "generate_s", "update_s", "peak_rss_delta_mb", "rss_loaded_mb", "peak_rss_mb")
    return {"runs": len(ok), **{k: statistics.median(r[k] for r in ok) for k in keys},
            **{f"{k}_all": [round(r[k], 3) for r in ok] for k in ("samples_per_s", "peak_rss_delta_mb")}}


def compare_setting(setting: Setting, model_dir: str, threads: int, runs: int,
                    sides: tuple[str, ...] = SIDES) -> dict[str, Any]:
    """``runs`` runs of every side, alternating, and each side's medians; ratios against TRL's medians."""
    per_side: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    for r in range(runs):
        for side in sides:
            print(f"trl_compare: setting {setting.name}, run {r + 1}/{runs}, {side} ...", file=sys.stderr, flush=True)
            per_side[side].append(_summary(_run_worker(side, model_dir, threads, setting)))
    result: dict[str, Any] = {"setting": asdict(setting), "medians": {s: _medians(v) for s, v in per_side.items()},
                              "runs": per_side}
    for base in (b for b in BASELINES if b in sides):
        theirs = result["medians"][base]
        for side in (s for s in sides if s not in BASELINES):
            mine = result["medians"][side]
            if "error" not in mine and "error" not in theirs:
                mine[f"speed_vs_{base}"] = mine["samples_per_s"] / theirs["samples_per_s"]
                mine[f"memory_rise_vs_{base}"] = mine["peak_rss_delta_mb"] / theirs["peak_rss_delta_mb"]
    return result


def markdown_table(result: dict[str, Any]) -> str:
    """The medians of every setting and side as a markdown table (what docs/benchmarks.md shows)."""
    names = {"ours": "handeye `Learner`, shared prefix", "ours_unshared": "handeye `Learner`, unshared",
             "trl": "TRL `GRPOTrainer` (its default: gradient checkpointing)",
             "trl_no_gc": "TRL `GRPOTrainer`, no gradient checkpointing"}
    rows = ["| setting | side | samples / s | vs TRL (gc / no gc) | generation + update per step | peak RSS rise | "
            "vs TRL (gc / no gc) | runs (samples / s) |", "|---|---|---|---|---|---|---|---|"]
    for name, res in result["settings"].items():
        for side, m in res["medians"].items():
            if "error" in m:
                rows.append(f"| {name} | {names.get(side, side)} | error: {m['error']} | | | | | |")
                continue
            speed = " / ".join(f"**{m[k]:.2f}x**" for k in (f"speed_vs_{b}" for b in BASELINES) if k in m)
            mem = " / ".join(f"**{m[k]:.2f}x**" for k in (f"memory_rise_vs_{b}" for b in BASELINES) if k in m)
            runs = ", ".join(_rate(v) for v in m["samples_per_s_all"])
            rows.append(f"| {name} | {names.get(side, side)} | {_rate(m['samples_per_s'])} | {speed} | "
                        f"{m['generate_s']:.2f} + {m['update_s']:.2f} s | {m['peak_rss_delta_mb']:,.0f} MB | {mem} | "
                        f"{runs} |")
    return "\n".join(rows) + "\n"


def _rate(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def compare(out: Path, threads: int = 1, runs: int = 3, settings: tuple[str, ...] = tuple(SETTINGS),
            sides: tuple[str, ...] = SIDES) -> dict[str, Any]:
    """Every setting, ``runs`` alternating runs per side; writes ``out`` (JSON) and ``out`` with ``.md`` (the
    table)."""
    from bench.learning.model import build_model

    result: dict[str, Any] = {
        "setup": {"group_size": GROUP, "max_new_tokens": MAX_NEW, "lr": LR, "steps": STEPS, "threads": threads,
                  "runs": runs, "memory": "ru_maxrss (peak RSS) per subprocess", "update": "full fine-tuning, AEPO "
                  "(TRL: beta 0, epsilon 0.2 / 0.4, scale_rewards none, loss dapo), one optimizer step per batch"},
        "settings": {}}
    with tempfile.TemporaryDirectory(prefix="handeye-trl-") as work:
        model_dir = str(build_model(Path(work) / "model", seed=0))
        for name in settings:
            result["settings"][name] = compare_setting(SETTINGS[name], model_dir, threads, runs, sides)
            out.write_text(json.dumps(result, indent=2) + "\n")  # after every setting: a crash keeps what ran
    out.with_suffix(".md").write_text(markdown_table(result))
    return result


if __name__ == "__main__":
    if len(sys.argv) >= 6 and sys.argv[1] == "--worker":
        import torch

        torch.set_num_threads(int(sys.argv[4]))
        kind, model_dir, chosen = sys.argv[2], sys.argv[3], SETTINGS[sys.argv[5]]
        try:
            res = (worker_trl(model_dir, chosen, gradient_checkpointing=kind == "trl") if kind.startswith("trl")
                   else worker_ours(model_dir, chosen, shared=kind == "ours"))
        except Exception as exc:  # noqa: BLE001 - the comparison reports exactly why a side could not run
            res = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]}
        print(json.dumps(res))
    else:
        sys.exit("run it through: python -m bench.learning --trl")

"""One AEPO update of handeye's Learner against one TRL GRPOTrainer step, same model, same data, one run.

Both sides get the benchmark's ~1M-parameter random Qwen2.5-VL (the same seed, hence the same weights), the same 8
generated screens (InfiGUI-G1 no_think prompts), 8 samples per prompt at temperature 1 with at most 48 new tokens,
the AEPO reward (``train.rewards.aepo_reward``, no_think), full fine-tuning with AdamW at lr 1e-4 and one optimizer
step per batch of 64 responses. TRL is configured as close to AEPO as it goes: ``beta=0`` (no KL),
``epsilon=0.2, epsilon_high=0.4``, ``scale_rewards="none"`` (mean-centred advantages: RLOO's up to the factor
n/(n-1)), ``loss_type="dapo"`` (token-mean over the batch), ``num_iterations=1``.

Each side runs in its own subprocess, so each one's peak memory is its own: ``resource.getrusage(RUSAGE_SELF)
.ru_maxrss`` (peak resident set size, KiB on Linux) after loading and before the first step, and after each step;
the reported ``peak_rss_delta_mb`` is how far the updates raised the process's peak above its loaded state.
(tracemalloc would miss torch's tensors, which its allocator takes outside Python's.) Three steps are run; the
first is cold, ``samples_per_s`` is over the other two: sampled responses / (generation + update seconds).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

PROMPTS, GROUP, MAX_NEW, LR, STEPS = 8, 8, 48, 1e-4, 3


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _screens():
    from bench.learning.screens import screens, to_prompt

    return [to_prompt(s) for s in screens(4242, PROMPTS * STEPS)]


def worker_ours(model_dir: str) -> dict[str, Any]:
    import torch

    from bench.learning import rewards
    from bench.learning.screens import PRESET
    from policy.backends.hf import TransformersBackend
    from train.learner import Learner, rollout_groups

    torch.manual_seed(0)
    backend = TransformersBackend(model_dir, preset=PRESET, dtype="float32")
    learner = Learner(backend, algo="aepo", finetune="full", lr=LR)
    prompts = _screens()
    rss0 = _rss_mb()
    steps = []
    for k in range(STEPS):
        t0 = time.perf_counter()
        groups = rollout_groups(backend, prompts[k * PROMPTS:(k + 1) * PROMPTS], GROUP, rewards.aepo,
                                max_new_tokens=MAX_NEW, adapter_version=learner.adapter_version)
        t1 = time.perf_counter()
        m = learner.step(groups)
        t2 = time.perf_counter()
        steps.append({"generate_s": t1 - t0, "update_s": t2 - t1, "samples": int(m["train/samples"]),
                      "response_tokens": int(m["train/response_tokens"]), "reward_mean": m["train/reward_mean"],
                      "peak_rss_mb": _rss_mb()})
    return {"rss_loaded_mb": rss0, "steps": steps}


def worker_trl(model_dir: str) -> dict[str, Any]:
    import numpy as np
    import torch
    import trl
    from datasets import Dataset
    from PIL import Image
    from transformers import AutoModelForImageTextToText, TrainerCallback

    from bench.learning.screens import PRESET
    from policy.backends.hf import _load_processor
    from train.rewards import aepo_reward

    torch.manual_seed(0)
    prompts = _screens()
    rows = [{"prompt": p.messages, "image": Image.fromarray(np.asarray(p.image)), "box": list(p.target)}
            for p in prompts]
    dataset = Dataset.from_list(rows)

    def aepo(prompts, completions, box, **kwargs):  # TRL's reward signature: columns arrive as keyword lists
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [aepo_reward(t, tuple(b), think=False, variant="code").total for t, b in zip(texts, box)]

    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32)
    processor = _load_processor(model_dir, PRESET)
    out_dir = tempfile.mkdtemp(prefix="trl-grpo-")
    config = trl.GRPOConfig(
        output_dir=out_dir, per_device_train_batch_size=PROMPTS * GROUP, gradient_accumulation_steps=1,
        num_generations=GROUP, steps_per_generation=1, num_iterations=1, max_steps=STEPS, learning_rate=LR,
        lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0, beta=0.0, epsilon=0.2,
        epsilon_high=0.4, scale_rewards="none", loss_type="dapo", max_completion_length=MAX_NEW, temperature=1.0,
        top_p=1.0, use_cpu=True, bf16=False, fp16=False, report_to="none", logging_steps=1, save_strategy="no",
        shuffle_dataset=False, seed=0, remove_unused_columns=False, dataloader_num_workers=0,
    )

    times: list[dict[str, float]] = []
    rss0: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            if not rss0:
                rss0.append(_rss_mb())
            times.append({"t0": time.perf_counter()})

        def on_step_end(self, args, state, control, **kw):
            times[-1]["step_s"] = time.perf_counter() - times[-1]["t0"]
            times[-1]["peak_rss_mb"] = _rss_mb()

    trainer = trl.GRPOTrainer(model=model, reward_funcs=aepo, args=config, train_dataset=dataset,
                              processing_class=processor, callbacks=[Timer()])
    trainer.train()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    return {"trl": trl.__version__, "rss_loaded_mb": rss0[0] if rss0 else None,
            "steps": [{"step_s": t["step_s"], "samples": PROMPTS * GROUP, "peak_rss_mb": t["peak_rss_mb"],
                       "reward_mean": (logs[i]["reward"] if i < len(logs) else None)} for i, t in enumerate(times)]}


def _run_worker(kind: str, model_dir: str, threads: int, timeout: float = 900) -> dict[str, Any]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONWARNINGS": "ignore"}
    cmd = [sys.executable, "-m", "bench.learning.trl_compare", "--worker", kind, model_dir, str(threads)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    try:
        return json.loads(last)
    except json.JSONDecodeError:
        return {"error": f"worker exited {proc.returncode} without a result", "stderr_tail": proc.stderr[-3000:]}


def _summary(side: dict[str, Any]) -> dict[str, Any]:
    if "error" in side:
        return side
    steps = side["steps"]
    warm = steps[1:] or steps
    seconds = sum(s.get("step_s", s.get("generate_s", 0) + s.get("update_s", 0)) for s in warm)
    peak = max(s["peak_rss_mb"] for s in steps)
    return {**side, "samples_per_s": sum(s["samples"] for s in warm) / seconds if seconds else None,
            "peak_rss_delta_mb": peak - side["rss_loaded_mb"] if side["rss_loaded_mb"] else None,
            "peak_rss_mb": peak}


def compare(out: Path, threads: int = 1) -> dict[str, Any]:
    from bench.learning.model import build_model

    with tempfile.TemporaryDirectory(prefix="handeye-trl-") as work:
        model_dir = str(build_model(Path(work) / "model", seed=0))
        ours = _summary(_run_worker("ours", model_dir, threads))
        theirs = _summary(_run_worker("trl", model_dir, threads))
    result = {"setup": {"prompts": PROMPTS, "group_size": GROUP, "max_new_tokens": MAX_NEW, "lr": LR,
                        "steps": STEPS, "threads": threads, "memory": "ru_maxrss (peak RSS) per subprocess"},
              "handeye_learner": ours, "trl_grpo_trainer": theirs}
    out.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "--worker":
        import torch

        torch.set_num_threads(int(sys.argv[4]) if len(sys.argv) > 4 else 1)
        kind, model_dir = sys.argv[2], sys.argv[3]
        try:
            res = worker_ours(model_dir) if kind == "ours" else worker_trl(model_dir)
        except Exception as exc:  # noqa: BLE001 - the comparison reports exactly why a side could not run
            res = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]}
        print(json.dumps(res))
    else:
        sys.exit("run it through: python -m bench.learning --trl")

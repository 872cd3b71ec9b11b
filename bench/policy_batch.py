"""Decisions per second of the in-process transformers backend: N observations decided in one
batched generate call against N sequential calls.

Each observation is a 1280x720 frame resized to the preset's model-input size plus a short task;
a decision is one greedy sample. Every sample is made to run exactly ``--max-new-tokens`` tokens
(EOS is masked), so random weights that stop early do not skew the comparison. Timed: the whole
``backend.generate`` (chat template, image processor, generate, decoding). Batched and sequential
alternate within each run; the table shows medians over ``--runs`` runs after one warm-up.

Models (``--model``):

- ``tiny`` (default): policy.tiny's ~200k-parameter random Qwen2.5-VL; runs on a CPU.
- ``small``: the ~17M-parameter variant; CPU is fine.
- ``3b``: Qwen2.5-VL-3B-Instruct's shapes with random weights (~3.4B parameters, built and saved
  in bfloat16, ~7 GB on disk): needs a CUDA GPU (``--device cuda``); on a CPU it would take minutes
  per decision.
- a path to a checkpoint directory (Qwen2/2.5-VL family).

Prints a table and writes JSON (default bench/results/policy_batch.json).
Run: .venv/bin/python bench/policy_batch.py [--n 1 4 8] [--runs 5] [--max-new-tokens 32] [--model tiny]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from policy.backends.base import GenerationRequest  # noqa: E402
from policy.backends.hf import TransformersBackend  # noqa: E402
from policy.presets import Decoding, preset_for  # noqa: E402
from policy.tiny import VARIANTS, build_tiny_qwen25vl  # noqa: E402

FRAME = (1280, 720)
TASKS = ["Click the OK button.", "Open the settings menu.", "Type hello into the search box.", "Scroll down.",
         "Close the dialog.", "Select the second item.", "Go back.", "Turn on dark mode."]


class NoEos:
    """Masks every EOS id so each sample runs the full token budget."""

    def __init__(self, eos_ids: frozenset[int]) -> None:
        self.eos_ids = sorted(eos_ids)

    def __call__(self, input_ids, scores):
        scores = scores.clone()
        scores[:, self.eos_ids] = -float("inf")
        return scores


def observation(i: int, input_size: tuple[int, int], decoding: Decoding) -> GenerationRequest:
    rng = np.random.default_rng(i)
    full = rng.integers(0, 256, (FRAME[1], FRAME[0], 3), dtype=np.uint8)
    image = cv2.resize(full, input_size, interpolation=cv2.INTER_AREA)
    messages = [{"role": "user", "content": [{"type": "text", "text": TASKS[i % len(TASKS)]},
                                             {"type": "image", "image": image}]}]
    return GenerationRequest(messages, 1, decoding)


async def measure(backend: TransformersBackend, requests: list[GenerationRequest]) -> tuple[float, float]:
    """(batched seconds, sequential seconds) for deciding ``requests``."""
    t0 = time.perf_counter()
    await backend.generate(requests)
    batched = time.perf_counter() - t0
    t0 = time.perf_counter()
    for r in requests:
        await backend.generate([r])
    return batched, time.perf_counter() - t0


async def bench(backend: TransformersBackend, ns: list[int], runs: int, decoding: Decoding) -> list[dict]:
    size = backend.preset.input_size(FRAME)
    rows = []
    for n in ns:
        requests = [observation(i, size, decoding) for i in range(n)]
        await measure(backend, requests)  # warm-up
        timings = [await measure(backend, requests) for _ in range(runs)]
        batched = statistics.median(t[0] for t in timings)
        sequential = statistics.median(t[1] for t in timings)
        rows.append({
            "n": n, "batched_s": round(batched, 4), "sequential_s": round(sequential, 4),
            "batched_decisions_per_s": round(n / batched, 2), "sequential_decisions_per_s": round(n / sequential, 2),
            "speedup": round(sequential / batched, 2),
            "runs_batched_s": [round(t[0], 4) for t in timings], "runs_sequential_s": [round(t[1], 4) for t in timings],
        })
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="tiny", help=f"{', '.join(VARIANTS)} (random weights) or a checkpoint directory")
    parser.add_argument("--n", type=int, nargs="+", default=[1, 4, 8], help="observations per batch")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--max-pixels", type=int, default=None,
                        help="model-input pixel budget (default: the qwen2.5-vl preset's, 1288x728 for 1280x720)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "policy_batch.json"))
    args = parser.parse_args()

    import torch

    if args.model == "3b" and not args.device.startswith("cuda"):
        parser.error("--model 3b has ~3.4B parameters: run it on a GPU machine with --device cuda")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda but torch sees no CUDA GPU")

    decoding = Decoding(temperature=0.0, max_new_tokens=args.max_new_tokens)
    overrides = {"decoding": decoding}
    if args.max_pixels:
        overrides["max_pixels"] = args.max_pixels
    with tempfile.TemporaryDirectory() as tmp:
        if args.model in VARIANTS:
            t0 = time.perf_counter()
            model_dir = build_tiny_qwen25vl(Path(tmp) / args.model, seed=0, variant=args.model,
                                            dtype="bfloat16" if args.model == "3b" else "float32")
            print(f"built random {args.model} model in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        else:
            model_dir = Path(args.model)
        preset = preset_for(str(model_dir), fmt="qwen2.5-vl", **overrides)
        backend = TransformersBackend(model_dir, preset=preset, device=args.device, dtype=args.dtype)
        backend.logits_processor_factory = lambda _request: NoEos(backend.eos_ids)
        params = sum(p.numel() for p in backend.model.parameters())
        rows = asyncio.run(bench(backend, args.n, args.runs, decoding))
        describe = backend.describe()
        asyncio.run(backend.close())

    w, h = preset.input_size(FRAME)
    print(f"model {args.model} ({params / 1e6:.2f}M params, {describe['dtype']}, {describe['device']}), "
          f"image {w}x{h} ({w * h // 784} image tokens), {args.max_new_tokens} new tokens, median of {args.runs} runs")
    print(f"{'N':>3} | {'batched s':>9} | {'seq s':>8} | {'batched dec/s':>13} | {'seq dec/s':>9} | speedup")
    for r in rows:
        print(f"{r['n']:>3} | {r['batched_s']:>9.3f} | {r['sequential_s']:>8.3f} | {r['batched_decisions_per_s']:>13.2f} | "
              f"{r['sequential_decisions_per_s']:>9.2f} | {r['speedup']:.2f}x")

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "benchmark": "policy_batch",
        "model": args.model, "params": params, "backend": describe,
        "frame": FRAME, "input_size": [w, h], "image_tokens": w * h // 784,
        "max_new_tokens": args.max_new_tokens, "runs": args.runs,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch": torch.__version__,
                    "torch_threads": torch.get_num_threads(),
                    "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None},
        "results": rows,
    }, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

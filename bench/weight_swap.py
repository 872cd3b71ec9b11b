"""What a full-weight version costs per model size: writing it (the learner), and taking it (an actor), the naive way
against the in-place swap.

For each size, a random-init Qwen2.5-VL-style model is built from a config in code (no download) in bf16, the
dtype real runs use. Then, each measurement in a fresh process so that its peak memory is its own:

- **write**: the learner's side, ``AdapterStore.publish`` of a learner whose weights changed: the safetensors
  files, their sha256, the manifest, fsync, the rename (``train.full_versions.write_full_weights``);
- **naive**: the actor builds a second model from the published folder (sha256 check, then
  ``AutoModelForImageTextToText.from_pretrained``, every weight then read once as a first forward pass would:
  transformers maps the files and reads them lazily) while it still holds the one it acts with;
- **in place**: ``train.adapters.load_verified`` into the actor's ``TransformersBackend``: sha256 through the open
  files, then ``load_weights`` copies them into the existing parameters through a 64 MiB staging buffer.

Peak RSS rise: the process's resident memory sampled every 2 ms during the operation, minus its value just before.
The files were just written, so both load paths read them from the page cache (what an in-process session sees; a
fleet actor reads what it has just fetched, also cached). Each figure is the median of ``--runs`` runs.

Prints a table and writes JSON (default bench/results/weight_swap.json), with the parameter counts of
Qwen2.5-VL-3B-Instruct and UI-TARS-1.5-7B (Qwen2.5-VL-7B's architecture) counted from their configs on the meta
device (no weights), and the time a version of those would take at the measured throughput: an extrapolation.
Run: .venv/bin/python bench/weight_swap.py [--runs 3] [--sizes tiny,17m,100m,300m] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SIZES: dict[str, dict[str, dict[str, Any]]] = {
    "tiny": {"text": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, mrope_section=[2, 3, 3]),
             "vision": dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, fullatt_block_indexes=[1])},
    "17m": {"text": dict(hidden_size=512, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=8,
                         num_key_value_heads=2, mrope_section=[8, 12, 12]),
            "vision": dict(depth=4, hidden_size=256, intermediate_size=512, num_heads=4, fullatt_block_indexes=[3])},
    "100m": {"text": dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=8,
                          num_key_value_heads=2, mrope_section=[16, 24, 24]),
             "vision": dict(depth=4, hidden_size=512, intermediate_size=1376, num_heads=8, fullatt_block_indexes=[3])},
    "300m": {"text": dict(hidden_size=1536, intermediate_size=4096, num_hidden_layers=12, num_attention_heads=12,
                          num_key_value_heads=2, mrope_section=[16, 24, 24]),
             "vision": dict(depth=8, hidden_size=768, intermediate_size=2048, num_heads=12,
                            fullatt_block_indexes=[3, 7])},
}
"""Random-init sizes (the byte-level vocabulary of ``policy.tiny``: 263 tokens, so the weights are the towers')."""

REAL = {
    "Qwen2.5-VL-3B-Instruct": dict(
        text=dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
                  num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
        vision=dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=2048,
                    fullatt_block_indexes=[7, 15, 23, 31], window_size=112), tie_word_embeddings=True),
    "UI-TARS-1.5-7B": dict(
        text=dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                  num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False),
        vision=dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=3584,
                    fullatt_block_indexes=[7, 15, 23, 31], window_size=112), tie_word_embeddings=False),
}
"""The two models' released configs (config.json on the hub), the fields that set the parameter count."""


# -- measuring -------------------------------------------------------------------------------------------------------


class PeakRss:
    """The peak resident memory rise of this process while the block runs (sampled every 2 ms)."""

    def __enter__(self) -> PeakRss:
        self.start = self.peak = _rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def _poll(self) -> None:
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, _rss())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())

    @property
    def rise_mb(self) -> float:
        return (self.peak - self.start) / 1e6


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _backend(model_dir: str) -> Any:
    """The actor's (or learner's) backend, its weights in memory of their own and torch warmed up, as after a while
    of acting.

    transformers maps a safetensors file's pages and reads them lazily: the weights of a freshly loaded model are
    the file's pages until first touched (a copy into them then faults each page in). An actor that has acted for a
    while holds them in memory (or on its GPU), so they are copied into memory of their own first."""
    import torch

    from policy.backends.hf import TransformersBackend
    from policy.presets import preset_for

    backend = TransformersBackend(model_dir, preset=preset_for("tiny-qwen", "infigui-g1"), dtype="bfloat16")
    with torch.no_grad():
        for p in backend.model.parameters():
            p.data = p.data.clone()
        backend.model(input_ids=torch.tensor([[1, 2, 3]]))  # a warm process, as an actor's is after acting
    return backend


def child_write(model_dir: str, store_dir: str, runs: int) -> dict[str, Any]:
    """The learner: ``runs`` versions, each after every weight changed."""
    import torch

    from train.adapters import AdapterStore

    backend = _backend(model_dir)

    class Learner:
        finetune, steps, adapter_version = "full", 0, "learner@0"

    Learner.backend = backend
    store, out = AdapterStore(store_dir, keep=2), []
    for step in range(1, runs + 1):
        with torch.no_grad():
            for p in backend.model.parameters():
                p.add_(0.01)
        Learner.steps, Learner.adapter_version = step, f"learner@{step}"
        with PeakRss() as rss:
            t0 = time.perf_counter()
            ref = store.publish(Learner)
            seconds = time.perf_counter() - t0
        out.append({"write_s": seconds, "rss_rise_mb": rss.rise_mb, "ref": ref.to_json(),
                    "bytes": sum((Path(ref.path) / n).stat().st_size for n in ref.files)})
    return {"runs": out}


def child_in_place(model_dir: str, ref_json: dict[str, Any], root: str) -> dict[str, Any]:
    from train.adapters import AdapterRef, load_verified

    backend = _backend(model_dir)
    ref = AdapterRef.from_json(ref_json)
    with PeakRss() as rss:
        times = load_verified(backend, ref, root=root)
    assert backend.adapter_version == ref.version
    return {"verify_s": times.verify_s, "load_s": times.load_s, "rss_rise_mb": rss.rise_mb}


def child_naive(model_dir: str, ref_json: dict[str, Any], root: str) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForImageTextToText

    from train.adapters import AdapterRef, verify_adapter

    backend = _backend(model_dir)  # the model the actor acts with until the new one is built
    ref = AdapterRef.from_json(ref_json)
    with PeakRss() as rss:
        t0 = time.perf_counter()
        folder = verify_adapter(ref, root=root)
        t1 = time.perf_counter()
        fresh = AutoModelForImageTextToText.from_pretrained(str(folder), dtype=torch.bfloat16).eval()
        with torch.no_grad():  # every weight read once, as the new model's first forward pass would
            for p in fresh.parameters():
                p.sum()
        t2 = time.perf_counter()
    assert fresh is not backend.model
    return {"verify_s": t1 - t0, "load_s": t2 - t1, "rss_rise_mb": rss.rise_mb}


def _run_child(*args: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"child {args[0]} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- models ------------------------------------------------------------------------------------------------------------


def build_model(size: str, folder: Path) -> int:
    """A random-init model of ``size`` in bf16 with the tiny model's tokenizer and processor files; its parameters."""
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    from policy.tiny import build_tiny_qwen25vl, byte_level_tokenizer

    build_tiny_qwen25vl(folder)  # tokenizer, chat template, image processor; the weights are replaced below
    tok = byte_level_tokenizer()
    text = dict(SIZES[size]["text"])
    mrope = text.pop("mrope_section")
    ids = {name: tok.convert_tokens_to_ids(t) for name, t in (
        ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>"))}
    config = Qwen2_5_VLConfig(
        text_config=dict(text, vocab_size=len(tok), bos_token_id=None, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id,
                         rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": mrope}),
        vision_config=dict(SIZES[size]["vision"], out_hidden_size=text["hidden_size"]),
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, **ids)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Qwen2_5_VLForConditionalGeneration(config).to(torch.bfloat16).eval()
    for stale in folder.glob("model*.safetensors*"):
        stale.unlink()
    model.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def real_parameters() -> dict[str, int]:
    """Parameters of the released models, counted on the meta device from their configs."""
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    out = {}
    for name, spec in REAL.items():
        text = dict(spec["text"], rope_parameters={"rope_type": "default", "rope_theta": 1e6,
                                                   "mrope_section": [16, 24, 24]})
        config = Qwen2_5_VLConfig(text_config=text, vision_config=spec["vision"],
                                  tie_word_embeddings=spec["tie_word_embeddings"])
        with torch.device("meta"):
            model = Qwen2_5_VLForConditionalGeneration(config)
        out[name] = sum(p.numel() for p in model.parameters())  # a tied output layer counts once
    return out


# -- the table ---------------------------------------------------------------------------------------------------------


def median(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def measure(size: str, runs: int, work: Path) -> dict[str, Any]:
    model_dir, store = work / size / "model", work / size / "adapters"
    params = build_model(size, model_dir)
    written = _run_child("write", str(model_dir), str(store), str(runs))["runs"]
    ref = written[-1]["ref"]  # the newest version is kept on disk (the last two are)
    in_place = [_run_child("in_place", str(model_dir), json.dumps(ref), str(store)) for _ in range(runs)]
    naive = [_run_child("naive", str(model_dir), json.dumps(ref), str(store)) for _ in range(runs)]
    nbytes = written[-1]["bytes"]
    row = {"size": size, "parameters": params, "version_bytes": nbytes,
           "write_s": median(written, "write_s"), "write_rss_rise_mb": median(written, "rss_rise_mb"),
           "in_place_verify_s": median(in_place, "verify_s"), "in_place_swap_s": median(in_place, "load_s"),
           "in_place_rss_rise_mb": median(in_place, "rss_rise_mb"),
           "naive_verify_s": median(naive, "verify_s"), "naive_load_s": median(naive, "load_s"),
           "naive_rss_rise_mb": median(naive, "rss_rise_mb"),
           "runs": {"write": written, "in_place": in_place, "naive": naive}}
    for r in written:
        r.pop("ref")
    for r in in_place + naive:
        r["total_s"] = r["verify_s"] + r["load_s"]
    row["in_place_total_s"], row["naive_total_s"] = median(in_place, "total_s"), median(naive, "total_s")
    shutil.rmtree(work / size, ignore_errors=True)
    return row


def extrapolate(rows: list[dict[str, Any]], params: dict[str, int]) -> list[dict[str, Any]]:
    """Versions of the real models at the largest measured size's throughput (an extrapolation, labelled so)."""
    big = max(rows, key=lambda r: r["version_bytes"])
    gb = big["version_bytes"] / 1e9
    write_gbs, swap_gbs, naive_gbs = gb / big["write_s"], gb / big["in_place_total_s"], gb / big["naive_total_s"]
    out = []
    for name, n in params.items():
        nbytes = n * 2  # bf16
        out.append({"model": name, "parameters": n, "version_bytes": nbytes,
                    "write_s": nbytes / 1e9 / write_gbs, "in_place_s": nbytes / 1e9 / swap_gbs,
                    "naive_s": nbytes / 1e9 / naive_gbs, "in_place_memory_mb": 64 * 1.048576,
                    "naive_memory_mb": nbytes / 1e6,
                    "transfer_s_1gbit": nbytes * 8 / 1e9, "transfer_s_10gbit": nbytes * 8 / 1e10,
                    "from": big["size"], "write_gb_s": write_gbs, "in_place_gb_s": swap_gbs, "naive_gb_s": naive_gbs})
    return out


def print_table(rows: list[dict[str, Any]], extra: list[dict[str, Any]]) -> None:
    print(f"{'size':>6} {'params':>9} {'version MB':>10} | {'write s':>8} {'RSS+ MB':>8} | "
          f"{'naive s':>8} {'RSS+ MB':>8} | {'verify s':>8} {'swap s':>7} {'total s':>8} {'RSS+ MB':>8} | speed-up")
    for r in rows:
        print(f"{r['size']:>6} {r['parameters'] / 1e6:>8.1f}M {r['version_bytes'] / 1e6:>10.1f} | "
              f"{r['write_s']:>8.3f} {r['write_rss_rise_mb']:>8.1f} | {r['naive_total_s']:>8.3f} "
              f"{r['naive_rss_rise_mb']:>8.1f} | {r['in_place_verify_s']:>8.3f} {r['in_place_swap_s']:>7.3f} "
              f"{r['in_place_total_s']:>8.3f} {r['in_place_rss_rise_mb']:>8.1f} | "
              f"{r['naive_total_s'] / r['in_place_total_s']:.1f}x")
    print("\nextrapolated (bf16, at the throughput measured for the largest size above):")
    for e in extra:
        print(f"  {e['model']}: {e['parameters'] / 1e9:.2f}B parameters, {e['version_bytes'] / 1e9:.1f} GB per "
              f"version; write ~{e['write_s']:.0f} s, in-place verify+swap ~{e['in_place_s']:.0f} s "
              f"(staging 64 MiB), naive ~{e['naive_s']:.0f} s (+{e['naive_memory_mb'] / 1e3:.1f} GB); HTTP to one "
              f"actor {e['transfer_s_1gbit']:.0f} s at 1 Gbit/s, {e['transfer_s_10gbit']:.0f} s at 10 Gbit/s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--sizes", default="tiny,17m,100m,300m")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "weight_swap.json"))
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        kind, *rest = args.child
        if kind == "write":
            result = child_write(rest[0], rest[1], int(rest[2]))
        else:
            result = (child_in_place if kind == "in_place" else child_naive)(rest[0], json.loads(rest[1]), rest[2])
        print(json.dumps(result))
        return
    import torch

    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    rows = []
    with tempfile.TemporaryDirectory(prefix="weight-swap-", dir=REPO / "runs" if (REPO / "runs").is_dir() else None) \
            as tmp:
        for size in sizes:
            rows.append(measure(size, args.runs, Path(tmp)))
            print(f"{size}: done", file=sys.stderr)
    extra = extrapolate(rows, real_parameters())
    print_table(rows, extra)
    out = {"machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                       "torch": torch.__version__, "python": platform.python_version()},
           "runs": args.runs, "dtype": "bfloat16", "sizes": rows, "extrapolated": extra}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()

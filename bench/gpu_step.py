"""Time of one AEPO update of a Qwen2.5-VL-3B-sized model on a GPU, and its peak memory: LoRA and full fine-tuning,
with and without gradient checkpointing, on the unshared and the shared-prefix path.

One update = the trainer's math on one group: ``--group`` responses (8, as in InfiGUI-G1) of ``--response-tokens``
tokens to one prompt holding one ``--image`` screenshot (default 1920x1080, smart-resized by the Qwen2-VL image
processor to 1932x1092, 2691 image tokens); RLOO advantages (``train.algos.rloo_advantages``); teacher-forced
log-probs (``train.algos.token_logprobs``); the PPO clipped surrogate with clip-higher 0.2/0.4 and dual-clip 3,
token-mean (``train.algos.policy_loss``); backward; gradient-norm clip 1.0; one AdamW step. As in
``train.learner.Learner`` the responses go through the model ``--micro-batch`` at a time (default 1, AEPO's micro
batch) with gradients accumulated and full logits computed; the old log-probs are the detached current ones (what
the learner uses when a sample carries no behaviour log-probs; the cost is the same either way).

Paths (``--paths``): ``unshared`` runs prompt + response through the model once per response, as above (the
learner's ``shared_prefix=False``); ``shared`` runs the prompt once and the group's responses as one batch of
continuations on its KV cache, one backward for both (``train.prefix.prefix_logprobs``, the learner's default; the
same log-probs and gradients). The shared path runs the model in eval mode as the learner does, where transformers
does not checkpoint (a checkpointed layer cannot keep a cache), so its ``+gc`` configs are reported as n/a.
``--image 1280x720 --response-tokens 40`` is the shape of issue 17's target: a 1280 x 720 screenshot (1,196 image
tokens), 8 answers of ~40 tokens.

The model has Qwen2.5-VL-3B-Instruct's shapes (text: hidden 2048, 36 layers, 16 heads, 2 KV heads, intermediate
11008, vocabulary 151936, tied embeddings; vision: depth 32, hidden 1280, out 2048) with RANDOM weights from a config
written here: nothing is downloaded. It is built directly on the device in bfloat16 (pure bf16: parameters,
gradients and AdamW states all bf16, no fp32 master copy, so full fine-tuning needs less than verl's FSDP mixed
precision would). Tokens are synthetic: Qwen's tokenizer is not available offline, so the prompt is Qwen's chat
layout (system, user turn with the image, assistant header) made of Qwen's real special-token ids around random text
ids of the InfiGUI-G1 prompt's length; the image's ``pixel_values`` and ``image_grid_thw`` come from the real Qwen2-VL
image processor run on a random screenshot. Timing does not depend on which ids they are.

Configs (``--configs``): ``lora`` (peft, rank ``--lora-rank`` 64, on the language model's q/k/v/o projections as the
learner), ``lora+gc``, ``full`` (every weight, vision tower included, as both papers), ``full+gc``; gc = gradient
(activation) checkpointing, non-reentrant. Each config gets a fresh model; the peak memory
(``torch.cuda.max_memory_allocated``, reset between configs) covers weights, gradients, optimizer state and
activations. A config that runs out of memory is reported as OOM and the run goes on. Reported: the median (and min)
wall time over ``--runs`` updates after ``--warmup`` warm-up updates, tokens per second, peak memory; a table on
stdout and JSON at ``--out`` (default bench/results/gpu_step.json).

Needs a CUDA GPU: full fine-tuning alone holds 3.75B parameters x 2 bytes x 4 (weights, gradients, two AdamW
moments) = 30 GB before any activation. ``--device cpu --tiny`` runs the same code path on a toy config, to check the
script without a GPU.

Run: .venv/bin/python bench/gpu_step.py [--image 1920x1080] [--response-tokens 256] [--runs 3]
     .venv/bin/python bench/gpu_step.py --configs lora full --paths unshared shared --image 1280x720 \
         --response-tokens 40
     .venv/bin/python bench/gpu_step.py --device cpu --tiny --image 224x224 --response-tokens 16 --runs 1
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import os
import platform
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

CONFIGS = ("lora", "lora+gc", "full", "full+gc")
PATHS = ("unshared", "shared")

# Qwen2.5-VL-3B-Instruct's shapes (its config.json), and Qwen2.5's special-token ids in the 151936-token vocabulary.
QWEN25VL_3B: dict[str, Any] = {
    "text": dict(vocab_size=151936, hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                 num_attention_heads=16, num_key_value_heads=2, max_position_embeddings=128000, rms_norm_eps=1e-6,
                 hidden_act="silu", mrope_section=[16, 24, 24]),
    "vision": dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=2048,
                   fullatt_block_indexes=[7, 15, 23, 31], window_size=112, patch_size=14, spatial_merge_size=2,
                   temporal_patch_size=2, tokens_per_second=2, hidden_act="silu"),
    "tokens": dict(endoftext=151643, im_start=151644, im_end=151645, vision_start=151652, vision_end=151653,
                   image_pad=151655, video_pad=151656),
}
# The same layout at toy size, for --tiny (CPU smoke test).
TINY: dict[str, Any] = {
    "text": dict(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=32768, rms_norm_eps=1e-6, hidden_act="silu",
                 mrope_section=[2, 3, 3]),
    "vision": dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                   fullatt_block_indexes=[1], window_size=112, patch_size=14, spatial_merge_size=2,
                   temporal_patch_size=2, tokens_per_second=2, hidden_act="silu"),
    "tokens": dict(endoftext=1000, im_start=1001, im_end=1002, vision_start=1003, vision_end=1004, image_pad=1005,
                   video_pad=1006),
}
# Text tokens of the InfiGUI-G1 prompt around the image: system message (~30) + user instruction (~60).
SYSTEM_TOKENS = 30
# AEPO rewards of typical outcomes (hit at rank 1 of 1, rank 2 of 2, miss with 1 and 2 points, collinear, ...):
# the advantages are non-zero, as in a group that teaches something.
REWARDS = (2.0, 1.5, 0.0, 0.5, -1.0, 1.7071, 0.0, 1.5774)


def parse_size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT such as 1920x1080, got {text!r}") from None
    if w <= 0 or h <= 0:
        raise argparse.ArgumentTypeError(f"image size must be positive, got {text!r}")
    return w, h


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu (cpu needs --tiny)")
    p.add_argument("--tiny", action="store_true", help="a toy config instead of the 3B shapes (smoke test)")
    p.add_argument("--image", type=parse_size, default=(1920, 1080), help="screenshot size WIDTHxHEIGHT")
    p.add_argument("--min-pixels", type=int, default=3136, help="image processor's pixel floor (Qwen default)")
    p.add_argument("--max-pixels", type=int, default=12845056, help="image processor's pixel cap (Qwen default)")
    p.add_argument("--prompt-tokens", type=int, default=60, help="text tokens of the user instruction")
    p.add_argument("--response-tokens", type=int, default=256, help="tokens per response")
    p.add_argument("--group", type=int, default=8, help="responses per prompt (AEPO: 8)")
    p.add_argument("--micro-batch", type=int, default=1, help="responses per forward/backward pass")
    p.add_argument("--configs", nargs="+", choices=CONFIGS, default=list(CONFIGS), help="which configs to time")
    p.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS),
                   help="unshared: prompt + response per response; shared: the prompt once, responses continue it")
    p.add_argument("--lora-rank", type=int, default=64)
    p.add_argument("--lora-alpha", type=int, default=128)
    p.add_argument("--attn", default="sdpa", help="attention implementation (sdpa, eager, flash_attention_2)")
    p.add_argument("--warmup", type=int, default=1, help="untimed updates first (kernels, optimizer state)")
    p.add_argument("--runs", type=int, default=3, help="timed updates per config")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--simulate-oom", choices=CONFIGS, default=None,
                   help="raise an out-of-memory error in this config's first update (tests the OOM reporting)")
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "gpu_step.json"), help="JSON results file")
    return p


# --------------------------------------------------------------------------------------------------------------------
# Model and inputs
# --------------------------------------------------------------------------------------------------------------------


def model_config(sizes: dict[str, Any]):
    """A Qwen2_5_VLConfig of ``sizes`` (fields as in transformers 5.x: ``rope_parameters`` holds the mrope sections)."""
    from transformers import Qwen2_5_VLConfig

    text = dict(sizes["text"])
    mrope = text.pop("mrope_section")
    head_dim = text["hidden_size"] // text["num_attention_heads"]
    assert 2 * sum(mrope) == head_dim, "sum(mrope_section) must be head_dim / 2"
    tok = sizes["tokens"]
    specials = dict(bos_token_id=tok["endoftext"], eos_token_id=tok["im_end"], pad_token_id=tok["endoftext"])
    text_config = dict(text, use_sliding_window=False, attention_dropout=0.0,
                       rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": mrope},
                       **specials)
    config = Qwen2_5_VLConfig(
        text_config=text_config, vision_config=dict(sizes["vision"]), image_token_id=tok["image_pad"],
        video_token_id=tok["video_pad"], vision_start_token_id=tok["vision_start"],
        vision_end_token_id=tok["vision_end"], tie_word_embeddings=True, **specials,
    )
    return config


@contextmanager
def default_dtype(dtype):
    import torch

    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def build_model(config, device, dtype, attn: str):
    """A randomly initialised model created directly on ``device`` in ``dtype`` (no CPU copy, no fp32 detour), with
    the ``attn`` attention implementation in the text model and the vision tower."""
    import torch
    from transformers import AutoModelForImageTextToText

    with torch.device(device), default_dtype(dtype):
        model = AutoModelForImageTextToText.from_config(config, attn_implementation=attn)
    # Not .to(dtype): that would also round the float32 rotary inv_freq buffers to bf16, which loading a real
    # checkpoint in bf16 does not do.
    return model.to(device)


def image_inputs(image_size: tuple[int, int], min_pixels: int, max_pixels: int, seed: int):
    """``pixel_values`` and ``image_grid_thw`` of a random screenshot through the Qwen2-VL image processor."""
    import numpy as np
    from PIL import Image

    from policy.tiny import qwen_image_processor

    w, h = image_size
    array = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    proc = qwen_image_processor(min_pixels, max_pixels)
    out = proc(images=[Image.fromarray(array)], return_tensors="pt")
    return out["pixel_values"], out["image_grid_thw"]


def prompt_ids(tokens: dict[str, int], n_image_tokens: int, instruction_tokens: int, vocab_text: int, gen):
    """Prompt token ids in Qwen's chat layout with synthetic text ids, and the modality type of each (1 = image)."""
    import torch

    def text(n: int) -> list[int]:
        return torch.randint(0, vocab_text, (n,), generator=gen).tolist()

    nl = text(1)
    ids = ([tokens["im_start"], *text(1), *nl, *text(SYSTEM_TOKENS), tokens["im_end"], *nl,
            tokens["im_start"], *text(1), *nl, tokens["vision_start"]]
           + [tokens["image_pad"]] * n_image_tokens
           + [tokens["vision_end"], *text(instruction_tokens), tokens["im_end"], *nl, tokens["im_start"], *text(1),
              *nl])
    ids_t = torch.tensor([ids], dtype=torch.long)
    return ids_t, (ids_t == tokens["image_pad"]).long()


# --------------------------------------------------------------------------------------------------------------------
# One AEPO update
# --------------------------------------------------------------------------------------------------------------------


def set_checkpointing(model, on: bool) -> None:
    """Turn non-reentrant activation checkpointing on, across transformers 5.x names."""
    if not on:
        return
    base = model_base(model)
    if hasattr(base, "activation_checkpointing_enable"):
        base.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    base.config.use_cache = False


class Update:
    """Everything one config's updates need: model, optimizer, the fixed inputs."""

    def __init__(self, model, params, batch: dict[str, Any], prompt_len: int, responses, rewards, micro_batch: int,
                 lr: float, shared: bool = False) -> None:
        import torch

        self.model, self.params = model, params
        self.batch, self.prompt_len = batch, prompt_len
        self.responses, self.rewards, self.micro_batch = responses, rewards, micro_batch
        self.optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
        self.takes_mm_types = "mm_token_type_ids" in inspect.signature(type(model_base(model)).forward).parameters
        self.shared = self._shared_prompt() if shared else None

    def _shared_prompt(self):
        """The prompt and the group's responses as the shared-prefix path takes them (rope positions computed once,
        as the learner does once per update)."""
        import torch

        from train.prefix import SharedPrompt, rope_positions

        inputs = {k: v for k, v in self.batch.items() if k != "mm_token_type_ids" or self.takes_mm_types}
        inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
        group, t = self.responses.shape
        positions = rope_positions(model_base(self.model), inputs, self.responses[:1])
        return SharedPrompt(inputs, self.responses, self.responses, (t,) * group, positions)

    def __call__(self) -> dict[str, float]:
        """One AEPO update on the group; returns the loss and gradient norm."""
        import torch

        from train.algos import rloo_advantages

        group, _ = self.responses.shape
        adv = rloo_advantages(self.rewards, torch.zeros(group, dtype=torch.long))
        self.optimizer.zero_grad(set_to_none=True)
        total = self._shared_backward(adv) if self.shared is not None else self._unshared_backward(adv)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"loss": total, "grad_norm": float(grad_norm)}

    def _shared_backward(self, adv) -> float:
        """The prompt once, the responses as one batch on its cache, one backward through both."""
        import torch

        from train.algos import policy_loss
        from train.prefix import prefix_logprobs

        logprobs = prefix_logprobs(self.model, self.shared, hf_model=model_base(self.model))
        mask = torch.ones_like(logprobs, dtype=torch.bool)
        loss, _ = policy_loss(logprobs, logprobs.detach(), adv.to(logprobs.device), mask, clip_low=0.2,
                              clip_high=0.4, dual_clip=3.0)
        loss.backward()
        return float(loss.detach())

    def _unshared_backward(self, adv) -> float:
        """Prompt + response through the model ``micro_batch`` responses at a time, gradients accumulated."""
        import torch

        from train.algos import policy_loss, token_logprobs

        group, t = self.responses.shape
        total = 0.0
        for start in range(0, group, self.micro_batch):
            n = min(self.micro_batch, group - start)
            resp = self.responses[start:start + n]
            ids = torch.cat([self.batch["input_ids"].expand(n, -1), resp], dim=1)
            inputs = {
                "input_ids": ids, "attention_mask": torch.ones_like(ids),
                "pixel_values": self.batch["pixel_values"].repeat(n, 1),
                "image_grid_thw": self.batch["image_grid_thw"].repeat(n, 1),
            }
            if self.takes_mm_types:
                inputs["mm_token_type_ids"] = torch.cat(
                    [self.batch["mm_token_type_ids"].expand(n, -1), torch.zeros_like(resp)], dim=1)
            logits = self.model(**inputs, use_cache=False).logits
            logprobs = token_logprobs(logits[:, self.prompt_len - 1: self.prompt_len - 1 + t], resp)
            mask = torch.ones_like(logprobs, dtype=torch.bool)
            loss, _ = policy_loss(logprobs, logprobs.detach(), adv[start:start + n].to(logprobs.device), mask,
                                  clip_low=0.2, clip_high=0.4, dual_clip=3.0)
            weight = n / group  # every response has t tokens: its token share
            (loss * weight).backward()
            total += float(loss.detach()) * weight
            del logits, logprobs, loss
        return total


def model_base(model):
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_config(name: str, args, config, device, dtype, inputs: dict[str, Any],
               path: str = "unshared") -> dict[str, Any]:
    """Build a fresh model for config ``name``, time its updates on ``path``; an out-of-memory error becomes an OOM
    row, a checkpointed config on the shared path an n/a row."""
    import torch

    cuda = device.type == "cuda"
    row: dict[str, Any] = {"config": name, "path": path, "lora": name.startswith("lora"),
                           "checkpointing": name.endswith("+gc")}
    if path == "shared" and row["checkpointing"]:
        return {**row, "status": "n/a", "peak_mem_gib": None,
                "error": "the shared prefix keeps a KV cache, which a checkpointed layer drops: no checkpointing"}
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    holder: dict[str, Any] = {}
    try:
        row.update(_time_config(name, args, config, device, dtype, inputs, holder, path))
        row["status"] = "ok"
    except torch.OutOfMemoryError as exc:
        row.update(status="OOM", error=str(exc).strip().splitlines()[0][:300] if str(exc).strip() else "OOM")
    finally:
        holder.clear()
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    row["peak_mem_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2) if cuda else None
    return row


def _time_config(name: str, args, config, device, dtype, inputs: dict[str, Any], holder: dict[str, Any],
                 path: str = "unshared"):
    import torch

    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    model = holder["model"] = build_model(config, device, dtype, args.attn)
    if name.startswith("lora"):
        from peft import LoraConfig, get_peft_model

        from train.learner import LORA_TARGETS

        lora = LoraConfig(r=args.lora_rank, lora_alpha=args.lora_alpha, lora_dropout=0.0,
                          target_modules=list(LORA_TARGETS), bias="none")
        model = holder["model"] = get_peft_model(model, lora)
        params = [p for n, p in model.named_parameters() if "lora_" in n]
        lr = 1e-4
    else:
        params = list(model.parameters())
        lr = 1e-6
    for p in model.parameters():
        p.requires_grad_(False)
    for p in params:
        p.requires_grad_(True)
    set_checkpointing(model, name.endswith("+gc"))
    model.train(path == "unshared")  # the shared path runs in eval mode, as the learner does
    for m in model.modules():  # no dropout anywhere: the recomputed log-probs must be deterministic
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    build_s = time.perf_counter() - t0
    update = holder["update"] = Update(model, params, inputs["batch"], inputs["prompt_len"], inputs["responses"],
                                       inputs["rewards"], args.micro_batch, lr, shared=path == "shared")
    if args.simulate_oom == name:
        raise torch.OutOfMemoryError(f"simulated out-of-memory in {name} (--simulate-oom)")
    warm = []
    for _ in range(args.warmup):
        synchronize(device)
        t = time.perf_counter()
        last = update()
        synchronize(device)
        warm.append(time.perf_counter() - t)
    times = []
    for _ in range(args.runs):
        synchronize(device)
        t = time.perf_counter()
        last = update()
        synchronize(device)
        times.append(time.perf_counter() - t)
    median = statistics.median(times)
    tokens = args.group * inputs["batch"]["input_ids"].shape[1] + args.group * args.response_tokens
    return {
        "median_s": round(median, 4), "min_s": round(min(times), 4), "runs_s": [round(t, 4) for t in times],
        "warmup_s": [round(t, 4) for t in warm], "tokens_per_s": round(tokens / median, 1),
        "trainable_params": sum(p.numel() for p in params),
        "total_params": sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n),
        "build_s": round(build_s, 2),
        "loss": round(last["loss"], 6), "grad_norm": round(last["grad_norm"], 6),
    }


# --------------------------------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if min(args.group, args.micro_batch, args.response_tokens, args.runs) < 1 or args.warmup < 0:
        parser.error("--group, --micro-batch, --response-tokens and --runs must be >= 1, --warmup >= 0")
    if args.group < 2:
        parser.error("--group must be >= 2: RLOO needs another response to compare with")

    import warnings

    import torch

    # peft reads a transformers property deprecated in 5.x on every forward; the warning says nothing about timing.
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*deprecated", category=FutureWarning)
    device = torch.device(args.device)
    if device.type not in ("cuda", "cpu"):
        parser.error(f"--device must be cuda or cpu, got {args.device!r}")
    if (problem := device_problem(device, args.tiny)) is not None:
        print(f"gpu_step: {problem}", file=sys.stderr)
        return 2
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    sizes = TINY if args.tiny else QWEN25VL_3B
    torch.manual_seed(args.seed)
    inputs, shapes = synthetic_inputs(args, sizes, device, dtype)
    config = model_config(sizes)
    model_name = "tiny (toy shapes)" if args.tiny else "Qwen2.5-VL-3B-Instruct shapes"
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    print(f"gpu_step: {model_name}, random weights, {str(dtype).removeprefix('torch.')} on {gpu or device}; image "
          f"{args.image[0]}x{args.image[1]} -> {shapes['input_size'][0]}x{shapes['input_size'][1]} "
          f"({shapes['image_tokens']} image tokens), prompt {shapes['prompt_tokens']} tokens, {args.group} x "
          f"{args.response_tokens} response tokens, micro-batch {args.micro_batch}; token ids synthetic (no "
          f"tokenizer offline), pixels from the Qwen2-VL image processor; median of {args.runs} after "
          f"{args.warmup} warm-up", file=sys.stderr)

    rows = []
    for name in args.configs:
        for path in args.paths:
            print(f"gpu_step: timing {name}, {path} ...", file=sys.stderr)
            rows.append(run_config(name, args, config, device, dtype, inputs, path))
    print_table(rows)

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = describe_run(args, rows, model=model_name, sizes=sizes, dtype=dtype, gpu=gpu, **shapes)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}", file=sys.stderr)
    return 0


def device_problem(device, tiny: bool) -> str | None:
    """Why the benchmark cannot run on ``device`` as asked (what to do instead); None when it can."""
    import torch

    if device.type == "cuda" and not torch.cuda.is_available():
        return ("no CUDA device is visible to torch (torch.cuda.is_available() is False). This benchmark times a 3B "
                "model on a GPU; on a machine without one, run the smoke test: --device cpu --tiny")
    if device.type == "cpu" and not tiny:
        return ("the 3B-sized model on a CPU would take hours per update; add --tiny for a smoke test or use "
                "--device cuda")
    return None


def synthetic_inputs(args: argparse.Namespace, sizes: dict, device, dtype) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the update's inputs on ``device``: a random screenshot through the Qwen2-VL image processor, synthetic
    prompt and response token ids, the rewards; their shapes for the report: ``input_size``, ``image_tokens``,
    ``prompt_tokens``)."""
    import torch

    gen = torch.Generator().manual_seed(args.seed)
    pixel_values, grid = image_inputs(args.image, args.min_pixels, args.max_pixels, args.seed)
    merge = sizes["vision"]["spatial_merge_size"]
    n_image_tokens = int(grid.prod()) // merge**2
    ids, mm_types = prompt_ids(sizes["tokens"], n_image_tokens, args.prompt_tokens,
                               min(sizes["tokens"].values()), gen)
    responses = torch.randint(0, min(sizes["tokens"].values()), (args.group, args.response_tokens), generator=gen)
    rewards = torch.tensor([REWARDS[i % len(REWARDS)] for i in range(args.group)])
    patch = sizes["vision"]["patch_size"]
    inputs = {
        "batch": {"input_ids": ids.to(device), "mm_token_type_ids": mm_types.to(device),
                  "pixel_values": pixel_values.to(device=device, dtype=dtype), "image_grid_thw": grid.to(device)},
        "prompt_len": ids.shape[1], "responses": responses.to(device), "rewards": rewards,
    }
    shapes = {"input_size": (int(grid[0, 2]) * patch, int(grid[0, 1]) * patch), "image_tokens": n_image_tokens,
              "prompt_tokens": ids.shape[1]}
    return inputs, shapes


def describe_run(args: argparse.Namespace, rows: list[dict[str, Any]], *, model: str, sizes: dict, dtype, gpu,
                 input_size: tuple[int, int], image_tokens: int, prompt_tokens: int) -> dict[str, Any]:
    """What gpu_step writes to ``--out``: the setting, the machine and the timed rows."""
    import peft
    import torch
    import transformers

    params_total = next((row["total_params"] for row in rows if row["status"] == "ok"), None)
    return {
        "benchmark": "gpu_step",
        "model": model, "weights": "random", "sizes": {k: sizes[k] for k in ("text", "vision")},
        "params": params_total, "dtype": str(dtype).removeprefix("torch."), "attn": args.attn,
        "image": list(args.image), "input_size": list(input_size), "image_tokens": image_tokens,
        "prompt_tokens": prompt_tokens, "response_tokens": args.response_tokens, "group": args.group,
        "micro_batch": args.micro_batch, "paths": args.paths, "lora_rank": args.lora_rank, "lora_alpha": args.lora_alpha,
        "warmup": args.warmup, "runs": args.runs,
        "inputs": "synthetic token ids in Qwen's chat layout (no tokenizer offline); pixel_values and image_grid_thw "
                  "from the Qwen2-VL image processor on a random screenshot",
        "update": "RLOO advantages, PPO clip 0.2/0.4, dual-clip 3, token-mean, grad clip 1.0, AdamW (wd 0.01)",
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch": torch.__version__,
                    "transformers": transformers.__version__, "peft": peft.__version__, "gpu": gpu,
                    "cuda": torch.version.cuda},
        "results": rows,
    }


def print_table(rows: list[dict[str, Any]]) -> None:
    header = (f"{'config':<8} | {'path':<8} | {'status':<6} | {'median s':>8} | {'min s':>7} | {'tokens/s':>9} | "
              f"{'peak GiB':>8} | trainable")
    print(header)
    print("-" * len(header))
    for r in rows:
        mem = _fmt_mem(r["peak_mem_gib"])
        lead = f"{r['config']:<8} | {r.get('path', 'unshared'):<8}"
        if r["status"] == "ok":
            print(f"{lead} | {'ok':<6} | {r['median_s']:>8.3f} | {r['min_s']:>7.3f} | "
                  f"{r['tokens_per_s']:>9.0f} | {mem:>8} | {r['trainable_params'] / 1e6:.1f}M")
        else:
            print(f"{lead} | {r['status']:<6} | {'-':>8} | {'-':>7} | {'-':>9} | {mem:>8} | {r.get('error', '')}")


def _fmt_mem(gib: float | None) -> str:
    return "-" if gib is None else f"{gib:.1f}"


if __name__ == "__main__":
    sys.exit(main())

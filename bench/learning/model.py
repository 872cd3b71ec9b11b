"""The benchmark's model: a Qwen2.5-VL of about 1M parameters, random init, written by ``policy.tiny``'s builder
(byte-level tokenizer, Qwen's chat template, image processor config), with this benchmark's sizes."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

from policy import tiny

SIZES = {
    "text": dict(hidden_size=128, intermediate_size=384, num_hidden_layers=3, num_attention_heads=4,
                 num_key_value_heads=2, mrope_section=[4, 6, 6]),
    "vision": dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=2, fullatt_block_indexes=[1]),
}
VARIANT = "bench-1m"


def build_model(path: str | Path, seed: int) -> Path:
    """Write the random ~1M-parameter Qwen2.5-VL to ``path`` (deterministic for a seed)."""
    with mock.patch.dict(tiny.VARIANTS, {VARIANT: SIZES}):  # registered only for this build
        return tiny.build_tiny_qwen25vl(path, seed=seed, variant=VARIANT, min_pixels=4 * 28 * 28,
                                        max_pixels=224 * 224)


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())

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

LARGER = {
    "4m": {
        "text": dict(hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=8,
                     num_key_value_heads=4, mrope_section=[4, 6, 6]),
        "vision": dict(depth=3, hidden_size=128, intermediate_size=256, num_heads=4, fullatt_block_indexes=[2]),
    },
}
"""Larger sizes for probing (``bench.learning.probe --size``): 4,325,120 parameters; 300 probe steps took 26 minutes
on the 2-core CPU beside other runs, against 12 for the ~1M model (docs/benchmarks.md, "Setting hard"). The benchmark
itself uses ``SIZES``."""


def build_model(path: str | Path, seed: int, size: str = "1m") -> Path:
    """Write the random Qwen2.5-VL of ``size`` (``"1m"``: the benchmark's ~1M parameters, or a key of ``LARGER``)
    to ``path`` (deterministic for a seed)."""
    sizes = SIZES if size == "1m" else LARGER.get(size)
    if sizes is None:
        raise ValueError(f"size must be one of {['1m', *LARGER]}, got {size!r}")
    variant = f"bench-{size}"
    with mock.patch.dict(tiny.VARIANTS, {variant: sizes}):  # registered only for this build
        return tiny.build_tiny_qwen25vl(path, seed=seed, variant=variant, min_pixels=4 * 28 * 28,
                                        max_pixels=224 * 224)


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())

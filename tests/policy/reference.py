"""Reference model-input sizes from transformers itself, never from handeye's own code.

``reference_input_size`` runs transformers' Qwen2-VL image processor (the PIL backend, which needs
no torchvision) on an image of the frame's size, after the family's documented pre-resize, and
reads the resized size from the processor's ``image_grid_thw``: (w', h') = (grid_w * 14, grid_h * 14).
``reference_smart_resize`` is transformers' own function.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize as reference_smart_resize

__all__ = ["reference_input_size", "reference_smart_resize", "GOLDEN_SIZES"]

#: frame sizes the goldens cover: phone portrait, FHD, QHD, 4K, and one where rounding half up and
#: half to even disagree (1036 / 28 = 37.0 and 1050 / 28 = 37.5: Python rounds 37.5 to 38 -> 1064,
#: half-up would too; 1022 / 28 = 36.5 -> half-even 36 (1008), half-up 37 (1036): the UI-TARS-desktop bug)
GOLDEN_SIZES = [(1080, 2400), (1920, 1080), (2560, 1440), (3840, 2160), (1000, 1022)]


@lru_cache(maxsize=None)
def _processor(min_pixels: int, max_pixels: int) -> Qwen2VLImageProcessorPil:
    return Qwen2VLImageProcessorPil(size={"shortest_edge": min_pixels, "longest_edge": max_pixels})


def reference_input_size(width: int, height: int, min_pixels: int, max_pixels: int,
                         pre: str = "none", pre_pixels: int = 0) -> tuple[int, int]:
    """(w', h') the model sees, as transformers' processor computes it."""
    if pre != "none" and width * height > pre_pixels:
        scale = math.sqrt(pre_pixels / (width * height))
        if pre == "round_down_to":  # InfiGUI-G1 eval: round
            width, height = round(width * scale), round(height * scale)
        else:  # GUI-R1 loader: int() truncation
            width, height = int(width * scale), int(height * scale)
    image = np.zeros((height, width, 3), np.uint8)
    out = _processor(min_pixels, max_pixels)(images=[image], return_tensors="np")
    _, grid_h, grid_w = (int(v) for v in out["image_grid_thw"][0])
    return grid_w * 14, grid_h * 14

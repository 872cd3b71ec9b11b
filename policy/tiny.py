"""A tiny, randomly initialised Qwen2.5-VL built from a config, offline: for tests, benchmarks and
docs. It is NOT a real model; its answers are noise unless decoding is constrained (see
``policy.backends.hf.ForceTextLogitsProcessor``).

What ``build_tiny_qwen25vl`` writes is an ordinary transformers checkpoint directory:

- ``config.json`` / ``model.safetensors`` / ``generation_config.json``: a ``Qwen2_5_VLForConditionalGeneration``
  with random weights (variant "tiny": ~200k parameters; "small": ~17M).
- ``tokenizer.json`` / ``tokenizer_config.json``: a byte-level BPE with no merges, whose vocabulary is
  the 256 byte characters of GPT-2's ``bytes_to_unicode`` plus ``<|endoftext|>`` and Qwen's six chat
  and vision special tokens, so any UTF-8 text is encodable and round-trips exactly.
- ``chat_template.jinja``: Qwen's ChatML layout, with ``<|vision_start|><|image_pad|><|vision_end|>``
  for each image part.
- ``preprocessor_config.json`` and ``processor_config.json``: Qwen2-VL image processor settings (patch 14,
  merge 2, the preset's pixel budget), with ``processor_class`` Qwen2_5_VLProcessor, so that
  ``AutoProcessor`` (e.g. in ``transformers serve``) builds the real processor where torchvision is
  installed.

Without torchvision, ``Qwen2_5_VLProcessor`` cannot be built (its video processor needs it) and
``AutoProcessor`` silently returns just the tokenizer; ``load_tiny_processor`` (and the
transformers backend) build the processor from its parts instead: see ``image_only_processor``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # heavy imports stay inside the functions
    from transformers import ProcessorMixin

__all__ = [
    "CHAT_TEMPLATE",
    "SPECIAL_TOKENS",
    "VARIANTS",
    "build_tiny_qwen25vl",
    "byte_level_tokenizer",
    "image_only_processor",
    "load_tiny_processor",
    "tiny_qwen25vl_config",
]

SPECIAL_TOKENS = ("<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
"""Qwen's chat and vision special tokens (after ``<|endoftext|>``, the padding token)."""

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image' in part %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}"
    "{% endfor %}{% endif %}"
    "<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""Qwen2.5-VL's ChatML layout (default system message included), without tools or video."""

VARIANTS: dict[str, dict[str, dict[str, Any]]] = {
    "tiny": {  # ~199k parameters: builds, loads and trains in seconds on a CPU, for the tests
        "text": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, mrope_section=[2, 3, 3]),
        "vision": dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, fullatt_block_indexes=[1]),
    },
    "small": {  # ~17M parameters
        "text": dict(hidden_size=512, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=8,
                     num_key_value_heads=2, mrope_section=[8, 12, 12]),
        "vision": dict(depth=4, hidden_size=256, intermediate_size=512, num_heads=4, fullatt_block_indexes=[3]),
    },
    "3b": {  # Qwen2.5-VL-3B-Instruct's shapes with this byte-level vocabulary: ~3.4B parameters, needs a GPU
        "text": dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
                     num_key_value_heads=2, mrope_section=[16, 24, 24]),
        "vision": dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16,
                       fullatt_block_indexes=[7, 15, 23, 31], window_size=112),
    },
}
"""Model sizes by name. Rules: ``sum(mrope_section) == head_dim / 2``; vision ``out_hidden_size`` is
the text ``hidden_size``."""


def byte_level_tokenizer(chat_template: str = CHAT_TEMPLATE):
    """A Qwen2Tokenizer over single bytes (no merges): 256 byte tokens, ``<|endoftext|>`` (pad) and
    Qwen's specials (``<|im_end|>`` is EOS): 263 tokens."""
    from transformers import Qwen2Tokenizer
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    byte_chars = bytes_to_unicode()
    vocab = {byte_chars[b]: b for b in range(256)}
    vocab["<|endoftext|>"] = 256
    return Qwen2Tokenizer(
        vocab=vocab, merges=[], extra_special_tokens=list(SPECIAL_TOKENS), chat_template=chat_template,
        eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token=None, bos_token=None,
    )


def tiny_qwen25vl_config(tokenizer, variant: str = "tiny"):
    """A Qwen2_5_VLConfig of ``variant``'s size whose special token ids are ``tokenizer``'s."""
    from transformers import Qwen2_5_VLConfig

    try:
        sizes = VARIANTS[variant]
    except KeyError:
        raise ValueError(f"unknown tiny model variant {variant!r}; use one of {', '.join(VARIANTS)}") from None
    text = dict(sizes["text"])
    mrope = text.pop("mrope_section")
    head_dim = text["hidden_size"] // text["num_attention_heads"]
    if 2 * sum(mrope) != head_dim:
        raise ValueError(f"variant {variant!r}: sum(mrope_section)={sum(mrope)} must be head_dim/2={head_dim // 2}")
    ids = {name: tokenizer.convert_tokens_to_ids(tok) for name, tok in (
        ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>"))}
    specials = dict(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    text_config = dict(
        text, vocab_size=len(tokenizer), bos_token_id=None,
        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": mrope}, **specials,
    )
    vision_config = dict(sizes["vision"], out_hidden_size=text["hidden_size"])
    return Qwen2_5_VLConfig(text_config=text_config, vision_config=vision_config, **ids, **specials)


def image_only_processor(image_processor, tokenizer, chat_template: str | None = None) -> ProcessorMixin:
    """A Qwen2.5-VL processor without a video processor, which would need torchvision.

    ``Qwen2_5_VLProcessor`` lists ``video_processor`` among its attributes and fails to build
    without torchvision; this subclass declares only the image processor and tokenizer. Image
    handling (``<|image_pad|>`` expansion, ``image_grid_thw``, ``mm_token_type_ids``) is the
    real class's.
    """
    from transformers.models.qwen2_5_vl.processing_qwen2_5_vl import Qwen2_5_VLProcessor

    class ImageOnlyQwen25VLProcessor(Qwen2_5_VLProcessor):
        @classmethod
        def get_attributes(cls) -> list[str]:
            return ["image_processor", "tokenizer"]

        def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs: Any) -> None:
            super().__init__(image_processor, tokenizer, None, chat_template=chat_template, **kwargs)

    template = chat_template if chat_template is not None else getattr(tokenizer, "chat_template", None)
    return ImageOnlyQwen25VLProcessor(image_processor=image_processor, tokenizer=tokenizer, chat_template=template)


def qwen_image_processor(min_pixels: int, max_pixels: int, path: str | Path | None = None):
    """Qwen2-VL's PIL image processor (no torchvision) with a pixel budget, from ``path``'s
    ``preprocessor_config.json`` when given."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    size = {"shortest_edge": int(min_pixels), "longest_edge": int(max_pixels)}
    if path is None:
        return Qwen2VLImageProcessorPil(size=size)
    return Qwen2VLImageProcessorPil.from_pretrained(str(path), size=size)


def build_tiny_qwen25vl(path: str | Path, seed: int = 0, *, variant: str = "tiny",
                        min_pixels: int = 4 * 28 * 28, max_pixels: int = 16384 * 28 * 28,
                        dtype: str = "float32") -> Path:
    """Write a randomly initialised Qwen2.5-VL of ``variant``'s size, with its tokenizer, chat
    template and image processor config, to the directory ``path``; return it.

    Deterministic: the same seed gives the same weights (the global torch RNG is left as it was).
    The pixel budget is only the saved default; the transformers backend applies its preset's.
    For tests, benchmarks and docs: the weights are random, not a real model.
    """
    import torch
    from transformers import Qwen2_5_VLForConditionalGeneration

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = byte_level_tokenizer()
    config = tiny_qwen25vl_config(tokenizer, variant)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2_5_VLForConditionalGeneration(config)
    model = model.to(getattr(torch, dtype)).eval()
    model.generation_config.do_sample = False
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    qwen_image_processor(min_pixels, max_pixels).save_pretrained(out)
    _write_processor_class(out)
    return out


def _write_processor_class(out: Path) -> None:
    """Point ``AutoProcessor`` at the real Qwen2_5_VLProcessor (buildable where torchvision is)."""
    proc = {"processor_class": "Qwen2_5_VLProcessor"}
    (out / "processor_config.json").write_text(json.dumps(proc, indent=2) + "\n")
    tok_cfg_path = out / "tokenizer_config.json"
    tok_cfg = json.loads(tok_cfg_path.read_text())
    tok_cfg["processor_class"] = "Qwen2_5_VLProcessor"
    tok_cfg_path.write_text(json.dumps(tok_cfg, indent=2, ensure_ascii=False) + "\n")
    pre_path = out / "preprocessor_config.json"
    pre = json.loads(pre_path.read_text())
    pre["processor_class"] = "Qwen2_5_VLProcessor"
    pre_path.write_text(json.dumps(pre, indent=2) + "\n")


def load_tiny_processor(path: str | Path, *, min_pixels: int | None = None,
                        max_pixels: int | None = None) -> ProcessorMixin:
    """The image + text processor of a directory written by ``build_tiny_qwen25vl`` (or any
    Qwen2/2.5-VL checkpoint), built from its parts so it works without torchvision. The pixel
    budget defaults to the saved one."""
    from transformers import AutoTokenizer

    path = Path(path)
    pre = json.loads((path / "preprocessor_config.json").read_text())
    size = pre.get("size") or {}
    lo = min_pixels if min_pixels is not None else pre.get("min_pixels") or size.get("shortest_edge", 4 * 28 * 28)
    hi = max_pixels if max_pixels is not None else pre.get("max_pixels") or size.get("longest_edge", 16384 * 28 * 28)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    return image_only_processor(qwen_image_processor(lo, hi, path), tokenizer)

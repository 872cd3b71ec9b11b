"""Model presets: everything handeye must know about a model to talk to it and map its clicks.

One registry keyed by model id. A preset names the model's family (its prompt builder and output
parser in ``policy.formats``), the processor's pixel budget, any pre-resize the family applies
before the processor, how its coordinates are meant, the prompt variant, and decoding defaults
taken from the family's own inference scripts. ``preset_for(model_id, fmt=...)`` serves ids that
are not in the registry (a fine-tune, a local path) with a family's defaults.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, replace

from policy.coords import MAX_PIXELS, MIN_PIXELS, CoordMode, ModelSpace, PreResize, pre_resize, smart_resize
from policy.errors import UnknownModel


@dataclass(frozen=True, slots=True)
class Decoding:
    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 1024
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0


@dataclass(frozen=True, slots=True)
class ModelPreset:
    model_id: str
    family: str
    """qwen2.5-vl, infigui-g1, gui-r1 or ui-tars (see policy.formats.FORMATS)."""
    min_pixels: int = MIN_PIXELS
    max_pixels: int = MAX_PIXELS
    pre_resize: PreResize = PreResize.NONE
    pre_resize_pixels: int = 0
    coord_mode: CoordMode = CoordMode.ABSOLUTE
    variant: str = ""
    """The family's prompt variant (qwen2.5-vl: grounding / computer_use / mobile_use; infigui-g1:
    think / no_think; gui-r1: high / low or a benchmark's action list; ui-tars: computer / mobile /
    grounding)."""
    grounding_variant: str | None = None
    """The variant that asks for one target's location, which grounding benchmarks (``agent eval --suite
    screenspot``) prompt with unless ``model.variant`` is set; None: the default variant already does (InfiGUI-G1)."""
    version: str = ""
    """Family version where the grammar differs (ui-tars: "1.5" or "1")."""
    decoding: Decoding = field(default_factory=Decoding)
    history_images: int = 1
    """How many screenshots (the current one included) the family was trained to see."""
    notes: str = ""

    def input_size(self, frame_size: tuple[int, int]) -> tuple[int, int]:
        """(w', h') of the image the model sees for a frame of ``frame_size`` (W, H)."""
        w, h = pre_resize(frame_size[0], frame_size[1], self.pre_resize, self.pre_resize_pixels)
        h_bar, w_bar = smart_resize(h, w, min_pixels=self.min_pixels, max_pixels=self.max_pixels)
        return w_bar, h_bar

    def space(self, frame_size: tuple[int, int]) -> ModelSpace:
        return ModelSpace(frame_size, self.input_size(frame_size), self.coord_mode)


_QWEN_DECODING = Decoding(temperature=0.0, max_new_tokens=512)
_INFIGUI_DECODING = Decoding(temperature=0.0, max_new_tokens=1024)
_GUIR1_DECODING = Decoding(temperature=0.0, top_p=0.001, repetition_penalty=1.05, max_new_tokens=1024)
_UITARS_DECODING = Decoding(temperature=0.0, top_p=0.7, max_new_tokens=512)


def _qwen(model_id: str) -> ModelPreset:
    return ModelPreset(model_id, "qwen2.5-vl", variant="computer_use", grounding_variant="grounding",
                       decoding=_QWEN_DECODING)


def _infigui(model_id: str) -> ModelPreset:
    return ModelPreset(
        model_id, "infigui-g1", pre_resize=PreResize.ROUND_DOWN_TO, pre_resize_pixels=5600 * 28 * 28,
        variant="think", decoding=_INFIGUI_DECODING,
        notes="evaluation downscales images above 5600*28*28 px before smart_resize",
    )


def _guir1(model_id: str) -> ModelPreset:
    return ModelPreset(
        model_id, "gui-r1", pre_resize=PreResize.TRUNCATE_TO, pre_resize_pixels=1_258_291,
        variant="high", grounding_variant="screenspot", decoding=_GUIR1_DECODING,
        notes="trained on images capped at 1,258,291 px (int-truncated scale); the same cap is applied at run time",
    )


def _uitars15(model_id: str) -> ModelPreset:
    return ModelPreset(
        model_id, "ui-tars", min_pixels=100 * 28 * 28, max_pixels=16384 * 28 * 28, variant="computer",
        grounding_variant="grounding", version="1.5", decoding=_UITARS_DECODING, history_images=5,
    )


def _uitars1(model_id: str) -> ModelPreset:
    return ModelPreset(
        model_id, "ui-tars", min_pixels=MIN_PIXELS, max_pixels=2700 * 28 * 28, coord_mode=CoordMode.RELATIVE_1000,
        variant="computer", grounding_variant="grounding", version="1", decoding=_UITARS_DECODING, history_images=5,
        notes="Qwen2-VL based: coordinates on a 0-1000 grid",
    )


PRESETS: dict[str, ModelPreset] = {
    p.model_id: p
    for p in (
        _qwen("Qwen/Qwen2.5-VL-3B-Instruct"),
        _qwen("Qwen/Qwen2.5-VL-7B-Instruct"),
        _qwen("Qwen/Qwen2.5-VL-32B-Instruct"),
        _qwen("Qwen/Qwen2.5-VL-72B-Instruct"),
        _infigui("InfiX-ai/InfiGUI-G1-3B"),
        _infigui("InfiX-ai/InfiGUI-G1-7B"),
        _guir1("ritzz-ai/GUI-R1-3B"),
        _guir1("ritzz-ai/GUI-R1-7B"),
        _uitars15("ByteDance-Seed/UI-TARS-1.5-7B"),
        _uitars1("bytedance-research/UI-TARS-2B-SFT"),
        _uitars1("bytedance-research/UI-TARS-7B-SFT"),
        _uitars1("bytedance-research/UI-TARS-7B-DPO"),
        _uitars1("bytedance-research/UI-TARS-72B-SFT"),
        _uitars1("bytedance-research/UI-TARS-72B-DPO"),
    )
}

#: what ``--format`` accepts, each with the preset an unknown model id gets
FAMILY_DEFAULTS: dict[str, ModelPreset] = {
    "qwen2.5-vl": _qwen("qwen2.5-vl"),
    "infigui-g1": _infigui("infigui-g1"),
    "gui-r1": _guir1("gui-r1"),
    "ui-tars": _uitars15("ui-tars"),
    "ui-tars-1.5": _uitars15("ui-tars-1.5"),
    "ui-tars-v1": _uitars1("ui-tars-v1"),
}


def find_preset(model_id: str) -> ModelPreset | None:
    """The registry's preset for an id; the org prefix and case may be left out ("ui-tars-1.5-7b")."""
    if model_id in PRESETS:
        return PRESETS[model_id]
    short = model_id.rstrip("/").rsplit("/", 1)[-1].lower()
    return next((p for p in PRESETS.values() if p.model_id.rsplit("/", 1)[-1].lower() == short), None)


def preset_for(model_id: str, fmt: str | None = None, **overrides: object) -> ModelPreset:
    """The preset for ``model_id``; ``fmt`` (a family name or a registered id) serves ids not in the
    registry and wins over the registry when given. ``overrides`` replace preset fields."""
    if fmt:
        base = FAMILY_DEFAULTS.get(fmt.lower()) or find_preset(fmt)
        if base is None:
            raise UnknownModel(f"unknown format {fmt!r}; use one of {', '.join(FAMILY_DEFAULTS)} or a registered model id")
        preset = replace(base, model_id=model_id or base.model_id)
    else:
        found = find_preset(model_id) or FAMILY_DEFAULTS.get(model_id.lower())
        if found is None:
            close = difflib.get_close_matches(model_id, list(PRESETS), n=3, cutoff=0.4)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise UnknownModel(
                f"no preset for model {model_id!r}{hint}. For another model, name its family with "
                f"--format ({', '.join(FAMILY_DEFAULTS)})"
            )
        preset = found
    return replace(preset, **overrides) if overrides else preset  # type: ignore[arg-type]

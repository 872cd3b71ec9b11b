"""The ``[model]`` settings both config files share: which model, its family, prompt variant, pixel budget, where it
runs and the adapter loaded on it.

``agent run`` / ``eval`` / ``record`` read ``config.toml``'s ``[model]`` into ``agent.config.ModelConfig`` (these
fields, plus how a served model is reached and how many answers are sampled); ``agent train`` / ``learner`` /
``actor`` read the training file's into ``train.config.TrainModelConfig`` (these, plus how it is fine-tuned). The
model is ``model.id`` in both. A field left unset (None) takes the preset's value; ``config.toml`` shows such a
field as a comment, and ``--set model.max_pixels=none`` unsets it again.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, ClassVar

__all__ = ["ModelSettings"]


@dataclass(frozen=True, slots=True)
class ModelSettings:
    RENAMED: ClassVar[dict[str, str]] = {"path": "id"}
    """Keys an older config file may use, and the key that holds their value now (the loader says so)."""

    id: str = ""
    """Model: a Hugging Face id or a local folder (its preset gives the family, pixel budget and decoding), or for agent run / eval the run folder of agent train (what it was trained with comes from the run, docs/training.md); "tiny" builds the tiny random test model (training only)."""
    format: str = ""
    """Model family for ids not in the preset registry (qwen2.5-vl, infigui-g1, gui-r1, ui-tars, ui-tars-1.5, ui-tars-v1)."""
    variant: str = ""
    """Prompt variant, overriding the preset's (see docs/coordinates.md); empty = the preset's."""
    min_pixels: int | None = field(default=None, metadata={"was": 0})
    """Processor min_pixels, overriding the preset's; unset = the preset's."""
    max_pixels: int | None = field(default=None, metadata={"was": 0})
    """Processor max_pixels, overriding the preset's; unset = the preset's."""
    device: str = "cpu"
    """Torch device (cpu, cuda, cuda:1, mps) for models in this process."""
    dtype: str = "auto"
    """Weights dtype (auto, bfloat16, float16, float32)."""
    adapter: str = ""
    """A LoRA adapter folder loaded on the model (agent run / eval: or the run folder that wrote it, whose base model, family, prompt variant and pixel budget then fill what is unset; agent train: the adapter trained further, e.g. the SFT stage's)."""

    def __post_init__(self) -> None:
        from policy.presets import FAMILY_DEFAULTS

        if self.format and self.format.lower() not in FAMILY_DEFAULTS:
            close = difflib.get_close_matches(self.format.lower(), list(FAMILY_DEFAULTS), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"format {self.format!r} is not a model family{hint}; use one of {', '.join(FAMILY_DEFAULTS)}")
        for name in ("min_pixels", "max_pixels"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1, got {value} (leave it unset for the preset's)")
        if self.min_pixels is not None and self.max_pixels is not None and self.min_pixels > self.max_pixels:
            raise ValueError(f"need min_pixels <= max_pixels, got {self.min_pixels} and {self.max_pixels}")

    def preset_overrides(self) -> dict[str, Any]:
        """The preset fields these settings override (variant, pixel budget: those that are set)."""
        out: dict[str, Any] = {}
        if self.variant:
            out["variant"] = self.variant
        if self.min_pixels is not None:
            out["min_pixels"] = self.min_pixels
        if self.max_pixels is not None:
            out["max_pixels"] = self.max_pixels
        return out

    def preset(self, screen: str = "") -> Any:
        """The resolved ``ModelPreset`` (registry entry or family defaults, with these overrides). ``screen`` (the
        device kind's: "computer", "phone") picks the variant the family uses on it (``policy.formats.on_screen``),
        unless ``variant`` is set: a phone gets the phone prompt, whose action space has back, home and apps."""
        from policy.formats import on_screen
        from policy.presets import preset_for

        preset = preset_for(self.id or self.format, self.format or None, **self.preset_overrides())
        return on_screen(preset, screen) if screen and not self.variant else preset

"""Model families: each format builds its prompts, parses its answers, writes the answers SFT teaches and says how a
reward reads them (see ``policy.formats.base``). ``FORMAT_CLASSES`` registers them: a new family is its module, one
line here and its presets (``policy.presets``).

Families are imported on first use, so ``import policy.formats`` stays light.
"""

from __future__ import annotations

import importlib
from dataclasses import replace

from policy.formats.base import (AnswerForm, Backbone, ModelFormat, Parsed, Prompt, ReleasedAnswer,
                                 ReleasedScripts)
from policy.presets import ModelPreset

FORMAT_CLASSES = {
    "qwen2.5-vl": "policy.formats.qwen25vl:Qwen25VLFormat",
    "infigui-g1": "policy.formats.infigui:InfiGuiG1Format",
    "gui-r1": "policy.formats.guir1:GuiR1Format",
    "ui-tars": "policy.formats.uitars:UiTarsFormat",
}


def get_format(family: str) -> ModelFormat:
    """The prompt builder and parser of a family (``ModelPreset.family``)."""
    try:
        module, cls = FORMAT_CLASSES[family].split(":")
    except KeyError:
        raise KeyError(f"no model format {family!r}; known: {', '.join(FORMAT_CLASSES)}") from None
    return getattr(importlib.import_module(module), cls)()


def on_screen(preset: ModelPreset, screen: str) -> ModelPreset:
    """``preset`` with the prompt variant its family uses on a ``screen`` ("computer", "phone": what the device kind
    shows, ``devices.registry``'s ``DeviceKindSpec.screen``); unchanged for a family with one prompt for every
    screen. A variant the user set (``model.variant``) is not this function's to change: callers skip it then."""
    variant = get_format(preset.family).screen_variants.get(screen)
    return preset if variant is None or variant == preset.variant else replace(preset, variant=variant)


__all__ = ["FORMAT_CLASSES", "on_screen", "AnswerForm", "Backbone", "ModelFormat", "Parsed", "Prompt", "ReleasedAnswer",
           "ReleasedScripts", "get_format"]

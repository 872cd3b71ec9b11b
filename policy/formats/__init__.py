"""Model families: prompt builders and output parsers (see ``policy.formats.base``).

Families are imported on first use, so ``import policy.formats`` stays light.
"""

from __future__ import annotations

import importlib

from policy.formats.base import ModelFormat, Parsed, Prompt

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


__all__ = ["FORMAT_CLASSES", "ModelFormat", "Parsed", "Prompt", "get_format"]

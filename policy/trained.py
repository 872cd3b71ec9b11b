"""What a training run's weights were trained with, written beside them, so that using them restates nothing.

``agent train`` (and an online session) exports its final weights to ``RUN_DIR/adapter`` (a LoRA adapter) or
``RUN_DIR/model`` (a full fine-tune) and writes ``handeye.json`` in that folder::

    {"schema": 1, "finetune": "lora", "base_model": "Qwen/Qwen2.5-VL-3B-Instruct", "format": "infigui-g1",
     "variant": "think", "min_pixels": 3136, "max_pixels": 12845056}

``restore_trained(settings)`` reads it back at run time: ``model.id`` naming a run folder (or its ``model/``
folder), or ``model.adapter`` naming an adapter folder (or its run folder), gives the weights to load (a LoRA
adapter's base model comes from the file when ``model.id`` is empty), and the family, prompt variant and pixel
budget the model was trained with fill whichever of ``model.format``, ``model.variant``, ``model.min_pixels`` and
``model.max_pixels`` are unset. A setting given explicitly still wins. A variant that is the family's prompt for a
screen (``ModelFormat.screen_variants``: UI-TARS's computer / mobile) is left to the device, which picks its
screen's prompt as for any model (``ModelSettings.preset``). Folders without the file (written before it existed,
or by another tool) load as before: the settings decide.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

from policy.errors import TrainedSettingsError
from policy.model_config import ModelSettings
from policy.presets import FAMILY_DEFAULTS, ModelPreset

__all__ = ["SETTINGS_FILE", "Finetune", "TrainedSettings", "find_trained", "restore_trained"]

SETTINGS_FILE = "handeye.json"
"""The file beside a run's exported weights."""
SCHEMA = 1
"""``handeye.json``'s format; a file of a later one is refused (written by a newer handeye)."""

S = TypeVar("S", bound=ModelSettings)
log = logging.getLogger(__name__)


class Finetune(Enum):
    """How the weights were trained, which says what their folder holds."""

    LORA = "lora"
    """A peft LoRA adapter: loaded on its base model."""
    FULL = "full"
    """Every weight: the folder is a whole model with its processor."""

    @property
    def folder(self) -> str:
        """The name of the folder a run exports these weights to."""
        return "adapter" if self is Finetune.LORA else "model"


@dataclass(frozen=True, slots=True)
class TrainedSettings:
    """``handeye.json``: what the weights beside it were trained with (see the module docstring)."""

    finetune: Finetune
    base_model: str
    """The model training started from: a hub id, an absolute folder, or a folder relative to the weights' folder
    (one inside the run folder, like the tiny test model's ``../tiny-model``)."""
    format: str
    """The family's name as ``--format`` takes it (``policy.presets.FAMILY_DEFAULTS``)."""
    variant: str
    """The prompt variant the training prompts used."""
    min_pixels: int
    max_pixels: int

    @classmethod
    def of(cls, preset: ModelPreset, finetune: str, base_model: str) -> TrainedSettings:
        """The settings of weights trained on prompts of ``preset`` from ``base_model``."""
        name = next(n for n, p in FAMILY_DEFAULTS.items() if (p.family, p.version) == (preset.family, preset.version))
        return cls(Finetune(finetune), base_model, name, preset.variant, preset.min_pixels, preset.max_pixels)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "finetune": self.finetune.value, "base_model": self.base_model,
                "format": self.format, "variant": self.variant, "min_pixels": self.min_pixels,
                "max_pixels": self.max_pixels}

    def write(self, folder: str | Path) -> Path:
        """Write ``folder/handeye.json`` under a temporary name, then rename it: never half a file."""
        path = Path(folder) / SETTINGS_FILE
        tmp = path.with_name(f".{SETTINGS_FILE}.tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, path)
        return path

    @classmethod
    def read(cls, folder: str | Path) -> TrainedSettings | None:
        """``folder/handeye.json``, or None when there is none; ``TrainedSettingsError`` when it cannot be read."""
        path = Path(folder) / SETTINGS_FILE
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            schema = data["schema"]
            if not isinstance(schema, int) or schema > SCHEMA:
                raise TrainedSettingsError(f"{path} has schema {schema!r}, this handeye reads schema {SCHEMA}: "
                                           f"upgrade handeye, or give the settings by hand and remove the file")
            out = cls(Finetune(data["finetune"]), str(data["base_model"]), str(data["format"]), str(data["variant"]),
                      int(data["min_pixels"]), int(data["max_pixels"]))
        except TrainedSettingsError:
            raise
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise TrainedSettingsError(f"{path} cannot be read ({type(exc).__name__}: {exc}): restore it from the run, "
                                       f"or give --format and the pixel budget by hand and remove the file") from None
        if out.format not in FAMILY_DEFAULTS:
            raise TrainedSettingsError(f"{path} names format {out.format!r}, not one of {', '.join(FAMILY_DEFAULTS)}")
        return out

    def base_from(self, folder: Path) -> str:
        """``base_model`` as a path or id usable from here (a relative folder is the weights folder's)."""
        local = folder / self.base_model
        return str(local.resolve()) if not Path(self.base_model).is_absolute() and local.is_dir() else self.base_model


def find_trained(path: str | Path) -> tuple[Path, TrainedSettings] | None:
    """(the weights folder, its settings) for ``path``: a weights folder holding ``handeye.json``, or a run folder
    whose ``adapter/`` or ``model/`` holds one; None when there is none."""
    root = Path(path)
    if not root.is_dir():
        return None
    for folder in (root, *(root / f.folder for f in Finetune)):
        found = TrainedSettings.read(folder)
        if found is not None:
            return folder, found
    return None


def restore_trained(settings: S) -> S:
    """``settings`` with what a trained run recorded filled in (see the module docstring); unchanged when
    ``model.id`` and ``model.adapter`` name no folder with ``handeye.json``.

    Raises ``TrainedSettingsError`` when the two disagree: ``model.id`` names a LoRA run and ``model.adapter``
    another adapter, or ``model.adapter`` names a full fine-tune's model."""
    by_id = find_trained(settings.id) if settings.id else None
    by_adapter = find_trained(settings.adapter) if settings.adapter else None
    if by_id is None and by_adapter is None:
        return settings
    changes: dict[str, Any] = {}
    if by_id is not None:
        folder, info = by_id
        if info.finetune is Finetune.LORA:
            if settings.adapter and (by_adapter is None or by_adapter[0].resolve() != folder.resolve()):
                raise TrainedSettingsError(
                    f"{settings.id} is a LoRA run whose adapter is {folder}, and model.adapter names "
                    f"{settings.adapter}: give one of them (--adapter DIR loads an adapter on its base model)")
            changes.update(id=info.base_from(folder), adapter=str(folder))
        else:
            changes["id"] = str(folder)
    if by_adapter is not None:
        folder, info = by_adapter
        if info.finetune is not Finetune.LORA:
            raise TrainedSettingsError(f"{settings.adapter} holds a full fine-tune's model ({folder}), not an adapter: "
                                       f"load it with --policy transformers:{folder}")
        changes["adapter"] = str(folder)
        if not settings.id:
            changes["id"] = info.base_from(folder)
    filled = _unset_filled(settings, info)
    log.info("model settings restored from %s: %s", folder / SETTINGS_FILE,
             ", ".join(f"{k}={v}" for k, v in {**changes, **filled}.items()))
    return replace(settings, **changes, **filled)


def _unset_filled(settings: ModelSettings, info: TrainedSettings) -> dict[str, Any]:
    """The preset fields ``settings`` leaves unset, from ``info``."""
    from policy.formats import get_format

    out: dict[str, Any] = {}
    family = FAMILY_DEFAULTS[info.format].family
    if not settings.format:
        out["format"] = info.format
    elif FAMILY_DEFAULTS[settings.format.lower()].family != family:
        family = ""  # another family asked for by hand: the trained variant is not one of its prompts
    if family and not settings.variant and info.variant not in get_format(family).screen_variants.values():
        out["variant"] = info.variant
    if settings.min_pixels is None:
        out["min_pixels"] = info.min_pixels
    if settings.max_pixels is None:
        out["max_pixels"] = info.max_pixels
    return out

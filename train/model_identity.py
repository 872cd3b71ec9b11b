"""Which model a checkpoint is of, and which model a config names, told from their files alone (no weights loaded):
the check that refuses to resume a run with another model before anything heavy is built.

A checkpoint says which model it was written for in its ``state.json``: the fingerprint (model type, the language
and vision towers' shapes, the fine-tuning mode: ``train.checkpoint.model_fingerprint``) and, since full-weight
online sessions, ``model`` (the name it was loaded as, its architectures and parameter count). Older checkpoints
lack ``model``: the name then comes from the adapter's ``adapter_config.json`` (LoRA) and the rest from the saved
model's ``config.json`` and safetensors headers (full fine-tuning).

A model folder (``model.id``) says the same through its ``config.json`` (read by transformers' ``AutoConfig``,
which knows every layout of it) and its safetensors headers. A hub id is looked up in the local cache only: a model
that is not there yet is compared later, when it is loaded (``load_checkpoint`` checks the fingerprint again).

``check_checkpoint_model`` raises ``CheckpointError`` naming both models, e.g.::

    checkpoint runs/online-x/checkpoints/step-000004 was written for 'Qwen/Qwen2.5-VL-3B-Instruct' (qwen2_5_vl
    Qwen2_5_VLForConditionalGeneration, hidden size 2048, 36 layers, ...), but model.id is 'tiny' (...)
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from policy.errors import PolicyError
from train.checkpoint import architecture_fingerprint
from train.errors import CheckpointError

log = logging.getLogger(__name__)

__all__ = ["ModelDescription", "check_checkpoint_model", "check_resume", "describe_checkpoint", "describe_model",
           "describe_model_folder"]

_ARCH_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "vocab_size", "vision_hidden_size", "vision_depth")


@dataclass(frozen=True, slots=True)
class ModelDescription:
    """A model as its files describe it."""

    name: str
    """What it was loaded as (a hub id or a folder), "" when unknown."""
    fingerprint: dict[str, Any] = field(default_factory=dict)
    """``train.checkpoint.architecture_fingerprint``'s fields (a checkpoint's adds ``finetune`` and LoRA settings)."""
    architectures: tuple[str, ...] = ()
    parameters: int | None = None

    def __str__(self) -> str:
        fp = self.fingerprint
        parts = [" ".join(str(x) for x in (fp.get("model_type"), *self.architectures) if x)]
        for key, shown in (("hidden_size", "hidden size {}"), ("num_hidden_layers", "{} layers"),
                           ("vocab_size", "vocabulary {}"), ("vision_hidden_size", "vision hidden size {}"),
                           ("vision_depth", "{} vision layers")):
            if fp.get(key):
                parts.append(shown.format(fp[key]))
        if self.parameters:
            parts.append(f"{_count(self.parameters)} parameters")
        return f"{self.name or 'an unnamed model'!r} ({', '.join(p for p in parts if p)})"


def _count(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return str(n)


def _safetensors_parameters(folder: Path) -> int | None:
    """Elements in the folder's ``*.safetensors`` files (headers only), None when it has none."""
    from policy.backends.swap import read_header

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for path in files:
        try:
            with open(path, "rb") as f:
                for e in read_header(f, str(path)):
                    n = 1
                    for d in e.shape:
                        n *= d
                    total += n
        except (OSError, PolicyError) as exc:  # not a weights file: the count is only informative
            log.debug("cannot count the parameters of %s: %s", path, exc)
            return None
    return total


def describe_model_folder(folder: str | Path, name: str = "") -> ModelDescription | None:
    """The model in ``folder`` (its config.json and safetensors headers), None when there is no config.json or it
    cannot be read."""
    from transformers import AutoConfig

    folder = Path(folder)
    if not (folder / "config.json").is_file():
        return None
    try:
        cfg = AutoConfig.from_pretrained(str(folder))
    except (OSError, ValueError, KeyError) as exc:
        log.debug("cannot read %s/config.json: %s", folder, exc)
        return None
    return ModelDescription(name=name or str(folder), fingerprint=architecture_fingerprint(cfg),
                            architectures=tuple(getattr(cfg, "architectures", None) or ()),
                            parameters=_safetensors_parameters(folder))


def describe_checkpoint(checkpoint: str | Path) -> ModelDescription:
    """The model ``checkpoint`` (a ``step-NNNNNN`` folder) was written for; ``CheckpointError`` when its state.json
    cannot be read."""
    checkpoint = Path(checkpoint)
    try:
        state = json.loads((checkpoint / "state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"checkpoint {checkpoint}: state.json cannot be read ({exc}); the checkpoint is damaged: "
                              f"resume from an earlier one") from exc
    fingerprint = dict(state.get("fingerprint") or {})
    names = state.get("model") or {}
    name, architectures, parameters = names.get("name", ""), tuple(names.get("architectures") or ()), \
        names.get("parameters")
    adapter_config = checkpoint / "adapter" / "adapter_config.json"
    if not name and adapter_config.is_file():
        try:
            name = json.loads(adapter_config.read_text(encoding="utf-8")).get("base_model_name_or_path") or ""
        except (OSError, ValueError):
            pass
    saved = describe_model_folder(checkpoint / "model") if not architectures or parameters is None else None
    if saved is not None:
        architectures, parameters = architectures or saved.architectures, parameters or saved.parameters
    return ModelDescription(name=str(name), fingerprint=fingerprint, architectures=architectures,
                            parameters=parameters)


def check_checkpoint_model(checkpoint: str | Path, model: ModelDescription, *, finetune: str, setting: str) -> None:
    """``CheckpointError`` naming both models when ``checkpoint`` was written for another model than ``model`` (the
    model the run's config names, ``setting`` says how: "model.id 'tiny'"), or with another fine-tuning mode."""
    theirs = describe_checkpoint(checkpoint)
    diff = [k for k in _ARCH_KEYS if k in theirs.fingerprint and theirs.fingerprint[k] != model.fingerprint.get(k)]
    if diff:
        what = ", ".join(f"{k} {theirs.fingerprint[k]!r} vs {model.fingerprint.get(k)!r}" for k in diff)
        raise CheckpointError(f"checkpoint {checkpoint} was written for another model: {theirs}, but {setting} is "
                              f"{model} ({what}). Resume with the model it was trained with, or start a new run "
                              f"(without --resume) for this model")
    mode = theirs.fingerprint.get("finetune")
    if mode and mode != finetune:
        raise CheckpointError(f"checkpoint {checkpoint} was written with model.finetune={mode}, this run says "
                              f"model.finetune={finetune}: resume with --set model.finetune='\"{mode}\"', or start a "
                              f"new run")


def describe_model(path: str, name: str = "") -> ModelDescription | None:
    """The model at ``path``: a folder, or a hub id found in the local cache (never downloaded here); None when
    neither can be read."""
    if Path(path).is_dir():
        return describe_model_folder(path, name or path)
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(path, "config.json")
    except (ValueError, OSError) as exc:  # not a hub id
        log.debug("%s is neither a folder nor a cached hub model: %s", path, exc)
        return None
    return describe_model_folder(Path(cached).parent, name or path) if isinstance(cached, str) else None


def check_resume(config: Any, run_dir: str | Path) -> None:
    """Before a resumed run builds anything: ``CheckpointError`` when the newest checkpoint in ``run_dir`` is of
    another model than ``config.model.id`` (or another fine-tuning mode). Nothing to compare (no checkpoint, a hub
    model not cached yet) passes: ``load_checkpoint`` compares the fingerprints again once the model is loaded."""
    from train.build import model_preset
    from train.checkpoint import latest_checkpoint

    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        return
    path, _ = model_preset(config)  # "tiny" is the run folder's tiny-model
    model = describe_model(path, config.model.id)
    if model is None:
        log.info("cannot read %s's config without loading it; the checkpoint is compared with it once it is loaded",
                 config.model.id)
        return
    check_checkpoint_model(checkpoint, model, finetune=config.model.finetune,
                           setting="the config's model.id")

"""Checkpoints of a training run, and resuming from them.

A checkpoint is a folder ``<run>/checkpoints/step-000040/`` holding everything needed to continue the run as if it
had never stopped:

- ``adapter/``: the LoRA adapter as a standard peft folder (``adapter_config.json`` + ``adapter_model.safetensors``)
  that ``peft.PeftModel.from_pretrained``, ``agent run --set model.adapter=...`` and vLLM's ``--lora-modules`` load;
  or, for full fine-tuning, ``model/``: a transformers checkpoint (safetensors, config, processor) that
  ``agent run --set model.id=...`` loads;
- ``learner.pt``: optimizer and scheduler states, update counters, the mini-batch shuffling RNG;
- ``rng.pt``: the torch random states (CPU and CUDA), tensors only;
- ``rng.json``: the Python and NumPy random states, so rollouts sample the same tokens again;
- ``state.json``: the step, the data position, the curriculum's hard-sample queue and success rates, the early
  stopping state, the model fingerprint, and which model it is (``model``: name, architectures, parameters);
- ``COMPLETE``: written last. A folder without it (a crash mid-save) is ignored by ``latest_checkpoint``.

The folder is written under a temporary name and renamed, so a checkpoint either exists whole or not at all.

A checkpoint is data, never code: the ``.pt`` files are read with ``torch.load(weights_only=True)``, which builds
tensors, numbers, strings, lists, tuples and dicts and refuses anything else, so a crafted checkpoint cannot run
code on ``agent train --resume`` (a plain pickle could). That is why the NumPy state is JSON: an ndarray is not on
that list. Format 1 checkpoints kept the Python and NumPy states in ``rng.pt``; they are still read, with NumPy's
array type added to the allowed list and nothing else (``_FORMAT1_RNG_TYPES``); a file that needs more is refused
with ``CheckpointError``.

The fingerprint (model type and the shapes of the language and vision towers, the fine-tuning mode and the LoRA
settings) is compared on resume: a checkpoint from another model, or with another adapter layout, is refused with a
message that says what differs.
"""

from __future__ import annotations

import json
import logging
import pickle
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from train.errors import CheckpointError

if TYPE_CHECKING:
    from train.trainable import Trainable

log = logging.getLogger(__name__)

__all__ = ["CheckpointError", "architecture_fingerprint", "latest_checkpoint", "load_checkpoint", "model_fingerprint",
           "save_checkpoint"]

FORMAT = 2
"""2: the Python and NumPy random states moved from ``rng.pt`` to ``rng.json`` (1 is still read)."""
_READS = (1, 2)
# The types besides tensors and plain containers that a format 1 rng.pt holds: NumPy's state is a uint32 array.
# Rebuilding an array allocates it and copies bytes into it; no other code runs. Files written with NumPy 1 name
# the rebuilding function numpy.core.multiarray._reconstruct, hence the second name.
_FORMAT1_RNG_TYPES: list[Any] = [np.ndarray, np.dtype, type(np.dtype(np.uint32)), np._core.multiarray._reconstruct,
                                 (np._core.multiarray._reconstruct, "numpy.core.multiarray._reconstruct")]


def architecture_fingerprint(cfg: Any) -> dict[str, Any]:
    """The model part of a fingerprint: model type and the shapes of the language and vision towers of a
    transformers config (read from a loaded model, or from a folder's config.json without loading it)."""
    text = getattr(cfg, "text_config", cfg)
    vision = getattr(cfg, "vision_config", None)
    return {
        "model_type": getattr(cfg, "model_type", None),
        "hidden_size": getattr(text, "hidden_size", None),
        "num_hidden_layers": getattr(text, "num_hidden_layers", None),
        "vocab_size": getattr(text, "vocab_size", None),
        "vision_hidden_size": getattr(vision, "hidden_size", None),
        "vision_depth": getattr(vision, "depth", None),
    }


def model_fingerprint(learner: Trainable) -> dict[str, Any]:
    """What must match for a checkpoint's weights and optimizer state to fit ``learner``."""
    fp: dict[str, Any] = {**architecture_fingerprint(learner.backend.model.config), "finetune": learner.finetune}
    if learner.finetune == "lora":
        peft_cfg = learner.peft_model.peft_config[learner.adapter_name]
        fp["lora_r"] = int(peft_cfg.r)
        fp["lora_targets"] = sorted(peft_cfg.target_modules)
    return fp


def _rng_state() -> tuple[dict[str, Any], dict[str, Any]]:
    """(tensors for rng.pt, plain values for rng.json)."""
    tensors: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        tensors["cuda"] = torch.cuda.get_rng_state_all()
    version, internal, gauss = random.getstate()
    kind, key, pos, has_gauss, cached = np.random.get_state()
    plain = {"python": [version, list(internal), gauss],
             "numpy": {"kind": kind, "key": [int(k) for k in key], "pos": int(pos), "has_gauss": int(has_gauss),
                       "cached_gaussian": float(cached)}}
    return tensors, plain


def _set_rng_state(state: dict[str, Any]) -> None:
    """Restore from ``{"python", "numpy", "torch", "cuda"?}``; numpy as rng.json's dict or format 1's tuple."""
    version, internal, gauss = state["python"]
    random.setstate((int(version), tuple(int(x) for x in internal), gauss))
    numpy_state = state["numpy"]
    if isinstance(numpy_state, dict):
        numpy_state = (numpy_state["kind"], np.asarray(numpy_state["key"], dtype=np.uint32), numpy_state["pos"],
                       numpy_state["has_gauss"], numpy_state["cached_gaussian"])
    np.random.set_state(numpy_state)
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _load_tensors(path: Path, *, allow: list[Any] | None = None) -> Any:
    """``torch.load(path, weights_only=True)`` (plus the types in ``allow``), as ``CheckpointError`` when the file
    holds anything else or cannot be read."""
    try:
        with torch.serialization.safe_globals(allow or []):
            return torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as exc:
        found = re.search(r"GLOBAL ([\w.]+)|but got <class '([\w.]+)'>", str(exc))
        what = f"it asks for {found[1] or found[2]}" if found else f"{type(exc).__name__}: {str(exc)[:200]}"
        raise CheckpointError(
            f"checkpoint file {path} holds objects other than tensors, numbers, strings, lists and dicts ({what}); "
            f"it was not loaded, since loading it could run code. It is from an older format or was not written by "
            f"handeye: re-create the checkpoint (train again from the start or from a checkpoint you trust)") from exc
    except (OSError, RuntimeError, EOFError, ValueError) as exc:
        raise CheckpointError(f"checkpoint file {path} cannot be read ({type(exc).__name__}: {exc}); the "
                              f"checkpoint is damaged: resume from an earlier one or train again") from exc


def _read_rng(path: Path, fmt: int) -> dict[str, Any]:
    if fmt == 1:  # everything in rng.pt, NumPy's state as an array
        return _load_tensors(path / "rng.pt", allow=_FORMAT1_RNG_TYPES)
    try:
        plain = json.loads((path / "rng.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"checkpoint {path}: rng.json cannot be read ({exc}); the checkpoint is damaged: "
                              f"resume from an earlier one") from exc
    return {**_load_tensors(path / "rng.pt"), **plain}


def save_adapter(learner: Trainable, folder: Path) -> Path:
    """Write the trained weights as a standard folder: a peft adapter (LoRA) or a transformers model (full)."""
    if learner.finetune == "lora":
        from peft import get_peft_model_state_dict
        from safetensors.torch import save_file

        out = folder / "adapter"
        out.mkdir(parents=True, exist_ok=True)
        peft_cfg = learner.peft_model.peft_config[learner.adapter_name]
        peft_cfg.save_pretrained(str(out))
        state = get_peft_model_state_dict(learner.peft_model, adapter_name=learner.adapter_name,
                                           save_embedding_layers=False)  # base weights never change
        save_file({k: v.detach().contiguous().cpu() for k, v in state.items()}, str(out / "adapter_model.safetensors"),
                  metadata={"format": "pt"})
        return out
    out = folder / "model"
    backend = learner.backend
    backend.model.save_pretrained(str(out))
    # The backend's processor is an image-only stand-in (no torchvision): saved whole, it names a class other tools
    # do not know and writes no preprocessor_config.json, so the folder would not load as a model (here either).
    # Its parts are written as a base checkpoint has them: the tokenizer, the chat template, the image processor
    # (with the pixel budget the run trained at).
    backend.tokenizer.save_pretrained(str(out))
    backend.processor.image_processor.save_pretrained(str(out))
    template = backend.processor.chat_template
    if template and not any((out / name).is_file() for name in ("chat_template.jinja", "chat_template.json")):
        (out / "chat_template.jinja").write_text(template, encoding="utf-8")
    return out


def _load_weights(learner: Trainable, folder: Path) -> None:
    if learner.finetune == "lora":
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        weights = load_file(str(folder / "adapter" / "adapter_model.safetensors"))
        result = set_peft_model_state_dict(learner.peft_model, weights, adapter_name=learner.adapter_name)
        unexpected = [k for k in getattr(result, "unexpected_keys", []) if "lora_" in k]
        if unexpected:
            raise CheckpointError(f"checkpoint {folder} has adapter weights this model lacks: {unexpected[:3]}")
        return
    from safetensors.torch import load_file

    files = sorted((folder / "model").glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"checkpoint {folder} has no model/*.safetensors to resume full fine-tuning from")
    weights: dict[str, torch.Tensor] = {}
    for f in files:
        weights.update(load_file(str(f)))
    missing, unexpected = learner.backend.model.load_state_dict(weights, strict=False)
    # Tied weights (lm_head = embed_tokens) are saved once; anything else missing is a different model.
    missing = [k for k in missing if not k.endswith("lm_head.weight")]
    if missing or unexpected:
        raise CheckpointError(f"checkpoint {folder} does not fit this model: missing {missing[:3]}, "
                              f"unexpected {unexpected[:3]}")


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A loaded checkpoint's trainer-side state (the weights and learner state are already restored)."""

    path: Path
    step: int
    state: dict[str, Any]
    """``state.json``'s ``trainer`` part: data position, curriculum, early stopping, whatever the trainer saved."""


def save_checkpoint(run_dir: str | Path, step: int, learner: Trainable, trainer_state: dict[str, Any], *,
                    keep: int | None = None) -> Path:
    """Write checkpoint ``step`` of the run in ``run_dir``; keep only the newest ``keep`` (None: all)."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:06d}"
    tmp = root / f".tmp-step-{step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_adapter(learner, tmp)
    torch.save(learner.state_dict(), tmp / "learner.pt")
    tensors, plain = _rng_state()
    torch.save(tensors, tmp / "rng.pt")
    (tmp / "rng.json").write_text(json.dumps(plain), encoding="utf-8")
    state = {"format": FORMAT, "step": step, "fingerprint": model_fingerprint(learner), "trainer": trainer_state,
             "model": _model_names(learner)}
    (tmp / "state.json").write_text(json.dumps(state, indent=1, default=_json_default), encoding="utf-8")
    (tmp / "COMPLETE").write_text("ok\n", encoding="utf-8")
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    if keep is not None and keep > 0:
        for old in _complete(root)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    log.info("checkpoint %s written", final)
    return final


def _model_names(learner: Trainable) -> dict[str, Any]:
    """Which model the checkpoint is of, for people and for the check that refuses to resume it with another one
    (``train.model_identity``): the name it was loaded as, its architectures and parameter count."""
    model = learner.backend.model
    return {"name": str(getattr(learner.backend, "model_id", "") or getattr(model.config, "name_or_path", "")),
            "architectures": list(getattr(model.config, "architectures", None) or []),
            "parameters": sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n)}


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.integer, np.floating)):
        return o.item()
    if isinstance(o, (set, tuple)):
        return list(o)
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"cannot write {type(o).__name__} into a checkpoint's state.json")


def _complete(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("step-*") if (p / "COMPLETE").is_file())


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run (None when there is none)."""
    root = Path(run_dir) / "checkpoints"
    found = _complete(root) if root.is_dir() else []
    return found[-1] if found else None


def load_checkpoint(path: str | Path, learner: Trainable) -> Checkpoint:
    """Restore weights, learner state and RNG states from a checkpoint folder (or a run folder: its latest one)."""
    path = Path(path)
    if (path / "checkpoints").is_dir() and not (path / "state.json").exists():
        latest = latest_checkpoint(path)
        if latest is None:
            raise CheckpointError(f"run {path} has no complete checkpoint to resume from")
        path = latest
    if not (path / "COMPLETE").is_file():
        raise CheckpointError(f"{path} is not a complete checkpoint (no COMPLETE marker): pass a folder like "
                              f"<run>/checkpoints/step-000040, or the run folder to take its latest")
    try:
        state = json.loads((path / "state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"checkpoint {path}: state.json cannot be read: {exc}") from exc
    if state.get("format") not in _READS:
        raise CheckpointError(f"checkpoint {path} has format {state.get('format')!r}; this version reads formats "
                              f"{', '.join(map(str, _READS))}")
    mine = model_fingerprint(learner)
    theirs = state.get("fingerprint") or {}
    diff = {k: (theirs.get(k), v) for k, v in mine.items() if theirs.get(k) != v}
    if diff:
        what = ", ".join(f"{k}: checkpoint {a!r} vs this run {b!r}" for k, (a, b) in diff.items())
        raise CheckpointError(f"checkpoint {path} was written for another model or setup ({what}); "
                              f"resume with the model and settings it was trained with")
    # Read every file before changing anything, so a refused file leaves the learner as it was.
    learner_state = _load_tensors(path / "learner.pt")
    rng = _read_rng(path, state["format"])
    _load_weights(learner, path)
    learner.load_state_dict(learner_state)
    _set_rng_state(rng)
    return Checkpoint(path=path, step=int(state["step"]), state=state.get("trainer") or {})

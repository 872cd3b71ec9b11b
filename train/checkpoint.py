"""Checkpoints of a training run, and resuming from them.

A checkpoint is a folder ``<run>/checkpoints/step-000040/`` holding everything needed to continue the run as if it
had never stopped:

- ``adapter/``: the LoRA adapter as a standard peft folder (``adapter_config.json`` + ``adapter_model.safetensors``)
  that ``peft.PeftModel.from_pretrained``, ``agent run --set model.adapter=...`` and vLLM's ``--lora-modules`` load;
  or, for full fine-tuning, ``model/``: a transformers checkpoint (safetensors, config, processor) that
  ``agent run --set model.path=...`` loads;
- ``learner.pt``: optimizer and scheduler states, update counters, the mini-batch shuffling RNG;
- ``rng.pt``: Python, NumPy and torch (CPU and CUDA) random states, so rollouts sample the same tokens again;
- ``state.json``: the step, the data position, the curriculum's hard-sample queue and success rates, the early
  stopping state, and the model fingerprint;
- ``COMPLETE``: written last. A folder without it (a crash mid-save) is ignored by ``latest_checkpoint``.

The folder is written under a temporary name and renamed, so a checkpoint either exists whole or not at all.

The fingerprint (model type and the shapes of the language and vision towers, the fine-tuning mode and the LoRA
settings) is compared on resume: a checkpoint from another model, or with another adapter layout, is refused with a
message that says what differs.
"""

from __future__ import annotations

import json
import logging
import random
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

__all__ = ["CheckpointError", "latest_checkpoint", "load_checkpoint", "model_fingerprint", "save_checkpoint"]

FORMAT = 1


def model_fingerprint(learner: Trainable) -> dict[str, Any]:
    """What must match for a checkpoint's weights and optimizer state to fit ``learner``."""
    cfg = learner.backend.model.config
    text = getattr(cfg, "text_config", cfg)
    vision = getattr(cfg, "vision_config", None)
    fp: dict[str, Any] = {
        "model_type": getattr(cfg, "model_type", None),
        "hidden_size": getattr(text, "hidden_size", None),
        "num_hidden_layers": getattr(text, "num_hidden_layers", None),
        "vocab_size": getattr(text, "vocab_size", None),
        "vision_hidden_size": getattr(vision, "hidden_size", None),
        "vision_depth": getattr(vision, "depth", None),
        "finetune": learner.finetune,
    }
    if learner.finetune == "lora":
        peft_cfg = learner.peft_model.peft_config[learner.adapter_name]
        fp["lora_r"] = int(peft_cfg.r)
        fp["lora_targets"] = sorted(peft_cfg.target_modules)
    return fp


def _rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


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
    learner.backend.model.save_pretrained(str(out))
    learner.backend.processor.save_pretrained(str(out))
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
    torch.save(_rng_state(), tmp / "rng.pt")
    state = {"format": FORMAT, "step": step, "fingerprint": model_fingerprint(learner), "trainer": trainer_state}
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
    if state.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {path} has format {state.get('format')!r}; this version reads {FORMAT}")
    mine = model_fingerprint(learner)
    theirs = state.get("fingerprint") or {}
    diff = {k: (theirs.get(k), v) for k, v in mine.items() if theirs.get(k) != v}
    if diff:
        what = ", ".join(f"{k}: checkpoint {a!r} vs this run {b!r}" for k, (a, b) in diff.items())
        raise CheckpointError(f"checkpoint {path} was written for another model or setup ({what}); "
                              f"resume with the model and settings it was trained with")
    _load_weights(learner, path)
    learner.load_state_dict(torch.load(path / "learner.pt", weights_only=False))
    _set_rng_state(torch.load(path / "rng.pt", weights_only=False))
    return Checkpoint(path=path, step=int(state["step"]), state=state.get("trainer") or {})

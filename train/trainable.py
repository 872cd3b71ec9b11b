"""What the trainer, its checkpoints and the adapter store need from a learner: the ``Trainable`` protocol.

Two learners implement it: the policy-gradient ``Learner`` (``train.learner``, stage rl, batches of scored groups)
and the ``SupervisedLearner`` (``train.sft``, stages sft and rft, batches of examples). Both train the model of a
``TransformersBackend`` in place, a LoRA adapter or every weight, so a checkpoint, an exported adapter folder and a
published adapter version are written the same way whichever stage produced them (``train.checkpoint``,
``train.adapters``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from policy.backends.hf import TransformersBackend

__all__ = ["Trainable"]


class Trainable(Protocol):
    """A learner the trainer can step, checkpoint, resume and export (see the module docstring)."""

    backend: TransformersBackend
    """The backend whose model is trained in place (its generation then uses the update)."""
    finetune: str
    """"lora" (a peft adapter) or "full" (every weight)."""
    adapter_name: str
    """The trained adapter's name (LoRA), or the name a full fine-tune's versions carry."""
    peft_model: Any
    """The trained module: the backend's peft model (LoRA) or its model (full fine-tuning)."""
    steps: int
    """Completed ``step()`` calls."""

    @property
    def adapter_version(self) -> str:
        """``<adapter_name>@<steps>``: what rollouts record and what a published adapter version is called."""
        ...

    def skip_reason(self, batch: Sequence[Any]) -> str:
        """Why a step on ``batch`` would change nothing, "" when it would (the trainer then skips the update)."""
        ...

    def step(self, batch: Sequence[Any]) -> dict[str, float]:
        """One update on ``batch`` (this process's share of it); returns metrics."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint needs besides the weights (optimizer, counters, RNG), with ``"finetune"``."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict()``'s state; a ValueError when it was written with other settings."""
        ...

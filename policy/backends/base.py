"""The Backend protocol: chat messages with images in, sampled texts (with token ids and logprobs
where available) out. Prompt building, resizing and parsing are the caller's job
(``policy.model.ModelPolicy``); a backend only generates.

Images arrive already resized to the preset's model-input size (w', h'), as RGB uint8 arrays, so
a processor's or server's own smart_resize is the identity. A backend that cannot answer raises
``policy.errors.BackendError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from policy.presets import Decoding


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One prompt: chat messages whose image parts are ``{"type": "image", "image": ndarray}``."""

    messages: list[dict[str, Any]]
    n: int = 1
    """How many samples to draw for this prompt."""
    decoding: Decoding = field(default_factory=Decoding)

    def images(self) -> list[np.ndarray]:
        return [part["image"] for m in self.messages if isinstance(m.get("content"), list)
                for part in m["content"] if part.get("type") == "image"]


@dataclass(frozen=True, slots=True)
class Sample:
    text: str
    token_ids: tuple[int, ...] = ()
    """The sampled token ids (empty when the backend cannot give them)."""
    logprobs: tuple[float, ...] | None = None
    """Log-probability of each sampled token under the behaviour policy, when available."""
    finish_reason: str | None = None


@dataclass(frozen=True, slots=True)
class Generation:
    samples: tuple[Sample, ...]
    prompt_tokens: int | None = None
    latency_s: float = 0.0
    model: str = ""
    adapter_version: str | None = None


class Backend(Protocol):
    name: str

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        """One Generation per request, in order; requests may be batched together."""
        ...

    def describe(self) -> dict[str, Any]:
        """Model id, device, dtype, adapter version: for the episode record."""
        ...

    async def close(self) -> None: ...

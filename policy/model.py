"""A policy backed by a vision-language model: preset + family format + backend.

For each observation: the frame is resized to the preset's model-input size (w', h') (bicubic, as
qwen-vl-utils does), the family builds its prompt, the backend samples ``n`` answers, and the
family parses them into actions in frame space. The first answer that parses gives the executed
action; every parsed action of every sample is kept as a candidate, in order. If no answer
parses, the decision carries the parse error and nothing is executed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from devices.base import Observation
from policy.backends.base import Backend, Generation, GenerationRequest
from policy.base import Decision, HistoryEntry
from policy.coords import ModelSpace
from policy.errors import FormatParseError
from policy.formats import ModelFormat, get_format
from policy.presets import ModelPreset


def resize_for_model(frame: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``frame`` (RGB uint8) resized to ``size`` = (w', h') with bicubic resampling."""
    w, h = size
    if frame.shape[1] == w and frame.shape[0] == h:
        return frame
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - Pillow comes with transformers
        import cv2

        return cv2.resize(frame, (w, h), interpolation=cv2.INTER_CUBIC)
    return np.asarray(Image.fromarray(frame).resize((w, h), Image.Resampling.BICUBIC))


class ModelPolicy:
    """Decides with a model. ``n`` answers are sampled per observation (a step-level group)."""

    name = "model"

    def __init__(self, backend: Backend, preset: ModelPreset, *, n: int = 1, fmt: ModelFormat | None = None) -> None:
        if n < 1:
            raise ValueError(f"n (samples per observation) must be at least 1, got {n}")
        self.backend = backend
        self.preset = preset
        self.n = n
        self.format = fmt or get_format(preset.family)

    def with_preset(self, preset: ModelPreset) -> ModelPolicy:
        """The same backend (one model in memory, one HTTP client) prompted and parsed with ``preset`` (another
        variant: a phone's prompt beside a computer's)."""
        return self if preset == self.preset else ModelPolicy(self.backend, preset, n=self.n)

    def describe(self) -> dict[str, Any]:
        p = self.preset
        return {"name": self.name, "model": p.model_id, "family": p.family, "version": p.version, "variant": p.variant,
                "min_pixels": p.min_pixels, "max_pixels": p.max_pixels, "samples": self.n,
                "backend": self.backend.describe()}

    def request(self, task: str, history: Sequence[HistoryEntry], observation: Observation, n: int | None = None,
                ) -> tuple[GenerationRequest, ModelSpace]:
        """The backend request for one observation (exposed so that fleets can batch many)."""
        space = self.preset.space(observation.size)
        prompt = self.format.build_prompt(task, history, space, self.preset)
        messages = [self._with_images(m, observation, history, space) for m in prompt.messages]
        return GenerationRequest(messages, n or self.n, self.preset.decoding), space

    async def decide(self, task: str, history: Sequence[HistoryEntry], observation: Observation, n: int = 0) -> Decision:
        request, space = self.request(task, history, observation, n or None)
        (generation,) = await self.backend.generate([request])
        return self.decision(generation, space, history)

    def decision(self, generation: Generation, space: ModelSpace, history: Sequence[HistoryEntry]) -> Decision:
        """Parse a generation into a Decision (the first parsable sample is executed). The formats are total
        (``policy.formats.base``): whatever a sample says, its parse gives actions inside the screen or a
        FormatParseError, which becomes the Decision's ``parse_error`` (no action) that the episode runner
        records and asks again for."""
        parsed, errors = [], []
        for sample in generation.samples:
            try:
                parsed.append((sample, self.format.parse(sample.text, space, self.preset, history=history)))
            except FormatParseError as e:
                errors.append(str(e))
        info: dict[str, Any] = {
            "latency_s": round(generation.latency_s, 6),
            "prompt_tokens": generation.prompt_tokens,
            "adapter_version": generation.adapter_version,
            "samples": [
                {"text": s.text, "token_ids": list(s.token_ids),
                 "logprobs": list(s.logprobs) if s.logprobs is not None else None, "finish_reason": s.finish_reason}
                for s in generation.samples
            ],
        }
        if errors:
            info["parse_errors"] = errors
        if not parsed:
            text = generation.samples[0].text if generation.samples else ""
            reason = errors[0] if errors else "the backend returned no samples"
            return Decision(None, raw_output=text, parse_error=reason, model_input_size=space.input_size, info=info)
        sample, first = parsed[0]
        if first.thought:
            info["thought"] = first.thought
        candidates = tuple(a for _, p in parsed for a in p.actions)
        return Decision(first.actions[0], raw_output=sample.text, candidates=candidates,
                        model_input_size=space.input_size, info=info)

    def _with_images(self, message: dict[str, Any], observation: Observation, history: Sequence[HistoryEntry],
                     space: ModelSpace) -> dict[str, Any]:
        content = message.get("content")
        if not isinstance(content, list):
            return message
        parts = []
        for part in content:
            if part.get("type") != "image":
                parts.append(part)
                continue
            ref = part.get("image")
            if ref == "current":
                parts.append({"type": "image", "image": resize_for_model(observation.frame, space.input_size)})
            elif isinstance(ref, int) and 0 <= ref < len(history) and history[ref].observation is not None:
                past = history[ref].observation
                assert past is not None
                parts.append({"type": "image", "image": resize_for_model(past.frame, self.preset.input_size(past.size))})
            # a past screenshot the loop no longer keeps is left out; its text stays
        return {**message, "content": parts}

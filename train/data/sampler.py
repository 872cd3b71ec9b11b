"""The resumable sampler: endless prompts from a source, in a seeded order, that a checkpoint can resume.

``PromptSampler(source, seed)`` walks a seeded shuffle per epoch; ``state_dict()`` / ``load_state_dict()`` resume it
where a checkpoint left it. An item that fails when its prompt is built (an image that no longer reads) is skipped,
counted, and not tried again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from train.data.prompts import PromptSource, Skipped
from train.errors import BadItem, PromptSourceError
from train.samples import RolloutPrompt

log = logging.getLogger(__name__)

__all__ = ["PromptSampler"]

SAMPLER_STATE_VERSION = 1


class PromptSampler:
    """Endless prompts from a source: a seeded permutation per epoch (``shuffle``) walked in order.

    ``state_dict()`` holds the seed, epoch, position and the items found bad; ``load_state_dict()`` resumes
    exactly there (the same source, by name and length, is required).
    """

    def __init__(self, source: PromptSource, *, seed: int = 0, shuffle: bool = True) -> None:
        if len(source) == 0:
            raise PromptSourceError(f"source {source.name} is empty")
        self.source = source
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 0
        self.position = 0
        self.skipped: list[Skipped] = []
        self._bad: set[int] = set()
        self._order_epoch = -1
        self._order = np.arange(0)
        self._index_of: dict[str, int] | None = None

    def _epoch_order(self) -> np.ndarray:
        if self._order_epoch != self.epoch:
            n = len(self.source)
            self._order = (np.random.default_rng([self.seed, self.epoch]).permutation(n) if self.shuffle
                           else np.arange(n))
            self._order_epoch = self.epoch
        return self._order

    def _make(self, index: int) -> RolloutPrompt | None:
        try:
            return self.source.prompt(index)
        except BadItem as e:
            self._bad.add(index)
            self.skipped.append(Skipped(self.source.item_id(index), "bad_item", str(e)))
            log.warning("skipping prompt item %s", e)
            return None

    def next_prompts(self, n: int) -> list[RolloutPrompt]:
        """The next ``n`` prompts of the stream (crossing into the next epoch as needed)."""
        out: list[RolloutPrompt] = []
        while len(out) < n:
            if len(self._bad) >= len(self.source):
                shown = "; ".join(s.reason for s in self.skipped[:3])
                raise PromptSourceError(f"every item of {self.source.name} failed to make a prompt: {shown}")
            if self.position >= len(self.source):
                self.epoch += 1
                self.position = 0
            index = int(self._epoch_order()[self.position])
            self.position += 1
            if index not in self._bad and (prompt := self._make(index)) is not None:
                out.append(prompt)
        return out

    def prompts_for(self, ids: Sequence[str]) -> list[RolloutPrompt]:
        """Prompts of the items with these ids, in order; ids the source does not have (or bad items) are left out.
        The stream's position does not move."""
        if self._index_of is None:
            self._index_of = {self.source.item_id(i): i for i in range(len(self.source))}
        out = []
        for item_id in ids:
            index = self._index_of.get(item_id)
            if index is not None and index not in self._bad and (prompt := self._make(index)) is not None:
                out.append(prompt)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"version": SAMPLER_STATE_VERSION, "source": self.source.name, "size": len(self.source),
                "seed": self.seed, "shuffle": self.shuffle, "epoch": self.epoch, "position": self.position,
                "bad": sorted(self._bad)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("version") != SAMPLER_STATE_VERSION:
            raise PromptSourceError(f"sampler state version {state.get('version')!r}; "
                                    f"this handeye reads {SAMPLER_STATE_VERSION}")
        if state["source"] != self.source.name or state["size"] != len(self.source):
            raise PromptSourceError(
                f"the checkpoint's data position is for {state['source']} with {state['size']} items, but the "
                f"source is {self.source.name} with {len(self.source)}; resume with the same data, or start the "
                f"sampler afresh")
        self.seed, self.shuffle = int(state["seed"]), bool(state["shuffle"])
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._bad = {int(i) for i in state["bad"]}
        self._order_epoch = -1

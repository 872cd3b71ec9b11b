"""Sources made of other sources: ``ConcatSource`` (several, in order) and ``Subset`` (some items of one, e.g. a
held-out split)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from train.data.prompts import PromptSource, Skipped
from train.errors import PromptSourceError
from train.samples import RolloutPrompt

__all__ = ["ConcatSource", "Subset"]


class ConcatSource:
    """Several sources as one, in order; ids must be distinct across them."""

    def __init__(self, sources: Sequence[PromptSource]) -> None:
        if not sources:
            raise PromptSourceError("ConcatSource needs at least one source")
        self.sources = list(sources)
        self.name = "+".join(s.name for s in self.sources)
        self._offsets = np.cumsum([0] + [len(s) for s in self.sources])
        ids = [s.item_id(i) for s in self.sources for i in range(len(s))]
        dup = [i for i, n in Counter(ids).items() if n > 1]
        if dup:
            raise PromptSourceError(f"sources share item ids ({dup[:3]}); ids must be distinct across sources")

    @property
    def skipped(self) -> list[Skipped]:
        return [k for s in self.sources for k in s.skipped]

    def __len__(self) -> int:
        return int(self._offsets[-1])

    def _locate(self, index: int) -> tuple[PromptSource, int]:
        if not 0 <= index < len(self):
            raise IndexError(index)
        k = int(np.searchsorted(self._offsets, index, side="right")) - 1
        return self.sources[k], index - int(self._offsets[k])

    def item_id(self, index: int) -> str:
        source, i = self._locate(index)
        return source.item_id(i)

    def prompt(self, index: int) -> RolloutPrompt:
        source, i = self._locate(index)
        return source.prompt(i)

    def close(self) -> None:
        for s in self.sources:
            close = getattr(s, "close", None)
            if close is not None:
                close()


class Subset:
    """Some items of a source, under the source's ids (a held-out split); ``part`` names it ("heldout", "train")."""

    def __init__(self, source: PromptSource, indices: Sequence[int], part: str) -> None:
        self._source = source
        self._indices = list(indices)
        self.name = f"{source.name}[{part}]"
        self.skipped = source.skipped

    def __len__(self) -> int:
        return len(self._indices)

    def item_id(self, index: int) -> str:
        return self._source.item_id(self._indices[index])

    def prompt(self, index: int) -> RolloutPrompt:
        return self._source.prompt(self._indices[index])

"""Joins the actors' concurrent generate calls into one batched backend call."""

from __future__ import annotations

import asyncio
from typing import Any


class Batcher:
    """Joins the actors' concurrent generate calls into one backend call (one batched ``generate``)."""

    def __init__(self, backend: Any, max_batch: int) -> None:
        self.backend, self.max_batch = backend, max_batch
        self._pending: list[tuple[Any, asyncio.Future[Any]]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def generate(self, request: Any) -> Any:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="generate-batcher")
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append((request, fut))
        self._wake.set()
        return await fut

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await asyncio.sleep(0)  # let actors that are about to ask join this batch
            while self._pending:
                batch, self._pending = self._pending[:self.max_batch], self._pending[self.max_batch:]
                batch = [(r, f) for r, f in batch if not f.done()]
                if not batch:
                    continue
                try:
                    gens = await self.backend.generate([r for r, _ in batch])
                except Exception as exc:  # every waiting actor sees the backend's error
                    for _, f in batch:
                        if not f.done():
                            f.set_exception(exc)
                    continue
                for (_, f), g in zip(batch, gens):
                    if not f.done():
                        f.set_result(g)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

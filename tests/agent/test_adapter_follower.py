"""The actors' adapter follower under cancellation: an actor cancelled while a version loads (a restart, the
session stopping) must not leave that version loaded but unrecorded, or the next actor loads it twice (the
backend refuses a second load of one version name, which aborted an episode once in CI)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from agent.online import versions
from agent.online.versions import AdapterFollower, VersionClock
from train.adapters import AdapterRef, LoadTimes


class _Announcing:
    """The transport's side the follower reads: the newest announced version."""

    def __init__(self, ref: AdapterRef) -> None:
        self.ref = ref

    def policy(self) -> AdapterRef:
        return self.ref


def test_a_load_outlives_a_cancelled_caller_and_is_never_repeated(tmp_path, monkeypatch):
    loaded: list[str] = []
    lock = threading.Lock()

    def slow_load(backend, ref):  # stands in for load_verified on a real backend: refuses a version twice
        time.sleep(0.3)
        with lock:
            if ref.version in loaded:
                raise RuntimeError(f"adapter version {ref.version!r} is already loaded")
            loaded.append(ref.version)
        return LoadTimes(0.0, 0.3)

    monkeypatch.setattr(versions, "load_verified", slow_load)
    ref = AdapterRef("learner@4", 4, str(tmp_path / "v4"), "ab" * 32)
    transport = _Announcing(ref)
    follower = AdapterFollower(object(), transport, VersionClock(tmp_path / "adapters.jsonl"))

    async def main():
        first = asyncio.create_task(follower.sync())
        await asyncio.sleep(0.05)  # the load is in its thread now
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        await follower.sync()  # another actor, between two steps: waits for the same load, does not repeat it
        assert follower.current == ref and loaded == ["learner@4"]
        # a newer version announced later is loaded once more, by whoever asks first
        transport.ref = AdapterRef("learner@6", 6, str(tmp_path / "v6"), "cd" * 32)
        await asyncio.gather(follower.sync(), follower.sync())
        await follower.drain()

    asyncio.run(main())
    assert loaded == ["learner@4", "learner@6"] and follower.current.version == "learner@6"

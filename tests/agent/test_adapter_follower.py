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

    def slow_load(backend, ref, *, root):  # stands in for load_verified on a real backend: refuses a version twice
        time.sleep(0.3)
        with lock:
            if ref.version in loaded:
                raise RuntimeError(f"adapter version {ref.version!r} is already loaded")
            loaded.append(ref.version)
        return LoadTimes(0.0, 0.3)

    monkeypatch.setattr(versions, "load_verified", slow_load)
    ref = AdapterRef("learner@4", 4, str(tmp_path / "v4"), "ab" * 32)
    transport = _Announcing(ref)
    follower = AdapterFollower(object(), transport, VersionClock(tmp_path / "adapters.jsonl"), root=tmp_path)

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


def test_an_announcement_pointing_outside_the_store_is_refused_and_counted(tmp_path, caplog):
    """Through the real ``load_verified``: a version whose file name climbs out of its folder is refused like a
    corrupt one (logged, recorded in ``refused``, never retried) and the actors keep the version they have."""
    import hashlib

    store = tmp_path / "adapters"
    (store / "v000005").mkdir(parents=True)
    (tmp_path / "secret").write_bytes(b"s")
    files = {"../../secret": hashlib.sha256(b"s").hexdigest()}
    digest = hashlib.sha256("".join(f"{n} {files[n]}\n" for n in files).encode()).hexdigest()
    bad = AdapterRef("learner@5", 5, str(store / "v000005"), digest, files)

    class Backend:
        def load_adapter(self, path, version):
            raise AssertionError("a refused version reached the backend")

    follower = AdapterFollower(Backend(), _Announcing(bad), VersionClock(tmp_path / "adapters.jsonl"), root=store)

    async def main():
        await follower.sync()
        await follower.sync()  # asked again between the next steps: not retried

    with caplog.at_level("ERROR", logger="agent.online.versions"):
        asyncio.run(main())
    assert follower.current is None and list(follower.refused) == [f"5:{digest}"]
    assert "plain names" in follower.refused[f"5:{digest}"]
    assert [r.getMessage() for r in caplog.records if "refused adapter learner@5" in r.getMessage()]

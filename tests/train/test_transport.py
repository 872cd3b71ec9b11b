"""train.transport: the in-process transport across threads, and the learner's group assembly (parts, duplicates,
expiry); the wire codec is tests/train/test_wire.py's."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from train.adapters import AdapterRef, _digest
from train.errors import TransportClosed, TransportError
from train.messages import ActorStatus, EpisodeMessage, GroupMessage
from train.samples import TrainSample
from train.transport import GroupAssembler, InProcessTransport, Transport

MESSAGES = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "click «OK» 好"}]}]


def sample(i: int, image: np.ndarray | None, reward: float = 0.0, **origin) -> TrainSample:
    return TrainSample(messages=MESSAGES, image=image, frame_size=(1280, 800), input_size=(56, 28),
                       response_text=f"answer {i}", response_ids=(5, 6, 7 + i), behaviour_logprobs=(-0.5, -1.0, -2.0),
                       reward=reward, reward_parts={"correct": reward}, group_id=3, adapter_version="learner@4",
                       origin={"id": "generated/click:7", "step": 2, **origin}, id=f"s{i}")


def group(key: str, n: int, *, parts: int = 1, level: str = "step", image: np.ndarray | None = None,
          mid: str | None = None, **origin) -> GroupMessage:
    image = np.arange(28 * 56 * 3, dtype=np.uint8).reshape(28, 56, 3) if image is None else image
    return GroupMessage(id=mid or key, actor="actor-0", group=key, parts=parts, level=level,
                        samples=tuple(sample(i, image, reward=float(i % 2), **origin) for i in range(n)),
                        created_at=12.5)


def test_the_in_process_transport_carries_messages_between_threads_and_over_the_wire():
    t = InProcessTransport(wire=True)
    assert isinstance(t, Transport)
    got: list[GroupMessage] = []

    def learner() -> None:
        while len(got) < 3:
            msg = t.receive_group(timeout=5)
            if msg is not None:
                got.append(msg)

    th = threading.Thread(target=learner)
    th.start()
    for k in range(3):
        t.send(group(f"g{k}", 2))
    th.join(10)
    assert [m.group for m in got] == ["g0", "g1", "g2"] and t.sent_bytes > 0
    assert isinstance(got[0].samples[0].image, np.ndarray)  # decoded from the wire, not the same object
    t.send(EpisodeMessage("e", "actor-0", "generated/click", 1, "ep0000", "failure", 0.0, 3))
    t.send(EpisodeMessage("f", "actor-1", "generated/click", 2, "ep0001", "success", 1.0, 1))
    assert [e.id for e in t.receive_episodes()] == ["e", "f"] and t.receive_episodes() == []
    t.set_status(ActorStatus("actor-0", "running"))
    t.set_status(ActorStatus("actor-0", "dropped", error="gone"))
    assert t.statuses()["actor-0"].state == "dropped"  # retained: the latest per actor
    assert t.policy() is None
    files = {"a": "0" * 64}
    t.announce(AdapterRef("learner@1", 1, "/x", _digest(files), files, 1.0))
    t.announce(AdapterRef("learner@2", 2, "/y", _digest(files), files, 2.0))
    assert t.policy().version == "learner@2"
    with pytest.raises(TransportError):
        t.send(ActorStatus("actor-0", "running"))  # statuses go through set_status


def test_close_wakes_a_blocked_receiver_after_the_queued_messages():
    t = InProcessTransport()
    t.send(group("g0", 2))
    assert t.pending_groups() == 1
    seen: list[object] = []

    def learner() -> None:
        try:
            while True:
                seen.append(t.receive_group())  # no timeout: only close() can end this
        except TransportClosed as e:
            seen.append(e)

    th = threading.Thread(target=learner)
    th.start()
    time.sleep(0.1)
    t.close()
    th.join(5)
    assert not th.is_alive()
    assert isinstance(seen[0], GroupMessage) and isinstance(seen[1], TransportClosed)
    assert t.pending_groups() == 0
    with pytest.raises(TransportClosed):
        t.send(group("g1", 2))
    with pytest.raises(TransportClosed):
        t.receive_group(timeout=0)


def test_the_assembler_joins_parts_drops_duplicates_and_expires_stragglers():
    a = GroupAssembler(timeout_s=10)
    assert len(a.add(group("step", 3))) == 1  # a step-level group is whole at once
    # an episode-level group of three episodes: whole when the third part arrives
    parts = [group("ep-g", 2, parts=3, level="episode", mid=f"ep{k}", episode=f"ep{k}") for k in range(3)]
    assert a.add(parts[0]) == [] and a.add(parts[1]) == []
    assert a.add(parts[1]) == [] and a.duplicates == 1  # a second delivery of the same id is ignored
    (whole,) = a.add(parts[2])
    assert len(whole) == 6 and {s.origin["episode"] for s in whole} == {"ep0", "ep1", "ep2"}
    # an aborted episode sends an empty part: the group completes with the other two
    empty = GroupMessage("ep5", "actor-1", "g2", 3, "episode", ())
    assert a.add(group("g2", 2, parts=3, level="episode", mid="ep3", episode="ep3")) == []
    assert a.add(empty) == []
    (g2,) = a.add(group("g2", 2, parts=3, level="episode", mid="ep4", episode="ep4"))
    assert len(g2) == 4
    # one episode alone has nothing to compare with: dropped and counted
    assert a.add(group("g3", 2, parts=2, level="episode", mid="ep6", episode="ep6")) == []
    assert a.add(GroupMessage("ep7", "actor-1", "g3", 2, "episode", ())) == [] and a.too_small == 1
    # a group whose last part never comes is flushed after the timeout with what it has
    a.add(group("g4", 2, parts=3, level="episode", mid="ep8", episode="ep8"))
    a.add(group("g4", 2, parts=3, level="episode", mid="ep9", episode="ep9"))
    assert a.open_groups == 1 and a.expire() == []
    (late,) = a.expire(now=time.monotonic() + 11)
    assert len(late) == 4 and a.expired == 1 and a.open_groups == 0


def test_messages_check_their_fields():
    with pytest.raises(ValueError, match="level"):
        GroupMessage("x", "a", "g", 1, "batch", ())
    with pytest.raises(ValueError, match="parts"):
        GroupMessage("x", "a", "g", 0, "step", ())

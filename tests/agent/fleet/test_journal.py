"""The parts of "nothing acknowledged is lost" that need no learner process: the inbox log (torn tails, updates lost
with a killed process, second deliveries, compaction), ``fleet.json`` across learner processes, and an actor's
retained status that says what its spool holds now (a real mosquitto)."""

from __future__ import annotations

import json
import time

import numpy as np

from agent.fleet.journal import InboxLog, logged_ids, read_consumed
from agent.fleet.mqtt import MqttTransport
from agent.fleet.record import FleetRecord, learner_row
from agent.fleet.settings import parse_broker
from agent.fleet.spool import Spool, produced_count
from agent.fleet.status import learner_line
from tests.support.fleet_run import wait_for
from tests.support.light_actor import group_message
from tests.support.mosquitto import Mosquitto
from train.messages import ActorStatus


def test_the_inbox_log_gives_back_what_was_not_consumed_by_the_resumed_step(tmp_path):
    folder = tmp_path / "inbox"
    log = InboxLog(folder, resume_step=0, segment_bytes=200)
    for i in range(8):
        assert log.append("p/samples/a", f"a/{i}", bytes([i]) * 50)
    assert not log.append("p/samples/a", "a/3", b"again")  # a second delivery: not logged twice
    log.consumed(1, ["a/0", "a/1"], ["a/2"])
    log.consumed(2, ["a/3", "a/4"], [])
    log.consumed(3, ["a/5"], [])  # the update whose checkpoint the kill prevented
    log.close()
    segment = max(folder.glob("messages-*.log"))
    with open(segment, "ab") as f:
        f.write(b"HEJ1\x00\x00\x00\x0b\x00\x00")  # a record cut short by the kill
    again = InboxLog(folder, resume_step=2)
    assert again.cut == 1  # step 3's line belonged to the lost update
    assert [r.id for r in again.pending] == ["a/5", "a/6", "a/7"]  # in arrival order, a/5 back with its update
    assert again.pending[0].payload == bytes([5]) * 50
    assert again.seen("a/0") and again.was_consumed("a/2") and not again.was_consumed("a/5")
    assert not again.append("p/samples/a", "a/1", b"redelivered")  # consumed before the kill: dropped by id
    assert [line["step"] for line in read_consumed(folder)] == [1, 2]
    assert logged_ids(folder)[-3:] == ["a/5", "a/6", "a/7"]
    again.consumed(3, ["a/5", "a/6"], [])
    again.consumed(4, ["a/7"], [])
    again.close()
    # segments whose messages were all consumed before the previous update are gone; the rest stays readable
    assert set(logged_ids(folder)) >= {"a/7"} and "a/0" not in logged_ids(folder)
    third = InboxLog(folder, resume_step=4)
    assert third.pending == [] and third.trained == ["a/0", "a/1", "a/3", "a/4", "a/5", "a/6", "a/7"]
    third.close()


def test_fleet_json_keeps_every_learner_process_and_says_which_was_killed(tmp_path):
    (tmp_path / "inbox").mkdir()
    first = FleetRecord(tmp_path, lambda: {"malformed": 3, "connects": 1}, every_s=3600)
    first.write("running")  # then killed: it never writes its end
    second = FleetRecord(tmp_path, lambda: {"malformed": 2, "reconnects": 4}, every_s=3600)
    second.stop("stopped")
    data = json.loads((tmp_path / "fleet.json").read_text())
    assert [p["ended"] for p in data["processes"]] == ["killed", "stopped"]
    assert data["counts"] == {"connects": 1, "malformed": 5, "reconnects": 4}
    # a fleet.json from before segments (one process's counts) is kept as the first segment
    (tmp_path / "fleet.json").write_text(json.dumps({"counts": {"malformed": 7}}))
    FleetRecord(tmp_path, lambda: {"malformed": 1}, every_s=3600).stop()
    assert json.loads((tmp_path / "fleet.json").read_text())["counts"] == {"malformed": 8}


def test_the_learner_row_says_down_since_its_last_status():
    now = time.time()
    row = learner_row({"state": "up", "host": "gpu-1", "version": "learner@254", "at": now - 120}, "down", now=now)
    assert row["state"] == "down" and row["down_since"] == now - 120
    assert learner_line(row) == ("learner  down since 2 min ago (its connection died: its last will) on gpu-1, last "
                                 "version learner@254")
    up = learner_row({"state": "up", "version": "learner@3", "pending": 5, "at": now}, "up", now=now)
    assert learner_line(up).startswith("learner  up, last version learner@3, 5 pending")
    assert learner_row(None, "", now=now)["state"] == "unknown"
    # stopped cleanly (its status says so) even when its goodbye was cut short and the will fired; a new one is up
    assert learner_row({"state": "stopped", "at": now}, "down", now=now)["state"] == "stopped"
    assert learner_row({"state": "stopped", "at": now}, "up", now=now)["state"] == "up"


def test_an_actor_status_says_what_its_spool_holds_now(tmp_path):
    broker = Mosquitto(tmp_path / "broker")
    broker.start()
    broker.stop()  # away: the message and the status wait
    actor = MqttTransport(parse_broker(broker.url), role="actor", actor="a1", spool=Spool(tmp_path / "spool")).start()
    observer = None
    try:
        actor.send(group_message("a1", 0, np.zeros((8, 8, 3), np.uint8)))
        actor.set_status(ActorStatus("a1", "running", at=time.time()))
        assert actor.statuses()["a1"].spooled == 1
        broker.start()
        wait_for(lambda: len(actor.spool) == 0, 60, "the spool sent")
        assert produced_count(tmp_path / "spool", "samples") == 1 and produced_count(tmp_path / "spool", "episodes") == 0
        observer = MqttTransport(parse_broker(broker.url), role="observer").start()
        wait_for(lambda: "a1" in observer.statuses() and observer.statuses()["a1"].spooled == 0, 30,
                 "the retained status saying 0 spooled")
    finally:
        actor.close(flush_s=5)
        if observer is not None:
            observer.close(flush_s=0)
        broker.stop()

"""The fleet's bus on a real broker (a private mosquitto on a loopback port, stopped by its PID): light actor
processes send through ``MqttTransport`` and its spool, the learner's transport receives. Nothing is lost when the
broker stops and comes back or an actor is cut off; a learner that reconnects gets what was queued; statuses are
retained, with a last will; announcements are signed; TLS, passwords and the ACL of docs/fleet.md hold.

The slow suite stops the broker for 30 s and cuts an actor off for a minute, as the issue asks; the default suite
does the same for a few seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path

import pytest

from agent.errors import FleetError
from agent.fleet.keys import KEY_ENV, sign
from agent.fleet.mqtt import MqttTransport
from agent.fleet.settings import parse_broker
from agent.fleet.spool import Spool, produced_ids
from tests.conftest import REPO
from tests.support import procs
from tests.support.light_actor import group_message
from tests.support.mosquitto import Mosquitto, TcpProxy
from train.adapters import AdapterRef
from train.messages import ActorStatus
from train.transport import GroupAssembler
from train.wire import encode_message

KEY = bytes(range(32))


@pytest.fixture
def broker(tmp_path):
    b = Mosquitto(tmp_path / "broker").start()
    yield b
    b.stop()


def learner_for(url: str, **kw) -> MqttTransport:
    t = MqttTransport(parse_broker(url), role="learner", key=KEY, **kw).start()
    assert t.wait_connected(10)
    return t


def producer(url: str, name: str, run_dir: Path, count: int,
             rate: float) -> AbstractContextManager[subprocess.Popen[str]]:
    """A light actor process sending ``count`` samples, for a ``with`` block (ended with it, however it ends)."""
    return procs.running([sys.executable, "-m", "tests.support.light_actor", "produce", "--broker", url, "--name",
                          name, "--run-dir", str(run_dir), "--count", str(count), "--rate", str(rate)],
                         cwd=REPO, env={**os.environ, KEY_ENV: KEY.hex()}, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)


def drain(learner: MqttTransport, assembler: GroupAssembler, want: int, timeout: float) -> list[str]:
    """Group message ids the assembler took as first deliveries, until ``want`` or ``timeout``."""
    got: list[str] = []
    end = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < end:
        msg = learner.receive_group(timeout=0.2)
        if msg is not None:
            before = assembler.duplicates
            assembler.add(msg)
            if assembler.duplicates == before:
                got.append(msg.id)
    return got


def sample_ids(run_dir: Path) -> list[str]:
    lines = (run_dir / "spool" / "produced.log").read_text().splitlines()
    return [line.split()[0] for line in lines if "/samples/" in line]


def broker_outage(tmp_path: Path, seconds: float) -> None:
    run = tmp_path / "a1"
    with Mosquitto(tmp_path / "broker") as b:
        learner, assembler = learner_for(b.url), GroupAssembler()
        with producer(b.url, "a1", run, count=int(20 * (seconds + 4)), rate=20) as proc:
            got = drain(learner, assembler, 20, 60)  # about a second of traffic, then the broker goes away
            b.stop()
            time.sleep(seconds)
            spooled = len(Spool(run / "spool").entries())
            b.start()
            out, _ = proc.communicate(timeout=120 + seconds)
        assert proc.returncode == 0, out
        produced = sample_ids(run)
        got += drain(learner, assembler, len(produced) - len(got), 60)
        learner.close()
    assert spooled > 0  # the actor kept acting while the broker was away: its messages waited on disk
    assert sorted(got) == sorted(produced) and len(set(got)) == len(got)  # none lost, none counted twice
    assert produced == [f"a1/{i}" for i in range(len(produced))] and produced_ids(run / "spool")[:2] == ["a1/0", "a1/1"]


def test_nothing_is_lost_when_the_broker_stops_for_a_while(tmp_path):
    broker_outage(tmp_path, seconds=3)


@pytest.mark.slow
def test_nothing_is_lost_when_the_broker_stops_for_30_seconds(tmp_path):
    broker_outage(tmp_path, seconds=30)


def test_a_learner_that_reconnects_gets_what_was_queued_meanwhile(broker, tmp_path):
    learner_for(broker.url).close()  # the persistent session exists: the broker queues for it from now on
    run = tmp_path / "a1"
    with producer(broker.url, "a1", run, count=40, rate=0) as proc:
        assert proc.wait(60) == 0
    learner = learner_for(broker.url)  # the same client id, clean session off
    got = drain(learner, GroupAssembler(), 40, 30)
    learner.close()
    assert sorted(got) == sorted(sample_ids(run))


def cut_off(tmp_path: Path, seconds: float) -> None:
    run = tmp_path / "a1"
    with Mosquitto(tmp_path / "broker") as b:
        proxy = TcpProxy(b.port).start()
        learner, assembler = learner_for(b.url), GroupAssembler()
        with producer(f"mqtt://127.0.0.1:{proxy.port}/{b.prefix}", "a1", run, count=int(20 * (seconds + 3)),
                      rate=20) as proc:
            got = drain(learner, assembler, 10, 60)
            proxy.cut()  # the actor's network goes away; the broker sees its connection die
            end = time.monotonic() + 10
            while learner.statuses().get("a1", ActorStatus("a1", "?")).state != "offline" and time.monotonic() < end:
                time.sleep(0.05)
            will = learner.statuses()["a1"]
            time.sleep(seconds)
            proxy.heal()
            out, _ = proc.communicate(timeout=120 + seconds)
        assert proc.returncode == 0, out
        produced = sample_ids(run)
        got += drain(learner, assembler, len(produced) - len(got), 60)
        learner.close()
        proxy.stop()
    assert will.state == "offline" and "last will" in will.error  # the broker's last will for it
    assert sorted(got) == sorted(produced) and len(set(got)) == len(got)


def test_an_actor_cut_off_reconnects_and_replays_its_spool(tmp_path):
    cut_off(tmp_path, seconds=3)


@pytest.mark.slow
def test_an_actor_cut_off_for_a_minute_reconnects_and_replays_its_spool(tmp_path):
    cut_off(tmp_path, seconds=60)


def test_announcements_are_signed_and_a_forged_one_keeps_the_version(broker, tmp_path, caplog):
    learner = learner_for(broker.url, announce_url="http://127.0.0.1:8765")
    actor = MqttTransport(parse_broker(broker.url), role="actor", key=KEY, actor="a1",
                          spool=Spool(tmp_path / "spool")).start()
    files = {"adapter_model.safetensors": "ab" * 32}
    learner.announce(AdapterRef("learner@1", 1, "/run/adapters/v000001", "cd" * 32, files, 1.0,
                                sizes={"adapter_model.safetensors": 1000}))
    end = time.monotonic() + 10
    while actor.policy() is None and time.monotonic() < end:
        time.sleep(0.05)
    assert actor.policy().path == "http://127.0.0.1:8765/v000001"  # the folder becomes the learner's URL
    rogue = MqttTransport(parse_broker(broker.url), role="learner", key=b"k" * 32).start()
    rogue.client_id += "-rogue"
    forged = AdapterRef("learner@2", 2, "http://evil:80/v000002", "ef" * 32, files, 2.0)
    rogue._retained[rogue.topics.policy] = encode_message(sign(forged, b"k" * 32, rogue.topics.prefix))
    rogue._poke()
    time.sleep(1.0)
    unsigned = encode_message(forged)  # a bare AdapterRef on the policy topic: not an announcement
    rogue._retained[rogue.topics.policy] = unsigned
    rogue._poke()
    time.sleep(1.0)
    assert actor.policy().version == "learner@1"
    counts = actor.counts_now()
    assert counts.get("bad_signature") == 1 and counts.get("malformed") == 1, counts
    for t in (actor, learner, rogue):
        t.close()


def test_fleet_status_lists_every_actor_from_their_retained_statuses(broker, tmp_path, capsys):
    from agent.cli import main

    for name, device in (("phone-1", "android:emulator-5554"), ("desk-1", "desktop")):
        t = MqttTransport(parse_broker(broker.url), role="actor", key=KEY, actor=name, spool=Spool(tmp_path / name),
                          status_extras=lambda device=device: {"device": device, "host": "lab-3"}).start()
        t.set_status(ActorStatus(name, "running", "learner@4", episodes=7, steps=21, at=time.time()))
        t.close()
    assert main(["fleet", "status", "--broker", broker.url, "--wait", "0.5", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [(a["actor"], a["state"], a["device"], a["version"]) for a in report["actors"]] == [
        ("desk-1", "running", "desktop", "learner@4"), ("phone-1", "running", "android:emulator-5554", "learner@4")]
    assert main(["fleet", "status", "--broker", broker.url, "--wait", "0.5"]) == 0
    table = capsys.readouterr().out
    assert "phone-1" in table and "android:emulator-5554" in table and "ago" in table
    broker.stop()
    assert main(["fleet", "status", "--broker", broker.url, "--wait", "0.2"]) == 1
    assert "cannot reach the broker" in capsys.readouterr().out


def test_tls_passwords_and_the_acl_hold(tmp_path):
    users = {"learner": "learner-pw", "a1": "a1-pw"}
    b = Mosquitto(tmp_path / "secure", secure=True, users=users).start()
    url = f"mqtts://{{user}}@127.0.0.1:{b.port}/{b.prefix}"

    def connect(user: str, password: str, *, ca: bool = True, role: str = "actor", actor: str = "") -> MqttTransport:
        cfg = replace(parse_broker(url.format(user=user), ca_file=str(b.ca) if ca else ""), password=password)
        spool = Spool(tmp_path / f"spool-{user}-{actor}") if role == "actor" else None
        return MqttTransport(cfg, role=role, key=KEY, actor=actor or user, spool=spool).start()

    try:
        learner = connect("learner", "learner-pw", role="learner")
        assert learner.wait_connected(10)
        wrong = connect("a1", "guess")
        no_ca = connect("a1", "a1-pw", ca=False)
        assert not wrong.wait_connected(2) and not no_ca.wait_connected(0.5)  # refused; unverified server
        with pytest.raises(FleetError, match="refused user 'a1' with the password given"):
            wrong.wait_admitted(5)
        with pytest.raises(FleetError, match="does not verify .* give the CA certificate that signed it with --ca"):
            no_ca.wait_admitted(5)
        learner.wait_admitted(0)  # admitted: nothing to say
        a1 = connect("a1", "a1-pw")
        assert a1.wait_connected(10)
        a1.set_status(ActorStatus("a1", "running", at=time.time()))
        a1.send(group_message("a1", 0, __import__("numpy").zeros((8, 8, 3), "uint8")))
        posing = connect("a1", "a1-pw", actor="a2")  # a1's user publishing as a2: the ACL drops it
        posing.client_id += "-posing"
        posing.set_status(ActorStatus("a2", "running", at=time.time()))
        posing.send(group_message("a2", 0, __import__("numpy").zeros((8, 8, 3), "uint8")))
        got = drain(learner, GroupAssembler(), 2, 5)
        assert got == ["a1/0"] and set(learner.statuses()) == {"a1"}
        assert a1.pending_groups() == 0  # the broker acknowledged a1's own message
        for t in (learner, wrong, no_ca, a1, posing):
            t.close(flush_s=0)
    finally:
        b.stop()


def test_a_replayed_or_foreign_announcement_does_not_move_an_actor_back(broker, tmp_path):
    """Someone on the bus who holds the fleet key (an actor's machine) records the learner's announcement of v1 and
    republishes the same bytes after v2, then one signed for another session under the same key: the actor keeps
    v2, counts both, and its status (what the learner and ``agent fleet status`` see) says so."""
    from agent.config import load_train_config
    from agent.fleet.actor import ActorOptions, FleetActor

    config = load_train_config(None, ['model.id="tiny"', 'train.stage="rl"', f'train.run_dir="{tmp_path}"'])
    fleet_actor = FleetActor(config, ActorOptions(name="a1", env="generated/click"), parse_broker(broker.url), KEY)
    learner = learner_for(broker.url)
    actor = MqttTransport(parse_broker(broker.url), role="actor", key=KEY, actor="a1", spool=Spool(tmp_path / "spool"),
                          status_extras=fleet_actor._status_extras).start()
    fleet_actor.transport = actor  # what FleetActor.run does
    rogue = MqttTransport(parse_broker(broker.url), role="observer", key=KEY).start()
    assert rogue.wait_connected(10)
    heard: list[bytes] = []
    take = rogue.inbox.take
    rogue.inbox.take = lambda topic, payload: (heard.append(payload), take(topic, payload))  # type: ignore[method-assign]
    files, sizes = {"adapter_model.safetensors": "ab" * 32}, {"adapter_model.safetensors": 1000}

    def wait(until) -> None:
        end = time.monotonic() + 10
        while not until() and time.monotonic() < end:
            time.sleep(0.05)

    learner.announce(AdapterRef("learner@1", 1, "/run/adapters/v000001", "cd" * 32, files, 1.0, sizes=sizes))
    wait(lambda: actor.policy() is not None and heard)
    (recorded,) = heard
    learner.announce(AdapterRef("learner@2", 2, "/run/adapters/v000002", "ef" * 32, files, 2.0, sizes=sizes))
    wait(lambda: actor.policy().version == "learner@2")
    other = AdapterRef("learner@9", 9, "http://evil:80/v000009", "00" * 32, files, 9.0, sizes=sizes)
    for payload in (recorded, encode_message(sign(other, KEY, "handeye/another-session"))):
        rogue._retained[rogue.topics.policy] = payload
        rogue._poke()
        wait(lambda: not rogue._retained)
    wait(lambda: sum(actor.counts_now().get(k, 0) for k in ("stale_announcement", "bad_signature")) >= 2)
    counts = actor.counts_now()
    assert actor.policy().version == "learner@2", actor.policy()
    assert counts.get("stale_announcement") == 1 and counts.get("bad_signature") == 1, counts
    actor.set_status(ActorStatus("a1", "running", "learner@2", at=time.time()))
    wait(lambda: "a1" in learner.statuses())
    assert learner.statuses()["a1"].refused == 2
    for t in (actor, learner, rogue):
        t.close()

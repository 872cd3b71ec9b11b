"""The fleet's parts that need no broker: broker URLs and topics, the fleet key and signatures, the disk spool, the
learner's inbox (what it refuses, counted), and adapter versions over HTTP (the server, the fetch and its checks)."""

from __future__ import annotations

import json
import os
import threading
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from agent.errors import BadSignature, FleetError, SpoolFull
from agent.fleet.inbox import Inbox
from agent.fleet.keys import KEY_ENV, key_id, load_key, sign, verify, write_key
from agent.fleet.settings import PASSWORD_ENV, Topics, check_actor_name, parse_broker
from agent.fleet.spool import Spool, produced_ids
from agent.fleet.versions import VersionServer, fetch_version, sized
from tests.support import procs
from tests.support.light_actor import group_message
from train.adapters import AdapterRef, AdapterStore, adapter_digest, verify_adapter
from train.errors import AdapterChecksumError, AdapterError, AdapterPathError
from train.messages import ActorStatus, EpisodeMessage
from train.wire import decode_message, encode_message

KEY = bytes(range(32))


def test_broker_urls_say_what_is_wrong(tmp_path, monkeypatch):
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    b = parse_broker("mqtt://lab-broker")
    assert (b.host, b.port, b.prefix, b.tls, b.username, b.password) == ("lab-broker", 1883, "handeye/default",
                                                                        False, None, None)
    b = parse_broker("mqtts://actor-3@broker.example:9883/lab/run7")
    assert (b.port, b.prefix, b.tls, b.username) == (9883, "lab/run7", True, "actor-3")
    assert b.url == "mqtts://actor-3@broker.example:9883/lab/run7"
    monkeypatch.setenv(PASSWORD_ENV, "s3cret")
    assert parse_broker("mqtt://h").password == "s3cret"
    (tmp_path / "pw").write_text("from-file\n")
    assert parse_broker("mqtt://h", password_file=str(tmp_path / "pw")).password == "from-file"
    for bad, why in (("http://h", "is not mqtt"), ("mqtt://u:pw@h", "carries a password"),
                     ("mqtt://h/a/+/b", "no wildcards"), ("mqtt://h:99999", "mqtt://h:99999")):
        with pytest.raises(FleetError, match=why.replace("+", r"\+")):
            parse_broker(bad)
    with pytest.raises(FleetError, match="CA certificate"):
        parse_broker("mqtts://h", ca_file=str(tmp_path / "none.crt"))
    for bad in ("", "a/b", "a+", "#", "-x", "x" * 65):
        with pytest.raises(FleetError, match="topic level"):
            check_actor_name(bad)
    t = Topics("handeye/lab")
    assert t.parse("handeye/lab/samples/phone-1") == ("samples", "phone-1")
    assert t.parse("handeye/lab/policy") == ("policy", "")
    assert t.parse("handeye/other/samples/a") == ("", "") == t.parse("handeye/lab/samples/a/b")


def test_the_fleet_key_signs_announcements_and_a_forgery_is_refused(tmp_path, monkeypatch):
    ref = AdapterRef("learner@3", 3, "http://gpu:8765/v000003", "ab" * 32, {"a.bin": "cd" * 32}, 12.5)
    ann = sign(ref, KEY, "lab/run7")
    assert verify(ann, KEY, "lab/run7") == ref
    with pytest.raises(BadSignature, match="altered or forged"):
        verify(replace(ann, ref=replace(ref, path="http://evil:80/v000003")), KEY, "lab/run7")
    with pytest.raises(BadSignature, match="another fleet key"):
        verify(sign(ref, b"x" * 32, "lab/run7"), KEY, "lab/run7")
    with pytest.raises(BadSignature, match="altered or forged"):  # a forger who copies the fingerprint
        verify(replace(sign(ref, b"x" * 32, "lab/run7"), key_id=key_id(KEY)), KEY, "lab/run7")
    path = tmp_path / "fleet.key"
    fingerprint = write_key(path)
    assert oct(path.stat().st_mode & 0o777) == "0o600" and key_id(load_key(str(path))) == fingerprint
    with pytest.raises(FleetError, match="exists"):
        write_key(path)
    os.chmod(path, 0o644)
    with pytest.raises(FleetError, match="chmod 600"):
        load_key(str(path))
    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(FleetError, match="no fleet key"):
        load_key()
    monkeypatch.setenv(KEY_ENV, "short")
    with pytest.raises(FleetError, match="at least 16"):
        load_key()
    monkeypatch.setenv(KEY_ENV, KEY.hex())
    assert load_key() == KEY


def test_the_spool_keeps_messages_until_acknowledged_across_a_restart_and_says_when_it_is_full(tmp_path):
    spool = Spool(tmp_path / "spool", max_messages=3, memory_bytes=10)
    a = spool.put("p/samples/x", b"A" * 8, "m1")
    b = spool.put("p/samples/x", b"B" * 30, "m2")  # over the memory budget: read back from disk
    assert a.payload is not None and b.payload is None and spool.read(b) == b"B" * 30
    spool.ack(a)
    assert [e.topic for e in spool.entries()] == ["p/samples/x"] and len(spool) == 1
    (tmp_path / "spool" / ".000000000009.tmp").write_bytes(b"half a message")  # a put cut short by kill -9
    again = Spool(tmp_path / "spool", max_messages=3)  # the next start of the actor
    (entry,) = again.entries()
    assert again.read(entry) == b"B" * 30 and not list((tmp_path / "spool").glob(".*.tmp"))
    c = again.put("p/episodes/x", b"C", "e1")
    assert c.seq > entry.seq  # order goes on after the old ones
    again.put("p/samples/x", b"D", "m3")
    with pytest.raises(SpoolFull, match="3 messages.*Nothing was lost"):
        again.put("p/samples/x", b"E", "m4")
    assert produced_ids(tmp_path / "spool") == ["m1", "m2", "e1", "m3"]
    with pytest.raises(SpoolFull, match="MB"):
        Spool(tmp_path / "other", max_bytes=5).put("t", b"123456")


def test_the_inbox_refuses_and_counts_what_it_cannot_take(caplog):
    got: list[tuple[str, object]] = []
    topics = Topics("p")
    inbox = Inbox(topics, lambda kind, m: got.append((kind, m)), max_bytes=100_000, hold_s=5)
    frame = np.zeros((24, 32, 3), np.uint8)
    msg = encode_message(group_message("a1", 0, frame))
    inbox.take("p/samples/a1", msg)  # before a1's status: held, not refused
    assert got == [] and inbox.counts_now() == {}
    inbox.take("p/status/a1", encode_message(ActorStatus("a1", "running")))
    assert [k for k, _ in got] == ["status", "samples"]  # the status releases what was held
    inbox.take("p/samples/a1", msg)  # a second delivery goes on: the GroupAssembler drops it
    inbox.take("p/samples/a1", b"\x00\x00\x00\x05{nope")
    inbox.take("p/samples/a1", b"x" * 200_000)
    inbox.take("p/samples/a2", msg)  # a2 speaking as a1
    inbox.take("p/status/a1", msg)  # samples on a status topic
    inbox.take("q/samples/a1", msg)
    inbox.take("p/samples/ghost", encode_message(group_message("ghost", 0, frame)))
    episode = encode_message(EpisodeMessage("e1", "a1", "generated/click", 1, "ep0000", "failure", 0.0, 2))
    inbox.take("p/episodes/a1", episode)
    inbox.take("p/episodes/a1", episode)
    inbox.expire(now=time.monotonic() + 10)  # ghost never published a status
    counts = inbox.counts_now()
    assert counts == {"malformed": 2, "oversize": 1, "impersonation": 1, "bad_topic": 1, "unknown_actor": 1,
                      "duplicate_episodes": 1}
    assert [k for k, _ in got] == ["status", "samples", "samples", "episodes"]
    strict = Inbox(topics, lambda kind, m: got.append((kind, m)), allow=("a1",))
    strict.take("p/samples/a3", encode_message(group_message("a3", 0, frame)))
    assert strict.counts_now() == {"unknown_actor": 1}
    assert "not in the learner's --actors list" in caplog.text


def _published(tmp_path: Path) -> tuple[AdapterStore, AdapterRef]:
    src = tmp_path / "src"
    src.mkdir()
    (src / "adapter_config.json").write_text(json.dumps({"r": 4}))
    (src / "adapter_model.safetensors").write_bytes(os.urandom(200_000))
    store = AdapterStore(tmp_path / "learner" / "adapters")
    return store, store.publish_folder(src, "learner@1", 1)


def test_versions_travel_over_http_and_are_checked_on_arrival(tmp_path):
    store, ref = _published(tmp_path)
    root = tmp_path / "actor" / "adapters"
    with VersionServer(store.root, host="127.0.0.1", port=0) as server:
        remote = replace(sized(ref), path=f"{server.url}/v000001")
        local = fetch_version(remote, root)
        assert Path(local.path) == root / "v000001" and verify_adapter(local, root=root) == root / "v000001"
        assert adapter_digest(root / "v000001")[0] == ref.sha256 and server.served == 2
        assert fetch_version(ref, root) is ref  # a folder on this machine is not fetched
        forged = replace(remote, files={**remote.files, "adapter_config.json": "0" * 64})
        with pytest.raises(AdapterChecksumError, match="corrupt on the way"):
            fetch_version(forged, tmp_path / "a2")
        assert not (tmp_path / "a2" / "v000001").exists()  # nothing of a refused version is kept
        with pytest.raises(AdapterChecksumError, match="404"):
            fetch_version(replace(remote, path=f"{server.url}/v000009"), tmp_path / "a3")
        for path in ("/../learner/adapters/v000001/adapter_config.json", "/v000001/../../x", "/etc/passwd",
                     "/v000001/manifest.json/..", "/v000001"):
            assert server.file_for(path) is None, path
        with pytest.raises(AdapterPathError, match="plain names"):
            fetch_version(replace(remote, files={"../evil": "0" * 64}), tmp_path / "a4")
        with pytest.raises(AdapterPathError, match="version folder"):
            fetch_version(replace(remote, path=f"{server.url}/etc"), tmp_path / "a5")
    with pytest.raises(OSError):  # the server is gone: the follower keeps its version and tries again
        fetch_version(remote, tmp_path / "a6", timeout_s=2)


def test_the_commands_refuse_bad_settings_before_anything_starts(tmp_path, monkeypatch, capsys):
    from agent.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(KEY_ENV, raising=False)
    tiny = ["--set", 'model.id="tiny"']
    assert main(["actor", "--broker", "mqtt://127.0.0.1:9", "--device", "web", "--env", "generated/click",
                 *tiny]) == 2
    assert "no fleet key" in capsys.readouterr().out
    monkeypatch.setenv(KEY_ENV, KEY.hex())
    assert main(["actor", "--broker", "mqtt://127.0.0.1:9", "--device", "web", "--env", "desktop/click", *tiny]) == 2
    assert "runs on a desktop device, not --device web" in capsys.readouterr().out
    assert main(["actor", "--broker", "mqtt://u:pw@127.0.0.1:9", "--device", "web", "--env", "generated/click",
                 *tiny]) == 2
    assert "carries a password" in capsys.readouterr().out
    assert main(["actor", "--broker", "mqtt://127.0.0.1:9", "--device", "web", "--env", "generated/click",
                 "--name", "a/b", *tiny]) == 2
    assert "topic level" in capsys.readouterr().out
    assert main(["learner", "--broker", "mqtt://127.0.0.1:9", "--env", "generated/click", "--serve", "nowhere",
                 *tiny]) == 2
    assert "HOST:PORT" in capsys.readouterr().out
    assert main(["learner", "--broker", "mqtt://127.0.0.1:9", "--env", "generated/click", "--actors", "ok,no/pe",
                 *tiny]) == 2
    assert "topic level" in capsys.readouterr().out
    for flag, where in ((["--devices", "3"], "--devices: agent learner has no actors of its own: start one agent "
                                            "actor per device"),
                        (["--device-kind", "android"], "--device-kind: the device kind is each actor's: agent actor "
                                                       "--device KIND[:ADDRESS]"),
                        (["--online"], "--online: agent learner is always an online session"),
                        (["--parallel", "2"], "--parallel: agent learner has no actors of its own"),
                        (["--device", "android:p1"], "--device: the device is each actor's")):
        assert main(["learner", "--broker", "mqtt://127.0.0.1:9", "--env", "generated/click", *flag, *tiny]) == 2
        assert where in " ".join(capsys.readouterr().out.split())
    assert not (tmp_path / "runs").exists()  # nothing was started
    assert main(["fleet", "key", str(tmp_path / "k")]) == 0 and main(["fleet", "key", str(tmp_path / "k")]) == 2


def test_every_flag_agent_learner_takes_from_agent_train_online_is_its_own_or_refused():
    """A flag added to ``train_online.add_arguments`` is either one the learner reads or one of ``FOR_ACTORS``
    (refused, saying where it belongs): never accepted and ignored."""
    import argparse

    from agent.cli import train_online
    from agent.cli.learner import FOR_ACTORS

    parser = argparse.ArgumentParser()
    train_online.add_arguments(parser)
    flags = {s for action in parser._actions for s in action.option_strings} - {"-h", "--help"}  # hidden ones too
    learners = {"--env", "--group-level", "--max-policy-lag", "--group-timeout", "--minutes", "--demos", "--demo-share"}
    refused = {flag for flag, _ in FOR_ACTORS.values()}
    assert flags == learners | refused, flags ^ (learners | refused)


def test_agent_help_does_not_import_the_mqtt_client():
    import sys

    from tests.conftest import REPO

    code = ("import sys; from agent.cli import main\ntry: main(['--help'])\nexcept SystemExit: pass\n"
            "print('HEAVY', [m for m in ('aiomqtt', 'paho') if m in sys.modules])")
    r = procs.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert "HEAVY []" in r.stdout and "learner" in r.stdout and "actor" in r.stdout, r.stdout + r.stderr


def test_the_inbox_refuses_a_bomb_by_its_sender_and_declared_size_before_inflating_anything():
    from tests.train.test_wire import bomb_message

    got: list[tuple[str, object]] = []
    strict = Inbox(Topics("p"), lambda kind, m: got.append((kind, m)), allow=("a1",))
    open_ = Inbox(Topics("p"), lambda kind, m: got.append((kind, m)))
    tracemalloc.start()
    try:
        strict.take("p/samples/stranger", bomb_message("stranger"))  # not in --actors: not even parsed
        strict.take("p/samples/a1", bomb_message("a1"))  # a known actor over the pixel budget
        strict.take("p/samples/a1", bomb_message("a1", parts=16))
        open_.take("p/samples/newcomer", bomb_message("newcomer"))  # no list: not held, refused by its size
        open_.take("p/samples/a2", bomb_message("a1"))  # speaks for a1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32 * 2 ** 20, peak  # the old inbox inflated 1 GiB for each
    assert got == [] and open_.held == (0, 0)
    assert strict.counts_now() == {"unknown_actor": 1, "malformed": 2}
    assert open_.counts_now() == {"malformed": 2}  # a2 speaking as a1 with a bomb: the budget refuses it first


def test_messages_held_for_unknown_actors_are_capped_over_all_of_them():
    got: list[tuple[str, object]] = []
    inbox = Inbox(Topics("p"), lambda kind, m: got.append((kind, m)), hold_bytes=16 << 20)
    frame = np.random.default_rng(0).integers(0, 255, (64, 96, 3), dtype=np.uint8)  # raw: 18 KiB a message
    tracemalloc.start()
    try:
        for i in range(4000):  # invented names, one message each (the old cap was 2,000 per actor)
            name = f"ghost-{i}"
            inbox.take(f"p/samples/{name}", encode_message(group_message(name, 0, frame)))
        current, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    messages, size = inbox.held
    assert messages <= 2000 and size <= 16 << 20 and current < 24 << 20, (messages, size, current)
    assert inbox.counts_now()["unknown_actor"] == 4000 - messages
    inbox.take("p/status/ghost-3", encode_message(ActorStatus("ghost-3", "running")))  # a real actor, late
    assert [k for k, _ in got] == ["status", "samples"] and inbox.held[0] == messages - 1
    inbox.expire(now=time.monotonic() + 60)
    assert inbox.held == (0, 0)


def test_refusals_are_counted_each_and_logged_a_few_times_without_tracebacks(caplog):
    inbox = Inbox(Topics("p"), lambda kind, m: None)
    caplog.set_level("WARNING")
    for i in range(3000):  # malformed messages from 3,000 invented actors, and 3,000 off-session topics
        inbox.take(f"p/samples/x{i}", b"\x00\x00\x00\x05{nope" + bytes(i % 7))
        inbox.take(f"q/samples/x{i}", b"")
    assert inbox.counts_now() == {"malformed": 3000, "bad_topic": 3000}
    lines = [r for r in caplog.records if r.name == "agent.fleet.inbox"]
    assert len(lines) == 2 and not any(r.exc_info for r in lines), [r.getMessage() for r in lines]
    assert "logged at most once a minute" in lines[0].getMessage()


def test_an_announcement_is_signed_with_its_session_and_time_and_only_a_newer_one_replaces_it():
    from agent.fleet.keys import newer

    ref = AdapterRef("learner@3", 3, "http://gpu:8765/v000003", "ab" * 32, {"a.bin": "cd" * 32}, 12.5,
                     sizes={"a.bin": 10})
    ann = sign(ref, KEY, "lab/run7", issued_at=1000.0)
    assert verify(ann, KEY, "lab/run7") == ref
    with pytest.raises(BadSignature, match="another session"):
        verify(sign(ref, KEY, "lab/run6"), KEY, "lab/run7")  # same key, another session
    with pytest.raises(BadSignature, match="altered or forged"):
        verify(replace(ann, session="lab/run7-b"), KEY, "lab/run7-b")  # the session field rewritten
    with pytest.raises(BadSignature, match="altered or forged"):
        verify(replace(ann, issued_at=2000.0), KEY, "lab/run7")  # the time rewritten to pass as newer
    with pytest.raises(BadSignature, match="altered or forged"):
        verify(replace(ann, ref=replace(ref, sizes={"a.bin": 10 ** 12})), KEY, "lab/run7")  # the sizes too
    later = sign(replace(ref, version="learner@4", step=4), KEY, "lab/run7", issued_at=900.0)
    assert newer(later, ann) and not newer(ann, later) and not newer(ann, ann) and newer(ann, None)
    again = sign(ref, KEY, "lab/run7", issued_at=1001.0)  # a restarted learner announcing its version again
    assert newer(again, ann)
    back = decode_message(encode_message(ann))
    assert back == ann and verify(back, KEY, "lab/run7") == ref


class EndlessServer:
    """An HTTP server on loopback that answers every GET with up to ``limit`` bytes (no Content-Length, or a lying
    one), counting what it managed to send."""

    def __init__(self, limit: int, content_length: str | None = None) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        owner = self
        self.sent = 0

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self.send_response(200)
                if content_length is not None:
                    self.send_header("Content-Length", content_length)
                self.end_headers()
                chunk = bytes(1 << 16)
                try:
                    while owner.sent < limit:
                        self.wfile.write(chunk)
                        owner.sent += len(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> EndlessServer:  # noqa: PYI034
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"


def test_a_version_download_reads_no_more_than_the_announced_size(tmp_path):
    ref = AdapterRef("learner@1", 1, "", "ab" * 32, {"adapter_model.safetensors": "cd" * 32}, 1.0,
                     sizes={"adapter_model.safetensors": 4096})
    with EndlessServer(300 << 20) as server:  # 300 MiB on offer
        with pytest.raises(AdapterChecksumError, match="more than the 4096 bytes"):
            fetch_version(replace(ref, path=f"{server.url}/v000001"), tmp_path / "a1")
        time.sleep(0.2)  # let the server's write fail on the closed socket
        assert server.sent < 32 << 20, server.sent  # socket buffers at most; the old fetch took all 300 MiB
    assert not (tmp_path / "a1" / "v000001").exists()
    with EndlessServer(1 << 20, content_length=str(1 << 40)) as server, \
            pytest.raises(AdapterChecksumError, match="is 1099511627776 bytes long"):
        fetch_version(replace(ref, path=f"{server.url}/v000001"), tmp_path / "a2")
    with pytest.raises(AdapterError, match="states no size"):
        fetch_version(replace(ref, path="http://127.0.0.1:9/v000001", sizes={}), tmp_path / "a3")

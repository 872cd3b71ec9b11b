"""train.wire: the bus codec of an online session's messages (JSON header + binary image parts): every kind round
trips, and a payload from another machine is refused with a reason when it is oversized, malformed, of another
schema, or claims more parts, samples or pixels than the limits allow: a frame bigger than the pixel budget before
anything is inflated, a number that is not finite, an image that is a path, an announcement of the old format; and
whatever the header holds, the only error is a ``TransportError``."""

from __future__ import annotations

import json
import tracemalloc
import zlib

import numpy as np
import pytest

from tests.train.test_transport import MESSAGES, group
from train.adapters import AdapterRef, _digest
from train.errors import TransportError
from train.messages import ActorStatus, Announcement, EpisodeMessage, GroupMessage
from train.wire import MAX_HEADER_BYTES, MAX_INFLATED, MAX_PARTS, READABLE, SCHEMA, decode_message, encode_message


def raw(header: dict, parts: bytes = b"") -> bytes:
    data = json.dumps(header).encode()
    return len(data).to_bytes(4, "big") + data + parts


def test_a_group_round_trips_with_its_shared_image_sent_once():
    msg = group("g", 4)
    data = encode_message(msg)
    image_bytes = 28 * 56 * 3
    assert image_bytes < len(data) < 2 * image_bytes + 8000  # four samples, one image part
    back = decode_message(data)
    assert isinstance(back, GroupMessage) and back.group == "g" and back.parts == 1 and back.level == "step"
    for a, b in zip(msg.samples, back.samples):
        assert np.array_equal(a.image, b.image) and b.image.dtype == np.uint8
        assert (a.response_ids, a.behaviour_logprobs, a.reward, a.reward_parts, a.adapter_version, a.origin, a.id) == \
               (b.response_ids, b.behaviour_logprobs, b.reward, b.reward_parts, b.adapter_version, b.origin, b.id)
        assert b.messages == MESSAGES and b.frame_size == (1280, 800) and b.input_size == (56, 28)


def test_every_message_kind_round_trips():
    files = {"adapter_config.json": "a" * 64, "adapter_model.safetensors": "b" * 64}
    for msg in (
        EpisodeMessage(id="e1", actor="actor-1", env="generated/click", seed=7, episode_id="ep0003", outcome="success",
                       reward=1.0, steps=2, versions=("learner@1", "learner@2"), started_at=1.0, ended_at=2.5,
                       timings={"decide": 0.25, "act": 0.125}, group="s1/g0"),
        ActorStatus("actor-1", "restarting", "learner@2", 3, 9, 1, "DeviceDisconnected: gone", 5.0),
        ActorStatus("phone-7", "running", "learner@2", 3, 9, 0, "", 5.0, device="android:emulator-5554",
                    host="lab-3", steps_per_s=1.5, refused=1, spooled=12),
        AdapterRef("learner@2", 2, "/run/adapters/v000002", _digest(files), files, 99.0),
        Announcement(AdapterRef("learner@2", 2, "http://gpu:8765/v000002", _digest(files), files, 99.0), "ab" * 8,
                     "cd" * 32),
    ):
        assert decode_message(encode_message(msg)) == msg


def test_bad_payloads_are_refused_with_a_reason():
    data = encode_message(group("g", 2))
    with pytest.raises(TransportError, match="exceeds the limit"):
        encode_message(group("g", 2), max_bytes=1000)
    with pytest.raises(TransportError, match="exceeds the limit"):
        decode_message(data, max_bytes=100)
    with pytest.raises(TransportError, match="too short"):
        decode_message(b"\x00")
    with pytest.raises(TransportError, match="header claims"):
        decode_message(data[:20])
    with pytest.raises(TransportError, match="does not fit"):
        decode_message(data[:-10])  # the image part is cut off
    header = json.dumps({"schema": 99, "type": "group", "body": {}, "parts": []}).encode()
    with pytest.raises(TransportError, match="schema"):
        decode_message(len(header).to_bytes(4, "big") + header)
    header = json.dumps({"schema": 1, "type": "group", "body": {"id": "x"}, "parts": []}).encode()
    with pytest.raises(TransportError, match="malformed group"):
        decode_message(len(header).to_bytes(4, "big") + header)
    with pytest.raises(TransportError, match="not JSON"):
        decode_message((5).to_bytes(4, "big") + b"{nope")


def test_a_status_of_an_older_writer_reads_with_defaults_for_the_new_fields():
    body = {"actor": "a", "state": "running", "version": None, "episodes": 1, "steps": 2, "restarts": 0, "error": "",
            "at": 3.0}
    status = decode_message(raw({"schema": 1, "type": "status", "body": body, "parts": []}))
    assert status == ActorStatus("a", "running", None, 1, 2, 0, "", 3.0) and status.device == "" == status.host


def test_limits_on_decode_refuse_what_a_hostile_sender_could_claim():
    assert SCHEMA in READABLE
    with pytest.raises(TransportError, match="header of"):
        decode_message((MAX_HEADER_BYTES + 1).to_bytes(4, "big") + b"{}")
    parts = [{"shape": [1, 1, 3], "offset": 0, "length": 3}] * (MAX_PARTS + 1)
    with pytest.raises(TransportError, match="at most"):
        decode_message(raw({"schema": 1, "type": "group", "body": {}, "parts": parts}, b"abc"))
    for shape in ([4], [2, 2, 2, 2], [0, 5, 3], [2, 2, 9], [100000, 1, 3]):
        part = [{"shape": shape, "offset": 0, "length": int(np.prod(shape))}]
        with pytest.raises(TransportError, match="not an image"):
            decode_message(raw({"schema": 1, "type": "group", "body": {}, "parts": part}, b"x" * 64))
    many = {"id": "x", "actor": "a", "group": "g", "parts": 1, "level": "step", "created_at": 0.0,
            "samples": [{}] * 2000}
    with pytest.raises(TransportError, match="at most 1024 samples"):
        decode_message(raw({"schema": 1, "type": "group", "body": many, "parts": []}))
    deep = b"[" * 100_000  # nested past the parser's recursion limit
    with pytest.raises(TransportError, match="not JSON"):
        decode_message(len(deep).to_bytes(4, "big") + deep)
    with pytest.raises(TransportError, match="malformed"):
        decode_message(raw({"schema": 1, "type": "status", "body": {"actor": "a"}, "parts": []}))
    with pytest.raises(TransportError, match="unknown message type"):
        decode_message(raw({"schema": 1, "type": "shell", "body": {}, "parts": []}))
    with pytest.raises(TransportError, match="no wire format"):
        encode_message("rm -rf /")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        GroupMessage("x", "a", "g", 1, "batch", ())


def test_deflated_parts_are_lossless_and_never_inflate_past_their_shape():
    rng = np.random.default_rng(1)
    screen = np.full((72, 128, 3), 240, np.uint8)
    screen[10:30, 20:60] = rng.integers(0, 255, (20, 40, 3), dtype=np.uint8)  # a noisy widget on a flat page
    msg = group("g", 3, image=screen)
    raw_data, small = encode_message(msg), encode_message(msg, compress="zlib")
    assert len(small) < len(raw_data) / 2
    back = decode_message(small)
    assert np.array_equal(back.samples[0].image, screen) and back.samples[2].image is back.samples[0].image
    n = int.from_bytes(small[:4], "big")
    header = json.loads(small[4:4 + n])
    assert header["schema"] == 2 and header["parts"][0]["encoding"] == "zlib"
    assert json.loads(raw_data[4:4 + int.from_bytes(raw_data[:4], "big")])["schema"] == 1
    bomb = zlib.compress(bytes(100_000_000), 9)  # 100 MB of zeros in about 100 kB, declared as a small image
    lied = dict(header, parts=[dict(header["parts"][0], length=len(bomb))])
    with pytest.raises(TransportError, match="does not inflate to the 27648 bytes"):
        decode_message(raw(lied, bomb))
    junk = dict(header, parts=[dict(header["parts"][0], length=8)])
    with pytest.raises(TransportError, match="does not inflate"):
        decode_message(raw(junk, b"\x00" * 8))
    with pytest.raises(ValueError, match="compress"):
        encode_message(msg, compress="png")


def _bomb(shape: tuple[int, ...]) -> bytes:
    """A deflated run of zeros that really inflates to ``shape``'s bytes (a 16384x16384x4 frame: 1 GiB from about
    1 MiB)."""
    z, chunk, out = zlib.compressobj(9), bytes(16 << 20), []
    size = int(np.prod(shape))
    for _ in range(size // len(chunk)):
        out.append(z.compress(chunk))
    out.append(z.compress(bytes(size % len(chunk))))
    out.append(z.flush())
    return b"".join(out)


BOMB_SHAPE = (16384, 16384, 4)
BOMB = _bomb(BOMB_SHAPE)


def bomb_message(actor: str = "actor-0", parts: int = 1) -> bytes:
    """A group message whose one sample points at ``parts`` deflated parts each declaring a 16384x16384x4 frame."""
    header = json.loads(encode_message(group("g", 1))[4:4 + int.from_bytes(encode_message(group("g", 1))[:4], "big")])
    header["schema"], header["body"]["actor"] = 2, actor
    header["parts"] = [{"shape": list(BOMB_SHAPE), "offset": 0, "length": len(BOMB), "encoding": "zlib"}] * parts
    return raw(header, BOMB)


def test_a_small_message_declaring_a_huge_frame_is_refused_before_anything_is_inflated():
    data = bomb_message()
    assert len(data) < 1.2 * 2 ** 20  # about 1 MiB on the bus, 1 GiB if inflated
    tracemalloc.start()
    try:
        with pytest.raises(TransportError, match="over the budget"):
            decode_message(data)
        with pytest.raises(TransportError, match="over the budget"):
            decode_message(bomb_message(parts=16))  # 16 GiB declared in one message
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32 * 2 ** 20, peak  # the old decoder allocated the whole 1 GiB frame first
    lying = json.loads(data[4:4 + int.from_bytes(data[:4], "big")])
    lying["parts"] = [dict(lying["parts"][0], shape=[4096, 4096, 4], length=100)]
    with pytest.raises(TransportError, match="shrinks at most 1032x"):
        decode_message(raw(lying, BOMB[:100]))
    assert MAX_INFLATED < int(np.prod(BOMB_SHAPE))


def _header(data: bytes) -> dict:
    return json.loads(data[4:4 + int.from_bytes(data[:4], "big")])


def _rewritten(data: bytes, text: str) -> bytes:
    n = int.from_bytes(data[:4], "big")
    body = text.encode()
    return len(body).to_bytes(4, "big") + body + data[4 + n:]


def test_numbers_that_are_not_finite_are_refused_wherever_they_stand():
    data = encode_message(group("g", 2))
    text = data[4:4 + int.from_bytes(data[:4], "big")].decode()
    for old, new in (('"reward": 1.0', '"reward": NaN'), ('"reward": 0.0', '"reward": -Infinity'),
                     ("-0.5", "Infinity"), ("-2.0", "1e999"), ('"created_at": 12.5', '"created_at": ' + "9" * 400),
                     ('"correct": 1.0', '"correct": NaN')):
        assert old in text, old
        with pytest.raises(TransportError, match="finite|malformed"):
            decode_message(_rewritten(data, text.replace(old, new, 1)))
    episode = encode_message(EpisodeMessage("e", "a", "env", 1, "ep", "success", 1.0, 2, timings={"act": 0.5}))
    text = episode[4:].decode()
    for old, new in (('"reward": 1.0', '"reward": NaN'), ('"act": 0.5', '"act": Infinity'),
                     ('"reward": 1.0', '"reward": ' + "1" * 500)):
        with pytest.raises(TransportError):
            decode_message(_rewritten(episode, text.replace(old, new, 1)))


def test_a_sample_whose_image_is_a_string_is_refused_not_read_as_a_local_file(tmp_path):
    secret = tmp_path / "secret.npy"
    np.save(secret, np.zeros((2, 2, 3), np.uint8))
    header = _header(encode_message(group("g", 2)))
    for image in (str(secret), "/etc/passwd", "x" * 5000, "../../../etc/shadow"):
        for row in header["body"]["samples"]:
            row["image"], row["image_part"] = image, None
        with pytest.raises(TransportError, match="image part"):
            decode_message(raw(header, b"\x00" * 28 * 56 * 3))


def test_whatever_the_header_holds_the_only_error_is_a_transport_error():
    """Inputs that raised TypeError, OverflowError or OSError from the decoder before."""
    data = encode_message(group("g", 2))
    header = _header(data)
    part = header["parts"][0]
    cases = [{**header, "schema": [1]}, {**header, "schema": {"a": 1}}, {**header, "type": ["group"]},
             {**header, "parts": [dict(part, shape=[28.0, 56, 3])]}, {**header, "parts": [dict(part, offset="0")]},
             {**header, "parts": [dict(part, shape=[2 ** 70, 2, 3])]}, {**header, "parts": ["shape"]},
             {**header, "body": {**header["body"], "samples": "abc"}},
             {**header, "body": {**header["body"], "parts": 1.5}},
             {**header, "body": {**header["body"], "samples": [dict(header["body"]["samples"][0], image_part=-1)]}},
             {**header, "body": {**header["body"], "samples": [dict(header["body"]["samples"][0],
                                                                    response_ids=[2 ** 80])]}},
             {**header, "body": {**header["body"], "samples": [dict(header["body"]["samples"][0], messages=[1])]}},
             {**header, "body": []}]
    for case in cases:
        with pytest.raises(TransportError):
            decode_message(raw(case, data[4 + int.from_bytes(data[:4], "big"):]))


def test_an_announcement_of_the_old_format_is_refused_by_name():
    files = {"a.bin": "a" * 64}
    ref = AdapterRef("learner@2", 2, "http://gpu:8765/v000002", _digest(files), files, 99.0)
    old = {"schema": 1, "type": "announcement", "parts": [],
           "body": {"ref": ref.to_json(), "key_id": "ab" * 8, "signature": "cd" * 32}}
    with pytest.raises(TransportError, match="old format.*could be replayed"):
        decode_message(raw(old))

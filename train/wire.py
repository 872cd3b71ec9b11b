"""The wire codec of an online session's messages (``train.messages``): what a bus carries, never pickle.

A message is a 4-byte big-endian header length, a JSON header, then the images as raw uint8 parts::

    {"schema": 1, "type": "group" | "episode" | "status" | "policy" | "announcement", "body": {...},
     "parts": [{"shape": [h, w, 3], "offset": 0, "length": h * w * 3}, ...]}

The n samples of a step share one image, sent once. With ``compress="zlib"`` the parts are deflated, lossless
(``"encoding": "zlib"``, schema 2): a screen is mostly flat colour, so its bytes shrink 10-30x for a few
milliseconds, which is what a bus between machines should carry (docs/fleet.md has the figures). zlib rather than
PNG: as small on screens and four times faster (PNG's row filters cost more than they save there).

A payload is data from another machine, so decoding checks everything before it builds anything, and anything it
refuses is a ``TransportError`` saying why, never another exception (``bench/fuzz`` sends it 20,000 mutated
messages):

- the size of the whole message (``max_bytes``, 16 MiB by default) and of its header (``MAX_HEADER_BYTES``);
- the schema (``READABLE``): schema 1 readers ignore body fields they do not know, so adding an optional field
  keeps schema 1; a change an older reader would misread bumps ``SCHEMA`` and that reader refuses it by number;
- counts and shapes: at most ``MAX_PARTS`` image parts of 2 or 3 dimensions (sides up to ``MAX_SIDE``, up to 4
  channels), each inside the bytes that follow the header (a deflated one inflates to exactly its shape's size,
  never more, and cannot claim more than deflate's ``MAX_RATIO`` of its length), and at most ``MAX_SAMPLES``
  samples per group;
- the pixel budget: the parts' declared h x w x c together at most ``max_inflated`` (``MAX_INFLATED``, 256 MiB),
  checked on the header before a single part is inflated, so a 1 MiB message declaring a 16384x16384x4 frame
  costs a JSON parse, not a gigabyte;
- the body's fields and types, strictly (a missing or mistyped field is "malformed"): numbers finite (the header's
  JSON may not say ``NaN`` or ``Infinity``, nor a number past the float range), token ids integers, and a
  sample's image an image part, never a string (a path would name a file on the learner's machine);
- an announcement's session and time (``agent.fleet.keys``): one without them is the old format, refused by name.

``open_envelope`` does the checks that need no inflating (size, header, schema, kind, the actor the body names,
the parts and the pixel budget) and returns an ``Envelope``, so the learner's inbox can refuse a message by its
sender, topic and declared sizes before it costs anything; ``decode_message`` then builds the message.
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from train.adapters import AdapterRef
from train.errors import AdapterError, TransportError
from train.messages import ActorStatus, Announcement, EpisodeMessage, GroupMessage, Message
from train.samples import TrainSample

__all__ = ["KINDS", "MAX_BYTES", "MAX_HEADER_BYTES", "MAX_INFLATED", "MAX_PARTS", "MAX_RATIO", "MAX_SAMPLES",
           "READABLE", "SCHEMA", "Envelope", "decode_message", "encode_message", "message_kind", "open_envelope"]

SCHEMA = 1
"""The schema this handeye writes for raw image parts; 2 when they are deflated (``compress="zlib"``): a schema 1
reader would take deflated bytes for pixels, so it must refuse them by number."""
READABLE = frozenset({1, 2})
"""The schemas this handeye reads."""
MAX_BYTES = 16 * 1024 * 1024
"""Default size limit of one encoded message (MQTT brokers commonly cap payloads near this)."""
MAX_HEADER_BYTES = 4 * 1024 * 1024
MAX_PARTS = 64
MAX_SAMPLES = 1024
MAX_SIDE = 16384
MAX_INFLATED = 256 * 1024 * 1024
"""Default pixel budget of one message: its image parts' declared h x w x c together (16 MiB of deflated screens
inflate to at most about this; a 1280x720 frame is 2.8 MB)."""
MAX_RATIO = 1032
"""Deflate's largest possible ratio (258-byte matches in 2 bits): a part claiming more is a lie."""
KINDS = ("group", "episode", "status", "policy", "announcement")
_LEN = struct.Struct(">I")


def message_kind(message: Message) -> str:
    """The header ``type`` of ``message``."""
    for cls, kind in ((GroupMessage, "group"), (EpisodeMessage, "episode"), (ActorStatus, "status"),
                      (AdapterRef, "policy"), (Announcement, "announcement")):
        if isinstance(message, cls):
            return kind
    raise TransportError(f"no wire format for {type(message).__name__}")


def _sample_json(s: TrainSample, parts: list[np.ndarray], index: dict[int, int]) -> dict[str, Any]:
    if isinstance(s.image, np.ndarray):
        key = id(s.image)
        if key not in index:  # the n samples of a step share one image: send it once
            index[key] = len(parts)
            parts.append(np.ascontiguousarray(s.image))
        row = s.to_json(image_path="")
        row["image"] = None
        row["image_part"] = index[key]
        return row
    return s.to_json()


def _body(message: Message, parts: list[np.ndarray]) -> dict[str, Any]:
    if isinstance(message, GroupMessage):
        index: dict[int, int] = {}
        return {"id": message.id, "actor": message.actor, "group": message.group, "parts": message.parts,
                "level": message.level, "created_at": message.created_at,
                "samples": [_sample_json(s, parts, index) for s in message.samples]}
    if isinstance(message, EpisodeMessage):
        return {"id": message.id, "actor": message.actor, "env": message.env, "seed": message.seed,
                "episode_id": message.episode_id, "outcome": message.outcome, "reward": message.reward,
                "steps": message.steps, "versions": list(message.versions), "started_at": message.started_at,
                "ended_at": message.ended_at, "timings": dict(message.timings), "group": message.group}
    if isinstance(message, ActorStatus):
        return {"actor": message.actor, "state": message.state, "version": message.version,
                "episodes": message.episodes, "steps": message.steps, "restarts": message.restarts,
                "error": message.error, "at": message.at, "device": message.device, "host": message.host,
                "steps_per_s": message.steps_per_s, "refused": message.refused, "spooled": message.spooled}
    if isinstance(message, AdapterRef):
        return message.to_json()
    if isinstance(message, Announcement):
        return {"ref": message.ref.to_json(), "key_id": message.key_id, "signature": message.signature,
                "session": message.session, "issued_at": message.issued_at}
    raise TransportError(f"no wire format for {type(message).__name__}")


def _deflate(p: np.ndarray) -> bytes:
    return zlib.compress(np.ascontiguousarray(p).tobytes(), 1)  # level 1: a screen is mostly runs of one colour


def encode_message(message: Message, *, max_bytes: int = MAX_BYTES, compress: str = "") -> bytes:
    """``message`` as bytes: a 4-byte header length, the JSON header, then the image parts: raw uint8, or with
    ``compress="zlib"`` deflated (schema 2: screens shrink 10-30x, for a few milliseconds per image)."""
    if compress not in ("", "zlib"):
        raise ValueError(f"compress must be '' or 'zlib', got {compress!r}")
    parts: list[np.ndarray] = []
    kind = message_kind(message)
    body = _body(message, parts)
    layout, blobs, offset = [], [], 0
    for p in parts:
        if p.dtype != np.uint8:
            raise TransportError(f"image parts must be uint8 arrays, got {p.dtype}")
        blob = _deflate(p) if compress else p.tobytes()
        layout.append({"shape": list(p.shape), "offset": offset, "length": len(blob),
                       **({"encoding": "zlib"} if compress else {})})
        blobs.append(blob)
        offset += len(blob)
    try:
        header = json.dumps({"schema": 2 if compress and parts else 1, "type": kind, "body": body, "parts": layout},
                            ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise TransportError(f"cannot encode a {kind} message as JSON: {exc}") from exc
    size = _LEN.size + len(header) + offset
    if size > max_bytes:
        raise TransportError(f"a {kind} message of {size} bytes exceeds the limit of {max_bytes} bytes; send fewer "
                             f"samples per message or smaller images (model.max_pixels)")
    return b"".join([_LEN.pack(len(header)), header, *blobs])


@dataclass(frozen=True, slots=True)
class Envelope:
    """What a message says about itself before anything is built from it (``open_envelope``): its kind, the actor
    its body names, and the pixel bytes its image parts declare, every part's shape, offset and length checked."""

    kind: str
    """The header's ``type``: group, episode, status, policy or announcement."""
    actor: str
    """The body's ``actor`` ("" for a policy or an announcement, which name none)."""
    pixel_bytes: int
    """The sum of h x w x c over the image parts: what decoding would allocate for them."""
    header: dict[str, Any]
    parts: tuple[tuple[tuple[int, ...], int, int, bool], ...]
    """(shape, offset, length, deflated) of each image part."""


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number a message may carry")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is not a finite number")
    return value


def _refused(what: str, exc: BaseException) -> TransportError:
    return TransportError(f"{what}: {type(exc).__name__}: {exc}"[:500])


def open_envelope(data: bytes, *, max_bytes: int = MAX_BYTES, max_inflated: int = MAX_INFLATED) -> Envelope:
    """The ``Envelope`` of ``data``: its size, header, schema and image parts checked against the limits (the module
    docstring), nothing inflated or built; ``TransportError`` saying what is wrong otherwise."""
    if len(data) > max_bytes:
        raise TransportError(f"a message of {len(data)} bytes exceeds the limit of {max_bytes} bytes")
    if len(data) < _LEN.size:
        raise TransportError(f"a message of {len(data)} bytes is too short to hold a header")
    (n,) = _LEN.unpack_from(data)
    if n > MAX_HEADER_BYTES:
        raise TransportError(f"a header of {n} bytes exceeds the limit of {MAX_HEADER_BYTES} bytes")
    if _LEN.size + n > len(data):
        raise TransportError(f"the header claims {n} bytes, the message holds {len(data) - _LEN.size}")
    try:
        header = json.loads(bytes(data[_LEN.size:_LEN.size + n]).decode("utf-8"), parse_constant=_no_constant,
                            parse_float=_finite)
    except (UnicodeDecodeError, ValueError, RecursionError, OverflowError) as exc:
        raise _refused("the message header is not JSON of finite numbers", exc) from None
    schema = header.get("schema") if isinstance(header, dict) else None
    if type(schema) is not int or schema not in READABLE:  # a list or an object is unhashable: not a schema either
        raise TransportError(f"message schema {schema!r:.40}; "
                             f"this handeye reads schema {', '.join(map(str, sorted(READABLE)))}")
    kind, body = header.get("type"), header.get("body")
    if kind not in KINDS or not isinstance(body, dict):
        raise TransportError(f"unknown message type {kind!r:.60}" if kind not in KINDS else
                             f"a {kind} message without a body object")
    actor = body.get("actor", "") if kind in ("group", "episode", "status") else ""
    if not isinstance(actor, str):
        raise TransportError(f"a {kind} message whose actor is not a string")
    parts = _layout(header.get("parts"), len(data) - _LEN.size - n, max_inflated)
    return Envelope(kind, actor, sum(math.prod(shape) for shape, *_ in parts), header, parts)


def decode_message(data: bytes, *, max_bytes: int = MAX_BYTES, max_inflated: int = MAX_INFLATED,
                   envelope: Envelope | None = None) -> Message:
    """Inverse of ``encode_message``; ``TransportError`` for anything malformed, oversized, of another schema or
    over the pixel budget (see the module docstring), and for nothing else. ``envelope``: ``data``'s, already
    opened (``open_envelope``), so the header is not parsed twice."""
    env = envelope or open_envelope(data, max_bytes=max_bytes, max_inflated=max_inflated)
    blob = memoryview(data)[_header_len(data):]
    try:
        arrays = [_array(blob, shape, offset, length, deflated) for shape, offset, length, deflated in env.parts]
        return _message(env.kind, env.header["body"], arrays)
    except TransportError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError, RecursionError,
            AdapterError) as exc:
        raise _refused(f"malformed {env.kind} message", exc) from None


def _header_len(data: bytes) -> int:
    return int(_LEN.unpack_from(data)[0]) + _LEN.size


def _int(value: Any, what: str) -> int:
    if type(value) is not int:
        raise TransportError(f"{what} must be an integer, not {type(value).__name__}")
    return value


def _layout(layout: Any, room: int, budget: int) -> tuple[tuple[tuple[int, ...], int, int, bool], ...]:
    if not isinstance(layout, list) or len(layout) > MAX_PARTS:
        raise TransportError(f"a message may carry at most {MAX_PARTS} image parts, this one "
                             f"{len(layout) if isinstance(layout, list) else 'a non-list'}")
    out, total = [], 0
    for p in layout:
        if not isinstance(p, dict) or not isinstance(p.get("shape"), list) or p.get("encoding", "") not in ("", "zlib"):
            raise TransportError(f"image part {p!r:.100} is not {{shape, offset, length[, encoding: zlib]}}")
        shape = tuple(_int(d, "an image side") for d in p["shape"])
        offset, length = _int(p.get("offset"), "a part's offset"), _int(p.get("length"), "a part's length")
        if (len(shape) not in (2, 3) or not all(0 < d <= MAX_SIDE for d in shape[:2])
                or (len(shape) == 3 and not 0 < shape[2] <= 4)):
            raise TransportError(f"image part shape {list(shape)} is not an image (h, w[, c <= 4], sides up to "
                                 f"{MAX_SIDE})")
        size, deflated = math.prod(shape), p.get("encoding") == "zlib"
        total += size
        if total > budget:
            raise TransportError(f"the image parts declare {total:,} bytes of pixels or more, over the budget of "
                                 f"{budget:,} bytes a message may take; nothing was inflated (smaller frames: "
                                 f"model.max_pixels, or fewer steps per message)")
        if offset < 0 or length < 0 or offset + length > room or (not deflated and size != length):
            raise TransportError(f"image part {p!r:.200} does not fit the {room} bytes of parts")
        if deflated and size > MAX_RATIO * length + 64:
            raise TransportError(f"a deflated part of {length} bytes does not inflate to the {size} bytes its shape "
                                 f"declares: deflate shrinks at most {MAX_RATIO}x")
        out.append((shape, offset, length, deflated))
    return tuple(out)


def _array(blob: memoryview, shape: tuple[int, ...], offset: int, length: int, deflated: bool) -> np.ndarray:
    data = blob[offset:offset + length]
    if deflated:
        return np.frombuffer(_inflate(data, math.prod(shape)), dtype=np.uint8).reshape(shape)
    return np.frombuffer(data, dtype=np.uint8).reshape(shape).copy()


def _inflate(data: memoryview, size: int) -> bytes:
    """A deflated part, inflated to at most the ``size`` its shape declares (a small part must not inflate into
    gigabytes), and exactly that size."""
    inflater = zlib.decompressobj()
    try:
        pixels = inflater.decompress(data, size)
    except zlib.error as exc:
        raise TransportError(f"an image part marked zlib does not inflate: {exc}") from None
    if len(pixels) != size or inflater.unconsumed_tail or not inflater.eof:
        raise TransportError(f"an image part marked zlib does not inflate to the {size} bytes its shape declares")
    return pixels


def _str(body: dict[str, Any], key: str, default: str | None = None) -> str:
    value = body.get(key, default) if default is not None else body[key]
    if not isinstance(value, str):
        raise TransportError(f"field {key!r} must be a string, not {type(value).__name__}")
    return value


def _num(value: Any, what: str) -> float:
    """A finite float from a JSON number (the parser already refused NaN and infinities; a huge integer is refused
    here)."""
    if type(value) not in (int, float):
        raise TransportError(f"{what} must be a number, not {type(value).__name__}")
    out = float(value)  # OverflowError for an integer past the float range: caught as malformed
    if not math.isfinite(out):
        raise TransportError(f"{what} is not finite")
    return out


def _sample(row: Any, arrays: list[np.ndarray]) -> TrainSample:
    """One sample of a group message: its image an image part (never a path: a path names a file on this machine),
    its numbers finite."""
    if not isinstance(row, dict):
        raise TransportError(f"a sample must be an object, not {type(row).__name__}")
    row = dict(row)
    part = row.pop("image_part", None)
    if row.get("image") is not None:
        raise TransportError("a sample's image must travel as an image part; a path or other value in 'image' is "
                             "refused (it would name a file on the learner's machine)")
    if part is not None and not 0 <= _int(part, "image_part") < len(arrays):
        raise TransportError(f"a sample names image part {part}, the message has {len(arrays)}")
    messages = row.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, dict) and isinstance(m.get("role"), str) and
                                                 isinstance(m.get("content"), (str, list)) for m in messages):
        raise TransportError("a sample's messages must be a list of {role, content} objects")
    ids, lps = row.get("response_ids"), row.get("behaviour_logprobs")
    if not isinstance(ids, list) or not all(type(t) is int and 0 <= t < 1 << 31 for t in ids):
        raise TransportError("a sample's response_ids must be a list of token ids")
    if lps is not None and not isinstance(lps, list):
        raise TransportError("a sample's behaviour_logprobs must be a list or null")
    row["behaviour_logprobs"] = None if lps is None else [_num(x, "a log-prob") for x in lps]
    row["reward"] = _num(row.get("reward"), "a sample's reward")
    parts = row.get("reward_parts") or {}
    if not isinstance(parts, dict) or not isinstance(row.get("origin") or {}, dict):
        raise TransportError("a sample's reward_parts and origin must be objects")
    row["reward_parts"] = {str(k): _num(v, "a reward part") for k, v in parts.items()}
    for key in ("adapter_version", "id"):
        if row.get(key) is not None and not isinstance(row[key], str):
            raise TransportError(f"a sample's {key} must be a string or null")
    s = TrainSample.from_json(row)
    return replace(s, image=arrays[part]) if part is not None else s


def _message(kind: str, body: dict[str, Any], arrays: list[np.ndarray]) -> Message:
    if kind == "group":
        samples = body["samples"]
        if not isinstance(samples, list) or len(samples) > MAX_SAMPLES:
            raise TransportError(f"a group message may carry at most {MAX_SAMPLES} samples, this one "
                                 f"{len(samples) if isinstance(samples, list) else 'a non-list'}")
        return GroupMessage(id=_str(body, "id"), actor=_str(body, "actor"), group=_str(body, "group"),
                            parts=_int(body["parts"], "parts"), level=_str(body, "level"),
                            samples=tuple(_sample(row, arrays) for row in samples),
                            created_at=_num(body["created_at"], "created_at"))
    if kind == "episode":
        versions, timings = body["versions"], body["timings"]
        if not isinstance(versions, list) or not all(isinstance(v, str) for v in versions) or \
                not isinstance(timings, dict):
            raise TransportError("an episode's versions must be a list of strings and its timings an object")
        return EpisodeMessage(id=_str(body, "id"), actor=_str(body, "actor"), env=_str(body, "env"),
                              seed=_int(body["seed"], "seed"), episode_id=_str(body, "episode_id"),
                              outcome=_str(body, "outcome"),
                              reward=None if body["reward"] is None else _num(body["reward"], "an episode's reward"),
                              steps=_int(body["steps"], "steps"), versions=tuple(versions),
                              started_at=_num(body["started_at"], "started_at"),
                              ended_at=_num(body["ended_at"], "ended_at"),
                              timings={str(k): _num(v, "a timing") for k, v in timings.items()},
                              group=_str(body, "group", ""))
    if kind == "status":
        version = body["version"]
        if version is not None and not isinstance(version, str):
            raise TransportError("a status's version must be a string or null")
        return ActorStatus(actor=_str(body, "actor"), state=_str(body, "state"), version=version,
                           episodes=_int(body["episodes"], "episodes"), steps=_int(body["steps"], "steps"),
                           restarts=_int(body["restarts"], "restarts"), error=_str(body, "error"),
                           at=_num(body["at"], "at"), device=_str(body, "device", ""), host=_str(body, "host", ""),
                           steps_per_s=_num(body.get("steps_per_s", 0.0), "steps_per_s"),
                           refused=_int(body.get("refused", 0), "refused"),
                           spooled=_int(body.get("spooled", 0), "spooled"))
    if kind == "policy":
        return AdapterRef.from_json(body)
    if "session" not in body or "issued_at" not in body:
        raise TransportError("an announcement of the old format (its signature covers neither the session nor a "
                             "time, so it could be replayed): refused; run the same handeye on the learner and the "
                             "actors")
    ref = body["ref"]
    if not isinstance(ref, dict):
        raise TransportError("an announcement's ref must be an object")
    return Announcement(AdapterRef.from_json(ref), _str(body, "key_id"), _str(body, "signature"),
                        session=_str(body, "session"), issued_at=_num(body["issued_at"], "issued_at"))

"""The wire codec of an online session's messages (``train.messages``): what a bus carries, never pickle.

A message is a 4-byte big-endian header length, a JSON header, then the images as raw uint8 parts::

    {"schema": 1, "type": "group" | "episode" | "status" | "policy" | "announcement", "body": {...},
     "parts": [{"shape": [h, w, 3], "offset": 0, "length": h * w * 3}, ...]}

The n samples of a step share one image, sent once. With ``compress="zlib"`` the parts are deflated, lossless
(``"encoding": "zlib"``, schema 2): a screen is mostly flat colour, so its bytes shrink 10-30x for a few
milliseconds, which is what a bus between machines should carry (docs/fleet.md has the figures). zlib rather than
PNG: as small on screens and four times faster (PNG's row filters cost more than they save there).

A payload is data from another machine, so decoding checks everything before it builds anything, and anything it
refuses is a ``TransportError`` saying why:

- the size of the whole message (``max_bytes``, 16 MiB by default) and of its header (``MAX_HEADER_BYTES``);
- the schema (``READABLE``): schema 1 readers ignore body fields they do not know, so adding an optional field
  keeps schema 1; a change an older reader would misread bumps ``SCHEMA`` and that reader refuses it by number;
- counts and shapes: at most ``MAX_PARTS`` image parts of 2 or 3 dimensions (sides up to ``MAX_SIDE``, up to 4
  channels), each inside the bytes that follow the header (a deflated one inflates to exactly its shape's size,
  never more), and at most ``MAX_SAMPLES`` samples per group;
- the body's fields and types (a missing or mistyped field is "malformed").
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import replace
from typing import Any

import numpy as np

from train.adapters import AdapterRef
from train.errors import AdapterError, TransportError
from train.messages import ActorStatus, Announcement, EpisodeMessage, GroupMessage, Message
from train.samples import TrainSample

__all__ = ["MAX_BYTES", "MAX_HEADER_BYTES", "MAX_PARTS", "MAX_SAMPLES", "READABLE", "SCHEMA", "decode_message",
           "encode_message", "message_kind"]

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
        return {"ref": message.ref.to_json(), "key_id": message.key_id, "signature": message.signature}
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


def decode_message(data: bytes, *, max_bytes: int = MAX_BYTES) -> Message:
    """Inverse of ``encode_message``; ``TransportError`` for anything malformed, oversized or of another schema
    (see the module docstring)."""
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
        header = json.loads(bytes(data[_LEN.size:_LEN.size + n]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise TransportError(f"the message header is not JSON: {type(exc).__name__}: {exc}"[:300]) from exc
    if not isinstance(header, dict) or header.get("schema") not in READABLE:
        raise TransportError(f"message schema {header.get('schema') if isinstance(header, dict) else None!r}; "
                             f"this handeye reads schema {', '.join(map(str, sorted(READABLE)))}")
    blob = memoryview(data)[_LEN.size + n:]
    try:
        arrays = _arrays(header["parts"], blob)
        return _message(header["type"], header["body"], arrays)
    except TransportError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, AdapterError) as exc:
        raise TransportError(f"malformed {header.get('type')} message: {type(exc).__name__}: {exc}"[:500]) from exc


def _arrays(layout: Any, blob: memoryview) -> list[np.ndarray]:
    if not isinstance(layout, list) or len(layout) > MAX_PARTS:
        raise TransportError(f"a message may carry at most {MAX_PARTS} image parts, this one "
                             f"{len(layout) if isinstance(layout, list) else 'a non-list'}")
    arrays = []
    for p in layout:
        shape, offset, length = tuple(int(d) for d in p["shape"]), int(p["offset"]), int(p["length"])
        if (len(shape) not in (2, 3) or not all(0 < d <= MAX_SIDE for d in shape[:2])
                or (len(shape) == 3 and not 0 < shape[2] <= 4)):
            raise TransportError(f"image part shape {list(shape)} is not an image (h, w[, c <= 4], sides up to "
                                 f"{MAX_SIDE})")
        deflated = p.get("encoding") == "zlib"
        if offset < 0 or offset + length > len(blob) or (not deflated and int(np.prod(shape)) != length):
            raise TransportError(f"image part {p} does not fit the {len(blob)} bytes of parts")
        data = blob[offset:offset + length]
        pixels = _inflate(data, int(np.prod(shape))) if deflated else data
        arrays.append(np.frombuffer(pixels, dtype=np.uint8).reshape(shape).copy())
    return arrays


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


def _message(kind: str, body: dict[str, Any], arrays: list[np.ndarray]) -> Message:
    if kind == "group":
        if len(body["samples"]) > MAX_SAMPLES:
            raise TransportError(f"a group message may carry at most {MAX_SAMPLES} samples, this one "
                                 f"{len(body['samples'])}")
        samples = []
        for row in body["samples"]:
            part = row.pop("image_part", None)
            s = TrainSample.from_json(row)
            samples.append(replace(s, image=arrays[int(part)]) if part is not None else s)
        return GroupMessage(id=str(body["id"]), actor=str(body["actor"]), group=str(body["group"]),
                            parts=int(body["parts"]), level=str(body["level"]), samples=tuple(samples),
                            created_at=float(body["created_at"]))
    if kind == "episode":
        return EpisodeMessage(id=str(body["id"]), actor=str(body["actor"]), env=str(body["env"]),
                              seed=int(body["seed"]), episode_id=str(body["episode_id"]), outcome=str(body["outcome"]),
                              reward=None if body["reward"] is None else float(body["reward"]),
                              steps=int(body["steps"]), versions=tuple(str(v) for v in body["versions"]),
                              started_at=float(body["started_at"]), ended_at=float(body["ended_at"]),
                              timings={str(k): float(v) for k, v in body["timings"].items()},
                              group=str(body.get("group", "")))
    if kind == "status":
        return ActorStatus(actor=str(body["actor"]), state=str(body["state"]),
                           version=None if body["version"] is None else str(body["version"]),
                           episodes=int(body["episodes"]), steps=int(body["steps"]), restarts=int(body["restarts"]),
                           error=str(body["error"]), at=float(body["at"]), device=str(body.get("device", "")),
                           host=str(body.get("host", "")), steps_per_s=float(body.get("steps_per_s", 0.0)),
                           refused=int(body.get("refused", 0)), spooled=int(body.get("spooled", 0)))
    if kind == "policy":
        return AdapterRef.from_json(body)
    if kind == "announcement":
        return Announcement(AdapterRef.from_json(body["ref"]), str(body["key_id"]), str(body["signature"]))
    raise TransportError(f"unknown message type {kind!r}")

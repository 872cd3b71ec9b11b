"""The wire target: mutated fleet messages through the learner's inbox and the decoder, tallied.

Valid messages of every kind a fleet bus carries (group messages with raw and deflated frames, episodes, statuses,
signed announcements, bare adapter refs) are mutated 1-3 times, at the level of the bytes (flipped, cut, inserted,
repeated, the header length rewritten) or of the header's JSON (a value anywhere replaced by NaN, an infinity, a
number past the float range, a huge or negative integer, a string, a path, a list, an object, null, a boolean, a
deep nest; a key removed or added; a part's shape or length lied about, a frame declared 16384x16384x4 over a
deflated run of zeros; a sample's image made a file path). Each mutant goes through ``train.wire.decode_message``
and through an ``agent.fleet.inbox.Inbox`` on its own topic (what the learner does with a message from the bus).

Counted:

- refused: the documented refusal (``TransportError`` from the decoder; a counted refusal in the inbox);
- accepted, and among those ``bad_accepted``: a message delivered with a number that is not finite or a sample
  whose image is not an array (a path the learner would read);
- errors: any other exception, by where and type, each with its shortest input (hex);
- memory: resident memory before, at its peak and after (``ru_maxrss``, ``/proc/self/status``), against the budget
  of one message's pixels (``train.wire.MAX_INFLATED``).
"""

from __future__ import annotations

import json
import logging
import math
import random
import resource
import time
import zlib
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

import numpy as np

from agent.fleet.inbox import Inbox
from agent.fleet.keys import sign
from agent.fleet.settings import Topics
from train.adapters import AdapterRef
from train.errors import TransportError
from train.messages import ActorStatus, EpisodeMessage, GroupMessage
from train.samples import TrainSample
from train.wire import MAX_INFLATED, decode_message, encode_message

PREFIX = "fuzz/session"
ACTOR = "a1"
_KEY = bytes(range(32))
_TOPIC = {"group": "samples", "episode": "episodes", "status": "status", "announcement": "policy", "policy": "policy"}


def _frame(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    screen = np.full((h, w, 3), 235, np.uint8)
    screen[h // 4:h // 2, w // 4:w // 2] = rng.integers(0, 255, (h // 2 - h // 4, w // 2 - w // 4, 3), dtype=np.uint8)
    return screen


def _group(i: int, frame: np.ndarray, samples: int) -> GroupMessage:
    rows = tuple(TrainSample(messages=[{"role": "user", "content": [{"type": "image"}, {"type": "text",
                                                                                       "text": "click OK"}]}],
                             image=frame, frame_size=(1280, 720), input_size=(frame.shape[1], frame.shape[0]),
                             response_text=f'click(start_box="({k},{k})")', response_ids=tuple(range(3, 12)),
                             behaviour_logprobs=(-0.25,) * 9, reward=float(k % 2), reward_parts={"correct": 1.0},
                             group_id=i, adapter_version="learner@3", origin={"env": "generated/click", "step": k},
                             id=f"{ACTOR}/{i}/{k}") for k in range(samples))
    return GroupMessage(id=f"{ACTOR}/{i}", actor=ACTOR, group=f"g{i}", parts=1, level="step", samples=rows,
                        created_at=1.5e9)


def valid_messages() -> list[tuple[str, bytes]]:
    """(kind, bytes) of one valid message of each kind and encoding."""
    rng = np.random.default_rng(0)
    files = {"adapter_config.json": "a" * 64, "adapter_model.safetensors": "b" * 64}
    ref = AdapterRef("learner@3", 3, "http://learner:8765/v000003", "c" * 64, files, 1.7e9,
                     sizes={"adapter_config.json": 600, "adapter_model.safetensors": 4_000_000})
    out = [("group", encode_message(_group(1, _frame(rng, 28, 56), 4))),
           ("group", encode_message(_group(2, _frame(rng, 56, 84), 3), compress="zlib")),
           ("episode", encode_message(EpisodeMessage("e1", ACTOR, "generated/click", 7, "ep0003", "success", 1.0, 4,
                                                     ("learner@2", "learner@3"), 1.0, 2.5, {"decide": 0.25},
                                                     "g1"))),
           ("status", encode_message(ActorStatus(ACTOR, "running", "learner@3", 3, 9, 0, "", 5.0, device="web",
                                                 host="lab-1", steps_per_s=1.5, refused=1, spooled=4))),
           ("announcement", encode_message(sign(ref, _KEY, PREFIX, issued_at=1.7e9))),
           ("policy", encode_message(ref))]
    return out


# -- the mutator -------------------------------------------------------------------------------------------------

_POISON: list[Any] = ["NaN", "Infinity", "-Infinity", "1e999", 10 ** 400, -1, 0, 2 ** 63, "/etc/passwd",
                      "../../etc/shadow", [], {}, None, True, "", [[[[[]]]]], {"a": {"b": {}}}, 16384, 1.5, "x" * 5000]
"""What a JSON value is replaced with; the first four are written as bare JSON tokens (not strings)."""


def _split(data: bytes) -> tuple[dict[str, Any], bytes] | None:
    if len(data) < 4:
        return None
    n = int.from_bytes(data[:4], "big")
    try:
        header = json.loads(data[4:4 + n])
    except ValueError:
        return None
    return (header, data[4 + n:]) if isinstance(header, dict) else None


def _join(header: dict[str, Any], parts: bytes) -> bytes:
    text = json.dumps(header, allow_nan=True, default=str)
    for token in ("NaN", "Infinity", "-Infinity", "1e999"):  # poison written as bare tokens
        text = text.replace(f'"__{token}__"', token)
    data = text.encode()
    return len(data).to_bytes(4, "big") + data + parts


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:8]):
            out += _paths(v, (*path, i))
    return out


def _mutate_json(data: bytes, rng: random.Random) -> bytes:
    split = _split(data)
    if split is None:
        return data
    header, parts = split
    choice = rng.random()
    if choice < 0.08 and isinstance(header.get("parts"), list) and header["parts"]:  # a bomb: a huge frame declared over a deflated run of zeros
        zeros = zlib.compress(bytes(rng.choice([1 << 20, 8 << 20])), 9)
        header["parts"][0] = {"shape": rng.choice([[16384, 16384, 4], [8192, 8192, 4], [4096, 4096, 3]]),
                              "offset": len(parts), "length": len(zeros), "encoding": "zlib"}
        header["schema"] = 2
        return _join(header, parts + zeros)
    body = header.get("body")
    samples = body.get("samples") if isinstance(body, dict) else None
    if choice < 0.14 and isinstance(samples, list) and samples and isinstance(samples[0], dict):
        samples[0]["image"] = rng.choice(["/etc/passwd", "/dev/zero", "../x.npy", "/proc/self/mem", "/etc/hostname"])
        if rng.random() < 0.6:  # the path alone, as if the image were a file
            samples[0].pop("image_part", None)
        return _join(header, parts)
    paths = [p for p in _paths(header) if p]
    path = rng.choice(paths)
    parent = header
    for key in path[:-1]:
        parent = parent[key]
    if rng.random() < 0.15 and isinstance(parent, dict):
        del parent[path[-1]]
    elif rng.random() < 0.05 and isinstance(parent, dict):
        parent["extra" + str(rng.randrange(9))] = rng.choice(_POISON[4:])
    else:
        poison = rng.choice(_POISON)
        parent[path[-1]] = f"__{poison}__" if isinstance(poison, str) and poison in ("NaN", "Infinity", "-Infinity",
                                                                                     "1e999") else poison
    return _join(header, parts)


def _mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    op = rng.randrange(6)
    if op == 0 and b:
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
    elif op == 1:
        del b[rng.randrange(len(b) + 1):]
    elif op == 2:
        at = rng.randrange(len(b) + 1)
        b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    elif op == 3 and len(b) > 8:
        at = rng.randrange(4, len(b))
        b[at:at] = b[at:at + rng.randint(1, 4096)]
    elif op == 4 and len(b) >= 4:
        b[:4] = rng.choice([0, 1, len(b), len(b) - 4, 1 << 31, rng.randrange(1 << 32)]).to_bytes(4, "big")
    else:
        b = bytearray(data[:4] + rng.randbytes(rng.randint(0, 256)))
    return bytes(b)


def mutate(data: bytes, rng: random.Random) -> bytes:
    """``data`` mutated 1-3 times (mostly in its header's JSON, sometimes in its bytes)."""
    for _ in range(rng.randint(1, 3)):
        data = _mutate_json(data, rng) if rng.random() < 0.7 else _mutate_bytes(data, rng)
    return data


# -- the run ---------------------------------------------------------------------------------------------------

def _bad_value(value: Any) -> str:
    """What is wrong with a delivered message ("" when nothing): a number that is not finite, an image that is
    not an array."""
    if isinstance(value, float) and not math.isfinite(value):
        return "non-finite number delivered"
    if isinstance(value, TrainSample) and value.image is not None and not isinstance(value.image, np.ndarray):
        return "sample image not an array"
    if is_dataclass(value) and not isinstance(value, type):
        for f in fields(value):
            if why := _bad_value(getattr(value, f.name)):
                return why
    elif isinstance(value, (list, tuple)):
        for v in value:
            if why := _bad_value(v):
                return why
    elif isinstance(value, dict):
        for v in value.values():
            if why := _bad_value(v):
                return why
    return ""


def rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


@dataclass
class WireTally:
    messages: int = 0
    accepted: int = 0
    refused: int = 0
    bad_accepted: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: dict[str, dict[str, Any]] = field(default_factory=dict)
    inbox_counts: dict[str, int] = field(default_factory=dict)
    times: list[float] = field(default_factory=list)

    @staticmethod
    def _note(where: dict[str, dict[str, Any]], key: str, data: bytes) -> None:
        entry = where.setdefault(key, {"count": 0, "shortest": None})
        entry["count"] += 1
        if entry["shortest"] is None or len(data) < len(entry["shortest"]):
            entry["shortest"] = data

    def run(self, kind: str, data: bytes, inbox: Inbox) -> None:
        self.messages += 1
        start = time.perf_counter()
        try:
            message = decode_message(data)
        except TransportError:
            self.refused += 1
            message = None
        except Exception as exc:  # noqa: BLE001 - counting what escapes is the point
            self._note(self.errors, f"decode_message: {type(exc).__name__}", data)
            message = None
        if message is not None:
            self.accepted += 1
            if why := _bad_value(message):
                self._note(self.bad_accepted, why, data)
        try:
            inbox.take(f"{PREFIX}/{_TOPIC[kind]}" + ("" if _TOPIC[kind] == "policy" else f"/{ACTOR}"), data)
        except Exception as exc:  # noqa: BLE001
            self._note(self.errors, f"Inbox.take: {type(exc).__name__}", data)
        self.times.append(time.perf_counter() - start)


def wire_fuzz(messages: int, seed: int) -> dict[str, Any]:
    """``messages`` mutants of the valid messages (each valid one first), through the decoder and an inbox; the
    summary (module docstring)."""
    rng = random.Random(seed)
    delivered: list[tuple[str, Any]] = []
    problems: dict[str, dict[str, Any]] = {}

    def deliver(kind: str, message: Any) -> None:
        if why := _bad_value(message):
            WireTally._note(problems, f"inbox delivered: {why}", b"")
        delivered.append((kind, None))  # counted, not kept
        del delivered[:-1]

    inbox = Inbox(Topics(PREFIX), deliver)
    quiet = logging.getLogger("agent.fleet.inbox")
    level, _ = quiet.level, quiet.setLevel(logging.ERROR)  # its refusals are what the tally counts
    inbox.take(f"{PREFIX}/status/{ACTOR}", encode_message(ActorStatus(ACTOR, "running")))  # a known actor
    valid = valid_messages()
    tally = WireTally()
    rss_before, peak_before = rss_mib(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    for kind, data in valid:
        tally.run(kind, data, inbox)
    while tally.messages < messages:
        kind, data = rng.choice(valid)
        tally.run(kind, mutate(data, rng), inbox)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    quiet.setLevel(level)
    tally.bad_accepted.update(problems)
    ordered = sorted(tally.times)

    def brief(notes: dict[str, dict[str, Any]]) -> dict[str, Any]:
        return {k: {"count": v["count"], "shortest_bytes": len(v["shortest"]), "shortest_hex": v["shortest"][:200].hex()}
                for k, v in sorted(notes.items())}

    return {
        "messages": tally.messages, "accepted": tally.accepted, "refused": tally.refused,
        "errors": sum(v["count"] for v in tally.errors.values()), "error_kinds": brief(tally.errors),
        "bad_accepted": sum(v["count"] for v in tally.bad_accepted.values()),
        "bad_accepted_kinds": brief(tally.bad_accepted), "inbox_counts": inbox.counts_now(),
        "rss_mib": {"before": round(rss_before, 1), "after": round(rss_mib(), 1),
                    "peak_growth": round(max(0.0, peak - max(peak_before, rss_before)), 1)},
        "budget_mib": MAX_INFLATED >> 20,
        "time_per_message_ms": {"median": round(1000 * ordered[len(ordered) // 2], 3),
                                "p99": round(1000 * ordered[int(0.99 * (len(ordered) - 1))], 3),
                                "max": round(1000 * ordered[-1], 3)},
    }


def within_budget(result: dict[str, Any]) -> bool:
    """Whether resident memory grew no more than one message's pixel budget, at its peak and by the end."""
    rss = result["rss_mib"]
    return rss["peak_growth"] <= result["budget_mib"] and rss["after"] - rss["before"] <= result["budget_mib"]


__all__ = ["mutate", "valid_messages", "wire_fuzz", "within_budget"]

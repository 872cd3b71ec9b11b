"""Test and benchmark infrastructure: light fleet actors, real processes on the real bus without a browser or a model.

    python -m tests.support.light_actor produce --broker URL --name A --count N [--rate R] [--run-dir D] [--size WxH]
    python -m tests.support.light_actor follow  --broker URL --name A [--run-dir D] [--seconds S]

``produce`` sends N step-level group messages (ids ``A/0`` .. ``A/N-1``, ``--samples`` samples sharing one WxH frame
each: noise, or ``--frame ui``, screen-like; raw pixels or ``--compress zlib``)
through ``agent.fleet.mqtt.MqttTransport`` and its spool at R per second, publishes its status, then closes
(flushing the spool) and exits; what it produced is in ``D/spool/produced.log``. ``follow`` keeps an
``AdapterFollower`` on the announced versions (fetched over HTTP, checked, "loaded" into a backend that only
records the name) and publishes its status with the version and the time it switched, as a real actor does after
its first decision with it, until SIGTERM or S seconds. The fleet key comes from ``HANDEYE_FLEET_KEY``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import signal
import time
from pathlib import Path

import numpy as np

from agent.fleet.keys import load_key
from agent.fleet.mqtt import MqttTransport
from agent.fleet.settings import parse_broker
from agent.fleet.spool import Spool
from agent.fleet.versions import fetch_version
from agent.online.versions import AdapterFollower, VersionClock
from train.messages import ActorStatus, GroupMessage
from train.samples import TrainSample


class NameOnlyBackend:
    """What a follower loads versions into, without a model: it remembers the names."""

    def __init__(self) -> None:
        self.adapter_version: str | None = None
        self.loaded_adapters: tuple[str, ...] = ()

    def load_adapter(self, path: str, version: str) -> None:
        self.adapter_version = version
        self.loaded_adapters = (*self.loaded_adapters, version)

    def unload_adapter(self, version: str) -> None:
        self.loaded_adapters = tuple(v for v in self.loaded_adapters if v != version)


def ui_frame(width: int, height: int, seed: int = 0) -> np.ndarray:
    """A screen-like RGB frame: a flat page, a header, panels with text lines and buttons (compresses as screens do,
    unlike noise)."""
    import cv2

    rng = np.random.default_rng(seed)
    frame = np.full((height, width, 3), 244, np.uint8)
    frame[: height // 12] = (32, 64, 128)
    for _ in range(12):
        x, y = int(rng.integers(0, width - 240)), int(rng.integers(height // 10, height - 60))
        cv2.rectangle(frame, (x, y), (x + 220, y + 44), tuple(int(c) for c in rng.integers(150, 255, 3)), -1)
        cv2.putText(frame, f"Button {int(rng.integers(100))}", (x + 12, y + 30), cv2.FONT_HERSHEY_SIMPLEX, 0.7,
                    (20, 20, 20), 2, cv2.LINE_AA)
    for row in range(20):
        cv2.putText(frame, f"Line {row}: some text of a page, {int(rng.integers(10_000))} items", (24, 110 + 28 * row),
                    cv2.FONT_HERSHEY_SIMPLEX, 0.55, (60, 60, 60), 1, cv2.LINE_AA)
    return frame


def group_message(actor: str, i: int, frame: np.ndarray, samples: int = 2, tokens: int = 20) -> GroupMessage:
    group = tuple(TrainSample(messages=[{"role": "user", "content": [{"type": "image"}, {"type": "text",
                                                                                        "text": "click OK"}]}],
                              image=frame, frame_size=(frame.shape[1], frame.shape[0]),
                              input_size=(frame.shape[1], frame.shape[0]), response_text=f"answer {k}",
                              response_ids=tuple(range(tokens)), behaviour_logprobs=(-0.5,) * tokens, reward=float(k),
                              reward_parts={"correct": float(k)}, adapter_version="learner@0",
                              origin={"actor": actor, "step": i, "sample": k}, id=f"{actor}/{i}/{k}")
                  for k in range(samples))
    return GroupMessage(id=f"{actor}/{i}", actor=actor, group=f"{actor}/{i}", parts=1, level="step",
                        samples=group, created_at=time.time())


def produce(args: argparse.Namespace) -> None:
    run = Path(args.run_dir or f"runs/light-{args.name}")
    transport = MqttTransport(parse_broker(args.broker), role="actor", key=load_key(), actor=args.name,
                              spool=Spool(run / "spool"), compress="" if args.compress == "raw" else "zlib").start()
    transport.set_status(ActorStatus(args.name, "running", at=time.time()))
    w, h = (int(v) for v in args.size.split("x"))
    frame = (ui_frame(w, h) if args.frame == "ui" else
             np.random.default_rng(0).integers(0, 255, (h, w, 3), dtype=np.uint8))
    transport.wait_connected(30)
    start = time.monotonic()
    for i in range(args.count):
        if args.rate:
            time.sleep(max(0.0, start + i / args.rate - time.monotonic()))
        transport.send(group_message(args.name, i, frame, samples=args.samples))
    transport.set_status(ActorStatus(args.name, "stopped", at=time.time()))
    transport.close(flush_s=args.flush_s)
    print(f"produced {args.count}; {transport.pending_groups()} left in the spool", flush=True)


async def follow(args: argparse.Namespace) -> None:
    run = Path(args.run_dir or f"runs/light-{args.name}")
    transport = MqttTransport(parse_broker(args.broker), role="actor", key=load_key(), actor=args.name,
                              spool=Spool(run / "spool")).start()
    follower = AdapterFollower(NameOnlyBackend(), transport, VersionClock(run / "adapters.jsonl"),
                               root=run / "adapters", fetch=functools.partial(fetch_version, root=run / "adapters"))
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    transport.set_status(ActorStatus(args.name, "waiting", at=time.time()))
    end, acting = time.monotonic() + (args.seconds or 1e9), None
    while not stop.is_set() and time.monotonic() < end:
        await follower.sync()
        if follower.current is not None and follower.current.version != acting:
            acting = follower.current.version
            transport.set_status(ActorStatus(args.name, "running", acting, at=time.time()))
        await asyncio.sleep(0.01)
    transport.set_status(ActorStatus(args.name, "stopped", acting, at=time.time()))
    await asyncio.to_thread(transport.close)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("produce", "follow"))
    parser.add_argument("--broker", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--run-dir", default="")
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--rate", type=float, default=0.0)
    parser.add_argument("--size", default="64x48")
    parser.add_argument("--samples", type=int, default=2, help="samples per group message (one shared frame)")
    parser.add_argument("--frame", choices=("noise", "ui"), default="noise")
    parser.add_argument("--compress", choices=("raw", "zlib"), default="raw")
    parser.add_argument("--flush-s", type=float, default=120.0)
    parser.add_argument("--seconds", type=float, default=0.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.mode == "produce":
        produce(args)
    else:
        asyncio.run(follow(args))


if __name__ == "__main__":
    main()

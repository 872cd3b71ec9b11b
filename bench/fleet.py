"""The fleet on one machine: the bus's throughput, version propagation, and online steps/s across processes.

    .venv/bin/python bench/fleet.py [--parts throughput propagation steps] [--steps-seconds 40] [--quick]

1. **throughput**: group messages of 8 samples sharing one 1280x720 screen-like frame (``light_actor.ui_frame``)
   from an actor process through a private mosquitto (QoS 1, loopback, the actor's spool on disk) to the learner's
   transport, beside ``InProcessTransport(wire=True)`` with the same codec, raw and deflated (zlib): samples/s at full speed
   (first to last message received), bytes per message, and end-to-end latency (``created_at`` to received) at 20
   messages/s, median and 95th percentile.
2. **propagation**: 16 light actor processes (no browser, no model: ``light_actor follow``) follow the versions a
   learner-side transport announces; each version is a 15 MB adapter (a Qwen2.5-VL-3B LoRA of rank 16 on q and v,
   float32) served over HTTP. From "written" (``AdapterRef.written_at``) to "every actor acting with it" (the last
   actor's status saying it switched, after fetching, hashing and loading it): median and max over the versions.
3. **steps**: online steps/s with 1, 2 and 4 actor processes (``agent actor``, web, the tiny model) against
   ``agent learner``, beside one process with the same actors (``OnlineSession``); each process on one torch
   thread; steps recorded in a window of ``--steps-seconds`` after every actor has acted.

Writes bench/results/fleet.json and prints a table; docs/benchmarks.md quotes it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent.fleet.keys import KEY_ENV  # noqa: E402
from agent.fleet.mqtt import MqttTransport  # noqa: E402
from agent.fleet.settings import parse_broker  # noqa: E402
from tests.support.light_actor import group_message, ui_frame  # noqa: E402
from tests.support.mosquitto import Mosquitto  # noqa: E402
from train.transport import InProcessTransport  # noqa: E402
from train.wire import encode_message  # noqa: E402

KEY = bytes(range(64, 96))
SAMPLES = 8


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def in_process(compress: str, count: int, rate: float) -> dict[str, Any]:
    transport = InProcessTransport(wire=True, compress=compress)
    frame = ui_frame(1280, 720)

    def produce() -> None:
        start = time.monotonic()
        for i in range(count):
            if rate:
                time.sleep(max(0.0, start + i / rate - time.monotonic()))
            transport.send(group_message("a", i, frame, samples=SAMPLES, tokens=64))

    thread = threading.Thread(target=produce)
    thread.start()
    stamps, latency = [], []
    for _ in range(count):
        msg = transport.receive_group(timeout=60)
        now = time.time()
        stamps.append(time.monotonic())
        latency.append(now - msg.created_at)
    thread.join()
    return {"count": count, "stamps": stamps, "latency": latency}


def over_mqtt(folder: Path, compress: str, count: int, rate: float) -> dict[str, Any]:
    broker = Mosquitto(folder / f"broker-{compress}-{rate}").start()
    learner = MqttTransport(parse_broker(broker.url), role="learner", key=KEY, allow=("a",),
                            max_buffered=1000).start()
    learner.wait_connected(10)
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.light_actor", "produce", "--broker", broker.url,
                             "--name", "a", "--run-dir", str(folder / f"actor-{compress}-{rate}"), "--count",
                             str(count), "--rate", str(rate), "--size", "1280x720", "--samples", str(SAMPLES),
                             "--frame", "ui", "--compress", compress or "raw"],
                            cwd=REPO, env={**os.environ, KEY_ENV: KEY.hex()}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    stamps, latency = [], []
    try:
        while len(stamps) < count:
            msg = learner.receive_group(timeout=120)
            if msg is None:
                break
            now = time.time()
            stamps.append(time.monotonic())
            latency.append(now - msg.created_at)
        proc.wait(120)
    finally:
        learner.close()
        broker.stop()
    return {"count": count, "stamps": stamps, "latency": latency}


def throughput(folder: Path, quick: bool) -> list[dict[str, Any]]:
    frame = ui_frame(1280, 720)
    rows = []
    for compress in ("", "zlib"):
        size = len(encode_message(group_message("a", 0, frame, samples=SAMPLES, tokens=64), compress=compress))
        count = (60 if quick else 200) if compress else (40 if quick else 120)
        for where, run in (("in-process", lambda c, n, r: in_process(c, n, r)),
                           ("mosquitto", lambda c, n, r: over_mqtt(folder, c, n, r))):
            fast = run(compress, count, 0.0)
            slow = run(compress, 60 if quick else 100, 20.0)
            span = fast["stamps"][-1] - fast["stamps"][0] if len(fast["stamps"]) > 1 else float("nan")
            rows.append({"transport": where, "frames": compress or "raw", "bytes_per_message": size,
                         "received": len(fast["stamps"]), "sent": count,
                         "messages_per_s": (len(fast["stamps"]) - 1) / span, "samples_per_s":
                         SAMPLES * (len(fast["stamps"]) - 1) / span,
                         "latency_median_ms": 1000 * statistics.median(slow["latency"]),
                         "latency_p95_ms": 1000 * _pct(slow["latency"], 0.95)})
            print(rows[-1], flush=True)
    return rows


def propagation(folder: Path, actors: int, versions: int) -> dict[str, Any]:
    from agent.fleet.versions import VersionServer
    from train.adapters import AdapterStore

    broker = Mosquitto(folder / "broker-prop").start()
    store = AdapterStore(folder / "learner" / "adapters", keep=3)
    server = VersionServer(store.root, host="127.0.0.1", port=0).start()
    learner = MqttTransport(parse_broker(broker.url), role="learner", key=KEY, announce_url=server.url).start()
    learner.wait_connected(10)
    env = {**os.environ, KEY_ENV: KEY.hex()}
    procs = [subprocess.Popen([sys.executable, "-m", "tests.support.light_actor", "follow", "--broker", broker.url,
                               "--name", f"f{i:02d}", "--run-dir", str(folder / f"follow-{i:02d}")], cwd=REPO,
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for i in range(actors)]
    results = []
    try:
        _until(lambda: len(learner.statuses()) == actors, 120)
        for v in range(versions):
            src = folder / f"src-{v}"
            src.mkdir()
            (src / "adapter_config.json").write_text(json.dumps({"r": 16, "target_modules": ["q_proj", "v_proj"]}))
            (src / "adapter_model.safetensors").write_bytes(os.urandom(15 << 20))
            ref = store.publish_folder(src, f"learner@{v}", v)
            learner.announce(ref)
            name = f"learner@{v}"
            _until(lambda: all(s.version == name for s in learner.statuses().values()), 60)
            ats = [s.at - ref.written_at for s in learner.statuses().values()]
            results.append({"version": v, "all_acting_s": max(ats), "median_actor_s": statistics.median(ats)})
            print(results[-1], flush=True)
            time.sleep(2.0)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(30)
        learner.close()
        server.stop()
        broker.stop()
    spans = [r["all_acting_s"] for r in results]
    return {"actors": actors, "adapter_mb": 15, "versions": results, "median_s": statistics.median(spans),
            "max_s": max(spans)}


def _until(condition: Any, timeout: float) -> None:
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise TimeoutError("the benchmark's condition was not met in time")
        time.sleep(0.02)


def steps_in_process(folder: Path, devices: int, seconds: float) -> float:
    from agent.config import load_train_config
    from agent.online import OnlineConfig, OnlineSession
    from tests.support.fleet_run import TINY

    cfg = load_train_config(None, [*TINY, f'train.run_dir="{folder / f"inproc-{devices}"}"', "train.steps=100000",
                                   "checkpoint.every=0", "log.png=false"])
    session = OnlineSession(cfg, OnlineConfig(env="generated/click", actors=devices, max_wall_s=seconds,
                                              torch_threads=1, progress_every_s=1e9, report=False))
    return asyncio.run(session.run()).steps_per_s


def steps_fleet(folder: Path, devices: int, seconds: float) -> float:
    from tests.support.fleet_run import Fleet, sets

    fleet = Fleet(folder / f"fleet-{devices}")
    fleet.env["OMP_NUM_THREADS"] = "1"
    try:
        fleet.learner(*sets("train.steps=100000", "checkpoint.every=0", "log.png=false"))
        for i in range(devices):
            fleet.actor(f"a{i}")
        names = [f"a{i}" for i in range(devices)]
        _until(lambda: all(fleet.versions(n) for n in names), 300)
        start = time.time()
        time.sleep(seconds)
        end = time.time()
        steps = sum(1 for n in names for path in (fleet.folder / f"actor-{n}").glob("ep*/steps.jsonl")
                    for row in _rows(path) if start <= row["started_at"] < end)
        return steps / (end - start)
    finally:
        fleet.close()


def _rows(path: Path) -> list[dict[str, Any]]:
    """The whole lines of a steps.jsonl an actor may be writing to."""
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", default=["throughput", "propagation", "steps"])
    parser.add_argument("--steps-seconds", type=float, default=40.0)
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--quick", action="store_true", help="fewer messages and versions (a smoke run)")
    parser.add_argument("--out", type=Path, default=REPO / "bench/results/fleet.json")
    args = parser.parse_args()
    out: dict[str, Any] = json.loads(args.out.read_text()) if args.out.is_file() else {}
    out["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version(),
                      "load": os.getloadavg(), "date": time.strftime("%Y-%m-%d %H:%M")}
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:  # after every part: a later part that fails keeps the earlier figures
        args.out.write_text(json.dumps(out, indent=1) + "\n")

    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        folder = Path(tmp)
        if "throughput" in args.parts:
            out["throughput"] = throughput(folder, args.quick)
            save()
        if "propagation" in args.parts:
            out["propagation"] = propagation(folder, 16, 3 if args.quick else 8)
            save()
        if "steps" in args.parts:
            out["steps"] = []
            for d in args.devices:
                out["steps"].append({"actors": d, "seconds": args.steps_seconds,
                                     "one_process_steps_per_s": steps_in_process(folder, d, args.steps_seconds),
                                     "fleet_steps_per_s": steps_fleet(folder, d, args.steps_seconds)})
                save()
    _table(out)
    return 0


def _table(out: dict[str, Any]) -> None:
    for r in out.get("throughput", []):
        print(f"{r['transport']:<11} {r['frames']:<4} {r['bytes_per_message'] / 1e6:7.3f} MB/msg  "
              f"{r['samples_per_s']:8.0f} samples/s  latency {r['latency_median_ms']:6.1f} ms median, "
              f"{r['latency_p95_ms']:6.1f} ms p95")
    if "propagation" in out:
        p = out["propagation"]
        print(f"propagation to {p['actors']} actors ({p['adapter_mb']} MB): median {p['median_s']:.2f} s, "
              f"max {p['max_s']:.2f} s")
    for r in out.get("steps", []):
        print(f"{r['actors']} actors: one process {r['one_process_steps_per_s']:.2f} steps/s, fleet "
              f"{r['fleet_steps_per_s']:.2f} steps/s")


if __name__ == "__main__":
    sys.exit(main())

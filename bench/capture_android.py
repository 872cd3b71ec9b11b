"""Android frame capture through the real adb server: raw framebuffer against ``screencap -p``.

The phone is the test device (tests/support/fake_adbd.py) at 1080x2400, adopted by a private adb
server, so the numbers measure the host side (adb transport, reading and decoding the frame) and
the transfer size. They cannot stand for a phone's own PNG encoder, which is where ``screencap -p``
loses on a real device (published figures are in docs/benchmarks.md).

Paths, side by side in one run, taking turns grab by grab:
- ``raw``: ``AndroidDevice.observe()`` with ``capture = "raw"`` (``exec:screencap``, header decoded,
  RGBA -> RGB), handeye's default;
- ``png``: ``AndroidDevice.observe()`` with ``capture = "png"`` (``screencap -p`` decoded by OpenCV);
- ``adbutils``: adbutils' own ``device.screenshot()`` converted to an RGB array (the naive path).

Prints a table and writes JSON (default bench/results/capture_android.json).
Run: .venv/bin/python bench/capture_android.py [--grabs 20] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from devices.android import AndroidConfig, AndroidDevice  # noqa: E402
from tests.support.fake_adbd import FakeAdbd, FakePhone  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _run(port: int, serial: str, grabs: int, runs: int) -> dict[str, dict]:
    import adbutils

    devices = {
        mode: AndroidDevice(AndroidConfig(serial=serial, adb_port=port, capture=mode, start_server=False))
        for mode in ("raw", "png")
    }
    for device in devices.values():
        await device.start()
    naive = adbutils.AdbClient("127.0.0.1", port).device(serial)

    async def adbutils_grab() -> np.ndarray:
        image = await asyncio.to_thread(naive.screenshot)
        return np.asarray(image.convert("RGB"))

    fns = {"raw": lambda: _frame(devices["raw"]), "png": lambda: _frame(devices["png"]), "adbutils": adbutils_grab}
    reference = await fns["raw"]()
    for name, fn in fns.items():
        frame = await fn()
        assert frame.shape == reference.shape and np.array_equal(frame, reference), f"{name} differs from raw"
    results: dict[str, dict] = {name: {"runs_ms": []} for name in fns}
    for _ in range(runs):
        times: dict[str, list[float]] = {name: [] for name in fns}
        for i in range(grabs):
            order = list(fns)[i % len(fns):] + list(fns)[: i % len(fns)]
            for name in order:
                t0 = time.perf_counter()
                await fns[name]()
                times[name].append(time.perf_counter() - t0)
        for name, ts in times.items():
            results[name]["runs_ms"].append(round(statistics.median(ts) * 1000, 2))
    for device in devices.values():
        await device.close()
    for r in results.values():
        r["median_ms"] = statistics.median(r["runs_ms"])
    return results


async def _frame(device: AndroidDevice) -> np.ndarray:
    device.forget_frame()  # measure a capture, not the reuse of a settled frame
    return (await device.observe()).frame


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grabs", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--size", default="1080x2400")
    parser.add_argument("--out", default=str(REPO / "bench/results/capture_android.json"))
    args = parser.parse_args()
    width, height = map(int, args.size.split("x"))
    adb = shutil.which("adb")
    if adb is None:
        raise SystemExit("adb is not installed; run scripts/setup.sh")
    port = _free_port()
    home = Path(tempfile.mkdtemp(prefix="handeye-adb-"))
    env = {**os.environ, "ANDROID_ADB_SERVER_PORT": str(port), "HOME": str(home)}
    subprocess.run([adb, "-P", str(port), "start-server"], env=env, check=True, capture_output=True, timeout=60)
    try:
        import adbutils

        with FakeAdbd(FakePhone(physical=(width, height))) as adbd:
            adbutils.AdbClient("127.0.0.1", port).connect(adbd.address, timeout=10)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if any(d.serial == adbd.address and d.state == "device"
                       for d in adbutils.AdbClient("127.0.0.1", port).list()):
                    break
                time.sleep(0.05)
            results = asyncio.run(_run(port, adbd.address, args.grabs, args.runs))
    finally:
        subprocess.run([adb, "-P", str(port), "kill-server"], env=env, capture_output=True, timeout=60)
        shutil.rmtree(home, ignore_errors=True)
    print(f"{args.size} frames through the real adb server and the test device; median ms per frame (runs)")
    for name, r in results.items():
        print(f"  {name:<9} {r['median_ms']:8.1f}   ({', '.join(f'{v:.1f}' for v in r['runs_ms'])})")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({
        "what": "median ms per frame; host side only (the test device encodes PNG on the host, not on a phone)",
        "size": args.size, "grabs_per_run": args.grabs, "runs": args.runs,
        "machine": {"python": platform.python_version(), "cores": os.cpu_count()}, "results": results,
    }, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

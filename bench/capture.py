"""Desktop frame capture: mss grab + RGB conversion variants against ``pyautogui.screenshot()``.

Each screen size gets its own Xvfb (1280x800 and 1920x1080 by default) showing a fixed picture: flat
UI-like panels plus a quarter of the screen in noise (noise is the worst case for scrot's PNG). Every
variant must give the same RGB frame as the chosen one (checked once per run). Within a run the
variants take turns grab by grab, in a rotating order, so drift and allocator effects hit them all alike; each run reports per-variant medians
and the table shows the median and spread of those over the runs.

Variants:
- ``grab``: ``sct.grab`` alone (BGRA in mss's buffer; no conversion).
- ``cvt_frombuffer`` (devices/desktop/display.py's way): ``cv2.cvtColor(np.frombuffer(raw).reshape(h, w, 4), BGRA2RGB)``.
- ``cvt_asarray``: the same through mss's ``__array_interface__``.
- ``numpy_slice``: ``np.array(shot)[:, :, :3][:, :, ::-1].copy()`` (the common recipe).
- ``mss_rgb``: ``np.frombuffer(shot.rgb).reshape(h, w, 3)`` (mss's own bytearray slicing).
- ``pil_frombytes``: ``Image.frombytes("RGB", size, raw, "raw", "BGRX")`` then ``np.asarray``.
- ``pyautogui``: ``np.asarray(pyautogui.screenshot())`` (scrot writes a PNG, PIL reads it).

Allocator noise: every variant allocates and frees multi-megabyte buffers, and with glibc's default
mmap threshold some of them pay ~1 ms of page faults on a fresh mapping (which is why ``grab`` alone
can time slower than grab + convert). Run with ``MALLOC_MMAP_THRESHOLD_=268435456`` to take that out:
then the conversion's own cost shows (~0.05-0.1 ms over the grab).

Prints a table and writes JSON (default bench/results/capture.json).
Run: .venv/bin/python bench/capture.py [--grabs 60] [--scrot-grabs 15] [--runs 3] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SIZES = ((1280, 800), (1920, 1080))

SHOW = r"""
import sys, tkinter as tk
root = tk.Tk(); root.overrideredirect(True); root.geometry(f"{sys.argv[2]}x{sys.argv[3]}+0+0")
img = tk.PhotoImage(file=sys.argv[1]); tk.Label(root, image=img, borderwidth=0).pack()
root.after(200, lambda: print("ready", flush=True)); root.mainloop()
"""


def picture(width: int, height: int) -> np.ndarray:
    """Flat panels in a few colours, with the bottom-right quarter in noise (fixed seed)."""
    rng = np.random.default_rng(0)
    img = np.full((height, width, 3), 245, np.uint8)
    colours = rng.integers(0, 256, (40, 3), dtype=np.uint8)
    for i, c in enumerate(colours):
        x, y = rng.integers(0, width - 200), rng.integers(0, height - 100)
        img[y : y + 30 + i % 70, x : x + 60 + 3 * i] = c
    img[height // 2 :, width // 2 :] = rng.integers(0, 256, (height - height // 2, width - width // 2, 3), np.uint8)
    return img


def start_display(width: int, height: int, tmp: Path) -> tuple[str, list[subprocess.Popen]]:
    number = next(n for n in range(120, 300) if not os.path.exists(f"/tmp/.X11-unix/X{n}")
                  and not os.path.exists(f"/tmp/.X{n}-lock"))
    display = f":{number}"
    xvfb = subprocess.Popen(["Xvfb", display, "-screen", "0", f"{width}x{height}x24", "-nolisten", "tcp"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not os.path.exists(f"/tmp/.X11-unix/X{number}"):
        if xvfb.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"Xvfb {display} did not start")
        time.sleep(0.02)
    ppm = tmp / f"screen-{width}x{height}.ppm"
    img = picture(width, height)
    ppm.write_bytes(f"P6 {width} {height} 255\n".encode() + img.tobytes())
    show = subprocess.Popen([sys.executable, "-c", SHOW, str(ppm), str(width), str(height)],
                            env={**os.environ, "DISPLAY": display}, stdout=subprocess.PIPE, text=True)
    if show.stdout.readline().strip() != "ready":  # type: ignore[union-attr]
        raise SystemExit("the picture window did not open")
    return display, [show, xvfb]


def variants(sct, mon) -> dict[str, Callable[[], np.ndarray]]:
    from PIL import Image

    def cvt_frombuffer():
        s = sct.grab(mon)
        return cv2.cvtColor(np.frombuffer(s.raw, np.uint8).reshape(s.height, s.width, 4), cv2.COLOR_BGRA2RGB)

    def pil_frombytes():
        s = sct.grab(mon)
        return np.asarray(Image.frombytes("RGB", (s.width, s.height), bytes(s.raw), "raw", "BGRX"))

    def pyautogui_shot():
        import pyautogui

        return np.asarray(pyautogui.screenshot())

    return {
        "grab": lambda: sct.grab(mon),
        "cvt_frombuffer": cvt_frombuffer,
        "cvt_asarray": lambda: cv2.cvtColor(np.asarray(sct.grab(mon)), cv2.COLOR_BGRA2RGB),
        "numpy_slice": lambda: np.array(sct.grab(mon))[:, :, :3][:, :, ::-1].copy(),
        "mss_rgb": lambda: (lambda s: np.frombuffer(s.rgb, np.uint8).reshape(s.height, s.width, 3))(sct.grab(mon)),
        "pil_frombytes": pil_frombytes,
        "pyautogui": pyautogui_shot,
    }


def one_run(fns: dict[str, Callable[[], object]], grabs: int, scrot_grabs: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in fns}
    order = list(fns.items())
    for i in range(grabs):
        # Rotate who goes first: a variant that runs right after one that freed big buffers pays
        # the page faults of re-allocating them, and that should not always be the same variant.
        for name, fn in order[i % len(order) :] + order[: i % len(order)]:
            if name == "pyautogui" and i >= scrot_grabs:
                continue
            t0 = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - t0) * 1000)
    return {name: statistics.median(t) for name, t in times.items()}


def bench_size(width: int, height: int, args: argparse.Namespace, tmp: Path) -> dict:
    import mss

    display, procs = start_display(width, height, tmp)
    try:
        from devices.desktop import prepare_display

        prepare_display(display)
        if "pyautogui" in sys.modules:  # pyautogui binds to one display per process: run each size apart
            raise SystemExit("run one size per process")
        with mss.MSS(display=display) as sct:
            mon = sct.monitors[1]
            fns = variants(sct, mon)
            expected = fns["cvt_frombuffer"]()
            assert np.array_equal(expected, picture(width, height)), "the grab does not show the picture"
            for name, fn in fns.items():
                if name != "grab":
                    assert np.array_equal(fn(), expected), f"{name} gives a different frame"
            runs = [one_run(fns, args.grabs, args.scrot_grabs) for _ in range(args.runs)]
    finally:
        for p in procs:
            p.terminate()
            p.wait(5)
    return {
        name: {"median_ms": statistics.median(r[name] for r in runs), "runs_ms": [r[name] for r in runs]}
        for name in runs[0]
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grabs", type=int, default=60)
    parser.add_argument("--scrot-grabs", type=int, default=15)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--size", help="one WxH (used internally: each size runs in its own process)")
    parser.add_argument("--out", default=str(REPO / "bench/results/capture.json"))
    args = parser.parse_args()
    for tool in ("Xvfb", "scrot"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed; run scripts/setup.sh")
    tmp = Path(tempfile.mkdtemp(prefix="handeye-bench-"))
    if args.size:
        w, h = map(int, args.size.split("x"))
        print(json.dumps(bench_size(w, h, args, tmp)))
        return
    results = {}
    for w, h in SIZES:
        cmd = [sys.executable, __file__, "--size", f"{w}x{h}", "--grabs", str(args.grabs),
               "--scrot-grabs", str(args.scrot_grabs), "--runs", str(args.runs)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        results[f"{w}x{h}"] = json.loads(out.strip().splitlines()[-1])
    names = list(next(iter(results.values())))
    print(f"{'variant':<16}" + "".join(f"{size + ' ms (runs)':>34}" for size in results))
    for name in names:
        cells = []
        for size in results:
            r = results[size][name]
            cells.append(f"{r['median_ms']:8.2f} ({', '.join(f'{v:.2f}' for v in r['runs_ms'])})")
        print(f"{name:<16}" + "".join(f"{c:>34}" for c in cells))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({
        "what": "median ms per frame over grabs (per run) and over runs; Xvfb 24-bit, one monitor",
        "malloc_mmap_threshold": os.environ.get("MALLOC_MMAP_THRESHOLD_", "glibc default"),
        "grabs_per_run": args.grabs, "scrot_grabs_per_run": args.scrot_grabs, "runs": args.runs,
        "machine": {"python": platform.python_version(), "cpu": platform.processor() or platform.machine(),
                    "cores": os.cpu_count()},
        "results": results,
    }, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""What ``record.fsync`` costs per step: the trajectory writer with fsync on (the default) against off.

One step is what the episode runner writes for it: a stored frame (``EpisodeWriter.write_frame``; the
PNG bytes the device produced, stored as they are) and its line in steps.jsonl (``write_step``). With
fsync on, the frame, the frames/ folder and steps.jsonl are fsynced (three fsyncs per step); off, the
line is only flushed. Episodes alternate between the two settings so drift hits both; each reports its
median step (and 90th percentile), and the table gives per setting the median over episodes. Opening and finishing an
episode (lock, folders, episode.json twice) is timed separately: it happens once per episode.

The writes go to a folder on the filesystem that holds runs/ (``--dir``, default a temporary folder in
runs/), since fsync costs what the disk under it costs: nothing on tmpfs, a few ms on an SSD, more on a disk.

Prints a table and writes JSON (default bench/results/fsync.json).
Run: .venv/bin/python bench/fsync.py [--steps 40] [--episodes 6] [--dir DIR] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from devices.base import Observation  # noqa: E402
from devices.frames import encode  # noqa: E402
from envs.records import Outcome, StepRecord  # noqa: E402
from envs.trajectory import EpisodeWriter, RunWriter  # noqa: E402


PAGES = {"light": 0, "dense": 140}
"""Frames like the two pages of bench/loop_overhead.py at 1280x720 (docs/benchmarks.md, frame capture): the demo
page (~70 kB of PNG) and the dense page (~600 kB): rows of photo-like noise on top of the same panels and text."""


def screen_like_frame(seed: int, noise_rows: int, width: int = 1280, height: int = 720) -> Observation:
    """A synthetic screenshot: flat panels, text-like strokes, ``noise_rows`` rows of noise; stored as PNG."""
    rng = np.random.default_rng(seed)
    frame = np.full((height, width, 3), 245, np.uint8)
    for _ in range(40):  # panels
        x, y = int(rng.integers(0, width - 200)), int(rng.integers(0, height - 60))
        frame[y:y + int(rng.integers(20, 120)), x:x + int(rng.integers(60, 400))] = rng.integers(0, 256, 3)
    for _ in range(4000):  # "text": short dark strokes
        x, y = int(rng.integers(0, width - 12)), int(rng.integers(0, height - 3))
        frame[y:y + 2, x:x + int(rng.integers(2, 12))] = rng.integers(0, 90)
    if noise_rows:  # a photo: PNG cannot compress it
        frame[:noise_rows] = rng.integers(0, 256, (noise_rows, width, 3))
    return Observation(frame=frame, encoded=encode(frame, "png"), encoding="png")


def step_record(writer: EpisodeWriter, index: int, frame_path: str) -> StepRecord:
    """A line the size of a model step's (raw output, candidates, latency, info)."""
    return StepRecord(step_id=writer.step_id(index), index=index, started_at=time.time(), ended_at=time.time(),
                      frame_path=frame_path, frame_size=(1280, 720), model_input_size=(1288, 728),
                      action={"kind": "click", "point": [0.41, 0.62]}, executed=True,
                      raw_output="<think>点击“订阅”按钮</think>\nclick(start_box='(528,451)')" * 3,
                      candidates=tuple({"kind": "click", "point": [0.4 + i / 100, 0.6]} for i in range(4)),
                      latency={"observe": 0.012, "decide": 0.9, "act": 0.03, "settle": 0.2}, info={"url": "http://x/"})


def _median_ms(seconds: list[float]) -> float:
    return round(statistics.median(seconds) * 1000, 3)


def one_episode(run: RunWriter, steps: int, frames: list[Observation]) -> dict[str, float]:
    """Write one episode; median milliseconds per step (frame, line, both), the 90th percentile of a step, and the
    episode's open + finish time."""
    t0 = time.perf_counter()
    writer = run.episode(task="bench")
    opened = time.perf_counter() - t0
    frame_s, line_s, step_s = [], [], []
    for i in range(steps):
        t0 = time.perf_counter()
        path = writer.write_frame(i, frames[i % len(frames)])
        t1 = time.perf_counter()
        writer.write_step(step_record(writer, i, path))
        t2 = time.perf_counter()
        frame_s.append(t1 - t0)
        line_s.append(t2 - t1)
        step_s.append(t2 - t0)
    t0 = time.perf_counter()
    writer.finish(Outcome.CLAIMED)
    finished = time.perf_counter() - t0
    return {"frame_ms": _median_ms(frame_s), "line_ms": _median_ms(line_s), "step_ms": _median_ms(step_s),
            "step_p90_ms": round(float(np.percentile(step_s, 90)) * 1000, 3),
            "open_finish_ms": round((opened + finished) * 1000, 3)}


def bench(root: Path, page: str, steps: int, episodes: int) -> dict[str, dict]:
    """fsync off and on, episodes taking turns; per setting the median over episodes and every episode's row."""
    frames = [screen_like_frame(s, PAGES[page]) for s in range(4)]
    runs = {on: RunWriter(root, config={}, run_id=f"{page}-fsync-{'on' if on else 'off'}", fsync=on)
            for on in (False, True)}
    one_episode(runs[False], 3, frames)  # warm up: imports, page cache, allocator
    per_episode: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    for e in range(episodes):
        for on in ((False, True) if e % 2 == 0 else (True, False)):  # alternate who goes first
            per_episode[on].append(one_episode(runs[on], steps, frames))
    out: dict[str, dict] = {"frame_kb": round(len(frames[0].encoded or b"") / 1024)}
    for on, rows in per_episode.items():
        keys = rows[0].keys()
        out["on" if on else "off"] = {"median": {k: round(statistics.median(r[k] for r in rows), 3) for k in keys},
                                      "episodes": rows}
    out["extra_ms_per_step"] = round(out["on"]["median"]["step_ms"] - out["off"]["median"]["step_ms"], 3)
    return out


def table(rows: list[dict], columns: list[str]) -> str:
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in columns]
    out = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)), "  ".join("-" * w for w in widths)]
    out += ["  ".join(str(r[c]).ljust(w) for c, w in zip(columns, widths)) for r in rows]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40, help="steps per episode")
    parser.add_argument("--episodes", type=int, default=6, help="episodes per setting")
    parser.add_argument("--dir", default=str(REPO / "runs"), help="where the temporary run folders go (on the "
                        "filesystem that holds runs/)")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "fsync.json"))
    args = parser.parse_args()

    Path(args.dir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-fsync-", dir=args.dir) as tmp:
        results = {page: bench(Path(tmp), page, args.steps, args.episodes) for page in PAGES}
    rows = [{"page": f"{page} ({res['frame_kb']} kB)", "fsync": on, **res[on]["median"]}
            for page, res in results.items() for on in ("off", "on")]
    print(f"\n== trajectory writing per step, fsync off vs on (medians over {args.episodes} episodes x "
          f"{args.steps} steps; in {args.dir}) ==")
    print(table(rows, ["page", "fsync", "frame_ms", "line_ms", "step_ms", "step_p90_ms", "open_finish_ms"]))
    for page, res in results.items():
        print(f"{page}: fsync on costs {res['extra_ms_per_step']} ms more per step")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fs = os.statvfs(args.dir)
    out.write_text(json.dumps({
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
                    "dir": args.dir, "fs_block_size": fs.f_bsize},
        "args": vars(args), "results": results,
    }, indent=2))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()

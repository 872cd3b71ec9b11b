"""Per-step runtime overhead of the web loop, frame capture options, and screen settling.

Three measurements, each side by side with the naive path in the same run:

1. capture: ways to get a frame out of Chromium (Playwright PNG/JPEG, DevTools PNG/JPEG), timed
   with decoding, and how far each frame's pixels are from a lossless capture.
2. overhead: one loop step without the model (observe, encode, act, record) through handeye,
   against the naive path (PNG ``page.screenshot``, PIL decode, click, PIL PNG write). Steps
   alternate between the two paths so drift hits both; medians per run, several runs.
3. settle: time until the screen is declared settled after a click, against a fixed 1 s sleep,
   on static, transition, delayed-change and animated pages; "residual" is the fraction of
   pixels that still changed between the settled frame and one taken 1.5 s later.

Prints tables and writes JSON (default bench/results/loop_overhead.json).
Run: .venv/bin/python bench/loop_overhead.py [--steps 60] [--runs 3] [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from devices.actions import Action, ActionKind, Point  # noqa: E402
from devices.frames import decode  # noqa: E402
from devices.settle import SettleConfig, changed_fraction  # noqa: E402
from devices.web import PlaywrightDevice, WebConfig  # noqa: E402
from envs.records import StepRecord  # noqa: E402
from envs.site import LocalSite  # noqa: E402
from envs.trajectory import RunWriter  # noqa: E402

DENSE_HTML = """<!doctype html><html><body style="margin:0;font-family:sans-serif">
<div style="background:linear-gradient(90deg,#e63946,#457b9d);height:90px;color:#fff;font-size:30px;padding:20px">Dense page</div>
<img src="photo.png" style="float:right;margin:10px" width="420" height="300">
""" + "".join(
    f"<span style='display:inline-block;margin:3px;padding:4px;border:1px solid #ccc;color:#{(i * 47) % 255:02x}{(i * 91) % 255:02x}66'>"
    f"Item {i} 设置 option</span>"
    for i in range(260)
) + "</body></html>"

SETTLE_PAGES = {
    "static": "<button id=b style='font-size:30px'>Click me</button>",
    "transition 400 ms": """<style>#p{width:100px;height:300px;background:#2a6df4;transition:width .4s linear}
        #p.wide{width:900px}</style><button id=b style='font-size:30px'>Open</button><div id=p></div>
        <script>b.onclick=()=>p.classList.add('wide')</script>""",
    "content after 300 ms": """<button id=b style='font-size:30px'>Load</button><div id=out style='font-size:40px'></div>
        <script>b.onclick=()=>setTimeout(()=>{out.textContent='Loaded: '+'result '.repeat(12)},300)</script>""",
    "spinner forever": """<style>@keyframes r{to{transform:rotate(360deg)}}
        #s{width:24px;height:24px;border:4px solid #ccc;border-top-color:#333;border-radius:50%;animation:r .8s linear infinite}</style>
        <button id=b style='font-size:30px'>Click me</button><div id=s></div>""",
}


def _median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


async def _observe_bytes(dev: PlaywrightDevice) -> bytes:
    obs = await dev.observe()
    assert obs.encoded is not None
    return obs.encoded


async def bench_capture(site: LocalSite, reps: int) -> list[dict]:
    rows = []
    for page_name in ("demo.html", "dense.html"):
        for dpr in (1, 2):
            dev = PlaywrightDevice(WebConfig(device_scale_factor=dpr), url=site.url(page_name))
            await dev.start()
            page, cdp = dev.page, dev.cdp_session
            ref = decode(await page.screenshot(type="png"))
            size = list(ref.shape[1::-1])
            await dev.observe()  # the device's DevTools session now mirrors the page's emulation

            async def pw(kind: str, q: int | None = None) -> bytes:
                return await page.screenshot(type=kind, quality=q) if q else await page.screenshot(type=kind)

            async def devtools(fmt: str, q: int | None = None, fast: bool = True) -> bytes:
                params = {"format": fmt, "optimizeForSpeed": fast}
                if q:
                    params["quality"] = q
                return base64.b64decode((await cdp.send("Page.captureScreenshot", params))["data"])

            methods = {
                "playwright png": lambda: pw("png"),
                "playwright jpeg q90": lambda: pw("jpeg", 90),
                "devtools png": lambda: devtools("png", fast=False),
                "devtools png fast": lambda: devtools("png"),
                "handeye observe()": lambda: _observe_bytes(dev),
                "devtools jpeg q90": lambda: devtools("jpeg", 90),
                "devtools jpeg q95": lambda: devtools("jpeg", 95),
            }
            for name, fn in methods.items():
                times, frame, nbytes = [], None, 0
                for _ in range(reps):
                    t0 = time.perf_counter()
                    data = await fn()
                    frame = decode(data)
                    times.append(time.perf_counter() - t0)
                    nbytes = len(data)
                diff = np.abs(frame.astype(np.int16) - ref.astype(np.int16))
                rows.append({
                    "page": page_name, "dpr": dpr, "frame": size, "method": name,
                    "capture_decode_ms": round(_median_ms(times), 2), "kbytes": round(nbytes / 1024, 1),
                    "max_abs_diff": int(diff.max()), "mean_abs_diff": round(float(diff.mean()), 3),
                    "pixels_off_by_more_than_8": round(float((diff.max(axis=2) > 8).mean()), 5),
                })
            await dev.close()
    return rows


async def _handeye_step(dev: PlaywrightDevice, writer, i: int, point: Point) -> dict[str, float]:
    """A step with a fresh capture, as the episode runner (agent/runner.py) runs it: the frame is written in a thread
    while the device acts, and the step's line waits for it."""
    dev.forget_frame()  # other paths touched the page behind the device's back: capture anew
    t0 = time.perf_counter()
    obs = await dev.observe()
    t1 = time.perf_counter()
    job = asyncio.ensure_future(asyncio.to_thread(writer.write_frame, i, obs))
    result = await dev.act(Action(ActionKind.CLICK, point))
    t2 = time.perf_counter()
    _write_line(writer, i, obs, result, await job)
    t3 = time.perf_counter()
    assert obs.meta["frame_source"] == "capture"
    return {"observe": t1 - t0, "act": t2 - t1, "record": t3 - t2, "total": t3 - t0}


async def _handeye_settled_step(dev: PlaywrightDevice, writer, i: int, point: Point) -> dict[str, float]:
    """A step exactly as the episode runner (agent/runner.py) runs it, settling included: observe (the previous step's
    settled capture), write the frame in a thread, act, settle, then the step's line."""
    t0 = time.perf_counter()
    obs = await dev.observe()
    t1 = time.perf_counter()
    job = asyncio.ensure_future(asyncio.to_thread(writer.write_frame, i, obs))
    result = await dev.act(Action(ActionKind.CLICK, point))
    t2 = time.perf_counter()
    await dev.settle()
    t3 = time.perf_counter()
    _write_line(writer, i, obs, result, await job)
    t4 = time.perf_counter()
    return {"observe": t1 - t0, "act": t2 - t1, "record": t4 - t3, "total": (t2 - t0) + (t4 - t3), "settle": t3 - t2,
            "reused": float(obs.meta["frame_source"] == "settle")}


def _write_line(writer, i: int, obs, result, path: str) -> None:
    writer.write_step(StepRecord(
        step_id=writer.step_id(i), index=i, started_at=0.0, ended_at=0.0, frame_path=path, frame_size=obs.size,
        model_input_size=obs.size, action=result.action.to_dict(), executed=True, target=result.target,
        target_box=tuple(result.target_box.as_list()) if result.target_box else None))


async def _naive_step(page, naive_dir: Path, log, i: int, point: Point) -> dict[str, float]:
    from PIL import Image

    t0 = time.perf_counter()
    png = await page.screenshot(type="png")
    frame = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    t1 = time.perf_counter()
    await page.mouse.click(point.x * 1280, point.y * 720)
    t2 = time.perf_counter()
    Image.fromarray(frame).save(naive_dir / f"{i:04d}.png")
    log.write(json.dumps({"index": i, "action": {"kind": "click", "point": point.as_list()}}) + "\n")
    log.flush()
    t3 = time.perf_counter()
    return {"observe": t1 - t0, "act": t2 - t1, "record": t3 - t2, "total": t3 - t0}


PATHS = ("naive", "handeye", "handeye+settle")


async def bench_overhead(site: LocalSite, steps: int, runs: int, out_dir: Path) -> dict:
    """Steps rotate between the three paths so that drift hits all of them alike."""
    results: dict[str, dict] = {}
    point = Point(0.03, 0.97)  # a quiet corner: clicks change nothing, so every step does the same work
    for page_name in ("demo.html", "dense.html"):
        per_run = []
        for run in range(runs):
            dev = PlaywrightDevice(WebConfig(), url=site.url(page_name))
            await dev.start()
            writers = {p: RunWriter(out_dir / f"{p}-{page_name}-{run}", config={}).episode(task="bench") for p in PATHS[1:]}
            naive_dir = out_dir / f"naive-{page_name}-{run}"
            naive_dir.mkdir(parents=True)
            naive_log = open(naive_dir / "steps.jsonl", "a")
            samples: dict[str, list[dict[str, float]]] = {p: [] for p in PATHS}
            block = 5  # paths take turns in blocks, so drift hits all alike and each path keeps its own rhythm
            for b in range(-1, steps // block):  # block -1 warms up
                for path in PATHS:
                    for k in range(block + 1):
                        i = (b + 1) * (block + 1) + k
                        if path == "naive":
                            row = await _naive_step(dev.page, naive_dir, naive_log, i, point)
                        elif path == "handeye":
                            row = await _handeye_step(dev, writers[path], i, point)
                        else:
                            row = await _handeye_settled_step(dev, writers[path], i, point)
                        if b >= 0 and k > 0:  # the first step of a block starts cold (no settled frame yet)
                            samples[path].append(row)
            naive_log.close()
            for w in writers.values():
                w.close()
            await dev.close()
            per_run.append({p: {k: round(_median_ms([r[k] for r in samples[p]]), 2) for k in samples[p][0]}
                            for p in PATHS})
        summary = {}
        for p in PATHS[1:]:
            ratios = [r[p]["total"] / r["naive"]["total"] for r in per_run]
            summary[p] = {"total_ms_median": round(statistics.median(r[p]["total"] for r in per_run), 2),
                          "ratio_median": round(statistics.median(ratios), 3), "ratio_per_run": [round(x, 3) for x in ratios]}
        results[page_name] = {"runs": per_run, "naive_total_ms_median": round(
            statistics.median(r["naive"]["total"] for r in per_run), 2), **summary}
    return results


async def bench_settle(pages_dir: Path, site: LocalSite, reps: int) -> list[dict]:
    rows = []
    cfg = SettleConfig()
    for name, body in SETTLE_PAGES.items():
        fname = name.replace(" ", "_") + ".html"
        (pages_dir / fname).write_text(f"<!doctype html><html><body style='margin:0'>{body}</body></html>")
        dev = PlaywrightDevice(WebConfig(viewport_width=1280, viewport_height=720), cfg, url=site.url(fname))
        await dev.start()
        settle_times, residual_settle, residual_sleep, settled_flags = [], [], [], []
        for _ in range(reps):
            for mode in ("settle", "sleep"):
                await dev.goto(site.url(fname))
                await dev.evaluate("document.getElementById('b').click()")
                t0 = time.perf_counter()
                if mode == "settle":
                    result = await dev.settle()
                    settle_times.append(time.perf_counter() - t0)
                    settled_flags.append(result.settled)
                else:
                    await asyncio.sleep(1.0)
                frame = await dev.grab_small()
                await asyncio.sleep(1.5)
                later = await dev.grab_small()
                residual = changed_fraction(frame, later, cfg.pixel_delta)
                (residual_settle if mode == "settle" else residual_sleep).append(residual)
        await dev.close()
        rows.append({
            "page": name,
            "settle_ms_median": round(_median_ms(settle_times), 1),
            "settle_ms_max": round(max(settle_times) * 1000, 1),
            "settled_before_deadline": f"{sum(settled_flags)}/{len(settled_flags)}",
            "residual_after_settle_median": round(statistics.median(residual_settle), 5),
            "fixed_sleep_ms": 1000.0,
            "residual_after_sleep_median": round(statistics.median(residual_sleep), 5),
            "speedup_vs_sleep": round(1.0 / statistics.median(settle_times), 2),
        })
    return rows


def _table(rows: list[dict], columns: list[str]) -> str:
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in columns]
    line = "  ".join(c.ljust(w) for c, w in zip(columns, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(str(r[c]).ljust(w) for c, w in zip(columns, widths)) for r in rows]
    return "\n".join(out)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=60, help="measured steps per run and path")
    parser.add_argument("--runs", type=int, default=3, help="runs (fresh browser each) per page")
    parser.add_argument("--capture-reps", type=int, default=15)
    parser.add_argument("--settle-reps", type=int, default=5)
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "loop_overhead.json"))
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        pages = tmp_path / "pages"
        pages.mkdir()
        (pages / "demo.html").write_text((REPO / "envs" / "pages" / "demo.html").read_text())
        (pages / "dense.html").write_text(DENSE_HTML)
        rng = np.random.default_rng(0)
        photo = cv2.GaussianBlur(rng.integers(0, 256, (300, 420, 3), dtype=np.uint8), (0, 0), 3)
        cv2.imwrite(str(pages / "photo.png"), photo)
        with LocalSite(pages) as site:
            capture = await bench_capture(site, args.capture_reps)
            print("\n== frame capture (1280x720 CSS viewport; diff against Playwright's lossless PNG) ==")
            print(_table(capture, ["page", "dpr", "method", "capture_decode_ms", "kbytes", "max_abs_diff",
                                   "mean_abs_diff", "pixels_off_by_more_than_8"]))
            overhead = await bench_overhead(site, args.steps, args.runs, tmp_path / "runs")
            print(f"\n== per-step overhead, model and settle waits excluded (medians over {args.steps} steps x {args.runs} runs) ==")
            rows = []
            for page_name, res in overhead.items():
                for i, run in enumerate(res["runs"]):
                    for p in PATHS:
                        m = run[p]
                        rows.append({"page": page_name, "run": i, "path": p, "observe": m["observe"], "act": m["act"],
                                     "record": m["record"], "total": m["total"],
                                     "ratio": round(m["total"] / run["naive"]["total"], 3),
                                     "settle (excluded)": m.get("settle", "-")})
            print(_table(rows, list(rows[0])))
            for page_name, res in overhead.items():
                print(f"{page_name}: naive {res['naive_total_ms_median']} ms; " + "; ".join(
                    f"{p} {res[p]['total_ms_median']} ms (ratio {res[p]['ratio_median']})" for p in PATHS[1:])
                    + " (target <= 0.5)")
            settle = await bench_settle(pages, site, args.settle_reps)
            print("\n== settling after a click vs a fixed 1 s sleep ==")
            print(_table(settle, list(settle[0])))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": __import__("os").cpu_count()},
        "args": vars(args), "capture": capture, "overhead": overhead, "settle": settle,
    }, indent=2))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    asyncio.run(main())

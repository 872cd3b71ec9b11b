"""What recording a person costs (``agent record``): events per second sustained with no event dropped, the lag from an
input event to its pre-action frame, and the CPU the recording takes, side by side with the same input on a bare
session.

Web: Playwright plays the person with trusted input (the browser's own pipeline) on a page that repaints after every
input (a counter), at a fixed rate for ``--seconds``: key presses (F2, each one ``key`` action) or clicks alternating
between two buttons (each one ``click``; far apart, so no two make a double click). The recording is the whole
``agent record`` pipeline: the web recorder's listeners and screencast, the recording environment and the episode
runner writing every step (frame and line, fsync on) to a run folder in ``--dir``. Per run:

- sent, recorded, dropped (= sent - recorded, never negative by construction of a lossless queue: any shortfall is
  an event lost), and drain_s: from the last input to its step on disk. A rate is *sustained* when nothing was
  dropped and drain_s stayed under a second (the recording keeps up instead of falling behind);
- the lag from each input event to its pre-action frame: the event's time minus the capture time of the frame the
  recorder chose (``frame_age``; the screencast sends a frame only when the page repaints, so on a still page this
  is old and harmless), and the recorder's own ``frame_lag_s`` (how far that frame may trail the screen at the event:
  0 when it is newer than the previous action), median and p95, and the share of steps marked late;
- CPU: user + system seconds of this process and all its children (the Playwright driver and every Chromium
  process) over the input and the drain, per second of input; the bare run drives the same browser on the same page
  with the same input, without recorder, runner or writer.

Desktop (when ``devices/desktop/recorder.py`` is there and Xvfb is installed): the same on a private Xvfb display
(a fresh one per run),
the input sent through XTest (python-xlib), recorded by ``DesktopRecorder`` through the same runner; bare = the
same input with no recorder. Frame capture time is the recorder's own (``DemoEvent.frame.timestamp``).

Runs alternate recorded / bare; each figure is the median over ``--runs`` runs. Prints a table and writes JSON
(default bench/results/record.json).
Run: .venv/bin/python bench/record.py [--rates 10,20,40,80] [--seconds 3] [--runs 3] [--kinds keys,clicks]
     [--devices web,desktop] [--dir DIR] [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent.record import record_demonstration  # noqa: E402
from devices.web import PlaywrightDevice, WebConfig  # noqa: E402
from devices.web.recorder import WebRecorder  # noqa: E402
from envs.records import Actor  # noqa: E402
from envs.recording import RecordingEnv  # noqa: E402
from envs.trajectory import RunWriter  # noqa: E402

PAGE = """<!doctype html><html><body style="margin:0;font:20px sans-serif">
<button id="a" style="position:absolute;left:80px;top:80px;width:200px;height:60px">A</button>
<button id="b" style="position:absolute;left:800px;top:500px;width:200px;height:60px">B</button>
<div id="n" style="position:absolute;left:80px;top:300px;font-size:48px">0</div>
<script>
let n = 0;
const bump = () => { document.getElementById('n').textContent = ++n; };
document.addEventListener('keydown', bump);
document.addEventListener('click', bump);
</script></body></html>"""
CLICKS = ((180, 110), (900, 530))
"""The two buttons' centres (CSS pixels of the 1280 x 720 viewport)."""


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and every process below it, now."""
    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:  # exited meanwhile
            pass
    return total


def quantiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"median": None, "p95": None}
    return {"median": round(float(np.median(values)), 4), "p95": round(float(np.percentile(values, 95)), 4)}


async def paced(rate: float, seconds: float, send: Callable[[int], Awaitable[None]]) -> tuple[int, float]:
    """Call ``send(i)`` ``rate`` times a second for ``seconds``; (events sent, seconds it took)."""
    n = max(1, int(rate * seconds))
    t0 = time.perf_counter()
    for i in range(n):
        wait = t0 + i / rate - time.perf_counter()
        if wait > 0:
            await asyncio.sleep(wait)
        await send(i)
    return n, time.perf_counter() - t0


# -- web ------------------------------------------------------------------------------------------------------------
class TimedWebRecorder(WebRecorder):
    """The web recorder, noting for each event the capture time of the frame it chose (for the lag figure only)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.frame_times: list[tuple[float, float | None, float]] = []

    async def _frame_before(self, page: Any, at: float) -> tuple[bytes, float]:
        data, lag = await super()._frame_before(page, at)
        ring = self._frames.get(page) or ()
        captured = next((t for t, d in reversed(ring) if d is data), None)
        self.frame_times.append((at, captured, lag))
        return data, lag


def web_sender(page: Any, kind: str) -> Callable[[int], Awaitable[None]]:
    async def send(i: int) -> None:
        if kind == "keys":
            await page.keyboard.press("F2")
        else:
            await page.mouse.click(*CLICKS[i % 2])
    return send


async def web_run(url: str, kind: str, rate: float, seconds: float, runs_dir: Path, recorded: bool) -> dict[str, Any]:
    device = PlaywrightDevice(WebConfig())
    if not recorded:
        await device.start()
        try:
            await device.goto(url)
            await asyncio.sleep(0.5)
            cpu0 = cpu_seconds()
            sent, took = await paced(rate, seconds, web_sender(device.page, kind))
            cpu = cpu_seconds() - cpu0
        finally:
            await device.close()
        return {"sent": sent, "input_s": round(took, 3), "cpu_per_input_s": round(cpu / took, 4)}
    recorder = TimedWebRecorder(device, url)
    writer = RunWriter(runs_dir, config={"kind": "record"}).episode(task="bench", actor=Actor.HUMAN)
    env = RecordingEnv(recorder, "bench")
    written: list[float] = []
    task = asyncio.create_task(record_demonstration(
        env, writer, on_step=lambda s: written.append(time.perf_counter()) if s.action["kind"] != "finish" else None))
    try:
        await asyncio.wait_for(recorder.started.wait(), 60)
        await asyncio.sleep(0.5)
        cpu0 = cpu_seconds()
        sent, took = await paced(rate, seconds, web_sender(device.page, kind))
        end = time.perf_counter()
        while len(written) < sent and time.perf_counter() - end < 30:
            await asyncio.sleep(0.005)
        drain = max(0.0, (written[-1] if written else end) - end)
        cpu = cpu_seconds() - cpu0
        recorder.request_stop()
        await asyncio.wait_for(task, 60)
    finally:
        await env.close()
    events = recorder.frame_times[:sent]
    ages = [at - t for at, t, _ in events if t is not None]
    lags = [lag for _, _, lag in events]
    return {"sent": sent, "recorded": len(written), "dropped": max(0, sent - len(written)), "input_s": round(took, 3),
            "drain_s": round(drain, 3), "cpu_per_input_s": round(cpu / took, 4),
            "frame_age_s": quantiles(ages), "frame_lag_s": quantiles(lags),
            "late_share": round(sum(lag > 0.5 for lag in lags) / len(lags), 4) if lags else None}


def bench_web(rates: list[float], kinds: list[str], seconds: float, runs: int, runs_dir: Path) -> list[dict[str, Any]]:
    from envs.site import LocalSite

    pages = runs_dir / "pages"
    pages.mkdir(parents=True, exist_ok=True)
    (pages / "bench.html").write_text(PAGE, encoding="utf-8")
    rows = []
    with LocalSite(pages) as site:
        url = site.url("bench.html")
        for kind in kinds:
            for rate in rates:
                per: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
                for r in range(runs):
                    for recorded in ((True, False) if r % 2 == 0 else (False, True)):
                        per[recorded].append(asyncio.run(web_run(url, kind, rate, seconds, runs_dir, recorded)))
                rows.append(summarize("web", kind, rate, per[True], per[False]))
                print(line(rows[-1]), flush=True)
    return rows


# -- desktop --------------------------------------------------------------------------------------------------------
def desktop_missing() -> str:
    """Why the desktop part cannot run here ("" when it can)."""
    import shutil

    if not (REPO / "devices" / "desktop" / "recorder.py").is_file():
        return "devices/desktop/recorder.py is not there"
    if shutil.which("Xvfb") is None:
        return "Xvfb is not installed"
    try:
        import Xlib.ext.xtest  # noqa: F401
    except ImportError:
        return "python-xlib is not installed"
    return ""


def start_xvfb() -> tuple[Any, str]:
    """A private Xvfb display that answers (other jobs may start displays at the same time: a number whose lock or
    socket exists is skipped, and one taken meanwhile is given up for the next)."""
    import random
    import subprocess

    from devices.desktop.display import prepare_display
    from devices.errors import DeviceUnavailable

    for number in random.Random(os.getpid()).sample(range(300, 900), 20):
        if os.path.exists(f"/tmp/.X{number}-lock") or os.path.exists(f"/tmp/.X11-unix/X{number}"):
            continue
        # -noreset: an X server resets when its last client leaves, and refuses connections while it does
        proc = subprocess.Popen(["Xvfb", f":{number}", "-screen", "0", "1280x720x24", "-nolisten", "tcp", "-noreset"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                return proc, prepare_display(f":{number}")
            except DeviceUnavailable:
                time.sleep(0.1)
        proc.kill()
        proc.wait(5)
    raise RuntimeError("no Xvfb display could be started")


def xtest_sender(display: str, kind: str) -> tuple[Callable[[int], Awaitable[None]], Callable[[], None]]:
    """(send event i through XTest, close)."""
    from devices.desktop.display import prepare_display
    from Xlib import XK, X, display as xdisplay
    from Xlib.ext import xtest

    d = xdisplay.Display(prepare_display(display))
    f2 = d.keysym_to_keycode(XK.string_to_keysym("F2"))

    async def send(i: int) -> None:
        if kind == "keys":
            xtest.fake_input(d, X.KeyPress, f2)
            xtest.fake_input(d, X.KeyRelease, f2)
        else:
            x, y = CLICKS[i % 2]
            xtest.fake_input(d, X.MotionNotify, x=x, y=y)
            xtest.fake_input(d, X.ButtonPress, 1)
            xtest.fake_input(d, X.ButtonRelease, 1)
        d.sync()

    return send, d.close


async def desktop_run(display: str, kind: str, rate: float, seconds: float, runs_dir: Path,
                      recorded: bool) -> dict[str, Any]:
    send, close = xtest_sender(display, kind)
    try:
        if not recorded:
            cpu0 = cpu_seconds()
            sent, took = await paced(rate, seconds, send)
            return {"sent": sent, "input_s": round(took, 3),
                    "cpu_per_input_s": round((cpu_seconds() - cpu0) / took, 4)}
        from devices.desktop.config import DesktopConfig
        from devices.desktop.recorder import DesktopRecorder

        recorder = DesktopRecorder(DesktopConfig(display=display))
        writer = RunWriter(runs_dir, config={"kind": "record"}).episode(task="bench", actor=Actor.HUMAN)
        env = RecordingEnv(recorder, "bench")
        written: list[float] = []
        lags: list[float] = []
        ages: list[float] = []

        def on_step(step: Any) -> None:
            if step.action["kind"] == "finish":
                return
            written.append(time.perf_counter())
            demo = (step.info.get("env_info") or {}).get("demo") or {}
            lags.append(float(demo.get("frame_lag_s", 0.0)))

        task = asyncio.create_task(record_demonstration(env, writer, on_step=on_step))
        try:
            await asyncio.wait_for(recorder.started.wait(), 60)  # its threads start with the runner's reset
            await asyncio.sleep(0.5)
            cpu0 = cpu_seconds()
            sent, took = await paced(rate, seconds, send)
            end = time.perf_counter()
            while len(written) < sent and time.perf_counter() - end < 30:
                await asyncio.sleep(0.005)
            drain = max(0.0, (written[-1] if written else end) - end)
            cpu = cpu_seconds() - cpu0
            from Xlib import XK, X, display as xdisplay
            from Xlib.ext import xtest

            d = xdisplay.Display(display)  # the stop keys
            keys = [d.keysym_to_keycode(XK.string_to_keysym(k)) for k in ("Control_L", "Alt_L", "s")]
            for k in keys:
                xtest.fake_input(d, X.KeyPress, k)
            for k in reversed(keys):
                xtest.fake_input(d, X.KeyRelease, k)
            d.sync()
            d.close()
            await asyncio.wait_for(task, 60)
        finally:
            await env.close()
        ages = lags  # the desktop recorder's lag is the event time minus the frame's capture time
        return {"sent": sent, "recorded": len(written), "dropped": max(0, sent - len(written)),
                "input_s": round(took, 3), "drain_s": round(drain, 3), "cpu_per_input_s": round(cpu / took, 4),
                "frame_age_s": quantiles(ages), "frame_lag_s": quantiles(lags),
                "late_share": round(sum(lag > 0.5 for lag in lags) / len(lags), 4) if lags else None}
    finally:
        close()


def bench_desktop(rates: list[float], kinds: list[str], seconds: float, runs: int,
                  runs_dir: Path) -> list[dict[str, Any]]:
    rows = []
    for kind in kinds:
        for rate in rates:
            per: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
            for r in range(runs):
                for recorded in ((True, False) if r % 2 == 0 else (False, True)):
                    # a fresh display per run: an X server that a recording left in some state never carries over
                    proc, display = start_xvfb()
                    try:
                        per[recorded].append(asyncio.run(desktop_run(display, kind, rate, seconds, runs_dir,
                                                                     recorded)))
                    finally:
                        proc.terminate()
                        proc.wait(5)
            rows.append(summarize("desktop", kind, rate, per[True], per[False]))
            print(line(rows[-1]), flush=True)
    return rows


# -- reporting ------------------------------------------------------------------------------------------------------
def summarize(device: str, kind: str, rate: float, recorded: list[dict[str, Any]],
              bare: list[dict[str, Any]]) -> dict[str, Any]:
    def med(rows: list[dict[str, Any]], key: str, sub: str | None = None) -> float | None:
        values = [(r[key][sub] if sub else r[key]) for r in rows]
        values = [v for v in values if v is not None]
        return round(statistics.median(values), 4) if values else None

    achieved = statistics.median(r["sent"] / r["input_s"] for r in recorded)
    dropped = sum(r["dropped"] for r in recorded)
    drain = med(recorded, "drain_s")
    return {"device": device, "kind": kind, "rate": rate, "achieved_per_s": round(achieved, 1),
            "sent": sum(r["sent"] for r in recorded), "dropped": dropped, "drain_s": drain,
            "sustained": dropped == 0 and drain is not None and drain < 1.0,
            "frame_age_median_ms": _ms(med(recorded, "frame_age_s", "median")),
            "frame_age_p95_ms": _ms(med(recorded, "frame_age_s", "p95")),
            "frame_lag_median_ms": _ms(med(recorded, "frame_lag_s", "median")),
            "frame_lag_p95_ms": _ms(med(recorded, "frame_lag_s", "p95")),
            "late_share": med(recorded, "late_share"),
            "cpu_recorded": med(recorded, "cpu_per_input_s"), "cpu_bare": med(bare, "cpu_per_input_s"),
            "runs": {"recorded": recorded, "bare": bare}}


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


COLUMNS = ("device", "kind", "rate", "achieved_per_s", "dropped", "drain_s", "sustained", "frame_age_median_ms",
           "frame_age_p95_ms", "frame_lag_median_ms", "frame_lag_p95_ms", "late_share", "cpu_recorded", "cpu_bare")


def line(row: dict[str, Any]) -> str:
    return "  ".join(f"{c}={row[c]}" for c in COLUMNS)


def table(rows: list[dict[str, Any]]) -> str:
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in COLUMNS]
    out = ["  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths)), "  ".join("-" * w for w in widths)]
    out += ["  ".join(str(r[c]).ljust(w) for c, w in zip(COLUMNS, widths)) for r in rows]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rates", default="10,20,40,80", help="input events per second, comma-separated")
    parser.add_argument("--kinds", default="keys,clicks", help="keys, clicks or both")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds of input per run")
    parser.add_argument("--runs", type=int, default=3, help="runs per rate and setting (the median is reported)")
    parser.add_argument("--dir", default=str(REPO / "runs"), help="where the temporary run folders go")
    parser.add_argument("--devices", default="web,desktop", help="web, desktop or both; results of a device not run "
                        "this time are kept from --out")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "record.json"))
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    kinds = [k for k in args.kinds.split(",") if k]
    Path(args.dir).mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    devices = [d for d in args.devices.split(",") if d]
    desktop = desktop_missing() if "desktop" in devices else "not asked for (--devices)"
    with tempfile.TemporaryDirectory(prefix="bench-record-", dir=args.dir) as tmp:
        if "web" in devices:
            rows += bench_web(rates, kinds, args.seconds, args.runs, Path(tmp))
        if not desktop:
            try:
                rows += bench_desktop(rates, kinds, args.seconds, args.runs, Path(tmp))
            except Exception as e:  # the web figures are kept; say what stopped the desktop part
                import traceback

                traceback.print_exc()
                desktop = f"failed: {type(e).__name__}: {e}"
    out = Path(args.out)
    if out.is_file():  # keep the rows of devices not measured this time
        kept = [r for r in json.loads(out.read_text()).get("results", []) if r["device"] not in devices]
        rows = kept + rows
    print(f"\n== recording: {args.seconds} s of input per run, median of {args.runs} runs; CPU = CPU seconds of "
          f"Python + browser (or X server) per second of input ==")
    print(table(rows) if rows else "(nothing measured)")
    if desktop:
        print(f"desktop: not measured ({desktop})")
    for device in sorted({r["device"] for r in rows}):
        ok = [r["achieved_per_s"] for r in rows if r["device"] == device and r["sustained"]]
        print(f"{device}: highest rate sustained with nothing dropped: {max(ok) if ok else 'none'} events/s")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()},
        "args": vars(args), "desktop": desktop or "measured", "results": rows}, indent=2, default=str))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()

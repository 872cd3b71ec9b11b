"""Soak: resident memory and processes over a long run, sampled from outside the process that runs it.

    .venv/bin/python bench/soak.py                                    # full: 564 episodes, 141 envs; 30 min online
    .venv/bin/python bench/soak.py --episodes 1 --minutes 5           # shorter: 141 episodes; 5 minutes online
    .venv/bin/python bench/soak.py --parts eval --envs 3 --episodes 1 --interval 0.2 --out /tmp/soak.json

Two parts, each a child process in a session of its own, started with a mark in its environment
(``HANDEYE_SOAK=<id>``) that everything it starts inherits (Chromium included, though it leaves the process tree's
session), so that a process left running, orphaned or not, is found by its mark:

1. **eval**: ``agent eval`` over ``--envs`` environments (the generated suite's web environments, then MiniWoB++
   tasks: 141 in all), ``--episodes`` each (4: 564 episodes), ``--parallel`` slots (2), with a cheap policy: the
   scripted one by default (two clicks, then ``finish``: every episode resets, acts, settles and is checked), or
   ``--policy ocr`` (the run issue 26 reported: every environment's browser stayed open).
2. **online**: an online session (``agent.online.OnlineSession``) of ``--minutes`` minutes on generated/click with
   ``--actors`` browser actors, the tiny random model (its first answer forced to a parsable click, so that the
   learner updates and publishes versions: ``bench.online.common``), the learner running alongside.

Every ``--interval`` seconds each marked process is read from ``/proc``: the sum of resident memory (RSS, which
counts pages shared between Chromium's processes once per process), the sum of proportional memory (PSS:
``smaps_rollup``, shared pages divided among their users, what the processes cost the machine together), the child
process's own RSS (the Python heap: the runner, the learner), and how many processes, Playwright drivers, Chromium
browsers (a Chromium process without a ``--type=`` switch: the browser itself, not one of its helpers) and Chromium processes there are.

Verdicts per part, on the samples from the first to the last with a browser alive (start-up and shutdown left
out): **flat** when the median of the last tenth of them is within ``--tolerance`` (10 %) of the median of the
tenth right after the warm-up (the first ``--warmup`` share, 20 %), for the whole tree's RSS and PSS; **bounded** when there were never more browsers than slots (actors); **clean** when no marked
process is left once the child has exited (those found are listed and killed). No assertion on time: a verdict that
fails is reported, and the exit status is 1.

Writes ``--out`` (default bench/results/soak.json) with every sample, and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

MARK = "HANDEYE_SOAK"
SCRIPT = [{"kind": "click", "point": [0.5, 0.4]}, {"kind": "click", "point": [0.3, 0.7]}, {"kind": "finish"}]
"""The scripted policy's episode: two clicks, then finish."""


# -- sampling ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Sample:
    t: float
    """Seconds since the child started."""
    rss_mb: float
    pss_mb: float
    child_rss_mb: float
    processes: int
    drivers: int
    browsers: int
    chromium: int


def _stat(pid: int) -> tuple[str, int, str] | None:
    """(name, parent pid, state) of ``pid``; None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return text[text.index("(") + 1:text.rindex(")")], int(fields[1]), fields[0]


def _kb(path: str, key: str) -> int:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def marked(mark: str) -> list[int]:
    """Every live (not zombie) process whose environment carries ``MARK=mark``."""
    wanted = f"{MARK}={mark}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry.name}/environ").read_bytes()
        except OSError:
            continue
        seen = _stat(int(entry.name))
        if wanted in environ.split(b"\0") and seen is not None and seen[2] not in "ZX":
            found.append(int(entry.name))
    return found


def sample(mark: str, child: int, t: float) -> Sample:
    pids = marked(mark)
    stats = {pid: _stat(pid) for pid in pids}
    names = {pid: st[0] for pid, st in stats.items() if st is not None}
    rss = pss = drivers = browsers = chromium = 0
    for pid, name in names.items():
        rss += _kb(f"/proc/{pid}/status", "VmRSS:")
        pss += _kb(f"/proc/{pid}/smaps_rollup", "Pss:")
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()  # Chromium's helpers rewrite it: one string
        except OSError:
            cmdline = b""
        drivers += b"\0run-driver" in cmdline
        if name.startswith("chrom"):
            chromium += 1
            # the browser itself: its helpers (zygotes, renderers, GPU, services) carry --type=, crashpad its name
            parent = stats[pid][1] if stats[pid] else 0
            parent_name = names.get(parent) or (_stat(parent) or ("",))[0]
            browsers += ("crashpad" not in name and b"--type=" not in cmdline  # a browser being forked is not one
                         and not parent_name.startswith("chrom"))
    return Sample(round(t, 2), rss / 1024, pss / 1024, _kb(f"/proc/{child}/status", "VmRSS:") / 1024, len(names),
                  drivers, browsers, chromium)


def watch(cmd: list[str], interval: float, log_path: Path, env: dict[str, str] | None = None
          ) -> tuple[int, list[Sample], list[str], float]:
    """Run ``cmd`` marked, in a session of its own, sampling its processes every ``interval`` s until it exits.
    Returns (exit status, samples, the marked processes left after it exited (killed), wall seconds)."""
    mark = uuid.uuid4().hex
    child_env = {**os.environ, **(env or {}), MARK: mark, "PYTHONPATH": str(REPO)}
    samples: list[Sample] = []
    t0 = time.monotonic()
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=child_env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            while proc.poll() is None:
                samples.append(sample(mark, proc.pid, time.monotonic() - t0))
                time.sleep(interval)
        except BaseException:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait()
            raise
    wall = time.monotonic() - t0
    time.sleep(1.0)  # what the child started has a moment to go with it
    left = []
    for pid in marked(mark):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            os.kill(pid, signal.SIGKILL)
        except OSError:
            continue
        left.append(f"{pid} ({cmdline.strip()[:120]})")
    return proc.returncode, samples, left, wall


# -- verdicts ----------------------------------------------------------------------------------------------------------
def growth(values: list[float], warmup: float) -> dict[str, float | None]:
    """The median of the tenth of ``values`` right after the warm-up (the first ``warmup`` share), the median of the
    last tenth, and the growth from one to the other (a fraction: 0.05 is 5 %)."""
    n = len(values)
    if n < 3:
        return {"after_warmup": None, "end": None, "growth": None, "max": max(values) if values else None}
    start = min(int(n * warmup), n - 2)
    width = max(1, n // 10)
    first = statistics.median(values[start:start + width])
    last = statistics.median(values[-width:])
    return {"after_warmup": round(first, 1), "end": round(last, 1),
            "growth": round(last / first - 1, 4) if first else None, "max": round(max(values[start:]), 1)}


def steady(samples: list[Sample]) -> list[Sample]:
    """The samples from the first to the last with a browser alive: start-up (the model loading) and shutdown
    (the browsers closing) are left out of the memory figures."""
    alive = [i for i, s in enumerate(samples) if s.browsers]
    return samples[alive[0]:alive[-1] + 1] if alive else samples


def verdict(samples: list[Sample], left: list[str], slots: int, warmup: float, tolerance: float) -> dict[str, Any]:
    running = steady(samples)
    memory = {key: growth([getattr(s, key) for s in running], warmup) for key in ("rss_mb", "pss_mb", "child_rss_mb")}
    peaks = {key: max((getattr(s, key) for s in samples), default=0)
             for key in ("processes", "drivers", "browsers", "chromium")}
    grown = [memory[k]["growth"] for k in ("rss_mb", "pss_mb")]
    return {"memory": memory, "peak": peaks,
            "flat": all(g is not None and g <= tolerance for g in grown),
            "bounded": peaks["browsers"] <= slots, "clean": not left, "left": left}


# -- the parts ---------------------------------------------------------------------------------------------------------
def environments(count: int) -> list[str]:
    """The generated suite's web environments, then MiniWoB++ tasks: the first ``count``."""
    from envs.registry import all_specs

    names = [s.name for s in all_specs("generated") if s.device_kind == "web"]
    names += [s.name for s in all_specs("miniwob")]
    if count > len(names):
        raise SystemExit(f"--envs {count}: there are {len(names)} web environments (generated and MiniWoB++)")
    return names[:count]


def eval_part(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    names = environments(args.envs)
    script = work / "script.json"
    script.write_text(json.dumps(SCRIPT), encoding="utf-8")
    policy = ["--policy", "scripted", "--script", str(script)] if args.policy == "scripted" else ["--policy",
                                                                                                   args.policy]
    cmd = [sys.executable, "-m", "agent", "eval", "--suite", "miniwob", "--tasks", *names, "--episodes",
           str(args.episodes), "--parallel", str(args.parallel), *policy, "--runs-dir", str(work / "runs")]
    rc, samples, left, wall = watch(cmd, args.interval, work / "eval.log")
    scores = next((work / "runs").glob("*/eval.json"), None)
    overall = json.loads(scores.read_text())["overall"] if scores else {}
    return {"part": "eval", "command": " ".join(["agent", *cmd[3:]]), "exit": rc, "wall_s": round(wall, 1),
            "envs": len(names), "episodes": overall.get("episodes", 0), "outcomes": overall.get("outcomes", {}),
            "slots": args.parallel, **verdict(samples, left, args.parallel, args.warmup, args.tolerance),
            "samples": [asdict(s) for s in samples], "log_tail": _tail(work / "eval.log")}


def online_part(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--online-child", str(work / "online"), "--minutes",
           str(args.minutes), "--actors", str(args.actors)]
    rc, samples, left, wall = watch(cmd, args.interval, work / "online.log")
    summary_path = work / "online" / "online_summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    return {"part": "online", "command": f"bench/soak.py --parts online --minutes {args.minutes} --actors "
                                         f"{args.actors}", "exit": rc, "wall_s": round(wall, 1), "envs": 1,
            "episodes": summary.get("episodes", 0), "updates": summary.get("updates", 0), "slots": args.actors,
            **verdict(samples, left, args.actors, args.warmup, args.tolerance),
            "samples": [asdict(s) for s in samples], "log_tail": _tail(work / "online.log")}


def online_child(run_dir: str, minutes: float, actors: int) -> int:
    """The online part's child: a session of ``minutes`` minutes, then its summary in the run folder."""
    from agent.online import OnlineConfig, OnlineSession
    from bench.online.common import force_first_answer, tiny_config

    holder: list[Any] = []
    session = OnlineSession(tiny_config(run_dir), OnlineConfig(
        env="generated/click", actors=actors, max_wall_s=minutes * 60, torch_threads=1, progress_every_s=30.0,
        report=False), logits_processor_factory=lambda r: force_first_answer(holder[0])(r))
    holder.append(session)
    result = asyncio.run(session.run())
    print(f"online: {result.episodes} episodes, {result.updates} updates in {result.wall_s:.0f} s", flush=True)
    return 0


def _tail(path: Path, lines: int = 5) -> list[str]:
    return path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:] if path.is_file() else []


# -- the table ---------------------------------------------------------------------------------------------------------
def table(parts: list[dict[str, Any]]) -> str:
    head = ("| part | envs | episodes | minutes | RSS MB after warm-up → end (growth) | PSS MB after warm-up → end "
            "(growth) | child RSS MB | peak browsers / slots | peak drivers | peak Chromium procs | left | verdict |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    def cell(memory: dict[str, Any], key: str) -> str:
        g = memory[key]
        if g["growth"] is None:
            return "-"
        return f"{g['after_warmup']:.0f} → {g['end']:.0f} ({g['growth']:+.1%})"

    for p in parts:
        m = p["memory"]

        verdicts = ", ".join(f"{name}" if ok else f"NOT {name}"
                             for name, ok in (("flat", p["flat"]), ("bounded", p["bounded"]), ("clean", p["clean"])))
        lines.append(f"| {p['part']} | {p['envs']} | {p['episodes']} | {p['wall_s'] / 60:.1f} | {cell(m, 'rss_mb')} | "
                     f"{cell(m, 'pss_mb')} | {cell(m, 'child_rss_mb')} | {p['peak']['browsers']} / {p['slots']} | "
                     f"{p['peak']['drivers']} | {p['peak']['chromium']} | {len(p['left'])} | {verdicts} |")
    return "\n".join(lines)


def timeline(part: dict[str, Any], rows: int = 8) -> str:
    """A few samples spread over the run: how the figures moved."""
    samples = part["samples"]
    if not samples:
        return ""
    picks = sorted({round(i * (len(samples) - 1) / max(1, rows - 1)) for i in range(rows)})
    out = [f"{part['part']}:   t s   RSS MB   PSS MB  child MB  procs  browsers  chromium"]
    for i in picks:
        s = samples[i]
        out.append(f"        {s['t']:6.0f} {s['rss_mb']:8.0f} {s['pss_mb']:8.0f} {s['child_rss_mb']:9.0f} "
                   f"{s['processes']:6d} {s['browsers']:9d} {s['chromium']:9d}")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", choices=("eval", "online"), default=["eval", "online"])
    parser.add_argument("--envs", type=int, default=141, help="environments of the eval part (at most 141)")
    parser.add_argument("--episodes", type=int, default=4, help="episodes per environment")
    parser.add_argument("--parallel", type=int, default=2, help="the eval part's slots")
    parser.add_argument("--policy", default="scripted", help="scripted (two clicks, then finish), ocr or oracle")
    parser.add_argument("--minutes", type=float, default=30.0, help="the online part's length")
    parser.add_argument("--actors", type=int, default=2, help="the online part's browser actors")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between samples")
    parser.add_argument("--warmup", type=float, default=0.2, help="share of each run counted as warm-up")
    parser.add_argument("--tolerance", type=float, default=0.10, help="growth still counted as flat")
    parser.add_argument("--out", type=Path, default=REPO / "bench/results/soak.json")
    parser.add_argument("--online-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.online_child:
        return online_child(args.online_child, args.minutes, args.actors)
    out: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                       "load": os.getloadavg(), "date": time.strftime("%Y-%m-%d %H:%M")},
                           "settings": {k: v for k, v in vars(args).items() if k not in ("out", "online_child")},
                           "parts": []}
    out["settings"]["parts"] = list(args.parts)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp:
        for name in args.parts:
            part = (eval_part if name == "eval" else online_part)(args, Path(tmp))
            out["parts"].append(part)
            args.out.write_text(json.dumps(out, indent=1) + "\n")  # after every part
            print(timeline(part), flush=True)
    out["table"] = table(out["parts"])
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(out["table"])
    print(f"written: {args.out}")
    ok = all(p["flat"] and p["bounded"] and p["clean"] and p["exit"] == 0 for p in out["parts"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""The action benchmarks' metrics on a stand-in test set: the scripted and OCR policies (docs/benchmarks.md,
"Offline action benchmarks").

GUI-R1's released test files are not part of handeye (and this machine has no network), so this script writes a
small stand-in for each of the six benchmarks in the released Parquet schema (``envs.action_bench.records``), from
generated screens (``envs/generated``: exact boxes, rendered in Chromium): ``--per-benchmark`` steps each, the
benchmark's click-like actions on the named widget (phone screens and a point for AndroidControl and GUI-Odyssey,
desktop screens and a box for the others) and, on every third step, one of its other actions (type, scroll,
press_back, complete, impossible on a screen whose target is absent, ...) with an instruction that asks for it.
Then it scores each policy on every file exactly as ``agent eval --suite actions --data DIR --policy P`` does
(``agent.action_eval``) and writes Type / GR / SR per benchmark and policy, with the released and plain counts.

The scripted policy clicks the centre of the screen on every step (a floor: what a policy that reads nothing gets).
Run: .venv/bin/python bench/action_bench.py [--per-benchmark 24] [--data-dir runs/action-bench]
     [--out docs/results/action_bench.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent.action_eval import evaluate_actions  # noqa: E402
from envs.action_bench.benchmarks import BENCHMARKS, Benchmark  # noqa: E402
from envs.action_bench.metrics import CLICK_LIKE  # noqa: E402
from envs.action_bench.records import load_actions  # noqa: E402
from envs.generated import GeneratedEnv  # noqa: E402
from policy.ocr import OcrPolicy, rapidocr_version  # noqa: E402
from policy.scripted import ScriptedPolicy  # noqa: E402

#: instruction and gt_input_text of each action that is not click-like ({label}: the screen's named widget)
OTHERS = {
    "type": ('Type "weekly report" into the search box', "weekly report"),
    "scroll": ("Scroll down to see more", "down"),
    "press_back": ("Go back to the previous screen", "no input text"),
    "press_home": ("Go to the home screen", "no input text"),
    "press_recent": ("Show the recent apps", "no input text"),
    "open_app": ("Open the Clock app", "Clock"),
    "wait": ("Wait for the page to finish loading", "no input text"),
    "complete": ("The task is done: finish", "no input text"),
    "impossible": ('Click the "{label}" button', "no input text"),  # on a screen whose target is absent
    "press_enter": ("Press Enter to submit", "no input text"),
    "press_tab": ("Press Tab to move to the next field", "no input text"),
    "press_down": ("Press the down arrow key", "no input text"),
    "press_space": ("Press the space bar", "no input text"),
    "hotkey": ("Press Ctrl+C to copy", "ctrl c"),
    "press_pgdn": ("Press Page Down", "no input text"),
}
CLICK_VERBS = {"click": 'Click the "{label}" button', "long_press": 'Long press "{label}"',
               "moveto": 'Hover over "{label}"', "doubleclick": 'Double-click "{label}"',
               "rightclick": 'Right-click "{label}"'}
MOBILE = ("androidcontrol-low", "androidcontrol-high", "guiodyssey")


async def screen(env: GeneratedEnv, seed: int) -> tuple[bytes, dict]:
    obs, info = await env.reset(seed=seed)
    assert obs.encoded is not None
    return obs.encoded, info


async def records_for(bench: Benchmark, n: int) -> list[dict]:
    """``n`` rows of ``bench`` in the released schema (see the module docstring)."""
    phone = bench.name in MOBILE
    factor = "phone" if phone else "desktop"
    click_env, absent_env = GeneratedEnv("click", form_factor=factor), GeneratedEnv("absent", form_factor=factor)
    clicks = [a for a in bench.actions if a in CLICK_LIKE]
    others = [a for a in bench.actions if a not in CLICK_LIKE]
    rows = []
    try:
        for i in range(n):
            action = others[(i // 3) % len(others)] if others and i % 3 == 2 else clicks[i % len(clicks)]
            env = absent_env if action == "impossible" else click_env
            image, info = await screen(env, 1000 + i)
            label = env.screen.task.named_label if env.screen else ""
            box = info["target_boxes"][0] if info["target_boxes"] else None
            if action in CLICK_LIKE:
                instruction, text = CLICK_VERBS[action].format(label=label), "no input text"
                bbox = [(box[0] + box[2]) / 2, (box[1] + box[3]) / 2] if phone else list(box)
            else:
                template, text = OTHERS[action]
                instruction, bbox = template.format(label=label), [-100.0, -100.0]
            if bench.name == "androidcontrol-high" and action in CLICK_LIKE:
                instruction = f"I need the {label} screen of this app"  # a goal, not the step's instruction
            rows.append({"image": {"bytes": image, "path": f"{i}.png"}, "instruction": instruction,
                         "history": "None", "task_type": "high" if bench.name.endswith("high") else "low",
                         "gt_action": action, "gt_bbox": bbox, "gt_input_text": text})
    finally:
        await click_env.close()
        await absent_env.close()
    return rows


def write(folder: Path, n: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    for bench in BENCHMARKS.values():
        rows = asyncio.run(records_for(bench, n))
        pq.write_table(pa.Table.from_pylist(rows), folder / f"{bench.file_stem}.parquet")


def score(folder: Path, policy_name: str, n: int) -> list[dict]:
    out = []
    for dataset in load_actions(folder):
        policy = OcrPolicy() if policy_name == "ocr" else ScriptedPolicy([json.dumps({"kind": "click", "point": [
            0.5, 0.5]})] * n)
        result = asyncio.run(evaluate_actions(dataset, policy, batch=4)).to_dict()
        out.append({"policy": policy_name, **{k: result[k] for k in ("benchmark", "title", "steps", "scores",
                                                                     "breakdown", "samples_per_s", "published")}})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-benchmark", type=int, default=24)
    parser.add_argument("--policies", nargs="+", default=["scripted", "ocr"], choices=("scripted", "ocr"))
    parser.add_argument("--data-dir", default="runs/action-bench")
    parser.add_argument("--out", default="bench/results/action_bench.json")
    args = parser.parse_args()
    folder = Path(args.data_dir)
    t0 = time.perf_counter()
    write(folder, args.per_benchmark)
    results = [r for p in args.policies for r in score(folder, p, args.per_benchmark)]
    summary = {"command": "bench/action_bench.py " + " ".join(sys.argv[1:]), "date": time.strftime("%Y-%m-%d"),
               "machine": f"{platform.machine()}, {platform.python_version()}", "rapidocr": rapidocr_version(),
               "data_dir": str(folder), "wall_s": round(time.perf_counter() - t0, 1), "results": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    for r in results:
        cells = "  ".join(f"{m} {100 * r['scores']['released'][m]['rate']:5.1f} "
                          f"({r['scores']['released'][m]['hits']}/{r['scores']['released'][m]['total']})"
                          for m in ("type", "gr", "sr"))
        print(f"{r['policy']:<9} {r['title']:<20} {cells}  {r['samples_per_s']:.2f}/s")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

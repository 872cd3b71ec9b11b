"""Tables and the HTML report of an action-benchmark evaluation (``agent eval --suite actions``).

The console gets, per benchmark: Type, GR and SR with their 95% Wilson intervals (as the released scorer sums them;
the plain counts beside them when they differ), the paper's rows for GUI-R1-3B and -7B, decisions per second, a
per-action breakdown and the confusion matrix of true against predicted action names. ``report.html`` (one file
next to the ``images/`` it shows, like the episode report) has the same tables and every sample's screenshot with
the true action (green: its point, box and the 0.14 GR ellipse) and the predicted one (red) drawn over it.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent.eval import wilson_interval
from envs.action_bench.metrics import GR_RADIUS

__all__ = ["build_action_report", "format_action_tables", "score_cells"]

METRICS = (("type", "Type"), ("gr", "GR"), ("sr", "SR"))


def score_cells(result: dict[str, Any]) -> dict[str, str]:
    """``"89.9 (85.1–93.4) 267/297"`` per metric, as the released scorer counts; the plain rate added in brackets
    when categories without a hit changed it."""
    cells = {}
    for key, _ in METRICS:
        rel, plain = result["scores"]["released"][key], result["scores"]["plain"][key]
        if not rel["total"] and not plain["total"]:
            cells[key] = "-"
            continue
        low, high = wilson_interval(rel["hits"], rel["total"])
        text = f"{100 * rel['rate']:.1f} ({100 * low:.1f}–{100 * high:.1f}) {rel['hits']}/{rel['total']}"
        if plain["total"] != rel["total"]:
            text += f" [all steps {100 * plain['rate']:.1f}]"
        cells[key] = text
    return cells


def format_action_tables(result: dict[str, Any]) -> list[Any]:
    """Rich tables for one benchmark's ``BenchResult.to_dict()``: scores (with the paper's rows), breakdown,
    confusion matrix."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    scores = Table(title=f"{result['title']}: {result['steps']} steps, {result['samples_per_s']:.2f} samples/s",
                   header_style="bold", box=box.SIMPLE_HEAD)
    scores.add_column("policy")
    for _, title in METRICS:
        scores.add_column(f"{title} % (95% CI)", justify="right", overflow="fold")
    cells = score_cells(result)
    scores.add_row(escape(_policy_name(result["policy"])), *(escape(cells[k]) for k, _ in METRICS), style="bold")
    for model, row in result["published"].items():
        scores.add_row(f"{model} (paper)", *(f"{v:.2f}" for v in row))
    breakdown = Table(title="per true action", header_style="bold", box=box.SIMPLE_HEAD)
    for col in ("action", "steps", "type", "GR", "text"):
        breakdown.add_column(col, justify="left" if col == "action" else "right")
    for r in result["breakdown"]:
        breakdown.add_row(escape(str(r["action"])), str(r["steps"]), f"{r['type_hits']}/{r['steps']}",
                          f"{r['gr_hits']}/{r['gr_steps']}" if r["gr_steps"] else "-",
                          f"{r['text_hits']}/{r['text_steps']}" if r["text_steps"] else "-")
    confusion = Table(title="confusion: what was predicted for each true action", header_style="bold",
                      box=box.SIMPLE_HEAD)
    confusion.add_column("true", no_wrap=True)
    confusion.add_column("predicted (steps)", overflow="fold")
    for gt, row in result["confusion"].items():
        predicted = ", ".join(f"{p} {n}" for p, n in sorted(row.items(), key=lambda kv: -kv[1]))
        confusion.add_row(escape(str(gt)), escape(predicted))
    return [scores, breakdown, confusion]


def _policy_name(policy: dict[str, Any]) -> str:
    return str(policy.get("model") or policy.get("name") or "policy")


def _overlay(sample: dict[str, Any]) -> str:
    """SVG over the screenshot in a 0..1000 box: the true action green, the predicted red."""
    w, h = sample["size"]
    parts = []
    if sample["gt_box"]:
        x1, y1, x2, y2 = sample["gt_box"]
        parts.append(f"<rect x='{x1 * 1000:.1f}' y='{y1 * 1000:.1f}' width='{(x2 - x1) * 1000:.1f}' "
                     f"height='{(y2 - y1) * 1000:.1f}' class='gt'/>")
    if sample["gt_point"] and sample["gr_hit"] is not None:
        x, y = sample["gt_point"]
        parts.append(f"<ellipse cx='{x * 1000:.1f}' cy='{y * 1000:.1f}' rx='{GR_RADIUS * 1000:.0f}' "
                     f"ry='{GR_RADIUS * 1000:.0f}' class='ring'/><circle cx='{x * 1000:.1f}' cy='{y * 1000:.1f}' "
                     f"r='6' class='gtp'/>")
    if sample["pred_point"]:
        x, y = sample["pred_point"]
        parts.append(f"<circle cx='{x * 1000:.1f}' cy='{y * 1000:.1f}' r='7' class='pred'/>")
    ratio = h / w if w else 1.0
    return (f"<svg viewBox='0 0 1000 1000' preserveAspectRatio='none' style='aspect-ratio:{1 / ratio:.4f}'>"
            + "".join(parts) + "</svg>")


CSS = ("body{font-family:sans-serif;margin:24px}table{border-collapse:collapse;margin:8px 0 20px}"
       "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td:first-child,th:first-child{text-align:left}"
       ".shot{position:relative;display:inline-block;width:360px;vertical-align:top}.shot img{width:100%;display:block}"
       ".shot svg{position:absolute;left:0;top:0;width:100%;height:100%}.gt{fill:none;stroke:#0a0;stroke-width:4}"
       ".gtp{fill:#0a0}.ring{fill:none;stroke:#0a0;stroke-dasharray:8 6;stroke-width:3}.pred{fill:#d00}"
       ".card{display:inline-block;margin:6px;width:370px;vertical-align:top;font-size:12px}"
       ".hit{color:#1a7f37}.miss{color:#b00020}pre{white-space:pre-wrap;max-height:8em;overflow:auto}")


def _sample_html(sample: dict[str, Any], folder: str) -> str:
    e = html.escape
    mark = (lambda ok: "" if ok is None else ("<span class='hit'>hit</span>" if ok else "<span class='miss'>miss</span>"))
    img = f"<img loading='lazy' src='{e(folder + '/' + sample['image'])}'>" if sample["image"] else ""
    return (f"<div class='card'><div class='shot'>{img}{_overlay(sample)}</div>"
            f"<div><b>{e(sample['id'])}</b> {e(sample['instruction'])}</div>"
            f"<div>true: <b>{e(sample['gt_action'])}</b> {e(sample['gt_text'])}</div>"
            f"<div>predicted: <b>{e(str(sample['pred_action']))}</b> {e(sample['pred_text'])} "
            f"({e(sample['unified'] or '')})"
            + "".join(f" {name} {mark(sample[key])}" for name, key in (("type", "type_hit"), ("GR", "gr_hit"),
                                                                       ("text", "text_hit")) if sample[key] is not None)
            + "</div>"
            f"<pre>{e(sample['raw_output'][:2000])}</pre></div>")


def _bench_html(result: dict[str, Any], folder: str) -> list[str]:
    e = html.escape
    cells = score_cells(result)
    parts = [f"<h2>{e(result['title'])}</h2><p>{e(result['file'])}: {result['steps']} steps "
             f"({result['rejected_count']} rejected), gt_bbox units {e(result['units'])}, "
             f"{result['samples_per_s']:.2f} samples/s</p>",
             "<table><tr><th>policy</th><th>Type %</th><th>GR %</th><th>SR %</th></tr>",
             f"<tr><td>{e(_policy_name(result['policy']))}</td>"
             + "".join(f"<td>{e(cells[k])}</td>" for k, _ in METRICS) + "</tr>"]
    for model, row in result["published"].items():
        parts.append(f"<tr><td>{e(model)} (paper)</td>" + "".join(f"<td>{v:.2f}</td>" for v in row) + "</tr>")
    parts.append("</table><table><tr><th>true action</th><th>steps</th><th>type</th><th>GR</th><th>text</th></tr>")
    for r in result["breakdown"]:
        parts.append(f"<tr><td>{e(r['action'])}</td><td>{r['steps']}</td><td>{r['type_hits']}</td>"
                     f"<td>{r['gr_hits'] if r['gr_steps'] else '-'}</td>"
                     f"<td>{r['text_hits'] if r['text_steps'] else '-'}</td></tr>")
    predicted = sorted({p for row in result["confusion"].values() for p in row})
    parts.append("</table><table><tr><th>true \\ predicted</th>" + "".join(f"<th>{e(p)}</th>" for p in predicted)
                 + "</tr>")
    for gt, row in result["confusion"].items():
        parts.append(f"<tr><td>{e(gt)}</td>" + "".join(f"<td>{row.get(p, '')}</td>" for p in predicted) + "</tr>")
    parts.append("</table>")
    parts.extend(_sample_html(s, folder) for s in result["samples"])
    return parts


def build_action_report(results: Sequence[dict[str, Any]], folders: Sequence[str], out: str | Path,
                        title: str = "action benchmarks") -> Path:
    """``report.html`` for ``BenchResult.to_dict()`` results whose images lie in ``folders`` (relative to it)."""
    out = Path(out)
    parts = ["<!doctype html><meta charset='utf-8'>", f"<title>{html.escape(title)}</title>",
             f"<style>{CSS}</style>", f"<h1>{html.escape(title)}</h1>",
             "<p>Type, GR and SR as GUI-R1's released scorer sums them, with 95% Wilson intervals; green: the true "
             "point, box and the GR tolerance (0.14 of the width and height), red: the predicted point.</p>"]
    for result, folder in zip(results, folders):
        parts.extend(_bench_html(result, folder))
    out.write_text("\n".join(parts), encoding="utf-8")
    return out

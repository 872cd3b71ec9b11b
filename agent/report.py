"""An HTML report of one run folder: ``build_report(run_dir)`` writes ``run_dir/report.html``.

The page is self-contained (inline CSS, JS and SVG) and links each frame by its path relative to the
run folder (``ep0000/frames/0000.png``), so opening the file from disk works with no server. It
shows a success table per suite and task, the median latency per phase as SVG bars, and for every
episode its frames in order, each with the step's action drawn over it: the click point as a
circle, candidates as smaller numbered circles, a drag or scroll as an arrow, typed text and keys
as a label, and the box of the element the action went to (``target_box``, where the device could tell) as a
dashed green rectangle. Demonstrations (``actor = human``: ``agent record``) are shown like agent runs, marked as
the person's, with the lag of each late pre-action frame. The overlay's viewBox is the frame's pixel size (``0 0 W H``), so a normalized point
(x, y) is drawn at (x * W, y * H) and circles stay round; ``data-x`` / ``data-y`` keep the
normalized values.
"""

from __future__ import annotations

import html
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from agent.eval import wilson_interval
from agent.summary import PHASE_ORDER, describe_action
from envs.errors import RecordFormatError
from envs.records import Actor, Outcome, StepRecord
from envs.trajectory import Episode, EpisodeState, iter_episodes

LAZY_OVER = 200
"""Runs with more frames than this load images lazily."""

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:16px;color:#222;background:#fafafa}
h1{font-size:20px}h2{font-size:17px;margin-top:28px}h3{font-size:15px;margin:0}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th:first-child,td:first-child{text-align:left}th{background:#eee}tr.overall td{font-weight:bold}
.episode{background:#fff;border:1px solid #ddd;border-radius:6px;margin:12px 0;padding:8px 12px}
.episode>summary{cursor:pointer}.o-success{color:#1a7f37}.o-failure,.o-aborted{color:#c62828}
.o-truncated,.o-infeasible,.o-interrupted{color:#b26a00}.o-claimed{color:#2e7d32}
.o-crashed{color:#c62828;font-weight:bold}.o-running{color:#1565c0}
.actor-human{background:#6a1b9a;color:#fff;border-radius:4px;padding:0 6px;font-size:12px}
.steps{display:flex;flex-direction:column;gap:14px;margin-top:10px}
.step{display:grid;grid-template-columns:minmax(0,3fr) minmax(0,2fr);gap:12px;border-top:1px solid #eee;padding-top:8px}
.frame{position:relative;line-height:0}.frame img{width:100%;height:auto;display:block;border:1px solid #999}
.frame svg{overflow:visible;position:absolute;left:0;top:0;width:100%;height:100%;pointer-events:none}
pre{box-sizing:border-box;white-space:pre-wrap;word-break:break-word;background:#f4f4f4;padding:6px;margin:4px 0;max-height:240px;overflow:auto}
.meta{font-size:13px}.meta dt{font-weight:bold;margin-top:4px}.meta dd{margin:0 0 0 8px}
.bad{color:#c62828}.good{color:#1a7f37}.dim{color:#777}
#controls{margin:8px 0}
"""

JS = """
document.getElementById('only-failed').addEventListener('change', function (e) {
  for (const ep of document.querySelectorAll('.episode')) {
    ep.style.display = (e.target.checked && ep.dataset.outcome === 'success') ? 'none' : '';
  }
});
document.getElementById('expand').addEventListener('click', function () {
  const eps = document.querySelectorAll('details.episode');
  const open = !Array.from(eps).every(d => d.open);
  eps.forEach(d => { d.open = open; });
});
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _f(v: float) -> str:
    return f"{v:.4f}".rstrip("0").rstrip(".") if v else "0"


def _env_name(episode: Episode) -> str:
    env = episode.record.env or {}
    name = env.get("name") if isinstance(env, dict) else None
    return str(name) if name else "(no env)"


def _outcome(episode: Episode) -> str:
    """The outcome, or for an episode without one whether it is running or crashed."""
    return episode.record.outcome.value if episode.record.outcome else episode.state.value


def _suite(name: str) -> str:
    return name.split("/", 1)[0] if "/" in name else name


# -- overlay ----------------------------------------------------------------------------------------
def _point(data: dict[str, Any], key: str = "point") -> tuple[float, float] | None:
    p = data.get(key)
    if isinstance(p, (list, tuple)) and len(p) == 2:
        try:
            return float(p[0]), float(p[1])
        except (TypeError, ValueError):
            return None
    return None


def overlay_svg(step: StepRecord) -> str:
    """The step's action drawn in the frame's pixel space (viewBox 0 0 W H)."""
    w, h = step.frame_size
    r = max(w, h) * 0.012
    sw = max(w, h) * 0.003
    fs = max(w, h) * 0.018
    parts: list[str] = [
        f'<svg class="overlay" viewBox="0 0 {w} {h}" preserveAspectRatio="none">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="8" refY="5" markerWidth="5" markerHeight="5" '
        'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#e53935"/></marker></defs>',
    ]
    if step.target_box is not None and len(step.target_box) == 4:
        x1, y1, x2, y2 = (float(v) for v in step.target_box)
        parts.append(f'<rect class="target-box" data-box="{x1},{y1},{x2},{y2}" x="{x1 * w:.2f}" y="{y1 * h:.2f}" '
                     f'width="{max(x2 - x1, 0) * w:.2f}" height="{max(y2 - y1, 0) * h:.2f}" fill="none" '
                     f'stroke="#2e7d32" stroke-width="{sw:.2f}" stroke-dasharray="{sw * 3:.1f} {sw * 1.5:.1f}"/>')
    for i, cand in enumerate(step.candidates):
        p = _point(cand) if isinstance(cand, dict) else None
        if p is None:
            continue
        cx, cy = p[0] * w, p[1] * h
        parts.append(f'<circle class="candidate" data-i="{i}" data-x="{p[0]}" data-y="{p[1]}" cx="{cx:.2f}" cy="{cy:.2f}" '
                     f'r="{r * 0.6:.2f}" fill="none" stroke="#1e88e5" stroke-width="{sw * 0.7:.2f}"/>')
        parts.append(f'<text class="candidate-label" x="{cx + r * 0.7:.2f}" y="{cy - r * 0.7:.2f}" font-size="{fs * 0.7:.1f}" '
                     f'fill="#1e88e5" stroke="#fff" stroke-width="{sw * 0.4:.2f}" paint-order="stroke">{i}</text>')
    action = step.action or {}
    kind = action.get("kind")
    p = _point(action)
    label = ""
    if kind == "drag" and p and _point(action, "end"):
        e = _point(action, "end")
        assert e is not None
        parts.append(f'<line class="drag" x1="{p[0] * w:.2f}" y1="{p[1] * h:.2f}" x2="{e[0] * w:.2f}" y2="{e[1] * h:.2f}" '
                     f'stroke="#e53935" stroke-width="{sw:.2f}" marker-end="url(#arrow)"/>')
    elif kind == "scroll":
        sp = p or (0.5, 0.5)
        amount = min(float(action.get("amount") or 0.5), 1.0) * 0.3
        dx, dy = {"up": (0, -amount), "down": (0, amount), "left": (-amount, 0), "right": (amount, 0)}.get(
            str(action.get("direction")), (0, amount))
        ex, ey = min(max(sp[0] + dx, 0.0), 1.0), min(max(sp[1] + dy, 0.0), 1.0)
        parts.append(f'<line class="scroll" x1="{sp[0] * w:.2f}" y1="{sp[1] * h:.2f}" x2="{ex * w:.2f}" y2="{ey * h:.2f}" '
                     f'stroke="#e53935" stroke-width="{sw:.2f}" stroke-dasharray="{sw * 3:.1f} {sw * 2:.1f}" marker-end="url(#arrow)"/>')
        label = f"scroll {action.get('direction')}"
        p = sp
    if p is not None and kind != "scroll":
        parts.append(f'<circle class="action" data-x="{p[0]}" data-y="{p[1]}" cx="{p[0] * w:.2f}" cy="{p[1] * h:.2f}" '
                     f'r="{r:.2f}" fill="rgba(229,57,53,0.25)" stroke="#e53935" stroke-width="{sw:.2f}"/>')
    if kind == "type":
        label = f"type “{action.get('text', '')}”"
    elif kind in ("key", "hotkey"):
        label = "+".join(action.get("keys") or [])
    elif kind in ("finish", "infeasible", "wait", "back", "home", "open_app", "open_url") or (step.action is None):
        label = kind or "unparsed"
        if action.get("text"):
            label += f": {action['text']}"
    if label:
        lx, ly = ((p[0] * w + r * 1.4), (p[1] * h + fs * 0.35)) if p else (fs * 0.5, fs * 1.4)
        anchor = "start"
        if p and p[0] > 0.6:
            lx, anchor = p[0] * w - r * 1.4, "end"
        parts.append(f'<text class="label" x="{lx:.2f}" y="{ly:.2f}" text-anchor="{anchor}" font-size="{fs:.1f}" '
                     f'font-family="sans-serif" fill="#e53935" stroke="#fff" stroke-width="{sw:.2f}" '
                     f'paint-order="stroke">{_e(label[:80])}</text>')
    parts.append("</svg>")
    return "".join(parts)


# -- sections ---------------------------------------------------------------------------------------
def _success_tables(episodes: list[Episode]) -> str:
    by_suite: dict[str, dict[str, list[Episode]]] = defaultdict(lambda: defaultdict(list))
    for ep in episodes:
        name = _env_name(ep)
        by_suite[_suite(name)][name].append(ep)
    out = ['<section id="success"><h2>Success</h2>']
    for suite, tasks in sorted(by_suite.items()):
        out.append(f'<h3>{_e(suite)}</h3><table class="success-table"><tr><th>task</th><th>episodes</th>'
                   '<th>success</th><th>rate</th><th>95% CI</th><th>mean steps</th><th>outcomes</th></tr>')
        rows = [(name, eps) for name, eps in sorted(tasks.items())]
        if len(rows) > 1:
            rows.append(("overall", [e for _, eps in rows for e in eps]))
        for name, eps in rows:
            n = len(eps)
            wins = sum(e.record.outcome is Outcome.SUCCESS for e in eps)
            lo, hi = wilson_interval(wins, n)
            counts: dict[str, int] = defaultdict(int)
            for e in eps:
                counts[_outcome(e)] += 1
            mean_steps = statistics.fmean(len(e.steps) for e in eps) if n else 0.0
            cls = ' class="overall"' if name == "overall" else ""
            out.append(f'<tr{cls}><td>{_e(name)}</td><td>{n}</td><td>{wins}</td><td>{wins / n:.0%}</td>'
                       f'<td>{lo:.0%}–{hi:.0%}</td><td>{mean_steps:.1f}</td>'
                       f'<td>{_e(", ".join(f"{k} {v}" for k, v in sorted(counts.items())))}</td></tr>')
        out.append("</table>")
    out.append("</section>")
    return "".join(out)


def _latency_chart(episodes: list[Episode]) -> str:
    per_phase: dict[str, list[float]] = defaultdict(list)
    for ep in episodes:
        for s in ep.steps:
            for phase, v in s.latency.items():
                per_phase[phase].append(float(v))
        for phase in ("reset", "start"):
            if phase in ep.record.timings:
                per_phase[phase].append(float(ep.record.timings[phase]))
    phases = sorted(per_phase, key=lambda p: (PHASE_ORDER.index(p) if p in PHASE_ORDER else len(PHASE_ORDER), p))
    medians = {p: statistics.median(per_phase[p]) for p in phases}
    top = max(medians.values(), default=0.0) or 1.0
    bar_h, gap, label_w, width = 20, 6, 90, 640
    height = max(1, len(phases)) * (bar_h + gap) + gap
    out = ['<section id="latency"><h2>Latency (median per step; reset/start per episode)</h2>',
           f'<svg id="latency-chart" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           'font-family="sans-serif" font-size="12">']
    for i, p in enumerate(phases):
        y = gap + i * (bar_h + gap)
        bw = (width - label_w - 90) * medians[p] / top
        out.append(f'<g class="bar" data-phase="{_e(p)}" data-seconds="{medians[p]:.6f}">'
                   f'<text x="0" y="{y + 14}">{_e(p)}</text>'
                   f'<rect x="{label_w}" y="{y}" width="{max(bw, 1):.1f}" height="{bar_h}" fill="#5c6bc0"/>'
                   f'<text x="{label_w + max(bw, 1) + 6:.1f}" y="{y + 14}">{medians[p] * 1000:.1f} ms</text></g>')
    if not phases:
        out.append('<text x="0" y="14">no timings recorded</text>')
    out.append("</svg></section>")
    return "".join(out)


def _verdicts_html(step: StepRecord) -> str:
    v = step.verifier
    if not v:
        return ""
    verdicts = v.get("verdicts")
    if isinstance(verdicts, list) and verdicts:
        items = []
        for i, d in enumerate(verdicts):
            if not isinstance(d, dict):
                continue
            ok = d.get("correct")
            who = "action" if i == 0 else f"candidate {i - 1}"
            items.append(f'<li class="{"good" if ok else "bad"}">{who}: {"✓" if ok else "✗"} '
                         f'reward {_e(d.get("reward"))} — {_e(d.get("reason", ""))}</li>')
        return f'<dt>verifier</dt><dd><ul class="verdicts">{"".join(items)}</ul></dd>'
    return f'<dt>verifier</dt><dd><pre>{_e(json.dumps(v, ensure_ascii=False, indent=1))}</pre></dd>'


def frame_inside(ep: Episode, step: StepRecord) -> bool:
    """Whether the step's ``frame_path`` stays under its episode's folder (a record may name any path)."""
    try:
        ep.frame_file(step)
    except RecordFormatError:
        return False
    return True


def _step_html(ep: Episode, step: StepRecord, rel: str, lazy: bool) -> str:
    src = f"{rel}/{step.frame_path}" if step.frame_path and frame_inside(ep, step) else ""
    img = (f'<img src="{_e(src)}" alt="step {step.index}"{" loading=lazy" if lazy else ""} '
           f'width="{step.frame_size[0]}" height="{step.frame_size[1]}">') if src else '<div class="dim">no frame</div>'
    meta = [f'<dt>action</dt><dd>{_e(describe_action(step.action))}'
            f'{"" if step.executed else " <span class=dim>(not executed)</span>"}</dd>']
    if step.parse_error:
        meta.append(f'<dt>parse error</dt><dd class="bad">{_e(step.parse_error)}</dd>')
    if step.error:
        meta.append(f'<dt>error</dt><dd class="bad">{_e(step.error.get("type"))}: {_e(step.error.get("message"))}</dd>')
    if step.guard and step.guard.get("verdict") not in (None, "allow"):
        meta.append(f'<dt>guard</dt><dd>{_e(step.guard)}</dd>')
    meta.append(f'<dt>raw output</dt><dd><pre class="raw-output">{_e(step.raw_output)}</pre></dd>')
    if step.reward is not None:
        meta.append(f'<dt>step reward</dt><dd class="reward">{_e(step.reward)}</dd>')
    meta.append(_verdicts_html(step))
    if step.candidates:
        meta.append(f'<dt>candidates</dt><dd><ol start="0">'
                    f'{"".join(f"<li>{_e(describe_action(c))}</li>" for c in step.candidates)}</ol></dd>')
    if step.target:
        meta.append(f'<dt>target</dt><dd>{_e(step.target.get("tag", ""))} “{_e(str(step.target.get("text", ""))[:60])}”</dd>')
    if step.latency:
        lat = ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in step.latency.items())
        meta.append(f'<dt>timings</dt><dd class="timings">{_e(lat)} (total {sum(step.latency.values()) * 1000:.0f} ms)</dd>')
    info = step.info.get("env_reward")
    if info is not None:
        meta.append(f'<dt>env reward</dt><dd>{_e(info)}</dd>')
    meta.append(_demo_html(step))
    return (f'<div class="step" id="{_e(ep.record.episode_id)}-{step.index}" data-index="{step.index}">'
            f'<div class="frame" data-w="{step.frame_size[0]}" data-h="{step.frame_size[1]}">{img}{overlay_svg(step)}</div>'
            f'<dl class="meta"><dt>step {step.index}</dt><dd></dd>{"".join(meta)}</dl></div>')


def _demo_html(step: StepRecord) -> str:
    """A demonstration step's recording facts: how late its pre-action frame was, a pause, the element's selector."""
    policy = step.info.get("policy") if isinstance(step.info, dict) else None
    if not isinstance(policy, dict) or policy.get("actor") != "human":
        return ""
    env_info = step.info.get("env_info") if isinstance(step.info.get("env_info"), dict) else {}
    demo = env_info.get("demo") if isinstance(env_info.get("demo"), dict) else {}
    facts = []
    if policy.get("late"):
        facts.append(f'<span class="bad">late frame: {_e(policy.get("frame_lag_s"))} s older than the input</span>')
    if "paused_s" in demo:
        facts.append(f"paused {_e(demo['paused_s'])} s (not recorded)")
    if demo.get("selector"):
        facts.append(f"element {_e(demo['selector'])}" + (f" in {_e(demo['frame'])}" if demo.get("frame") else ""))
    return f'<dt>recorded</dt><dd>{"; ".join(facts) or "on time"}</dd>'


def _episode_html(ep: Episode, run_dir: Path, lazy: bool, open_: bool) -> str:
    r = ep.record
    outcome = _outcome(ep)
    rel = ep.path.relative_to(run_dir).as_posix() if ep.path.is_relative_to(run_dir) else ep.path.as_posix()
    env = r.env or {}
    seed = env.get("seed") if isinstance(env, dict) else None
    head = (f'<summary><h3 style="display:inline">{_e(r.episode_id)} · {_e(_env_name(ep))}'
            f'{f" · seed {_e(seed)}" if seed is not None else ""} · <span class="o-{_e(outcome)}">{_e(outcome)}</span>'
            f' · {len(ep.steps)} steps'
            f'{" · <span class=actor-human>demonstration (human)</span>" if r.actor is Actor.HUMAN else ""}'
            f'</h3></summary>')
    lines = [f'<div class="task">task: {_e(r.task)}</div>']
    if r.reason:
        lines.append(f'<div class="reason">reason: {_e(r.reason.get("type"))}: {_e(r.reason.get("message"))}</div>')
    if r.return_ is not None:
        lines.append(f'<div>return: {_e(r.return_)}</div>')
    if r.verifier:
        lines.append(f'<div class="dim">checker: {_e(json.dumps(r.verifier, ensure_ascii=False)[:300])}</div>')
    if r.policy:
        lines.append(f'<div class="dim">policy: {_e(json.dumps(r.policy, ensure_ascii=False)[:200])}</div>')
    if r.timings:
        lines.append(f'<div class="dim">timings: {_e(", ".join(f"{k} {v:.3f} s" for k, v in r.timings.items()))}</div>')
    if ep.state is EpisodeState.CRASHED:
        lines.append('<div class="bad">crashed: the process writing this episode died before it ended; its finished '
                     'steps are below</div>')
    elif ep.state is EpisodeState.RUNNING:
        lines.append('<div class="dim">running: a live process is still writing this episode</div>')
    if ep.truncated_tail and ep.state is not EpisodeState.RUNNING:
        lines.append('<div class="bad">the last step was cut off when the process died</div>')
    steps = "".join(_step_html(ep, s, rel, lazy) for s in ep.steps)
    return (f'<details class="episode" data-outcome="{_e(outcome)}" data-episode="{_e(r.episode_id)}" '
            f'data-actor="{_e(r.actor.value)}"{" open" if open_ else ""}>'
            f'{head}{"".join(lines)}<div class="steps">{steps}</div></details>')


def build_report(run_dir: str | Path) -> Path:
    """Write ``run_dir/report.html`` for any run folder (eval runs and ``agent run`` runs) and return its path."""
    run_dir = Path(run_dir).resolve()
    episodes = list(iter_episodes(run_dir))
    try:
        run_info = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        run_info = {}
    frames = sum(len(e.steps) for e in episodes)
    lazy = frames > LAZY_OVER
    open_ = len(episodes) <= 20
    title = f"handeye run {run_info.get('run_id', run_dir.name)}"
    body = [
        f"<h1>{_e(title)}</h1>",
        f'<div class="dim">{len(episodes)} episodes, {frames} steps · {_e(run_dir)}</div>',
        _success_tables(episodes) if episodes else "<p>no episodes in this run</p>",
        _latency_chart(episodes),
        '<h2>Episodes</h2><div id="controls"><label><input type="checkbox" id="only-failed"> hide successes</label> '
        '<button id="expand">expand / collapse all</button></div>',
        *(_episode_html(ep, run_dir, lazy, open_) for ep in episodes),
    ]
    page = (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f'<style>{CSS}</style></head><body>{"".join(body)}<script>{JS}</script></body></html>')
    out = run_dir / "report.html"
    out.write_text(page, encoding="utf-8")
    return out


def build_grounding_report(result: dict[str, Any], out: str | Path, title: str = "grounding evaluation") -> Path:
    """A self-contained HTML page for a grounding evaluation (``GroundingReport.to_dict()``): totals,
    every breakdown, the records rejected at load (file, index, reason) and one row per sample."""
    import html as _html

    esc = _html.escape
    out = Path(out)
    parts = [
        "<!doctype html><meta charset='utf-8'>",
        f"<title>{esc(title)}</title>",
        "<style>body{font-family:sans-serif;margin:24px}table{border-collapse:collapse;margin:8px 0 20px}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td:first-child,th:first-child{text-align:left}"
        ".bad{color:#b00020}</style>",
        f"<h1>{esc(title)}</h1>",
        f"<p>top-1 accuracy <b>{result['accuracy']:.1%}</b> ({result['correct']}/{result['total']}), any-candidate "
        f"<b>{result['any_accuracy']:.1%}</b>, unparsed {result['wrong_format']}; hit test {esc(result['hit_test'])}</p>",
    ]
    for by, rows in result["breakdowns"].items():
        parts.append(f"<h2>by {esc(by)}</h2><table><tr><th>{esc(by)}</th><th>n</th><th>top-1</th><th>any</th></tr>")
        for r in rows:
            parts.append(f"<tr><td>{esc(str(r['key']) or '-')}</td><td>{r['total']}</td>"
                         f"<td>{r['accuracy']:.1%}</td><td>{r['any_accuracy']:.1%}</td></tr>")
        parts.append("</table>")
    rejected = result.get("rejected", [])
    parts.append(f"<h2 id='rejected'>records rejected at load ({len(rejected)})</h2>")
    if rejected:
        parts.append("<table class='bad'><tr><th>file</th><th>index</th><th>kind</th><th>reason</th></tr>")
        for r in rejected:
            parts.append(f"<tr><td>{esc(r['file'])}</td><td>{r['index']}</td><td>{esc(r['kind'])}</td>"
                         f"<td>{esc(r['reason'])}</td></tr>")
        parts.append("</table>")
    parts.append("<h2>samples</h2><table><tr><th>id</th><th>outcome</th><th>any hit</th><th>points</th>"
                 "<th>parse error</th></tr>")
    for s in result.get("samples", []):
        points = ", ".join(f"({x:.3f}, {y:.3f})" for x, y in s["points"])
        parts.append(f"<tr><td>{esc(str(s['id']))}</td><td>{esc(s['outcome'])}</td><td>{s['any_hit']}</td>"
                     f"<td>{points}</td><td>{esc(s['parse_error'] or '')}</td></tr>")
    parts.append("</table>")
    out.write_text("\n".join(parts), encoding="utf-8")
    return out

"""Where training metrics go: a JSONL file (the record), TensorBoard scalars, a learning-curve PNG, a progress bar.

``MetricsLogger(run_dir)`` writes, per ``log(step, metrics)``:

* one JSON line ``{"step": s, "wall_time": t, "<key>": value, ...}`` appended to ``run_dir/metrics.jsonl`` and
  flushed, so a crash loses nothing already logged. A non-finite value is written as ``null`` (with a warning, once
  per key), never a crash;
* TensorBoard scalars under ``run_dir/tb`` (``torch.utils.tensorboard``; when tensorboard is not installed, one
  warning and the JSONL carries on alone).

Resuming: ``MetricsLogger(run_dir, resume_step=s)`` (or ``truncate_after(s)``) drops the lines logged after step
``s`` and tells TensorBoard to purge its events from step ``s + 1`` on, so a resumed run's records match those of
a run that was never interrupted. A line cut off by a crash is dropped when the file is reopened.

``plot()`` draws the learning curves from the JSONL (matplotlib, Agg, no display): one panel per key group
(reward, accuracy, loss, KL / clip, answers per sample; see ``PANELS``), x = step. ``read_metrics(path)`` reads the
JSONL back. ``Progress`` is the terminal progress bar with the key numbers.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

log = logging.getLogger(__name__)

__all__ = ["PANELS", "MetricsLogger", "Progress", "plot_metrics", "read_metrics"]

RESERVED = ("step", "wall_time")
"""Fields every JSONL line carries besides the metrics; metric keys may not use them."""

PANELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("reward", ("reward",)),
    ("accuracy", ("accuracy", "top1", "success")),
    ("loss", ("loss",)),
    ("KL / clip", ("kl", "clipfrac")),
    ("answers per sample", ("answers", "num_pred")),
)
"""Learning-curve panels: (title, substrings). A key goes to the first panel one of whose substrings occurs in
the key's last path part (``train/pg_loss`` -> "pg_loss" -> loss); keys that match no panel are not drawn."""


# --------------------------------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------------------------------


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a metrics JSONL file, in order. A last line cut off by a crash is skipped quietly; any other
    malformed line is skipped with a warning naming ``path:line``. ``null`` values come back as None."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    lines = path.read_text(encoding="utf-8").split("\n")
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict) or "step" not in row:
                raise ValueError("not an object with a step")
        except ValueError as exc:
            if lineno == len(lines):  # no newline after it: the write in flight when the process died
                log.info("%s:%d: skipping a cut-off last line", path, lineno)
            else:
                log.warning("%s:%d: skipping a malformed metrics line (%s)", path, lineno, exc)
            continue
        rows.append(row)
    return rows


# --------------------------------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------------------------------


class MetricsLogger:
    """Metrics of one run to ``run_dir/metrics.jsonl``, TensorBoard (``run_dir/tb``) and a PNG (see the module
    docstring). Use as a context manager, or call ``close()``.

    Args:
        run_dir: the run folder (created if missing).
        tensorboard: also write TensorBoard scalars.
        png: draw ``run_dir/curves.png`` on ``close()`` (and every ``plot_every`` steps when that is > 0).
        plot_every: redraw the PNG every this many logged steps (0: only on close).
        resume_step: the step a resumed run restarts after: lines logged after it are dropped.
    """

    def __init__(self, run_dir: str | Path, *, tensorboard: bool = True, png: bool = True, plot_every: int = 0,
                 resume_step: int | None = None) -> None:
        if plot_every < 0:
            raise ValueError(f"plot_every must be >= 0 (0: only on close), got {plot_every}")
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / "metrics.jsonl"
        self.tb_dir = self.run_dir / "tb"
        self.png_path = self.run_dir / "curves.png"
        self.png = png
        self.plot_every = plot_every
        self._tensorboard = tensorboard
        self._writer: Any = None
        self._purge_step: int | None = None
        self._warned_keys: set[str] = set()
        self._logged = 0
        self._closed = False
        self._file: IO[str] | None = None
        self._drop_cut_off_line()
        if resume_step is not None:
            self.truncate_after(resume_step)
        self._file = self.path.open("a", encoding="utf-8")

    # -- the record ---------------------------------------------------------------------------

    def log(self, step: int, metrics: Mapping[str, Any]) -> dict[str, Any]:
        """Write one step's metrics; returns the row as written (non-finite values as None)."""
        if self._closed:
            raise RuntimeError("this MetricsLogger is closed; open a new one to log more")
        step = int(step)
        row: dict[str, Any] = {"step": step, "wall_time": round(time.time(), 3)}
        scalars: dict[str, float] = {}
        for key, value in metrics.items():
            key = str(key)
            if key in RESERVED:
                self._warn_once(key, f"metric key {key!r} is reserved for the line's own field; not logged")
                continue
            try:
                number = float(value)
            except (TypeError, ValueError):
                self._warn_once(key, f"metric {key!r} is not a number ({type(value).__name__}); not logged")
                continue
            if math.isfinite(number):
                row[key] = number
                scalars[key] = number
            else:
                row[key] = None
                self._warn_once(key, f"metric {key!r} is {number} at step {step}; written as null")
        self._file.write(json.dumps(row, allow_nan=False) + "\n")
        self._file.flush()
        self._write_tensorboard(step, scalars)
        self._logged += 1
        if self.png and self.plot_every and self._logged % self.plot_every == 0:
            self.plot()
        return row

    def truncate_after(self, step: int) -> int:
        """Drop every line logged after ``step`` (for a run resumed from a checkpoint taken at ``step``), and have
        TensorBoard purge its events from ``step + 1`` on. Returns the number of lines dropped."""
        step = int(step)
        reopen = self._file is not None and not self._file.closed
        if reopen:
            self._file.close()
        rows = read_metrics(self.path)
        keep = [r for r in rows if isinstance(r.get("step"), (int, float)) and r["step"] <= step]
        if self.path.exists():
            tmp = self.path.with_name(self.path.name + ".tmp")
            with tmp.open("w", encoding="utf-8") as f:
                f.writelines(json.dumps(r, allow_nan=False) + "\n" for r in keep)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        if self._writer is not None:  # reopened at the next log, with the purge
            self._writer.close()
            self._writer = None
        self._purge_step = step + 1
        if reopen:
            self._file = self.path.open("a", encoding="utf-8")
        dropped = len(rows) - len(keep)
        if dropped:
            log.info("%s: dropped %d metrics lines after step %d", self.path, dropped, step)
        return dropped

    def _drop_cut_off_line(self) -> None:
        """A file not ending in a newline ends in a line cut off by a crash: remove it so appends start clean."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        data = self.path.read_bytes()
        if data.endswith(b"\n"):
            return
        cut = data.rfind(b"\n") + 1
        log.warning("%s: removing a cut-off last line (%d bytes) left by an interrupted run", self.path,
                    len(data) - cut)
        with self.path.open("r+b") as f:
            f.truncate(cut)

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned_keys:
            self._warned_keys.add(key)
            log.warning("%s (further warnings for this key are not shown)", message)

    # -- TensorBoard --------------------------------------------------------------------------

    def _write_tensorboard(self, step: int, scalars: Mapping[str, float]) -> None:
        if not self._tensorboard:
            return
        if self._writer is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as exc:
                log.warning("TensorBoard is not available (%s); metrics go to %s only. Install handeye[train] "
                            "for TensorBoard.", exc, self.path)
                self._tensorboard = False
                return
            self._writer = SummaryWriter(str(self.tb_dir), purge_step=self._purge_step)
            self._purge_step = None
        for key, value in scalars.items():
            self._writer.add_scalar(key, value, global_step=step)
        self._writer.flush()

    # -- curves and lifecycle -----------------------------------------------------------------

    def plot(self, path: str | Path | None = None) -> Path | None:
        """Draw the learning curves from the JSONL into ``path`` (default ``run_dir/curves.png``); returns the path,
        or None when no logged key belongs to a panel."""
        self._file.flush()
        return plot_metrics(read_metrics(self.path), path if path is not None else self.png_path)

    def flush(self) -> None:
        self._file.flush()
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        """Flush and close the files; draw the PNG when ``png`` is set. Safe to call twice."""
        if self._closed:
            return
        self._file.flush()
        if self.png:
            try:
                self.plot()
            except Exception as exc:  # noqa: BLE001 -- a plotting failure must not lose a finished run
                log.warning("could not draw %s: %s: %s", self.png_path, type(exc).__name__, exc)
        self._file.close()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._closed = True

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def plot_metrics(rows: Sequence[Mapping[str, Any]], path: str | Path,
                 panels: Sequence[tuple[str, Sequence[str]]] = PANELS) -> Path | None:
    """Learning curves of ``rows`` (as ``read_metrics`` returns them) into a PNG at ``path``: one panel per entry of
    ``panels`` that has data, one line per key, x = step; None values leave gaps. Returns the path, or None (and
    writes nothing) when no key belongs to a panel."""
    # The Agg canvas is attached to the figure directly: no pyplot, no global backend switch, no display needed.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    keys: list[str] = []
    for row in rows:
        keys.extend(k for k in row if k not in RESERVED and k not in keys)
    members: list[tuple[str, list[str]]] = []
    taken: set[str] = set()
    for title, needles in panels:
        mine = [k for k in keys if k not in taken and any(n in k.rsplit("/", 1)[-1].lower() for n in needles)]
        taken.update(mine)
        if mine:
            members.append((title, mine))
    if not members:
        log.info("no metric belongs to a learning-curve panel; %s not drawn", path)
        return None

    fig = Figure(figsize=(9, 2.6 * len(members)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(members), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (title, mine) in zip(axes, members):
        for key in mine:
            xs = [r["step"] for r in rows if key in r]
            ys = [math.nan if r[key] is None else r[key] for r in rows if key in r]
            ax.plot(xs, ys, marker="." if len(xs) < 30 else None, label=key)
        ax.set_title(title, loc="left", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    axes[-1].set_xlabel("step")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp" + path.suffix)
    fig.savefig(tmp, dpi=100)
    os.replace(tmp, path)
    return path


# --------------------------------------------------------------------------------------------------------------------
# Progress display
# --------------------------------------------------------------------------------------------------------------------


class Progress:
    """A rich progress bar over training steps showing reward mean, held-out accuracy, KL and samples/s.

    Disabled (every method a no-op) when the console is not a terminal, or when ``enabled=False``. Use as a context
    manager; call ``update(step, metrics)`` after each step with that step's metrics. The numbers are read from the
    first key present in each of ``REWARD_KEYS``, ``ACCURACY_KEYS``, ``KL_KEYS``; samples/s from
    ``time/samples_per_s`` or else ``train/samples`` over the time between updates. The last held-out accuracy stays
    shown until a newer one arrives.

    Args:
        total_steps: the step count at 100%.
        enabled: force on or off; None: on when the console is a terminal.
        console: a ``rich.console.Console`` (default: a new one on stderr).
        start_step: where a resumed run starts.
    """

    REWARD_KEYS = ("train/reward_mean", "collapse/reward_mean", "rollout/reward_mean")
    ACCURACY_KEYS = ("eval/accuracy", "heldout/accuracy", "eval/top1")
    KL_KEYS = ("train/kl", "train/approx_kl")

    def __init__(self, total_steps: int, *, enabled: bool | None = None, console: Any = None,
                 start_step: int = 0) -> None:
        self.total_steps = int(total_steps)
        self._numbers: dict[str, str] = {}
        self._last_time: float | None = None
        self._bar: Any = None
        self._task: Any = None
        if enabled is False:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
        from rich.progress import Progress as RichProgress

        console = console if console is not None else Console(stderr=True)
        if enabled is None and not console.is_terminal:
            return
        self._bar = RichProgress(
            TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
            TextColumn("{task.fields[numbers]}"), console=console, transient=False,
        )
        self._task = self._bar.add_task("train", total=self.total_steps, completed=start_step, numbers="")

    @property
    def enabled(self) -> bool:
        return self._bar is not None

    def __enter__(self) -> Progress:
        if self._bar is not None:
            self._bar.start()
        self._last_time = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def update(self, step: int, metrics: Mapping[str, Any]) -> str:
        """Move the bar to ``step`` and show the numbers; returns the numbers' text (also when disabled)."""
        now = time.perf_counter()
        for name, keys, fmt in (("reward", self.REWARD_KEYS, "{:.3f}"), ("acc", self.ACCURACY_KEYS, "{:.1%}"),
                                ("kl", self.KL_KEYS, "{:.2g}")):
            value = _first_finite(metrics, keys)
            if value is not None:
                self._numbers[name] = fmt.format(value)
        rate = _first_finite(metrics, ("time/samples_per_s",))
        if rate is None:
            samples = _first_finite(metrics, ("train/samples",))
            if samples is not None and self._last_time is not None and now > self._last_time:
                rate = samples / (now - self._last_time)
        if rate is not None:
            self._numbers["samples/s"] = f"{rate:.1f}"
        self._last_time = now
        text = "  ".join(f"{k} {v}" for k, v in self._numbers.items())
        if self._bar is not None:
            self._bar.update(self._task, completed=int(step), numbers=text)
        return text


def _first_finite(metrics: Mapping[str, Any], keys: Sequence[str]) -> float | None:
    for key in keys:
        if key in metrics:
            try:
                value = float(metrics[key])
            except (TypeError, ValueError):
                continue
            if math.isfinite(value):
                return value
    return None

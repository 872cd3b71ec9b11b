"""Metrics JSONL (round trip, cut-off lines, non-finite values, truncate on resume), TensorBoard scalars read back
with tensorboard's own reader, the learning-curve PNG, the progress bar, and the GPU-step benchmark's CPU smoke
path."""

from __future__ import annotations

import io
import json
import logging
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from train.metrics import MetricsLogger, Progress, plot_metrics, read_metrics
from tests.support import procs

REPO = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def metrics_at(step: int) -> dict[str, float]:
    return {"train/loss": 1.0 / (step + 1), "train/reward_mean": 0.1 * step, "train/kl": 0.01 * step,
            "collapse/answers_per_sample": 1.0 + step % 3, "eval/accuracy": 0.5 + 0.01 * step}


def without_time(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "wall_time"} for r in rows]


def tb_scalars(tb_dir: Path, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tb_dir))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


# -- JSONL -------------------------------------------------------------------------------------------------------


def test_jsonl_round_trip_and_flushed_per_step(tmp_path):
    with MetricsLogger(tmp_path, tensorboard=False, png=False) as logger:
        for step in range(3):
            logger.log(step, metrics_at(step))
            # flushed: another reader sees the line before close
            assert len(read_metrics(tmp_path / "metrics.jsonl")) == step + 1
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert without_time(rows) == [{"step": s, **metrics_at(s)} for s in range(3)]
    assert all(isinstance(r["wall_time"], float) for r in rows)
    assert read_metrics(tmp_path / "missing.jsonl") == []


def test_non_finite_values_become_null_with_one_warning(tmp_path, caplog):
    import numpy as np
    import torch

    with caplog.at_level(logging.WARNING, logger="train.metrics"):
        with MetricsLogger(tmp_path, tensorboard=False, png=False) as logger:
            row = logger.log(0, {"a": math.nan, "b": math.inf, "c": np.float32(2.5), "d": torch.tensor(3.0),
                                 "e": True, "f": "text", "step": 9})
            logger.log(1, {"a": -math.inf})
    assert row == {"step": 0, "wall_time": row["wall_time"], "a": None, "b": None, "c": 2.5, "d": 3.0, "e": 1.0}
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["a"] is None and json.loads(lines[1]) == {**json.loads(lines[1]), "a": None}
    assert "NaN" not in lines[0] and "Infinity" not in lines[0]  # strict JSON
    messages = [r.getMessage() for r in caplog.records]
    assert sum("'a'" in m for m in messages) == 1  # once per key, not once per step
    assert any("'f' is not a number" in m for m in messages) and any("reserved" in m for m in messages)


def test_cut_off_last_line_is_skipped_and_repaired(tmp_path, caplog):
    with MetricsLogger(tmp_path, tensorboard=False, png=False) as logger:
        for step in range(2):
            logger.log(step, metrics_at(step))
    path = tmp_path / "metrics.jsonl"
    with path.open("a") as f:
        f.write('{"step": 2, "train/loss": 0.')  # the process died mid-write
    assert [r["step"] for r in read_metrics(path)] == [0, 1]
    # a malformed line in the middle is skipped with a warning naming it
    text = path.read_text()
    path.write_text("garbage\n" + text)
    with caplog.at_level(logging.WARNING, logger="train.metrics"):
        assert [r["step"] for r in read_metrics(path)] == [0, 1]
    assert f"{path}:1" in caplog.text
    path.write_text(text)
    # reopening drops the cut-off tail so the next line starts clean
    with MetricsLogger(tmp_path, tensorboard=False, png=False) as logger:
        logger.log(2, metrics_at(2))
    lines = path.read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [0, 1, 2]


def test_truncate_on_resume_matches_an_uninterrupted_run(tmp_path):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    with MetricsLogger(straight, png=False) as logger:
        for step in range(10):
            logger.log(step, metrics_at(step))
    # a run that checkpointed at step 5, logged up to 7 with different values, then crashed
    logger = MetricsLogger(resumed, png=False)
    for step in range(8):
        logger.log(step, {k: v + (100.0 if step > 5 else 0.0) for k, v in metrics_at(step).items()})
    logger._file.close()  # no close(): a crash
    logger._writer.flush()
    with MetricsLogger(resumed, png=False, resume_step=5) as logger:
        for step in range(6, 10):
            logger.log(step, metrics_at(step))
    resumed_rows = without_time(read_metrics(resumed / "metrics.jsonl"))
    assert resumed_rows == without_time(read_metrics(straight / "metrics.jsonl"))
    # TensorBoard drops the purged events too (two event files, the second starting with a purge at step 6)
    assert len(list((resumed / "tb").glob("events.out.tfevents.*"))) == 2
    expected = [(s, pytest.approx(metrics_at(s)["train/loss"])) for s in range(10)]
    assert tb_scalars(resumed / "tb", "train/loss") == expected


def test_truncate_after_on_an_open_logger(tmp_path):
    with MetricsLogger(tmp_path, tensorboard=False, png=False) as logger:
        for step in range(5):
            logger.log(step, metrics_at(step))
        assert logger.truncate_after(2) == 2
        logger.log(3, {"x": 1.0})
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [0, 1, 2, 3]


# -- TensorBoard -------------------------------------------------------------------------------------------------


def test_tensorboard_scalars_written(tmp_path):
    with MetricsLogger(tmp_path, png=False) as logger:
        for step in range(4):
            logger.log(step, {**metrics_at(step), "bad": math.nan if step == 1 else 1.0})
    events = list((tmp_path / "tb").glob("events.out.tfevents.*"))
    assert len(events) == 1 and events[0].stat().st_size > 0
    assert tb_scalars(tmp_path / "tb", "train/reward_mean") == [(s, pytest.approx(0.1 * s)) for s in range(4)]
    assert [s for s, _ in tb_scalars(tmp_path / "tb", "bad")] == [0, 2, 3]  # non-finite values are left out


def test_missing_tensorboard_warns_once_and_carries_on(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import now raises ImportError
    with caplog.at_level(logging.WARNING, logger="train.metrics"):
        with MetricsLogger(tmp_path, png=False) as logger:
            for step in range(3):
                logger.log(step, metrics_at(step))
    assert sum("TensorBoard is not available" in r.getMessage() for r in caplog.records) == 1
    assert len(read_metrics(tmp_path / "metrics.jsonl")) == 3
    assert not (tmp_path / "tb").exists()


# -- learning curves ---------------------------------------------------------------------------------------------


def test_png_written_on_close(tmp_path):
    with MetricsLogger(tmp_path, tensorboard=False) as logger:
        for step in range(20):
            logger.log(step, {**metrics_at(step), "train/clipfrac": math.nan if step == 3 else 0.1})
        logger.log(20, {"eval/accuracy": 0.9})  # sparse keys are fine
    png = tmp_path / "curves.png"
    data = png.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 5000
    # a path of one's own, and nothing drawn when no key belongs to a panel
    other = tmp_path / "sub" / "other.png"
    assert plot_metrics(read_metrics(tmp_path / "metrics.jsonl"), other) == other
    assert other.read_bytes()[:8] == PNG_MAGIC
    assert plot_metrics([{"step": 0, "time/wait": 1.0}], tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()


def test_png_every_n_steps(tmp_path):
    logger = MetricsLogger(tmp_path, tensorboard=False, plot_every=2)
    logger.log(0, metrics_at(0))
    assert not (tmp_path / "curves.png").exists()
    logger.log(1, metrics_at(1))
    assert (tmp_path / "curves.png").read_bytes()[:8] == PNG_MAGIC
    logger.close()
    logger.close()  # twice is fine
    with pytest.raises(RuntimeError, match="closed"):
        logger.log(2, {})


# -- progress ----------------------------------------------------------------------------------------------------


def test_progress_on_a_terminal_shows_the_numbers():
    from rich.console import Console

    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=160)
    with Progress(10, console=console) as progress:
        assert progress.enabled
        progress.update(1, {"train/reward_mean": 1.25, "train/kl": 0.003, "time/samples_per_s": 12.0})
        text = progress.update(2, {"eval/accuracy": 0.456, "train/reward_mean": 1.5})
    assert text == "reward 1.500  kl 0.003  samples/s 12.0  acc 45.6%"
    assert "reward 1.500" in out.getvalue() and "2/10" in out.getvalue()


def test_progress_off_when_not_a_terminal_or_asked():
    from rich.console import Console

    out = io.StringIO()
    with Progress(5, console=Console(file=out)) as progress:
        assert not progress.enabled
        assert progress.update(1, {"train/reward_mean": 0.5}) == "reward 0.500"
    assert out.getvalue() == ""
    with Progress(5, enabled=False) as progress:
        assert not progress.enabled
        progress.update(1, {"train/samples": 8.0})


# -- bench/gpu_step.py -------------------------------------------------------------------------------------------


def run_bench(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return procs.run([sys.executable, str(REPO / "bench" / "gpu_step.py"), *args], capture_output=True,
                     text=True, timeout=timeout, env=env, cwd=REPO)


def test_gpu_step_help_and_no_gpu_message():
    r = run_bench("--help")
    assert r.returncode == 0 and "--response-tokens" in r.stdout and "--tiny" in r.stdout
    import torch

    if not torch.cuda.is_available():
        r = run_bench("--runs", "1")
        assert r.returncode == 2 and "no CUDA device" in r.stderr and "--device cpu --tiny" in r.stderr


def test_gpu_step_cpu_smoke(tmp_path):
    out = tmp_path / "gpu_step.json"
    # lora+gc and full between them run every code path of the four configs (peft, checkpointing, full weights);
    # full+gc is made to run out of memory. Two timed updates each keep this quick on a busy CPU. The shared-prefix
    # path runs the same update (the same gradient norm) and has no checkpointed config.
    r = run_bench("--device", "cpu", "--tiny", "--image", "112x112", "--response-tokens", "8", "--prompt-tokens", "8",
                  "--configs", "lora+gc", "full", "full+gc", "--paths", "unshared", "shared", "--runs", "1",
                  "--warmup", "1", "--simulate-oom", "full+gc", "--out", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(out.read_text())
    shared = {row["config"]: row for row in result["results"] if row["path"] == "shared"}
    assert [shared[c]["status"] for c in ("lora+gc", "full", "full+gc")] == ["n/a", "ok", "n/a"]
    rows = {row["config"]: row for row in result["results"] if row["path"] == "unshared"}
    assert shared["full"]["grad_norm"] == pytest.approx(rows["full"]["grad_norm"], rel=1e-4)
    assert list(rows) == ["lora+gc", "full", "full+gc"]
    assert rows["lora+gc"]["lora"] and rows["lora+gc"]["checkpointing"] and not rows["full"]["checkpointing"]
    for name in ("lora+gc", "full"):
        row = rows[name]
        assert row["status"] == "ok" and row["median_s"] > 0 and math.isfinite(row["loss"])
        assert row["grad_norm"] > 0  # the update had a gradient
    assert rows["lora+gc"]["trainable_params"] < rows["full"]["trainable_params"] == result["params"]
    assert rows["full+gc"]["status"] == "OOM" and "simulated" in rows["full+gc"]["error"]
    assert result["image_tokens"] == 16 and result["input_size"] == [112, 112]
    assert "synthetic" in result["inputs"]
    assert "OOM" in r.stdout and "lora+gc" in r.stdout

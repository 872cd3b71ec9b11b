"""bench/online curve's own arithmetic and merging (the benchmark itself takes ~40 minutes per seed and is not run
here; tests/agent/online runs real online sessions)."""

from __future__ import annotations

import json

import pytest

from bench.online import curve


def _arm(delta: float, lo: float, hi: float, **extra) -> dict:
    return {"delta_vs_sft": delta, "delta_ci95": [lo, hi], "test_accuracy": 0.3 + delta, "samples": 7680,
            "updates": 120, "seconds": 600.0, **extra}


def _online(delta: float, lo: float, hi: float) -> dict:
    return _arm(delta, lo, hi, samples_generated=9000, stale_dropped=3, staleness_mean=0.5, staleness_max=2,
                is_weight_mean=0.98, wall_s=1200.0)


def _seed(n: int, off: tuple, on: tuple) -> dict:
    return {"seed": n, "sft": {"test_accuracy": 0.3, "steps": 200, "stop": "band", "val_accuracy": 0.35},
            "offline": _arm(*off), "online": _online(*on)}


def test_summary_counts_seeds_and_ratio_of_mean_lifts():
    seeds = [_seed(0, (0.06, 0.03, 0.09), (0.05, 0.02, 0.08)),
             _seed(1, (0.04, 0.01, 0.07), (0.01, -0.02, 0.04)),
             _seed(2, (0.02, -0.01, 0.05), (0.03, 0.005, 0.055))]
    s = curve.summary(seeds)
    # offline lifts 0.06, 0.04, 0.02 -> mean 0.04; online 0.05, 0.01, 0.03 -> mean 0.03; ratio 0.75
    assert s["offline"]["lift_mean"] == pytest.approx(0.04) and s["online"]["lift_mean"] == pytest.approx(0.03)
    assert s["online_over_offline"] == pytest.approx(0.75)
    assert (s["online"]["ci_above_0"], s["offline"]["ci_above_0"], s["online"]["ci_below_0"]) == (2, 2, 0)
    text = curve.table(seeds)
    assert "| 0 | 0.300 | online | 120 | 7,680 (9,000) | 0.350 | **+0.050 [+0.020, +0.080]** | 3 | 0.50 (2) |" in text


def test_no_ratio_when_offline_did_not_lift():
    s = curve.summary([_seed(0, (-0.01, -0.03, 0.01), (0.02, 0.0, 0.04))])
    assert "online_over_offline" not in s and s["offline"]["ci_above_0"] == 0


def test_merge_joins_seeds_and_refuses_mismatches(tmp_path):
    base = {"setting": "a", "config": {"rl_steps": 120}, "devices": 2, "finetune": "full", "algo": "aepo"}
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    a.write_text(json.dumps({**base, "seeds": [_seed(1, (0.04, 0.01, 0.07), (0.02, 0.0, 0.04))]}))
    b.write_text(json.dumps({**base, "seeds": [_seed(0, (0.06, 0.03, 0.09), (0.05, 0.02, 0.08))]}))
    merged = curve.merge([a, b])
    assert [s["seed"] for s in merged["seeds"]] == [0, 1] and merged["summary"]["seeds"] == 2
    c.write_text(json.dumps({**base, "finetune": "lora", "seeds": []}))
    with pytest.raises(SystemExit, match="finetune"):
        curve.merge([a, c])
    with pytest.raises(SystemExit, match="twice"):
        curve.merge([a, a])


def test_lora_flags_reach_the_online_config_and_are_refused_without_lora(tmp_path, capsys):
    from bench.learning.__main__ import budget_config
    from bench.online.__main__ import main

    cfg = budget_config(None, False, ["aepo"], "a")
    default = curve.online_config(tmp_path, 0, cfg, tmp_path / "run", "lora")
    assert (default.model.lora_rank, default.model.lora_alpha) == (8, 16)
    assert tuple(default.model.lora_targets) == ("q_proj", "k_proj", "v_proj", "o_proj")
    wide = curve.online_config(tmp_path, 0, cfg, tmp_path / "run", "lora",
                               lora_spec={"rank": 32, "alpha": 64, "targets": ["q_proj", "gate_proj"]})
    assert (wide.model.lora_rank, wide.model.lora_alpha, tuple(wide.model.lora_targets)) == (
        32, 64, ("q_proj", "gate_proj"))
    assert curve.online_config(tmp_path, 0, cfg, tmp_path / "run", "full").model.finetune == "full"
    for argv, said in ((["--lora-rank", "16"], "--lora-rank needs --finetune lora"),
                       (["--finetune", "lora", "--lora-rank", "0"], "must be >= 1, got 0 and 0"),
                       (["--lr", "2"], "--lr must be in (0, 1), got 2.0")):
        with pytest.raises(SystemExit):
            main(["curve", "--out", str(tmp_path / "x.json"), *argv])
        assert said in capsys.readouterr().err

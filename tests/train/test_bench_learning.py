"""The learning benchmark's own logic: its arm rewards against hand-worked values, and merging runs made side by
side (the benchmark itself is not run here: it takes ~40 minutes per seed)."""

from __future__ import annotations

import json
import math

import pytest

from bench.learning import rewards
from bench.learning.__main__ import markdown_table, merge_runs
from bench.learning.run import BenchConfig
from train.learner import RolloutPrompt

BOX = (40, 40, 72, 72)  # a target centred at (56, 56), radius 16


def _prompt() -> RolloutPrompt:
    return RolloutPrompt([], None, (224, 224), target=BOX)


def _points(*pts: tuple[int, int]) -> str:
    return json.dumps([{"point_2d": list(p)} for p in pts])


def test_arm_rewards_hand_worked():
    p = _prompt()
    # single hit: 1 + 1/sqrt(1*1) = 2 under both AEPO arms; GRPO: 0.2 format + 0.8 hit = 1.0
    assert rewards.aepo(p, _points((56, 56))).total == 2.0
    assert rewards.aepo_no_collinear(p, _points((56, 56))).total == 2.0
    assert rewards.grpo_single(p, _points((56, 56))).total == pytest.approx(1.0)
    # two points, hit at rank 2: 1 + 1/sqrt(2*2) = 1.5; GRPO: not a single answer, first point misses -> 0
    two = _points((168, 168), (56, 56))
    assert rewards.aepo(p, two).total == pytest.approx(1.5)
    assert rewards.grpo_single(p, two).total == 0.0
    # the same point three times is collinear: -1 with the penalty; without it a hit at rank 1 of 3 scores
    # 1 + 1/sqrt(3) = 1.57735 and a miss 1 - 1/3
    rep_hit, rep_miss = _points((56, 56), (56, 56), (56, 56)), _points((168, 56), (168, 56), (168, 56))
    assert rewards.aepo(p, rep_hit).total == -1.0
    assert rewards.aepo_no_collinear(p, rep_hit).total == pytest.approx(1 + 1 / math.sqrt(3))
    assert rewards.aepo_no_collinear(p, rep_miss).total == pytest.approx(2 / 3)
    # a row of three distinct points, hit at rank 2: 1 + 1/sqrt(6) without the penalty
    row = _points((168, 56), (56, 56), (112, 56))
    assert rewards.aepo(p, row).info["is_collinear"]
    assert rewards.aepo_no_collinear(p, row).total == pytest.approx(1 + 1 / math.sqrt(6))
    # three points at 2 x 2 cell centres are never collinear: both arms agree (hit at rank 3: 1 + 1/3)
    corners = _points((168, 56), (168, 168), (56, 56))
    assert rewards.aepo(p, corners).total == rewards.aepo_no_collinear(p, corners).total == pytest.approx(4 / 3)
    # the held-out metric looks at the first point only
    assert rewards.top1_hit(p, _points((56, 56), (168, 168)))
    assert not rewards.top1_hit(p, two)
    assert rewards.answers_per_sample([two, "not json", _points((1, 1))]) == 1.5


def _result(seed: int, sft: float, aepo: float, lo: float, stop: str = "band", **config) -> dict:
    cfg = {"arms": ["aepo"], "rl_steps": 2, **config}
    curve = [{"step": 1, "samples": 64, "answers_per_sample": 1.0, "sample_top1": 0.25, "collinear_share": 0.0}]
    return {"config": cfg,
            "seeds": [{"seed": seed, "parameters": 10, "seconds": 1.0,
                       "sft": {"test_accuracy": sft, "steps": 1, "stop": stop, "val_accuracy": sft, "seconds": 1.0, "examples": 16, "test_answers_per_sample": 1.0},
                       "arms": {"aepo": {"test_accuracy": aepo, "delta_vs_sft": aepo - sft,
                                         "delta_ci95": [lo, lo + 0.05], "samples": 128, "curve": curve,
                                         "test_answers_per_sample": 1.0, "seconds": 1.0}}}],
            "run": {"seconds": 10.0 * seed}}


def test_merge_recomputes_the_summary_over_all_seeds(tmp_path):
    paths = []
    for seed, (sft, aepo, lo) in {2: (0.3, 0.4, 0.05), 0: (0.4, 0.45, 0.01), 1: (0.5, 0.5, -0.02)}.items():
        path = tmp_path / f"s{seed}.json"
        path.write_text(json.dumps(_result(seed, sft, aepo, lo)))
        paths.append(path)
    data = merge_runs(paths)
    assert [s["seed"] for s in data["seeds"]] == [0, 1, 2]
    assert data["summary"]["sft"]["mean"] == pytest.approx(0.4)
    assert data["summary"]["aepo"]["delta_vs_sft"]["mean"] == pytest.approx((0.1 + 0.05 + 0.0) / 3)
    assert data["summary"]["aepo"]["seeds_ci_excludes_0_positive"] == 2
    assert data["config"]["rl_steps"] == 2 and data["config"]["sft_max_steps"] == BenchConfig.sft_max_steps
    assert data["run"]["seconds"] == 20.0 and len(data["run"]["merged_from"]) == 3
    table = markdown_table(data)
    assert "| 2 | aepo | 128 samples | 0.400 | **+0.100** | **[+0.050, +0.100]** |" in table  # interval > 0: bold
    assert "| 1 | aepo | 128 samples | 0.500 | +0.000 | [-0.020, +0.030] |" in table
    assert "interval above 0 on 2 of 3 seeds, below 0 on 0" in table


def test_merge_refuses_mixed_configs_and_repeated_seeds(tmp_path):
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    a.write_text(json.dumps(_result(0, 0.4, 0.5, 0.0)))
    b.write_text(json.dumps(_result(1, 0.4, 0.5, 0.0, rl_lr=5e-4)))
    c.write_text(json.dumps(_result(0, 0.4, 0.5, 0.0)))
    with pytest.raises(SystemExit, match=r"different config \(rl_lr\)"):
        merge_runs([a, b])
    with pytest.raises(SystemExit, match="seed 0 has arm.s. aepo in both"):
        merge_runs([a, c])
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(SystemExit, match="cannot read .*bad.json"):
        merge_runs([a, bad])


def test_merge_allows_other_sft_caps_only_where_no_cap_fired(tmp_path):
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    a.write_text(json.dumps(_result(0, 0.4, 0.5, 0.0, sft_max_minutes=4.0)))
    b.write_text(json.dumps(_result(1, 0.4, 0.5, 0.0, sft_max_minutes=15.0, sft_max_steps=400)))
    c.write_text(json.dumps(_result(2, 0.4, 0.5, 0.0, stop="time, latest in-band checkpoint", sft_max_minutes=4.0)))
    data = merge_runs([a, b])
    assert data["config"]["sft_caps_per_seed"] == {"0": {"sft_max_minutes": 4.0, "sft_max_steps": 0},
                                                   "1": {"sft_max_minutes": 15.0, "sft_max_steps": 400}}
    assert data["config"]["sft_max_minutes"] is None
    with pytest.raises(SystemExit, match=r"stopped by a cap.*'time, latest in-band checkpoint'"):
        merge_runs([b, c])


def test_merge_combines_arms_run_later_from_the_same_start(tmp_path):
    first, later, other = tmp_path / "first.json", tmp_path / "later.json", tmp_path / "other.json"
    first.write_text(json.dumps(_result(0, 0.4, 0.5, 0.02)))
    run = _result(0, 0.4, 0.45, -0.01, arms=["grpo"])
    run["seeds"][0]["arms"] = {"grpo": run["seeds"][0]["arms"]["aepo"]}
    later.write_text(json.dumps(run))
    data = merge_runs([later, first])
    assert data["config"]["arms"] == ["aepo", "grpo"]
    assert list(data["seeds"][0]["arms"]) == ["aepo", "grpo"]
    assert data["summary"]["grpo"]["delta_vs_sft"]["mean"] == pytest.approx(0.05)
    assert data["summary"]["aepo"]["seeds_ci_excludes_0_positive"] == 1
    run["seeds"][0]["sft"]["test_accuracy"] = 0.41  # another SFT start: the arms are not comparable
    other.write_text(json.dumps(run))
    with pytest.raises(SystemExit, match="seed 0 has a different SFT result"):
        merge_runs([first, other])


def test_trl_compare_medians_and_ratios(monkeypatch):
    """The throughput comparison's bookkeeping on made-up worker results: warm steps only, medians over runs,
    ratios against both TRL sides, the markdown table; and the 1280 x 720 setting's prompt."""
    from bench.learning import trl_compare
    from bench.learning.screens import screens, to_wide_prompt

    def fake(kind, model_dir, threads, setting):
        speed = {"ours": 4.0, "ours_unshared": 2.0, "trl": 1.0, "trl_no_gc": 2.0}[kind]
        step = {"step_s": 16 / speed, "generate_s": 1.0, "update_s": 16 / speed - 1.0, "samples": 16}
        return {"rss_loaded_mb": 100.0, "steps": [{**step, "step_s": 99.0, "peak_rss_mb": 150.0},
                                                  {**step, "peak_rss_mb": 100.0 + 100 * speed},
                                                  {**step, "peak_rss_mb": 120.0}]}

    monkeypatch.setattr(trl_compare, "_run_worker", fake)
    res = trl_compare.compare_setting(trl_compare.SETTINGS["1280x720"], "model", 1, runs=3)
    ours = res["medians"]["ours"]
    assert ours["samples_per_s"] == 4.0 and ours["runs"] == 3  # the cold first step is left out
    assert ours["speed_vs_trl"] == 4.0 and ours["speed_vs_trl_no_gc"] == 2.0
    assert ours["memory_rise_vs_trl"] == 4.0 and ours["memory_rise_vs_trl_no_gc"] == 2.0  # rises 400, 100, 200 MB
    assert "speed_vs_trl" not in res["medians"]["trl_no_gc"]
    table = trl_compare.markdown_table({"settings": {"1280x720": res}})
    assert "| 1280x720 | handeye `Learner`, shared prefix | 4.00 | **4.00x** / **2.00x** |" in table
    prompt = to_wide_prompt(screens(1, 1)[0])
    assert prompt.image.shape == (728, 1288, 3) and prompt.frame_size == (1280, 720)
    x1, y1, x2, y2 = prompt.target
    assert 0 <= x1 < x2 <= 1288 and 0 <= y1 < y2 <= 728


def test_sft_checkpoint_is_saved_reused_and_refused_for_other_settings(tmp_path, monkeypatch):
    """bench.learning saves its SFT checkpoint as a model folder with sft.json; the same seed and settings reuse it
    (no training), other settings are refused naming the field, and the folder loads with the same weights."""
    import dataclasses

    import torch

    from bench.learning import run
    from bench.learning.screens import PRESET
    from policy.backends.hf import TransformersBackend

    cfg = BenchConfig(sft_max_steps=2, sft_max_minutes=5, sft_eval_every=1, sft_min_steps=0, val_size=4,
                      test_size=6, max_new_tokens=8, eval_batch=6, sft_batch=2)
    folder = run.sft_folder(tmp_path / "sft", 0, cfg)
    assert folder.name.startswith("seed0-") and folder != run.sft_folder(tmp_path / "sft", 1, cfg)
    assert folder != run.sft_folder(tmp_path / "sft", 0, dataclasses.replace(cfg, grid=4))
    assert folder == run.sft_folder(tmp_path / "sft", 0, dataclasses.replace(cfg, rl_steps=7))  # RL does not count
    made, info, correct, params = run.sft_checkpoint(0, cfg, tmp_path / "work", folder)
    assert made == folder and info["steps"] == 2 and len(correct) == 6 and params > 0
    meta = json.loads((folder / "sft.json").read_text())
    assert meta["seed"] == 0 and meta["settings"]["grid"] == 2 and len(meta["test_correct"]) == 6

    def no_training(*args, **kwargs):
        raise AssertionError("a saved checkpoint with the same settings must be reused")

    monkeypatch.setattr(run, "sft_stage", no_training)
    again, info2, correct2, _ = run.sft_checkpoint(0, cfg, tmp_path / "work", folder)
    assert again == folder and json.dumps(info2, sort_keys=True) == json.dumps(info, sort_keys=True)
    assert (correct2 == correct).all()
    with pytest.raises(ValueError, match=r"grid: 2 there, 4 here"):
        run.load_sft(folder, 0, dataclasses.replace(cfg, grid=4))
    with pytest.raises(ValueError, match=r"seed: 0 there, 1 here"):
        run.load_sft(folder, 1, cfg)
    a = TransformersBackend(folder, preset=PRESET, dtype="float32").model.state_dict()
    b = TransformersBackend(folder, preset=PRESET, dtype="float32").model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    (folder / "sft.json").write_text("{")
    with pytest.raises(ValueError, match="not an SFT checkpoint"):
        run.load_sft(folder, 0, cfg)


def test_hard_setting_is_what_its_docstring_says():
    from bench.learning.__main__ import budget_config

    cfg = budget_config(None, False, None, "hard")
    assert (cfg.grid, cfg.distractors, cfg.mode, cfg.sft_band, cfg.arms) == (4, 3, "share", (0.10, 0.15),
                                                                              ("aepo", "grpo"))
    assert (cfg.sft_consecutive, cfg.sft_eval_every, cfg.sft_multi, cfg.sft_multi_points) == (2, 10, 0.5, 4)
    assert cfg.sft_band[0] > 1 / cfg.grid ** 2  # above chance: a blind guess hits 1 cell in 16
    first = budget_config(None, False, None, "hard-v1")  # kept for the results it made
    assert (first.grid, first.sft_band, first.sft_eval_every, first.sft_max_steps) == (4, (0.05, 0.15), 25, 600)
    quick = budget_config(None, True, ["aepo"], "hard")
    assert quick.grid == 4 and quick.rl_steps == 6 and quick.arms == ("aepo",)
    assert budget_config(None, False, None, "a") == BenchConfig()


@pytest.mark.parametrize("accuracies, stop, steps, val", [
    ([0.05, 0.12, 0.13], "band", 3, 0.13),  # two in-band checks in a row
    ([0.05, 0.12, 0.40], "above band, latest in-band checkpoint", 2, 0.12),  # jumped over: back to step 2
    ([0.05, 0.40], "above band", 2, 0.40),  # never in the band: nothing to fall back to
    ([0.05, 0.12, 0.05, 0.02], "steps, latest in-band checkpoint", 2, 0.12),
])
def test_sft_stops_in_the_band_or_falls_back_to_its_latest_in_band_checkpoint(monkeypatch, accuracies, stop, steps,
                                                                              val):
    """The stop rule with scripted validation scores: the model left behind is the one of the step reported (its
    weight is set to the step number by a stand-in learner)."""
    import numpy as np
    import torch

    from bench.learning import run

    class Backend:
        model = torch.nn.Linear(1, 1, bias=False)

    class Learner:
        def __init__(self, backend, model=None, **kwargs):
            self.backend, self.optimizer, self.steps = backend, torch.optim.SGD(backend.model.parameters()), 0

        def step(self, examples):
            assert len(examples) == 2 and all(e.target_text for e in examples)
            self.steps += 1
            with torch.no_grad():
                self.backend.model.weight.fill_(self.steps)
            return {"sft/loss": 1.0 / self.steps}

    scores = iter(accuracies)
    monkeypatch.setattr(run, "SupervisedLearner", Learner)
    monkeypatch.setattr(run, "evaluate", lambda backend, val, cfg: (next(scores), np.zeros(0, bool), 1.0))
    cfg = BenchConfig(sft_band=(0.10, 0.15), sft_consecutive=2, sft_eval_every=1, sft_min_steps=0,
                      sft_max_steps=len(accuracies), sft_max_minutes=5, sft_batch=2)
    out = run.sft_stage(0, cfg, Backend(), [])
    assert (out["stop"], out["steps"], out["val_accuracy"]) == (stop, steps, val)
    assert Backend.model.weight.item() == steps
    assert [c["val_accuracy"] for c in out["curve"]] == accuracies[:len(out["curve"])]


def test_probe_floor_is_the_loss_of_a_blind_guess_hand_worked():
    from bench.learning.probe import format_floor
    from policy.tiny import byte_level_tokenizer

    tok = byte_level_tokenizer()
    end = tok.convert_tokens_to_ids("<|im_end|>")
    short, long = '[{"point_2d": [28, 84]}]', '[{"point_2d": [140, 196]}]'  # 24 and 26 bytes
    assert (len(short), len(long)) == (24, 26)
    # 16 cells: ln 16 = 2.7726 nats per answer over 25 (24 + end-of-turn) tokens
    assert format_floor(tok, 4, [short], end) == pytest.approx(math.log(16) / 25)
    # mean length (25 + 27) / 2 = 26 tokens; 4 cells: ln 4 / 26
    assert format_floor(tok, 2, [short, long], end) == pytest.approx(math.log(4) / 26)
    assert format_floor(tok, 4, [short]) == pytest.approx(math.log(16) / 24)  # no end-of-turn counted
    with pytest.raises(ValueError, match="at least one answer"):
        format_floor(tok, 4, [])


def test_larger_probe_model_is_larger_and_an_unknown_size_is_refused(tmp_path):
    from bench.learning.model import LARGER, SIZES, build_model

    assert LARGER["4m"]["text"]["hidden_size"] == 2 * SIZES["text"]["hidden_size"]
    with pytest.raises(ValueError, match=r"size must be one of \['1m', '4m'\], got '9m'"):
        build_model(tmp_path / "m", 0, "9m")


def test_probe_runs_sft_without_a_band_stop_and_writes_its_curve(tmp_path, capsys):
    from bench.learning.probe import main

    assert main(["--setting", "hard", "--mode", "differ", "--sft-multi", "0", "--steps", "2", "--eval-every", "1",
                 "--out", str(tmp_path), "--name", "p"]) == 0
    result = json.loads((tmp_path / "p.json").read_text())
    assert [p["step"] for p in result["curve"]] == [1, 2]  # no stop at the band, none before --steps
    assert result["size"] == "1m" and 500_000 < result["parameters"] < 2_000_000
    # grid 4: ln 16 over 25-27 tokens per single-point answer
    assert math.log(16) / 27 <= result["format_floor"] <= math.log(16) / 25
    assert result["config"]["grid"] == 4 and result["config"]["mode"] == "differ"
    assert "| 2 |" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--size", "4m", "--init", str(tmp_path)])

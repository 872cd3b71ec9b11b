"""The trainer on the tiny random Qwen2.5-VL: a run resumed from a checkpoint reproduces the uninterrupted run's
metrics, the SFT and RFT stages run, one bad sample never stops training, and ``agent train`` reports bad
configurations clearly."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from agent.cli import main as cli_main
from agent.config import load_train_config
from agent.errors import ConfigError
from train.checkpoint import CheckpointError
from train.metrics import read_metrics
from train.rewards import RewardResult
from train.data import answer_text
from train.build import build_backend, build_data
from train.trainer import Trainer, run_from_config
from tests.support import procs

pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")


@pytest.fixture(scope="module")
def data_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 screens of 112 px, each with a red square at a different place: a grounding JSONL in our format."""
    from PIL import Image

    root = tmp_path_factory.mktemp("data")
    rows = []
    for i in range(12):
        img = np.full((112, 112, 3), 255, np.uint8)
        x, y = (i * 13) % 80, (i * 29) % 80
        img[y:y + 24, x:x + 24] = (200, 30, 30)
        Image.fromarray(img).save(root / f"s{i}.png")
        rows.append({"image": f"s{i}.png", "instruction": "the red square", "box": [x, y, x + 24, y + 24]})
    path = root / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def config(run_dir: Path, data_file: Path, *more: str):
    return load_train_config(None, [
        'model.id="tiny"', f'train.run_dir="{run_dir}"', "data.source=grounding", f'data.path="{data_file}"',
        "data.think=false", "data.heldout_size=3", "rl.group_size=3", "rl.batch_prompts=2", "rl.max_new_tokens=10",
        'model.lora_targets=["q_proj", "v_proj", "lm_head"]', "rl.lr=0.02", "log.progress=false",
        "log.tensorboard=false", "log.png=false", *more])


DETERMINISTIC = ("time/", "wall_time")


def comparable(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(DETERMINISTIC)} for r in rows]


def ascii_reward(prompt, text: str) -> RewardResult:
    """A reward the random tiny model can improve on (the share of ASCII characters), with spread in every group."""
    share = sum(ord(c) < 128 for c in text) / len(text) if text else 0.0
    return RewardResult(share, {"correct": float(share > 0.9)}, {})


def run_trainer(cfg) -> object:
    backend = build_backend(cfg)
    data = build_data(cfg, backend.preset)
    return Trainer(cfg, backend=backend, prompts=data.prompts, heldout=data.heldout, reward_fn=ascii_reward,
                   target_text=data.target_text).run()


def test_resume_reproduces_the_uninterrupted_run(tmp_path, data_file):
    common = ("checkpoint.every=2", "eval.every=2", "filter.drop_all_correct=false")
    # the whole run: 4 updates, checkpoints at 2 and 4
    full = run_trainer(config(tmp_path / "full", data_file, "train.steps=4", *common))
    assert full.steps == 4 and (full.output / "adapter_model.safetensors").is_file()
    # the same run stopped after 2 updates, then resumed to 4 by a new trainer on a freshly loaded model
    part = tmp_path / "part"
    run_trainer(config(part, data_file, "train.steps=2", *common))
    resumed = run_trainer(config(part, data_file, "train.steps=4", 'train.resume="auto"', *common))
    assert resumed.steps == 4
    a, b = read_metrics(tmp_path / "full" / "metrics.jsonl"), read_metrics(part / "metrics.jsonl")
    assert [r["step"] for r in a] == [r["step"] for r in b] == [1, 2, 3, 4]
    for ra, rb in zip(comparable(a), comparable(b)):
        assert ra.keys() == rb.keys()
        for k in ra:
            va, vb = ra[k], rb[k]
            assert (va is None and vb is None) or math.isclose(va, vb, rel_tol=1e-5, abs_tol=1e-6), (ra["step"], k, va, vb)
    assert all(r["train/samples"] == 6 for r in a)  # every update trained on 2 groups x 3 answers
    assert len({r["train/reward_mean"] for r in a}) > 1  # and the policy moved
    assert "eval/accuracy" in a[1] and "eval/accuracy" in a[3]


def test_a_fresh_run_refuses_a_folder_with_checkpoints(tmp_path, data_file):
    run_from_config(config(tmp_path / "r", data_file, "train.steps=1"))
    with pytest.raises(CheckpointError, match="already holds checkpoints.*agent train --resume"):
        run_from_config(config(tmp_path / "r", data_file, "train.steps=1"))


def test_sft_stage_lowers_the_loss_and_rft_runs(tmp_path, data_file):
    cfg = config(tmp_path / "sft", data_file, 'train.stage="sft"', "train.steps=6", "sft.batch_size=4",
                 "sft.lr=0.01", "eval.every=0", 'model.finetune="full"')
    result = run_from_config(cfg)
    rows = read_metrics(tmp_path / "sft" / "metrics.jsonl")
    losses = [r["sft/loss"] for r in rows]
    assert len(losses) == 6 and losses[-1] < losses[0] * 0.7, losses
    assert (result.output / "config.json").is_file()  # full fine-tuning exports a model folder
    # ... that loads as one (a base checkpoint's processor files), and says what it was trained with
    from policy.backends.hf import TransformersBackend
    from policy.trained import TrainedSettings

    trained = TrainedSettings.read(result.output)
    assert (trained.finetune.value, trained.format, trained.variant) == ("full", "infigui-g1", "no_think")
    saved = json.loads((result.output / "preprocessor_config.json").read_text())
    assert saved["size"] == {"shortest_edge": 4 * 28 * 28, "longest_edge": 64 * 28 * 28}  # the trained budget
    assert (trained.min_pixels, trained.max_pixels) == (4 * 28 * 28, 64 * 28 * 28)
    assert TransformersBackend(result.output, preset=build_backend(cfg).preset).model_id == str(result.output)
    rft = run_from_config(config(tmp_path / "rft", data_file, 'train.stage="rft"', "train.steps=1",
                                 "sft.batch_size=2", "sft.rft_samples=3", "eval.every=0"))
    rows = read_metrics(tmp_path / "rft" / "metrics.jsonl")
    assert rft.steps == 1 and rows[0]["rft/sampled"] == 6.0


def test_answer_text_teaches_the_box_centre(tmp_path, data_file):
    cfg = config(tmp_path / "a", data_file)
    backend = build_backend(cfg)
    data = build_data(cfg, backend.preset)
    p = data.prompts.next_prompts(1)[0]
    x1, y1, x2, y2 = p.target["box"]
    text = answer_text(p, think=False)
    assert json.loads(text) == [{"point_2d": [round((x1 + x2) / 2), round((y1 + y2) / 2)]}]
    assert data.reward_fn(p, text).info["first_correct"]  # the taught answer is what the reward calls right
    assert p.target["think"] is False  # data.think=false selects InfiGUI-G1's no_think prompt and answer
    think = answer_text(dataclasses.replace(p, target={**p.target, "think": True}))
    assert think.startswith("<think>") and think.endswith("</think>\n" + text)


def test_a_raising_reward_is_counted_and_skipped(tmp_path, data_file):
    cfg = config(tmp_path / "bad", data_file, "train.steps=2", "filter.drop_all_correct=false")
    backend = build_backend(cfg)
    data = build_data(cfg, backend.preset)
    calls = {"n": 0}

    def flaky(prompt, text):
        calls["n"] += 1
        if calls["n"] % 3 == 0:  # one sample in three fails
            return RewardResult(0.0, {"reward_failed": 1.0}, {"reward_failed": "ValueError: boom"})
        return RewardResult(float(len(text) % 3), {"correct": 0.0}, {})

    trainer = Trainer(cfg, backend=backend, prompts=data.prompts, heldout=data.heldout, reward_fn=flaky,
                      target_text=data.target_text)
    result = trainer.run()
    rows = read_metrics(tmp_path / "bad" / "metrics.jsonl")
    assert result.steps == 2
    assert sum(r["rollout/failed_samples"] for r in rows) == 4.0  # 2 updates x 6 samples, every third failed
    assert all(r["train/samples"] <= 4 for r in rows if "train/samples" in r)


def test_run_stream_trains_on_scored_sample_files(tmp_path, data_file, monkeypatch):
    from train.data import RewardAdapter
    from train.learner import rollout_groups
    from train.samples import write_jsonl
    from train.trainer import Trainer

    cfg = config(tmp_path / "gen", data_file)
    backend = build_backend(cfg)
    data = build_data(cfg, backend.preset)
    groups = rollout_groups(backend, data.prompts.next_prompts(4), 3, data.reward_fn, max_new_tokens=8)
    path = tmp_path / "samples.jsonl"
    write_jsonl(path, [s for g in groups for s in g])
    with path.open("a") as f:
        f.write("{broken\n")
    rewards = []
    run_stream = Trainer.run_stream
    monkeypatch.setattr(Trainer, "run_stream", lambda self, g: rewards.append(self.reward_fn) or run_stream(self, g))
    result = run_from_config(config(tmp_path / "stream", data_file, "data.source=samples", f'data.path="{path}"',
                                    "train.steps=5", "filter.drop_all_correct=false"))
    assert result.steps == 2  # 4 groups, 2 per update: the stream ends after 2 updates
    # the samples come scored, and the trainer holds the config's reward all the same (no stand-in 0)
    assert [(type(r), r.name) for r in rewards] == [(RewardAdapter, "aepo")]
    assert any("1 bad sample rows skipped" in w for w in result.warnings)


def test_config_errors_name_the_problem(tmp_path, data_file, capsys):
    with pytest.raises(ConfigError, match="batch_size 12 does not divide by group_size 8"):
        load_train_config(None, ["rl.batch_size=12", "rl.group_size=8"])
    with pytest.raises(ConfigError, match="unknown option rl.group_sise: did you mean 'group_size'"):
        load_train_config(None, ["rl.group_sise=8"])
    with pytest.raises(ConfigError, match="source 'grounding' needs data.path"):
        load_train_config(None, ["data.source=grounding"])
    assert cli_main(["train", "--set", "rl.group_size=1"]) == 2
    assert "group_size must be at least 2" in capsys.readouterr().out
    assert cli_main(["train", "--set", f'train.run_dir="{tmp_path}/x"', "--set", "data.source=grounding",
                     "--set", f'data.path="{tmp_path}/missing.jsonl"', "--set", 'model.id="tiny"']) == 2
    assert "does not exist" in capsys.readouterr().out


def test_configs_train_toml_lists_every_default():
    from agent.config import render_train_defaults

    repo = Path(__file__).resolve().parents[2]
    assert (repo / "configs" / "train.toml").read_text() == render_train_defaults(), \
        "regenerate: python -c 'from agent.config import render_train_defaults as r; print(r(), end=\"\")' > configs/train.toml"
    assert load_train_config(repo / "configs" / "train.toml") == load_train_config(None)


def test_curriculum_and_dynamic_sampling_run_from_the_config_and_resume(tmp_path, data_file):
    more = ("curriculum.enabled=true", "curriculum.hard_fraction=0.5", "filter.dynamic_sampling=true",
            "filter.max_draws=2", "filter.drop_all_correct=false", "checkpoint.every=1")
    result = run_from_config(config(tmp_path / "c", data_file, "train.steps=2", *more))
    rows = read_metrics(tmp_path / "c" / "metrics.jsonl")
    assert result.steps == 2
    assert all(r["rollout/dynamic/draws"] >= 1 for r in rows)
    assert rows[-1]["curriculum/tracked"] >= 2  # running success rates of the prompts seen
    state = json.loads((tmp_path / "c" / "checkpoints" / "step-000002" / "state.json").read_text())
    assert state["trainer"]["curriculum"]["observations"] >= 2 and state["trainer"]["data"] is not None
    resumed = run_from_config(config(tmp_path / "c", data_file, "train.steps=3", 'train.resume="auto"', *more))
    assert resumed.steps == 3


@pytest.mark.timeout(240)
def test_generated_screens_train_live(tmp_path):
    cfg = load_train_config(None, [
        'model.id="tiny"', f'train.run_dir="{tmp_path}"', "data.source=generated", "data.seeds=4",
        "data.heldout_size=0", "rl.group_size=2", "rl.batch_prompts=2", "rl.max_new_tokens=8", "train.steps=1",
        "log.progress=false", "log.tensorboard=false", "log.png=false", "filter.drop_all_correct=false"])
    result = run_from_config(cfg)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert result.steps == 1 and rows[0]["collapse/samples"] == 4.0  # 2 screens rendered in Chromium x 2 answers


def test_stages_chain_through_the_adapter_folder(tmp_path, data_file):
    from safetensors.torch import load_file

    sft = run_from_config(config(tmp_path / "sft", data_file, 'train.stage="sft"', "train.steps=2",
                                 "sft.batch_size=2", "sft.lr=0.01", "eval.every=0"))
    assert sft.output == tmp_path / "sft" / "adapter"
    cfg = config(tmp_path / "rl", data_file, "train.steps=2", "filter.drop_all_correct=false", "eval.every=0",
                 f'model.adapter="{sft.output}"')
    rl = run_trainer(cfg)
    before, after = load_file(sft.output / "adapter_model.safetensors"), load_file(rl.output / "adapter_model.safetensors")
    assert before.keys() == after.keys()  # the RL stage trained the SFT adapter further, not a new one
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_ctrl_c_checkpoints_the_last_finished_update(tmp_path, data_file):
    cfg = config(tmp_path / "int", data_file, "train.steps=5", "checkpoint.every=0", "filter.drop_all_correct=false")
    backend = build_backend(cfg)
    data = build_data(cfg, backend.preset)
    trainer = Trainer(cfg, backend=backend, prompts=data.prompts, heldout=data.heldout, reward_fn=ascii_reward)

    def interrupt_after_two(step: int, metrics: dict) -> None:
        if step == 2:
            raise KeyboardInterrupt

    trainer.on_update.append(interrupt_after_two)
    with pytest.raises(KeyboardInterrupt):
        trainer.run()
    from train.checkpoint import latest_checkpoint

    assert latest_checkpoint(tmp_path / "int").name == "step-000002"


def test_agent_train_resume_refuses_a_crafted_checkpoint_without_running_it(tmp_path, data_file):
    """A checkpoint whose learner.pt would create a file when unpickled: ``agent train --resume`` says what is wrong
    and what to do, exits 2, shows no traceback, and the file is never created."""
    import os
    import sys

    from tests.conftest import REPO

    settings = ['model.id="tiny"', f'train.run_dir="{tmp_path / "run"}"', "data.source=grounding",
                f'data.path="{data_file}"', "data.think=false", "data.heldout_size=3", "rl.group_size=3",
                "rl.batch_prompts=2", "rl.max_new_tokens=10", 'model.lora_targets=["q_proj", "v_proj", "lm_head"]',
                "log.progress=false", "log.tensorboard=false", "log.png=false", "filter.drop_all_correct=false",
                "eval.every=0"]
    run_from_config(load_train_config(None, [*settings, "train.steps=1"]))
    (checkpoint,) = (tmp_path / "run" / "checkpoints").iterdir()
    marker = tmp_path / "pwned"
    state = torch.load(checkpoint / "learner.pt", weights_only=True)
    torch.save({**state, "steps": _Opens(marker)}, checkpoint / "learner.pt")
    args = [a for s in [*settings, "train.steps=2"] for a in ("--set", s)]
    proc = procs.run([sys.executable, "-m", "agent", "train", *args, "--resume", str(tmp_path / "run")],
                     cwd=REPO, env={**os.environ, "COLUMNS": "300"}, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "learner.pt holds objects other than tensors" in out and "re-create the checkpoint" in out, out
    assert "Traceback" not in out and not marker.exists()


class _Opens:
    """Unpickling this creates ``path`` (what a crafted checkpoint could do, or worse, under plain pickle)."""

    def __init__(self, path) -> None:
        self.path = path

    def __reduce__(self):
        return open, (str(self.path), "w")


def test_a_lora_run_at_a_full_weight_rate_warns_at_start(tmp_path, data_file, caplog):
    """A LoRA run whose learning rate is a tenth of the LoRA default or less (the full-weight defaults, rl 1e-6 and
    sft 1e-5, among them) warns once, in one line, when its learner is built: rl.lr for rl, sft.lr for sft and rft.
    Full fine-tuning at those rates, LoRA at its default or near it, say nothing."""
    import logging

    from train.build import warn_lora_rate

    def warning(*more: str) -> str:
        return warn_lora_rate(config(tmp_path / "w", data_file, *more))

    assert warning("rl.lr=1e-6") == (
        'rl.lr = 1e-06 is a full-weight learning rate, but model.finetune = "lora": the LoRA adapter will learn '
        'almost nothing; leave rl.lr unset for the LoRA default 0.0001 (figures: docs/benchmarks.md, "LoRA online: '
        'which rank and learning rate")')
    assert warning("rl.lr=1e-5").startswith("rl.lr = 1e-05 is a full-weight learning rate")
    assert warning('train.stage="sft"', "sft.lr=1e-5").startswith("sft.lr = 1e-05 is a full-weight learning rate")
    assert warning('train.stage="rft"', "sft.lr=1e-6").startswith("sft.lr = 1e-06")
    quiet = [("rl.lr=2e-5",), ("rl.lr=none",), ('model.finetune="full"', "rl.lr=1e-6"),
             ('train.stage="sft"', "rl.lr=1e-6"), ('train.stage="sft"', 'model.finetune="full"', "sft.lr=1e-5")]
    assert [warning(*q) for q in quiet] == [""] * len(quiet)
    # every run builds its learner in train.build.build_learner (the trainer of agent train, of an online session
    # and of agent learner): the warning comes from there, once
    cfg = config(tmp_path / "t", data_file, "rl.lr=1e-6")
    expected = warn_lora_rate(cfg)
    backend = build_backend(cfg)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="train.build"):
        Trainer(cfg, backend=backend, prompts=None, reward_fn=ascii_reward)
    assert [r.getMessage() for r in caplog.records if r.name == "train.build"] == [expected]


def test_the_worked_config_learns_at_the_rate_of_its_fine_tuning_mode():
    """configs/aepo-3b.toml leaves rl.lr unset: its full fine-tune runs at the papers' 1e-6, and the LoRA runs that
    docs/online.md and docs/fleet.md make of it (--set model.finetune='"lora"') at LoRA's 1e-4, without a warning."""
    from train.build import warn_lora_rate
    from train.learner import DEFAULT_LR

    repo = Path(__file__).resolve().parents[2]
    full = load_train_config(repo / "configs" / "aepo-3b.toml")
    lora = load_train_config(repo / "configs" / "aepo-3b.toml", ['model.finetune="lora"'])
    assert full.rl.lr is None and lora.rl.lr is None
    assert (DEFAULT_LR[full.model.finetune], DEFAULT_LR[lora.model.finetune]) == (1e-6, 1e-4)
    assert warn_lora_rate(lora) == ""

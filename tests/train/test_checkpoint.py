"""Checkpoints: the adapter is a standard peft folder, a restore gives back weights, optimizer and RNG states
exactly, an incomplete folder is ignored, and a checkpoint of another model is refused with a clear message."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from policy.backends.hf import TransformersBackend
from policy.presets import Decoding, preset_for
from policy.tiny import build_tiny_qwen25vl
from train.checkpoint import CheckpointError, latest_checkpoint, load_checkpoint, save_checkpoint
from train.learner import LORA_TARGETS, Learner
from train.samples import TrainSample

pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")

PRESET = preset_for("tiny-qwen", fmt="qwen2.5-vl", min_pixels=4 * 28 * 28, max_pixels=16 * 28 * 28,
                    decoding=Decoding(temperature=0.0, max_new_tokens=8))
TARGETS = (*LORA_TARGETS, "lm_head")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen25vl(tmp_path_factory.mktemp("tiny") / "model", seed=0)


def groups() -> list[list[TrainSample]]:
    image = np.random.default_rng(0).integers(0, 256, (56, 56, 3), dtype=np.uint8)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Task."}]}]
    return [[TrainSample(messages, image, (56, 56), (56, 56), "x", (50 + k, 60, 70 + k), None, float(k), group_id=0)
             for k in range(3)]]


def learner_for(tiny_dir: Path, **kw) -> Learner:
    return Learner(TransformersBackend(tiny_dir, preset=PRESET), algo="aepo", lr=1e-2, lora_targets=TARGETS, **kw)


def test_restore_gives_back_weights_optimizer_and_rng(tiny_dir, tmp_path):
    torch.manual_seed(0)
    a = learner_for(tiny_dir)
    for _ in range(2):
        a.step(groups())
    path = save_checkpoint(tmp_path, 2, a, {"data": {"index": 7}}, keep=2)
    assert path.name == "step-000002" and (path / "COMPLETE").is_file()
    cfg = json.loads((path / "adapter" / "adapter_config.json").read_text())
    assert cfg["r"] == 8 and (path / "adapter" / "adapter_model.safetensors").is_file()
    expected_draw = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    a.step(groups())
    after_a = a.trainable_state()

    random.seed(123), np.random.seed(123), torch.manual_seed(123)  # scramble: the restore must put them back
    b = learner_for(tiny_dir)
    ck = load_checkpoint(tmp_path, b)  # a run folder: its latest checkpoint
    assert ck.step == 2 and ck.state == {"data": {"index": 7}} and b.steps == 2 and b.adapter_version == "learner@2"
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expected_draw
    b.step(groups())
    after_b = b.trainable_state()
    assert after_a.keys() == after_b.keys()
    for name in after_a:  # same weights and the same Adam moments give the same third step
        assert torch.allclose(after_a[name], after_b[name], atol=1e-7), name


def test_the_adapter_folder_loads_with_peft(tiny_dir, tmp_path):
    from peft import PeftModel
    from transformers import Qwen2_5_VLForConditionalGeneration

    torch.manual_seed(0)
    a = learner_for(tiny_dir)
    a.step(groups()), a.step(groups())
    path = save_checkpoint(tmp_path, 2, a, {})
    base = Qwen2_5_VLForConditionalGeneration.from_pretrained(tiny_dir)
    loaded = PeftModel.from_pretrained(base, str(path / "adapter"))
    mine = {n.replace(".learner.", "."): p for n, p in a.trainable_state().items()}
    theirs = {n.replace(".default.", "."): p.detach() for n, p in loaded.named_parameters() if "lora_" in n}
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[n], theirs[n]) for n in mine)
    # transformers' own adapter loading reads the same folder and computes the same logits
    plain = Qwen2_5_VLForConditionalGeneration.from_pretrained(tiny_dir)
    plain.load_adapter(str(path / "adapter"))
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        assert torch.allclose(plain(input_ids=ids).logits, loaded(input_ids=ids).logits, atol=1e-5)


def test_incomplete_checkpoints_are_ignored_and_old_ones_pruned(tiny_dir, tmp_path):
    a = learner_for(tiny_dir)
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, a, {}, keep=2)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["step-000002", "step-000003"]
    broken = tmp_path / "checkpoints" / "step-000009"
    shutil.copytree(tmp_path / "checkpoints" / "step-000003", broken)
    (broken / "COMPLETE").unlink()  # a crash mid-save
    assert latest_checkpoint(tmp_path).name == "step-000003"
    with pytest.raises(CheckpointError, match="not a complete checkpoint"):
        load_checkpoint(broken, a)


def test_a_checkpoint_of_another_model_is_refused(tiny_dir, tmp_path):
    other_dir = build_tiny_qwen25vl(tmp_path / "other", seed=0, variant="small")
    other = Learner(TransformersBackend(other_dir, preset=PRESET), algo="aepo", lora_targets=TARGETS)
    save_checkpoint(tmp_path / "run", 1, other, {})
    mine = learner_for(tiny_dir)
    with pytest.raises(CheckpointError, match=r"another model or setup \(hidden_size: checkpoint 512 vs this run 64"):
        load_checkpoint(tmp_path / "run", mine)

    save_checkpoint(tmp_path / "run8", 1, learner_for(tiny_dir), {})
    with pytest.raises(CheckpointError, match="lora_r: checkpoint 8 vs this run 4"):
        load_checkpoint(tmp_path / "run8", learner_for(tiny_dir, lora_rank=4))

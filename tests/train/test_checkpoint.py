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
from train.config import RLConfig, TrainModelConfig
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


def learner_for(tiny_dir: Path, **model) -> Learner:
    return Learner(TransformersBackend(tiny_dir, preset=PRESET), RLConfig(lr=1e-2),
                   TrainModelConfig(lora_targets=TARGETS, **model), algo="aepo")


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
    other = Learner(TransformersBackend(other_dir, preset=PRESET), model=TrainModelConfig(lora_targets=TARGETS), algo="aepo")
    save_checkpoint(tmp_path / "run", 1, other, {})
    mine = learner_for(tiny_dir)
    with pytest.raises(CheckpointError, match=r"another model or setup \(hidden_size: checkpoint 512 vs this run 64"):
        load_checkpoint(tmp_path / "run", mine)

    save_checkpoint(tmp_path / "run8", 1, learner_for(tiny_dir), {})
    with pytest.raises(CheckpointError, match="lora_r: checkpoint 8 vs this run 4"):
        load_checkpoint(tmp_path / "run8", learner_for(tiny_dir, lora_rank=4))


class _Payload:
    """Unpickling this object creates ``marker``: what a crafted checkpoint would do (or worse) under plain pickle."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


@pytest.mark.parametrize("name", ["learner.pt", "rng.pt"])
def test_a_checkpoint_with_a_pickle_payload_is_refused_and_runs_no_code(tiny_dir, tmp_path, name):
    a = learner_for(tiny_dir)
    path = save_checkpoint(tmp_path, 1, a, {})
    marker = tmp_path / "pwned"
    good = torch.load(path / name, weights_only=True)
    torch.save({**good, "extra": _Payload(marker)}, path / name)
    b = learner_for(tiny_dir)
    before = {n: p.clone() for n, p in b.trainable_state().items()}
    with pytest.raises(CheckpointError, match=rf"{name} holds objects other than tensors.*it asks for .*open.*"
                                              r"could run code.*re-create the checkpoint"):
        load_checkpoint(path, b)
    assert not marker.exists()
    assert b.steps == 0 and all(torch.equal(before[n], p) for n, p in b.trainable_state().items())  # untouched


def _as_format_1(path: Path, python_state, numpy_state, torch_state) -> None:
    """Rewrite a checkpoint as format 1 wrote it: every RNG state pickled into rng.pt, NumPy's as an array."""
    torch.save({"python": python_state, "numpy": numpy_state, "torch": torch_state}, path / "rng.pt")
    (path / "rng.json").unlink()
    state = json.loads((path / "state.json").read_text())
    (path / "state.json").write_text(json.dumps({**state, "format": 1}))


def test_a_format_1_checkpoint_still_resumes_and_a_crafted_one_is_refused(tiny_dir, tmp_path):
    a = learner_for(tiny_dir)
    path = save_checkpoint(tmp_path, 1, a, {"data": {"index": 3}})
    random.seed(5), np.random.seed(5), torch.manual_seed(5)
    _as_format_1(path, random.getstate(), np.random.get_state(), torch.get_rng_state())
    expected = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    ck = load_checkpoint(path, learner_for(tiny_dir))
    assert ck.step == 1 and ck.state == {"data": {"index": 3}}
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expected
    # the same older file with something besides NumPy's array in it: refused, nothing run
    marker = tmp_path / "pwned"
    crafted = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
               "x": _Payload(marker)}
    torch.save(crafted, path / "rng.pt")
    with pytest.raises(CheckpointError, match="older format .* re-create the checkpoint"):
        load_checkpoint(path, learner_for(tiny_dir))
    assert not marker.exists()


def test_the_rng_states_are_plain_data(tiny_dir, tmp_path):
    path = save_checkpoint(tmp_path, 1, learner_for(tiny_dir), {})
    rng = json.loads((path / "rng.json").read_text())
    assert set(rng) == {"python", "numpy"} and rng["numpy"]["kind"] == "MT19937" and len(rng["numpy"]["key"]) == 624
    tensors = torch.load(path / "rng.pt", weights_only=True)
    assert all(isinstance(v, torch.Tensor) for v in [tensors["torch"], *tensors.get("cuda", [])])
    assert json.loads((path / "state.json").read_text())["format"] == 2

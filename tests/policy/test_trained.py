"""``handeye.json`` beside a run's weights (``policy.trained``): written whole, read back, and restoring the model
settings a run was trained with, with what is given explicitly winning, through ``agent.config.load_config`` as
``agent run`` / ``eval`` read it. (The end-to-end path, agent train then agent run, is in
tests/agent/test_model_policy.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.config import load_config
from agent.errors import ConfigError
from policy.errors import TrainedSettingsError
from policy.presets import preset_for
from policy.trained import SETTINGS_FILE, Finetune, TrainedSettings, find_trained, restore_trained
from agent.config import ModelConfig


def lora_run(root: Path, *, fmt: str = "infigui-g1", variant: str = "no_think", base: str = "../tiny-model") -> Path:
    """A run folder as agent train leaves it (the weights themselves are not read here)."""
    (root / "adapter").mkdir(parents=True)
    (root / "tiny-model").mkdir()
    preset = preset_for("x", fmt, variant=variant, min_pixels=3136, max_pixels=50176)
    TrainedSettings.of(preset, "lora", base).write(root / "adapter")
    return root


def full_run(root: Path) -> Path:
    (root / "model").mkdir(parents=True)
    preset = preset_for("x", "ui-tars-v1", variant="grounding", min_pixels=3136, max_pixels=100352)
    TrainedSettings.of(preset, "full", "bytedance-research/UI-TARS-2B-SFT").write(root / "model")
    return root


def model(*sets: str) -> ModelConfig:
    return load_config(None, ['policy.kind="transformers"', *sets]).model


def test_the_file_is_written_whole_and_reads_back(tmp_path):
    run = lora_run(tmp_path / "run")
    data = json.loads((run / "adapter" / SETTINGS_FILE).read_text())
    assert data == {"schema": 1, "finetune": "lora", "base_model": "../tiny-model", "format": "infigui-g1",
                    "variant": "no_think", "min_pixels": 3136, "max_pixels": 50176}
    assert [p.name for p in (run / "adapter").iterdir()] == [SETTINGS_FILE]  # no temporary left
    assert TrainedSettings.read(run / "adapter") == TrainedSettings(Finetune.LORA, "../tiny-model", "infigui-g1",
                                                                    "no_think", 3136, 50176)
    # UI-TARS v1 is its own --format name (another coordinate grid than 1.5)
    assert TrainedSettings.read(full_run(tmp_path / "full") / "model").format == "ui-tars-v1"
    assert find_trained(run)[0] == run / "adapter" and find_trained(run / "adapter")[0] == run / "adapter"
    assert find_trained(tmp_path / "nothing") is None and find_trained(run / "tiny-model") is None


def test_a_lora_run_folder_gives_base_model_adapter_and_its_preset(tmp_path):
    run = lora_run(tmp_path / "run")
    m = model(f'model.id="{run}"')
    assert (m.id, m.adapter) == (str((run / "tiny-model").resolve()), str(run / "adapter"))
    assert (m.format, m.variant, m.min_pixels, m.max_pixels) == ("infigui-g1", "no_think", 3136, 50176)
    # --adapter DIR (model.adapter), its run folder or the adapter folder, with no model id: the same
    for given in (run, run / "adapter"):
        assert model(f'model.adapter="{given}"') == m


def test_what_is_given_explicitly_wins(tmp_path):
    run = lora_run(tmp_path / "run")
    m = model(f'model.adapter="{run}"', 'model.variant="think"', "model.max_pixels=12544",
              'model.id="Qwen/Qwen2.5-VL-3B-Instruct"')
    assert (m.id, m.variant, m.min_pixels, m.max_pixels) == ("Qwen/Qwen2.5-VL-3B-Instruct", "think", 3136, 12544)
    assert m.format == "infigui-g1"  # the registered id's own family (qwen2.5-vl) is not what the adapter learnt
    other = model(f'model.adapter="{run}"', 'model.format="gui-r1"')
    assert other.format == "gui-r1" and other.variant == ""  # infigui's variant is not one of GUI-R1's prompts


def test_a_screen_variant_is_left_to_the_device(tmp_path):
    run = lora_run(tmp_path / "run", fmt="ui-tars-1.5", variant="computer")
    m = model(f'model.id="{run}"')
    assert m.format == "ui-tars" and m.variant == ""
    assert m.preset("phone").variant == "mobile" and m.preset("computer").variant == "computer"
    grounding = model(f'model.id="{lora_run(tmp_path / "g", fmt="ui-tars-1.5", variant="grounding")}"')
    assert grounding.preset("phone").variant == "grounding"  # a deliberate choice stays


def test_a_full_fine_tune_is_its_model_folder(tmp_path):
    run = full_run(tmp_path / "run")
    for given in (run, run / "model"):
        m = model(f'model.id="{given}"')
        assert (m.id, m.adapter, m.format, m.variant, m.max_pixels) == (
            str(run / "model"), "", "ui-tars-v1", "grounding", 100352)
        assert m.preset("computer").coord_mode.value == "relative_1000"


def test_contradictions_and_bad_files_are_refused_with_what_to_do(tmp_path):
    run, full = lora_run(tmp_path / "run"), full_run(tmp_path / "full")
    other = lora_run(tmp_path / "other")
    with pytest.raises(ConfigError, match="is a LoRA run whose adapter is .*give one of them"):
        model(f'model.id="{run}"', f'model.adapter="{other}"')
    with pytest.raises(ConfigError, match="holds a full fine-tune's model .*--policy transformers:"):
        model(f'model.adapter="{full}"')
    (run / "adapter" / SETTINGS_FILE).write_text('{"schema": 9}')
    with pytest.raises(TrainedSettingsError, match="schema 9, this handeye reads schema 1"):
        restore_trained(ModelConfig(id=str(run)))
    (run / "adapter" / SETTINGS_FILE).write_text('{"schema": 1, "finetune": "lora"}')
    with pytest.raises(ConfigError, match="cannot be read .*KeyError"):
        model(f'model.id="{run}"')


def test_old_folders_and_other_policies_are_left_as_they_are(tmp_path):
    old = tmp_path / "old"
    (old / "adapter").mkdir(parents=True)  # a run written before handeye.json
    m = model('model.id="Qwen/Qwen2.5-VL-3B-Instruct"', f'model.adapter="{old / "adapter"}"')
    assert (m.adapter, m.format, m.min_pixels) == (str(old / "adapter"), "", None)
    run = lora_run(tmp_path / "run")
    served = load_config(None, ['policy.kind="openai"', f'model.id="{run}"']).model
    assert served.id == str(run) and served.format == ""  # a served name is the server's, not a folder to read

"""Configuration: the shipped config.toml, typed loading, closest-key errors, --set overrides."""

from __future__ import annotations

import dataclasses
import tomllib

import pytest

from agent.config import SECTIONS, Config, field_docs, load_config, parse_override, render_defaults
from agent.errors import ConfigError
from tests.conftest import REPO


def test_shipped_config_toml_is_the_defaults_and_documents_every_option():
    path = REPO / "config.toml"
    assert load_config(path) == Config()
    text = path.read_text()
    assert text == render_defaults(), "config.toml is stale: regenerate it with agent.config.render_defaults()"
    parsed = tomllib.loads(text)
    for name, cls in SECTIONS.items():
        docs = field_docs(cls)
        for f in dataclasses.fields(cls):
            assert docs.get(f.name), f"{name}.{f.name} has no docstring"
            if getattr(cls(), f.name) is None:  # unset by default: shown as a comment to fill in
                assert f.name not in parsed[name]
                assert f"# {docs[f.name]}\n# {f.name} = ...  (unset)\n" in text, f"{name}.{f.name} not shown"
            else:
                assert f.name in parsed[name], f"{name}.{f.name} missing from config.toml"
                assert f"# {docs[f.name]}\n{f.name} = " in text


def test_no_file_means_defaults():
    assert load_config(None) == Config()


def test_unknown_key_names_the_closest_valid_key(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text("[agent]\nmax_step = 4\n")
    with pytest.raises(ConfigError, match=r"unknown option agent\.max_step: did you mean 'max_steps'\?"):
        load_config(p)


def test_unknown_section_names_the_closest_section(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text("[webb]\nheadless = true\n")
    with pytest.raises(ConfigError, match=r"unknown config section \[webb\]: did you mean 'web'\?"):
        load_config(p)


@pytest.mark.parametrize(
    "toml, message",
    [
        ("[agent]\nmax_steps = 'ten'\n", r"agent\.max_steps must be int, got 'ten'"),
        ("[agent]\nmax_steps = true\n", r"agent\.max_steps must be int, got True"),
        ("[web]\nheadless = 1\n", r"web\.headless must be bool"),
        ("[agent]\nmax_steps = 0\n", r"\[agent\] max_steps must be at least 1, got 0"),
        ("[web]\nframe_scale = 'retina'\n", r"frame_scale='retina' must be 'device' or 'css'"),
        ("[guard]\nrefuse = ['clik']\n", r"'clik' is not an action kind \(did you mean 'click'\?\)"),
        ("[agent\n", r"is not valid TOML"),
        ("[secrets]\npassword = 'hunter2'\n", r"must name an environment variable"),
    ],
)
def test_bad_values_say_what_is_wrong(tmp_path, toml, message):
    p = tmp_path / "c.toml"
    p.write_text(toml)
    with pytest.raises(ConfigError, match=message):
        load_config(p)


def test_missing_file():
    with pytest.raises(ConfigError, match="does not exist"):
        load_config("/nonexistent/handeye.toml")


def test_overrides_are_typed_and_win_over_the_file(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text("[agent]\nmax_steps = 4\n[secrets]\npw = 'env:PW'\n")
    cfg = load_config(p, ["agent.max_steps=7", "web.headless=false", "device.url=http://127.0.0.1:8000/x?a=1",
                          "web.extra_args=['--foo', '--bar']", "settle.deadline_s=2"])
    assert cfg.agent.max_steps == 7
    assert cfg.section("web").headless is False
    assert cfg.device.url == "http://127.0.0.1:8000/x?a=1"
    assert cfg.section("web").extra_args == ("--foo", "--bar")
    assert cfg.settle.deadline_s == 2.0 and isinstance(cfg.settle.deadline_s, float)
    assert cfg.to_dict()["secrets"] == {"pw": "env:PW"}


@pytest.mark.parametrize("bad", ["max_steps=3", "agent.max_steps", "=3"])
def test_malformed_override(bad):
    with pytest.raises(ConfigError, match="section.key=value"):
        parse_override(bad)


def test_config_is_frozen():
    cfg = Config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.agent.max_steps = 3  # type: ignore[misc]


# -- one configuration story: unset is None, one model key, [online] a section -------------------------------------
def test_files_written_before_keep_reading_and_say_what_to_write_now(tmp_path, caplog):
    """A training file of the older form (``model.path``, and 0 / -1 for "unset") still reads, each old spelling
    with a warning that names the new one; the same values from Python are refused with the reason."""
    from agent.config import load_train_config
    from train.config import RLConfig

    old = tmp_path / "old.toml"
    old.write_text('[model]\npath = "tiny"\nmin_pixels = 0\n[rl]\nlr = 0\nkl_coef = -1\nmax_staleness = -1\n'
                   'clip_high = 0\ndual_clip = 0\nmax_is_ratio = 0\n[online]\nmax_policy_lag = -1\nmax_steps = 0\n')
    with caplog.at_level("WARNING", logger="agent.config"):
        cfg = load_train_config(old)
    assert cfg.model.id == "tiny" and cfg.model.min_pixels is None
    rl = cfg.rl
    assert (rl.lr, rl.kl_coef, rl.max_staleness, rl.clip_high, rl.dual_clip, rl.max_is_ratio) == (None,) * 6
    assert (cfg.online.max_policy_lag, cfg.online.max_steps) == (None, None)
    said = caplog.text
    assert "model.path is now model.id" in said and "rl.kl_coef = -1 used to mean unset" in said
    assert said.count("used to mean unset") == 9
    both = tmp_path / "both.toml"
    both.write_text('[model]\npath = "a"\nid = "b"\n')
    with caplog.at_level("WARNING", logger="agent.config"):
        assert load_train_config(both).model.id == "b"
    assert "model.path is the old name of model.id, which is set too: model.path is ignored" in caplog.text
    for name, value in (("lr", 0.0), ("kl_coef", -1.0), ("dual_clip", 0.0), ("max_staleness", -1)):
        with pytest.raises(ValueError, match=f"{name}={value} was the old way to write unset"):
            RLConfig(**{name: value})


def test_unset_is_written_none_and_a_real_zero_stays_zero():
    from agent.config import load_train_config

    cfg = load_train_config(None, ["rl.dual_clip=none", "rl.kl_coef=0", "rl.max_staleness=0", "rl.lr=3e-5",
                                   'checkpoint.keep="NONE"'])
    assert cfg.rl.dual_clip is None and cfg.rl.kl_coef == 0.0 and cfg.rl.max_staleness == 0 and cfg.rl.lr == 3e-5
    assert cfg.checkpoint.keep is None
    with pytest.raises(ConfigError, match=r"rl.lr must be float, got 'fast' \(str\) \(or none, to leave it unset\)"):
        load_train_config(None, ["rl.lr=fast"])


def test_the_learner_takes_its_defaults_from_the_configs_it_is_given():
    """One place for the update's defaults: ``Learner`` reads ``[rl]`` and ``[model]``; unset fields take the
    algorithm's and the fine-tuning mode's values (hand-listed: docs/algorithms.md, "Defaults against the papers")."""
    import inspect

    from train.config import RLConfig
    from train.learner import Learner

    params = set(inspect.signature(Learner).parameters)
    assert params == {"backend", "rl", "model", "algo", "total_steps", "adapter_name", "accelerator", "seed"}
    assert RLConfig().lr is None and RLConfig().clip_high is None and RLConfig().kl_coef is None


def test_online_settings_are_a_section_settable_with_set(tmp_path):
    """Every online setting, the phones' serials included, comes from ``[online]`` or ``--set online.*``; a flag
    wins over both."""
    from agent.cli import build_parser
    from agent.cli.train_online import session_settings

    conf = tmp_path / "train.toml"
    conf.write_text('[model]\nid = "tiny"\n[online]\nenv = "android/wifi"\ndevice_kind = "android"\nactors = 2\n'
                    'max_episodes = 7\n')
    args = build_parser().parse_args(["train", "--online", "--config", str(conf), "--run-dir", str(tmp_path / "run"),
                                      "--set", 'online.serials=["phone-1", "phone-2"]', "--set",
                                      "online.torch_threads=1", "--parallel", "1"])
    config, online = session_settings(args)
    assert online is config.online
    assert (online.env, online.device_kind, online.serials, online.max_episodes, online.torch_threads,
            online.actors) == ("android/wifi", "android", ("phone-1", "phone-2"), 7, 1, 1)
    args = build_parser().parse_args(["train", "--online", "--set", 'model.id="tiny"'])
    with pytest.raises(ConfigError, match="needs the environment the actors run: --env ENV"):
        session_settings(args)


def test_an_online_run_folder_of_the_older_form_resumes(tmp_path):
    """``--resume`` of a run folder written before ``[online]`` was a section: its settings (0 / -1 for unset, a key
    since removed) and training overrides (``model.path``) read back."""
    import json

    from agent.config import load_train_config
    from agent.online.settings import load_session

    (tmp_path / "online.json").write_text(json.dumps({
        "online": {"env": "generated/click", "devices": 3, "max_policy_lag": -1, "max_steps": 0, "serials": [],
                   "retired_setting": 1},
        "train_overrides": ['model.path="tiny"', "rl.lr=0.0", 'train.stage="rl"']}))
    cfg = load_train_config(None, load_session(tmp_path))
    assert (cfg.online.env, cfg.online.actors, cfg.online.max_policy_lag, cfg.online.max_steps) == (
        "generated/click", 3, None, None)
    assert cfg.model.id == "tiny" and cfg.rl.lr is None


def test_online_phones_from_the_command_line(tmp_path):
    """``agent train --online --device android:SERIAL`` once per actor: the kind, the serials in order and as many
    actors; two kinds in one session are refused."""
    from agent.cli import build_parser
    from agent.cli.train_online import session_settings

    args = build_parser().parse_args(["train", "--online", "--env", "android/wifi", "--set", 'model.id="tiny"',
                                      "--run-dir", str(tmp_path / "run"), "--device", "android:phone-1",
                                      "--device", "android:10.0.0.7:5555"])
    _, online = session_settings(args)
    assert (online.device_kind, online.serials, online.actors) == ("android", ("phone-1", "10.0.0.7:5555"), 2)
    args = build_parser().parse_args(["train", "--online", "--env", "android/wifi", "--set", 'model.id="tiny"',
                                      "--device", "android:a", "--device", "web"])
    with pytest.raises(ConfigError, match="--device names android and web devices"):
        session_settings(args)


def test_the_image_token_check_can_be_turned_off_from_the_command_line():
    from agent.builders import build_model_policy

    served = ["policy.kind=openai", "model.id=m", "model.format=qwen2.5-vl", "model.url=http://127.0.0.1:9"]
    assert build_model_policy(load_config(None, [*served, "model.check_image_tokens=false"])
                              ).backend.check_image_tokens is False
    assert build_model_policy(load_config(None, served)).backend.check_image_tokens is True


def test_each_recorder_s_settings_are_a_section_settable_with_set(tmp_path):
    """[web_record], [desktop_record], [android_record] (the registry's record_config per kind), from a file and
    --set; what a run folder's run.json keeps reads back; a bad value names the section and the rule."""

    from devices.android.gestures import AndroidRecordOptions
    from devices.desktop.record_config import DesktopRecordConfig
    from devices.web.config import WebRecordConfig

    assert {k: type(v) for k, v in Config().recorders.items()} == {
        "web": WebRecordConfig, "desktop": DesktopRecordConfig, "android": AndroidRecordOptions}
    path = tmp_path / "c.toml"
    path.write_text('[desktop_record]\nmask_text = true\npause_keys = ["Control", "Shift", "p"]\n'
                    '[android_record]\nlong_press_s = 0.7\n')
    cfg = load_config(path, ['desktop_record.stop_keys="ctrl+shift+q"', "device.kind=desktop"])
    assert cfg.record_settings() == DesktopRecordConfig(mask_text=True, pause_keys=("Control", "Shift", "p"),
                                                        stop_keys="ctrl+shift+q")
    assert cfg.record_settings("android") == AndroidRecordOptions(long_press_s=0.7)
    assert cfg.record_settings("web") == WebRecordConfig()
    saved = tmp_path / "saved.toml"
    import json

    saved.write_text("\n".join(f"[{name}]\n" + "\n".join(f"{k} = {json.dumps(v)}" for k, v in values.items())
                               for name, values in cfg.to_dict().items() if name.endswith("_record")))
    assert load_config(saved).recorders == cfg.recorders
    with pytest.raises(ConfigError, match=r"\[android_record\] scroll_axis_ratio=2.0 must be at least 1 and "
                                          r"keyboard_fraction=1.5 within \(0, 1\)"):
        load_config(None, ["android_record.keyboard_fraction=1.5"])
    with pytest.raises(ConfigError, match=r"desktop_record.pause_keys must be a list of strings or str, got 5"):
        load_config(None, ["desktop_record.pause_keys=5"])


def test_demonstrations_go_to_runs_demos_unless_told_otherwise():
    from pathlib import Path

    assert load_config(None).record.demos_folder() == Path("runs/demos")
    assert load_config(None, ['record.runs_dir="/data/runs"']).record.demos_folder() == Path("/data/runs/demos")
    assert load_config(None, ['record.demos_dir="mine"']).record.demos_folder() == Path("mine")
    assert load_config(None).record.runs_dir == "runs"  # agent run's folder is unchanged
    with pytest.raises(ConfigError, match="demos_dir must name a folder"):
        load_config(None, ['record.demos_dir=""'])

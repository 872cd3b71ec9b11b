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

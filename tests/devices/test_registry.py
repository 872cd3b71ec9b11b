"""The device registry: one entry per device kind, which every command, the online session and the fleet actor ask.

A kind added from outside handeye's packages (``tests/support/kiosk``: a driver package and one line in
``KIND_MODULES``) is driven by ``agent run``, listed by ``agent devices``, checked by ``agent doctor``, configured
by its own ``[kiosk]`` section and ``--device kiosk:TERMINAL``, and ruled on by the online session, with no line of
``agent/`` knowing it.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import pytest

from agent.cli import main as agent_main
from agent.config import config_sections, load_config
from agent.errors import ConfigError
from agent.online.settings import OnlineError, check_actors
from devices import registry
from devices.errors import UnknownDeviceKind
from devices.settle import SettleConfig
from envs.errors import EnvError
from envs.registry import all_specs, register

KIOSK_MODULE = "tests.support.kiosk.kind"


@pytest.fixture
def kiosk(monkeypatch):
    """The kiosk kind registered as a newcomer would register it; gone again after the test."""
    sys.modules.pop(KIOSK_MODULE, None)
    monkeypatch.setattr(registry, "KIND_MODULES", (*registry.KIND_MODULES, KIOSK_MODULE))
    from tests.support.kiosk.device import TERMINALS

    TERMINALS.clear()
    yield registry.device_kind("kiosk")
    registry.REGISTRY.pop("kiosk", None)
    sys.modules.pop(KIOSK_MODULE, None)


def test_the_built_in_kinds_and_the_default():
    assert registry.device_kinds() == ("web", "desktop", "android")
    assert registry.DEFAULT_KIND == registry.device_kinds()[0]
    assert load_config().device.kind == registry.DEFAULT_KIND


@pytest.mark.parametrize("name", ["web", "desktop", "android"])
def test_each_kind_builds_its_device_unstarted_with_the_actions_it_declares(name):
    kind = registry.device_kind(name)
    section = kind.config()  # every field has a default
    device = kind.build(section, SettleConfig())
    assert device.name == kind.name
    assert device.supported_actions == kind.actions
    assert config_sections()[name] is kind.config


def test_device_forms_are_the_registry_s():
    assert registry.parse_device("web")[0].name == "web"
    kind, address = registry.parse_device("android:emulator-5554")
    assert (kind.name, address) == ("android", "emulator-5554")
    assert kind.configured(kind.config(), address).serial == "emulator-5554"
    assert kind.selector(address) == "android:emulator-5554" and registry.device_kind("web").selector() == "web"
    for bad in ("web:8080", "android:", "phone", "Web"):
        with pytest.raises(UnknownDeviceKind, match="use web, desktop, android or android:SERIAL"):
            registry.parse_device(bad)
    with pytest.raises(UnknownDeviceKind, match="did you mean 'android'"):
        registry.device_kind("androd")
    with pytest.raises(UnknownDeviceKind, match="takes no address"):
        registry.device_kind("web").configured(registry.device_kind("web").config(), "x")


def test_a_kind_s_rules_for_actors_in_one_process():
    web, desktop, android = (registry.device_kind(k) for k in ("web", "desktop", "android"))
    assert web.check_actors(8) == ""
    assert "would share one screen" in desktop.check_actors(2) and desktop.check_actors(1) == ""
    assert android.check_actors(2, ["a"]) == ("2 android actors need 2 phone serials (one each: "
                                              "OnlineConfig.serials), got 1")
    assert android.check_actors(2, ["a", "b"]) == "" and android.check_actors(1) == ""


def test_the_session_asks_the_environment_s_registration_which_kind_it_runs_on():
    with pytest.raises(OnlineError, match="generated/click runs on a web device, not --device android"):
        check_actors("generated/click", "android", 1)
    with pytest.raises(OnlineError, match="would share one screen"):
        check_actors("desktop/click", "desktop", 2)
    check_actors("android/wifi", "android", 2, ("p1", "p2"))
    with pytest.raises(OnlineError, match="no environment 'generated/clik'"):
        check_actors("generated/clik", "web", 1)


def test_every_registered_environment_names_a_registered_device_kind():
    kinds = set(registry.device_kinds())
    specs = all_specs()
    assert specs
    unnamed = [s.name for s in specs if s.device_kind not in kinds and "cannot be loaded" not in s.description]
    assert unnamed == []
    with pytest.raises(EnvError, match="'phone' is not a device kind"):
        register("nowhere/x", "envs.generated.env:GeneratedEnv", "nowhere", device_kind="phone")


def test_a_kind_must_say_which_field_its_address_sets():
    web = registry.device_kind("web")
    with pytest.raises(ValueError, match="address and address_field go together"):
        replace(web, address="PORT")
    with pytest.raises(ValueError, match="WebConfig has no field 'port'"):
        replace(web, address="PORT", address_field="port")


# -- a kind added from outside ---------------------------------------------------------------------------------------
def test_a_new_kind_gets_a_config_section_and_a_device_form(kiosk):
    assert "kiosk" in registry.device_kinds()
    cfg = load_config(None, ["device.kind=kiosk", "kiosk.width=32"])
    assert cfg.section().width == 32 and cfg.section("web").headless is True
    assert cfg.to_dict()["kiosk"] == {"terminal": "", "width": 32, "height": 48}
    with pytest.raises(ConfigError, match="unknown option kiosk.widht: did you mean 'width'"):
        load_config(None, ["kiosk.widht=32"])
    with pytest.raises(ConfigError, match=r"\[kiosk\] width and height must be at least 1"):
        load_config(None, ["kiosk.height=0"])
    kind, address = registry.parse_device("kiosk:hall-2")
    assert kind.configured(cfg.section("kiosk"), address).terminal == "hall-2"


def test_agent_run_drives_a_new_kind(kiosk, tmp_path, capsys):
    from tests.support.kiosk.device import TERMINALS

    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"kind": "click", "point": [0.5, 0.5]}, {"kind": "open_url", "text": "http://x"},
                                  {"kind": "finish"}]))
    code = agent_main(["run", "Tap the button", "--device", "kiosk:hall-2", "--policy", "scripted", "--script",
                       str(script), "--runs-dir", str(tmp_path / "runs"), "--set", "kiosk.width=100"])
    out = capsys.readouterr().out
    assert code == 0, out
    device = TERMINALS["hall-2"]
    assert device.taps == [(50.0, 24.0)]  # the point in the kiosk's own pixels: 0.5 x 100, 0.5 x 48
    assert device.closed
    (episode,) = (tmp_path / "runs").glob("*/ep*/episode.json")
    record = json.loads(episode.read_text())
    assert record["device"] == {"kind": "kiosk", "terminal": "hall-2", "size": [100, 48]}
    assert record["outcome"] == "claimed"
    steps = [json.loads(line) for line in (episode.parent / "steps.jsonl").read_text().splitlines()]
    assert [s["action"]["kind"] for s in steps] == ["click", "open_url", "finish"]
    assert steps[1]["error"] == {"type": "UnsupportedAction", "message": "kiosk device cannot open_url"}
    assert steps[1]["executed"] is False and steps[0]["executed"] is True


def test_a_new_kind_is_listed_and_checked(kiosk, capsys):
    assert agent_main(["devices", "--set", "kiosk.terminal=lobby-1"]) == 0
    out = capsys.readouterr().out
    assert "kiosk (--device kiosk or --device kiosk:TERMINAL): A touch-screen kiosk (a test device kind)." in out
    assert "terminal lobby-1: 64x48" in out
    assert agent_main(["doctor"]) == 0
    assert "ok kiosk firmware: v1 (built in)" in " ".join(capsys.readouterr().out.split())


def test_a_new_kind_without_a_url_asks_for_a_task_and_refuses_a_url(kiosk, tmp_path, capsys):
    assert agent_main(["run", "--device", "kiosk", "--runs-dir", str(tmp_path)]) == 2
    assert 'agent run "Tap the button" --device kiosk' in " ".join(capsys.readouterr().out.split())
    assert agent_main(["run", "Tap", "--device", "kiosk", "--url", "http://127.0.0.1:9/", "--runs-dir",
                       str(tmp_path)]) == 2
    assert "the kiosk device starts on its own screen" in " ".join(capsys.readouterr().out.split())
    assert agent_main(["record", "Tap", "--device", "kiosk", "--runs-dir", str(tmp_path)]) == 2
    assert "the kiosk device cannot record" in " ".join(capsys.readouterr().out.split())


def test_docs_actions_table_says_what_each_kind_performs():
    """docs/actions.md's table of kinds, one column per device kind, read back against the registry: a cell with a
    mark means the kind performs every action of its row (or only those it names, "`click` only"), an empty cell
    none of them."""
    import re

    from devices.actions import ActionKind
    from tests.conftest import REPO

    text = (REPO / "docs" / "actions.md").read_text(encoding="utf-8")
    header = next(line for line in text.splitlines() if line.startswith("| kind | fields |"))
    columns = [c.strip() for c in header.strip("|").split("|")][2:]
    assert columns == list(registry.device_kinds())
    rows = [line for line in text.splitlines() if line.startswith("| `") and line.count("|") == len(columns) + 3]
    covered: set[str] = set()
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        kinds = re.findall(r"`(\w+)`", cells[0])
        covered |= set(kinds)
        for name, cell in zip(columns, cells[2:]):
            performs = registry.device_kind(name).actions
            named = re.findall(r"`(\w+)` only", cell)
            for kind in kinds:
                expected = (kind in named) if named else (bool(cell) and not cell.startswith("the runner"))
                assert (ActionKind(kind) in performs) == expected, f"{kind} on {name}: the table says {cell!r}"
    assert covered == {k.value for k in ActionKind}

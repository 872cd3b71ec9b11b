"""``agent eval``'s devices: ``--parallel`` slots, each lending one device per kind to the environments that run
there. More environments than slots never means more browsers than slots, and ``--device android:SERIAL`` given
twice runs the suite on two phones (protocol-level test phones behind a private real adb server)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from agent.cli import main as agent_main
from agent.eval import evaluate
from agent.oracles import oracle_for
from tests.conftest import descendants
from tests.devices.test_android import _connect, _disconnect
from tests.support.adb import private_adb_server
from tests.support.fake_adbd import FakeAdbd, FakePhone

GENERATED = ["generated/click", "generated/click-easy", "generated/click-zh", "generated/click-dark",
             "generated/form", "generated/absent"]


def browsers() -> int:
    """Chromium browser processes below this test (a browser's own helpers, whose parent is Chromium, not
    counted)."""
    names = {}
    for pid in descendants(os.getpid()):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        names[pid] = (stat[stat.index("(") + 1:stat.rindex(")")], int(stat.rsplit(")", 1)[1].split()[1]))
    return sum(1 for name, parent in names.values()
               if "chrom" in name and "chrom" not in names.get(parent, ("", 0))[0])


def test_more_environments_than_slots_never_means_more_browsers(tmp_path):
    """Six environments, two slots: at every episode's end at most two browsers are alive, and none after."""
    seen: list[int] = []
    result = asyncio.run(evaluate(GENERATED, oracle_for, episodes=2, parallel=2, runs_dir=tmp_path,
                                  on_episode=lambda r: seen.append(browsers())))
    assert result.overall.episodes == 12 and result.overall.successes == 12
    assert len(seen) == 12 and max(seen) <= 2, seen
    assert browsers() == 0


def test_the_desktop_is_one_per_process(tmp_path):
    with pytest.raises(ValueError, match="the desktop device is one per process"):
        asyncio.run(evaluate(["desktop/click"], oracle_for, episodes=1, parallel=2, runs_dir=tmp_path))


@pytest.fixture
def adb_port(tmp_path):
    with private_adb_server(tmp_path / "adb-home") as port:
        yield port


def test_eval_runs_on_two_phones_given_as_devices(adb_port, tmp_path, capsys):
    phones = [FakePhone(physical=(360, 800)), FakePhone(physical=(360, 800))]
    with FakeAdbd(phones[0]) as one, FakeAdbd(phones[1]) as two:
        for adbd in (one, two):
            _connect(adb_port, adbd)
        try:
            code = agent_main(["eval", "--suite", "android", "--tasks", "wifi", "--episodes", "4", "--policy",
                               "oracle", "--device", f"android:{one.address}", "--device", f"android:{two.address}",
                               "--set", f"android.adb_port={adb_port}", "--set", "android.start_server=false",
                               "--runs-dir", str(tmp_path)])
        finally:
            for adbd in (one, two):
                _disconnect(adb_port, adbd)
    out = capsys.readouterr().out
    assert code == 0, out
    serials = [json.loads(p.read_text())["device"]["serial"] for p in tmp_path.glob("*/ep*/episode.json")]
    assert sorted(serials) == sorted([one.address] * 2 + [two.address] * 2), serials  # --parallel 2: one slot each
    scores = json.loads(next(tmp_path.glob("*/eval.json")).read_text())
    assert scores["overall"]["successes"] == 4, out
    assert json.loads(next(tmp_path.glob("*/run.json")).read_text())["parallel"] == 2


def test_more_slots_than_phones_is_refused(capsys):
    assert agent_main(["eval", "--suite", "android", "--device", "android:a", "--device", "android:b", "--parallel",
                       "3"]) == 2
    assert "--parallel 3 needs 3 android devices, one per slot; 2 given" in " ".join(capsys.readouterr().out.split())
    assert agent_main(["eval", "--suite", "generated", "--device", "android:a"]) == 2
    assert "no environment chosen here runs on the android device" in " ".join(capsys.readouterr().out.split())

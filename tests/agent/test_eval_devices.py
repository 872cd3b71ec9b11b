"""``agent eval``'s devices: ``--parallel`` slots, each lending one device per kind to the environments that run
there. More environments than slots never means more browsers than slots (counted from /proc all along the run,
not only between episodes, over generated and MiniWoB++ environments), a slot's device whose close hangs is killed
instead of outliving the evaluation, and ``--device android:SERIAL`` given twice runs the suite on two phones
(protocol-level test phones behind a private real adb server)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import uuid

import pytest

from agent.cli import main as agent_main
from agent.eval import evaluate
from agent.oracles import oracle_for
from devices.web import PlaywrightDevice, WebConfig
from tests.devices.test_android import _connect, _disconnect
from tests.support.adb import private_adb_server
from tests.support.browsers import alive, browsers, counting_browsers, drivers
from tests.support.fake_adbd import FakeAdbd, FakePhone

GENERATED = ["generated/click", "generated/click-easy", "generated/click-zh", "generated/click-dark",
             "generated/form", "generated/absent"]


MIXED = ["generated/click", "miniwob/click-button", "generated/form", "miniwob/click-test", "miniwob/focus-text",
         "generated/click-zh", "miniwob/click-dialog", "miniwob/enter-text", "miniwob/click-checkboxes"]


def test_an_evaluation_of_generated_and_miniwob_environments_never_has_more_browsers_than_slots(tmp_path, capsys):
    """`agent eval` as a user runs it, nine environments of both suites, two slots: never a third browser, at any
    moment of the run, and none after."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"kind": "click", "point": [0.5, 0.5]}, {"kind": "finish"}]))
    with counting_browsers() as seen:
        code = agent_main(["eval", "--suite", "miniwob", "--tasks", *MIXED, "--episodes", "1", "--parallel", "2",
                           "--policy", "scripted", "--script", str(script), "--runs-dir", str(tmp_path / "runs")])
    assert code == 0, capsys.readouterr().out
    scores = json.loads(next((tmp_path / "runs").glob("*/eval.json")).read_text())
    assert scores["overall"]["episodes"] == len(MIXED) and "aborted" not in scores["overall"]["outcomes"], scores
    assert max(seen) == 2 and len(seen) > len(MIXED), (max(seen), len(seen))
    assert browsers() == 0


def test_slots_whose_close_hangs_leave_no_browser_behind(tmp_path):
    """Both slots' Playwright drivers stop answering after the last episode (SIGSTOP: a driver starved of memory,
    as when a whole suite ran the machine out of it): the evaluation's closing of its slots still ends, and it ends
    with every browser and driver gone, not left running stopped."""
    tag = f"--handeye-eval-{uuid.uuid4().hex}"
    total = 4

    def device(kind: str, slot: int) -> PlaywrightDevice:
        made = PlaywrightDevice(WebConfig(extra_args=(tag,)))
        made.close_step_s = 1.0
        return made

    def on_episode(result) -> None:
        on_episode.done += 1
        if on_episode.done == total:  # every episode is over: the slots close next
            for pid in drivers(tag):
                os.kill(pid, signal.SIGSTOP)
                on_episode.stopped.append(pid)

    on_episode.done, on_episode.stopped = 0, []
    result = asyncio.run(asyncio.wait_for(evaluate(GENERATED[:2], oracle_for, episodes=2, parallel=2,
                                                   runs_dir=tmp_path, on_episode=on_episode, devices=device), 120))
    assert result.overall.episodes == total and len(on_episode.stopped) == 2
    assert browsers() == 0
    # SIGKILL is sent by the close; the kernel ends a stopped process a moment later (on a loaded machine, not yet
    # when the close returns): gone within 5 s, or never (a driver the close did not signal stays stopped)
    deadline = time.monotonic() + 5
    while [pid for pid in on_episode.stopped if alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in on_episode.stopped if alive(pid)]


def test_more_environments_than_slots_never_means_more_browsers(tmp_path):
    """Six environments, two slots: at every episode's end at most two browsers are alive, and none after."""
    seen: list[int] = []
    result = asyncio.run(evaluate(GENERATED, oracle_for, episodes=2, parallel=2, runs_dir=tmp_path,
                                  on_episode=lambda r: seen.append(browsers())))
    assert result.overall.episodes == 12 and result.overall.successes == 12
    assert len(seen) == 12 and max(seen) <= 2, seen
    assert browsers() == 0


def test_a_slot_starts_a_new_browser_after_its_share_of_episodes(tmp_path):
    """A browser page kept for a whole suite keeps what every page left behind: each slot's device is lent for
    ``episodes_per_device`` episodes, then closed before the next one starts (never two in one slot)."""
    made: list[int] = []

    def device(kind: str, slot: int) -> PlaywrightDevice:
        made.append(slot)
        return PlaywrightDevice(WebConfig())

    with counting_browsers() as seen:
        result = asyncio.run(evaluate(GENERATED[:2], oracle_for, episodes=3, parallel=1, runs_dir=tmp_path,
                                      devices=device, episodes_per_device=2))
    assert result.overall.successes == 6
    assert made == [0, 0, 0] and max(seen) == 1 and browsers() == 0  # 6 episodes, 2 per device: 3 devices


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

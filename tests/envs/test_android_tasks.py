"""Android tasks on the fake phone (tests/support/fake_adbd.py) through a private real adb server:
set-up really changes the phone, checkers read the phone's state, the oracle reaches reward 1,
and the step verifier agrees with it (check_env on every "android/*" environment: tests/envs/test_conformance.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from devices import Action, ActionKind, Point
from envs.android import TASKS
from envs.android.env import action_for
from envs.android.tasks import BrightnessTask, CreateNoteTask, OpenAppTask, WifiTask
from envs.registry import all_specs, make
from envs.wrappers import TimeLimit
from tests.devices.test_android import _connect, _disconnect
from tests.support.adb import private_adb_server
from tests.support.fake_adbd import FakeAdbd, FakePhone

NAMES = [f"android/{name}" for name in TASKS]


@pytest.fixture(scope="module")
def adb_port(tmp_path_factory):
    """A private adb server for this module (never the user's on 5037); killed afterwards."""
    with private_adb_server(tmp_path_factory.mktemp("adb-home")) as port:
        patch = pytest.MonkeyPatch()
        patch.setenv("ANDROID_ADB_SERVER_PORT", str(port))
        try:
            yield port
        finally:
            patch.undo()


def on_env(port: int, name: str, scenario: Callable[[TimeLimit, FakePhone], Awaitable[Any]],
           phone: FakePhone | None = None) -> Any:
    """Run ``scenario(env, phone)`` with the registered environment ``name`` (in its ``TimeLimit``: the task's own
    methods are ``env.unwrapped``'s) on a fresh fake phone."""
    phone = phone or FakePhone(physical=(360, 800))
    with FakeAdbd(phone) as adbd:
        _connect(port, adbd)
        try:
            async def main() -> Any:
                env = make(name, serial=adbd.address, adb_port=port)
                try:
                    return await scenario(env, phone)
                finally:
                    await env.close()

            return asyncio.run(main())
        finally:
            _disconnect(port, adbd)


def test_registration_is_lazy():
    specs = {s.name: s for s in all_specs("android")}
    assert sorted(specs) == sorted(NAMES)
    env = make("android/wifi", serial="nowhere:1", adb_port=1)  # no phone, no server: nothing connects yet
    assert env.name == "android/wifi" and env.max_steps >= 1 and env.unwrapped.task is None


@pytest.mark.parametrize("name", NAMES)
def test_oracle_succeeds_over_two_seeds(adb_port, name):
    async def scenario(env: TimeLimit, phone: FakePhone) -> list[tuple[float, str]]:
        results = []
        for seed in (0, 1):
            _, info = await env.reset(seed=seed)
            assert not (await env.unwrapped.check()).success, f"set-up left the goal already done: {info}"
            needed = await env.unwrapped.current_step()
            verdicts = await env.verify([action_for(needed), Action(ActionKind.WAIT, duration_s=0)])
            assert verdicts[0].correct and not verdicts[1].correct
            reward, actions = await env.unwrapped.oracle()
            assert actions[-1].kind is not ActionKind.FINISH  # the goal ended the episode, not a claim
            assert (await env.unwrapped.check()).success
            results.append((reward, info["instruction"]))
        return results

    results = on_env(adb_port, name, scenario)
    assert [r for r, _ in results] == [1.0, 1.0]


def test_wifi_setup_changes_state_and_checker_reads_it(adb_port):
    async def scenario(env: TimeLimit, phone: FakePhone) -> None:
        for seed in range(6):
            await env.reset(seed=seed)
            assert isinstance(env.unwrapped.task, WifiTask)
            goal = "1" if env.unwrapped.task.on else "0"
            assert phone.settings["global/wifi_on"] != goal  # set-up put the opposite
            # the agent claims it is done without doing it: the phone says otherwise
            _, reward, terminated, truncated, info = await env.step(Action(ActionKind.FINISH))
            assert (reward, terminated, info["success"]) == (0.0, True, False)
        # the state alone decides: set it from outside and the checker agrees, then break it again
        await env.reset(seed=0)
        assert isinstance(env.unwrapped.task, WifiTask)
        phone.settings["global/wifi_on"] = "1" if env.unwrapped.task.on else "0"
        assert (await env.unwrapped.check()).success
        phone.settings["global/wifi_on"] = "0" if env.unwrapped.task.on else "1"
        assert not (await env.unwrapped.check()).success

    on_env(adb_port, "android/wifi", scenario)


def test_wifi_tapping_the_wrong_switch_does_not_succeed(adb_port):
    async def scenario(env: TimeLimit, phone: FakePhone) -> None:
        await env.reset(seed=3)
        await env.step(Action(ActionKind.OPEN_APP, text="settings"))
        bluetooth = phone.settings["global/bluetooth_on"]
        # the Bluetooth switch (0.25-0.32 of the height) flips Bluetooth, not Wi-Fi
        _, reward, terminated, _, _ = await env.step(Action(ActionKind.CLICK, point=Point(0.5, 0.28)))
        assert (reward, terminated) == (0.0, False)
        assert phone.settings["global/bluetooth_on"] != bluetooth
        verdicts = await env.verify([Action(ActionKind.CLICK, point=Point(0.5, 0.28)),
                                     Action(ActionKind.CLICK, point=Point(0.5, 0.18))])
        assert [v.correct for v in verdicts] == [False, True]
        _, reward, terminated, _, info = await env.step(Action(ActionKind.CLICK, point=Point(0.5, 0.18)))
        assert (reward, terminated, info["success"]) == (1.0, True, True)

    on_env(adb_port, "android/wifi", scenario)


def test_tear_down_restores_the_setting(adb_port):
    phone = FakePhone(physical=(360, 800))
    before = dict(phone.settings)

    async def scenario(env: TimeLimit, phone: FakePhone) -> None:
        await env.reset(seed=0)
        assert phone.settings != before

    on_env(adb_port, "android/brightness", scenario, phone)
    assert phone.settings == before


def test_brightness_middle_of_the_slider_is_not_the_goal(adb_port):
    async def scenario(env: TimeLimit, phone: FakePhone) -> None:
        await env.reset(seed=0)
        assert isinstance(env.unwrapped.task, BrightnessTask)
        assert phone.settings["system/screen_brightness"] == str(env.unwrapped.task.start)
        await env.step(Action(ActionKind.OPEN_APP, text="com.android.settings"))
        _, reward, terminated, _, _ = await env.step(Action(ActionKind.CLICK, point=Point(0.5, 0.43)))
        assert (reward, terminated) == (0.0, False)
        assert phone.settings["system/screen_brightness"] == "128"  # the slider's middle
        x = 0.94 if env.unwrapped.task.goal == "max" else 0.06
        _, reward, terminated, _, _ = await env.step(Action(ActionKind.CLICK, point=Point(x, 0.43)))
        assert (reward, terminated) == (1.0, True)

    on_env(adb_port, "android/brightness", scenario)


def test_open_app_reads_the_foreground_activity(adb_port):
    async def scenario(env: TimeLimit, phone: FakePhone) -> None:
        await env.reset(seed=0)
        assert isinstance(env.unwrapped.task, OpenAppTask)
        assert phone.screen == "home"
        wrong = next(p for p in ("com.example.list", "com.example.notes") if p != env.unwrapped.task.package)
        _, reward, terminated, _, _ = await env.step(Action(ActionKind.OPEN_APP, text=wrong))
        assert (reward, terminated) == (0.0, False)
        verdicts = await env.verify([Action(ActionKind.OPEN_APP, text=wrong),
                                     Action(ActionKind.OPEN_APP, text=env.unwrapped.task.package)])
        assert [v.correct for v in verdicts] == [False, True]

    on_env(adb_port, "android/open-app", scenario)


def test_create_note_checks_the_file_not_the_claim(adb_port):
    phone = FakePhone(physical=(360, 800))
    phone.text = "left-over draft"

    async def scenario(env: TimeLimit, phone: FakePhone) -> None:
        await env.reset(seed=0)
        task = env.unwrapped.task
        assert isinstance(task, CreateNoteTask)
        assert phone.text == "" and task.path not in phone.files  # the draft and any old note are gone
        await env.step(Action(ActionKind.OPEN_APP, text="com.example.notes"))
        # a note with the right name but the wrong text is saved: still not done
        await env.step(Action(ActionKind.TYPE, point=Point(0.5, 0.19), text=f"{task.title}\nsomething else"))
        _, reward, terminated, _, _ = await env.step(Action(ActionKind.CLICK, point=Point(0.75, 0.34)))
        assert task.path in phone.files and (reward, terminated) == (0.0, False)
        verdict = await env.unwrapped.check()
        assert not verdict.success and verdict.details["content"] == "something else"
        _, reward, terminated, _, info = await env.step(Action(ActionKind.FINISH))
        assert (reward, terminated, info["success"]) == (0.0, True, False)
        # the file written from outside is what counts
        phone.files[task.path] = task.body.encode()
        assert (await env.unwrapped.check()).success

    on_env(adb_port, "android/create-note", scenario, phone)
    assert not any(p.endswith(".txt") for p in phone.files)  # tear-down removed the note

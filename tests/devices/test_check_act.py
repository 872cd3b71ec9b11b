"""The checks every driver's ``act`` starts with (``devices.base.check_act``): on a made-up device, and on each real
driver before it is started (nothing is launched: the checks come before any call to a browser, X or adb)."""

from __future__ import annotations

import asyncio

import pytest

from devices import Action, ActionKind, DeviceError, InvalidAction, Point, UnsupportedAction
from devices.android import AndroidDevice
from devices.base import check_act
from devices.desktop import DesktopDevice
from devices.web import PlaywrightDevice


class Pad:
    name = "pad"
    supported_actions = frozenset({ActionKind.CLICK, ActionKind.KEY, ActionKind.WAIT})


CLICK = Action(ActionKind.CLICK, point=Point(0.5, 0.5))


def test_a_supported_action_on_a_started_device_passes():
    assert check_act(Pad(), CLICK, started=True) is None
    assert check_act(Pad(), Action(ActionKind.KEY, keys=("AppSwitch",)), started=True, phone_keys=True) is None


def test_terminal_kinds_never_reach_a_device():
    for kind in ("finish", "infeasible"):
        with pytest.raises(InvalidAction, match=f"^{kind} ends the episode and is not sent to a device$"):
            check_act(Pad(), Action(kind, text="x"), started=True)


def test_an_unsupported_kind_names_what_the_device_supports_and_why_not():
    with pytest.raises(UnsupportedAction) as info:
        check_act(Pad(), Action(ActionKind.HOME), started=False, lacking="no home button")
    assert str(info.value) == "the pad device cannot home (no home button); it supports click, key, wait"
    with pytest.raises(UnsupportedAction, match="^the pad device cannot back; it supports click, key, wait$"):
        check_act(Pad(), Action(ActionKind.BACK), started=True)


def test_a_phone_key_is_refused_where_the_device_has_none():
    with pytest.raises(UnsupportedAction, match=r"^the pad device has no AppSwitch key \(it is a phone key\)$"):
        check_act(Pad(), Action(ActionKind.KEY, keys=("AppSwitch",)), started=True)


def test_a_device_that_is_not_started_says_so_after_the_kind_checks():
    with pytest.raises(DeviceError, match=r"^cannot click: the pad device is not started; call `await device\.start"):
        check_act(Pad(), CLICK, started=False)


@pytest.mark.parametrize("device", [PlaywrightDevice, DesktopDevice, AndroidDevice])
def test_every_driver_checks_before_it_starts(device):
    async def main() -> None:
        dev = device()
        with pytest.raises(DeviceError, match=f"cannot wait: the {dev.name} device is not started"):
            await dev.act(Action(ActionKind.WAIT, duration_s=0))
        with pytest.raises(InvalidAction, match="ends the episode"):
            await dev.act(Action(ActionKind.FINISH))
        unsupported = Action(ActionKind.OPEN_APP, text="Settings") if dev.name != "android" else Action(
            ActionKind.DOUBLE_CLICK, point=Point(0.5, 0.5))
        with pytest.raises(UnsupportedAction, match=f"the {dev.name} device cannot {unsupported.kind.value}"):
            await dev.act(unsupported)

    asyncio.run(main())

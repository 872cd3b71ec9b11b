"""Secrets (resolution, redaction of every field and log line) and the guard's rules, without a device."""

from __future__ import annotations

import asyncio
import logging

import numpy as np
import pytest

from agent.errors import SecretError
from agent.guard import (AllowAll, GuardChain, GuardVerdict, HotkeyGuard, IrreversibleGuard, KindGuard, PackageGuard,
                         RegionGuard, UrlGuard)
from agent.secrets import RedactingFilter, Secrets
from devices.actions import Action, ActionKind, Point
from devices.base import Box, ElementInfo, Observation
from envs.records import StepRecord

OBS = Observation(frame=np.zeros((4, 4, 3), np.uint8))


class FakeProbe:
    """What a guard may ask: a made-up screen of elements (a stand-in for agent.probe.Probe over a device)."""

    def __init__(self, elements=(), focused=None, url="", package=""):
        self.elements = list(elements)
        self.focused = focused
        self.observation = Observation(frame=np.zeros((4, 4, 3), np.uint8), meta={"url": url, "package": package})
        self.asked = 0

    async def element_at(self, point):
        self.asked += 1
        return next((e for e in self.elements if e.box.contains(point.x, point.y)), None)

    async def focused_element(self):
        return ElementInfo(text="", box=self.focused) if self.focused is not None else None

    async def focused_box(self):
        return self.focused


def check(guard, action, probe=None):
    return asyncio.run(guard.check(action, probe or FakeProbe()))


# -- secrets ---------------------------------------------------------------------------------------------------------
def test_secrets_come_from_the_environment_only():
    s = Secrets({"pw": "env:X_PW"}, environ={"X_PW": "s3cret"})
    typed = s.resolve(Action(ActionKind.TYPE, text="user {{secret:pw}}!"))
    assert typed.text == "user s3cret!" and typed.mask  # the device masks the field it goes into
    assert "mask" not in typed.to_dict()  # never part of what is written
    assert s.redact("the model wrote s3cret twice: s3cret") == "the model wrote {{secret:pw}} twice: {{secret:pw}}"
    with pytest.raises(SecretError, match="X_MISSING, which is not set"):
        Secrets({"pw": "env:X_MISSING"}, environ={})
    with pytest.raises(SecretError, match="secret 'other', which is not in \\[secrets\\]"):
        s.resolve(Action(ActionKind.TYPE, text="{{secret:other}}"))
    with pytest.raises(SecretError, match="fewer than 4 characters"):
        Secrets({"pin": "env:PIN"}, environ={"PIN": "12"})


def test_one_redaction_pass_reaches_every_field_of_a_record():
    s = Secrets({"pw": "env:PW", "token": "env:TOKEN"}, environ={"PW": "hunter22", "TOKEN": "hunter22-and-more"})
    leak = "I will type hunter22 and hunter22-and-more"
    step = StepRecord(
        step_id="r/e/0", index=0, started_at=0, ended_at=0, frame_path="", frame_size=(4, 4), model_input_size=(4, 4),
        action={"kind": "type", "text": "hunter22"}, executed=True, raw_output=leak, parse_error=leak,
        candidates=({"kind": "type", "text": "hunter22"},), target={"tag": "input", "text": "hunter22"},
        error={"type": "X", "message": leak}, guard={"reason": leak}, verifier={"reason": leak},
        info={"policy": {"thought": leak, "samples": [{"text": leak}]}, leak: "key"},
    )
    redacted = s.redact_value(step)
    text = repr(redacted)
    assert "hunter22" not in text.replace("{{secret:", "")  # every field, dict keys and nested lists included
    # the longer secret is replaced whole, not as the shorter one plus a tail
    assert redacted.raw_output == "I will type {{secret:pw}} and {{secret:token}}"
    assert redacted.info["policy"]["samples"][0]["text"] == redacted.raw_output
    assert Secrets().redact_value(step) is step  # nothing registered: nothing to do


def test_log_lines_are_redacted_on_the_handler():
    s = Secrets({"pw": "env:PW"}, environ={"PW": "hunter22"})
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(self.format(record))

    handler = Keep()
    handler.addFilter(RedactingFilter(s))
    log = logging.getLogger("test.redaction")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        log.info("the page said %s", "hunter22")
        try:
            raise ValueError("bad hunter22")
        except ValueError:
            log.exception("failed with %s", "hunter22")
    finally:
        log.removeHandler(handler)
    assert records[0] == "the page said {{secret:pw}}"
    assert all("hunter22" not in r for r in records) and "bad {{secret:pw}}" in records[1]


# -- the guard -------------------------------------------------------------------------------------------------------
def test_kind_guard_refuses_and_asks():
    g = KindGuard(refuse=frozenset({ActionKind.OPEN_URL}), confirm=frozenset({ActionKind.CLICK}))
    assert check(g, Action(ActionKind.OPEN_URL, text="https://x.test")).verdict is GuardVerdict.REFUSE
    assert check(g, Action(ActionKind.CLICK, Point(0.5, 0.5))).verdict is GuardVerdict.CONFIRM
    assert check(g, Action(ActionKind.WAIT)).verdict is GuardVerdict.ALLOW
    assert check(AllowAll(), Action(ActionKind.OPEN_URL, text="file:///etc/passwd")).verdict is GuardVerdict.ALLOW


@pytest.mark.parametrize("url", ["file:///etc/passwd", "chrome://settings", "javascript:alert(1)", "about:config",
                                 "view-source:https://x.test", "data:text/html,hi", "example.com/no-scheme"])
def test_local_and_odd_schemes_are_refused_by_default(url):
    decision = check(UrlGuard(), Action(ActionKind.OPEN_URL, text=url))
    assert decision.verdict is GuardVerdict.REFUSE and "guard.allow_schemes" in decision.reason


def test_the_domain_allowlist_covers_open_url_and_the_page_shown():
    g = UrlGuard(domains=("example.com",))
    assert check(g, Action(ActionKind.OPEN_URL, text="https://example.com/a")).verdict is GuardVerdict.ALLOW
    assert check(g, Action(ActionKind.OPEN_URL, text="https://shop.example.com/")).verdict is GuardVerdict.ALLOW
    assert check(g, Action(ActionKind.OPEN_URL, text="https://example.com.evil.test/")).verdict is GuardVerdict.REFUSE
    assert check(g, Action(ActionKind.OPEN_URL, text="https://notexample.com/")).verdict is GuardVerdict.REFUSE
    away = FakeProbe(url="https://elsewhere.test/page")
    assert check(g, Action(ActionKind.CLICK, Point(0.5, 0.5)), away).verdict is GuardVerdict.REFUSE
    assert check(g, Action(ActionKind.BACK), away).verdict is GuardVerdict.ALLOW  # the way out stays open
    assert check(UrlGuard(), Action(ActionKind.CLICK, Point(0.5, 0.5)), away).verdict is GuardVerdict.ALLOW  # empty: all


def test_the_package_allowlist():
    g = PackageGuard(("com.example.notes",))
    assert check(g, Action(ActionKind.OPEN_APP, text="com.example.notes")).verdict is GuardVerdict.ALLOW
    assert check(g, Action(ActionKind.OPEN_APP, text="com.bank.app/.Main")).verdict is GuardVerdict.REFUSE
    inside_bank = FakeProbe(package="com.bank.app")
    assert check(g, Action(ActionKind.CLICK, Point(0.5, 0.5)), inside_bank).verdict is GuardVerdict.REFUSE
    assert check(g, Action(ActionKind.HOME), inside_bank).verdict is GuardVerdict.ALLOW


@pytest.mark.parametrize("text, word", [("Pay now", "pay"), ("Delete account", "delete"), ("SEND", "send"),
                                        ("立即购买", "立即购买"), ("确认删除", "删除"), ("转账给张三", "转账"),
                                        ("Ｄｅｌｅｔｅ", "delete")])
def test_irreversible_targets_need_a_yes(text, word):
    button = ElementInfo(text=text, box=Box(0.4, 0.4, 0.6, 0.6), role="button")
    decision = check(IrreversibleGuard(), Action(ActionKind.CLICK, Point(0.5, 0.5)), FakeProbe([button]))
    assert decision.verdict is GuardVerdict.CONFIRM and f"reads {word!r}" in decision.reason


@pytest.mark.parametrize("text", ["Payload viewer", "Resend code? no: Sender info", "Postal code", "Save", "Deleted items",
                                  ""])
def test_ordinary_targets_pass(text):
    # Words inside other words do not count ("Payload", "Postal"), and neither do other forms ("Deleted").
    button = ElementInfo(text=text, box=Box(0.4, 0.4, 0.6, 0.6))
    decision = check(IrreversibleGuard(), Action(ActionKind.CLICK, Point(0.5, 0.5)), FakeProbe([button]))
    assert decision.verdict is GuardVerdict.ALLOW, decision.reason


def test_enter_on_a_focused_send_button_and_extra_words():
    send = ElementInfo(text="Send", box=Box(0.1, 0.1, 0.2, 0.2))
    probe = FakeProbe([send], focused=send.box)
    assert check(IrreversibleGuard(), Action(ActionKind.KEY, keys=("Enter",)), probe).verdict is GuardVerdict.CONFIRM
    sign = ElementInfo(text="Sign contract", box=Box(0.4, 0.4, 0.6, 0.6))
    g = IrreversibleGuard(("sign contract",))
    assert check(g, Action(ActionKind.CLICK, Point(0.5, 0.5)), FakeProbe([sign])).verdict is GuardVerdict.CONFIRM


def test_closing_hotkeys_need_a_yes():
    assert check(HotkeyGuard(), Action(ActionKind.HOTKEY, keys=("Alt", "F4"))).verdict is GuardVerdict.CONFIRM
    assert check(HotkeyGuard(), Action(ActionKind.HOTKEY, keys=("control", "w"))).verdict is GuardVerdict.CONFIRM
    assert check(HotkeyGuard(), Action(ActionKind.HOTKEY, keys=("Control", "c"))).verdict is GuardVerdict.ALLOW


def test_region_guard_covers_points_typing_and_keys():
    g = RegionGuard(((0.9, 0.0, 1.0, 0.05), (0.0, 0.5, 0.5, 1.0)))
    assert check(g, Action(ActionKind.CLICK, Point(0.95, 0.02))).verdict is GuardVerdict.REFUSE
    assert check(g, Action(ActionKind.CLICK, Point(0.9, 0.05))).verdict is GuardVerdict.REFUSE  # edges are inside
    assert check(g, Action(ActionKind.CLICK, Point(0.89, 0.02))).verdict is GuardVerdict.ALLOW
    drag = Action(ActionKind.DRAG, Point(0.7, 0.2), end=Point(0.25, 0.75))  # only its end is forbidden
    refused = check(g, drag)
    assert refused.verdict is GuardVerdict.REFUSE and "(0.250, 0.750)" in refused.reason
    # typing and keys go where the focus is: the device's focused element...
    in_region = FakeProbe(focused=Box(0.1, 0.6, 0.3, 0.7))
    assert check(g, Action(ActionKind.TYPE, text="x"), in_region).verdict is GuardVerdict.REFUSE
    assert check(g, Action(ActionKind.KEY, keys=("Enter",)), in_region).verdict is GuardVerdict.REFUSE
    assert check(g, Action(ActionKind.KEY, keys=("Enter",)), FakeProbe(focused=Box(0.6, 0.1, 0.7, 0.2))).verdict \
        is GuardVerdict.ALLOW
    # ... or, where the device cannot tell, where the last pointed action landed
    g2 = RegionGuard(((0.0, 0.5, 0.5, 1.0),))
    assert check(g2, Action(ActionKind.TYPE, text="x")).verdict is GuardVerdict.ALLOW
    asyncio.run(g2.check(Action(ActionKind.SCROLL, Point(0.6, 0.2), direction="down"), FakeProbe()))
    assert check(g2, Action(ActionKind.HOTKEY, keys=("Control", "a"))).verdict is GuardVerdict.ALLOW
    with pytest.raises(ValueError, match="normalized frame coordinates"):
        RegionGuard(((0.5, 0.5, 0.4, 0.6),))


def test_a_chain_refuses_first_and_gathers_what_needs_a_yes():
    chain = GuardChain([KindGuard(refuse=frozenset({ActionKind.WAIT})), HotkeyGuard(),
                        KindGuard(confirm=frozenset({ActionKind.HOTKEY}))])
    assert check(chain, Action(ActionKind.WAIT)).verdict is GuardVerdict.REFUSE
    asked = check(chain, Action(ActionKind.HOTKEY, keys=("Alt", "F4")))
    assert asked.verdict is GuardVerdict.CONFIRM and "may close" in asked.reason and "guard.confirm" in asked.reason
    assert check(chain, Action(ActionKind.CLICK, Point(0.5, 0.1))).verdict is GuardVerdict.ALLOW


def test_the_default_guard_of_agent_run_is_safe():
    from agent.builders import build_guard
    from agent.config import load_config

    guard = build_guard(load_config(None, []))
    assert check(guard, Action(ActionKind.OPEN_URL, text="file:///etc/passwd")).verdict is GuardVerdict.REFUSE
    assert check(guard, Action(ActionKind.OPEN_URL, text="https://example.com")).verdict is GuardVerdict.ALLOW
    pay = FakeProbe([ElementInfo(text="Pay €20", box=Box(0, 0, 1, 1))])
    assert check(guard, Action(ActionKind.CLICK, Point(0.5, 0.5)), pay).verdict is GuardVerdict.CONFIRM
    loose = build_guard(load_config(None, ["guard.irreversible=false", 'guard.allow_schemes=["http", "https", "file"]']))
    assert check(loose, Action(ActionKind.CLICK, Point(0.5, 0.5)), pay).verdict is GuardVerdict.ALLOW
    assert check(loose, Action(ActionKind.OPEN_URL, text="file:///tmp/x.html")).verdict is GuardVerdict.ALLOW

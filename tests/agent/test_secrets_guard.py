from __future__ import annotations

import numpy as np
import pytest

from agent.errors import SecretError
from agent.guard import AllowAll, KindGuard, GuardVerdict
from agent.secrets import Secrets
from devices.actions import Action, ActionKind, Point
from devices.base import Observation

OBS = Observation(frame=np.zeros((4, 4, 3), np.uint8))


def test_secrets_come_from_the_environment_only():
    s = Secrets({"pw": "env:X_PW"}, environ={"X_PW": "s3cret"})
    typed = s.resolve(Action(ActionKind.TYPE, text="user {{secret:pw}}!"))
    assert typed.text == "user s3cret!"
    assert s.redact("the model wrote s3cret twice: s3cret") == "the model wrote {{secret:pw}} twice: {{secret:pw}}"
    with pytest.raises(SecretError, match="X_MISSING, which is not set"):
        Secrets({"pw": "env:X_MISSING"}, environ={})
    with pytest.raises(SecretError, match="secret 'other', which is not in \\[secrets\\]"):
        s.resolve(Action(ActionKind.TYPE, text="{{secret:other}}"))


def test_guards():
    click = Action(ActionKind.CLICK, Point(0.5, 0.5))
    assert AllowAll().check(click, OBS).verdict is GuardVerdict.ALLOW
    g = KindGuard(refuse=frozenset({ActionKind.OPEN_URL}), confirm_kinds=frozenset({ActionKind.CLICK}))
    assert g.check(Action(ActionKind.OPEN_URL, text="https://x.test"), OBS).verdict is GuardVerdict.REFUSE
    no_tty = g.check(click, OBS)
    assert no_tty.verdict is GuardVerdict.REFUSE and "no terminal" in no_tty.reason
    answers = iter([True, False])
    g.confirm = lambda action: next(answers)
    assert g.check(click, OBS).verdict is GuardVerdict.ALLOW
    assert g.check(click, OBS).verdict is GuardVerdict.REFUSE
    assert g.check(Action(ActionKind.WAIT), OBS).verdict is GuardVerdict.ALLOW


def test_region_guard_refuses_points_inside_forbidden_regions():
    from agent.guard import GuardChain, RegionGuard

    g = RegionGuard(((0.9, 0.0, 1.0, 0.05), (0.0, 0.5, 0.5, 1.0)))
    assert g.check(Action(ActionKind.CLICK, Point(0.95, 0.02)), OBS).verdict is GuardVerdict.REFUSE
    assert g.check(Action(ActionKind.CLICK, Point(0.9, 0.05)), OBS).verdict is GuardVerdict.REFUSE  # edges are inside
    assert g.check(Action(ActionKind.CLICK, Point(0.89, 0.02)), OBS).verdict is GuardVerdict.ALLOW
    drag = Action(ActionKind.DRAG, Point(0.7, 0.2), end=Point(0.25, 0.75))  # only its end is forbidden
    refused = g.check(drag, OBS)
    assert refused.verdict is GuardVerdict.REFUSE and "(0.250, 0.750)" in refused.reason
    assert g.check(Action(ActionKind.KEY, keys=("Enter",)), OBS).verdict is GuardVerdict.ALLOW
    with pytest.raises(ValueError, match="normalized frame coordinates"):
        RegionGuard(((0.5, 0.5, 0.4, 0.6),))
    chain = GuardChain([KindGuard(refuse=frozenset({ActionKind.WAIT})), g])
    assert chain.check(Action(ActionKind.WAIT), OBS).verdict is GuardVerdict.REFUSE
    assert chain.check(Action(ActionKind.CLICK, Point(0.95, 0.01)), OBS).verdict is GuardVerdict.REFUSE
    assert chain.check(Action(ActionKind.CLICK, Point(0.5, 0.1)), OBS).verdict is GuardVerdict.ALLOW

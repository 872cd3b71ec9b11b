"""An online session's browsers: one per actor, however many episodes and restarts, counted from /proc all along
the session; a browser killed under an actor is replaced, never added to; and when both actors' Playwright drivers
stop answering at the end (SIGSTOP), the session's shutdown still ends with every browser and driver gone (before,
each actor's close gave up after 15 s and left its driver and browser running, stopped)."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from devices.web import PlaywrightDevice
from tests.agent.test_online import config, online, session_for, until
from tests.support.browsers import alive, browser_pids, browsers, counting_browsers, drivers

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def test_an_online_session_never_has_more_browsers_than_actors(tmp_path, monkeypatch):
    monkeypatch.setattr(PlaywrightDevice, "close_step_s", 1.0, raising=False)
    session = session_for(config(tmp_path / "run", "train.steps=1000"), online(max_restarts=3))
    hung: list[int] = []

    async def scenario():
        task = asyncio.create_task(session.run())
        await until(lambda: len(session.actors) == 2 and all(a.decisions >= 1 for a in session.actors))
        victim = browser_pids()[0]
        os.kill(victim, signal.SIGKILL)  # one actor's browser goes away: that actor starts a new one
        await until(lambda: sum(a.restarts for a in session.actors) >= 1
                    and all(a.decisions >= 3 for a in session.actors) and browsers() == 2)
        hung.extend(drivers())
        for pid in hung:  # both drivers hang: the actors' closes at shutdown must not
            os.kill(pid, signal.SIGSTOP)
        session.request_stop("test")
        return await asyncio.wait_for(task, 120)

    with counting_browsers() as seen:
        result = asyncio.run(scenario())
    assert result.stopped_by == "test" and result.restarts >= 1
    assert max(seen) == 2, max(seen)
    assert len(hung) == 2 and not [pid for pid in hung if alive(pid)]
    assert browsers() == 0

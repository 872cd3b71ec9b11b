"""A program playing the person of an ``agent record`` that runs in the test's own process.

    errors = play_once_started(monkeypatch, play)     # play(recorder): a coroutine on agent record's event loop
    code = agent_main(["record", "Sign in", ...])     # builds its recorder as usual; play starts once it has started
    assert not errors

The player acts through the device as a person would (trusted browser input, xdotool on a display, the fake
phone's finger), so what is recorded is what the recorder read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest


def play_once_started(monkeypatch: pytest.MonkeyPatch, play: Callable[[Any], Awaitable[None]]
                      ) -> list[BaseException]:
    """Make ``agent record`` run ``play(recorder)`` on its event loop once its recorder has started. What the player
    raises is put in the returned list and ends the recording where the recorder can be ended from outside; a player
    still finishing (a thread after its last input) when the recording has ended is cancelled with the loop."""
    from agent.cli import record as record_command
    from devices.recording import StopsOnRequest

    made = record_command.make_recorder
    errors: list[BaseException] = []
    players: set[asyncio.Future[None]] = set()  # referenced until done

    def make_recorder(cfg: Any, args: Any) -> tuple[Any, Any]:
        recorder, site = made(cfg, args)
        start = recorder.start

        async def guarded() -> None:
            try:
                await play(recorder)
            except Exception as e:  # a cancel is the recording ending as the player's last input asked
                errors.append(e)
                if isinstance(recorder, StopsOnRequest):
                    recorder.request_stop()

        async def start_and_play() -> None:
            await start()
            player = asyncio.ensure_future(guarded())
            players.add(player)
            player.add_done_callback(players.discard)

        recorder.start = start_and_play
        return recorder, site

    monkeypatch.setattr(record_command, "make_recorder", make_recorder)
    return errors

"""RecordingEnv: a person's demonstration as an environment, so ``agent record`` is the one episode runner with a
person in the policy's seat (``agent/record.py``: ``HumanPolicy``).

The recorder (``devices.recording.Recorder``) turns the person's input into ``DemoEvent``s. The
environment always holds the next one (``pending``): ``reset`` returns its pre-action frame,
the human policy answers with its action, and ``step`` does not act (the person already did) but
reports what the action hit (a ``StepEffect`` with the target element and whether the text was
masked) and returns the pre-action frame of the event after it. When the person ends the recording,
the pending event becomes ``finish`` on the last screen, which ends the episode unjudged (a
demonstration is the person's claim that the task is done; ``agent record --make-task`` derives a
checker from it). There is no step verifier and no reward (``rewarded`` is False).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from devices.actions import TERMINAL_KINDS, Action, ActionKind
from devices.base import ActionResult, Observation
from devices.recording import DemoEvent, Recorder
from envs.base import BaseEnv, StepEffect, StepVerdict
from envs.errors import EnvError


class RecordingEnv(BaseEnv):
    """A demonstration in progress (see the module docstring). It acts on no device (``device`` is None: the person
    acts) and has no checker (``rewarded`` is False)."""

    rewarded = False

    def __init__(self, recorder: Recorder, instruction: str, *, name: str = "record") -> None:
        if not instruction.strip():
            raise EnvError("a recording needs the task it demonstrates, e.g. agent record \"Sign in\" --url URL")
        self.recorder = recorder
        self.instruction = instruction
        self.name = name
        self.pending: DemoEvent | None = None
        self.events = 0
        self._started = False

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
                    ) -> tuple[Observation, dict[str, Any]]:
        if self._started:
            raise EnvError(f"{self.name}: a recording is one episode; start a new recording for another")
        self._started = True
        await self.recorder.start()
        self.pending = await self._next()
        return self.pending.frame, {"instruction": self.instruction, "recorder": self.recorder.describe()}

    async def _next(self) -> DemoEvent:
        event = await self.recorder.next_event()
        if event is None:  # the person ended the recording: finish on the screen as it is
            return DemoEvent(Action(ActionKind.FINISH), time.time(), await self.recorder.observe())
        self.events += 1
        return event

    async def step(self, action: Action) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        event = self.pending
        if event is None:
            raise EnvError(f"{self.name}: call `await env.reset()` before stepping")
        if action.kind in TERMINAL_KINDS:
            return event.frame, 0.0, True, False, {}
        target = event.target
        result = ActionResult(action, target_box=target.box if target else None,
                              target=_target_dict(event) if target else None, sensitive=event.masked)
        self.pending = await self._next()
        info = {"effect": StepEffect(result), "demo": {"at": event.at, "frame_lag_s": round(event.frame_lag_s, 4),
                                                       "late": event.late, **event.info}}
        return self.pending.frame, 0.0, False, False, info

    async def verify(self, candidates: Sequence[Action]) -> list[StepVerdict] | None:
        return None

    async def close(self) -> None:
        if self._started:
            self._started = False
            await self.recorder.stop()


def _target_dict(event: DemoEvent) -> dict[str, Any]:
    t = event.target
    assert t is not None
    return {"tag": t.role, "text": "" if t.password else t.text, "password": t.password,
            **{k: event.info[k] for k in ("name", "selector", "frame") if k in event.info}}

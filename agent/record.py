"""``agent record``: the episode runner with a person in the policy's seat.

    env = RecordingEnv(WebRecorder(device), "Sign in as alice")
    result = await record_demonstration(env, run.episode(actor=Actor.HUMAN), secrets=secrets)

``HumanPolicy`` answers each step with what the person did (the recording environment's pending
event), so a demonstration is written in the trajectory format every agent run uses, with
``actor = human``, each step's frame the screen just before the person's action, the target
element's box where the device can tell (a demonstration step is directly a GUI-R1-style step
sample), and ``info.policy.frame_lag_s`` / ``late`` when input came faster than frames. The guard
is not in the way (the person acts, not a model); secrets are redacted from every record as in any
run, and text typed into password fields arrives masked.

When the episode ends, however it ends, its record's ``env.recorder`` is the recorder's ``describe()`` as of then, so
counts a recorder keeps over the recording (the web recorder's ``refused``: reports it did not take) are the final
ones.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

from agent.episode import EpisodeResult, RunOptions, jsonable
from agent.runner import run_episode
from agent.secrets import Secrets
from devices.base import Observation
from envs.records import StepRecord
from envs.recording import RecordingEnv
from envs.trajectory import EpisodeWriter
from policy.base import Decision, HistoryEntry

log = logging.getLogger(__name__)


class HumanPolicy:
    """The person's actions, as the recording environment saw them, one per decision."""

    name = "human"

    def __init__(self, env: RecordingEnv) -> None:
        self.env = env

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "actor": "human", "recorder": self.env.recorder.describe()}

    async def decide(self, task: str, history: Sequence[HistoryEntry], observation: Observation, n: int = 1
                     ) -> Decision:
        event = self.env.pending
        if event is None:  # pragma: no cover - the runner always resets first
            raise RuntimeError("the recording has not started")
        target_box = event.target.box if event.target is not None else None
        info = {"actor": "human", "at": event.at, "frame_lag_s": round(event.frame_lag_s, 4), "late": event.late}
        return Decision(event.action, raw_output="", target_box=target_box, info=info)


async def record_demonstration(env: RecordingEnv, writer: EpisodeWriter, *, secrets: Secrets | None = None,
                               on_step: Callable[[StepRecord], None] | None = None,
                               stop: asyncio.Event | None = None) -> EpisodeResult:
    """Record one demonstration into ``writer``'s episode. The caller closes ``env`` (and so the recorder)."""
    # Every step is the person's: nothing is rejected for retries' sake, so the retry limit is moot.
    try:
        return await run_episode(env, HumanPolicy(env), writer, options=RunOptions(max_parse_retries=1_000_000),
                                 secrets=secrets, on_step=on_step, stop=stop)
    finally:
        if writer.record.outcome is not None and writer.record.env is not None:  # the counts as they ended
            try:
                described = (secrets or Secrets()).redact_value(env.recorder.describe())
                writer.update(env={**writer.record.env, "recorder": jsonable(described)})
            except Exception as e:  # the record as the episode ended is on disk already; only the final counts miss
                log.warning("could not write the recorder's final counts: %s: %s", type(e).__name__, e)

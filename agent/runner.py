"""The episode runner: one closed loop over the ``Env`` contract, for every caller.

    result = await run_episode(env, policy, writer, seed=0, guard=guard, secrets=secrets)

``agent run`` (a ``TaskEnv``: a page or a screen, an instruction, an optional checker), ``agent eval``
and the online actors (registered environments) all run their episodes here, so guard, secrets,
parse retries, step verification, settling, phase timing and recording happen in one place and in
one order. A step:

1. **decide**: the policy answers for the current screen (its frame goes to disk meanwhile);
2. **reject** what cannot be executed (an output that did not parse, a kind the device lacks): the
   step is recorded, the policy is told and tries again;
3. **verify**: where the environment judges steps, it scores the action and the other candidates;
4. **guard**: a refused action is recorded like a rejection; one the guard wants confirmed is put to
   the person (``agent.person``), and refused when nobody is there or the answer is no;
5. **step**: the environment performs the action (secrets substituted just before) and settles;
6. **record**: one line in steps.jsonl, every secret value in it redacted; then the next screen.

``ask_user`` never reaches the environment: the question goes to the person, whose answer the
policy reads in its history; with nobody to ask, the episode ends as infeasible (the agent could not
go on alone).

Budget and limits: the step budget is the environment's ``TimeLimit`` (``envs.wrappers``): every
``env.step`` counts, decisions that never reach it do not. Decisions that cannot be executed
(steps 2 and 4) are bounded instead by ``RunOptions.max_parse_retries`` in a row: one more ends the
episode as aborted.

Outcomes: when the environment terminates the episode, a checker's verdict decides success or
failure; without one, ``finish`` is claimed and ``infeasible`` is infeasible (an environment
terminating on its own, like a MiniWoB++ page, succeeded when its reward is positive). Truncated
when the budget runs out.

One error policy: a typed error (a device, policy, environment or agent error) ends the episode
as aborted, with its type and message, and is handed back in ``EpisodeResult.error``; any other
exception is a bug: the episode is recorded as aborted, then the exception surfaces. Ctrl-C or a
cancellation ends it as interrupted and is re-raised; ``stop``, when set, does the same at the next
step boundary (for a Ctrl-C that a library swallowed). Every finished step is on disk before the
next one starts. The caller owns the environment: the runner never closes it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from agent.episode import EpisodeBook, EpisodeResult, RunOptions
from agent.errors import AgentError
from agent.guard import AllowAll, Guard, GuardVerdict
from agent.person import Person
from agent.probe import Probe
from agent.secrets import Secrets
from devices.actions import ActionKind
from devices.errors import DeviceError, UnsupportedAction
from envs.base import Env
from envs.errors import EnvError
from envs.records import StepRecord
from envs.trajectory import EpisodeWriter
from policy.base import Policy
from policy.errors import PolicyError

__all__ = ["TYPED_ERRORS", "EpisodeResult", "RunOptions", "run_episode"]

TYPED_ERRORS = (DeviceError, PolicyError, EnvError, AgentError)
"""Expected failures: they end an episode as aborted. Anything else is a bug and surfaces."""


async def run_episode(
    env: Env,
    policy: Policy,
    writer: EpisodeWriter,
    *,
    seed: int | None = None,
    options: RunOptions | None = None,
    guard: Guard | None = None,
    secrets: Secrets | None = None,
    on_step: Callable[[StepRecord], None] | None = None,
    stop: asyncio.Event | None = None,
    person: Person | None = None,
    ocr: Any = None,
) -> EpisodeResult:
    """Reset ``env`` with ``seed`` and run one episode of ``policy`` on it (see the module docstring). ``person``
    confirms risky actions and answers ``ask_user`` (None: nobody is there); ``ocr`` reads the text at a point for
    the guard on devices that cannot tell it themselves."""
    book = EpisodeBook(env, writer, options or RunOptions(), secrets or Secrets(), on_step)
    guard = guard or AllowAll()
    try:
        obs, info = await book.clock.timed("reset", env.reset(seed=seed))
        task = book.start(info, seed, policy)
        while book.outcome is None:
            if stop is not None and stop.is_set():
                raise asyncio.CancelledError("stop requested")
            book.begin_step(obs)
            decision = await book.clock.timed("decide", policy.decide(task, tuple(book.history), obs))
            step = book.base(decision, obs)
            why = book.unexecutable(decision)
            if why is not None:
                await book.reject(step, obs, *why)
                continue
            action = decision.action
            assert action is not None  # unexecutable() said why otherwise
            if action.kind is ActionKind.ASK_USER:
                await book.asked(step, obs, action, person)
                continue
            verdicts = await book.clock.timed("verify", env.verify([action, *decision.candidates]))
            step = book.add_verdicts(step, verdicts)
            probe = Probe(book.device, obs, ocr)
            checked = await book.clock.timed("guard", book.settle_guard(guard.check(action, probe), person))
            step = book.add_guard(step, checked)
            if checked.verdict is not GuardVerdict.ALLOW:
                await book.reject(step, obs, "GuardRefusal", f"refused: {checked.reason}", False)
                continue
            try:
                result = await book.clock.timed("step", env.step(book.secrets.resolve(action)))
            except UnsupportedAction as e:  # a valid action this device cannot do: the policy's mistake
                await book.reject(step, obs, type(e).__name__, str(e), True)
                continue
            except TYPED_ERRORS as e:
                await book.record(book.failed(step, e))
                raise
            obs = await book.stepped(step, obs, action, result)
    except TYPED_ERRORS as e:
        return await book.abort(e)
    except (asyncio.CancelledError, KeyboardInterrupt):
        await book.interrupt()
        raise
    except Exception as e:
        await book.abort(e)
        raise
    return await book.finish()

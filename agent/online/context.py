"""What the session hands its actors and its learner: narrow, typed contexts instead of itself.

An actor sees ``ActorContext`` (its settings, the run folder, the job queue, the shared model policy,
the version follower, the transport, and the few session calls it makes); the learner thread sees
``LearnerContext``. Neither imports the session: ``agent/online/session.py`` builds both, so the
actors run the same whether the session lives in this process or, later, across a bus.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.online.tasks import Jobs
from agent.online.versions import AdapterFollower, VersionClock
from envs.trajectory import RunWriter
from train.step_rewards import StepRule
from train.transport import Transport


class Counters:
    """Named session counters, safe to add to from the actors' loop and the learner thread."""

    def __init__(self) -> None:
        self._counts: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    def add(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._counts[key] += n

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


@dataclass(frozen=True, slots=True)
class ActorSettings:
    """The session's settings an actor acts on."""

    env: str
    """The registered environment every episode runs."""
    device_kind: str
    """The actors' device kind (``devices.registry``)."""
    addresses: tuple[str, ...]
    """The devices' addresses, one per actor, for kinds that take one (android: phone serials); () for the default
    device of the kind."""
    max_steps: int | None
    """Step budget per episode (None: the environment's own)."""
    group_level: str
    """step (n answers per screen) or episode (n episodes per task seed)."""
    group_size: int
    """n: answers per screen, or episodes per task seed."""
    max_restarts: int
    """Device failures in a row before the actor is dropped."""
    session_id: str
    """Prefix of every sample and episode id of this session."""
    reward: StepRule = StepRule.AEPO
    """The online step reward's rule (``train.reward_registry.online_rule`` of ``data.reward``)."""


@dataclass(frozen=True, slots=True)
class ActorContext:
    """Everything an actor uses; built by the session (see the module docstring)."""

    settings: ActorSettings
    run: RunWriter
    """Where episodes are recorded."""
    jobs: Jobs
    """The next task seed and group for each episode."""
    policy: Any
    """The shared ``ModelPolicy`` (temperature 1): builds requests and reads generations."""
    follower: AdapterFollower
    """The adapter version the shared backend acts with; ``sync()`` loads a newer one between steps."""
    versions: VersionClock
    """Records when each version first acted, per actor."""
    transport: Transport
    """Where samples, episodes and statuses go."""
    generate: Callable[[Any], Awaitable[Any]]
    """One generation request to the shared backend (batched with other actors' when the session batches)."""
    wait_for_room: Callable[[], Awaitable[None]]
    """Backpressure: returns when the learner's backlog leaves room for more samples."""
    wait_ready: Callable[[], Awaitable[None]]
    """Returns once the learner's first version is loaded (or the session stops)."""
    stopping: Callable[[], bool]
    alive_actors: Callable[[], list[str]]
    counters: Counters
    warn_once: Callable[[str, str], None]
    """(key, message): log a warning once per session."""
    fatal: Callable[[BaseException], None]
    """Stop the session with this error."""


@dataclass(frozen=True, slots=True)
class LearnerContext:
    """Everything the learner thread uses; built by the session (see the module docstring)."""

    transport: Transport
    versions: VersionClock
    filter: Any
    """``train.config`` FilterConfig: which groups have nothing to learn from."""
    max_policy_lag: int | None
    """Samples more than this many versions behind the learner are dropped (None keeps all)."""
    prompts_per_batch: int
    """Groups per update."""
    stopping: Callable[[], bool]
    request_stop: Callable[[str], None]
    """Called (thread-safely, through the event loop) when the learner is done or failed."""
    counters: Counters
    episode_stats: Callable[[], dict[str, float]]
    """The session's episode statistics now (success rate, reward mean, episodes, steps)."""
    alive_actors: Callable[[], list[str]]
    elapsed: Callable[[], float]
    """Acting wall time of the run so far."""
    group_timeout_s: float = 600.0
    """Seconds after which an incomplete group is trained on with what it has."""
    journal: Path | None = None
    """Where the learner lists the id of every group message it took (first deliveries), when set (a fleet's
    learner: the audit trail against each actor's ``produced.log``)."""
    open_inbox_log: Callable[[int], Any] | None = None
    """A fleet learner's: opens its inbox log (``agent.fleet.journal.InboxLog``) at the starting step; each
    update's consumed message ids are recorded in it, and the update's checkpoint written, before its version is
    announced. None elsewhere."""
    demos: Any = None
    """Success replay (``agent.online.demos.DemoReplay``): recorded successes mixed into failing tasks' groups; None
    when ``online.demo_share`` is 0."""

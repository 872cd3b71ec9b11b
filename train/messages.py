"""The messages of an online session: what actors and the learner say to each other.

Named after the topics of the fleet bus (docs/design.md, "The transport"):

- ``GroupMessage`` (actor -> learner, ``samples/<actor>``): scored training samples. A group is all messages with
  the same ``group`` key; ``parts`` says how many make it whole (1 for a step-level group: the n candidates of one
  screen; n for an episode-level group: one message per episode of the same task seed).
- ``EpisodeMessage`` (actor -> learner, ``episodes/<actor>``): how an episode ended, for progress and curves.
- ``AdapterRef`` (``train.adapters``; learner -> actors, ``policy``, retained): the newest adapter version.
- ``Announcement`` (learner -> actors over a bus, ``policy``, retained): an ``AdapterRef`` with the fleet key's
  signature, so that only the learner can publish a version.
- ``ActorStatus`` (actor -> all, ``status/<actor>``, retained): what each actor is doing.

They are plain values; ``train.wire`` turns them into bytes and back, ``train.transport`` carries them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from train.adapters import AdapterRef
from train.samples import TrainSample

__all__ = ["ActorStatus", "Announcement", "EpisodeMessage", "GroupMessage", "Message"]

ACTOR_STATES = ("starting", "waiting", "running", "restarting", "dropped", "stopped", "offline")
"""What ``ActorStatus.state`` may say. ``offline`` is the last will a broker publishes for an actor whose
connection dropped without a goodbye (a killed process, a cut network)."""


@dataclass(frozen=True, slots=True)
class GroupMessage:
    """Scored samples for one group, or one part of it (see the module docstring)."""

    id: str
    """Unique message id; the learner drops a second delivery of the same id."""
    actor: str
    group: str
    """Group key: the messages with this key form one group."""
    parts: int
    """Messages that make the group whole."""
    level: str
    """"step" (n candidates for one screen) or "episode" (the steps of n episodes of one task seed)."""
    samples: tuple[TrainSample, ...]
    """May be empty: an episode that aborted still counts as a part, so that its group can complete."""
    created_at: float = 0.0

    def __post_init__(self) -> None:
        if self.level not in ("step", "episode"):
            raise ValueError(f"level must be 'step' or 'episode', got {self.level!r}")
        if self.parts < 1:
            raise ValueError(f"parts must be at least 1, got {self.parts}")


@dataclass(frozen=True, slots=True)
class EpisodeMessage:
    """How one episode ended."""

    id: str
    actor: str
    env: str
    seed: int
    episode_id: str
    outcome: str
    """An ``envs.records.Outcome`` value."""
    reward: float | None
    """The task checker's reward (None when the episode aborted or was interrupted)."""
    steps: int
    versions: tuple[str, ...] = ()
    """Adapter versions that decided its steps, in order of first use."""
    started_at: float = 0.0
    ended_at: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds per phase over the episode (reset, decide, verify, step, act, observe, record, ...)."""
    group: str = ""
    """The group key for episode-level groups."""


@dataclass(frozen=True, slots=True)
class ActorStatus:
    """What one actor is doing (retained: the latest per actor)."""

    actor: str
    state: str
    """One of ``ACTOR_STATES``: starting, waiting (for the first adapter), running, restarting, dropped, stopped,
    offline (the broker's last will for it)."""
    version: str | None = None
    episodes: int = 0
    steps: int = 0
    restarts: int = 0
    error: str = ""
    at: float = 0.0
    """Wall time of the status; when ``version`` changed, the time of the first decision with it."""
    device: str = ""
    """web, desktop, android:SERIAL (fleet actors say which)."""
    host: str = ""
    """The machine the actor runs on."""
    steps_per_s: float = 0.0
    """Steps per second over the actor's recent episodes."""
    refused: int = 0
    """Adapter versions refused so far (a bad signature or checksum, another session's announcement, a replay of one
    not newer than the version it runs): the actor kept the version it had."""
    spooled: int = 0
    """Messages waiting in the actor's spool for the broker's acknowledgement."""


@dataclass(frozen=True, slots=True)
class Announcement:
    """A version announcement as a bus carries it: the ``AdapterRef``, the session it is for and when it was signed,
    and an HMAC-SHA256 signature of all three under the fleet key (``agent.fleet.keys``); ``key_id`` names the key
    (its fingerprint) without revealing it."""

    ref: AdapterRef
    key_id: str
    signature: str
    session: str = ""
    """The session (the fleet's topic prefix) it was signed for: an actor of another session refuses it."""
    issued_at: float = 0.0
    """Wall time of the signature: with ``ref.step``, what orders announcements (an actor takes only newer ones)."""


Message = GroupMessage | EpisodeMessage | ActorStatus | AdapterRef | Announcement

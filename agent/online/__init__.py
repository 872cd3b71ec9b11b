"""Online sessions (``agent train --online``): actors and a learner in one process.

    session = OnlineSession(train_config, OnlineConfig(env="generated/click", actors=2))
    result = asyncio.run(session.run())

N actors, asyncio tasks, each drive their own device (web: their own Chromium) through an environment with the
one episode runner (``agent/runner.py``: decide, verify, guard, step, record), as ``agent eval`` does; each sees
the session only through a narrow ``ActorContext`` (``agent/online/context.py``), the learner thread only through
a ``LearnerContext``. They all sample from ONE inference backend. A learner thread runs ``Trainer.run_stream`` on its own copy of the model, fed by the transport
(``train.transport``); after every update it publishes adapter vN (``train.adapters``: an atomic folder and its
sha256; with ``model.finetune=full`` the whole weights, ``train.full_versions``), and the actors' backend loads vN
between two steps, after checking the bytes, without reloading the base model (full weights are copied into it in
place). Every step records the adapter version that decided it (``info.policy.adapter_version`` in steps.jsonl),
and every sample carries it, so the learner can drop samples more than ``max_policy_lag`` versions behind and
correct the rest with the behaviour log-probs.

Groups (``group_level``):

- ``step``: the policy samples ``rl.group_size`` answers for each screen; the environment's step verifier checks
  every action of every answer, which gives each answer AEPO's released reward (``train.step_rewards``: -1 when it
  does not parse, 1 + 1/sqrt(N k) when its k-th of N actions is the first right one, 1 - 1/N when none is), or with
  ``data.reward`` guir1, GUI-R1's (0.2 x one action + 0.8 x the first action right); the first answer that parses
  is executed; the answers form one group.
- ``episode``: ``rl.group_size`` episodes of the same task seed, one answer per step; every step of an episode is a
  sample with the episode's checker reward (``origin["episode"]``), and the group is every step of those episodes:
  the learner gives each episode one advantage, shared by its steps.

The run folder is the trainer's ``train.run_dir``: the episodes (``ep0000/`` ..., an ordinary run folder that
``agent report`` reads), ``adapters/vNNNNNN/`` (published versions, newest few kept), ``checkpoints/``,
``metrics.jsonl`` (learner metrics plus ``online/*``), ``online.jsonl`` (one line per episode: wall time, outcome,
versions: the learning curve), ``adapters.jsonl`` (per version: written, loaded, every actor acting with it),
``online.json`` (the session's settings, for ``--resume``), ``curves.png``, ``online_curve.png`` and
``report.html``.

Faults: an actor whose device dies has its episode recorded as aborted, gets a new device and goes on; after
``max_restarts`` failures in a row it is dropped (logged) while the others go on. A learner error stops the run
after writing a checkpoint, with a message saying where it is. A published adapter whose bytes do not match its
sha256 is refused and never loaded; the actors keep acting with the version they have. Ctrl-C stops the actors
(their episodes are recorded as interrupted), lets the learner finish its update and checkpoint, and closes every
device; ``--resume RUN_DIR`` continues from the last checkpoint with the same data position and curriculum.

Modules, in reading order: ``settings`` (OnlineConfig, OnlineError, the settings on disk), ``tasks`` (the seed
stream, the shared curriculum, the episode queue), ``versions`` (loading versions, timing their propagation),
``context`` (what actors and learner see of the session), ``batcher`` (batched generation for the actors),
``actors`` (an actor and the policy of its episodes; the step reward it scores with is ``train.step_rewards``),
``learner`` (the learner thread and its feed), ``session`` (the wiring, the monitor, shutdown), ``results`` (what a session did), ``curve``. The fleet
(``agent.fleet``, docs/fleet.md) runs the same actors and learner in separate processes, over MQTT. The command, ``agent train --online``, is
``agent.cli.train_online``. docs/online.md has the whole picture.
"""

from agent.online.actors import OnlineActor
from agent.online.curve import curve_points, plot_online_curve
from agent.online.results import OnlineResult
from agent.online.session import OnlineSession
from agent.online.settings import OnlineConfig, OnlineError, config_overrides, load_session, online_overrides
from agent.online.tasks import TaskDraw, TaskSampler
from agent.online.versions import AdapterFollower, VersionClock

__all__ = ["OnlineActor", "AdapterFollower", "OnlineConfig", "OnlineError", "OnlineResult", "OnlineSession",
           "TaskDraw", "TaskSampler", "VersionClock", "config_overrides", "curve_points", "load_session",
           "online_overrides", "plot_online_curve"]

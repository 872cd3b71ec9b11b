"""The settings of an online session, its errors, and the settings on disk that ``--resume`` reads back."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.errors import OnlineError

DEVICE_KINDS = {"generated": "web", "miniwob": "web", "android": "android", "desktop": "desktop"}
"""The kind of device each environment suite runs on."""
SESSION_FILE = "online.json"


@dataclass(frozen=True, slots=True)
class OnlineConfig:
    """Settings of an online session (the model, the RL update and the outputs are the ``TrainConfig``'s)."""

    env: str = "generated/click"
    """Registered environment the actors run (``agent envs`` lists them)."""
    devices: int = 2
    """Actors, each with its own device."""
    device_kind: str = "web"
    """web (a Chromium per actor), android (one phone per actor, ``serials``) or desktop."""
    group_level: str = "step"
    """step (n answers per screen, scored by the step verifier) or episode (n episodes per task seed)."""
    max_policy_lag: int = 2
    """Drop samples more than this many adapter versions behind the learner; -1 = keep all."""
    max_steps: int = 0
    """Step budget per episode; 0 = the environment's."""
    max_pending: int = 0
    """Backlog (groups queued for the learner) at which actors pause; 0 = rl.batch_prompts x max_policy_lag."""
    max_restarts: int = 2
    """Device failures in a row after which an actor is dropped."""
    max_episodes: int = 0
    """Stop after this many episodes; 0 = when the learner has done train.steps updates."""
    max_wall_s: float = 0.0
    """Stop after this many seconds; 0 = no limit."""
    keep_adapters: int = 4
    """Published adapter versions kept on disk."""
    serials: tuple[str, ...] = ()
    """device_kind android: the phones' adb serials, one per actor."""
    wire: bool = False
    """Send every message through the bus codec (JSON header + binary parts), as a fleet would."""
    batch_decode: bool = True
    """Batch the actors' concurrent generate calls into one."""
    torch_threads: int = 0
    """torch.set_num_threads for the session; 0 = leave torch's default."""
    progress_every_s: float = 10.0
    """Seconds between progress lines."""
    report: bool = True
    """Write report.html at the end."""
    demos: str = ""
    """Success replay: a folder of recorded demonstrations (run folders) of the session's tasks (docs/online.md)."""
    demo_share: float = 0.0
    """Success replay: share of each update's groups that may carry a recorded success, at most
    ceil(demo_share x rl.batch_prompts), only for failing tasks; 0 = off."""
    demo_below: float = 0.5
    """Success replay: a task is failing while its running success is below this (or the curriculum holds it as
    hard)."""
    group_timeout_s: float = 600.0
    """A group still incomplete this long after its first part (an actor died in the middle of it) is trained on
    with the parts it has (``GroupAssembler``)."""
    remote_actors: bool = False
    """The actors run in other processes (``agent actor``) and reach this learner over the transport (a fleet,
    docs/fleet.md); ``devices`` is then only how many the progress line expects."""

    def __post_init__(self) -> None:
        if self.devices < 1:
            raise ValueError(f"devices must be at least 1, got {self.devices}")
        if self.device_kind not in ("web", "desktop", "android"):
            raise ValueError(f"device_kind {self.device_kind!r} is not web, desktop or android")
        if self.group_level not in ("step", "episode"):
            raise ValueError(f"group_level {self.group_level!r} is not step or episode")
        if self.max_policy_lag < -1:
            raise ValueError(f"max_policy_lag must be -1 (keep all) or more, got {self.max_policy_lag}")
        for name in ("max_restarts", "max_steps", "max_episodes", "max_pending"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be 0 or more, got {getattr(self, name)}")
        if self.keep_adapters < 1:
            raise ValueError(f"keep_adapters must be at least 1, got {self.keep_adapters}")
        if not 0 <= self.demo_share <= 1:
            raise ValueError(f"demo_share must be a share between 0 (off) and 1, got {self.demo_share}")
        if self.demo_share > 0 and not self.demos:
            raise ValueError("demo_share > 0 replays recorded successes: name their folder with demos (--demos DIR)")
        if self.group_timeout_s <= 0:
            raise ValueError(f"group_timeout_s must be positive, got {self.group_timeout_s}")
        if not 0 < self.demo_below <= 1:
            raise ValueError(f"demo_below must be in (0, 1], got {self.demo_below}")


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} as a --set value")


def config_overrides(config: Any) -> list[str]:
    """``config`` as ``section.key=value`` overrides (what ``load_train_config`` reads back into the same config)."""
    return [f"{section}.{key}={_toml_value(value)}" for section, values in config.to_dict().items()
            for key, value in values.items()]


def online_json(online: OnlineConfig) -> dict[str, Any]:
    d = dataclasses.asdict(online)
    d["serials"] = list(online.serials)
    return d


def load_session(run_dir: str | Path) -> tuple[list[str], OnlineConfig]:
    """The saved train-config overrides and online settings of an online run folder (for ``--resume``)."""
    path = Path(run_dir) / SESSION_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise OnlineError(f"{run_dir} is not an online run folder (no {SESSION_FILE}); pass the run_dir of an earlier "
                          f"agent train --online") from None
    except (OSError, ValueError) as exc:
        raise OnlineError(f"{path} cannot be read: {exc}") from exc
    known = {f.name for f in dataclasses.fields(OnlineConfig)}
    online = {k: v for k, v in data.get("online", {}).items() if k in known}
    online["serials"] = tuple(online.get("serials", ()))
    return list(data.get("train_overrides", [])), OnlineConfig(**online)

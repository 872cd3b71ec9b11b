"""An online session's settings (``train.config.OnlineConfig``, the ``[online]`` section), the checks that its actors can
run its environment, and the settings on disk that ``--resume`` reads back."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from agent.config import UNSET
from agent.errors import OnlineError
from train.config import OnlineConfig

SESSION_FILE = "online.json"


def check_actors(env: str, kind: str, count: int, addresses: tuple[str, ...] = ()) -> None:
    """``OnlineError`` when ``count`` actors on devices of ``kind`` (with ``addresses``) cannot run ``env`` in one
    process: the environment runs on another kind (its registration says which), or the kind's rules forbid it
    (``devices.registry.DeviceKindSpec.check_actors``)."""
    from devices.registry import device_kind

    runs_on = env_device_kind(env)
    if runs_on != kind:
        raise OnlineError(f"{env} runs on a {runs_on or 'unknown'} device, not --device {kind}")
    problem = device_kind(kind).check_actors(count, addresses)
    if problem:
        raise OnlineError(problem)


def env_device_kind(env: str) -> str | None:
    """The device kind environment ``env`` is registered on; ``OnlineError`` for an unknown name."""
    from envs.registry import spec

    try:
        return spec(env).device_kind
    except KeyError as exc:
        raise OnlineError(str(exc)) from None


def _toml_value(v: Any) -> str:
    if v is None:
        return json.dumps(UNSET)
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


def online_overrides(values: dict[str, Any]) -> list[str]:
    """``online.key=value`` overrides for the settings in ``values`` (an ``[online]`` table, or the flags given)."""
    return [f"online.{key}={_toml_value(value)}" for key, value in values.items()]


def online_json(online: OnlineConfig) -> dict[str, Any]:
    d = dataclasses.asdict(online)
    d["serials"] = list(online.serials)
    return d


def load_session(run_dir: str | Path) -> list[str]:
    """The saved settings of an online run folder as overrides of the training config, ``[online]`` included (for
    ``--resume``). Folders written before ``[online]`` was a section keep it apart (``"online"``): it comes first, and
    a setting an older version wrote as 0 or -1 for unset reads as unset."""
    path = Path(run_dir) / SESSION_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise OnlineError(f"{run_dir} is not an online run folder (no {SESSION_FILE}); pass the run_dir of an earlier "
                          f"agent train --online") from None
    except (OSError, ValueError) as exc:
        raise OnlineError(f"{path} cannot be read: {exc}") from exc
    known = {f.name for f in dataclasses.fields(OnlineConfig)} | set(OnlineConfig.RENAMED)
    online = {k: v for k, v in (data.get("online") or {}).items() if k in known}
    return [*online_overrides(online), *data.get("train_overrides", [])]

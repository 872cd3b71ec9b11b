"""Tasks derived from demonstrations (``agent record --make-task NAME``); importing this registers "tasks/*".

Every ``*.json`` file in the tasks folder is one environment, ``tasks/<file name>``: the folder is
``$HANDEYE_TASKS_DIR`` when set, else ``tasks/`` under the current directory, read when the suites are first
loaded. A file that does not load is registered all the same, its error in the description, so that ``agent
envs`` shows it and ``make`` raises the error naming the file and the field. ``register_tasks(folder)`` registers
another folder's tasks instead (tests, a long-lived process after writing a task).

A task file is data: it is read only when it is a regular file (a FIFO named ``x.json`` is listed with its error,
never waited on), within ``MAX_TASK_BYTES``, and a start that runs a command runs only from a folder the person
trusts (``--trust-tasks DIR``, ``envs/derived/trust.py``).

docs/recording.md ("Derived tasks") describes the file format.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from envs.derived.checkers import ConditionResult, check, verdict
from envs.derived.derive import derive_task, wanted_for_derive
from envs.derived.env import DerivedTaskEnv
from envs.derived.spec import (FORMAT, Condition, ConditionKind, DeviceKind, TextMatch, TaskSpec, check_name, load_task,
                               parse_task)
from envs.derived.states import TextReader, read_android_state, read_desktop_state, read_web_state
from envs.derived.trust import check_trusted, commands_of, trust_tasks, trusted_folders
from envs.errors import TaskFileError
from envs.registry import REGISTRY, register

log = logging.getLogger(__name__)

SUITE = "tasks"
TASKS_DIR_VARIABLE = "HANDEYE_TASKS_DIR"
_ENTRY = "envs.derived.env:DerivedTaskEnv"


def tasks_dir() -> Path:
    """Where task files are: ``$HANDEYE_TASKS_DIR``, else ``tasks/`` under the current directory."""
    return Path(os.environ.get(TASKS_DIR_VARIABLE) or "tasks")


def register_tasks(folder: str | Path | None = None) -> list[str]:
    """Register every task file of ``folder`` (default ``tasks_dir()``) as "tasks/<name>", replacing the tasks
    registered before; the names registered."""
    for name in [n for n, s in REGISTRY.items() if s.suite == SUITE]:
        del REGISTRY[name]
    root = Path(folder) if folder is not None else tasks_dir()
    if not root.is_dir():
        return []
    names = []
    for path in sorted(root.glob("*.json")):
        name = f"{SUITE}/{path.stem}"
        try:
            spec = load_task(path)
        except TaskFileError as e:
            log.info("%s", e)  # listed with its error; making it raises the error
            register(name, _ENTRY, SUITE, f"cannot be loaded: {e}", device_kind=None, path=str(path.resolve()), env_name=name)
        else:
            runs = " (its start runs a command: needs --trust-tasks)" if commands_of(spec) else ""
            register(name, _ENTRY, SUITE, f"{spec.device.value}: {spec.instruction}{runs}", max_steps=spec.max_steps,
                     device_kind=spec.device.value, path=str(path.resolve()), env_name=name)
        names.append(name)
    return names


register_tasks()

__all__ = ["FORMAT", "SUITE", "TASKS_DIR_VARIABLE", "Condition", "ConditionKind", "ConditionResult", "DerivedTaskEnv",
           "DeviceKind", "TextMatch", "TaskSpec", "TextReader", "check", "check_name", "check_trusted", "commands_of",
           "derive_task", "load_task", "parse_task", "read_android_state", "read_desktop_state", "read_web_state",
           "register_tasks", "tasks_dir", "trust_tasks", "trusted_folders", "verdict", "wanted_for_derive"]

"""Which task folders may run commands: none, unless the person names the folder (``--trust-tasks DIR``).

A task file is data: it may come from a downloaded folder, and ``tasks/`` is read from the current directory. So
its start state may only use handeye's own operations, which run nothing the file chooses:

- web: open a page (an ``http``/``https`` address, or a file under the task's folder served on 127.0.0.1);
- Android: go home, ``am force-stop PACKAGE`` (what ``agent record --make-task`` derives), start ``package`` at
  ``activity``;
- desktop: the screen as it is.

Anything else, a desktop ``start.command`` (a program started on this machine) or an Android ``start.commands``
entry other than a force-stop (an ``adb shell`` line on the phone), is a command: ``DerivedTaskEnv`` refuses to be
made from such a file unless its folder was trusted in this process (``trust_tasks``, which ``agent eval``, ``agent
train-online`` and ``agent actor`` call for each ``--trust-tasks DIR``). The refusal names the command and the
flag to pass. Trust is by folder, resolved (symlinks followed), never inherited by subfolders.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from envs.derived.spec import AndroidStart, DesktopStart, TaskSpec
from envs.errors import TaskFileError

__all__ = ["FORCE_STOP_RE", "check_trusted", "commands_of", "trust_tasks", "trusted_folders"]

FORCE_STOP_RE = re.compile(r"am force-stop [A-Za-z][\w]*(\.[A-Za-z][\w]*)+")
"""The one Android shell line a task may hold without trust: stopping a package, named as a package name."""
TRUST_FLAG = "--trust-tasks"

_trusted: set[Path] = set()


def trust_tasks(folder: str | Path) -> Path:
    """Let the task files of ``folder`` (itself, not its subfolders) run their commands in this process; the
    folder resolved. TaskFileError when it is not a folder."""
    path = Path(folder).resolve()
    if not path.is_dir():
        raise TaskFileError(f"{TRUST_FLAG} {folder}: not a folder; name the folder that holds the task files")
    _trusted.add(path)
    return path


def trusted_folders() -> tuple[Path, ...]:
    return tuple(sorted(_trusted))


def commands_of(spec: TaskSpec) -> tuple[str, ...]:
    """What the task's start would run that is not one of handeye's own operations (see the module docstring)."""
    start = spec.start
    if isinstance(start, DesktopStart) and start.command:
        return (" ".join(start.command),)
    if isinstance(start, AndroidStart):
        return tuple(c for c in start.commands if not FORCE_STOP_RE.fullmatch(c.strip()))
    return ()


def check_trusted(spec: TaskSpec, path: str | Path) -> None:
    """TaskFileError when the task's start runs a command and its folder is not trusted: the message names the
    command, where it would run, and the flag that trusts the folder."""
    commands = commands_of(spec)
    if not commands:
        return
    folder = Path(path).resolve().parent
    if folder in _trusted:
        return
    where = "on this machine" if isinstance(spec.start, DesktopStart) else "on the phone (adb shell)"
    field = "start.command" if isinstance(spec.start, DesktopStart) else "start.commands"
    flag = f"{TRUST_FLAG} {shlex.quote(str(folder))}"
    raise TaskFileError(f"{path}: {field} runs {commands[0][:200]!r} {where}; a task file runs commands only "
                        f"from a folder you trust. If you wrote this file or read it, pass {flag}; otherwise remove "
                        "the field")

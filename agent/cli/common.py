"""What the command modules share: exit codes, the console, the error printer, argument types, config options.

Everything here is light to import (argparse, pathlib, the standard library): ``agent --help`` builds every
command's parser, so a heavy import at the top of this module would slow down every invocation.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import re
import sys
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

from agent.terminal import plain

EXIT_OK, EXIT_EPISODE_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


# -- argument types ---------------------------------------------------------------------------------------------


def device_arg(text: str) -> tuple[str, str]:
    """``--device``: a device kind, or ``KIND:ADDRESS`` for kinds with addresses (``android:SERIAL``), as (kind,
    address); the forms come from ``devices.registry``."""
    from devices.errors import UnknownDeviceKind
    from devices.registry import parse_device

    try:
        kind, address = parse_device(text)
    except UnknownDeviceKind as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return kind.name, address


def device_kind_arg(text: str) -> str:
    """``--device-kind``: the name of a registered device kind (``devices.registry``)."""
    from devices.errors import UnknownDeviceKind
    from devices.registry import device_kind

    try:
        return device_kind(text).name
    except UnknownDeviceKind as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def device_overrides(kind: str, address: str) -> list[str]:
    """The config overrides ``--device KIND[:ADDRESS]`` stands for: ``device.kind``, and the kind's address field
    (``android.serial``)."""
    from devices.registry import device_kind

    out = [f"device.kind={json.dumps(kind)}"]
    spec = device_kind(kind)
    if address and spec.address_field:
        out.append(f"{kind}.{spec.address_field}={json.dumps(address)}")
    return out


DEVICE_HELP = "a device kind, or KIND:ADDRESS (android:SERIAL); agent devices lists the kinds"
"""``--device``'s help. The kinds are not listed here: building every command's parser must not import the device
packages (``agent --help`` stays light); ``device_arg`` names them all when a value is wrong."""


def policy_arg(text: str) -> tuple[str, str]:
    """``--policy``: ocr, scripted, transformers:PATH_OR_ID or openai:URL, as (kind, where)."""
    kind, _, rest = text.partition(":")
    if kind in ("ocr", "scripted") and not rest:
        return kind, ""
    if kind in ("transformers", "openai") and rest:
        return kind, rest
    raise argparse.ArgumentTypeError(
        f"{text!r} is not a policy; use ocr, scripted, transformers:PATH_OR_HUB_ID or openai:http://HOST:PORT"
    )


def eval_policy_arg(text: str) -> tuple[str, str]:
    """``agent eval --policy``: what ``policy_arg`` accepts, or oracle (the environment's ground truth)."""
    return ("oracle", "") if text == "oracle" else policy_arg(text)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def size(text: str) -> tuple[int, int]:
    """A frame size like 1920x1080, as (width, height) in pixels."""
    m = re.fullmatch(r"\s*(\d+)\s*[xX×]\s*(\d+)\s*", text)
    if not m or int(m.group(1)) == 0 or int(m.group(2)) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 1920x1080 (width x height, in pixels)")
    return int(m.group(1)), int(m.group(2))


# -- config options ---------------------------------------------------------------------------------------------


def add_set_option(parser: argparse.ArgumentParser, help_text: str | None = None) -> None:
    """``--set SECTION.KEY=VALUE`` (repeatable), collected in ``args.overrides``."""
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help=help_text)


def add_window_options(parser: argparse.ArgumentParser, *, shown: bool = False) -> None:
    """``--headed`` / ``--headless``, the same pair on every command that opens a browser, in ``args.headless``
    (None when neither is given: the command's default, ``shown`` or not, which for a browser the agent drives is
    ``web.headless``)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--headed", dest="headless", action="store_false",
                       help="show the browser window (needs a display)" + (" (the default here)" if shown else ""))
    group.add_argument("--headless", dest="headless", action="store_true",
                       help="no browser window" + ("" if shown else " (the default: web.headless)"))
    parser.set_defaults(headless=None)


def window_overrides(args: argparse.Namespace) -> list[str]:
    """The ``web.headless`` override ``--headed`` / ``--headless`` stand for (none when neither was given)."""
    return [] if args.headless is None else [f"web.headless={'true' if args.headless else 'false'}"]


def add_trust_tasks_option(parser: Any, *, none_when_absent: bool = False) -> None:
    """``--trust-tasks DIR`` (repeatable), in ``args.trust_tasks`` (an empty list when not given, or None with
    ``none_when_absent``): derived task files in DIR may run the commands their start names
    (``envs/derived/trust.py``); without it such a task is refused."""
    parser.add_argument("--trust-tasks", action="append", default=None if none_when_absent else [], metavar="DIR",
                        help="let the task files in DIR run the commands their start names (a desktop "
                             "start.command, Android shell lines); only for folders whose files you wrote or read "
                             "(docs/security.md, Files on disk)")


def trust_given_tasks(folders: Iterable[str] | None, names: Iterable[str] = ()) -> None:
    """Trust each ``--trust-tasks`` folder, then check that every derived task among ``names`` may be made:
    ``TaskFileError`` naming the command and the flag to pass before any device starts."""
    from envs.derived import check_trusted, load_task, trust_tasks
    from envs.registry import REGISTRY

    for folder in folders or ():
        trust_tasks(folder)
    for name in names:
        entry = REGISTRY.get(name)
        path = dict(entry.kwargs).get("path") if entry is not None and entry.suite == "tasks" else None
        if path:
            try:
                spec = load_task(path)
            except ValueError:
                continue  # not a valid task: making it says why
            check_trusted(spec, path)


def config_path(given: str | None) -> str | None:
    """The config file to load: the one given, else ./config.toml when present, else None (built-in defaults)."""
    return given or ("config.toml" if Path("config.toml").is_file() else None)


def policy_overrides(kind: str, where: str) -> list[str]:
    """The config overrides that ``--policy KIND[:WHERE]`` stands for."""
    out = [f"policy.kind={json.dumps(kind)}"]
    if kind == "transformers":
        out.append(f"model.id={json.dumps(where)}")
    elif kind == "openai":
        out.append(f"model.url={json.dumps(where)}")
    return out


def add_adapter_option(parser: argparse.ArgumentParser) -> None:
    """``--adapter DIR``, in ``args.adapter``: ``model.adapter`` (see ``adapter_overrides``)."""
    parser.add_argument("--adapter", metavar="DIR",
                        help="a LoRA adapter loaded on the model, or the run folder of agent train that wrote it: the "
                             "base model, family, prompt variant and pixel budget it was trained with come from the "
                             "run unless given; alone, it means --policy transformers on that base (config: "
                             "model.adapter)")


def adapter_overrides(args: argparse.Namespace, policy_given: bool) -> list[str]:
    """The overrides ``--adapter DIR`` stands for: ``model.adapter``, and the transformers policy when no
    ``--policy`` was given (the model is loaded here; its id comes from the run, ``policy.trained``)."""
    if args.adapter is None:
        return []
    return ([] if policy_given else ['policy.kind="transformers"']) + [f"model.adapter={json.dumps(args.adapter)}"]


def flag_overrides(args: argparse.Namespace, flags: Iterable[tuple[str, str]]) -> list[str]:
    """``section.key=value`` for each (attribute of ``args``, config key) whose flag was given."""
    out: list[str] = []
    for flag, key in flags:
        value = getattr(args, flag)
        if value is not None:
            out.append(f"{key}={json.dumps(value)}")
    return out


def resume_run_dir(given: str, configured: str, kind: str) -> tuple[Path, str]:
    """``agent train --resume [GIVEN]`` as (the run folder to continue, ``train.resume``).

    GIVEN is "auto" (the flag alone: the configured run folder, else the newest ``runs/<kind>-*``), a run folder
    (its newest checkpoint), or one checkpoint folder (``<run>/checkpoints/step-N``: that one, in its run folder).
    Raises ``ConfigError`` when there is nothing to continue."""
    from agent.errors import ConfigError
    from train.config import latest_run_dir

    if given == "auto":
        if configured:
            return Path(configured), "auto"
        found = latest_run_dir(kind)
        if found is None:
            raise ConfigError(f"--resume: there is no runs/{kind}-* folder here to continue; name the run folder: "
                              f"--resume RUN_DIR")
        return found, "auto"
    path = Path(given)
    if not path.is_dir():
        raise ConfigError(f"--resume {given}: no such folder; pass the run folder of an earlier agent train"
                          f"{' --online' if kind == 'online' else ''} (or --resume alone for the newest one)")
    if (path / "state.json").is_file() or (path / "COMPLETE").is_file():  # one checkpoint: <run>/checkpoints/step-N
        return (Path(configured) if configured else path.parent.parent), str(path)
    return path, "auto"


def existing(folder: str | Path, names: Iterable[str]) -> list[str]:
    """The names (files, or folders written with a trailing /) that exist in ``folder``: what a closing line may
    point at."""
    return [n for n in names if (Path(folder) / n.rstrip("/")).exists()]


# -- output -----------------------------------------------------------------------------------------------------


class OneLineFormatter(logging.Formatter):
    """``level logger: message`` on one line: a record's own line breaks (a traceback-like message, a warning's
    source line) would otherwise scatter one warning over several lines of a narrow terminal."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.name == "py.warnings":  # warnings.formatwarning: "file:line: Category: text\n  <source line>"
            message = "\n".join(line for line in message.splitlines() if not line.startswith((" ", "\t")))
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            message = f"{message} ({record.exc_text.strip().splitlines()[-1]})"
        text = " ".join(part.strip() for part in message.splitlines() if part.strip())
        when = f"{self.formatTime(record, '%H:%M:%S')} " if record.levelno < logging.WARNING else ""
        return f"{when}{record.levelname.lower()} {record.name}: {text}"


LIBRARY_LOGGERS = ("huggingface_hub",)
"""Libraries that add a stderr handler of their own to a logger that also propagates to the root, so that each of
their lines was printed twice; ``setup_logging`` takes their handler off (transformers' own handler does not
propagate, so it prints once)."""


def setup_logging(verbosity: int) -> None:
    """One handler, on the root logger and stderr, one line per record (``OneLineFormatter``); Python warnings
    (``warnings.warn``: deprecations, a library's advice) go through it too, as ``py.warnings`` records."""
    level = logging.WARNING if verbosity == 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLineFormatter())
    logging.basicConfig(level=level, handlers=[handler], force=True)
    logging.captureWarnings(True)
    for noisy in ("RapidOCR", "asyncio"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
    for name in LIBRARY_LOGGERS:
        _adopt(name)


def _adopt(name: str) -> None:
    """Route library ``name``'s records through the root handler only (its own handler is added when it is
    imported, so it is imported here first: huggingface_hub's logging module alone takes a few milliseconds)."""
    import importlib

    try:
        importlib.import_module(f"{name}.utils.logging")
    except ImportError:
        return
    logger = logging.getLogger(name)
    for h in list(logger.handlers):
        logger.removeHandler(h)
    logger.propagate = True


def make_console() -> Any:
    """A rich console on stdout, without rich's guessing at what to highlight."""
    from rich.console import Console

    return Console(highlight=False)


def print_error(message: str) -> int:
    """Print ``error: message`` (as text: messages quote file names, config keys and page text, whose brackets must
    not read as markup) and return the exit code for bad input (2)."""
    make_console().print(f"[bold red]error:[/] {plain(message)}", soft_wrap=True)
    return EXIT_USAGE


def terminal_person() -> Any:
    """The person at the terminal (``agent.person.TerminalPerson``: confirms risky actions, answers the agent's
    questions), or None when stdin is not a terminal: then what needs a yes is refused and ``ask_user`` ends the
    episode, since nobody is there."""
    if not sys.stdin.isatty():
        return None
    from agent.person import TerminalPerson

    return TerminalPerson()


def versions() -> dict[str, str]:
    """Python, platform and the versions of the packages that shape a run; written into every run.json."""
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for dist in ("handeye", "playwright", "rapidocr", "onnxruntime", "numpy", "opencv-python-headless"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out

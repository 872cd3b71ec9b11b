"""``agent run``: one task on one device, observed, decided, acted, settled and recorded until it ends.

Everything the run needs (config, task, start page, policy, guard, run folder) is resolved before the device
starts, so bad input ends with exit code 2 and nothing half-started. The episode ends with exit code 0 (success,
claimed, or planned by --dry-run), 1 (failure, infeasible, truncated, aborted), or 128 + the signal's number when
Ctrl-C (130), SIGTERM (143) or SIGHUP (129) stopped it: each ends the episode as interrupted (``agent.signals``).
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.builders import build_device, build_guard, build_policy, close_policy
from agent.cli.common import (DEVICE_HELP, add_adapter_option, adapter_overrides, add_window_options, window_overrides, EXIT_EPISODE_FAILED, EXIT_INTERRUPTED, EXIT_OK, add_set_option, config_path,
                              device_arg, device_overrides, flag_overrides, make_console, policy_arg, policy_overrides, positive_int, print_error,
                              terminal_person, versions)

NAME = "run"

# (attribute of the parsed arguments, the config key its flag sets)
FLAG_KEYS = (("url", "device.url"), ("model", "model.id"), ("fmt", "model.format"), ("script", "policy.script"),
             ("max_steps", "agent.max_steps"), ("runs_dir", "record.runs_dir"))


def add_parser(sub: Any) -> None:
    run = sub.add_parser(NAME, help="run one task on a device until it is done", description=(
        "Observe, decide, act, settle and record until the policy finishes, declares the task "
        "infeasible, the step budget runs out, an error occurs, or Ctrl-C, SIGTERM or SIGHUP. Without --url "
        "the built-in demo page is used, whose tasks are checked by code."))
    run.add_argument("task", nargs="?", help='the instruction, e.g. "Click the Subscribe button" (default: the demo task)')
    run.add_argument("--device", type=device_arg, metavar="DEVICE",
                     help=f"{DEVICE_HELP} (config: device.kind, and the kind's address: android.serial)")
    run.add_argument("--url", help="start page for the web device (config: device.url)")
    run.add_argument("--policy", type=policy_arg, metavar="POLICY",
                     help="who decides: ocr, scripted, transformers:PATH_OR_ID or openai:URL (config: policy.kind, "
                          "model.id, model.url)")
    run.add_argument("--model", help="model id: its preset picks prompts, resize and parsing (config: model.id)")
    run.add_argument("--format", dest="fmt", help="model family for ids without a preset (config: model.format)")
    add_adapter_option(run)
    run.add_argument("--script", help="JSON list of actions for --policy scripted (config: policy.script)")
    run.add_argument("--max-steps", type=positive_int, help="step budget (config: agent.max_steps)")
    run.add_argument("--dry-run", action="store_true", help="record what would be done without doing it")
    run.add_argument("--yes", action="store_true",
                     help="say yes to every action the guard would ask about (config: guard.assume_yes)")
    run.add_argument("--runs-dir", help="where run folders go (config: record.runs_dir)")
    add_window_options(run)
    run.add_argument("--config", help="config file (default: ./config.toml when present, else built-in defaults)")
    add_set_option(run, "override one config option; repeatable")


def main(args: argparse.Namespace) -> int:
    from agent.config import load_config
    from agent.errors import AgentError
    from envs.errors import RecordError

    try:
        cfg = load_config(config_path(args.config), run_overrides(args))
        plan = make_plan(cfg, args.task)
    except (AgentError, RecordError, OSError) as e:
        return print_error(str(e))
    try:
        return execute(cfg, plan)
    finally:
        if plan.site is not None:
            plan.site.close()


def run_overrides(args: argparse.Namespace) -> list[str]:
    """The config overrides the flags stand for, then the ``--set`` ones (which win)."""
    out: list[str] = []
    if args.device is not None:
        out += device_overrides(*args.device)
    if args.policy is not None:
        out += policy_overrides(*args.policy)
    out += adapter_overrides(args, policy_given=args.policy is not None)
    out += flag_overrides(args, FLAG_KEYS)
    if args.dry_run:
        out.append("agent.dry_run=true")
    out += window_overrides(args)
    if args.yes:
        out.append("guard.assume_yes=true")
    return out + list(args.overrides)


@dataclass(frozen=True, slots=True)
class RunPlan:
    """What a run needs, resolved from config and arguments before anything starts."""

    task: str
    url: str
    site: Any  # the local server of the built-in pages (envs.site.LocalSite), or None; closed after the run
    builtin: Any  # the built-in task (envs.tasks.BuiltinTask) whose checker scores the run, or None
    policy: Any
    secrets: Any
    guard: Any
    run: Any  # the run folder's writer (envs.trajectory.RunWriter)


def make_plan(cfg: Any, task: str | None) -> RunPlan:
    """Resolve the task and start page, build the policy, secrets and guard, and open the run folder.

    Raises ConfigError (with what to give) for a missing task or an unusable policy, RecordError or OSError when the
    run folder cannot be written; the built-in pages' server, if started, is closed again then.
    """
    from agent.errors import ConfigError
    from agent.secrets import Secrets
    from envs.trajectory import RunWriter
    from policy.errors import PolicyUnavailable

    task, url, site, builtin = _target(cfg, task)
    try:
        try:
            policy = build_policy(cfg)
        except PolicyUnavailable as e:
            raise ConfigError(str(e)) from None
        secrets = Secrets(dict(cfg.secrets))
        guard = build_guard(cfg)
        run = RunWriter(cfg.record.runs_dir, config={"config": cfg.to_dict(), "versions": versions()},
                        frame_format=cfg.record.frame_format, fsync=cfg.record.fsync)
    except BaseException:
        if site is not None:
            site.close()
        raise
    return RunPlan(task, url, site, builtin, policy, secrets, guard, run)


def _target(cfg: Any, task: str | None) -> tuple[str, str, Any, Any]:
    """(task, start url, built-in pages' server or None, built-in task or None). Without a device url on the web
    device, the built-in demo pages are served and the task may be one of theirs (given by name or instruction)."""
    from agent.errors import ConfigError
    from devices.errors import NavigationError
    from devices.registry import device_kind
    from devices.web import check_url
    from envs.site import LocalSite
    from envs.tasks import BUILTIN_TASKS, DEFAULT_TASK, find_builtin

    kind = device_kind(cfg.device.kind)
    if not kind.opens_url:
        if cfg.device.url:
            raise ConfigError(f"--url is for a device that opens pages (the web); the {kind.name} device starts on "
                              f"its own screen")
        if not task:
            raise ConfigError(f'give the task to do, e.g. agent run "{kind.start_hint or "Open the settings"}" '
                              f'--device {kind.name}')
        return task, "", None, None
    if cfg.device.url:
        if not task:
            raise ConfigError("give the task to do on that page, e.g. agent run \"Click Sign in\" --url URL")
        try:
            check_url(cfg.device.url)
        except NavigationError as e:
            raise ConfigError(str(e)) from None
        return task, cfg.device.url, None, None
    task = task or BUILTIN_TASKS[DEFAULT_TASK].instruction
    builtin = find_builtin(task)
    if builtin is not None and builtin.name == task:
        task = builtin.instruction  # a task given by name runs its instruction
    site = LocalSite()
    return task, site.url(builtin.page if builtin else "demo.html"), site, builtin


def task_env(cfg: Any, plan: RunPlan) -> Any:
    """The planned run as an environment: the configured device, the task, the built-in task's checker if any, the
    step budget (``TimeLimit``) and, for ``--dry-run``, the ``DryRun`` wrapper."""
    from envs.task_env import TaskEnv
    from envs.wrappers import DryRun, TimeLimit

    device = build_device(cfg, plan.url)
    if plan.builtin is not None:
        env: Any = TaskEnv(device, plan.task, checker=plan.builtin.check, name=plan.builtin.name,
                           info={k: v for k, v in plan.builtin.describe().items() if k != "name"})
    else:
        env = TaskEnv(device, plan.task, name="url" if plan.url else cfg.device.kind,
                      info={"url": plan.url} if plan.url else {})
    return TimeLimit(DryRun(env) if cfg.agent.dry_run else env, cfg.agent.max_steps)


def execute(cfg: Any, plan: RunPlan) -> int:
    """Run the planned episode on a new device, print each step and the summary; the exit code of its outcome."""
    from agent.runner import RunOptions, run_episode
    from agent.secrets import redact_logs
    from agent.summary import print_step, print_summary
    from agent.terminal import plain
    from envs.records import Outcome

    console = make_console()
    writer = plan.run.episode(task=plan.secrets.redact(plan.task), dry_run=cfg.agent.dry_run)
    env = task_env(cfg, plan)
    redact_logs(plan.secrets)  # -v log lines pass through the same redaction as the records
    console.print(f"[bold]task[/] {plain(plan.secrets.redact(plan.task))}  [dim]({plain(plan.url)})[/]")
    interrupted = False
    stopped_by: list[int] = []  # the signal that stopped the episode, if one did
    steps: list[Any] = []  # as recorded (redacted): a dry run's summary lists them as the plan

    def on_step(step: Any) -> None:
        steps.append(step)
        print_step(console, step)

    async def episode() -> None:
        stop = stop_on_signals(stopped_by.append)
        try:
            options = RunOptions(cfg.agent.max_parse_retries, assume_yes=cfg.guard.assume_yes)
            await run_episode(env, plan.policy, writer, options=options, guard=plan.guard, secrets=plan.secrets,
                              on_step=on_step, stop=stop, person=terminal_person(),
                              ocr=_screen_reader(cfg))
        finally:
            await _close(env)
            await close_policy(plan.policy)

    try:
        asyncio.run(episode())
    except (KeyboardInterrupt, asyncio.CancelledError):
        interrupted = True
    record = writer.record
    print_summary(console, record, writer.path, steps)
    if interrupted or record.outcome is Outcome.INTERRUPTED:
        from agent.signals import exit_code

        return exit_code(stopped_by[0]) if stopped_by else EXIT_INTERRUPTED
    return EXIT_OK if record.outcome in (Outcome.SUCCESS, Outcome.CLAIMED, Outcome.PLANNED) else EXIT_EPISODE_FAILED


def _screen_reader(cfg: Any) -> Any:
    """OCR for the guard on a device that cannot say what is under a point itself (the desktop; None elsewhere, and
    without the OCR engine: the guard then cannot tell an irreversible target there, as docs/security.md says)."""
    from devices.registry import device_kind

    if device_kind(cfg.device.kind).reads_elements:
        return None
    try:
        import rapidocr  # noqa: F401
    except ImportError:
        return None
    from policy.ocr import OcrPolicy

    return OcrPolicy(cfg.ocr)


async def _close(env: Any) -> None:
    """Close the environment (and its device) even while Ctrl-C cancels the episode; best effort, 15 s at most."""
    import logging

    try:
        await asyncio.shield(asyncio.wait_for(env.close(), timeout=15))
    except (Exception, asyncio.CancelledError) as e:
        logging.getLogger(__name__).warning("closing the device failed: %s: %s", type(e).__name__, e)


def stop_on_signals(on_signal: Callable[[int], None] = lambda signum: None) -> asyncio.Event:
    """Ctrl-C, SIGTERM or SIGHUP while an episode runs: cancel it (the runner records it as interrupted), tell
    ``on_signal`` which signal came, and set the returned event, which the runner checks at every step boundary, so
    the episode ends even where a library swallowed the cancellation. A second signal gets its default handling
    (Ctrl-C: an immediate KeyboardInterrupt; SIGTERM, SIGHUP: the process ends at once and its episode reads as
    crashed). Nothing is installed outside the main thread (``agent.signals.StopSignals``)."""
    import logging

    from agent.signals import StopSignals, signal_name

    task, stop = asyncio.current_task(), asyncio.Event()

    def on_stop(signum: int) -> None:
        logging.getLogger(__name__).warning("%s: ending the episode as interrupted", signal_name(signum))
        on_signal(signum)
        stop.set()
        if task is not None:
            task.cancel()

    StopSignals(on_stop).install()
    return stop

"""The ``agent`` command line.

    agent run [TASK] [--device web] [--url URL] [--policy ocr|scripted] [--script FILE]
              [--max-steps N] [--dry-run] [--config FILE] [--set section.key=value ...]
    agent show PATH            print a recorded run or episode
    agent parse --format F --size WxH TEXT    show how a model's output is read and where it lands
    agent doctor               check that the browser, fonts and OCR models are in place

Exit codes: 0 success or claimed; 1 the episode ended otherwise (failure, infeasible, truncated,
aborted); 2 bad input (arguments, config, unwritable run folder); 130 interrupted by Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

log = logging.getLogger("agent")

EXIT_OK, EXIT_EPISODE_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def _device_arg(text: str) -> tuple[str, str]:
    kind, _, rest = text.partition(":")
    if kind in ("web", "desktop") and not rest:
        return kind, ""
    if kind == "android":
        return kind, rest
    raise argparse.ArgumentTypeError(f"{text!r} is not a device; use web, desktop, android or android:SERIAL")


def _policy_arg(text: str) -> tuple[str, str]:
    kind, _, rest = text.partition(":")
    if kind in ("ocr", "scripted") and not rest:
        return kind, ""
    if kind in ("transformers", "openai") and rest:
        return kind, rest
    raise argparse.ArgumentTypeError(
        f"{text!r} is not a policy; use ocr, scripted, transformers:PATH_OR_HUB_ID or openai:http://HOST:PORT"
    )


def _eval_policy_arg(text: str) -> tuple[str, str]:
    return ("oracle", "") if text == "oracle" else _policy_arg(text)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agent",
        description="handeye: let a policy see and operate a screen, and record every step.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser("run", help="run one task on a device until it is done", description=(
        "Observe, decide, act, settle and record until the policy finishes, declares the task "
        "infeasible, the step budget runs out, an error occurs or Ctrl-C. Without --url the "
        "built-in demo page is used, whose tasks are checked by code."))
    run.add_argument("task", nargs="?", help='the instruction, e.g. "Click the Subscribe button" (default: the demo task)')
    run.add_argument("--device", type=_device_arg, metavar="DEVICE",
                     help="web, desktop, or android[:SERIAL] (config: device.kind, android.serial)")
    run.add_argument("--url", help="start page for the web device (config: device.url)")
    run.add_argument("--policy", type=_policy_arg, metavar="POLICY",
                     help="who decides: ocr, scripted, transformers:PATH_OR_ID or openai:URL (config: policy.kind, "
                          "model.id, model.url)")
    run.add_argument("--model", help="model id: its preset picks prompts, resize and parsing (config: model.id)")
    run.add_argument("--format", dest="fmt", help="model family for ids without a preset (config: model.format)")
    run.add_argument("--script", help="JSON list of actions for --policy scripted (config: policy.script)")
    run.add_argument("--max-steps", type=_positive_int, help="step budget (config: agent.max_steps)")
    run.add_argument("--dry-run", action="store_true", help="record what would be done without doing it")
    run.add_argument("--runs-dir", help="where run folders go (config: record.runs_dir)")
    run.add_argument("--headed", action="store_true", help="show the browser window (needs a display)")
    run.add_argument("--config", help="config file (default: ./config.toml when present, else built-in defaults)")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                     help="override one config option; repeatable")

    show = sub.add_parser("show", help="print a recorded run or episode")
    show.add_argument("path", help="a run folder (runs/<run_id>) or an episode folder")

    sub.add_parser("doctor", help="check the browser, fonts, OCR models and run folder")
    ev = sub.add_parser("eval", help="success rates on environments whose rewards are checked by code", description=(
        "Run episodes of a suite's environments (or a grounding dataset), K at once, write their trajectories, "
        "print a success table with 95% confidence intervals and write report.html."))
    ev.add_argument("--suite", required=True, help="generated, miniwob, android, or screenspot (with --data)")
    ev.add_argument("--tasks", nargs="+", help="environment names or their short names (default: the whole suite)")
    ev.add_argument("--episodes", type=_positive_int, default=10, help="episodes per environment (seeds 0..N-1)")
    ev.add_argument("--policy", type=_eval_policy_arg, default=("ocr", ""), metavar="POLICY",
                    help="oracle, ocr, scripted, transformers:PATH_OR_ID or openai:URL (default: ocr)")
    ev.add_argument("--model", help="model id (config: model.id)")
    ev.add_argument("--format", dest="fmt", help="model family for ids without a preset")
    ev.add_argument("--script", help="JSON list of actions for --policy scripted")
    ev.add_argument("--parallel", type=_positive_int, default=1, help="episodes run at once, each on its own device")
    ev.add_argument("--max-steps", type=_positive_int, help="override each environment's step budget")
    ev.add_argument("--seed", type=int, default=0, help="first seed")
    ev.add_argument("--data", help="grounding dataset (file or folder) for --suite screenspot")
    ev.add_argument("--runs-dir", help="where run folders go (config: record.runs_dir)")
    ev.add_argument("--config", help="config file (default: ./config.toml when present)")
    ev.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")

    rep = sub.add_parser("report", help="build report.html for a run folder (agent run or agent eval)")
    rep.add_argument("run_dir", help="runs/<run_id>")

    data = sub.add_parser("data", help="grounding datasets")
    data_sub = data.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    show_data = data_sub.add_parser("show", help="draw the boxes of a random sample of a dataset's images")
    show_data.add_argument("file", help="a ScreenSpot / ScreenSpot-v2 JSON file, or a ScreenSpot-Pro folder")
    show_data.add_argument("--out", help="folder for the drawn images (default: a new folder under runs/)")
    show_data.add_argument("-n", type=_positive_int, default=16, help="how many images")
    show_data.add_argument("--seed", type=int, default=0)

    envs = sub.add_parser("envs", help="list the registered environments (task suites with verifiable checks)")
    envs.add_argument("--suite", help="only this suite (e.g. generated)")
    devices = sub.add_parser("devices", help="list the screens handeye can drive: monitors, phones, browsers")
    devices.add_argument("--config", help="config file (default: ./config.toml when present)")
    devices.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")

    tr = sub.add_parser("train", help="train a policy: cold-start SFT, AEPO / GRPO, rejection-sampling SFT",
                        description=(
        "Train the model named in the config with the stage it names (train.stage: sft, rl or rft). Outputs go to "
        "train.run_dir: metrics.jsonl, tb/ (TensorBoard), curves.png, checkpoints/ and the final adapter/ (or "
        "model/). Several processes or GPUs: accelerate launch -m agent.cli train --config FILE. Options: "
        "configs/train.toml; docs/training.md."))
    tr.add_argument("--config", help="training config file (TOML, see configs/train.toml)")
    tr.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="override one option, e.g. --set rl.group_size=8 (repeatable)")
    tr.add_argument("--stage", choices=("sft", "rl", "rft"), help="the stage to run (config: train.stage)")
    tr.add_argument("--resume", nargs="?", const="auto", metavar="CHECKPOINT",
                    help="resume: a checkpoint folder, or nothing for the newest in run_dir (config: train.resume); "
                         "with --online: the run folder of the session to continue")
    on = tr.add_argument_group("online", "agent train --online: actors on live devices stream verified experience to "
                               "the learner, which publishes a new adapter after every update (docs/training.md)")
    on.add_argument("--online", action="store_true", help="run actors and the learner together, in this process")
    on.add_argument("--env", help="environment the actors run, e.g. generated/click (agent envs lists them)")
    on.add_argument("--devices", type=_positive_int, help="actors, each with its own device (default 2)")
    on.add_argument("--device-kind", choices=("web", "desktop", "android"), help="the actors' devices (default web)")
    on.add_argument("--group-level", choices=("step", "episode"),
                    help="step: n answers per screen scored by the step verifier (default); episode: n episodes "
                         "per task seed scored by the task checker")
    on.add_argument("--max-policy-lag", type=int, metavar="K",
                    help="drop samples more than K adapter versions behind the learner (default 2; -1 keeps all)")
    on.add_argument("--minutes", type=float, metavar="M",
                    help="stop the session after M minutes of wall time, whatever the update count (default: none)")

    parse = sub.add_parser("parse", help="parse a model's output and show where each action lands", description=(
        "Read TEXT as the named model family (or registered model id) would have written it for a "
        "screenshot of WxH pixels, and print each action with its model-space, normalized and frame-pixel "
        "coordinates. For debugging a model's clicks."))
    parse.add_argument("text", help="the model's output (use $'...' in bash for newlines)")
    parse.add_argument("--format", dest="fmt", help="family (qwen2.5-vl, infigui-g1, gui-r1, ui-tars, ui-tars-1.5, "
                       "ui-tars-v1) or a registered model id (config: model.format / model.id)")
    parse.add_argument("--model", help="model id whose preset to use (config: model.id)")
    parse.add_argument("--size", required=True, type=_size, metavar="WxH", help="screenshot (frame) size, e.g. 1920x1080")
    parse.add_argument("--variant", help="prompt variant (config: model.variant)")
    parse.add_argument("--config", help="config file (default: ./config.toml when present)")
    parse.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    return parser


def _size(text: str) -> tuple[int, int]:
    import re

    m = re.fullmatch(r"\s*(\d+)\s*[xX×]\s*(\d+)\s*", text)
    if not m or int(m.group(1)) == 0 or int(m.group(2)) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 1920x1080 (width x height, in pixels)")
    return int(m.group(1)), int(m.group(2))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _setup_logging(args.verbose)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    if args.command == "run":
        return _cmd_run(args)
    if args.command == "show":
        return _cmd_show(args)
    if args.command == "parse":
        return _cmd_parse(args)
    if args.command == "devices":
        return _cmd_devices(args)
    if args.command == "envs":
        return _cmd_envs(args)
    if args.command == "eval":
        return _cmd_eval(args)
    if args.command == "report":
        return _cmd_report(args)
    if args.command == "data":
        return _cmd_data(args)
    if args.command == "train":
        return _cmd_train(args)
    return _cmd_doctor(args)


def _setup_logging(verbosity: int) -> None:
    from rich.logging import RichHandler

    level = logging.WARNING if verbosity == 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(message)s", datefmt="[%X]",
                        handlers=[RichHandler(show_path=False, rich_tracebacks=False)], force=True)
    for noisy in ("RapidOCR", "asyncio"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))


def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False)


def _error(message: str) -> int:
    _console().print(f"[bold red]error:[/] {message}", soft_wrap=True)
    return EXIT_USAGE


def _overrides(args: argparse.Namespace) -> list[str]:
    import json

    out: list[str] = []
    if args.device is not None:
        kind, serial = args.device
        out.append(f"device.kind={json.dumps(kind)}")
        if serial:
            out.append(f"android.serial={json.dumps(serial)}")
    if args.policy is not None:
        kind, where = args.policy
        out.append(f"policy.kind={json.dumps(kind)}")
        if kind == "transformers":
            out.append(f"model.id={json.dumps(where)}")
        elif kind == "openai":
            out.append(f"model.url={json.dumps(where)}")
    for flag, key in (("url", "device.url"), ("model", "model.id"), ("fmt", "model.format"),
                      ("script", "policy.script"), ("max_steps", "agent.max_steps"), ("runs_dir", "record.runs_dir")):
        value = getattr(args, flag)
        if value is not None:
            out.append(f"{key}={json.dumps(value)}")
    if args.dry_run:
        out.append("agent.dry_run=true")
    if args.headed:
        out.append("web.headless=false")
    return out + list(args.overrides)


def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for dist in ("handeye", "playwright", "rapidocr", "onnxruntime", "numpy", "opencv-python-headless"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def _cmd_run(args: argparse.Namespace) -> int:
    from agent.config import load_config
    from agent.errors import AgentError
    from envs.errors import RecordError

    config_path = args.config or ("config.toml" if Path("config.toml").is_file() else None)
    try:
        cfg = load_config(config_path, _overrides(args))
        plan = _plan(cfg, args.task)
    except AgentError as e:
        return _error(str(e))
    except (RecordError, OSError) as e:
        return _error(str(e))
    try:
        return _execute(cfg, plan)
    finally:
        if plan.site is not None:
            plan.site.close()


class _Plan:
    """What a run needs, resolved from config and arguments before anything starts."""

    def __init__(self) -> None:
        self.task = ""
        self.url = ""
        self.site: Any = None
        self.builtin: Any = None
        self.policy: Any = None
        self.secrets: Any = None
        self.guard: Any = None
        self.run: Any = None


def _plan(cfg: Any, task: str | None) -> _Plan:
    from agent.errors import ConfigError
    from agent.secrets import Secrets
    from devices.errors import NavigationError
    from devices.web import check_url
    from envs.site import LocalSite
    from envs.tasks import BUILTIN_TASKS, DEFAULT_TASK, find_builtin
    from envs.trajectory import RunWriter
    from policy.errors import PolicyUnavailable

    plan = _Plan()
    if cfg.device.kind != "web":
        if cfg.device.url:
            raise ConfigError(f"--url is for the web device; the {cfg.device.kind} device starts on its own screen")
        if not task:
            raise ConfigError(f'give the task to do, e.g. agent run "Open the settings" --device {cfg.device.kind}')
        plan.task = task
    elif cfg.device.url:
        if not task:
            raise ConfigError("give the task to do on that page, e.g. agent run \"Click Sign in\" --url URL")
        try:
            check_url(cfg.device.url)
        except NavigationError as e:
            raise ConfigError(str(e)) from None
        plan.task, plan.url = task, cfg.device.url
    else:
        plan.task = task or BUILTIN_TASKS[DEFAULT_TASK].instruction
        plan.builtin = find_builtin(plan.task)
        if plan.builtin is not None and plan.builtin.name == plan.task:
            plan.task = plan.builtin.instruction  # a task given by name runs its instruction
        plan.site = LocalSite()
        plan.url = plan.site.url(plan.builtin.page if plan.builtin else "demo.html")
    try:
        plan.policy = _build_policy(cfg)
    except PolicyUnavailable as e:
        raise ConfigError(str(e)) from None
    plan.secrets = Secrets(dict(cfg.secrets))
    plan.guard = _build_guard(cfg)
    plan.run = RunWriter(cfg.record.runs_dir, config={"config": cfg.to_dict(), "versions": versions()},
                         frame_format=cfg.record.frame_format, fsync=cfg.record.fsync)
    return plan


def _build_policy(cfg: Any) -> Any:
    from policy.errors import PolicyError, PolicyUnavailable

    if cfg.policy.kind in ("transformers", "openai"):
        try:
            return _build_model_policy(cfg)
        except (PolicyError, ValueError) as e:
            raise PolicyUnavailable(str(e)) from None

    if cfg.policy.kind == "scripted":
        from policy.scripted import ScriptedPolicy

        if not cfg.policy.script:
            raise PolicyUnavailable("the scripted policy needs a script: --script FILE (a JSON list of actions)")
        return ScriptedPolicy.from_file(cfg.policy.script)
    from policy.ocr import OcrPolicy

    return OcrPolicy(cfg.ocr)


def _build_model_policy(cfg: Any) -> Any:
    import os

    from policy.errors import PolicyUnavailable
    from policy.model import ModelPolicy

    m = cfg.model
    if not m.id:
        raise PolicyUnavailable("say which model: --policy transformers:PATH_OR_ID, or --model ID with --policy openai:URL")
    preset = m.preset()
    if cfg.policy.kind == "transformers":
        from policy.backends.hf import TransformersBackend

        backend = TransformersBackend(m.id, preset=preset, device=m.device, dtype=m.dtype, adapter=m.adapter or None)
    else:
        from policy.backends.openai import OpenAIBackend

        if not m.url:
            raise PolicyUnavailable("the openai policy needs the server's URL: --policy openai:http://HOST:PORT")
        api_key = os.environ.get(m.api_key_env) if m.api_key_env else None
        if m.api_key_env and api_key is None:
            raise PolicyUnavailable(f"model.api_key_env names {m.api_key_env}, which is not set; export it first")
        backend = OpenAIBackend(m.url, m.id, api_key=api_key, timeout_s=m.timeout_s)
    return ModelPolicy(backend, preset, n=m.samples)


def _build_guard(cfg: Any) -> Any:
    from agent.guard import AllowAll, GuardChain, KindGuard, RegionGuard
    from devices.actions import ActionKind

    guards: list[Any] = []
    if cfg.guard.refuse or cfg.guard.confirm:
        confirm = None
        if sys.stdin.isatty():
            from rich.prompt import Confirm

            def confirm(action: Any) -> bool:
                return Confirm.ask(f"Allow [bold]{action.describe()}[/]?", default=False)

        guards.append(KindGuard(frozenset(ActionKind(k) for k in cfg.guard.refuse),
                                frozenset(ActionKind(k) for k in cfg.guard.confirm), confirm))
    if cfg.guard.forbidden_regions:
        guards.append(RegionGuard(cfg.guard.forbidden_regions))
    if not guards:
        return AllowAll()
    return guards[0] if len(guards) == 1 else GuardChain(guards)


def _build_device(cfg: Any, url: str) -> Any:
    """The device the config names; heavy driver libraries are imported only here."""
    if cfg.device.kind == "desktop":
        from devices.desktop import DesktopDevice

        return DesktopDevice(cfg.desktop, cfg.settle)
    if cfg.device.kind == "android":
        from devices.android import AndroidDevice

        return AndroidDevice(cfg.android, cfg.settle)
    from devices.web import PlaywrightDevice

    return PlaywrightDevice(cfg.web, cfg.settle, url=url)


def _execute(cfg: Any, plan: _Plan) -> int:
    from agent.loop import LoopOptions, run_episode
    from agent.summary import print_step, print_summary
    from envs.records import Outcome

    console = _console()
    writer = plan.run.episode(
        task=plan.task,
        env=(plan.builtin.describe() if plan.builtin else {"name": "url", "url": plan.url}),
        policy=plan.policy.describe(),
        dry_run=cfg.agent.dry_run,
    )
    device = _build_device(cfg, plan.url)
    options = LoopOptions(cfg.agent.max_steps, cfg.agent.max_parse_retries, cfg.agent.dry_run)
    console.print(f"[bold]task[/] {plan.task}  [dim]({plan.url})[/]")
    interrupted = False

    async def episode() -> None:
        stop = _stop_on_ctrl_c()
        try:
            await run_episode(
                plan.task, device, plan.policy, writer, options=options, guard=plan.guard,
                checker=plan.builtin.check if plan.builtin else None, secrets=plan.secrets,
                on_step=lambda step: print_step(console, step), stop=stop,
            )
        finally:
            backend = getattr(plan.policy, "backend", None)
            if backend is not None:
                await backend.close()

    try:
        asyncio.run(episode())
    except (KeyboardInterrupt, asyncio.CancelledError):
        interrupted = True
    record = writer.record
    print_summary(console, record, writer.path)
    if interrupted or record.outcome is Outcome.INTERRUPTED:
        return EXIT_INTERRUPTED
    return EXIT_OK if record.outcome in (Outcome.SUCCESS, Outcome.CLAIMED) else EXIT_EPISODE_FAILED


def _stop_on_ctrl_c() -> asyncio.Event:
    """Ctrl-C while an episode runs: cancel it (the loop records it as interrupted) and set the returned event,
    which the loop checks at every step boundary, so the episode ends even where a library swallowed the
    cancellation. A second Ctrl-C gets Python's default handling (an immediate KeyboardInterrupt)."""
    import signal

    loop, task, stop = asyncio.get_running_loop(), asyncio.current_task(), asyncio.Event()

    def on_sigint() -> None:
        stop.set()
        loop.remove_signal_handler(signal.SIGINT)
        if task is not None:
            task.cancel()

    try:
        loop.add_signal_handler(signal.SIGINT, on_sigint)
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no signals here
        pass
    return stop


def _cmd_show(args: argparse.Namespace) -> int:
    from agent.summary import print_episode
    from envs.errors import RecordFormatError
    from envs.trajectory import iter_episodes, read_episode

    path = Path(args.path)
    try:
        episodes = list(iter_episodes(path)) if (path / "run.json").exists() else [read_episode(path)]
    except RecordFormatError as e:
        return _error(str(e))
    console = _console()
    for episode in episodes:
        print_episode(console, episode)
    return EXIT_OK


def _cmd_parse(args: argparse.Namespace) -> int:
    import json

    from agent.config import load_config
    from agent.errors import AgentError
    from policy.errors import FormatParseError, PolicyError
    from policy.formats import get_format
    from rich.table import Table

    overrides = list(args.overrides)
    if args.fmt:
        from policy.presets import FAMILY_DEFAULTS

        key = "model.format" if args.fmt.lower() in FAMILY_DEFAULTS else "model.id"
        overrides.insert(0, f"{key}={json.dumps(args.fmt)}")
    if args.model:
        overrides.insert(0, f"model.id={json.dumps(args.model)}")
    if args.variant:
        overrides.append(f"model.variant={json.dumps(args.variant)}")
    config_path = args.config or ("config.toml" if Path("config.toml").is_file() else None)
    try:
        cfg = load_config(config_path, overrides)
        if not (cfg.model.id or cfg.model.format):
            return _error("say which model wrote the text: --format FAMILY or --model ID")
        preset = cfg.model.preset()
        space = preset.space(args.size)
        fmt = get_format(preset.family)
    except (AgentError, PolicyError, ValueError) as e:
        return _error(str(e))
    console = _console()
    W, H = args.size
    pre = "" if preset.pre_resize.value == "none" else f", pre-resize {preset.pre_resize.value} {preset.pre_resize_pixels:,} px"
    console.print(f"[bold]{preset.model_id}[/] ({preset.family} {preset.version} {preset.variant}, {preset.coord_mode.value}"
                  f"{pre}, pixels {preset.min_pixels:,}..{preset.max_pixels:,})".replace("  ", " "))
    console.print(f"frame {W}x{H} -> model input {space.input_size[0]}x{space.input_size[1]}"
                  + ("; coordinates on a 0-1000 grid" if space.mode.value == "relative_1000" else ""))
    try:
        parsed = fmt.parse(args.text, space, preset)
    except FormatParseError as e:
        console.print(f"[bold red]parse error:[/] {e}", soft_wrap=True)
        return EXIT_EPISODE_FAILED
    if parsed.thought:
        console.print(f"thought: {parsed.thought.strip()[:300]}", soft_wrap=True)
    table = Table(box=None, header_style="bold")
    for col in ("#", "action", "model point", "normalized", "frame px", "details"):
        table.add_column(col)
    for i, action in enumerate(parsed.actions):
        points = [p for p in (action.point, action.end) if p is not None]
        model = " -> ".join(f"({x:g}, {y:g})" for x, y in (space.from_point(p) for p in points))
        norm = " -> ".join(f"({p.x:.4f}, {p.y:.4f})" for p in points)
        px = " -> ".join(f"({u:.1f}, {v:.1f})" for u, v in (space.to_frame_pixels(p) for p in points))
        details = {k: v for k, v in action.to_dict().items() if k not in ("kind", "point", "end")}
        table.add_row(str(i), action.kind.value + (" (executed)" if i == 0 and len(parsed.actions) > 1 else ""),
                      model or "-", norm or "-", px or "-", json.dumps(details, ensure_ascii=False) if details else "")
    console.print(table)
    return EXIT_OK


def _cmd_eval(args: argparse.Namespace) -> int:
    import json

    from agent.config import load_config
    from agent.errors import AgentError
    from envs.errors import EnvError
    from envs.registry import all_specs, spec
    from policy.errors import PolicyError

    kind, where = args.policy
    overrides: list[str] = []
    if kind not in ("oracle",):
        overrides.append(f"policy.kind={json.dumps(kind)}")
        if kind == "transformers":
            overrides.append(f"model.id={json.dumps(where)}")
        elif kind == "openai":
            overrides.append(f"model.url={json.dumps(where)}")
    for flag, key in (("model", "model.id"), ("fmt", "model.format"), ("script", "policy.script"),
                      ("runs_dir", "record.runs_dir")):
        value = getattr(args, flag)
        if value is not None:
            overrides.append(f"{key}={json.dumps(value)}")
    config_path = args.config or ("config.toml" if Path("config.toml").is_file() else None)
    try:
        cfg = load_config(config_path, overrides + list(args.overrides))
        if args.suite == "screenspot":
            return _eval_grounding(args, cfg, kind)
        names = [s.name for s in all_specs(args.suite)]
        if not names:
            from envs.registry import REGISTRY

            suites = sorted({s.suite for s in REGISTRY.values()})
            return _error(f"no suite {args.suite!r}; suites: {', '.join(suites)} (and screenspot with --data)")
        if args.tasks:
            names = [spec(t if "/" in t else f"{args.suite}/{t}").name for t in args.tasks]
        factory = _eval_policy_factory(cfg, kind)
    except (AgentError, EnvError, PolicyError, ValueError) as e:
        return _error(str(e))
    return _run_eval(args, cfg, names, factory)


def _eval_policy_factory(cfg: Any, kind: str) -> Any:
    from agent.errors import ConfigError

    if kind == "oracle":
        from agent.oracles import oracle_for

        def oracle(env: Any) -> Any:
            policy = oracle_for(env)
            if policy is None:
                raise ConfigError(f"{env.name} has no oracle (only tasks whose ground truth is readable do)")
            return policy

        return oracle
    if kind == "scripted":
        from policy.scripted import ScriptedPolicy

        if not cfg.policy.script:
            raise ConfigError("the scripted policy needs a script: --script FILE")
        ScriptedPolicy.from_file(cfg.policy.script)  # fail now, not in every episode
        return lambda env: ScriptedPolicy.from_file(cfg.policy.script)
    shared = _build_policy(cfg)  # one OCR engine or model for every episode
    return lambda env: shared


def _run_eval(args: argparse.Namespace, cfg: Any, names: list[str], factory: Any) -> int:
    from agent.eval import evaluate, format_table
    from agent.report import build_report

    console = _console()
    done = {"n": 0}
    total = len(names) * args.episodes

    def progress(result: Any) -> None:
        done["n"] += 1
        outcome = result.record.outcome.value if result.record.outcome else "?"
        console.print(f"  [{done['n']}/{total}] {result.env} seed {result.seed}: {outcome}", highlight=False)

    async def main() -> Any:
        try:
            return await evaluate(names, factory, episodes=args.episodes, parallel=args.parallel,
                                  runs_dir=cfg.record.runs_dir, seed=args.seed, max_steps=args.max_steps,
                                  on_episode=progress, config={"config": cfg.to_dict(), "versions": versions()})
        finally:
            backend = getattr(getattr(factory, "__self__", None), "backend", None)
            if backend is not None:
                await backend.close()

    try:
        result = asyncio.run(main())
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/]")
        return EXIT_INTERRUPTED
    console.print(format_table(result))
    report = build_report(result.run_dir)
    console.print(f"trajectories: [bold]{result.run_dir}[/]   report: [bold]{report}[/]", soft_wrap=True)
    return EXIT_OK


def _eval_grounding(args: argparse.Namespace, cfg: Any, kind: str) -> int:
    import json

    from agent.grounding_eval import evaluate_grounding
    from envs.grounding import load_grounding

    if not args.data:
        return _error("--suite screenspot needs --data FILE (a ScreenSpot / -v2 JSON file or a ScreenSpot-Pro folder)")
    if kind in ("oracle", "scripted"):
        return _error("grounding datasets are evaluated with a model or the ocr policy (--policy ocr|transformers:..|openai:..)")
    dataset = load_grounding(args.data)
    policy = _build_policy(cfg)
    console = _console()
    console.print(f"{dataset.report.loaded} samples loaded, {len(dataset.report.rejected)} rejected")
    for r in dataset.report.rejected[:20]:
        console.print(f"  rejected: {r}", soft_wrap=True)
    report = asyncio.run(evaluate_grounding(dataset.samples, policy, rejected=dataset.report.rejected))
    console.print(f"top-1 accuracy {report.accuracy:.3f}   any-candidate {report.any_accuracy:.3f}   "
                  f"unparsed {report.wrong_format}")
    console.print(report.table("platform/element_type"))
    from envs.trajectory import new_run_id

    from agent.report import build_grounding_report

    out = Path(cfg.record.runs_dir) / f"grounding-{new_run_id()}"
    out.mkdir(parents=True, exist_ok=True)
    result = report.to_dict()
    (out / "results.json").write_text(json.dumps(result, ensure_ascii=False, indent=1))
    page = build_grounding_report(result, out / "report.html", title=f"grounding evaluation of {args.data}")
    console.print(f"results: [bold]{out / 'results.json'}[/]   report: [bold]{page}[/]")
    return EXIT_OK


def _cmd_report(args: argparse.Namespace) -> int:
    from agent.report import build_report
    from envs.errors import RecordFormatError

    try:
        path = build_report(args.run_dir)
    except (RecordFormatError, FileNotFoundError) as e:
        return _error(str(e))
    _console().print(f"report: [bold]{path}[/] (open it in a browser; no server needed)")
    return EXIT_OK


def _cmd_data(args: argparse.Namespace) -> int:
    from envs.errors import EnvError
    from envs.grounding import load_grounding
    from envs.grounding_draw import draw_samples
    from envs.trajectory import new_run_id

    try:
        dataset = load_grounding(args.file)
    except EnvError as e:
        return _error(str(e))
    out = Path(args.out) if args.out else Path("runs") / f"data-{new_run_id()}"
    paths = draw_samples(dataset.samples, out, n=args.n, seed=args.seed)
    console = _console()
    console.print(f"{dataset.report.loaded} samples loaded, {len(dataset.report.rejected)} rejected")
    for r in dataset.report.rejected[:20]:
        console.print(f"  rejected: {r}", soft_wrap=True)
    console.print(f"drew {len(paths)} images in [bold]{out}[/]")
    return EXIT_OK


def _cmd_train(args: argparse.Namespace) -> int:
    import json

    if args.online:
        from agent.online import run_cli

        return run_cli(args)
    online_only = [f"--{k.replace('_', '-')}" for k in ("env", "devices", "device_kind", "group_level",
                                                         "max_policy_lag", "minutes") if getattr(args, k) is not None]
    if online_only:
        return _error(f"{', '.join(online_only)} only apply to online sessions: add --online")
    from agent.config import load_train_config
    from agent.errors import ConfigError

    overrides = list(args.overrides)
    if args.stage:
        overrides.append(f"train.stage={json.dumps(args.stage)}")
    if args.resume:
        overrides.append(f"train.resume={json.dumps(args.resume)}")
    try:
        config = load_train_config(args.config, overrides)
    except ConfigError as e:
        return _error(str(e))
    try:
        from train.trainer import run_from_config
    except ImportError as e:
        return _error(f"training needs the model extras ({e.name} is missing): pip install -e .[train]")
    from policy.errors import PolicyError
    from train.checkpoint import CheckpointError
    from train.data import PromptSourceError

    console = _console()
    try:
        result = run_from_config(config)
    except (CheckpointError, PromptSourceError, PolicyError, ValueError, FileNotFoundError) as e:
        return _error(str(e).strip("'\""))
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/]: a checkpoint of the last finished update is in "
                      f"{config.train.run_dir}/checkpoints; --resume continues the run from it")
        return 130
    acc = "n/a" if result.final_accuracy is None else f"{result.final_accuracy:.1%}"
    best = "" if result.best_accuracy is None else f" (best {result.best_accuracy:.1%} at step {result.best_step})"
    console.print(f"[bold]{result.stage}[/] done: {result.steps} updates"
                  f"{', stopped early' if result.stopped_early else ''}; held-out accuracy {acc}{best}")
    for w in result.warnings[-5:]:
        console.print(f"[yellow]collapse warning:[/] {w}")
    console.print(f"weights: {result.output}\nmetrics: {result.run_dir}/metrics.jsonl, curves: "
                  f"{result.run_dir}/curves.png, TensorBoard: tensorboard --logdir {result.run_dir}/tb")
    return 0


def _cmd_envs(args: argparse.Namespace) -> int:
    from rich.table import Table

    from envs.registry import all_specs

    specs = all_specs(args.suite)
    if not specs:
        return _error(f"no environments in suite {args.suite!r}; `agent envs` lists every suite")
    table = Table(box=None, header_style="bold")
    for col in ("name", "suite", "description"):
        table.add_column(col)
    for s in specs:
        table.add_row(s.name, s.suite, s.description)
    _console().print(table)
    return EXIT_OK


def _cmd_devices(args: argparse.Namespace) -> int:
    """Monitors of the X display, phones on the adb server, and the browser the web device would use."""
    from agent.config import load_config
    from agent.errors import AgentError
    from devices.browser import find_browser
    from devices.errors import DeviceError

    config_path = args.config or ("config.toml" if Path("config.toml").is_file() else None)
    try:
        cfg = load_config(config_path, list(args.overrides))
    except AgentError as e:
        return _error(str(e))
    console = _console()
    console.print("[bold]desktop[/] (--device desktop, desktop.monitor = N)")
    try:
        from devices.desktop import list_monitors

        for m in list_monitors(cfg.desktop.display):
            console.print(f"  monitor {m.index}: {m.width}x{m.height} at ({m.left}, {m.top})")
    except (DeviceError, ImportError) as e:
        console.print(f"  none: {e}", soft_wrap=True)
    console.print("[bold]android[/] (--device android:SERIAL)")
    try:
        from devices.android import list_devices

        phones = list_devices(cfg.android.adb_host, cfg.android.adb_port)
        for phone in phones:
            console.print(f"  {phone}")
        if not phones:
            console.print("  none connected (adb devices is empty)")
    except (DeviceError, ImportError) as e:
        console.print(f"  none: {e}", soft_wrap=True)
    console.print("[bold]web[/] (--device web)")
    try:
        console.print(f"  {find_browser(cfg.web.browser_path)}")
    except DeviceError as e:
        console.print(f"  none: {e}", soft_wrap=True)
    return EXIT_OK


def _cmd_doctor(args: argparse.Namespace) -> int:
    from devices.browser import find_browser, has_cjk_font
    from devices.errors import DeviceUnavailable
    from envs.errors import RecordError
    from envs.trajectory import check_writable

    console = _console()
    problems = 0

    def report(ok: bool | None, what: str, detail: str) -> None:
        nonlocal problems
        mark = "[green]ok[/]" if ok else "[yellow]?[/]" if ok is None else "[red]missing[/]"
        problems += ok is False
        console.print(f"{mark:>18} {what}: {detail}", soft_wrap=True)

    try:
        import playwright  # noqa: F401

        report(True, "playwright", metadata.version("playwright"))
    except ImportError:
        report(False, "playwright", "pip install 'handeye[web]'")
    try:
        report(True, "browser", find_browser())
    except DeviceUnavailable as e:
        report(False, "browser", str(e))
    cjk = has_cjk_font()
    report(cjk, "CJK font", "found" if cjk else "install fonts-noto-cjk" if cjk is False else "fc-list not available")
    try:
        import rapidocr  # noqa: F401

        report(True, "OCR engine", f"rapidocr {metadata.version('rapidocr')} (models inside the package)")
    except ImportError:
        report(False, "OCR engine", "pip install 'handeye[ocr]'")
    try:
        check_writable(Path("runs"))
        report(True, "run folder", str(Path("runs").resolve()))
    except RecordError as e:
        report(False, "run folder", str(e))
    return EXIT_OK if problems == 0 else EXIT_EPISODE_FAILED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

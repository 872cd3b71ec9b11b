"""``agent eval``: success rates of a policy on environments whose rewards are checked by code, its accuracy on
a grounding dataset (``--suite screenspot --data FILE_OR_FOLDER``: ``agent.cli.eval_grounding``), or its Type / GR / SR
on GUI-R1's offline action benchmarks (``--suite actions --data FILE_OR_FOLDER``: ``agent.cli.eval_actions``);
``--limit N`` means the same for both: the first N samples of each data file.

A model or OCR policy is built once and shared by every episode (one model in memory, one HTTP client); its
backend is closed when the evaluation ends, however it ends (done, error, Ctrl-C). SIGTERM and SIGHUP stop it like
Ctrl-C: the episodes in flight end as interrupted, and the exit code is 128 + the signal's number (``agent.signals``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable
from typing import Any

from agent.builders import build_policy, close_policy
from agent.cli.common import (DEVICE_HELP, EXIT_INTERRUPTED, EXIT_OK, adapter_overrides, add_adapter_option,
                              add_set_option, add_trust_tasks_option, add_window_options, config_path, device_arg,
                              eval_policy_arg, flag_overrides, make_console, policy_overrides, positive_int,
                              print_error, trust_given_tasks, versions, window_overrides)
from agent.cli.eval_actions import add_action_options, run_actions
from agent.cli.eval_grounding import add_grounding_options, run_grounding
from agent.terminal import plain

NAME = "eval"

# (attribute of the parsed arguments, the config key its flag sets)
FLAG_KEYS = (("model", "model.id"), ("fmt", "model.format"), ("script", "policy.script"),
             ("runs_dir", "record.runs_dir"))


def add_parser(sub: Any) -> None:
    ev = sub.add_parser(NAME, help="success rates on environments whose rewards are checked by code", description=(
        "Run episodes of a suite's environments (or a grounding dataset), K at once, write their trajectories, "
        "print a success table with 95% confidence intervals and write report.html."))
    ev.add_argument("--suite", required=True,
                    help="generated, miniwob, android, tasks (derived from demonstrations), screenspot (with --data) "
                         "or actions (GUI-R1's offline action benchmarks, with --data)")
    ev.add_argument("--tasks", nargs="+", help="environment names or their short names (default: the whole suite)")
    ev.add_argument("--episodes", type=positive_int, default=10, help="episodes per environment (seeds 0..N-1)")
    ev.add_argument("--policy", type=eval_policy_arg, metavar="POLICY",
                    help="oracle, ocr, scripted, transformers:PATH_OR_ID or openai:URL (default: ocr; with "
                         "--adapter alone, transformers)")
    ev.add_argument("--model", help="model id (config: model.id)")
    ev.add_argument("--format", dest="fmt", help="model family for ids without a preset")
    add_adapter_option(ev)
    ev.add_argument("--script", help="JSON list of actions for --policy scripted")
    ev.add_argument("--parallel", type=positive_int,
                    help="episodes run at once, each on its own device (default 1, or one per --device given)")
    ev.add_argument("--device", type=device_arg, action="append", default=[], metavar="DEVICE",
                    help=f"a device the episodes run on ({DEVICE_HELP}); repeat it for more phones, one per "
                         f"parallel slot: --device android:SERIAL1 --device android:SERIAL2 (config: the kind's "
                         f"section, e.g. android.serial)")
    ev.add_argument("--max-steps", type=positive_int, help="override each environment's step budget")
    ev.add_argument("--seed", type=int, default=0, help="first seed")
    ev.add_argument("--data", help="grounding dataset (file or folder) for --suite screenspot; action benchmark "
                                   "files (.parquet / .jsonl, or a folder of them) for --suite actions")
    ev.add_argument("--limit", type=positive_int,
                    help="for --suite screenspot and actions: score the first N samples of each data file (a "
                         "ScreenSpot-Pro folder has one per application and platform; default: all)")
    add_grounding_options(ev)
    add_action_options(ev)
    add_window_options(ev)
    add_trust_tasks_option(ev)
    ev.add_argument("--runs-dir", help="where run folders go (config: record.runs_dir)")
    ev.add_argument("--config", help="config file (default: ./config.toml when present)")
    add_set_option(ev)


def main(args: argparse.Namespace) -> int:
    from agent.config import load_config
    from agent.errors import AgentError, ConfigError
    from envs.errors import EnvError
    from envs.registry import all_specs, spec
    from policy.errors import PolicyError

    kind, where = args.policy or (("transformers", "") if args.adapter else ("ocr", ""))
    chosen = policy_overrides(kind, where) if args.policy else [f"policy.kind={json.dumps(kind)}"]
    overrides = (([] if kind == "oracle" else chosen) + adapter_overrides(args, policy_given=True)
                 + flag_overrides(args, FLAG_KEYS) + window_overrides(args))
    try:
        cfg = load_config(config_path(args.config), overrides + list(args.overrides))
        if args.suite == "screenspot":
            return run_grounding(args, cfg, kind)
        if args.language is not None:
            return print_error("--language is for --suite screenspot (ScreenSpot-Pro's instruction_cn)")
        if args.suite == "actions":
            return run_actions(args, cfg, kind)
        if args.limit is not None:
            return print_error("--limit is for --suite screenspot and actions; environment suites run --episodes "
                               "per environment")
        names = [s.name for s in all_specs(args.suite)]
        if not names:
            from envs.registry import REGISTRY

            suites = sorted({s.suite for s in REGISTRY.values()})
            return print_error(f"no suite {args.suite!r}; suites: {', '.join(suites)} (and screenspot with --data)")
        if args.tasks:
            names = [spec(t if "/" in t else f"{args.suite}/{t}").name for t in args.tasks]
        trust_given_tasks(args.trust_tasks, names)  # a task whose start runs a command: refused here, untrusted
        needed = {spec(name).device_kind for name in names}
        unused = sorted({k for k, _ in args.device} - needed)
        if unused:
            raise ConfigError(f"--device {unused[0]}: no environment chosen here runs on the {unused[0]} device "
                              f"(they run on {', '.join(sorted(k for k in needed if k))})")
        parallel, devices = slot_devices(cfg, args.device, args.parallel)
        args.parallel = parallel
        factory, shared = _policy_factory(cfg, kind)
    except (AgentError, EnvError, PolicyError, ValueError) as e:
        return print_error(str(e))
    return _run_suite(args, cfg, names, factory, shared, devices)


def slot_devices(cfg: Any, given: list[tuple[str, str]], parallel: int | None) -> tuple[int, Any]:
    """(episodes at once, the factory of each slot's devices) for ``agent eval``: a kind's device is built from its
    config section (``devices.registry``), with the ``i``-th ``--device KIND:ADDRESS`` of that kind in slot ``i``
    (``--parallel`` defaults to how many were given). ``ConfigError`` when more slots than addresses were asked
    for on a kind that was given addresses."""
    from agent.errors import ConfigError
    from devices.registry import device_kind

    addresses: dict[str, list[str]] = {}
    for kind, address in given:
        addresses.setdefault(kind, [])
        if address:
            addresses[kind].append(address)
    parallel = parallel or max([len(a) for a in addresses.values()] + [1])
    for kind, listed in addresses.items():
        if listed and len(listed) < parallel:
            raise ConfigError(f"--parallel {parallel} needs {parallel} {kind} devices, one per slot; "
                              f"{len(listed)} given (--device {kind}:{device_kind(kind).address} for each)")

    def build(kind: str, slot: int) -> Any:
        spec = device_kind(kind)
        listed = addresses.get(kind) or []
        section = spec.configured(cfg.section(kind), listed[slot]) if listed else cfg.section(kind)
        return spec.build(section, cfg.settle)

    return parallel, build


def _policy_factory(cfg: Any, kind: str) -> tuple[Callable[[Any], Any], Any]:
    """(the policy for each episode's environment, the policy every episode shares or None). Oracles read their
    environment's ground truth and scripts keep their place, so each episode gets its own; an OCR engine or a model
    is built once and shared, and the caller closes its backend (``close_policy``) when the evaluation ends."""
    from agent.errors import ConfigError

    if kind == "oracle":
        from agent.oracles import oracle_for

        def oracle(env: Any) -> Any:
            policy = oracle_for(env)
            if policy is None:
                raise ConfigError(f"{env.name} has no oracle (only tasks whose ground truth is readable do)")
            return policy

        return oracle, None
    if kind == "scripted":
        from policy.scripted import ScriptedPolicy

        if not cfg.policy.script:
            raise ConfigError("the scripted policy needs a script: --script FILE")
        ScriptedPolicy.from_file(cfg.policy.script)  # fail now, not in every episode
        return (lambda env: ScriptedPolicy.from_file(cfg.policy.script)), None
    shared = build_policy(cfg)  # one OCR engine or model for every episode
    from policy.model import ModelPolicy

    if not isinstance(shared, ModelPolicy) or cfg.model.variant:
        return (lambda env: shared), shared
    from devices.registry import device_kind
    from envs.registry import spec
    from policy.formats import on_screen

    by_kind: dict[str | None, Any] = {}

    def on_its_screen(env: Any) -> Any:
        """The shared model, prompted for the screen of the device the environment runs on (a phone's prompt on
        Android, a computer's elsewhere)."""
        kind = spec(env.name).device_kind
        if kind not in by_kind:
            by_kind[kind] = shared.with_preset(on_screen(shared.preset, device_kind(kind).screen)) if kind else shared
        return by_kind[kind]

    return on_its_screen, shared


def _run_suite(args: argparse.Namespace, cfg: Any, names: list[str], factory: Callable[[Any], Any],
               shared: Any, devices: Any) -> int:
    """Run the episodes, print each outcome as it comes, then the success table; write report.html."""
    from agent.eval import evaluate, format_abstention, format_table
    from agent.report import build_report
    from agent.signals import StopSignals, exit_code

    console = make_console()
    done = {"n": 0}
    total = len(names) * args.episodes

    def progress(result: Any) -> None:
        done["n"] += 1
        outcome = result.record.outcome.value if result.record.outcome else "?"
        console.print(f"  \\[{done['n']}/{total}] {plain(result.env)} seed {result.seed}: {plain(outcome)}",
                      highlight=False)

    stopped_by: list[int] = []  # the signal that stopped the evaluation, if one did

    async def run() -> Any:
        main = asyncio.current_task()

        def on_stop(signum: int) -> None:
            stopped_by.append(signum)
            if main is not None:
                main.cancel()  # the runner records each episode in flight as interrupted

        StopSignals(on_stop).install()
        try:
            return await evaluate(names, factory, episodes=args.episodes, parallel=args.parallel,
                                  runs_dir=cfg.record.runs_dir, seed=args.seed, max_steps=args.max_steps,
                                  on_episode=progress, config={"config": cfg.to_dict(), "versions": versions()},
                                  devices=devices)
        finally:
            await close_policy(shared)

    try:
        result = asyncio.run(run())
    except (KeyboardInterrupt, asyncio.CancelledError):
        console.print("[yellow]interrupted[/]")
        return exit_code(stopped_by[0]) if stopped_by else EXIT_INTERRUPTED
    console.print(format_table(result, console))
    abstention = format_abstention(result)
    if abstention is not None:
        console.print(abstention)
    report = build_report(result.run_dir)
    console.print(f"trajectories: [bold]{plain(result.run_dir)}[/]", soft_wrap=True)
    console.print(f"report:       [bold]{plain(report)}[/]", soft_wrap=True)
    return EXIT_OK

"""``agent train``: train the model named in the config with the stage it names (cold-start SFT, AEPO / GRPO,
rejection-sampling SFT); with ``--online``, an online session (``agent.cli.train_online``).

Several processes or GPUs: ``accelerate launch -m agent.cli train --config FILE`` (no code change).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from agent.cli import train_online
from agent.cli.common import EXIT_INTERRUPTED, EXIT_OK, add_set_option, make_console, print_error
from agent.terminal import plain

NAME = "train"


def add_parser(sub: Any) -> None:
    tr = sub.add_parser(NAME, help="train a policy: cold-start SFT, AEPO / GRPO, rejection-sampling SFT",
                        description=(
        "Train the model named in the config with the stage it names (train.stage: sft, rl or rft). Outputs go to "
        "train.run_dir: metrics.jsonl, tb/ (TensorBoard), curves.png, checkpoints/ and the final adapter/ (or "
        "model/). Several processes or GPUs: accelerate launch -m agent.cli train --config FILE. Options: "
        "configs/train.toml; docs/training.md."))
    tr.add_argument("--config", help="training config file (TOML, see configs/train.toml)")
    add_set_option(tr, "override one option, e.g. --set rl.group_size=8 (repeatable)")
    tr.add_argument("--stage", choices=("sft", "rl", "rft"), help="the stage to run (config: train.stage)")
    tr.add_argument("--resume", nargs="?", const="auto", metavar="CHECKPOINT",
                    help="resume: a checkpoint folder, or nothing for the newest in run_dir (config: train.resume); "
                         "with --online: the run folder of the session to continue")
    train_online.add_arguments(tr)


def main(args: argparse.Namespace) -> int:
    if args.online:
        return train_online.main(args)
    online_only = [f"--{k.replace('_', '-')}" for k in train_online.ONLINE_ONLY if getattr(args, k) is not None]
    if online_only:
        return print_error(f"{', '.join(online_only)} only apply to online sessions: add --online")
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
        return print_error(str(e))
    try:
        from train.trainer import run_from_config
    except ImportError as e:
        return print_error(f"training needs the model extras ({e.name} is missing): pip install -e .[train]")
    return _run(config, run_from_config)


def _run(config: Any, run_from_config: Any) -> int:
    """Train, then print the outcome, collapse warnings and where the weights and metrics are."""
    from policy.errors import PolicyError
    from train.errors import CheckpointError, PromptSourceError

    console = make_console()
    try:
        result = run_from_config(config)
    except (CheckpointError, PromptSourceError, PolicyError, ValueError, FileNotFoundError) as e:
        return print_error(str(e).strip("'\""))
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/]: a checkpoint of the last finished update is in "
                      f"{config.train.run_dir}/checkpoints; --resume continues the run from it")
        return EXIT_INTERRUPTED
    acc = "n/a" if result.final_accuracy is None else f"{result.final_accuracy:.1%}"
    best = "" if result.best_accuracy is None else f" (best {result.best_accuracy:.1%} at step {result.best_step})"
    console.print(f"[bold]{result.stage}[/] done: {result.steps} updates"
                  f"{', stopped early' if result.stopped_early else ''}; held-out accuracy {acc}{best}")
    for w in result.warnings[-5:]:
        console.print(f"[yellow]collapse warning:[/] {plain(w)}")
    console.print(f"weights: {plain(result.output)}\nmetrics: {plain(result.run_dir)}/metrics.jsonl, curves: "
                  f"{result.run_dir}/curves.png, TensorBoard: tensorboard --logdir {result.run_dir}/tb")
    return EXIT_OK

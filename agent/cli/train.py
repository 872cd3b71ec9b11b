"""``agent train``: train the model named in the config with the stage it names (cold-start SFT, AEPO / GRPO,
rejection-sampling SFT); with ``--online``, an online session (``agent.cli.train_online``).

Several processes or GPUs: ``accelerate launch -m agent.cli train --config FILE`` (no code change).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from agent.cli import train_online
from agent.cli.common import (EXIT_INTERRUPTED, EXIT_OK, add_set_option, existing, make_console, print_error,
                               resume_run_dir)
from agent.terminal import plain

NAME = "train"


def add_parser(sub: Any) -> None:
    tr = sub.add_parser(NAME, help="train a policy: cold-start SFT, AEPO / GRPO, rejection-sampling SFT",
                        description=(
        "Train the model named in the config with the stage it names (train.stage: sft, rl or rft). Outputs go to "
        "the run folder (--run-dir, train.run_dir; default a new runs/train-<time>): metrics.jsonl, tb/ "
        "(TensorBoard), curves.png, checkpoints/ and the final adapter/ (or model/); --resume continues it. Several processes or GPUs: accelerate launch -m agent.cli train --config FILE. Options: "
        "configs/train.toml; docs/training.md."))
    tr.add_argument("--config", help="training config file (TOML, see configs/train.toml)")
    add_set_option(tr, "override one option, e.g. --set rl.group_size=8 (repeatable)")
    tr.add_argument("--stage", choices=("sft", "rl", "rft"), help="the stage to run (config: train.stage)")
    tr.add_argument("--run-dir", metavar="DIR",
                    help="the run folder (config: train.run_dir; default: a new runs/train-<time>, or "
                         "runs/online-<time> with --online)")
    tr.add_argument("--resume", nargs="?", const="auto", metavar="RUN_DIR",
                    help="continue a stopped run from its newest checkpoint: its run folder (or one checkpoint "
                         "folder); alone: --run-dir, else the newest runs/train-* (runs/online-* with --online)")
    train_online.add_arguments(tr)


def main(args: argparse.Namespace) -> int:
    if args.online:
        return train_online.main(args)
    online_only = [flag for dest, flag in train_online.ONLINE_ONLY.items() if getattr(args, dest) is not None]
    if online_only:
        return print_error(f"{', '.join(online_only)} only apply to online sessions: add --online")
    from agent.config import load_train_config
    from agent.errors import ConfigError
    from train.config import with_run_dir

    overrides = list(args.overrides)
    if args.stage:
        overrides.append(f"train.stage={json.dumps(args.stage)}")
    if args.run_dir:
        overrides.append(f"train.run_dir={json.dumps(args.run_dir)}")
    try:
        config = load_train_config(args.config, overrides)
        if args.resume:
            run_dir, resume = resume_run_dir(args.resume, config.train.run_dir, "train")
            config = load_train_config(args.config, [*overrides, f"train.run_dir={json.dumps(str(run_dir))}",
                                                     f"train.resume={json.dumps(resume)}"])
        config = with_run_dir(config, "train")
    except (ConfigError, ValueError) as e:
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
        run_dir = plain(config.train.run_dir)
        console.print(f"[yellow]interrupted[/]: the newest checkpoint in {run_dir}/checkpoints (if an update "
                      f"finished) continues the run: agent train --resume {run_dir}")
        return EXIT_INTERRUPTED
    acc = "n/a" if result.final_accuracy is None else f"{result.final_accuracy:.1%}"
    best = "" if result.best_accuracy is None else f" (best {result.best_accuracy:.1%} at step {result.best_step})"
    console.print(f"[bold]{result.stage}[/] done: {result.steps} updates"
                  f"{', stopped early' if result.stopped_early else ''}; held-out accuracy {acc}{best}")
    for w in result.warnings[-5:]:
        console.print(f"[yellow]collapse warning:[/] {plain(w)}")
    # Only what this run wrote (log.png / log.tensorboard may be off), one path per line.
    run_dir = result.run_dir
    console.print(f"run folder: {plain(run_dir)}")
    if result.output is not None:
        console.print(f"  weights:     {plain(result.output)}")
        # the run folder says what the weights were trained with (handeye.json): nothing else to restate
        console.print(f'  use them:    agent run "TASK" --policy transformers:{plain(run_dir)}')
    labels = {"metrics.jsonl": "metrics:    ", "curves.png": "curves:     ", "checkpoints/": "checkpoints:"}
    for name in existing(run_dir, labels):
        console.print(f"  {labels[name]} {plain(run_dir)}/{name}")
    if existing(run_dir, ["tb/"]):
        console.print(f"  TensorBoard: tensorboard --logdir {plain(run_dir)}/tb")
    return EXIT_OK

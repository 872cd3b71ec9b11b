"""Online-session benchmarks.

    .venv/bin/python -m bench.online throughput [--devices 1 2 4] [--runs 3] [--seconds 30]
    .venv/bin/python -m bench.online curve [--seeds 0 1 2] [--updates 120] [--setting a|hard] [--arms offline online]

Results go to bench/results/online_*.json (and .png); copies in docs/results/ are what docs/online.md shows.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import tempfile
import time
from pathlib import Path

from bench.online.curve import ENVS

REPO = Path(__file__).resolve().parent.parent.parent


def _machine() -> dict:
    import torch

    return {"python": platform.python_version(), "cpus": os.cpu_count(), "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(), "platform": platform.platform(),
            "date": time.strftime("%Y-%m-%d %H:%M")}


def _lora_spec(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict | None:
    """The online arm's adapter from ``--lora-*`` (``None`` for full fine-tuning); a flag without
    ``--finetune lora``, a rank or alpha below 1, a bad learning rate: a usage error saying so."""
    given = [f for f in ("lora_rank", "lora_alpha", "lora_targets") if getattr(args, f) is not None]
    if args.lr is not None and not (0 < args.lr < 1):
        parser.error(f"--lr must be in (0, 1), got {args.lr}")
    if args.finetune != "lora":
        if given:
            parser.error(f"--{given[0].replace('_', '-')} needs --finetune lora")
        return None
    from bench.online.curve import LORA_DEFAULT

    rank = LORA_DEFAULT["rank"] if args.lora_rank is None else args.lora_rank
    alpha = 2 * rank if args.lora_alpha is None else args.lora_alpha
    if rank < 1 or alpha < 1:
        parser.error(f"--lora-rank and --lora-alpha must be >= 1, got {rank} and {alpha}")
    return {"rank": rank, "alpha": alpha, "targets": list(args.lora_targets or LORA_DEFAULT["targets"])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.online")
    sub = parser.add_subparsers(dest="what", required=True)
    tp = sub.add_parser("throughput", help="steps/s of the loop with N browser actors and the tiny model")
    tp.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4])
    tp.add_argument("--runs", type=int, default=3)
    tp.add_argument("--seconds", type=float, default=30.0, help="acting time per run")
    tp.add_argument("--out", type=Path, default=REPO / "bench/results/online_throughput.json")
    cv = sub.add_parser("curve", help="online AEPO against offline AEPO from the learning benchmark's SFT checkpoint")
    cv.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    cv.add_argument("--setting", choices=sorted(ENVS), default="a", help="the learning benchmark's setting")
    cv.add_argument("--updates", type=int, default=120, help="updates per arm (x 64 trained samples)")
    cv.add_argument("--arms", nargs="+", choices=["offline", "online"], default=["offline", "online"])
    cv.add_argument("--devices", type=int, default=2, help="browser actors of the online arm")
    cv.add_argument("--finetune", choices=["full", "lora"], default="full")
    cv.add_argument("--lr", type=float, help="RL learning rate of both arms (default: the learning benchmark's, 1e-4)")
    cv.add_argument("--lora-rank", type=int, help="--finetune lora: the adapter's rank (default 8)")
    cv.add_argument("--lora-alpha", type=int, help="--finetune lora: its alpha (default 2 x rank)")
    cv.add_argument("--lora-targets", nargs="+", metavar="MODULE",
                    help="--finetune lora: module names it wraps (default q_proj k_proj v_proj o_proj)")
    cv.add_argument("--algo", choices=["aepo", "grpo"], default="aepo",
                    help="both arms' algorithm: offline, bench.learning's arm of that name (GRPO with single answers "
                         "and GUI-R1's 0.2 format + 0.8 hit); online, the same update on the step verifier's reward")
    cv.add_argument("--sft-dir", type=Path, default=REPO / "bench/results/learning/sft",
                    help="SFT checkpoints saved by python -m bench.learning (trained and saved here if missing)")
    cv.add_argument("--quick", action="store_true", help="the learning benchmark's smoke budget (200 test screens)")
    cv.add_argument("--work", type=Path, help="where run folders go (default: a temporary folder)")
    cv.add_argument("--out", type=Path, default=REPO / "bench/results/online_curve.json")
    cv.add_argument("--merge", type=Path, nargs="+", metavar="JSON",
                    help="combine runs made side by side (one seed each) into --out; runs nothing")
    args = parser.parse_args(argv)
    if args.what == "curve":
        args.lora = _lora_spec(parser, args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    for noisy in ("httpx", "matplotlib", "PIL", "train.monitors", "agent.eval", "train.checkpoint",
                  "train.adapters", "policy.backends.hf", "train.trainer", "agent.online.versions"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    import torch

    torch.set_num_threads(1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.what == "throughput":
        from bench.online import throughput

        with tempfile.TemporaryDirectory(prefix="online-bench-") as work:
            data = throughput.main(args.devices, args.runs, args.seconds, Path(work), args.out)
        data["machine"] = _machine()
        args.out.write_text(json.dumps(data, indent=1) + "\n")
        print(data["table"])
        return 0
    from bench.online import curve

    if args.merge:
        data = curve.merge(args.merge)
        args.out.write_text(json.dumps(data, indent=1, default=str) + "\n")
        curve.plot(data["seeds"], args.out.with_suffix(".png"))
        print(data["table"])
        print(json.dumps(data["summary"], indent=1))
        return 0
    work = args.work or Path(tempfile.mkdtemp(prefix="online-curve-"))
    data = curve.main(args, work)
    data["machine"] = _machine()
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(data["table"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Two CPU processes under ``accelerate launch`` (DDP over gloo) make the same update as one process on the whole
batch: the per-process token shares are weighted by the global token count and DDP averages the gradients."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from policy.tiny import build_tiny_qwen25vl

WORKER = Path(__file__).with_name("ddp_worker.py")
REPO = Path(__file__).resolve().parents[2]


def run_worker(args: list[str], tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "ACCELERATE_CONFIG_FILE": str(tmp_path / "none.yaml")}
    proc = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_two_process_ddp_step_equals_the_single_process_step(tmp_path):
    model = build_tiny_qwen25vl(tmp_path / "model", seed=0)
    launcher = Path(sys.executable).with_name("accelerate")
    # --multi_gpu selects accelerate's torchrun launcher; on a machine without CUDA the worker's
    # Accelerator(cpu=True) joins the two processes over gloo (accelerate's own --cpu flag runs one process).
    run_worker([str(launcher), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "29533",
                str(WORKER), str(model), str(tmp_path / "ddp.pt")], tmp_path)
    run_worker([sys.executable, str(WORKER), str(model), str(tmp_path / "single.pt"), "--single"], tmp_path)
    ddp = torch.load(tmp_path / "ddp.pt", weights_only=False)
    single = torch.load(tmp_path / "single.pt", weights_only=False)
    assert ddp["world"] == 2 and single["world"] == 1
    names = sorted(single["state"])
    assert names and sorted(ddp["state"]) == names
    moved = 0
    for name in names:
        a, b = ddp["state"][name], single["state"][name]
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4), (name, (a - b).abs().max())
        moved += int(a.abs().sum() > 0)
    assert moved > 0  # the step did something (LoRA B starts at zero)

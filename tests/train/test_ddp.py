"""Two CPU processes under ``accelerate launch`` (DDP over gloo) make the same update as one process on the whole
batch: the per-process token shares are weighted by the global token count and DDP averages the gradients. The
two-process run takes the shared-prefix path (two forwards, prompt then answers, before one backward per prompt)
and the unshared one; the reference is one process on the unshared path."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from policy.tiny import build_tiny_qwen25vl
from tests.support import procs

WORKER = Path(__file__).with_name("ddp_worker.py")
REPO = Path(__file__).resolve().parents[2]


def run_worker(args: list[str], tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "ACCELERATE_CONFIG_FILE": str(tmp_path / "none.yaml")}
    proc = procs.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.parametrize("path", ["shared", "unshared"])
def test_two_process_ddp_step_equals_the_single_process_step(tmp_path, path):
    model = build_tiny_qwen25vl(tmp_path / "model", seed=0)
    launcher = Path(sys.executable).with_name("accelerate")
    flags = ["--unshared"] if path == "unshared" else []
    # --multi_gpu selects accelerate's torchrun launcher; on a machine without CUDA the worker's
    # Accelerator(cpu=True) joins the two processes over gloo (accelerate's own --cpu flag runs one process).
    run_worker([str(launcher), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port",
                "29533" if path == "shared" else "29535", str(WORKER), str(model), str(tmp_path / "ddp.pt"), *flags],
               tmp_path)
    run_worker([sys.executable, str(WORKER), str(model), str(tmp_path / "single.pt"), "--single", "--unshared"],
               tmp_path)
    ddp = torch.load(tmp_path / "ddp.pt", weights_only=True)
    single = torch.load(tmp_path / "single.pt", weights_only=True)
    assert ddp["world"] == 2 and single["world"] == 1
    names = sorted(single["state"])
    assert names and sorted(ddp["state"]) == names
    moved = 0
    for name in names:
        a, b = ddp["state"][name], single["state"][name]
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4), (name, (a - b).abs().max())
        moved += int(a.abs().sum() > 0)
    assert moved > 0  # the step did something (LoRA B starts at zero)


def test_agent_train_runs_under_accelerate_launch(tmp_path):
    """`accelerate launch -m agent.cli train` with two CPU processes, no code change: scored samples from a file,
    each process training on its share of every batch, one metrics file and one adapter at the end."""
    from train.samples import TrainSample, write_jsonl

    image = np.random.default_rng(0).integers(0, 256, (56, 56, 3), dtype=np.uint8)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Task."}]}]
    samples = [TrainSample(messages, image, (56, 56), (56, 56), "x", (40 + g, 50 + k, 60), None, float(k),
                           group_id=g) for g in range(4) for k in range(3)]
    write_jsonl(tmp_path / "samples.jsonl", samples)
    run = tmp_path / "run"
    launcher = Path(sys.executable).with_name("accelerate")
    run_worker([str(launcher), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "29534",
                "-m", "agent.cli", "train", "--set", 'model.id="tiny"', "--set", f'train.run_dir="{run}"',
                "--set", "data.source=samples", "--set", f'data.path="{tmp_path / "samples.jsonl"}"',
                "--set", "rl.group_size=3", "--set", "rl.batch_prompts=2", "--set", "train.steps=2",
                "--set", 'model.lora_targets=["q_proj", "v_proj", "lm_head"]', "--set", "log.progress=false"],
               tmp_path)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]  # written once, by the main process
    assert all(r["train/samples"] == 3.0 for r in rows)  # each process: 1 of the batch's 2 groups x 3 answers
    assert (run / "adapter" / "adapter_model.safetensors").is_file()

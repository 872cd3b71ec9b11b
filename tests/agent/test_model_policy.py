"""A vision-language model drives the loop end to end: the tiny Qwen2.5-VL built in code, the real
processor, chat template and generate, the family's parser, the coordinate mapping, a real page.

Random weights emit noise, so the answers are forced by constrained decoding (ForceTextLogitsProcessor):
everything else is the real path. Where the click must land comes from the page's layout and
transformers' own processor size, not from handeye's mapping code.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from agent.runner import run_episode
from devices.settle import SettleConfig
from devices.web import PlaywrightDevice, WebConfig
from envs.records import Outcome
from envs.task_env import TaskEnv
from envs.tasks import ClickTask
from envs.wrappers import TimeLimit
from envs.trajectory import RunWriter, read_episode
from policy.backends.hf import ForceTextLogitsProcessor, TransformersBackend
from policy.model import ModelPolicy
from policy.presets import preset_for
from policy.tiny import build_tiny_qwen25vl
from tests.conftest import REPO
from tests.policy.reference import reference_input_size
from tests.support import procs

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

W, H = 640, 480
PAGE = """<!doctype html><meta charset="utf-8"><body style="margin:0">
<button id="near" style="position:absolute;left:300px;top:260px;width:60px;height:30px">No</button>
<button id="go" style="position:absolute;left:380px;top:280px;width:60px;height:40px">Go</button>
<script>window.handeye={clicks:[]};for(const b of document.querySelectorAll('button'))
b.addEventListener('click',()=>{handeye.clicks.push(b.id);document.body.dataset.clicked=b.id;});</script></body>"""
MAX_PIXELS = 256 * 28 * 28


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return build_tiny_qwen25vl(tmp_path_factory.mktemp("tiny") / "model", seed=0)


def test_a_forced_model_answer_clicks_the_right_element(tmp_path, tiny_model, site, pages_dir):
    (pages_dir / "go.html").write_text(PAGE)
    preset = preset_for("tiny-qwen", "qwen2.5-vl", max_pixels=MAX_PIXELS)
    w_in, h_in = reference_input_size(W, H, preset.min_pixels, MAX_PIXELS)
    # The "Go" button's centre is CSS (410, 300) in a 640x480 viewport at DPR 1; in the model's image:
    mx, my = round(410 * w_in / W), round(300 * h_in / H)
    answers = [
        '<tool_call>\n{"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [%d, %d]}}\n</tool_call>'
        % (mx, my),
        '<tool_call>\n{"name": "computer_use", "arguments": {"action": "terminate", "status": "success"}}\n</tool_call>',
    ]
    holder: dict = {}
    backend = TransformersBackend(
        tiny_model, preset=preset,
        logits_processor_factory=lambda request: ForceTextLogitsProcessor(holder["backend"].tokenizer, answers.pop(0)))
    holder["backend"] = backend
    policy = ModelPolicy(backend, preset)
    writer = RunWriter(tmp_path / "runs", config={}).episode(task="Click Go")
    device = PlaywrightDevice(WebConfig(viewport_width=W, viewport_height=H), SettleConfig(min_s=0, deadline_s=1),
                              url=site.url("go.html"))
    task = ClickTask("go", "Click Go", "go.html", "go")
    env = TaskEnv(device, "Click Go", checker=task.check)

    async def episode():
        try:
            return (await run_episode(TimeLimit(env, 15), policy, writer)).record
        finally:
            await env.close()

    record = asyncio.run(episode())
    assert record.outcome is Outcome.SUCCESS, record
    episode = read_episode(writer.path)
    click, done = episode.steps
    assert click.target["id"] == "go"
    assert click.model_input_size == (w_in, h_in) and click.frame_size == (W, H)
    assert click.action["point"] == pytest.approx([mx / w_in, my / h_in])
    (sample,) = click.info["policy"]["samples"]
    assert sample["text"] == click.raw_output
    assert len(sample["token_ids"]) == len(sample["logprobs"]) > 10
    assert all(lp == 0.0 for lp in sample["logprobs"])  # forced tokens have probability 1
    assert done.action["kind"] == "finish"


def test_run_with_a_model_from_the_command_line_records_its_unparsed_noise(tmp_path, tiny_model):
    # Unforced, random weights write noise: the loop records it as unparsed and never executes it.
    env = {**os.environ, "COLUMNS": "200"}
    r = procs.run(
        [sys.executable, "-m", "agent", "run", "--policy", f"transformers:{tiny_model}", "--format", "qwen2.5-vl",
         "--set", f"model.max_pixels={MAX_PIXELS}", "--set", "agent.max_parse_retries=1", "--runs-dir", str(tmp_path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 1, r.stdout + r.stderr
    (run_dir,) = tmp_path.iterdir()
    (episode_dir,) = [p for p in run_dir.iterdir() if p.is_dir()]
    episode = read_episode(episode_dir)
    assert episode.record.outcome is Outcome.ABORTED and episode.record.reason["type"] == "PolicyParseError"
    assert episode.record.policy["family"] == "qwen2.5-vl" and episode.record.policy["backend"]
    assert len(episode.steps) == 2 and all(s.parse_error and not s.executed for s in episode.steps)
    assert episode.steps[0].model_input_size != episode.steps[0].frame_size
    run_json = json.loads((run_dir / "run.json").read_text())
    assert run_json["config"]["policy"]["kind"] == "transformers"


def test_a_model_id_without_preset_or_format_is_refused(tmp_path, tiny_model):
    r = procs.run([sys.executable, "-m", "agent", "run", "--policy", f"transformers:{tiny_model}",
                   "--runs-dir", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--format" in r.stdout and "no preset for model" in r.stdout


def test_run_against_an_openai_compatible_server(tmp_path, tiny_model):
    from tests.support.openai_server import OpenAICompatServer

    preset = preset_for("tiny-served", "qwen2.5-vl", max_pixels=MAX_PIXELS)
    with OpenAICompatServer.for_model_dir(tiny_model, model_name="tiny-served", preset=preset) as server:
        r = procs.run(
            [sys.executable, "-m", "agent", "run", "--policy", f"openai:{server.url}", "--model", "tiny-served",
             "--format", "qwen2.5-vl", "--set", f"model.max_pixels={MAX_PIXELS}", "--set", "agent.max_parse_retries=0",
             "--runs-dir", str(tmp_path)],
            cwd=REPO, env={**os.environ, "COLUMNS": "200"}, capture_output=True, text=True, timeout=180)
    assert r.returncode == 1, r.stdout + r.stderr
    (run_dir,) = tmp_path.iterdir()
    (episode_dir,) = [p for p in run_dir.iterdir() if p.is_dir()]
    episode = read_episode(episode_dir)
    # The served random model answered noise: recorded as unparsed, nothing executed.
    assert episode.record.reason["type"] == "PolicyParseError"
    (step,) = episode.steps
    assert step.parse_error and not step.executed and step.info["policy"]["samples"][0]["logprobs"]
    backend = episode.record.policy["backend"]
    assert backend["backend"] == "openai" and backend["base_url"] == server.url and backend["model"] == "tiny-served"


def test_openai_policy_with_the_server_down(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = procs.run(
        [sys.executable, "-m", "agent", "run", "--policy", f"openai:http://127.0.0.1:{port}", "--model",
         "ByteDance-Seed/UI-TARS-1.5-7B", "--set", "model.timeout_s=2", "--runs-dir", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=180)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "ABORTED" in r.stdout and "BackendError" in r.stdout
    assert f"127.0.0.1:{port}" in r.stdout.replace("\n", "")


def grounding_file(root: Path) -> Path:
    """Four 112 px screens with a red square each: a grounding JSONL in our format."""
    import numpy as np
    from PIL import Image

    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(4):
        img = np.full((112, 112, 3), 255, np.uint8)
        img[20 * i:20 * i + 24, 10:34] = (200, 30, 30)
        Image.fromarray(img).save(root / f"s{i}.png")
        rows.append({"image": f"s{i}.png", "instruction": "the red square", "box": [10, 20 * i, 34, 20 * i + 24]})
    path = root / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def agent(*args: str, code: int) -> str:
    r = procs.run([sys.executable, "-m", "agent", *args], cwd=REPO, env={**os.environ, "COLUMNS": "300"},
                  capture_output=True, text=True, timeout=300)
    assert r.returncode == code, r.stdout + r.stderr
    return r.stdout + r.stderr


def episode_policy(runs: Path) -> dict:
    (run_dir,) = runs.iterdir()
    (episode_dir,) = [p for p in run_dir.iterdir() if p.is_dir()]
    return read_episode(episode_dir).record.policy


@pytest.mark.timeout(900)
def test_a_trained_run_is_used_by_naming_its_folder(tmp_path):
    """agent train (tiny, LoRA and full) writes handeye.json beside its weights; agent run --adapter RUN_DIR (no
    --policy, no model id: the base model the run recorded) and --policy transformers:RUN_DIR (its model/ folder,
    loadable: the processor written as a base checkpoint has it) then prompt with the family, variant and pixel
    budget the run trained with (no_think: data.think=false, not the family's default think), with nothing
    restated; a value given still wins."""
    data = grounding_file(tmp_path / "data")
    common = ["--set", 'model.id="tiny"', "--set", 'data.source="grounding"', "--set", f'data.path="{data}"',
              "--set", "data.think=false", "--set", "data.heldout_size=0", "--set", "rl.group_size=2",
              "--set", "rl.batch_prompts=1", "--set", "rl.max_new_tokens=8", "--set", "sft.batch_size=2",
              "--set", "train.steps=1", "--set", "eval.every=0", "--set", "log.progress=false",
              "--set", "log.tensorboard=false", "--set", "log.png=false", "--set", "filter.drop_all_correct=false"]
    said = agent("train", *common, "--run-dir", str(tmp_path / "lora"), code=0)
    assert f'use them:    agent run "TASK" --policy transformers:{tmp_path / "lora"}' in said
    agent("train", *common, "--stage", "sft", "--set", 'model.finetune="full"', "--run-dir", str(tmp_path / "full"),
          code=0)
    lora = json.loads((tmp_path / "lora" / "adapter" / "handeye.json").read_text())
    assert lora == {"schema": 1, "finetune": "lora", "base_model": "../tiny-model", "format": "infigui-g1",
                    "variant": "no_think", "min_pixels": 4 * 28 * 28, "max_pixels": 64 * 28 * 28}
    full = json.loads((tmp_path / "full" / "model" / "handeye.json").read_text())
    assert full == {**lora, "finetune": "full", "base_model": "../tiny-model"}

    # The random model's noise ends each run at its first answer (one generate of 1,024 tokens: two runs, the other
    # forms of naming a run, --adapter DIR and RUN_DIR/model, are read the same way: tests/policy/test_trained.py).
    run = ["run", "Click Go", "--set", "agent.max_parse_retries=0"]
    uses = {"lora-run": ["--adapter", str(tmp_path / "lora")],
            "full-run": ["--policy", f"transformers:{tmp_path / 'full'}", "--set", "model.max_pixels=12544"]}
    for name, how in uses.items():
        agent(*run, *how, "--runs-dir", str(tmp_path / name), code=1)  # aborted on unparsed noise, as it should
        policy = episode_policy(tmp_path / name)
        want_max = 12544 if name == "full-run" else 64 * 28 * 28
        assert (policy["family"], policy["variant"], policy["min_pixels"], policy["max_pixels"]) == (
            "infigui-g1", "no_think", 4 * 28 * 28, want_max), (name, policy)
        loaded = policy["backend"]
        if name.startswith("full"):
            assert loaded["model"] == str(tmp_path / "full" / "model") and loaded["adapter_version"] is None
        else:  # the adapter on the base model its run recorded
            assert loaded["model"] == str((tmp_path / "lora" / "tiny-model").resolve())
            assert loaded["adapter_version"] == "adapter"


def test_the_adapter_flag_of_run_and_eval_names_a_run(tmp_path, monkeypatch):
    """--adapter DIR is model.adapter; alone it means the transformers policy on the base model the run recorded
    (agent run and agent eval); without it eval's default policy is still OCR."""
    from agent.cli import build_parser
    from agent.cli import evaluate as eval_command
    from agent.cli.run import run_overrides
    from agent.config import load_config
    from policy.trained import TrainedSettings

    run = tmp_path / "lora"
    (run / "adapter").mkdir(parents=True)
    TrainedSettings.of(preset_for("x", "gui-r1", variant="low", min_pixels=3136, max_pixels=65536), "lora",
                       "ritzz-ai/GUI-R1-3B").write(run / "adapter")
    parser = build_parser()
    cfg = load_config(None, run_overrides(parser.parse_args(["run", "--adapter", str(run)])))
    assert (cfg.policy.kind, cfg.model.id, cfg.model.adapter) == ("transformers", "ritzz-ai/GUI-R1-3B",
                                                                  str(run / "adapter"))
    assert (cfg.model.format, cfg.model.variant, cfg.model.max_pixels) == ("gui-r1", "low", 65536)
    seen = []

    def build_policy(cfg):
        seen.append(cfg)
        raise ValueError("stop here")

    monkeypatch.setattr(eval_command, "build_policy", build_policy)
    from agent.cli import main

    assert main(["eval", "--suite", "generated", "--tasks", "click", "--adapter", str(run / "adapter"),
                 "--runs-dir", str(tmp_path / "runs")]) == 2
    assert main(["eval", "--suite", "generated", "--tasks", "click", "--runs-dir", str(tmp_path / "runs")]) == 2
    assert [(c.policy.kind, c.model.id, c.model.adapter) for c in seen] == [
        ("transformers", "ritzz-ai/GUI-R1-3B", str(run / "adapter")), ("ocr", "", "")]

"""agent.action_eval and ``agent eval --suite actions``: a scripted policy on action-benchmark files built in code
(tests/support/action_files.py), scored by hand; a GUI-R1 model decided a batch per backend call, prompted with the
benchmark's action list and the record's history, and scored on its raw answer as released."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from agent.action_eval import evaluate_actions, for_benchmark
from envs.action_bench.metrics import Counts
from envs.action_bench.records import load_actions
from policy.backends.base import Generation, GenerationRequest, Sample
from policy.model import ModelPolicy
from policy.presets import preset_for
from policy.scripted import ScriptedPolicy
from tests.support.action_files import STEPS, script, write_jsonl, write_parquet

# Type / GR / SR of the scripted answers, worked out step by step in tests/envs/test_action_bench.py
RELEASED = {"type": Counts(7, 7), "gr": Counts(2, 4), "sr": Counts(3, 5)}
PLAIN = {"type": Counts(7, 10), "gr": Counts(2, 4), "sr": Counts(3, 6)}


@pytest.mark.parametrize("kind", ["parquet", "jsonl"])
def test_a_scripted_policy_scores_what_the_hand_computation_says(tmp_path: Path, kind: str) -> None:
    path = write_parquet(tmp_path / "guiodyssey_test.parquet") if kind == "parquet" else write_jsonl(tmp_path)
    (dataset,) = load_actions(path)
    policy = ScriptedPolicy.from_file(script(tmp_path))
    seen: list[int] = []
    result = asyncio.run(evaluate_actions(dataset, policy, batch=4, out_dir=tmp_path / "out",
                                          on_batch=lambda r: seen.append(len(r.steps))))
    assert seen == [4, 8] and len(result.steps) == 10  # two full batches reported, then the last two
    assert result.scores.released == RELEASED and result.scores.plain == PLAIN
    rows = {r["action"]: r for r in result.breakdown()}
    assert rows["long_press"] == {"action": "long_press", "steps": 2, "type_hits": 0, "gr_hits": 1, "gr_steps": 2,
                                  "text_hits": None, "text_steps": 0}
    assert result.confusion()["long_press"] == {"(none)": 1, "click": 1}
    assert result.confusion()["press_recent"] == {"press_home": 1}
    saved = result.to_dict()
    assert saved["scores"]["released"]["sr"] == {"hits": 3, "total": 5, "rate": 0.6}
    assert saved["samples"][9]["unified"].startswith("drag") and saved["samples"][9]["pred_action"] is None
    assert (tmp_path / "out" / saved["samples"][0]["image"]).read_bytes()[:4] == b"\x89PNG"
    assert result.samples_per_s > 0


class GuiR1Backend:
    """Answers each request with the next canned GUI-R1 output; remembers the batches and the prompts."""

    name = "canned-gui-r1"

    def __init__(self, answers: list[str]) -> None:
        self.answers = list(answers)
        self.batches: list[int] = []
        self.prompts: list[str] = []

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        self.batches.append(len(requests))
        self.prompts += [p["text"] for r in requests for m in r.messages for p in m["content"] if p["type"] == "text"]
        return [Generation((Sample(self.answers.pop(0)),)) for _ in requests]

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name}

    async def close(self) -> None:
        pass


def answer(action: str, point: list[int], text: str = "no input text") -> str:
    return f"<think>t</think><answer>[{{'action': '{action}', 'point': {point}, 'input_text': '{text}'}}]</answer>"


def test_a_guir1_model_is_batched_prompted_and_read_as_released(tmp_path: Path) -> None:
    (dataset,) = load_actions(write_parquet(tmp_path / "guiodyssey_test.parquet"))
    preset = preset_for("ritzz-ai/GUI-R1-3B")
    # the model sees 200 x 100 frames as w' x h' (smart_resize); its points are in those pixels
    w, h = preset.space((200, 100)).input_size
    answers = [answer("click", [w // 2, h // 2])] + [answer("press_recent", [-100, -100])] * 9
    backend = GuiR1Backend(answers)
    result = asyncio.run(evaluate_actions(dataset, ModelPolicy(backend, preset), batch=4, limit=10))
    assert backend.batches == [4, 4, 2]  # one generate call per batch
    # the benchmark's own action list (GUI-Odyssey's offers impossible and press_recent) and the record's history
    assert "enumerate from ['press_back', 'press_recent', 'press_home', 'complete'" in backend.prompts[0]
    assert "with the action history being 'None'" in backend.prompts[0]
    assert "with the action history being 'Step 1: [{'action': 'click'}]'" in backend.prompts[1]
    assert result.steps[0].score.grounding is True and result.steps[0].prediction.action == "click"
    # press_recent has no unified action, but the released reader reads it: a type hit on step 7
    assert result.steps[7].score.type_hit and result.steps[7].prediction.action == "press_recent"
    assert result.policy["variant"] == "guiodyssey"
    # the released inference scripts send the screenshot without the training-size cap handeye applies at run time
    big = for_benchmark(ModelPolicy(backend, preset), dataset.benchmark)
    assert big.preset.space((1080, 2400)).input_size != preset.space((1080, 2400)).input_size


def test_agent_eval_suite_actions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from agent.cli import main

    data = write_parquet(tmp_path / "guiodyssey_test.parquet")
    code = main(["eval", "--suite", "actions", "--data", str(data), "--policy", "scripted", "--script",
                 str(script(tmp_path)), "--batch", "3", "--runs-dir", str(tmp_path / "runs")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "GUI-Odyssey: 10 steps" in out and "samples/s" in out and "GUI-R1-3B (paper)" in out
    assert "confusion" in out and "press_recent" in out
    (run,) = (tmp_path / "runs").iterdir()
    (saved,) = json.loads((run / "results.json").read_text())
    assert saved["scores"]["released"]["type"] == {"hits": 7, "total": 7, "rate": 1.0}
    page = (run / "report.html").read_text()
    assert page.count("<div class='card'>") == len(STEPS) and "guiodyssey/images/00000.png" in page
    assert (run / "guiodyssey" / "images" / "00000.png").is_file()
    assert main(["eval", "--suite", "actions", "--policy", "ocr"]) == 2  # --data is needed
    assert main(["eval", "--suite", "actions", "--data", str(tmp_path / "missing.parquet")]) == 2

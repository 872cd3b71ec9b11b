"""``agent eval --suite screenspot`` end to end, as a user runs it on a ScreenSpot-Pro copy: a real subprocess, on
ScreenSpot-Pro-shaped folders built here (``annotations/<application>_<platform>.json``, ``images/...``).

Two policies: the OCR policy (real RapidOCR on screenshots with words drawn on them), and a model policy served by
``tests.support.openai_server`` (real HTTP, vLLM's wire format) in front of a stand-in model that finds the colour
the instruction names in the image it was sent and answers in the family's own grammar. The server sees every
request, so the tests check the prompt a family was asked with, that ``--limit`` sent fewer and ``--language cn``
the Chinese instructions, and (by holding back the last answer until one appears) that progress lines come while
the evaluation runs. Every accuracy below is worked out by hand from the records.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from agent.grounding_eval import with_grounding_prompt
from devices.base import Observation
from policy.backends.base import Generation, GenerationRequest, Sample
from policy.backends.openai import expected_image_tokens
from policy.model import ModelPolicy
from policy.presets import FAMILY_DEFAULTS, preset_for
from tests.conftest import REPO
from tests.support import procs
from tests.support.openai_server import OpenAICompatServer

PROGRESS = re.compile(r"\[(\d+)/(\d+)\] top-1 (\d\.\d{3}) \((\d+)/(\d+)\), unparsed (\d+), [\d.]+ samples/s")
UITARS = "ByteDance-Seed/UI-TARS-1.5-7B"


def agent(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return procs.run([sys.executable, "-m", "agent", *args], cwd=REPO, env={**os.environ, "COLUMNS": "200"},
                     capture_output=True, text=True, timeout=timeout)


def write_json(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")


def write_png(path: Path, image: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), cv2.cvtColor(image, cv2.COLOR_RGB2BGR))


def pro_record(image: str, instruction: str, bbox: Sequence[int] | None, size: tuple[int, int], application: str,
               platform: str, ui_type: str, cn: str | None = None) -> dict[str, Any]:
    """A record as ScreenSpot-Pro publishes them (a negative one has no bbox)."""
    record: dict[str, Any] = {"img_filename": image, "img_size": list(size), "instruction": instruction,
                              "application": application, "platform": platform, "ui_type": ui_type,
                              "group": "Dev", "gt_type": "positive" if bbox is not None else "negative"}
    if bbox is not None:
        record["bbox"] = list(bbox)
    if cn is not None:
        record["instruction_cn"] = cn
    return record


# --- the OCR policy on words -------------------------------------------------------------------------------------

def words_image(words: Sequence[tuple[str, int, int]], size: tuple[int, int] = (640, 360)
                ) -> tuple[np.ndarray, dict[str, list[int]]]:
    """A white screenshot with black words at (x, baseline y), and each word's box [x1, y1, x2, y2] in pixels."""
    image = np.full((size[1], size[0], 3), 255, np.uint8)
    boxes = {}
    for word, x, y in words:
        (w, h), base = cv2.getTextSize(word, cv2.FONT_HERSHEY_SIMPLEX, 1.2, 2)
        cv2.putText(image, word, (x, y), cv2.FONT_HERSHEY_SIMPLEX, 1.2, (0, 0, 0), 2)
        boxes[word] = [x - 4, y - h - 4, x + w + 4, y + base + 4]
    return image, boxes


@pytest.fixture
def pro_words(tmp_path: Path) -> Path:
    """vscode_macos: Search (hit), Export (negative: not on screen, the OCR abstains: right), Help (hit);
    word_windows: Save (hit), Open (the record's box is elsewhere: a miss). 4 of 5 right; with --limit 2 the first
    two of each file, Search, Export, Save and Open: 3 of 4."""
    root = tmp_path / "ScreenSpot-Pro"
    size = (640, 360)
    editor, e = words_image([("Search", 40, 80), ("Help", 420, 300)], size)
    doc, d = words_image([("Save", 40, 80), ("Open", 400, 280)], size)
    write_png(root / "images" / "vscode_macos" / "editor.png", editor)
    write_png(root / "images" / "word_windows" / "doc.png", doc)
    common = {"size": size}
    write_json(root / "annotations" / "vscode_macos.json", [
        pro_record("vscode_macos/editor.png", "click Search", e["Search"], application="vscode", platform="macos",
                   ui_type="text", **common),
        pro_record("vscode_macos/editor.png", "click Export", None, application="vscode", platform="macos",
                   ui_type="icon", **common),
        pro_record("vscode_macos/editor.png", "click Help", e["Help"], application="vscode", platform="macos",
                   ui_type="text", **common),
    ])
    write_json(root / "annotations" / "word_windows.json", [
        pro_record("word_windows/doc.png", "click Save", d["Save"], application="word", platform="windows",
                   ui_type="text", **common),
        pro_record("word_windows/doc.png", "click Open", [200, 150, 300, 200], application="word",
                   platform="windows", ui_type="text", **common),
    ])
    return root


def progress_lines(out: str) -> list[tuple[int, int, int, int]]:
    """(done, total, correct, unparsed) of each progress line, in order."""
    return [(int(m[1]), int(m[2]), int(m[4]), int(m[6])) for m in PROGRESS.finditer(out)]


def test_ocr_on_a_screenspot_pro_folder_prints_progress_then_the_table(pro_words: Path, tmp_path: Path) -> None:
    r = agent("eval", "--suite", "screenspot", "--data", str(pro_words), "--policy", "ocr",
              "--runs-dir", str(tmp_path / "runs"))
    out = r.stdout
    assert r.returncode == 0, out + r.stderr
    assert "5 samples loaded, 0 rejected" in out
    seen = progress_lines(out)
    assert [(done, total) for done, total, _, _ in seen] == [(1, 5), (2, 5), (3, 5), (4, 5)]
    assert all(0 <= correct <= done and unparsed == 0 for done, _, correct, unparsed in seen)
    assert out.index("[4/5] top-1") < out.index("top-1 accuracy 0.800")
    assert "top-1 accuracy 0.800   any-candidate 0.800   unparsed 0" in out
    assert "abstention: 1/1 negative samples declared absent (100.0%); 0/4 positive samples declared absent" in out
    table = [line.split() for line in out.splitlines() if re.match(r"(macos|windows)/|overall", line)]
    assert table == [["macos/icon", "1", "100.0%", "100.0%"], ["macos/text", "2", "100.0%", "100.0%"],
                     ["windows/text", "2", "50.0%", "50.0%"], ["overall", "5", "80.0%", "80.0%"]]
    (run_dir,) = (tmp_path / "runs").iterdir()
    result = json.loads((run_dir / "results.json").read_text())
    assert (result["total"], result["correct"], result["language"], result["limit"]) == (5, 4, "en", None)
    outcomes = {s["id"]: s["outcome"] for s in result["samples"]}
    assert outcomes == {"vscode_macos:0": "correct", "vscode_macos:1": "correct", "vscode_macos:2": "correct",
                        "word_windows:0": "correct", "word_windows:1": "wrong"}

    limited = agent("eval", "--suite", "screenspot", "--data", str(pro_words), "--policy", "ocr", "--limit", "2",
                    "--runs-dir", str(tmp_path / "limited"))
    assert limited.returncode == 0, limited.stdout + limited.stderr
    assert "4 samples loaded (the first 2 of each of 2 files: --limit), 0 rejected" in limited.stdout
    assert "top-1 accuracy 0.750" in limited.stdout
    (run_dir,) = (tmp_path / "limited").iterdir()
    result = json.loads((run_dir / "results.json").read_text())
    assert sorted(s["id"] for s in result["samples"]) == ["vscode_macos:0", "vscode_macos:1", "word_windows:0",
                                                         "word_windows:1"]


# --- a model served over HTTP --------------------------------------------------------------------------------------

COLOURS = {"red": (255, 0, 0), "blue": (0, 0, 255), "yellow": (255, 255, 0), "purple": (128, 0, 128)}
CHINESE = {"红": "red", "蓝": "blue", "黄": "yellow", "紫": "purple"}
W, H = 200, 100
TEXT_TOKENS = 50


def answer(family: str, point: tuple[int, int] | None) -> str:
    """The stand-in model's reply in the family's grammar: a click at ``point`` (pixels of the image it was sent),
    or, with None, the family's way of saying the target is not there (Qwen2.5-VL's grounding prompt has none)."""
    if family == "ui-tars":
        return (f"Action: click(start_box='({point[0]},{point[1]})')" if point
                else "Action: finished(content='The target is not found on the screen.')")
    if family == "gui-r1":
        action = (f"'action': 'click', 'point': [{point[0]}, {point[1]}]" if point
                  else "'action': 'impossible', 'point': [-100, -100]")
        return f"<think>I look for it.</think><answer>[{{{action}, 'input_text': 'no input text'}}]</answer>"
    return f'```json\n[{{"point_2d": [{point[0]}, {point[1]}], "label": "target"}}]\n```' if point else "none"


class ColourModel:
    """A served model's stand-in: it reads the colour the prompt names (English or Chinese) and clicks the centre of
    that colour's pixels in the image it was sent. It keeps every prompt's text, and holds back its answer to the
    ``hold_last``-th image request until ``release`` is set (or 30 s pass). ``prompts``: the user turns' text of each
    request with an image."""

    name = "colour-model"
    tokenizer = None

    def __init__(self, family: str, hold_last: int | None = None) -> None:
        self.family = family
        self.hold_last = hold_last
        self.prompts: list[str] = []
        self.release = threading.Event()
        self.released_in_time: bool | None = None

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        return [await self._one(r) for r in requests]

    async def _one(self, request: GenerationRequest) -> Generation:
        images = request.images()
        if not images:  # the client's image-token check: the same prompt without its image
            return Generation((Sample("x", (1,), (0.0,), "stop"),) * request.n, prompt_tokens=TEXT_TOKENS)
        text = "\n".join(part["text"] for m in request.messages if m["role"] == "user"
                         and isinstance(m["content"], list) for part in m["content"] if part.get("type") == "text")
        self.prompts.append(text)
        if self.hold_last is not None and len(self.prompts) == self.hold_last:
            self.released_in_time = await asyncio.to_thread(self.release.wait, 30)
        found = re.search(r"\b(red|blue|yellow|purple)\b|([红蓝黄紫])框", text)
        named = (found[1] or CHINESE[found[2]]) if found else None
        mask = np.all(np.abs(images[0].astype(int) - COLOURS[named]) < 30, axis=2) if named else None
        point = None
        if mask is not None and mask.any():
            ys, xs = np.nonzero(mask)
            point = (int(round(xs.mean())), int(round(ys.mean())))
        reply = answer(self.family, point)
        return Generation((Sample(reply, (1, 2), (-0.1, 0.0), "stop"),) * request.n,
                          prompt_tokens=expected_image_tokens(images) + TEXT_TOKENS)

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name}

    async def close(self) -> None:
        pass


@pytest.fixture
def pro_colours(tmp_path: Path) -> Path:
    """photoshop_windows: yellow (hit); vscode_macos: blue (the record's box is elsewhere: a miss), red (hit),
    purple (negative: not on screen). The first file's samples come first (files in name order)."""
    root = tmp_path / "ScreenSpot-Pro"
    a = np.full((H, W, 3), 255, np.uint8)
    a[10:40, 20:60] = COLOURS["red"]
    a[50:80, 120:170] = COLOURS["blue"]
    b = np.full((H, W, 3), 255, np.uint8)
    b[20:90, 150:190] = COLOURS["yellow"]
    write_png(root / "images" / "vscode_macos" / "a.png", a)
    write_png(root / "images" / "photoshop_windows" / "b.png", b)
    vs = {"size": (W, H), "application": "vscode", "platform": "macos"}
    write_json(root / "annotations" / "vscode_macos.json", [
        pro_record("vscode_macos/a.png", "click the blue box", [10, 60, 50, 90], ui_type="text", cn="点击蓝框", **vs),
        pro_record("vscode_macos/a.png", "click the red box", [20, 10, 60, 40], ui_type="text", cn="点击红框", **vs),
        pro_record("vscode_macos/a.png", "click the purple box", None, ui_type="icon", cn="点击紫框", **vs),
    ])
    write_json(root / "annotations" / "photoshop_windows.json", [
        pro_record("photoshop_windows/b.png", "click the yellow box", [150, 20, 190, 90], size=(W, H),
                   application="photoshop", platform="windows", ui_type="icon", cn="点击黄框"),
    ])
    return root


def eval_served(server: OpenAICompatServer, data: Path, runs: Path, *extra: str) -> list[str]:
    return ["eval", "--suite", "screenspot", "--data", str(data), "--policy", f"openai:{server.url}", "--model",
            server.model_name, "--runs-dir", str(runs), *extra]


def run_watching(args: list[str], model: ColourModel) -> tuple[int, str]:
    """Run ``agent ARGS``, releasing the model's held answer as soon as a progress line is printed; (exit code,
    stdout)."""
    lines: list[str] = []
    with procs.running([sys.executable, "-m", "agent", *args], cwd=REPO, env={**os.environ, "COLUMNS": "200"},
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if PROGRESS.search(line):
                model.release.set()
        code = proc.wait(timeout=180)
    return code, "".join(lines)


UITARS_GROUNDING = ("You are a GUI agent. You are given a task and your action history, with screenshots. You need "
                    "to perform the next action to complete the task. \n\n## Output Format\n\nAction: ...\n\n\n"
                    "## Action Space\nclick(start_box='<|box_start|>(x1,y1)<|box_end|>')\n\n## User Instruction\n")


def test_a_served_ui_tars_gets_its_grounding_prompt_and_progress_comes_while_it_runs(pro_colours: Path,
                                                                                     tmp_path: Path) -> None:
    model = ColourModel("ui-tars", hold_last=4)
    with OpenAICompatServer(model, UITARS) as server:
        code, out = run_watching(eval_served(server, pro_colours, tmp_path / "runs"), model)
    assert code == 0, out
    # a progress line came while the last sample was still unanswered
    assert model.released_in_time is True, out
    assert "prompt: ui-tars variant grounding" in out
    assert len(model.prompts) == 4
    for prompt in model.prompts:  # the grounding template, not the computer-use one
        assert prompt.startswith(UITARS_GROUNDING), prompt
        assert "hotkey(" not in prompt and "finished(" not in prompt
    assert sorted(p.rsplit("\n", 1)[-1] for p in model.prompts) == [
        "click the blue box", "click the purple box", "click the red box", "click the yellow box"]
    # yellow and red hit, blue misses (its record's box is elsewhere), purple is declared absent: 3 of 4
    assert "top-1 accuracy 0.750   any-candidate 0.750   unparsed 0" in out
    table = [line.split() for line in out.splitlines() if re.match(r"(macos|windows)/|overall", line)]
    assert table == [["macos/icon", "1", "100.0%", "100.0%"], ["macos/text", "2", "50.0%", "50.0%"],
                     ["windows/icon", "1", "100.0%", "100.0%"], ["overall", "4", "75.0%", "75.0%"]]
    assert [(done, total) for done, total, _, _ in progress_lines(out)] == [(1, 4), (2, 4), (3, 4)]
    assert out.index("[3/4] top-1") < out.index("top-1 accuracy 0.750")
    (run_dir,) = (tmp_path / "runs").iterdir()
    result = json.loads((run_dir / "results.json").read_text())
    assert result["policy"]["variant"] == "grounding" and result["policy"]["family"] == "ui-tars"


def test_limit_and_chinese_instructions_reach_the_served_model(pro_colours: Path, tmp_path: Path) -> None:
    model = ColourModel("ui-tars")
    with OpenAICompatServer(model, UITARS) as server:
        r = agent(*eval_served(server, pro_colours, tmp_path / "runs", "--limit", "1", "--language", "cn"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 samples loaded (the first 1 of each of 2 files: --limit), 0 rejected" in r.stdout
    # the first record of each file, asked in Chinese: yellow hits, blue misses
    assert sorted(p.rsplit("\n", 1)[-1] for p in model.prompts) == ["点击蓝框", "点击黄框"]
    assert all(p.startswith(UITARS_GROUNDING) for p in model.prompts)
    assert "top-1 accuracy 0.500" in r.stdout
    (run_dir,) = (tmp_path / "runs").iterdir()
    result = json.loads((run_dir / "results.json").read_text())
    assert (result["total"], result["correct"], result["language"], result["limit"]) == (2, 1, "cn", 1)


def test_a_variant_the_user_sets_is_the_one_sent(pro_colours: Path, tmp_path: Path) -> None:
    model = ColourModel("ui-tars")
    with OpenAICompatServer(model, UITARS) as server:
        r = agent(*eval_served(server, pro_colours, tmp_path / "runs", "--limit", "1",
                               "--set", 'model.variant="computer"'))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "prompt: ui-tars variant computer" in r.stdout
    assert len(model.prompts) == 2
    assert all("hotkey(key='')" in p and not p.startswith(UITARS_GROUNDING) for p in model.prompts)
    assert "top-1 accuracy 0.500" in r.stdout


@pytest.mark.parametrize(("model_id", "family", "marker", "accuracy"), [
    # Qwen2.5-VL's grounding prompt cannot say "absent": its answer to the purple box does not parse, 2 of 4
    ("Qwen/Qwen2.5-VL-3B-Instruct", "qwen2.5-vl", "Locate the click the yellow box, output its bbox coordinates "
                                                  "using JSON format.", "0.500"),
    # GUI-R1's ScreenSpot prompt offers one action, click; 'impossible' declares the purple box absent: 3 of 4
    ("ritzz-ai/GUI-R1-3B", "gui-r1", "(enumerate from ['click'])", "0.750"),
])
def test_each_family_is_asked_with_its_grounding_prompt(pro_colours: Path, tmp_path: Path, model_id: str,
                                                        family: str, marker: str, accuracy: str) -> None:
    model = ColourModel(family)
    with OpenAICompatServer(model, model_id) as server:
        r = agent(*eval_served(server, pro_colours, tmp_path / "runs"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(model.prompts) == 4
    assert any(marker in p for p in model.prompts), model.prompts
    if family == "gui-r1":
        assert not any("press_back" in p for p in model.prompts)  # not the navigation ("high") list
    else:
        assert not any("<tools>" in p for p in model.prompts)  # not the computer_use tool call
    assert f"top-1 accuracy {accuracy}" in r.stdout


# --- what a family grounds with, and the options' errors -----------------------------------------------------------

class NoBackend:
    name = "none"

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name}


@pytest.mark.parametrize(("fmt", "default", "grounding"), [
    ("qwen2.5-vl", "computer_use", "grounding"), ("ui-tars", "computer", "grounding"),
    ("ui-tars-v1", "computer", "grounding"), ("gui-r1", "high", "screenspot"), ("infigui-g1", "think", "think"),
])
def test_with_grounding_prompt_picks_the_familys_variant_unless_one_was_chosen(fmt: str, default: str,
                                                                               grounding: str) -> None:
    policy = ModelPolicy(NoBackend(), preset_for("m", fmt))  # type: ignore[arg-type]
    assert policy.preset.variant == default
    grounded = with_grounding_prompt(policy, variant_chosen=False)
    assert isinstance(grounded, ModelPolicy) and grounded.preset.variant == grounding
    assert grounded.backend is policy.backend and grounded.n == policy.n
    # the variant is one the family's format builds a prompt for
    observation = Observation(np.full((H, W, 3), 255, np.uint8))
    request, _ = grounded.request("click the red box", (), observation)
    assert any("click the red box" in part.get("text", "") for m in request.messages
               if isinstance(m["content"], list) for part in m["content"])
    assert with_grounding_prompt(policy, variant_chosen=True) is policy


def test_every_family_names_a_grounding_variant_or_grounds_by_default() -> None:
    from policy.formats import get_format

    assert {fmt: get_format(p.family).grounding_variant for fmt, p in FAMILY_DEFAULTS.items()} == {
        "qwen2.5-vl": "grounding", "infigui-g1": None, "gui-r1": "screenspot", "ui-tars": "grounding",
        "ui-tars-1.5": "grounding", "ui-tars-v1": "grounding"}


def test_chinese_on_a_dataset_without_it_and_the_options_elsewhere_are_clear_errors(tmp_path: Path) -> None:
    root = tmp_path / "ScreenSpot-v2"
    write_png(root / "screenspotv2_image" / "web_1.png", np.full((H, W, 3), 255, np.uint8))
    write_json(root / "screenspot_web_v2.json", [
        {"img_filename": "web_1.png", "bbox": [0, 0, 10, 10], "instruction": "click the box", "data_type": "icon",
         "data_source": "shop"}])
    r = agent("eval", "--suite", "screenspot", "--data", str(root), "--language", "cn", "--runs-dir",
              str(tmp_path / "runs"))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "has no Chinese instructions (instruction_cn): only ScreenSpot-Pro has them" in r.stdout
    assert not (tmp_path / "runs").exists()
    r = agent("eval", "--suite", "generated", "--limit", "3", "--runs-dir", str(tmp_path / "runs"))
    assert r.returncode == 2 and "--limit is for --suite screenspot and actions" in r.stdout
    r = agent("eval", "--suite", "actions", "--data", str(root), "--language", "cn", "--runs-dir",
              str(tmp_path / "runs"))
    assert r.returncode == 2 and "--language is for --suite screenspot" in r.stdout
    r = agent("eval", "--suite", "screenspot", "--data", str(root), "--limit", "0")
    assert r.returncode == 2 and "must be at least 1, got 0" in r.stderr


def test_progress_comes_every_n_samples_and_at_least_every_interval() -> None:
    from agent.cli.eval_grounding import GroundingProgress
    from devices.base import Box
    from envs.grounding import GroundingSample
    from envs.grounding_score import GroundingOutcome, GroundingPrediction, SampleResult

    now = [100.0]
    lines: list[str] = []
    progress = GroundingProgress(1581, lines.append, clock=lambda: now[0])
    assert progress.every == 50  # ScreenSpot-Pro's 1,581 samples: a line every 50
    assert GroundingProgress(6, lines.append).every == 1 and GroundingProgress(100, lines.append).every == 5
    sample = GroundingSample("s", Path("s.png"), (W, H), "click it", Box(0.0, 0.0, 1.0, 1.0), "", "", "")
    hit = SampleResult(sample, GroundingPrediction(((0.5, 0.5),)), GroundingOutcome.CORRECT, True)
    miss = SampleResult(sample, GroundingPrediction(parse_error="no JSON"), GroundingOutcome.WRONG_FORMAT, False)
    for i in range(50):
        now[0] += 0.5
        progress(hit if i % 2 else miss)
    assert lines == ["[50/1581] top-1 0.500 (25/50), unparsed 25, 2.00 samples/s"]
    now[0] += 31  # a slow sample: a line after 30 s, whatever the count
    progress(hit)
    assert lines[-1] == "[51/1581] top-1 0.510 (26/51), unparsed 25, 0.91 samples/s"  # 51 in 56 s
    progress(hit)
    assert len(lines) == 2
    last = GroundingProgress(2, lines.append, clock=lambda: now[0])
    last(hit)
    last(hit)  # the last sample prints nothing: the table follows
    assert lines[-1].startswith("[1/2] top-1 1.000 (1/1)")

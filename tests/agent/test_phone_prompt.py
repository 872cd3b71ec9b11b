"""The device picks the prompt: a model family gets its phone prompt on a phone and its computer prompt elsewhere
(``devices.registry``'s ``screen``, each format's ``screen_variants``), unless ``model.variant`` says otherwise.

The end-to-end case is the first use the project's card names: a served UI-TARS driving a phone. A scripted
UI-TARS behind the protocol-level OpenAI server answers with UI-TARS's phone action ``open_app`` when its prompt
is the phone prompt, and with a computer-only hotkey otherwise; ``agent eval`` on the test phone (a private real
adb server) must reach SUCCESS."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import pytest

from agent.cli import main as agent_main
from agent.config import load_config
from devices.registry import device_kind
from policy.backends.base import Generation, GenerationRequest, Sample
from policy.formats import on_screen
from policy.presets import preset_for
from tests.devices.test_android import _connect, _disconnect
from tests.support.adb import private_adb_server
from tests.support.fake_adbd import FakeAdbd, FakePhone
from tests.support.openai_server import OpenAICompatServer

UI_TARS = "ByteDance-Seed/UI-TARS-1.5-7B"
PHONE_ONLY = "open_app(app_name="
"""A line of UI-TARS's phone prompt that its computer prompt lacks."""


class ScriptedUiTars:
    """A UI-TARS that can only use a phone: the app the instruction names, opened with the phone action, when the
    prompt offers it; a computer hotkey when it does not."""

    name = "scripted-ui-tars"
    tokenizer = None

    def __init__(self) -> None:
        self.prompts: list[str] = []

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        out = []
        for request in requests:
            text = " ".join(part.get("text", "") for m in request.messages for part in m.get("content", [])
                            if isinstance(part, dict)) if request.images() else ""
            if text:
                self.prompts.append(text)
            app = re.search(r"Open the (.+?) app\.", text)
            if PHONE_ONLY in text and app:
                answer = f"Thought: I open {app[1]}.\nAction: open_app(app_name='{app[1]}')"
            else:
                answer = "Thought: A shortcut.\nAction: hotkey(key='ctrl alt t')"
            out.append(Generation(tuple(Sample(answer, finish_reason="stop") for _ in range(request.n)),
                                  prompt_tokens=None))
        return out

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name}

    async def close(self) -> None:
        pass


@pytest.fixture
def adb_port(tmp_path):
    with private_adb_server(tmp_path / "adb-home") as port:
        yield port


def test_each_family_gets_its_phone_prompt_on_a_phone_and_its_computer_prompt_elsewhere():
    phone, computer = device_kind("android").screen, device_kind("web").screen
    assert (phone, computer, device_kind("desktop").screen) == ("phone", "computer", "computer")
    expected = {UI_TARS: ("mobile", "computer"), "Qwen/Qwen2.5-VL-7B-Instruct": ("mobile_use", "computer_use"),
                "ritzz-ai/GUI-R1-3B": ("androidcontrol", "high"), "InfiX-ai/InfiGUI-G1-3B": ("think", "think")}
    for model, (on_phone, on_computer) in expected.items():
        assert on_screen(preset_for(model), phone).variant == on_phone
        assert on_screen(preset_for(model), computer).variant == on_computer
    cfg = load_config(None, [f"model.id={json.dumps(UI_TARS)}", "device.kind=android"])
    assert cfg.model.preset(phone).variant == "mobile"
    pinned = load_config(None, [f"model.id={json.dumps(UI_TARS)}", "model.variant=computer"])
    assert pinned.model.preset(phone).variant == "computer"  # the user's variant wins


def test_a_served_ui_tars_opens_the_app_on_a_phone(adb_port, tmp_path, capsys):
    model = ScriptedUiTars()
    with OpenAICompatServer(model, UI_TARS) as server, FakeAdbd(FakePhone(physical=(360, 800))) as adbd:
        _connect(adb_port, adbd)
        try:
            code = agent_main(["eval", "--suite", "android", "--tasks", "open-app", "--episodes", "2", "--policy",
                               f"openai:{server.url}", "--model", UI_TARS, "--device", f"android:{adbd.address}",
                               "--set", f"android.adb_port={adb_port}", "--set", "android.start_server=false",
                               "--runs-dir", str(tmp_path)])
        finally:
            _disconnect(adb_port, adbd)
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0, out
    scores = json.loads(next(tmp_path.glob("*/eval.json")).read_text())
    assert scores["overall"]["successes"] == 2 and scores["overall"]["episodes"] == 2, out
    assert model.prompts and all(PHONE_ONLY in p for p in model.prompts)
    steps = [json.loads(line) for p in tmp_path.glob("*/ep*/steps.jsonl") for line in p.read_text().splitlines()]
    assert steps and {s["action"]["kind"] for s in steps} == {"open_app"}
    policy = json.loads(next(tmp_path.glob("*/ep*/episode.json")).read_text())["policy"]
    assert policy["variant"] == "mobile"

"""A malformed model output from an OpenAI-compatible server is a recorded parse error, never a crash.

The server is ``tests.support.openai_server`` (real HTTP, vLLM's wire format) in front of a canned
backend that answers every request with one fixed text, the fuzzer's shortest crash: a GUI-R1 click at
a 400-digit x, which ``float()`` cannot hold. ``agent run`` must record each answer as unparsed, ask
again, and give up after ``agent.max_parse_retries`` with exit 1 and no traceback; ``agent parse`` must
print ``parse error: ...`` and exit 1. The backend's reading of a garbage reply is covered too.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Sequence
from typing import Any

import pytest

from envs.records import Outcome
from envs.trajectory import read_episode
from policy.backends.base import Generation, GenerationRequest, Sample
from policy.backends.openai import OpenAIBackend
from policy.errors import BackendError
from tests.conftest import REPO
from tests.support.openai_server import OpenAICompatServer
from tests.support import procs

HUGE_X = "1" * 400
OUTPUT = (f"<think>t</think><answer>[{{'action': 'click', 'point': [{HUGE_X}, 5], "
          "'input_text': 'x'}]</answer>")
SERVED = "served-gui-r1"


class CannedBackend:
    """A backend whose every sample is ``text`` (what the test server serves)."""

    name = "canned"
    tokenizer = None

    def __init__(self, text: str) -> None:
        self.text = text
        self.decisions = 0
        """Requests with a screenshot: the client's image-token check also sends one without."""

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        self.decisions += sum(1 for r in requests if r.images())
        sample = Sample(text=self.text, token_ids=(1, 2, 3), logprobs=(-0.5, -0.25, 0.0), finish_reason="stop")
        return [Generation(tuple(sample for _ in range(r.n)), prompt_tokens=10_000) for r in requests]

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name}

    async def close(self) -> None:
        pass


def test_agent_run_records_the_unparsable_answer_and_retries(tmp_path):
    backend = CannedBackend(OUTPUT)
    with OpenAICompatServer(backend, SERVED) as server:
        r = procs.run(
            [sys.executable, "-m", "agent", "run", "--policy", f"openai:{server.url}", "--model", SERVED,
             "--format", "gui-r1", "--set", "agent.max_parse_retries=1", "--runs-dir", str(tmp_path)],
            cwd=REPO, env={**os.environ, "COLUMNS": "200"}, capture_output=True, text=True, timeout=180)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "Traceback" not in out and "OverflowError" not in out
    assert backend.decisions == 2  # the first answer and one retry
    (run_dir,) = tmp_path.iterdir()
    (episode_dir,) = [p for p in run_dir.iterdir() if p.is_dir()]
    episode = read_episode(episode_dir)
    assert episode.record.outcome is Outcome.ABORTED and episode.record.reason["type"] == "PolicyParseError"
    assert len(episode.steps) == 2
    for step in episode.steps:
        assert not step.executed and step.raw_output == OUTPUT
        assert "coordinate 1.11e399 is not a number a screen can have" in step.parse_error


def test_agent_parse_prints_a_parse_error():
    r = procs.run([sys.executable, "-m", "agent", "parse", "--format", "gui-r1", "--size", "1280x720", OUTPUT],
                  cwd=REPO, env={**os.environ, "COLUMNS": "200"}, capture_output=True, text=True, timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "parse error:" in out and "is not a number a screen can have" in out and "Traceback" not in out


@pytest.mark.parametrize("choice", [
    {"index": "0", "message": {"content": "ok"}},  # an index that is not a number orders as 0
    {"index": 0, "message": {"content": "ok"}, "token_ids": ["7", 8]},
])
def test_odd_but_readable_choices_are_read(choice: dict[str, Any]) -> None:
    samples, _, _ = OpenAIBackend("http://127.0.0.1:9", "m")._read({"choices": [choice, {"index": 1, **choice}]})
    assert [s.text for s in samples] == ["ok", "ok"]


@pytest.mark.parametrize("choice", [
    {"message": {"content": "x"}, "logprobs": {"content": [{"token": "a", "logprob": "low"}]}},
    {"message": {"content": "x"}, "logprobs": {"content": [{"token": "a", "logprob": -10**400}]}},
    {"message": {"content": "x"}, "logprobs": {"content": [{"token": "a", "logprob": [1]}]}},
    {"message": {"content": "x"}, "token_ids": ["two"]},
    {"message": {"content": "x"}, "token_ids": [-1]},
    {"message": {"content": "x"}, "token_ids": [1.5]},
])
def test_garbage_logprobs_and_token_ids_are_backend_errors(choice: dict[str, Any]) -> None:
    with pytest.raises(BackendError, match="answered garbage"):
        OpenAIBackend("http://127.0.0.1:9", "m")._read({"choices": [choice]})


def test_superscript_digits_are_not_token_ids() -> None:
    # "²".isdigit() is True but int("²") fails: such tokens are text, not vLLM's token_id:N form
    choice = {"message": {"content": "x"}, "logprobs": {"content": [{"token": "token_id:²", "logprob": -0.1}]}}
    (sample,), _, _ = OpenAIBackend("http://127.0.0.1:9", "m")._read({"choices": [choice]})
    assert sample.token_ids == () and sample.logprobs == (-0.1,)


def test_the_served_answer_reaches_the_parser_intact() -> None:
    backend = CannedBackend(OUTPUT)
    with OpenAICompatServer(backend, SERVED) as server:
        client = OpenAIBackend(server.url, SERVED, check_image_tokens=False)

        async def go() -> list[Generation]:
            try:
                text = {"type": "text", "text": "hi"}
                return await client.generate([GenerationRequest([{"role": "user", "content": [text]}])])
            finally:
                await client.close()

        (generation,) = asyncio.run(go())
    assert generation.samples[0].text == OUTPUT

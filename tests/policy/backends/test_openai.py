"""OpenAIBackend over HTTP.

Behaviour is tested against a real server on 127.0.0.1: ``tests.support.openai_server`` running the
tiny random Qwen2.5-VL (policy.tiny) through TransformersBackend (vLLM cannot run on CPU here and
`transformers serve` cannot load a Qwen2.5-VL processor without torchvision; see that module).
Failures a real server cannot be made to produce on demand (refused connections, 5xx, garbage,
stalls, servers without logprobs or ``n``) are tested at the wire-protocol level with a scripted
stdlib HTTP server.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import math
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import cv2
import numpy as np
import pytest

from devices.actions import ActionKind, Point
from devices.base import Observation
from policy.backends.base import GenerationRequest
from policy.backends.openai import OpenAIBackend
from policy.errors import BackendError
from policy.model import ModelPolicy
from policy.presets import Decoding, preset_for
from tests.support.openai_server import OpenAICompatServer

SERVED = "tiny-qwen"
PRESET = preset_for(SERVED, fmt="qwen2.5-vl", max_pixels=256 * 28 * 28,
                    decoding=Decoding(temperature=0.0, max_new_tokens=8))
SAMPLING = Decoding(temperature=1.0, top_p=0.9, max_new_tokens=8)


def image(w: int = 112, h: int = 84, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def chat(*images: np.ndarray, text: str = "Click the OK button.") -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": [{"type": "text", "text": "You are a helpful assistant."}]},
        {"role": "user", "content": [{"type": "text", "text": text}, *({"type": "image", "image": im} for im in images)]},
    ]


def generate(backend: OpenAIBackend, *requests: GenerationRequest):
    async def go():
        try:
            return await backend.generate(list(requests))
        finally:
            await backend.close()

    return asyncio.run(go())


# -- against the real model server ----------------------------------------------------------------

@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    from policy.tiny import build_tiny_qwen25vl

    model_dir = build_tiny_qwen25vl(tmp_path_factory.mktemp("tiny") / "model", seed=0)
    with OpenAICompatServer.for_model_dir(model_dir, model_name=SERVED, preset=PRESET) as s:
        yield s


def test_samples_with_images_logprobs_and_usage(server: OpenAICompatServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "policy.backends.openai")
    pic = image(112, 84)
    backend = OpenAIBackend(server.url, SERVED, timeout_s=30)
    before = server.requests_served
    (gen,) = generate(backend, GenerationRequest(chat(pic), n=2, decoding=SAMPLING))

    assert len(gen.samples) == 2 and gen.model == SERVED
    tokenizer = server.backend.tokenizer
    for s in gen.samples:
        assert s.token_ids and s.logprobs is not None and len(s.logprobs) == len(s.token_ids)
        assert all(lp <= 0 and math.isfinite(lp) for lp in s.logprobs)
        assert tokenizer.decode(list(s.token_ids), skip_special_tokens=True) == s.text
        assert s.finish_reason in ("stop", "length")
    # 112x84 costs 12 image tokens plus <|vision_start|> and <|vision_end|>; the backend measured the
    # text-only prompt once (a second request) and found no resize
    text_only = server.backend._encode([GenerationRequest(chat())])["input_ids"].shape[1]
    assert gen.prompt_tokens == text_only + 12 + 2
    assert server.requests_served - before == 2
    assert not [r for r in caplog.records if "resized" in r.message]
    assert backend.describe()["server"] == "vllm" and backend.describe()["logprobs"] is True


def test_image_arrives_untouched(server: OpenAICompatServer) -> None:
    pic = image(56, 84, seed=3)
    generate(OpenAIBackend(server.url, SERVED, check_image_tokens=False),
             GenerationRequest(chat(pic), decoding=PRESET.decoding))
    (received,) = server.last_request.images()
    assert received.shape == pic.shape and np.array_equal(received, pic)


def test_forced_tool_call_parses_into_the_click(server: OpenAICompatServer) -> None:
    frame = image(640, 360, seed=1)
    w, h = PRESET.input_size((640, 360))
    answer = ('<tool_call>\n{"name": "computer_use", "arguments": {"action": "left_click", '
              f'"coordinate": [{w // 2}, {h // 2}]}}}}\n</tool_call>')
    preset = preset_for(SERVED, fmt="qwen2.5-vl", max_pixels=256 * 28 * 28,
                        decoding=Decoding(temperature=0.0, max_new_tokens=len(answer) + 8))
    backend = OpenAIBackend(server.url, SERVED, extra_body={"handeye_force_text": answer})
    policy = ModelPolicy(backend, preset)

    async def go():
        try:
            return await policy.decide("Click the OK button.", (), Observation(frame=frame))
        finally:
            await backend.close()

    decision = asyncio.run(go())
    assert decision.parse_error is None, decision.parse_error
    assert decision.raw_output == answer
    assert decision.action.kind is ActionKind.CLICK
    assert decision.action.point == Point((w // 2) / w, (h // 2) / h)
    assert decision.model_input_size == (w, h)
    (sample,) = decision.info["samples"]
    assert sample["logprobs"] == [0.0] * len(sample["token_ids"])  # forced tokens, then EOS


def test_unknown_model_name_is_a_clear_error(server: OpenAICompatServer) -> None:
    with pytest.raises(BackendError, match=r"(?s)HTTP 404.*does not exist.*GET /v1/models"):
        generate(OpenAIBackend(server.url, "no-such-model"), GenerationRequest(chat(), decoding=PRESET.decoding))


# -- wire-protocol failures, with a scripted HTTP server ------------------------------------------

Reply = tuple[int, Any] | tuple[int, Any, dict[str, str]] | Callable[[dict[str, Any]], tuple[int, Any]]


def completion(*texts: str, logprobs: list[list[float]] | None = None, tokens: list[list[str]] | None = None,
               prompt_tokens: int | None = None) -> dict[str, Any]:
    choices = []
    for i, text in enumerate(texts):
        choice: dict[str, Any] = {"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        if logprobs is not None:
            toks = tokens[i] if tokens else [f"t{k}" for k in range(len(logprobs[i]))]
            choice["logprobs"] = {"content": [{"token": t, "logprob": lp} for t, lp in zip(toks, logprobs[i])]}
        choices.append(choice)
    body: dict[str, Any] = {"id": "x", "object": "chat.completion", "model": "m", "choices": choices}
    if prompt_tokens is not None:
        body["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": 1, "total_tokens": prompt_tokens + 1}
    return body


class ScriptedServer:
    """Answers POSTs with ``replies`` in order (the last one repeats): ``(status, payload[, headers])``
    where a str/bytes payload is sent as is and anything else as JSON, or ``callable(body)``.
    A ``"delay"`` header sleeps that many seconds first. Records each POSTed JSON body."""

    def __init__(self, *replies: Reply, models: list[dict[str, Any]] | None = None) -> None:
        self.replies, self.models, self.bodies = list(replies), models, []
        self.in_flight = self.peak_in_flight = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
                headers = dict(headers or {})
                if delay := float(headers.pop("delay", 0)):
                    outer._stop.wait(delay)
                data = payload if isinstance(payload, bytes) else payload.encode() if isinstance(payload, str) \
                    else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                try:
                    self.wfile.write(data)
                except OSError:  # the client gave up (timeout tests)
                    pass

            def do_GET(self) -> None:
                if self.path == "/v1/models" and outer.models is not None:
                    self._send(200, {"object": "list", "data": outer.models})
                else:
                    self._send(404, {"detail": "Not Found"})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer._lock:
                    outer.bodies.append(body)
                    reply = outer.replies[min(len(outer.bodies), len(outer.replies)) - 1]
                    outer.in_flight += 1
                    outer.peak_in_flight = max(outer.peak_in_flight, outer.in_flight)
                try:
                    self._send(*(reply(body) if callable(reply) else reply))
                finally:
                    with outer._lock:
                        outer.in_flight -= 1

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> ScriptedServer:
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def fast(url: str, **kw: Any) -> OpenAIBackend:
    return OpenAIBackend(url, "m", **{"timeout_s": 5, "retries": 2, "backoff_s": 0.01, **kw})


REQ = GenerationRequest(chat(), decoding=Decoding(temperature=0.0, max_new_tokens=4))


def test_request_body_on_the_wire() -> None:
    pic = image(56, 28, seed=5)
    decoding = Decoding(temperature=0.7, top_p=0.9, max_new_tokens=5, repetition_penalty=1.05)
    with ScriptedServer((200, completion("a", "b", "c", logprobs=[[-0.5], [-1.0], [-0.25]]))) as srv:
        (gen,) = generate(fast(srv.url, check_image_tokens=False), GenerationRequest(chat(pic), n=3, decoding=decoding))
    (body,) = srv.bodies
    assert {k: body[k] for k in ("model", "n", "temperature", "top_p", "max_tokens", "repetition_penalty", "logprobs")} \
        == {"model": "m", "n": 3, "temperature": 0.7, "top_p": 0.9, "max_tokens": 5, "repetition_penalty": 1.05,
            "logprobs": True}
    assert "frequency_penalty" not in body and "return_tokens_as_token_ids" not in body  # not a vLLM server
    url = body["messages"][1]["content"][1]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    png = cv2.imdecode(np.frombuffer(base64.b64decode(url.split(",", 1)[1]), np.uint8), cv2.IMREAD_COLOR)
    assert np.array_equal(png[..., ::-1], pic)  # lossless, not resized
    assert [s.text for s in gen.samples] == ["a", "b", "c"] and gen.samples[2].logprobs == (-0.25,)


def test_vllm_token_ids_are_read_from_the_tokens() -> None:
    reply = completion("hi", logprobs=[[-0.1, -0.2]], tokens=[["token_id:104", "token_id:105"]])
    with ScriptedServer((200, reply), models=[{"id": "m", "object": "model", "owned_by": "vllm"}]) as srv:
        (gen,) = generate(fast(srv.url), REQ)
    assert srv.bodies[0]["return_tokens_as_token_ids"] is True
    # vLLM would take what is left out from the checkpoint's generation_config.json (top_k=1 for Qwen)
    assert srv.bodies[0]["repetition_penalty"] == 1.0 and srv.bodies[0]["top_k"] == -1
    assert gen.samples[0].token_ids == (104, 105) and gen.samples[0].logprobs == (-0.1, -0.2)


def test_requests_run_concurrently_up_to_the_bound() -> None:
    with ScriptedServer((200, completion("ok"), {"delay": "0.3"})) as srv:
        backend = fast(srv.url, max_concurrency=3)
        t0 = time.monotonic()
        gens = generate(backend, *[REQ] * 6)
        elapsed = time.monotonic() - t0
    assert len(gens) == 6 and srv.peak_in_flight == 3
    assert 0.6 <= elapsed < 2.0  # two waves of three
    with pytest.raises(BackendError, match="closed"):
        generate(backend, REQ)


def test_a_backend_survives_separate_event_loops() -> None:
    with ScriptedServer((200, completion("ok"))) as srv:
        backend = fast(srv.url)
        first = asyncio.run(backend.generate([REQ]))  # the CLI runs one loop; tests often several
        (second,) = generate(backend, REQ)
    assert first[0].samples[0].text == second.samples[0].text == "ok"


def test_connection_refused_says_to_start_the_server() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again before the request: nobody listens there
    t0 = time.monotonic()
    with pytest.raises(BackendError, match=rf"is `vllm serve` .*running at http://127.0.0.1:{port}\?.*3 attempts"):
        generate(fast(f"http://127.0.0.1:{port}"), REQ)
    assert time.monotonic() - t0 < 3


def test_5xx_and_429_are_retried_with_backoff() -> None:
    replies = [(500, {"object": "error", "message": "CUDA out of memory"}), (429, {"error": "busy"}, {"Retry-After": "0"}),
               (200, completion("ok"))]
    with ScriptedServer(*replies) as srv:
        t0 = time.monotonic()
        (gen,) = generate(fast(srv.url, backoff_s=0.05), REQ)
        elapsed = time.monotonic() - t0
    assert gen.samples[0].text == "ok" and len(srv.bodies) == 3
    assert 0.05 + 0.1 <= elapsed < 2  # backoff 0.05 s, then 0.1 s


def test_5xx_gives_up_after_the_retries() -> None:
    with ScriptedServer((503, {"object": "error", "message": "engine dead"})) as srv:
        with pytest.raises(BackendError, match="HTTP 503: engine dead.*gave up after 3 attempts"):
            generate(fast(srv.url), REQ)
    assert len(srv.bodies) == 3


def test_too_many_images_names_the_vllm_flag() -> None:
    vllm_400 = {"object": "error", "message": "At most 1 image(s) may be provided in one request.",
                "type": "BadRequestError", "param": None, "code": 400}
    with ScriptedServer((400, vllm_400)) as srv:
        with pytest.raises(BackendError, match=r"(?s)HTTP 400.*At most 1 image\(s\).*--limit-mm-per-prompt"):
            generate(fast(srv.url), GenerationRequest(chat(image(28, 28), image(28, 28)), decoding=REQ.decoding))
    assert len(srv.bodies) == 1  # a 4xx is not retried


def test_malformed_json_is_garbage_and_not_retried() -> None:
    with ScriptedServer((200, "<html>proxy error</html>")) as srv:
        with pytest.raises(BackendError, match="not JSON.*proxy error.*garbage"):
            generate(fast(srv.url), REQ)
    assert len(srv.bodies) == 1


def test_missing_choices_is_garbage() -> None:
    with ScriptedServer((200, {"id": "x", "object": "chat.completion"})) as srv:
        with pytest.raises(BackendError, match="without 'choices'.*garbage"):
            generate(fast(srv.url), REQ)
    with ScriptedServer((200, {"choices": [{"index": 0, "message": {"role": "assistant"}}]})) as srv:
        with pytest.raises(BackendError, match="without message.content.*garbage"):
            generate(fast(srv.url), REQ)


def test_slow_server_times_out_within_bounds() -> None:
    with ScriptedServer((200, completion("late"), {"delay": "5"})) as srv:
        t0 = time.monotonic()
        with pytest.raises(BackendError, match=r"did not answer within 0.3 s.*gave up after 2 attempts"):
            generate(fast(srv.url, timeout_s=0.3, retries=1), REQ)
        assert time.monotonic() - t0 < 3  # the server would have taken 5 s
    assert len(srv.bodies) == 2


def test_server_rejecting_logprobs_is_asked_without_them_from_then_on() -> None:
    refusal = {"error": {"message": "logprobs is not supported", "type": "invalid_request_error"}}
    with ScriptedServer((400, refusal), (200, completion("ok"))) as srv:
        backend = fast(srv.url)

        async def twice():
            try:
                return await backend.generate([REQ]), await backend.generate([REQ])
            finally:
                await backend.close()

        (first,), (second,) = asyncio.run(twice())
    assert first.samples[0].text == "ok" and first.samples[0].logprobs is None
    assert [("logprobs" in b) for b in srv.bodies] == [True, False, False]
    assert backend.describe()["logprobs"] is False


def test_server_ignoring_logprobs_and_n_is_topped_up() -> None:
    with ScriptedServer((200, completion("one"))) as srv:
        (gen,) = generate(fast(srv.url), GenerationRequest(chat(), n=3, decoding=REQ.decoding))
    assert [s.text for s in gen.samples] == ["one"] * 3 and all(s.logprobs is None for s in gen.samples)
    assert [b["n"] for b in srv.bodies] == [3, 1, 1]
    # three greedy answers would be one answer three times: sampled at temperature 1, as in-process
    assert [b["temperature"] for b in srv.bodies] == [1.0, 1.0, 1.0]


def _tokens_as_served(scale: float) -> Callable[[dict[str, Any]], tuple[int, Any]]:
    """A server whose processor scales each image side by ``scale`` before counting its tokens."""
    def reply(body: dict[str, Any]) -> tuple[int, Any]:
        tokens = 20
        for part in body["messages"][1]["content"]:
            if part["type"] == "image_url":
                png = cv2.imdecode(np.frombuffer(base64.b64decode(part["image_url"]["url"].split(",", 1)[1]), np.uint8),
                                   cv2.IMREAD_COLOR)
                tokens += round(png.shape[0] * scale / 28) * round(png.shape[1] * scale / 28) + 2
        return 200, completion("ok", prompt_tokens=tokens)
    return reply


@pytest.mark.parametrize("scale", [1.0, 0.5, 2.0])
def test_image_token_check_warns_when_the_server_resizes(scale: float, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "policy.backends.openai")
    with ScriptedServer(_tokens_as_served(scale)) as srv:
        backend = fast(srv.url)

        async def twice():
            try:
                for _ in range(2):
                    await backend.generate([GenerationRequest(chat(image(280, 112)), decoding=REQ.decoding)])
            finally:
                await backend.close()

        asyncio.run(twice())
    warnings = [r.getMessage() for r in caplog.records if "resized the images" in r.getMessage()]
    if scale == 1.0:
        assert not warnings
        assert [len(b["messages"][1]["content"]) for b in srv.bodies] == [2, 1, 2]  # one text-only twin
    else:
        (warning,) = warnings  # once per image size
        assert "280x112" in warning and "40 image tokens" in warning and "--mm-processor-kwargs" in warning

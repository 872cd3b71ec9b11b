"""Test infrastructure: a minimal OpenAI-compatible chat server over a real in-process model.

NOT a serving product. It exists because the servers users deploy cannot run here: vLLM's wheel
is CUDA-only and its Qwen2.5-VL module imports torchvision, and `transformers serve` (5.24) fails
to load a Qwen2.5-VL checkpoint without torchvision (``AutoProcessor`` builds
``Qwen2VLVideoProcessor``, which requires it) and ignores ``n`` and ``logprobs`` anyway. So tests of
``policy.backends.openai.OpenAIBackend`` talk HTTP to this server, which runs the tiny random
Qwen2.5-VL from ``policy.tiny`` through ``policy.backends.hf.TransformersBackend``: the bytes on
the wire are real, the images are really decoded and processed, the tokens really generated.

It speaks the subset of vLLM's OpenAI-compatible API that handeye uses, and announces itself the
way vLLM does (``owned_by: "vllm"`` in ``/v1/models``) so clients use vLLM's extensions:

- ``GET /health`` -> 200; ``GET /v1/models`` -> the one served model name
- ``POST /v1/chat/completions`` with ``messages`` (text parts and ``image_url`` parts holding
  ``data:`` URLs, decoded to RGB arrays untouched), ``n``, ``temperature``, ``top_p``,
  ``max_tokens``, ``repetition_penalty``, ``frequency_penalty``, ``logprobs`` and vLLM's
  ``return_tokens_as_token_ids``; the answer has ``choices[i].message.content``,
  ``choices[i].logprobs.content[*]`` (``token``, ``logprob``) when asked, ``finish_reason`` and
  ``usage.prompt_tokens`` (text plus image tokens, as the model saw them)
- errors as vLLM sends them: ``{"object": "error", "message": ..., "type": ..., "code": ...}``
  (400 bad request, 404 unknown model, 500 generation failure)

Runtime LoRA, as vLLM with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` and ``--enable-lora`` (``runtime_lora=True``):

- ``POST /v1/load_lora_adapter`` ``{"lora_name", "lora_path"}`` loads a peft adapter folder from this machine under
  that name (400 "has already been loaded" for a name in use; 404 when runtime loading is off, as vLLM has no
  such route then); ``POST /v1/unload_lora_adapter`` ``{"lora_name"}`` drops it (404 for an unknown name);
- ``/v1/models`` lists the base model and every loaded adapter (``"parent"``: the base, as vLLM does), and a chat
  request whose ``model`` names an adapter is answered with that adapter active (requests take turns, so each one
  sees the adapter it named).

Test hook (an extra body field, as vLLM's extensions are): ``"handeye_force_text": "..."`` makes
every sample of that request exactly this text, by constrained decoding with
``policy.backends.hf.ForceTextLogitsProcessor`` (the random model would otherwise write noise).

Use: ``with OpenAICompatServer.for_model_dir(path) as server: OpenAIBackend(server.url, server.model_name)``,
or from a shell ``python -m tests.support.openai_server MODEL_DIR --port 8000``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from policy.backends.base import GenerationRequest
from policy.errors import BackendError
from policy.presets import Decoding, ModelPreset, preset_for

log = logging.getLogger(__name__)

FORCE_FIELD = "handeye_force_text"


class RequestError(Exception):
    def __init__(self, status: int, message: str, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status, self.kind = status, kind


def decode_data_url(url: str) -> np.ndarray:
    """The RGB uint8 array of a ``data:image/...;base64,`` URL (no resizing, no network)."""
    if not url.startswith("data:image/") or ";base64," not in url:
        raise RequestError(400, f"only base64 data:image URLs are accepted, got {url[:40]!r}")
    try:
        raw = base64.b64decode(url.split(";base64,", 1)[1], validate=True)
    except ValueError as e:
        raise RequestError(400, f"the image data URL is not valid base64: {e}") from None
    bgr = cv2.imdecode(np.frombuffer(raw, np.uint8), cv2.IMREAD_COLOR)
    if bgr is None:
        raise RequestError(400, "the image data URL does not decode to an image")
    return np.ascontiguousarray(bgr[..., ::-1])


def to_backend_messages(messages: Any) -> list[dict[str, Any]]:
    """OpenAI chat messages -> handeye messages whose image parts hold RGB arrays."""
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "'messages' must be a non-empty list")
    out = []
    for m in messages:
        if not isinstance(m, dict) or "role" not in m:
            raise RequestError(400, f"each message needs a role and content, got {str(m)[:80]}")
        content = m.get("content")
        if isinstance(content, list):
            parts = []
            for part in content:
                kind = part.get("type") if isinstance(part, dict) else None
                if kind == "text":
                    parts.append({"type": "text", "text": str(part.get("text", ""))})
                elif kind == "image_url":
                    ref = part.get("image_url")
                    url = ref.get("url") if isinstance(ref, dict) else ref
                    parts.append({"type": "image", "image": decode_data_url(str(url))})
                else:
                    raise RequestError(400, f"unsupported content part type {kind!r}")
            content = parts
        elif not isinstance(content, str):
            raise RequestError(400, "message content must be a string or a list of parts")
        out.append({"role": m["role"], "content": content})
    return out


class _FirstRow:
    """A logits processor applied to the first row of a request only (its first sample)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        scores = scores.clone()
        scores[:1] = self.inner(input_ids[:1], scores[:1])
        return scores


class OpenAICompatServer:
    """The server (see the module docstring). ``backend`` is a TransformersBackend (or anything
    with its ``generate`` and ``tokenizer``); ``forced`` maps request ids to forced texts for the
    backend's ``logits_processor_factory`` (``for_model_dir`` wires this up)."""

    def __init__(self, backend: Any, model_name: str, *, host: str = "127.0.0.1", port: int = 0,
                 forced: dict[int, str] | None = None, runtime_lora: bool = True) -> None:
        self.backend = backend
        self.model_name = model_name
        self.forced = forced
        self.runtime_lora = runtime_lora
        self.adapters: dict[str, str] = {}
        """Loaded LoRA adapters: name -> the path they were loaded from."""
        self.served_by: list[str | None] = []
        """Per chat request, the adapter that answered it (None: the base model)."""
        self._turn: asyncio.Lock | None = None
        self.requests_served = 0
        self.last_request: GenerationRequest | None = None
        """The latest request as the backend got it (tests check the decoded images)."""
        self._loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(target=self._loop.run_forever, name="openai-server-loop", daemon=True)
        self._httpd = ThreadingHTTPServer((host, port), self._handler_class())
        self._httpd.daemon_threads = True
        self._http_thread = threading.Thread(target=self._httpd.serve_forever, name="openai-server-http", daemon=True)

    @classmethod
    def for_model_dir(cls, path: str | Path, *, model_name: str | None = None, preset: ModelPreset | None = None,
                      host: str = "127.0.0.1", port: int = 0, runtime_lora: bool = True,
                      force_first: str = "") -> OpenAICompatServer:
        """Serve a Qwen2/2.5-VL checkpoint directory (e.g. ``policy.tiny.build_tiny_qwen25vl``). ``force_first``:
        the first sample of every request is this text (the others are the model's), so that a random model's
        episodes make progress in tests of whole sessions."""
        from policy.backends.hf import ForceTextLogitsProcessor, TransformersBackend

        forced: dict[int, str] = {}
        holder: dict[str, Any] = {}

        def factory(request: GenerationRequest) -> Any:
            text = forced.get(id(request))
            if text is not None:
                return ForceTextLogitsProcessor(holder["backend"].tokenizer, text)
            if force_first:
                return _FirstRow(ForceTextLogitsProcessor(holder["backend"].tokenizer, force_first))
            return None

        preset = preset or preset_for(model_name or str(path), fmt="qwen2.5-vl")
        backend = TransformersBackend(path, preset=preset, device="cpu", dtype="float32",
                                      logits_processor_factory=factory)
        holder["backend"] = backend
        return cls(backend, model_name or str(path), host=host, port=port, forced=forced, runtime_lora=runtime_lora)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> OpenAICompatServer:
        self._loop_thread.start()
        self._http_thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._loop_thread.join(timeout=5)

    def __enter__(self) -> OpenAICompatServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- chat completions ----------------------------------------------------------------------

    def complete(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise RequestError(400, "the request body must be a JSON object")
        model = body.get("model")
        if model != self.model_name and model not in self.adapters:
            raise RequestError(404, f"The model `{model}` does not exist.", "NotFoundError")
        if body.get("stream"):
            raise RequestError(400, "stream is not supported by this test server")
        n = body.get("n", 1)
        if not isinstance(n, int) or n < 1:
            raise RequestError(400, f"n must be a positive integer, got {n!r}")
        try:
            decoding = Decoding(
                temperature=float(body.get("temperature", 1.0)), top_p=float(body.get("top_p", 1.0)),
                max_new_tokens=int(body.get("max_tokens") or 256),
                repetition_penalty=float(body.get("repetition_penalty", 1.0)),
                frequency_penalty=float(body.get("frequency_penalty", 0.0)),
            )
        except (TypeError, ValueError) as e:
            raise RequestError(400, f"bad sampling parameter: {e}") from None
        request = GenerationRequest(to_backend_messages(body.get("messages")), n=n, decoding=decoding)
        self.last_request = request
        force = body.get(FORCE_FIELD)
        if force is not None:
            if self.forced is None or not isinstance(force, str):
                raise RequestError(400, f"{FORCE_FIELD} needs a string and a server built with for_model_dir")
            self.forced[id(request)] = force
        try:
            adapter = model if model in self.adapters else None
            future = asyncio.run_coroutine_threadsafe(self._generate_with(adapter, request), self._loop)
            (generation,) = future.result(timeout=120)
        except BackendError as e:
            raise RequestError(400, str(e)) from None
        finally:
            if self.forced is not None:
                self.forced.pop(id(request), None)
        self.requests_served += 1
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        tokenizer = getattr(self.backend, "tokenizer", None)
        choices = []
        for i, sample in enumerate(generation.samples):
            choice: dict[str, Any] = {
                "index": i, "message": {"role": "assistant", "content": sample.text},
                "finish_reason": sample.finish_reason or "stop", "logprobs": None,
            }
            if body.get("logprobs") and sample.logprobs is not None:
                tokens = [f"token_id:{t}" if as_ids or tokenizer is None else tokenizer.decode([t])
                          for t in sample.token_ids]
                choice["logprobs"] = {"content": [{"token": tok, "logprob": lp, "top_logprobs": []}
                                                  for tok, lp in zip(tokens, sample.logprobs)]}
            choices.append(choice)
        completion = sum(len(s.token_ids) for s in generation.samples)
        prompt = generation.prompt_tokens or 0
        return {
            "id": f"chatcmpl-test-{self.requests_served}", "object": "chat.completion", "model": self.model_name,
            "choices": choices,
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        }

    async def _generate_with(self, adapter: str | None, request: GenerationRequest) -> Any:
        """Generate with ``adapter`` active (None: the base weights); one request at a time."""
        if self._turn is None:
            self._turn = asyncio.Lock()
        async with self._turn:
            if adapter is None:
                if hasattr(self.backend, "disable_adapter"):  # a backend without adapters serves its base weights
                    self.backend.disable_adapter()
            else:
                self.backend.use_adapter(adapter)
            self.served_by.append(adapter)
            return await self.backend.generate([request])

    async def _load(self, name: str, path: str) -> None:
        if self._turn is None:
            self._turn = asyncio.Lock()
        async with self._turn:
            self.backend.load_adapter(path, name)
            self.adapters[name] = path

    async def _unload(self, name: str) -> None:
        if self._turn is None:
            self._turn = asyncio.Lock()
        async with self._turn:
            others = [a for a in self.adapters if a != name]
            if self.backend.adapter_version == name:
                if others:
                    self.backend.use_adapter(others[0])
                else:
                    self.backend.disable_adapter()
            if others or self.backend.adapter_version is not None:
                self.backend.unload_adapter(name)
            del self.adapters[name]  # the last one stays in memory, disabled: peft keeps one adapter

    def lora(self, route: str, body: Any) -> dict[str, Any] | str:
        """``/v1/load_lora_adapter`` and ``/v1/unload_lora_adapter`` (see the module docstring)."""
        if not isinstance(body, dict) or not isinstance(body.get("lora_name"), str):
            raise RequestError(400, "the body needs lora_name (and lora_path to load)")
        name = body["lora_name"]
        if route == "/v1/load_lora_adapter":
            if name in self.adapters or name == self.model_name:
                raise RequestError(400, f"The lora adapter '{name}' has already been loaded.", "InvalidUserInput")
            path = body.get("lora_path")
            if not isinstance(path, str) or not Path(path).is_dir():
                raise RequestError(400, f"No adapter found for {path!r}", "NotFoundError")
            try:
                asyncio.run_coroutine_threadsafe(self._load(name, path), self._loop).result(timeout=120)
            except BackendError as e:
                raise RequestError(400, str(e)) from None
            return f"Success: LoRA adapter '{name}' added successfully."
        if name not in self.adapters:
            raise RequestError(404, f"The lora adapter '{name}' cannot be found.", "NotFoundError")
        asyncio.run_coroutine_threadsafe(self._unload(name), self._loop).result(timeout=60)
        return f"Success: LoRA adapter '{name}' removed successfully."

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt: str, *args: Any) -> None:
                log.debug("%s " + fmt, self.address_string(), *args)

            def _send(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _error(self, status: int, message: str, kind: str) -> None:
                self._send(status, {"object": "error", "message": message, "type": kind, "param": None, "code": status})

            def do_GET(self) -> None:
                if self.path == "/health":
                    self._send(200, {})
                elif self.path == "/v1/models":
                    self._send(200, {"object": "list", "data": [
                        {"id": server.model_name, "object": "model", "owned_by": "vllm", "root": server.model_name},
                        *({"id": name, "object": "model", "owned_by": "vllm", "root": path,
                           "parent": server.model_name} for name, path in list(server.adapters.items()))]})
                else:
                    self._error(404, f"no route {self.path}", "NotFoundError")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                lora = self.path in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter") and server.runtime_lora
                if self.path != "/v1/chat/completions" and not lora:
                    self._error(404, f"no route {self.path}", "NotFoundError")
                    return
                try:
                    try:
                        body = json.loads(raw)
                    except ValueError as e:
                        raise RequestError(400, f"the request body is not JSON: {e}") from None
                    self._send(200, server.lora(self.path, body) if lora else server.complete(body))
                except RequestError as e:
                    self._error(e.status, str(e), e.kind)
                except Exception as e:  # noqa: BLE001 - a server answers 500, it does not die
                    log.exception("generation failed")
                    self._error(500, f"{type(e).__name__}: {e}", "InternalServerError")

        return Handler


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Test-only OpenAI-compatible server over a local Qwen2/2.5-VL dir")
    parser.add_argument("model_dir")
    parser.add_argument("--name", help="served model name (default: the directory)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    server = OpenAICompatServer.for_model_dir(args.model_dir, model_name=args.name, host=args.host, port=args.port)
    with server:
        log.info("serving %s at %s (Ctrl-C to stop)", server.model_name, server.url)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()

"""A Backend that talks to an OpenAI-compatible chat server: `vllm serve`, SGLang, `transformers serve`.

One ``GenerationRequest`` is one ``POST {base_url}/v1/chat/completions`` asking for ``n`` choices;
several requests run concurrently, at most ``max_concurrency`` at a time. Images go as PNG data URLs
of the arrays handeye already resized to the model-input size (w', h'), so the server's processor must
leave them alone (see docs/serving.md for the vLLM flags that make sure of it).

What is asked for and how answers are read:

- Decoding: ``temperature`` (1 when ``n`` > 1 samples are asked for at temperature 0, as the
  transformers backend does), ``top_p``, ``max_tokens`` (``max_new_tokens``), ``n``; ``frequency_penalty``
  only when non-zero and ``repetition_penalty`` (a vLLM / SGLang extension) only when not 1, so
  strict servers (OpenAI, `transformers serve`, which answer 422 to unknown fields) accept the rest.
  To vLLM, ``repetition_penalty`` and ``top_k=-1`` always go, since vLLM takes a field left out
  from the checkpoint's ``generation_config.json`` rather than from the OpenAI defaults.
- ``logprobs: true``; each choice's ``logprobs.content[*].logprob`` becomes ``Sample.logprobs``.
  Token ids come from vLLM's ``return_tokens_as_token_ids`` (tokens spelt ``"token_id:123"``, asked
  for only when ``/v1/models`` says the server is vLLM) or a choice's ``token_ids`` field. A server
  that rejects ``logprobs`` with a 4xx naming the field is asked again without it, once, and never
  again; one that ignores it gives samples with ``logprobs=None``.
- A server that returns fewer choices than ``n`` (some ignore ``n``) is topped up with more requests
  for the missing samples, and later requests ask for one choice at a time.

Errors are ``BackendError`` saying what to do:

- connection refused or reset: retried (a restarting server), then "is `vllm serve` running at URL?"
- timeouts (``timeout_s`` per attempt), HTTP 429 and 5xx: retried ``retries`` times with exponential
  backoff (``backoff_s`` * 2**attempt, at most 8 s; 429's Retry-After is honoured up to that cap)
- other HTTP 4xx: not retried; the message quotes the server's error text and, for the usual
  vLLM refusals, names the flag to change (``--limit-mm-per-prompt``, ``--max-model-len``, the
  served model / LoRA name)
- a body that is not JSON or lacks ``choices`` / ``message.content``: not retried ("the server
  answered garbage"), since asking again gets the same answer.

Image-token check (``check_image_tokens``): a Qwen2.5-VL image of w' x h' costs w'*h'/784 tokens
(14 px patches merged 2x2). When the server reports ``usage.prompt_tokens`` the backend (1) warns
whenever prompt_tokens is below the images' expected total, which can only mean the server shrank
them; and (2) once per distinct set of image sizes, sends the same messages with the images removed
(``max_tokens=1``, one prefill) and compares the difference in prompt tokens with the expected image
tokens (each image also costs its ``<|vision_start|>``/``<|vision_end|>`` tokens, so up to 4 extra per
image are tolerated). A mismatch means the server resized the image and the model's coordinates
will not be in the space handeye maps from: a warning gives both numbers and the fix.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import math
import os
import random
import time
from collections.abc import Sequence
from typing import Any

import cv2
import numpy as np

from policy.backends.base import Generation, GenerationRequest, Sample
from policy.errors import BackendError

log = logging.getLogger(__name__)

TOKEN_PIXELS = 28 * 28
"""Pixels per image token for Qwen2-VL / Qwen2.5-VL (14 px patches, 2x2 merge)."""
EXTRA_TOKENS_PER_IMAGE = 4
"""Tolerance per image for the check: vision start/end markers and template whitespace."""
MAX_BACKOFF_S = 8.0

_OPTIONAL_FIELDS = ("logprobs", "return_tokens_as_token_ids")


class _Retryable(Exception):
    """An attempt failed in a way that asking again may fix; ``message`` is the final error text."""

    def __init__(self, message: str, delay_s: float | None = None) -> None:
        super().__init__(message)
        self.delay_s = delay_s


class _DropField(Exception):
    """The server refused an optional field (``field``); ask again without it."""

    def __init__(self, field: str) -> None:
        super().__init__(field)
        self.field = field


def encode_png(image: np.ndarray) -> str:
    """A ``data:image/png;base64,...`` URL of an RGB uint8 array, pixels untouched."""
    if not (isinstance(image, np.ndarray) and image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3):
        raise ValueError(
            f"images must be RGB uint8 arrays of shape (h, w, 3), got "
            f"{getattr(image, 'dtype', type(image).__name__)} {getattr(image, 'shape', '')}"
        )
    ok, buf = cv2.imencode(".png", np.ascontiguousarray(image[..., ::-1]))
    if not ok:
        raise ValueError(f"could not PNG-encode an image of shape {image.shape}")
    return "data:image/png;base64," + base64.b64encode(buf.tobytes()).decode("ascii")


def to_openai_messages(messages: list[dict[str, Any]], *, drop_images: bool = False) -> list[dict[str, Any]]:
    """Chat messages with ndarray image parts turned into OpenAI ``image_url`` parts (or removed)."""
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            parts = []
            for part in content:
                if part.get("type") == "image":
                    if not drop_images:
                        parts.append({"type": "image_url", "image_url": {"url": encode_png(part["image"])}})
                else:
                    parts.append(part)
            message = {**message, "content": parts}
        out.append(message)
    return out


def expected_image_tokens(images: Sequence[np.ndarray]) -> int:
    """Image tokens a Qwen2.5-VL processor spends on images that it does not resize."""
    return sum(math.ceil(im.shape[0] * im.shape[1] / TOKEN_PIXELS) for im in images)


def _hint(status: int, text: str) -> str:
    low = text.lower()
    if "at most" in low and "image" in low:
        return ("the server limits images per prompt: start vLLM with --limit-mm-per-prompt.image N "
                "(N = the preset's history_images: 5 for UI-TARS), or lower history_images")
    if "maximum context length" in low or "max_model_len" in low or "max-model-len" in low:
        return "the prompt is longer than the server's context: raise vllm serve --max-model-len, or send fewer/smaller images"
    if status == 404 or ("model" in low and ("does not exist" in low or "not found" in low)):
        return ("the server does not serve this model name: pass --model as listed by GET /v1/models "
                "(a LoRA adapter must be loaded first, see docs/serving.md)")
    if status in (401, 403):
        return "the server refused the API key: set the key the server was started with (--api-key)"
    return "fix the request or the server's flags (docs/serving.md)"


class OpenAIBackend:
    """Backend over an OpenAI-compatible ``/v1/chat/completions`` endpoint (see the module docstring)."""

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        api_key_env: str | None = None,
        timeout_s: float = 60.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        max_concurrency: int = 8,
        check_image_tokens: bool = True,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        """``base_url`` is the server root (``http://host:8000``; a trailing ``/v1`` is accepted).
        ``api_key`` or the name of an environment variable holding it (``api_key_env``) is sent as a
        bearer token. ``retries`` counts the attempts after the first. ``extra_body`` is merged into
        every request body (e.g. vLLM's ``mm_processor_kwargs``, a test server's hooks)."""
        if timeout_s <= 0 or retries < 0 or backoff_s < 0 or max_concurrency < 1:
            raise ValueError(
                f"need timeout_s > 0, retries >= 0, backoff_s >= 0 and max_concurrency >= 1; got "
                f"{timeout_s=}, {retries=}, {backoff_s=}, {max_concurrency=}"
            )
        if api_key is None and api_key_env:
            api_key = os.environ.get(api_key_env)
            if api_key is None:
                raise BackendError(f"the API key variable {api_key_env} is not set; export it or drop api_key_env")
        url = base_url.rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        self.base_url = url[:-3] if url.endswith("/v1") else url
        self.model = model
        self.timeout_s = float(timeout_s)
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_concurrency = max_concurrency
        self.check_image_tokens = check_image_tokens
        self.extra_body = dict(extra_body or {})
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client: Any = None  # httpx.AsyncClient, made on first use inside the running loop
        self._loop: asyncio.AbstractEventLoop | None = None
        self._semaphore: asyncio.Semaphore | None = None
        self._closed = False
        self._probed = False
        self.server_kind = "unknown"
        """"vllm" when /v1/models says so (then token ids are asked for), else "unknown"."""
        self.logprobs_supported: bool | None = None
        """None until a server answered; False once it rejected or ignored ``logprobs``."""
        self.n_supported: bool | None = None
        self._dropped: set[str] = set()
        self._checked_sizes: set[tuple[tuple[int, int], ...]] = set()

    # -- lifecycle -------------------------------------------------------------------------------

    def _http(self) -> Any:
        if self._closed:
            raise BackendError("OpenAIBackend was closed; make a new one")
        loop = asyncio.get_running_loop()
        if self._client is not None and self._loop is not loop:
            # an earlier asyncio.run's client cannot be used (or closed) from this loop: start afresh
            self._client = None
        if self._client is None:
            self._loop = loop
            try:
                import httpx
            except ImportError as e:  # pragma: no cover - httpx is in the serve extra
                raise BackendError("the openai backend needs httpx: pip install 'handeye[serve]'") from e
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout_s, connect=min(10.0, self.timeout_s)), headers=self._headers
            )
            self._semaphore = asyncio.Semaphore(self.max_concurrency)
        return self._client

    async def close(self) -> None:
        self._closed = True
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def __aenter__(self) -> OpenAIBackend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name, "base_url": self.base_url, "model": self.model, "server": self.server_kind,
            "logprobs": self.logprobs_supported, "n_per_request": self.n_supported,
            "timeout_s": self.timeout_s, "retries": self.retries, "max_concurrency": self.max_concurrency,
        }

    # -- generation ------------------------------------------------------------------------------

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        self._http()
        if not self._probed:
            await self._probe()
        return list(await asyncio.gather(*(self._generate_one(r) for r in requests)))

    async def _probe(self) -> None:
        """Ask /v1/models who is serving, until a server answers; a failure leaves the kind unknown
        and never fails generation (the chat request reports the real problem)."""
        import httpx

        try:
            response = await self._client.get(f"{self.base_url}/v1/models", timeout=min(5.0, self.timeout_s))
        except httpx.HTTPError as e:
            log.debug("GET %s/v1/models failed: %s", self.base_url, e)
            return
        self._probed = True
        try:
            data = response.json().get("data", []) if response.status_code == 200 else []
        except (ValueError, AttributeError):
            data = []
        models = data if isinstance(data, list) else []
        if any(isinstance(m, dict) and m.get("owned_by") == "vllm" for m in models):
            self.server_kind = "vllm"
        ids = [m.get("id") for m in models if isinstance(m, dict)]
        if ids and self.model not in ids:
            log.warning("%s does not list model %r among %s; requests may fail with 404", self.base_url, self.model, ids)

    async def _generate_one(self, request: GenerationRequest) -> Generation:
        start = time.perf_counter()
        messages = await asyncio.to_thread(to_openai_messages, request.messages)  # PNG encoding takes ms
        n_per_call = request.n if self.n_supported is not False else 1
        body = await self._complete(messages, request, n_per_call)
        samples, usage_tokens, model = self._read(body)
        if request.n > 1 and n_per_call > 1 and len(samples) == 1:
            log.info("%s ignores n; drawing samples with one request each", self.base_url)
            self.n_supported = False
        elif request.n > 1 and n_per_call > 1:
            self.n_supported = True
        while len(samples) < request.n:
            rest = await asyncio.gather(*(self._complete(messages, request, 1)
                                          for _ in range(request.n - len(samples))))
            samples += [s for b in rest for s in self._read(b)[0][:1]]
        if self.check_image_tokens and usage_tokens is not None and request.images():
            await self._check_images(request, usage_tokens)
        return Generation(samples=tuple(samples[: request.n]), prompt_tokens=usage_tokens,
                          latency_s=time.perf_counter() - start, model=model or self.model)

    def _body(self, messages: list[dict[str, Any]], request: GenerationRequest, n: int, max_tokens: int | None = None
              ) -> dict[str, Any]:
        d = request.decoding
        # as TransformersBackend: several samples at temperature 0 are drawn at temperature 1
        temperature = 1.0 if d.temperature == 0 and request.n > 1 else d.temperature
        body: dict[str, Any] = {
            "model": self.model, "messages": messages, "n": n, "temperature": temperature, "top_p": d.top_p,
            "max_tokens": max_tokens or d.max_new_tokens,
        }
        if d.frequency_penalty:
            body["frequency_penalty"] = d.frequency_penalty
        if self.server_kind == "vllm":
            # vLLM fills fields a request leaves out from the checkpoint's generation_config.json
            # (Qwen2.5-VL's says top_k=1, repetition_penalty=1.05): state them all
            body["repetition_penalty"] = d.repetition_penalty
            body["top_k"] = -1
        elif d.repetition_penalty != 1.0:
            body["repetition_penalty"] = d.repetition_penalty
        if self.logprobs_supported is not False and "logprobs" not in self._dropped:
            body["logprobs"] = True
            if self.server_kind == "vllm" and "return_tokens_as_token_ids" not in self._dropped:
                body["return_tokens_as_token_ids"] = True
        body.update(self.extra_body)
        return body

    async def _complete(self, messages: list[dict[str, Any]], request: GenerationRequest, n: int,
                        max_tokens: int | None = None) -> dict[str, Any]:
        """POST one chat completion with retries; the parsed JSON body."""
        attempt = 0
        while True:
            body = self._body(messages, request, n, max_tokens)
            try:
                async with self._semaphore:  # type: ignore[union-attr]
                    return await self._attempt(body)
            except _Retryable as e:
                if attempt >= self.retries:
                    raise BackendError(f"{e} (gave up after {attempt + 1} attempts)") from None
                delay = min(MAX_BACKOFF_S, self.backoff_s * 2**attempt)
                if e.delay_s is not None:
                    delay = min(MAX_BACKOFF_S, max(delay, e.delay_s))
                attempt += 1
                log.warning("%s; retry %d/%d in %.2f s", e, attempt, self.retries, delay)
                await asyncio.sleep(delay * (1 + 0.1 * random.random()))
            except _DropField as e:
                log.info("%s rejected %s; asking without it from now on", self.base_url, e.field)
                self._dropped.add(e.field)
                if e.field == "logprobs":
                    self.logprobs_supported = False

    async def _attempt(self, body: dict[str, Any]) -> dict[str, Any]:
        import httpx

        url = f"{self.base_url}/v1/chat/completions"
        try:
            # wait_for bounds the whole attempt; httpx's own timeouts bound each socket operation
            response = await asyncio.wait_for(self._client.post(url, json=body), self.timeout_s)
        except (TimeoutError, httpx.TimeoutException) as e:
            raise _Retryable(f"{url} did not answer within {self.timeout_s:g} s ({type(e).__name__}); "
                             "raise timeout_s or check the server's load") from None
        except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as e:
            raise _Retryable(f"could not reach {url} ({type(e).__name__}: {e}); is `vllm serve` "
                             f"(or another OpenAI-compatible server) running at {self.base_url}?") from None
        except httpx.HTTPError as e:
            raise BackendError(f"request to {url} failed: {type(e).__name__}: {e}") from None
        status = response.status_code
        text = response.text
        if status == 429 or status >= 500:
            retry_after = response.headers.get("retry-after")
            delay = float(retry_after) if retry_after and retry_after.replace(".", "", 1).isdigit() else None
            raise _Retryable(f"{url} answered HTTP {status}: {_error_text(text)}", delay)
        if status >= 400:
            for field in _OPTIONAL_FIELDS:
                if field in body and field in text and field not in self._dropped:
                    raise _DropField(field)
            raise BackendError(f"{url} refused the request with HTTP {status}: {_error_text(text)}. "
                               f"{_hint(status, text)}")
        try:
            parsed = response.json()
        except ValueError:
            raise BackendError(f"{url} answered HTTP {status} with a body that is not JSON: {text[:200]!r}; "
                               "the server answered garbage (is this an OpenAI-compatible endpoint?)") from None
        if not isinstance(parsed, dict):
            raise BackendError(f"{url} answered {type(parsed).__name__} JSON, not an object: {text[:200]!r}; "
                               "the server answered garbage")
        return parsed

    def _read(self, body: dict[str, Any]) -> tuple[list[Sample], int | None, str]:
        """Samples, usage.prompt_tokens and model name from a completion body."""
        choices = body.get("choices")
        if not isinstance(choices, list) or not choices:
            raise BackendError(f"{self.base_url} answered without 'choices' (keys: {sorted(body)}); "
                               "the server answered garbage")
        samples = []
        for choice in sorted(choices, key=_choice_index):
            message = choice.get("message") if isinstance(choice, dict) else None
            text = message.get("content") if isinstance(message, dict) else None
            if not isinstance(text, str):
                raise BackendError(f"{self.base_url} answered a choice without message.content: {str(choice)[:200]}; "
                                   "the server answered garbage")
            token_ids, logprobs = self._read_logprobs(choice)
            samples.append(Sample(text=text, token_ids=token_ids, logprobs=logprobs,
                                  finish_reason=choice.get("finish_reason")))
        usage = body.get("usage")
        prompt_tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        return samples, prompt_tokens if isinstance(prompt_tokens, int) else None, str(body.get("model") or "")

    def _read_logprobs(self, choice: dict[str, Any]) -> tuple[tuple[int, ...], tuple[float, ...] | None]:
        """Token ids and logprobs of a choice; a logprob that is not a number or a token id that is not a
        non-negative integer is the server answering garbage (BackendError), never a TypeError here."""
        content = (choice.get("logprobs") or {}).get("content") if isinstance(choice.get("logprobs"), dict) else None
        logprobs = None
        ids: list[int] = []
        if isinstance(content, list) and all(isinstance(t, dict) and "logprob" in t for t in content):
            logprobs = tuple(self._logprob(t["logprob"]) for t in content)
            tokens = [t.get("token") for t in content]
            # ASCII digits only: str.isdigit() also takes "²", which int() refuses
            if tokens and all(isinstance(t, str) and t.startswith("token_id:") and t[9:].isascii()
                              and t[9:].isdigit() for t in tokens):
                ids = [int(t[9:]) for t in tokens]
            if self.logprobs_supported is None:
                self.logprobs_supported = True
        elif "logprobs" not in self._dropped and self.logprobs_supported is None:
            log.info("%s returned no logprobs; samples will have logprobs=None", self.base_url)
            self.logprobs_supported = False
        if not ids and isinstance(choice.get("token_ids"), list):
            ids = [self._token_id(t) for t in choice["token_ids"]]
        if logprobs is not None and ids and len(ids) != len(logprobs):
            log.warning("%s gave %d token ids but %d logprobs; dropping the ids", self.base_url, len(ids), len(logprobs))
            ids = []
        return tuple(ids), logprobs

    def _logprob(self, value: Any) -> float:
        try:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError
            return float(value)
        except (TypeError, OverflowError):
            raise BackendError(f"{self.base_url} answered a logprob that is not a number: {str(value)[:40]}; "
                               "the server answered garbage") from None

    def _token_id(self, value: Any) -> int:
        if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 18:
            return int(value)  # as int() read them before; a JSON integer is what vLLM sends
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise BackendError(f"{self.base_url} answered a token id that is not a non-negative integer: "
                               f"{str(value)[:40]}; the server answered garbage")
        return value

    # -- image-token check ----------------------------------------------------------------------

    async def _check_images(self, request: GenerationRequest, prompt_tokens: int) -> None:
        images = request.images()
        sizes = tuple((int(im.shape[1]), int(im.shape[0])) for im in images)
        expected = expected_image_tokens(images)
        if sizes in self._checked_sizes:
            return
        self._checked_sizes.add(sizes)
        if prompt_tokens < expected:
            self._warn_resized(sizes, expected, f"the whole prompt cost {prompt_tokens} tokens")
            return
        try:
            twin = await self._complete(to_openai_messages(request.messages, drop_images=True), request, 1,
                                        max_tokens=1)
            text_only = self._read(twin)[1]
        except BackendError as e:
            log.info("image-token check skipped: the text-only request failed: %s", e)
            return
        if text_only is None:
            return
        spent = prompt_tokens - text_only
        if not expected <= spent <= expected + EXTRA_TOKENS_PER_IMAGE * len(images):
            self._warn_resized(sizes, expected, f"the images cost {spent} tokens ({prompt_tokens} prompt tokens "
                                                f"with them, {text_only} without)")
        else:
            log.debug("image-token check passed for %s: %d tokens (expected %d)", sizes, spent, expected)

    def _warn_resized(self, sizes: tuple[tuple[int, int], ...], expected: int, measured: str) -> None:
        log.warning(
            "%s resized the images: handeye sent %s (w' x h'), which cost %d image tokens at 28x28 px each, but %s. "
            "The model's coordinates will not match the image handeye maps from. Make the server's pixel budget "
            "contain the preset's: vllm serve --mm-processor-kwargs '{\"min_pixels\": MIN, \"max_pixels\": MAX}' "
            "(or the model's preprocessor_config.json), or pass check_image_tokens=False for a model family "
            "that does not spend 28x28 px per token.",
            self.base_url, " + ".join(f"{w}x{h}" for w, h in sizes), expected, measured,
        )


def _choice_index(choice: Any) -> int:
    """A choice's ``index`` for ordering the samples (0 when it has none or it is not an integer)."""
    index = choice.get("index", 0) if isinstance(choice, dict) else 0
    return index if isinstance(index, int) and not isinstance(index, bool) else 0


def _error_text(text: str) -> str:
    """The server's error message from an OpenAI-style error body, else the start of the body."""
    import json

    try:
        data = json.loads(text)
    except ValueError:
        return text.strip()[:300] or "(empty body)"
    if isinstance(data, dict):
        err = data.get("error", data.get("detail", data.get("message")))
        if isinstance(err, dict):
            err = err.get("message", err)
        if err is not None:
            return str(err)[:500]
    return text[:300]

"""In-process generation with transformers (and peft LoRA adapters), for Qwen2/2.5-VL families.

``TransformersBackend`` loads a checkpoint directory or hub id, renders each request's chat with
the checkpoint's chat template, and runs ``model.generate`` in a worker thread. Requests that share
decoding settings (do_sample, temperature, top_p, repetition penalty, max_new_tokens, n) go into
one left-padded ``generate`` call, n samples each (``num_return_sequences``).

Per sample it returns the text (special tokens skipped), the sampled token ids up to and
including EOS (no padding), and each token's log-probability under the distribution the sampler
actually drew from: the log-softmax of generate's *processed* scores (``output_scores``), i.e. the
logits after the logits processors (repetition penalty, a constraint from
``logits_processor_factory``) and, when sampling, the temperature and top-p warpers. Greedy
tokens therefore have the maximal logprob of their step; tokens forced by
``ForceTextLogitsProcessor`` have logprob 0.

Adapters (peft LoRA) are injected into the loaded base model and switched by version without
reloading it; an adapter whose target modules or shapes do not fit the base model is refused
before anything is injected. Full-weight versions are copied into the loaded model in place (``load_weights``).

torch, transformers and peft are imported when a backend is built, not when this module is.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from policy.backends.base import Generation, GenerationRequest, Sample
from policy.errors import BackendError
from policy.formats import Backbone, get_format
from policy.presets import ModelPreset

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

__all__ = ["ForceTextLogitsProcessor", "TransformersBackend", "model_source"]

SERVES = frozenset({Backbone.QWEN_VL})
"""The architectures this backend loads (a format names its family's: ``ModelFormat.backbone``)."""

_TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "tokenizer.model")
_PATCH = 28  # patch 14 x merge 2: model-input sides are multiples of this

LogitsProcessorFactory = Callable[[GenerationRequest], Any]
"""``factory(request)`` -> a transformers LogitsProcessor (any ``(input_ids, scores) -> scores``
callable) for that request's rows, or None. Called once per request per ``generate`` call."""


class ForceTextLogitsProcessor:
    """Constrained decoding to one fixed answer: forces ``text``'s tokens, then EOS.

    Every step masks all tokens but the next one of ``text`` (encoded without special tokens),
    then EOS, whatever the model's weights say; the sampled tokens' logprobs are therefore 0. The
    first call records where the prompt ends, so use a fresh instance per ``generate`` call (a
    ``logits_processor_factory`` does). Tests use it to drive processor, generation, parsing and
    coordinate mapping end to end with a random-weight model.
    """

    def __init__(self, tokenizer: Any, text: str) -> None:
        eos = tokenizer.eos_token_id
        if eos is None:
            raise ValueError("the tokenizer has no EOS token to end the forced text with")
        self.text = text
        self.token_ids: tuple[int, ...] = (*tokenizer.encode(text, add_special_tokens=False), int(eos))
        self._start: int | None = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self._start is None:
            self._start = input_ids.shape[1]
        step = min(input_ids.shape[1] - self._start, len(self.token_ids) - 1)
        forced = scores.new_full(scores.shape, -math.inf)
        forced[:, self.token_ids[step]] = 0.0
        return forced


class _PerRequestLogitsProcessor:
    """Applies each request's own processor to that request's rows of a batched generate
    (``num_return_sequences`` repeats each prompt ``n`` times, consecutively)."""

    def __init__(self, processors: Sequence[Any | None], n: int) -> None:
        self.processors, self.n = list(processors), n

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        scores = scores.clone()
        for i, proc in enumerate(self.processors):
            if proc is not None:
                rows = slice(i * self.n, (i + 1) * self.n)
                scores[rows] = proc(input_ids[rows], scores[rows])
        return scores


class TransformersBackend:
    """A Qwen2/2.5-VL checkpoint run in this process (see the module docstring).

    ``model`` is a local directory or a hub id (resolved from the local cache when offline).
    ``dtype`` is "auto" (the checkpoint's), or a torch dtype name ("float32", "bfloat16", ...).
    ``adapter`` loads a LoRA adapter at start under ``adapter_version`` (default: its folder name).
    """

    name = "transformers"

    def __init__(self, model: str | Path, *, preset: ModelPreset, device: str = "cpu", dtype: str = "auto",
                 adapter: str | Path | None = None, adapter_version: str | None = None,
                 logits_processor_factory: LogitsProcessorFactory | None = None) -> None:
        if (backbone := get_format(preset.family).backbone) not in SERVES:
            raise BackendError(f"the transformers backend loads {', '.join(sorted(b.value for b in SERVES))} models; "
                               f"{preset.family} is {backbone.value}: serve it elsewhere (policy.backends.openai)")
        self.model_id = str(model)
        self.preset = preset
        self.device = device
        self.logits_processor_factory = logits_processor_factory
        self._lock = threading.Lock()  # one generate or adapter switch at a time
        self._peft: Any = None
        self._adapters: dict[str, Path | None] = {}  # version -> its folder (None: created in memory, for training)
        self._active: str | None = None
        self._weights_version: str | None = None  # the full-weight version copied in (load_weights)
        self._torn = ""  # why the weights are a mix of two versions after a failed load_weights ("" when they are not)
        source = model_source(model)  # a local folder, or a hub id that is cached or reachable: fails in seconds
        self.processor = load_processor(source, preset)
        self.tokenizer = self.processor.tokenizer
        self.model = _load_model(source, device, dtype)
        self.dtype = str(self.model.dtype).removeprefix("torch.")
        self._eos_ids = _eos_ids(self.model, self.tokenizer)
        if adapter is not None:
            self.load_adapter(adapter, adapter_version or Path(adapter).name)

    # -- generation ---------------------------------------------------------------------------

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        """One Generation per request, in order; requests with the same decoding settings share
        one batched ``generate`` call."""
        requests = list(requests)
        if not requests:
            return []
        return await asyncio.to_thread(self._generate_all, requests)

    def _generate_all(self, requests: list[GenerationRequest]) -> list[Generation]:
        groups: dict[tuple, list[int]] = {}
        for i, req in enumerate(requests):
            groups.setdefault(_decoding_key(req), []).append(i)
        out: list[Generation | None] = [None] * len(requests)
        with self._lock:
            if self._torn:
                raise BackendError(self._torn)
            for key, idx in groups.items():
                for i, gen in zip(idx, self._generate_group([requests[i] for i in idx], key)):
                    out[i] = gen
        return out  # type: ignore[return-value]

    def _generate_group(self, requests: list[GenerationRequest], key: tuple) -> list[Generation]:
        import torch
        from transformers import GenerationConfig, LogitsProcessorList

        do_sample, temperature, top_p, repetition_penalty, max_new_tokens, n = key
        t0 = time.perf_counter()
        inputs = self._encode(requests)
        prompt_len = inputs["input_ids"].shape[1]
        config = GenerationConfig(
            do_sample=do_sample, temperature=temperature if do_sample else None, top_p=top_p if do_sample else None,
            top_k=0 if do_sample else None, repetition_penalty=repetition_penalty, max_new_tokens=max_new_tokens,
            num_return_sequences=n, eos_token_id=list(self._eos_ids), pad_token_id=self.tokenizer.pad_token_id,
            bos_token_id=None, return_dict_in_generate=True, output_scores=True,
        )
        processors = LogitsProcessorList()
        if self.logits_processor_factory is not None:
            per_request = [self.logits_processor_factory(r) for r in requests]
            if any(p is not None for p in per_request):
                processors.append(_PerRequestLogitsProcessor(per_request, n))
        with torch.inference_mode():
            result = self.model.generate(**inputs, generation_config=config, logits_processor=processors)
        new_tokens = result.sequences[:, prompt_len:]
        logprobs = _sampled_logprobs(result.scores, new_tokens)  # (rows, steps)
        latency = time.perf_counter() - t0
        prompt_tokens = inputs["attention_mask"].sum(dim=1).tolist()

        gens = []
        for i in range(len(requests)):
            samples = []
            for row in range(i * n, (i + 1) * n):
                ids = new_tokens[row].tolist()
                end = next((k + 1 for k, t in enumerate(ids) if t in self._eos_ids), None)
                ids = ids[:end] if end is not None else ids
                samples.append(Sample(
                    text=self.tokenizer.decode(ids, skip_special_tokens=True),
                    token_ids=tuple(ids),
                    logprobs=tuple(logprobs[row, :len(ids)].tolist()),
                    finish_reason="stop" if end is not None else "length",
                ))
            gens.append(Generation(tuple(samples), int(prompt_tokens[i]), latency, self.model_id, self.adapter_version))
        return gens

    def _encode(self, requests: list[GenerationRequest]) -> dict[str, Any]:
        texts, images = [], []
        for req in requests:
            messages, imgs = split_images(req.messages)
            for img in imgs:
                self._check_image(img)
            try:
                texts.append(self.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
            except ValueError as exc:  # no chat template
                raise BackendError(f"cannot render the chat for {self.model_id}: {exc}") from exc
            images.extend(imgs)
        enc = self.processor(text=texts, images=images or None, padding=True, return_tensors="pt")
        return {k: v.to(self.model.device) for k, v in enc.items()}

    def _check_image(self, img: Any) -> None:
        shape = getattr(img, "shape", None)
        if shape is None or len(shape) != 3 or shape[2] != 3:
            raise BackendError(f"image parts must be RGB arrays of shape (h, w, 3), got {shape!r}")
        h, w = int(shape[0]), int(shape[1])
        if h % _PATCH or w % _PATCH or not self.preset.min_pixels <= h * w <= self.preset.max_pixels:
            raise BackendError(
                f"image of {w}x{h} is not a model-input size for {self.preset.model_id} (sides multiples of "
                f"{_PATCH}, {self.preset.min_pixels}..{self.preset.max_pixels} px): resize frames to "
                f"preset.input_size(frame_size) first, or the model's coordinates would not map back"
            )

    # -- adapters -----------------------------------------------------------------------------

    @property
    def adapter_version(self) -> str | None:
        """The version generations are made with: the active adapter's, else the full-weight version copied in
        (``load_weights``); None for the weights loaded at start."""
        return self._active if self._active is not None else self._weights_version

    def load_weights(self, files: Sequence[str | Path | IO[bytes]], version: str) -> int:
        """Copy full-weight ``version`` into the model in place, between generate calls (``policy.backends.swap``:
        files of another model are refused before any weight changes); returns the bytes copied."""
        from policy.backends.swap import SwapPlan

        with self._lock:
            if self._peft is not None:
                raise BackendError(f"{self.model_id} has LoRA adapters loaded: act with adapters or full weights")
            with SwapPlan(self.model, files, self.model_id) as plan:
                try:
                    copied = plan.run(version)
                except BackendError as exc:  # the model holds a mix of two versions now
                    self._weights_version, self._torn = None, str(exc)
                    raise
            self._weights_version = version
        log.info("copied full weights %s into %s (%.1f MB)", version, self.model_id, copied / 1e6)
        return copied

    def load_adapter(self, path: str | Path, version: str) -> None:
        """Load a peft LoRA adapter as ``version`` and make it active. The base model is not
        reloaded; an adapter that does not fit it is a BackendError and leaves it untouched."""
        path = Path(path)
        with self._lock:
            if version in self._adapters:
                source = self._adapters[version] or "memory: the adapter being trained"
                raise BackendError(f"adapter version {version!r} is already loaded (from {source}); "
                                   f"use a new version name")
            _check_adapter_fits(path, self.model, self.model_id)
            from peft import PeftModel

            try:
                if self._peft is None:
                    self._peft = PeftModel.from_pretrained(self.model, str(path), adapter_name=version,
                                                           is_trainable=False)
                else:
                    self._peft.load_adapter(str(path), adapter_name=version, is_trainable=False)
            except (RuntimeError, ValueError, KeyError, OSError) as exc:
                raise BackendError(f"could not load adapter {version!r} from {path} into {self.model_id}: {exc}") from exc
            self._adapters[version] = path
            self._activate(version)
        log.info("loaded adapter %s from %s", version, path)

    def use_adapter(self, version: str) -> None:
        """Switch to an already loaded adapter version."""
        with self._lock:
            if version not in self._adapters:
                raise BackendError(f"no adapter version {version!r} loaded; loaded: {sorted(self._adapters) or 'none'}")
            self._activate(version)

    def unload_adapter(self, version: str) -> None:
        """Remove a loaded adapter version from memory (not the active one: switch first)."""
        with self._lock:
            if version not in self._adapters:
                raise BackendError(f"no adapter version {version!r} loaded; loaded: {sorted(self._adapters) or 'none'}")
            if version == self._active:
                raise BackendError(f"adapter {version!r} is the active one; use_adapter(another) before unloading it")
            self._peft.delete_adapter(version)
            del self._adapters[version]

    @property
    def loaded_adapters(self) -> tuple[str, ...]:
        """The adapter versions in memory, in load order."""
        return tuple(self._adapters)

    def disable_adapter(self) -> None:
        """Generate with the base weights (adapters stay loaded for ``use_adapter``)."""
        with self._lock:
            if self._peft is not None:
                self._peft.base_model.disable_adapter_layers()
            self._active = None

    @property
    def peft_model(self) -> Any:
        """The peft model wrapping ``model`` once an adapter is loaded or created (None before that)."""
        return self._peft

    def trainable_adapter(self, name: str, lora_config: Any) -> tuple[Any, str]:
        """The peft model with a trainable active adapter, and that adapter's name, for training in place.

        When no adapter is loaded, a new one is created from ``lora_config`` (a ``peft.LoraConfig``) as ``name`` and
        made active; otherwise the active loaded one (e.g. the previous stage's, from ``adapter=...``) is used and
        ``name`` and ``lora_config`` are ignored. Only the active adapter's LoRA weights are left trainable."""
        with self._lock:
            if self._peft is None:
                from peft import get_peft_model

                self._peft = get_peft_model(self.model, lora_config, adapter_name=name)
                self._adapters[name] = None
                self._peft.base_model.enable_adapter_layers()
                self._active = name
            elif self._active is None:
                raise BackendError("the backend's adapters are disabled; call use_adapter(version) before training "
                                   "one of them")
            active = self._active
            for pname, p in self._peft.named_parameters():
                p.requires_grad_("lora_" in pname and f".{active}." in pname)
            return self._peft, active

    @property
    def eos_ids(self) -> frozenset[int]:
        """Token ids that end a generation (the model's and the tokenizer's end-of-sequence ids)."""
        return self._eos_ids

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the backend's lock: no generate and no adapter switch runs until the block ends (the learners
        update the weights under it, so a generation never sees half an update)."""
        with self._lock:
            yield

    def _activate(self, version: str) -> None:
        self._peft.base_model.enable_adapter_layers()
        self._peft.set_adapter(version)
        self._active = version

    # -- bookkeeping --------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "model": self.model_id, "device": str(self.model.device), "dtype": self.dtype,
                "adapter_version": self.adapter_version, "family": self.preset.family}

    async def close(self) -> None:
        with self._lock:
            self._peft = None
            self.model = None  # type: ignore[assignment]
        import gc

        gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:  # pragma: no cover - torch was needed to get here
            pass


# -- loading -----------------------------------------------------------------------------------

_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
"""owner/name, the form of a Hugging Face hub id."""
HUB_CHECK_TIMEOUT_S = 5.0
"""How long the one request that tells whether the hub can be reached may take."""


def model_source(model: str | Path) -> str:
    """Where to load ``model`` from: its folder, or for a hub id the id itself (the hub is reachable: transformers
    downloads or updates it) or its cached snapshot folder (the hub is offline or unreachable).

    Raises BackendError at once, instead of after the hub client's minute of retries, when the model is neither a
    folder nor a hub id, or is not cached while ``HF_HUB_OFFLINE`` is set or the hub cannot be reached."""
    path = Path(model)
    if path.is_dir():
        _check_model_dir(path)
        return str(path)
    text = str(model)
    if not _HUB_ID.fullmatch(text):
        raise BackendError(f"model {text!r} is not a folder (no such directory) nor a hub id like "
                           f"Qwen/Qwen2.5-VL-3B-Instruct")
    cached = _cached_snapshot(text)
    if _hub_offline():
        if cached is None:
            raise BackendError(f"{text} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set: download "
                               f"it where the hub can be reached (hf download {text}), or unset HF_HUB_OFFLINE")
        return cached
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    unreachable = _unreachable(endpoint)
    if unreachable is None:
        return text
    if cached is not None:
        log.warning("%s cannot be reached (%s): loading %s from the local cache", endpoint, unreachable, text)
        return cached
    raise BackendError(f"cannot download {text}: {endpoint} cannot be reached ({unreachable}). Check the network "
                       f"or the proxy (HTTPS_PROXY), set HF_ENDPOINT to a mirror, or download the model where the hub "
                       f"can be reached (hf download {text}) and pass its folder")


def _hub_offline() -> bool:
    """HF_HUB_OFFLINE (or the older TRANSFORMERS_OFFLINE) set to a true value."""
    return any(os.environ.get(k, "").strip().lower() in ("1", "true", "yes", "on")
               for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _cached_snapshot(repo_id: str) -> str | None:
    """The cached snapshot folder of ``repo_id`` (its main revision), or None when it is not cached."""
    try:
        from huggingface_hub import snapshot_download

        return str(snapshot_download(repo_id, local_files_only=True))
    except Exception:  # LocalEntryNotFoundError, a bad cache, an old huggingface_hub: all mean "not usable here"
        return None


def _unreachable(endpoint: str) -> str | None:
    """Why ``endpoint`` cannot be reached (one HEAD request, proxies from the environment honoured), or None when
    it answered at all (any HTTP status)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=HUB_CHECK_TIMEOUT_S):
            return None
    except urllib.error.HTTPError:
        return None  # it answered
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"{type(reason).__name__}: {reason}" if not isinstance(reason, str) else reason


def _check_model_dir(path: Path) -> None:
    missing = []
    if not (path / "config.json").is_file():
        missing.append("config.json (the model)")
    if not any((path / f).is_file() for f in _TOKENIZER_FILES):
        missing.append("a tokenizer (tokenizer.json or vocab.json + merges.txt)")
    if not (path / "preprocessor_config.json").is_file():
        missing.append("preprocessor_config.json (the image processor)")
    if missing:
        raise BackendError(
            f"{path} lacks {', '.join(missing)}. A fine-tuned checkpoint often saves only the weights: copy the "
            f"processor and tokenizer files (tokenizer*.json, vocab.json, merges.txt, preprocessor_config.json, "
            f"chat_template.json or .jinja) from its base model into the directory, or save them there with "
            f"processor.save_pretrained(path)"
        )


def load_processor(model: str | Path, preset: ModelPreset) -> Any:
    """The checkpoint's tokenizer and image processor, joined into a Qwen2.5-VL processor without
    the video processor (which needs torchvision), with the preset's pixel budget."""
    from transformers import AutoTokenizer

    from policy.tiny import image_only_processor, qwen_image_processor

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(model))
        image_processor = qwen_image_processor(preset.min_pixels, preset.max_pixels, model)
    except (OSError, ValueError) as exc:
        raise BackendError(f"cannot load the tokenizer / image processor of {model}: {exc}") from exc
    tokenizer.padding_side = "left"
    template = tokenizer.chat_template or _processor_chat_template(model)
    if not template:
        raise BackendError(f"{model} has no chat template (chat_template.jinja, chat_template.json or in "
                           f"tokenizer_config.json); copy it from the base model")
    return image_only_processor(image_processor, tokenizer, template)


def _processor_chat_template(model: str | Path) -> str | None:
    """The template stored for the processor (chat_template.json / .jinja), as Qwen's repos do."""
    from transformers.utils import cached_file

    for name in ("chat_template.jinja", "chat_template.json"):
        try:
            file = cached_file(str(model), name, _raise_exceptions_for_missing_entries=False)
        except OSError:
            file = None
        if file:
            text = Path(file).read_text()
            return json.loads(text)["chat_template"] if name.endswith(".json") else text
    return None


def _load_model(model: str | Path, device: str, dtype: str) -> Any:
    import torch
    from transformers import AutoModelForImageTextToText

    if dtype != "auto" and not isinstance(getattr(torch, dtype, None), torch.dtype):
        raise BackendError(f"unknown dtype {dtype!r}; use auto, float32, bfloat16 or float16")
    try:
        loaded = AutoModelForImageTextToText.from_pretrained(
            str(model), dtype="auto" if dtype == "auto" else getattr(torch, dtype))
    except (OSError, ValueError) as exc:
        raise BackendError(f"cannot load model {model}: {exc}") from exc
    try:
        loaded = loaded.to(device)
    except (RuntimeError, AssertionError) as exc:
        raise BackendError(f"cannot move {model} to device {device!r}: {exc}") from exc
    return loaded.eval()


def _eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    eos = model.generation_config.eos_token_id
    ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return frozenset(ids)


def _check_adapter_fits(path: Path, model: Any, model_id: str) -> None:
    """Refuse an adapter whose LoRA matrices name modules the base model lacks or have other
    shapes (an adapter trained for another base model), before peft injects anything."""
    config_file, weights = path / "adapter_config.json", path / "adapter_model.safetensors"
    if not config_file.is_file() or not weights.is_file():
        raise BackendError(f"{path} is not a peft adapter: it needs adapter_config.json and adapter_model.safetensors")
    config = json.loads(config_file.read_text())
    if config.get("peft_type", "LORA") != "LORA":
        raise BackendError(f"adapter {path} is {config.get('peft_type')}; only LoRA adapters are supported")
    from safetensors import safe_open

    modules = dict(model.named_modules())
    problems = []
    with safe_open(str(weights), "pt") as f:
        for key in f.keys():
            if ".lora_A." not in key and ".lora_B." not in key:
                continue
            name = key.removeprefix("base_model.model.").split(".lora_")[0]
            module = modules.get(name)
            shape = tuple(f.get_slice(key).get_shape())
            if module is None or not hasattr(module, "in_features"):
                problems.append(f"{name} (no such linear layer)")
                continue
            dim, expected = (shape[1], module.in_features) if ".lora_A." in key else (shape[0], module.out_features)
            if dim != expected:
                side = "in" if ".lora_A." in key else "out"
                problems.append(f"{name} ({side}_features {dim} in the adapter, {expected} in the model)")
    if problems:
        shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
        base = config.get("base_model_name_or_path") or "unknown"
        raise BackendError(
            f"adapter {path} does not fit {model_id}: {shown}. It was trained for base model {base}; "
            f"load an adapter trained on {model_id}"
        )


# -- helpers -----------------------------------------------------------------------------------

def _decoding_key(req: GenerationRequest) -> tuple:
    """(do_sample, temperature, top_p, repetition_penalty, max_new_tokens, n): greedy for one
    sample at temperature 0; n > 1 samples at temperature 0 are drawn at temperature 1."""
    d = req.decoding
    if req.n < 1:
        raise BackendError(f"a request needs n >= 1 samples, got {req.n}")
    if d.frequency_penalty:
        log.warning("frequency_penalty=%s is not supported by transformers generate; ignored", d.frequency_penalty)
    do_sample = not (d.temperature == 0 and req.n == 1)
    temperature = (d.temperature or 1.0) if do_sample else 0.0
    return do_sample, temperature, d.top_p, d.repetition_penalty, d.max_new_tokens, req.n


def split_images(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[Any]]:
    """Messages with image parts reduced to ``{"type": "image"}`` (what chat templates need), and
    the images in order."""
    out, images = [], []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            parts = []
            for part in content:
                if part.get("type") == "image":
                    images.append(part.get("image"))
                    parts.append({"type": "image"})
                else:
                    parts.append(part)
            m = {**m, "content": parts}
        out.append(m)
    return out, images


def _sampled_logprobs(scores: Sequence[torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
    """(rows, steps) log-softmax of each step's processed scores at the token that was chosen."""
    import torch

    cols = [torch.log_softmax(s.float(), dim=-1).gather(1, tokens[:, t:t + 1]) for t, s in enumerate(scores)]
    return torch.cat(cols, dim=1).cpu()

"""TransformersBackend with a tiny random Qwen2.5-VL built from a config (policy.tiny): the real
processor, chat template, generate, logprobs, batching, constrained decoding and LoRA adapters."""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import replace
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from devices.actions import ActionKind, Point
from policy.backends.base import GenerationRequest
from policy.backends.hf import ForceTextLogitsProcessor, TransformersBackend
from policy.errors import BackendError
from policy.formats import get_format
from policy.presets import Decoding, preset_for
from policy.tiny import build_tiny_qwen25vl

# peft calls a transformers property deprecated in 5.x
pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")

FRAME = (1280, 720)
PRESET = preset_for("tiny-qwen", fmt="qwen2.5-vl", max_pixels=256 * 28 * 28,
                    decoding=Decoding(temperature=0.0, max_new_tokens=8))
GREEDY = PRESET.decoding
SAMPLING = Decoding(temperature=1.0, top_p=0.9, max_new_tokens=8)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen25vl(tmp_path_factory.mktemp("tiny") / "model", seed=0)


@pytest.fixture(scope="module")
def backend(tiny_dir: Path) -> TransformersBackend:
    return TransformersBackend(tiny_dir, preset=PRESET)


def frame(seed: int = 0) -> np.ndarray:
    """A 1280x720 RGB frame resized to the preset's model-input size, as ModelPolicy does."""
    rng = np.random.default_rng(seed)
    full = rng.integers(0, 256, (FRAME[1], FRAME[0], 3), dtype=np.uint8)
    cv2.rectangle(full, (100, 100), (400, 300), (255, 255, 255), -1)
    return cv2.resize(full, PRESET.input_size(FRAME), interpolation=cv2.INTER_AREA)


def request(text: str = "Click the OK button.", n: int = 1, decoding: Decoding = GREEDY, seed: int = 0) -> GenerationRequest:
    messages = [
        {"role": "system", "content": [{"type": "text", "text": "You are a helpful assistant."}]},
        {"role": "user", "content": [{"type": "text", "text": text}, {"type": "image", "image": frame(seed)}]},
    ]
    return GenerationRequest(messages, n, decoding)


def run(backend: TransformersBackend, *requests: GenerationRequest):
    return asyncio.run(backend.generate(list(requests)))


def test_generate_with_real_processor_and_chat_template(backend: TransformersBackend) -> None:
    (gen,) = run(backend, request())
    w, h = PRESET.input_size(FRAME)
    assert (w, h) == (588, 336)
    image_tokens = (w // 28) * (h // 28)
    text = backend.processor.apply_chat_template(
        [{"role": "system", "content": "You are a helpful assistant."},
         {"role": "user", "content": [{"type": "text", "text": "Click the OK button."}, {"type": "image"}]}],
        tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|vision_start|><|image_pad|><|vision_end|><|im_end|>\n<|im_start|>assistant\n")
    text_tokens = len(backend.tokenizer(text)["input_ids"])
    assert gen.prompt_tokens == text_tokens - 1 + image_tokens  # the one <|image_pad|> expands per patch group
    (sample,) = gen.samples
    assert 1 <= len(sample.token_ids) <= GREEDY.max_new_tokens
    assert sample.text == backend.tokenizer.decode(list(sample.token_ids), skip_special_tokens=True)
    assert sample.finish_reason in {"stop", "length"}
    assert gen.latency_s > 0 and gen.adapter_version is None
    assert backend.describe() == {"backend": "transformers", "model": str(backend.model_id), "device": "cpu",
                                  "dtype": "float32", "adapter_version": None, "family": "qwen2.5-vl"}


def teacher_forced_logprobs(backend: TransformersBackend, req: GenerationRequest, ids: tuple[int, ...]) -> torch.Tensor:
    """(len(ids), vocab) log-softmax of a plain forward pass over prompt + ids."""
    enc = backend._encode([req])
    extra = torch.tensor([list(ids)])
    enc["input_ids"] = torch.cat([enc["input_ids"], extra], dim=1)
    enc["attention_mask"] = torch.cat([enc["attention_mask"], torch.ones_like(extra)], dim=1)
    enc["mm_token_type_ids"] = torch.cat([enc["mm_token_type_ids"], torch.zeros_like(extra)], dim=1)
    with torch.inference_mode():
        logits = backend.model(**enc).logits[0]
    start = logits.shape[0] - len(ids) - 1
    return torch.log_softmax(logits[start:start + len(ids)].float(), dim=-1)


def test_greedy_logprobs_are_the_max_and_match_a_forward_pass(backend: TransformersBackend) -> None:
    req = request()
    (sample,) = run(backend, req)[0].samples
    assert len(sample.logprobs) == len(sample.token_ids)
    ref = teacher_forced_logprobs(backend, req, sample.token_ids)
    for t, (tok, lp) in enumerate(zip(sample.token_ids, sample.logprobs)):
        assert lp <= 0
        assert lp == pytest.approx(ref[t].max().item(), abs=1e-4)
        assert lp == pytest.approx(ref[t, tok].item(), abs=1e-4)


def test_n_samples_with_logprobs(backend: TransformersBackend) -> None:
    (gen,) = run(backend, request(n=4, decoding=SAMPLING))
    assert len(gen.samples) == 4
    for s in gen.samples:
        assert len(s.token_ids) >= 1 and len(s.logprobs) == len(s.token_ids)
        assert all(lp <= 0 for lp in s.logprobs)
        assert all(np.isfinite(s.logprobs))  # top-p kept every sampled token
    assert len({s.token_ids for s in gen.samples}) > 1  # 263-token vocab, near-uniform logits: samples differ


def test_greedy_with_n_above_one_samples(backend: TransformersBackend) -> None:
    (gen,) = run(backend, request(n=3))  # temperature 0 but n=3: sampled at temperature 1
    assert len(gen.samples) == 3 and len({s.token_ids for s in gen.samples}) > 1


def test_one_batched_call_gives_the_same_greedy_texts_as_single_calls(backend: TransformersBackend) -> None:
    reqs = [request("Click OK.", seed=1), request("Open the settings menu and turn on dark mode.", seed=2),
            request("Type hello", seed=3)]
    batched = run(backend, *reqs)
    singles = [run(backend, r)[0] for r in reqs]
    for b, s in zip(batched, singles):
        assert b.samples[0].token_ids == s.samples[0].token_ids
        assert b.samples[0].text == s.samples[0].text
        assert b.samples[0].logprobs == pytest.approx(s.samples[0].logprobs, abs=1e-4)
        assert b.prompt_tokens == s.prompt_tokens  # padding is not counted
    assert len({b.latency_s for b in batched}) == 1  # one generate call


def test_forced_tool_call_parses_to_the_expected_click(tiny_dir: Path) -> None:
    x, y = 300, 150  # model pixels in the 588x336 image
    answer = ('<tool_call>\n{"name": "computer_use", "arguments": {"action": "left_click", '
              f'"coordinate": [{x}, {y}]}}}}\n</tool_call>')
    decoding = replace(GREEDY, max_new_tokens=200)
    forced, free = request("Click the white box.", decoding=decoding), request("Click OK.", seed=1, decoding=decoding)
    holder: dict[str, TransformersBackend] = {}
    backend = TransformersBackend(
        tiny_dir, preset=PRESET,
        logits_processor_factory=lambda r: ForceTextLogitsProcessor(holder["b"].tokenizer, answer) if r is forced else None)
    holder["b"] = backend
    gen, other = run(backend, forced, free)  # one batch: the constraint applies to the first request's rows only
    (sample,) = gen.samples
    assert sample.text == answer
    assert sample.token_ids[-1] == backend.tokenizer.eos_token_id and sample.finish_reason == "stop"
    assert sample.logprobs == (0.0,) * len(sample.token_ids)
    space = PRESET.space(FRAME)
    parsed = get_format("qwen2.5-vl").parse(sample.text, space, PRESET)
    (action,) = parsed.actions
    assert action.kind is ActionKind.CLICK
    assert action.point == Point(x / 588, y / 336)
    assert space.to_frame_pixels(action.point) == pytest.approx((x * 1280 / 588, y * 720 / 336))
    assert parsed.model_points == ((x, y),)
    # the unconstrained request in the same batch is untouched by the other one's constraint
    assert other.samples[0].token_ids == run(backend, free)[0].samples[0].token_ids


# -- adapters ----------------------------------------------------------------------------------

def make_adapter(base_dir: Path, out: Path, seed: int, **lora: object) -> Path:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(str(base_dir))
    config = LoraConfig(r=4, lora_alpha=16, target_modules=lora.pop("target_modules", ["q_proj", "v_proj", "down_proj"]),
                        init_lora_weights=False, task_type="CAUSAL_LM", **lora)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        peft_model = get_peft_model(model, config)
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:  # big enough to move a random model's greedy choice
                p.data.normal_(0.0, 0.5)
    peft_model.save_pretrained(str(out))
    return out


def greedy(backend: TransformersBackend):
    (gen,) = run(backend, request())
    return gen.samples[0].token_ids, gen.samples[0].logprobs, gen.adapter_version


def test_adapters_switch_without_reloading_and_disable_restores_the_base(tiny_dir: Path, tmp_path: Path) -> None:
    a1 = make_adapter(tiny_dir, tmp_path / "a1", seed=1)
    a2 = make_adapter(tiny_dir, tmp_path / "a2", seed=2)
    backend = TransformersBackend(tiny_dir, preset=PRESET)
    base_model = backend.model
    base = greedy(backend)
    backend.load_adapter(a1, "v1")
    assert backend.adapter_version == "v1"
    with_v1 = greedy(backend)
    assert with_v1[2] == "v1" and with_v1[:2] != base[:2]
    backend.load_adapter(a2, "v2")
    with_v2 = greedy(backend)
    assert with_v2[2] == "v2" and with_v2[:2] != with_v1[:2] and with_v2[:2] != base[:2]
    backend.disable_adapter()
    assert backend.adapter_version is None and backend.describe()["adapter_version"] is None
    assert greedy(backend) == base  # exactly the base weights' tokens and logprobs
    backend.use_adapter("v1")
    assert greedy(backend) == with_v1
    assert backend.model is base_model  # never reloaded
    with pytest.raises(BackendError, match="no adapter version 'v3' loaded; loaded: \\['v1', 'v2'\\]"):
        backend.use_adapter("v3")
    with pytest.raises(BackendError, match="already loaded"):
        backend.load_adapter(a2, "v1")
    with pytest.raises(BackendError, match="'v1' is the active one"):
        backend.unload_adapter("v1")
    backend.unload_adapter("v2")  # frees it; the active adapter still answers the same
    assert backend.loaded_adapters == ("v1",) and greedy(backend) == with_v1
    with pytest.raises(BackendError, match="no adapter version 'v2' loaded"):
        backend.unload_adapter("v2")


def test_adapter_given_at_start(tiny_dir: Path, tmp_path: Path) -> None:
    a1 = make_adapter(tiny_dir, tmp_path / "step-7", seed=1)
    backend = TransformersBackend(tiny_dir, preset=PRESET, adapter=str(a1))
    assert backend.adapter_version == "step-7" and greedy(backend)[2] == "step-7"


def test_adapter_for_another_base_model_is_refused(tiny_dir: Path, tmp_path: Path) -> None:
    other = build_tiny_qwen25vl(tmp_path / "other", seed=0, variant="small")
    wrong_shapes = make_adapter(other, tmp_path / "wrong-shapes", seed=1, target_modules=["q_proj"])
    wrong_modules = tmp_path / "wrong-modules"
    toy = torch.nn.Sequential()
    toy.add_module("mixer", torch.nn.Linear(8, 8))
    from peft import LoraConfig, get_peft_model

    get_peft_model(toy, LoraConfig(r=2, target_modules=["mixer"])).save_pretrained(str(wrong_modules))

    backend = TransformersBackend(tiny_dir, preset=PRESET)
    base = greedy(backend)
    with pytest.raises(BackendError, match=r"does not fit .*self_attn\.q_proj \(in_features 512 in the adapter, 64 in "
                                           r"the model\).*trained for base model .*other"):
        backend.load_adapter(wrong_shapes, "v1")
    with pytest.raises(BackendError, match=r"does not fit .*mixer \(no such linear layer\)"):
        backend.load_adapter(wrong_modules, "v1")
    with pytest.raises(BackendError, match="not a peft adapter"):
        backend.load_adapter(tmp_path, "v1")
    assert backend.adapter_version is None and greedy(backend) == base  # the base model is untouched


# -- errors and the builder ----------------------------------------------------------------------

def test_directory_without_processor_or_tokenizer_is_a_clear_error(tiny_dir: Path, tmp_path: Path) -> None:
    weights_only = tmp_path / "finetune"
    weights_only.mkdir()
    for name in ("config.json", "model.safetensors", "generation_config.json"):
        shutil.copy(tiny_dir / name, weights_only / name)
    with pytest.raises(BackendError, match=r"lacks a tokenizer .*preprocessor_config\.json .*copy the processor"):
        TransformersBackend(weights_only, preset=PRESET)


def test_a_hub_model_that_cannot_be_had_fails_in_seconds_with_what_to_do(tiny_dir: Path, tmp_path: Path,
                                                                          monkeypatch) -> None:
    """No cache and no hub: a clear error at once, not the hub client's minute of retries and doubled warnings."""
    import time

    from policy.backends.hf import model_source

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(BackendError, match=r"not in the local Hugging Face cache and HF_HUB_OFFLINE is set.*hf download"):
        TransformersBackend("InfiX-ai/InfiGUI-G1-3B", preset=PRESET)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: nothing listens
    t0 = time.monotonic()
    with pytest.raises(BackendError, match=r"cannot download InfiX-ai/InfiGUI-G1-3B: http://127.0.0.1:9 cannot be "
                                           r"reached .*HF_ENDPOINT"):
        model_source("InfiX-ai/InfiGUI-G1-3B")
    assert time.monotonic() - t0 < 10
    with pytest.raises(BackendError, match="not a folder .*nor a hub id"):
        model_source(str(tmp_path / "no" / "such" / "model"))
    assert model_source(tiny_dir) == str(tiny_dir)  # a folder is used as it is (its files checked)


def test_image_not_at_model_input_size_is_refused(backend: TransformersBackend) -> None:
    req = request()
    req.messages[1]["content"][1]["image"] = np.zeros((720, 1280, 3), np.uint8)
    with pytest.raises(BackendError, match="1280x720 is not a model-input size .*preset.input_size"):
        run(backend, req)


def test_tiny_model_is_deterministic_in_its_seed(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    a = load_file(build_tiny_qwen25vl(tmp_path / "a", seed=3) / "model.safetensors")
    b = load_file(build_tiny_qwen25vl(tmp_path / "b", seed=3) / "model.safetensors")
    c = load_file(build_tiny_qwen25vl(tmp_path / "c", seed=4) / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)
    assert 150_000 < sum(t.numel() for t in a.values()) < 250_000


def test_byte_level_tokenizer_round_trips_any_text(backend: TransformersBackend) -> None:
    text = 'Tippe „Grüße“ 你好 🙂 <tool_call>\n{"a": [1, 2]}'
    ids = backend.tokenizer.encode(text, add_special_tokens=False)
    assert backend.tokenizer.decode(ids) == text


def test_trainable_adapter_is_created_once_and_only_its_lora_weights_train(tiny_dir: Path, tmp_path: Path) -> None:
    from peft import LoraConfig

    backend = TransformersBackend(tiny_dir, preset=PRESET)
    assert backend.peft_model is None
    config = LoraConfig(r=2, lora_alpha=4, lora_dropout=0.0, target_modules=["q_proj", "v_proj"], bias="none")
    model, name = backend.trainable_adapter("learner", config)
    assert name == "learner" and model is backend.peft_model and backend.adapter_version == "learner"
    assert backend.loaded_adapters == ("learner",)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n and ".learner." in n for n in trainable)
    # a loaded adapter, once active, is the one that trains; the config is not used again
    backend.load_adapter(make_adapter(tiny_dir, tmp_path / "a1", seed=1), "v1")
    again, name = backend.trainable_adapter("other", config)
    assert again is model and name == "v1" and "other" not in backend.loaded_adapters
    assert all(".v1." in n for n, p in model.named_parameters() if p.requires_grad)
    backend.disable_adapter()
    with pytest.raises(BackendError, match="adapters are disabled"):
        backend.trainable_adapter("learner", config)


def test_lock_holds_generation_back(backend: TransformersBackend) -> None:
    import threading

    done = threading.Event()
    worker = threading.Thread(target=lambda: (run(backend, request()), done.set()))
    with backend.lock():
        worker.start()
        assert not done.wait(0.5)  # generate waits for the lock
    worker.join(timeout=60)
    assert done.is_set()

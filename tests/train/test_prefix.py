"""The shared-prefix update (``train.prefix``) equals the unshared one: per-token log-probs and every parameter's
gradient, in float64 on the tiny random Qwen2.5-VL, to 1e-5. LoRA and full fine-tuning, answers of different
lengths, PPO epochs x mini-batches (the recomputed old log-probs), the KL's reference pass, an episode-level group
whose steps have different prompts, a text-only prompt, and an answer holding a vision placeholder. Two processes
under DDP: ``tests/train/test_ddp.py``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from policy.backends.hf import TransformersBackend
from policy.presets import Decoding, preset_for
from policy.tiny import build_tiny_qwen25vl
from train.learner import LORA_TARGETS, Learner
from train.config import RLConfig, TrainModelConfig
from train.prefix import encode_shared, prefix_logprobs, prompt_groups
from train.samples import TrainSample

pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")

PRESET = preset_for("tiny-qwen", fmt="qwen2.5-vl", min_pixels=4 * 28 * 28, max_pixels=16 * 28 * 28,
                    decoding=Decoding(temperature=0.0, max_new_tokens=8))
TOL = dict(atol=1e-5, rtol=1e-5)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen25vl(tmp_path_factory.mktemp("tiny") / "model", seed=0)


@pytest.fixture
def float64():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # LoRA layers are created in the default dtype
    yield
    torch.set_default_dtype(previous)


def backend64(tiny_dir: Path) -> TransformersBackend:
    backend = TransformersBackend(tiny_dir, preset=PRESET, dtype="float64")
    assert backend.model.dtype == torch.float64
    return backend


def _messages(text: str, image: bool = True) -> list[dict]:
    return [{"role": "user", "content": [*([{"type": "image"}] if image else []), {"type": "text", "text": text}]}]


def batch(image_pad: int) -> list[list[TrainSample]]:
    """Three step-level groups of 4 answers of 2 to 8 tokens (one answer feeds an ``<|image_pad|>``), one
    text-only group, and one episode-level group whose two episodes' steps have different prompts."""
    groups = []
    for g in range(3):
        image = np.random.default_rng(g).integers(0, 256, (56, 56, 3), dtype=np.uint8)
        group = []
        for k in range(4):
            ids = [int(t) for t in np.random.default_rng(100 * g + k).integers(40, 120, 2 + 2 * k)]
            if g == 1 and k == 2:
                ids[1] = image_pad
            logprobs = tuple(float(-x) for x in np.random.default_rng(7 + k).random(len(ids)))
            group.append(TrainSample(_messages(f"Task {g}."), image, (56, 56), (56, 56), "x", tuple(ids), logprobs,
                                     float((g + k) % 3), group_id=g))
        groups.append(group)
    groups.append([TrainSample(_messages("Say hi.", image=False), None, (1, 1), (1, 1), "x", ids, None, r, group_id=3)
                   for ids, r in (((104, 105), 1.0), ((111,), 0.0), ((104, 101, 121), 0.5))])
    screens = [np.random.default_rng(50 + s).integers(0, 256, (56, 56, 3), dtype=np.uint8) for s in range(2)]
    groups.append([TrainSample(_messages(f"Step {s}."), screens[s], (56, 56), (56, 56), "x", (60 + s, 61, 62 + e),
                               None, float(e), group_id=4, origin={"episode": f"e{e}"})
                   for e in range(2) for s in range(2)])
    return groups


def step_gradients(tiny_dir: Path, shared: bool, **kw) -> tuple[list[dict[str, torch.Tensor]], dict[str, float]]:
    """Every optimizer step's gradients (by parameter name) and the metrics of one ``Learner.step``."""
    torch.manual_seed(0)
    backend = backend64(tiny_dir)
    model = {k: kw.pop(k) for k in ("finetune", "freeze_vision", "lora_targets") if k in kw}
    algo = kw.pop("algo", "aepo")
    learner = Learner(backend, RLConfig(shared_prefix=shared, **kw), TrainModelConfig(**model), algo=algo)
    assert all(p.dtype == torch.float64 for p in learner.params)
    names = {id(p): n for n, p in learner.peft_model.named_parameters()}
    grads: list[dict[str, torch.Tensor]] = []
    learner.optimizer.register_step_pre_hook(lambda opt, args, kwargs: grads.append(
        {names[id(p)]: p.grad.clone() for group in opt.param_groups for p in group["params"] if p.grad is not None}))
    metrics = learner.step(batch(backend.model.config.image_token_id))
    return grads, metrics


CASES = {
    "lora, grpo (KL: adapter off)": dict(algo="grpo", lora_targets=(*LORA_TARGETS, "lm_head")),
    "lora, aepo, 2 epochs x 2 mini-batches": dict(algo="aepo", lora_targets=(*LORA_TARGETS, "lm_head"), lr=1e-2,
                                                  ppo_epochs=2, minibatches=2),
    "full, grpo (KL: frozen copy), 2 x 2": dict(algo="grpo", finetune="full", lr=1e-3, ppo_epochs=2, minibatches=2),
    "full, frozen vision, grpo, 1 x 2": dict(algo="grpo", finetune="full", freeze_vision=True, lr=1e-3,
                                             minibatches=2),
}


@pytest.mark.parametrize("case", CASES)
def test_shared_prefix_gradients_equal_the_unshared(tiny_dir, float64, case):
    kw = CASES[case]
    shared, m_shared = step_gradients(tiny_dir, True, **kw)
    unshared, m_unshared = step_gradients(tiny_dir, False, **kw)
    steps = kw.get("ppo_epochs", 1) * kw.get("minibatches", 1)
    assert len(shared) == len(unshared) == steps
    for a, b in zip(shared, unshared):
        assert sorted(a) == sorted(b) and len(a) > 0
        for name in b:
            torch.testing.assert_close(a[name], b[name], **TOL, msg=lambda m, n=name: f"{case}: {n}: {m}")
    assert any(float(g.abs().max()) > 1e-6 for g in shared[-1].values())  # the update did something
    for key in ("train/loss", "train/pg_loss", "train/kl", "train/approx_kl", "train/clipfrac", "train/grad_norm"):
        assert m_shared[key] == pytest.approx(m_unshared[key], abs=1e-7), key
    if kw["algo"] == "grpo":
        assert m_shared["train/kl"] > 0 or steps == 1  # the reference pass ran (KL moves after the first step)


@pytest.mark.parametrize("finetune", ["lora", "full"])
def test_shared_prefix_logprobs_equal_the_full_sequences(tiny_dir, float64, finetune):
    backend = backend64(tiny_dir)
    learner = Learner(backend, RLConfig(lr=1e-2), TrainModelConfig(finetune=finetune, lora_targets=(*LORA_TARGETS, "lm_head")))
    samples = [s for g in batch(backend.model.config.image_token_id) for s in g]
    units = prompt_groups(samples)
    assert [len(u) for u in units] == [4, 4, 4, 3, 2, 2]  # the episode group's steps split by prompt
    for unit in units:
        shared = encode_shared(backend, [samples[i] for i in unit])
        with torch.no_grad():
            lp = prefix_logprobs(learner.peft_model, shared, hf_model=backend.model)
            for j, i in enumerate(unit):
                full = learner.response_logprobs(samples[i])
                assert lp.dtype == full.dtype == torch.float64
                torch.testing.assert_close(lp[j, :shared.lengths[j]], full[0], **TOL)


def test_a_frozen_vision_tower_encodes_each_image_once_per_update(tiny_dir):
    calls = {"shared": 0, "unshared": 0}
    for path in calls:
        backend = TransformersBackend(tiny_dir, preset=PRESET)
        learner = Learner(backend, RLConfig(ppo_epochs=2, minibatches=2, shared_prefix=path == "shared"), TrainModelConfig(lora_targets=(*LORA_TARGETS, "lm_head")), algo="grpo")
        backend.model.model.visual.register_forward_hook(lambda *a, p=path: calls.__setitem__(p, calls[p] + 1))
        learner.step(batch(backend.model.config.image_token_id))
    # 5 distinct images. Unshared: 16 samples with an image x (old pass + 2 epochs x (policy + reference)) = 80.
    assert calls == {"shared": 5, "unshared": 80}

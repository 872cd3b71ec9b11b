"""TransformersBackend.load_weights: full weights copied into the loaded model in place (no second model), files of
another model refused before any weight changes with the differences named, and a copy that fails half-way leaves a
backend that refuses to generate instead of acting with a mix of two versions."""

from __future__ import annotations

import asyncio
import io

import pytest
import torch
from safetensors.torch import save_file

from policy.backends.base import GenerationRequest
from policy.backends.swap import SwapPlan, copy_in, read_header, unique_state
from policy.errors import BackendError
from policy.presets import Decoding, preset_for

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from policy.tiny import build_tiny_qwen25vl

    return build_tiny_qwen25vl(tmp_path_factory.mktemp("swap") / "model")


def backend(path):
    from policy.backends.hf import TransformersBackend

    return TransformersBackend(path, preset=preset_for("tiny-qwen", "infigui-g1", min_pixels=4 * 28 * 28,
                                                        max_pixels=16 * 28 * 28))


def shifted(model, by: float) -> dict[str, torch.Tensor]:
    return {n: (t + by if t.is_floating_point() else t).contiguous() for n, t in unique_state(model).items()}


def test_weights_are_copied_in_place_through_a_small_staging_buffer(tiny, tmp_path):
    b = backend(tiny)
    model, pointers = b.model, {n: t.data_ptr() for n, t in unique_state(b.model).items()}
    new = shifted(b.model, 0.25)
    save_file(new, str(tmp_path / "model.safetensors"))
    copied = b.load_weights([tmp_path / "model.safetensors"], "learner@3")
    assert b.model is model and b.adapter_version == "learner@3"
    state = unique_state(b.model)
    assert {n: t.data_ptr() for n, t in state.items()} == pointers  # the same tensors, new values
    assert all(torch.equal(state[n], t) for n, t in new.items())
    assert copied == sum(t.numel() * t.element_size() for t in new.values())
    # 40-byte chunks: read straight into contiguous tensors, through the staging buffer into the others (a GPU's)
    with open(tmp_path / "model.safetensors", "rb") as f:
        targets = {n: torch.zeros_like(t) for n, t in new.items()}
        odd = {n: torch.zeros(t.shape[::-1], dtype=t.dtype).t() for n, t in new.items() if t.dim() == 2}
        targets.update(odd)
        copy_in(targets, [(f, read_header(f, "model.safetensors"))], staging_bytes=40)
    assert odd and not any(t.is_contiguous() for t in odd.values())
    assert all(torch.equal(targets[n], t) for n, t in new.items())


def test_a_file_of_another_model_is_refused_naming_what_differs(tiny, tmp_path):
    b = backend(tiny)
    before = {n: t.clone() for n, t in unique_state(b.model).items()}
    new = shifted(b.model, 1.0)
    name = "model.language_model.embed_tokens.weight"
    wrong = {**new, name: torch.zeros(new[name].shape[0] + 5, new[name].shape[1])}
    dropped = sorted(new)[0]
    del wrong[dropped]
    wrong["model.extra.weight"] = torch.zeros(2)
    wrong["model.language_model.norm.weight"] = wrong["model.language_model.norm.weight"].to(torch.bfloat16)
    save_file(wrong, str(tmp_path / "other.safetensors"))
    with pytest.raises(BackendError) as info:
        b.load_weights([tmp_path / "other.safetensors"], "learner@1")
    message = str(info.value)
    assert f"do not fit {tiny}" in message and dropped in message and "model.extra.weight" in message
    assert f"{name} is float32 [{new[name].shape[0] + 5}, {new[name].shape[1]}] in the files, float32 " \
           f"{list(new[name].shape)} in the model" in message
    assert "model.language_model.norm.weight is bfloat16" in message and "another model" in message
    assert all(torch.equal(t, before[n]) for n, t in unique_state(b.model).items())  # nothing was touched
    assert b.adapter_version is None
    (tmp_path / "junk.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(BackendError, match="not a safetensors file"):
        b.load_weights([tmp_path / "junk.safetensors"], "learner@1")


class FailingFile(io.BytesIO):
    """Reads its header, then fails in the middle of the weights (a disk error half-way through a swap)."""

    def __init__(self, data: bytes, fail_at: int) -> None:
        super().__init__(data)
        self.fail_at = fail_at

    def readinto(self, buffer) -> int:
        if self.tell() >= self.fail_at:
            raise OSError(5, "Input/output error")
        return super().readinto(buffer)


def test_a_swap_that_fails_half_way_stops_the_backend_from_generating(tiny, tmp_path):
    b = backend(tiny)
    save_file(shifted(b.model, 0.5), str(tmp_path / "model.safetensors"))
    data = (tmp_path / "model.safetensors").read_bytes()
    with SwapPlan(b.model, [io.BytesIO(data)], str(tiny)) as plan:  # the plan itself accepts the file
        assert plan.nbytes > 0
    with pytest.raises(BackendError, match="half-way.*mix of two versions"):
        b.load_weights([FailingFile(data, fail_at=len(data) // 2)], "learner@2")
    assert b.adapter_version is None
    request = GenerationRequest([{"role": "user", "content": "hi"}], decoding=Decoding(max_new_tokens=2))
    with pytest.raises(BackendError, match="restart this process"):
        asyncio.run(b.generate([request]))

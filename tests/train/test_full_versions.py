"""Full-weight versions in the adapter store: a learner that fine-tunes every weight publishes its weights (model
dtype, safetensors named by its state_dict, the same manifest and sha256 as adapters, ``kind: full``), the store keeps
only the last two, a version loads into another backend in place after its bytes check out, a corrupt one is
refused with the backend left as it was, and an adapter's announcement is the same as before kinds existed."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from policy.backends.swap import unique_state
from train.adapters import (FULL_VERSIONS_KEPT, AdapterChecksumError, AdapterRef, AdapterStore, VersionKind,
                            load_verified)
from train.full_versions import write_full_weights

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from policy.tiny import build_tiny_qwen25vl

    return build_tiny_qwen25vl(tmp_path_factory.mktemp("full") / "model")


def backend(path, dtype: str = "auto"):
    from policy.backends.hf import TransformersBackend
    from policy.presets import preset_for

    return TransformersBackend(path, preset=preset_for("tiny-qwen", "infigui-g1", min_pixels=4 * 28 * 28,
                                                        max_pixels=16 * 28 * 28), dtype=dtype)


def full_learner(b) -> SimpleNamespace:
    """What ``AdapterStore.publish`` reads of a learner that fine-tunes every weight."""
    learner = SimpleNamespace(finetune="full", backend=b, steps=0)
    learner.adapter_version = "learner@0"
    return learner


def step(learner, by: float) -> None:
    """As an update would: every weight changes, the count goes up."""
    with torch.no_grad():
        for p in learner.backend.model.parameters():
            p.add_(by)
    learner.steps += 1
    learner.adapter_version = f"learner@{learner.steps}"


def same(a, b) -> bool:
    sa, sb = unique_state(a), unique_state(b)
    return sa.keys() == sb.keys() and all(torch.equal(sa[n], sb[n]) for n in sa)


def test_full_versions_are_published_checked_and_copied_in_place(tiny, tmp_path):
    learner, actors = full_learner(backend(tiny, "bfloat16")), backend(tiny, "bfloat16")
    store = AdapterStore(tmp_path / "adapters", keep=4)
    step(learner, 0.5)
    v1 = store.publish(learner)
    assert v1.kind is VersionKind.FULL and sorted(v1.files) == ["config.json", "model.safetensors"]
    manifest = json.loads((Path(v1.path) / "manifest.json").read_text())
    assert manifest["kind"] == "full" and manifest["files"] == v1.files
    with open(Path(v1.path) / "model.safetensors", "rb") as f:  # written in the model's dtype
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    assert {v["dtype"] for k, v in header.items() if k != "__metadata__"} == {"BF16"}
    assert AdapterRef.from_json(json.loads(json.dumps(v1.to_json()))) == v1  # the announcement says its kind
    assert store.latest() == v1
    model = actors.model
    assert not same(actors.model, learner.backend.model)
    times = load_verified(actors, v1, root=store.root)
    assert actors.model is model and same(actors.model, learner.backend.model)  # in place, no second model
    assert actors.adapter_version == "learner@1" and times.verify_s >= 0 and times.load_s > 0
    step(learner, 0.25)
    v2 = store.publish(learner)
    weights = Path(v2.path) / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4] + b"\x01\x02\x03\x04")
    with pytest.raises(AdapterChecksumError, match="full-weight version learner@2.*corrupt"):
        load_verified(actors, v2, root=store.root)
    assert actors.adapter_version == "learner@1"  # still the last good version, its weights untouched
    step(learner, 0.25)
    store.publish(learner)
    step(learner, 0.25)
    store.publish(learner)
    assert [p.name for p in store.versions()] == ["v000003", "v000004"]  # full weights: the last two only
    assert FULL_VERSIONS_KEPT == 2 and store.keep == 4


def test_an_adapters_announcement_is_unchanged_by_kinds(tmp_path):
    ref = AdapterRef("learner@1", 1, str(tmp_path / "v000001"), "ab" * 32, {"a": "cd" * 32})
    assert ref.kind is VersionKind.ADAPTER and "kind" not in ref.to_json()  # same bytes, same signature as before
    assert AdapterRef.from_json(ref.to_json()).kind is VersionKind.ADAPTER


def test_a_large_model_is_written_in_shards_that_from_pretrained_reads_too(tiny, tmp_path):
    from transformers import AutoModelForImageTextToText

    b = backend(tiny)
    folder = write_full_weights(b.model, tmp_path / "weights", shard_bytes=200_000)
    shards = sorted(p.name for p in folder.glob("*.safetensors"))
    assert len(shards) > 1 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(unique_state(b.model))
    other = backend(tiny)
    with torch.no_grad():
        for p in other.model.parameters():
            p.zero_()
    other.load_weights(sorted(folder.glob("*.safetensors")), "learner@7")
    assert same(other.model, b.model)
    fresh = AutoModelForImageTextToText.from_pretrained(str(folder))  # the slow path the benchmark compares with
    assert same(fresh, b.model)

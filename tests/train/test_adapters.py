"""train.adapters: versions published atomically with their sha256, checked before any load; a corrupt or tampered
version is refused and never loaded, and a real backend switches versions without reloading its base model."""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from train.adapters import (AdapterChecksumError, AdapterError, AdapterPathError, AdapterRef, AdapterStore,
                            adapter_digest, load_verified, verify_adapter)
from train.config import TrainModelConfig

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def fake_adapter(folder: Path, weights: bytes = b"\x00weights\x01" * 100) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adapter_config.json").write_text('{"peft_type": "LORA", "r": 4}')
    (folder / "adapter_model.safetensors").write_bytes(weights)
    return folder


class RecordingBackend:
    """Stands in for a TransformersBackend: records what it was asked to load."""

    def __init__(self) -> None:
        self.loaded: list[tuple[str, dict[str, bytes]]] = []

    def load_adapter(self, path, version) -> None:
        self.loaded.append((version, {p.name: p.read_bytes() for p in Path(path).iterdir()}))


def test_publish_writes_a_whole_folder_with_its_manifest(tmp_path):
    store = AdapterStore(tmp_path / "adapters", keep=2)
    ref = store.publish_folder(fake_adapter(tmp_path / "src"), "learner@0", 0)
    folder = Path(ref.path)
    assert folder.name == "v000000" and sorted(p.name for p in folder.iterdir()) == [
        "adapter_config.json", "adapter_model.safetensors", "manifest.json"]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["sha256"] == ref.sha256 and manifest["version"] == "learner@0" and manifest["written_at"] > 0
    for name, sha in ref.files.items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == sha
    assert adapter_digest(folder) == (ref.sha256, ref.files)
    assert not [p for p in (tmp_path / "adapters").iterdir() if p.name.startswith(".")]  # no temporary left
    assert verify_adapter(ref, root=store.root) == folder.resolve()
    assert store.latest() == ref
    # the newest `keep` versions stay
    for step in (1, 2, 3):
        store.publish_folder(fake_adapter(tmp_path / f"src{step}", bytes([step]) * 50), f"learner@{step}", step)
    assert [p.name for p in store.versions()] == ["v000002", "v000003"]
    assert store.latest().version == "learner@3"
    assert AdapterRef.from_json(json.loads(json.dumps(ref.to_json()))) == ref


def test_a_corrupt_file_is_detected_and_never_loaded(tmp_path):
    store = AdapterStore(tmp_path / "adapters")
    ref = store.publish_folder(fake_adapter(tmp_path / "src"), "learner@1", 1)
    weights = Path(ref.path) / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[10] ^= 0xFF  # one flipped byte
    weights.write_bytes(bytes(data))
    backend = RecordingBackend()
    with pytest.raises(AdapterChecksumError, match="adapter_model.safetensors has sha256"):
        verify_adapter(ref, root=store.root)
    with pytest.raises(AdapterChecksumError, match="not loading it"):
        load_verified(backend, ref, root=store.root)
    assert backend.loaded == []
    weights.write_bytes(bytes(data[:50]))  # truncated
    with pytest.raises(AdapterChecksumError):
        load_verified(backend, ref, root=store.root)
    weights.unlink()  # missing
    with pytest.raises(AdapterChecksumError, match="cannot be read"):
        load_verified(backend, ref, root=store.root)
    assert backend.loaded == []


def test_a_tampered_announcement_or_an_unannounced_file_is_refused(tmp_path):
    store = AdapterStore(tmp_path / "adapters")
    ref = store.publish_folder(fake_adapter(tmp_path / "src"), "learner@1", 1)
    weights = Path(ref.path) / "adapter_model.safetensors"
    # an attacker rewrites the weights and the file hash in the announcement, but not the digest
    weights.write_bytes(b"other weights")
    forged = AdapterRef(ref.version, ref.step, ref.path, ref.sha256,
                        {**ref.files, "adapter_model.safetensors": hashlib.sha256(b"other weights").hexdigest()})
    backend = RecordingBackend()
    with pytest.raises(AdapterChecksumError, match="announcement is corrupt"):
        load_verified(backend, forged, root=store.root)
    with pytest.raises(AdapterChecksumError, match="announcement is corrupt"):
        verify_adapter(forged, root=store.root)
    ref2 = store.publish_folder(fake_adapter(tmp_path / "src2"), "learner@2", 2)
    (Path(ref2.path) / "extra.bin").write_bytes(b"?")
    with pytest.raises(AdapterChecksumError, match="does not list"):
        verify_adapter(ref2, root=store.root)
    assert backend.loaded == []
    with pytest.raises(AdapterError, match="format"):
        AdapterRef.from_json({"format": 7})
    with pytest.raises(AdapterError, match="malformed"):
        AdapterRef.from_json({"format": 1, "version": "v"})


def test_the_loader_reads_the_bytes_it_checked(tmp_path):
    store = AdapterStore(tmp_path / "adapters")
    ref = store.publish_folder(fake_adapter(tmp_path / "src"), "learner@1", 1)
    backend = RecordingBackend()
    times = load_verified(backend, ref, root=store.root, unload_others=False)
    (version, files), = backend.loaded
    assert version == "learner@1" and times.verify_s >= 0 and times.load_s >= 0
    assert {n: hashlib.sha256(b).hexdigest() for n, b in files.items()} == ref.files  # the manifest is not loaded


def test_a_real_backend_switches_versions_and_refuses_a_corrupt_one(tmp_path):
    import torch

    from policy.backends.hf import TransformersBackend
    from policy.presets import preset_for
    from policy.tiny import build_tiny_qwen25vl
    from train.learner import Learner

    model = build_tiny_qwen25vl(tmp_path / "model")
    preset = preset_for("tiny-qwen", "infigui-g1", min_pixels=4 * 28 * 28, max_pixels=16 * 28 * 28)
    learner = Learner(TransformersBackend(model, preset=preset), model=TrainModelConfig(lora_targets=("q_proj", "v_proj")))
    actors = TransformersBackend(model, preset=preset)
    base = actors.model
    store = AdapterStore(tmp_path / "adapters")
    v0 = store.publish(learner)
    load_verified(actors, v0, root=store.root)
    assert actors.adapter_version == "learner@0"
    learner.steps = 1  # as after an update; the weights themselves do not matter here
    with torch.no_grad():
        for n, p in learner.peft_model.named_parameters():
            if "lora_B" in n:
                p.add_(0.01)
    v1 = store.publish(learner)
    weights = Path(v1.path) / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8] + b"\x00" * 8)
    with pytest.raises(AdapterChecksumError):
        load_verified(actors, v1, root=store.root)
    assert actors.adapter_version == "learner@0"  # still acting with the last good version
    learner.steps = 2
    v2 = store.publish(learner)
    load_verified(actors, v2, root=store.root)
    assert actors.adapter_version == "learner@2"
    assert sorted(actors.loaded_adapters) == ["learner@2"]  # the old version was unloaded
    assert actors.model is base  # the base model was never reloaded


def _announce(folder: Path, files: dict[str, bytes], version: str = "learner@9") -> AdapterRef:
    """An announcement of ``files`` (name -> bytes) in ``folder``, with hashes that add up (a forged but consistent
    one: the hashes alone cannot catch it)."""
    hashes = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    digest = hashlib.sha256("".join(f"{n} {hashes[n]}\n" for n in sorted(hashes)).encode()).hexdigest()
    return AdapterRef(version, 9, str(folder), digest, hashes)


@pytest.mark.parametrize("name, why", [("../escape.bin", "path separator"), ("..", r"relative step"),
                                       ("/tmp/abs.bin", "absolute path"), ("a\0b", "NUL"), ("", "empty"),
                                       ("sub\\x.bin", "path separator")])
def test_an_announced_file_name_that_is_not_a_plain_name_is_refused_before_any_write(tmp_path, name, why):
    store = AdapterStore(tmp_path / "store" / "adapters")
    folder = fake_adapter(store.folder(9))
    ref = _announce(folder, {"adapter_config.json": (folder / "adapter_config.json").read_bytes(), name: b"payload"})
    backend = RecordingBackend()
    with pytest.raises(AdapterPathError, match=rf"file name {re.escape(repr(name))} .*{why}"):
        load_verified(backend, ref, root=store.root)
    with pytest.raises(AdapterPathError, match="plain names"):
        verify_adapter(ref, root=store.root)
    assert backend.loaded == []
    assert not (Path(tempfile.gettempdir()) / "escape.bin").exists()


def test_a_dotdot_name_writes_nothing_next_to_the_private_copy(tmp_path, monkeypatch):
    """The load copies the checked bytes to a private temporary folder: with ``../x`` the loader once wrote x next
    to that folder (the hashes matched: x was read from next to the version folder). The temporary folder lives
    under a folder of the test's, which must stay empty."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    store = AdapterStore(tmp_path / "adapters")
    folder = store.folder(9)
    folder.mkdir()
    (tmp_path / "adapters" / "owned.bin").write_bytes(b"payload")  # what folder/../owned.bin reads
    ref = _announce(folder, {"../owned.bin": b"payload"})
    with pytest.raises(AdapterPathError):
        load_verified(RecordingBackend(), ref, root=store.root)
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_folder_outside_the_store_or_a_symlink_out_of_it_is_refused(tmp_path):
    store = AdapterStore(tmp_path / "adapters")
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"not an adapter")
    outside = fake_adapter(tmp_path / "elsewhere")
    ref = _announce(outside, {p.name: p.read_bytes() for p in outside.iterdir()})
    for call in (lambda: verify_adapter(ref, root=store.root), lambda: load_verified(RecordingBackend(), ref,
                                                                                     root=store.root)):
        with pytest.raises(AdapterPathError, match="not inside the adapter store"):
            call()
    # a path that climbs out of the store, and the store's root itself, are refused the same way
    for path in (store.root / ".." / "elsewhere", store.root):
        with pytest.raises(AdapterPathError, match="not inside the adapter store"):
            verify_adapter(replace(ref, path=str(path)), root=store.root)
    # a file inside the version folder that is a symlink to a file outside it: never hashed, never loaded
    folder = fake_adapter(store.folder(3))
    (folder / "adapter_model.safetensors").unlink()
    (folder / "adapter_model.safetensors").symlink_to(secret)
    linked = _announce(folder, {"adapter_config.json": (folder / "adapter_config.json").read_bytes(),
                                "adapter_model.safetensors": secret.read_bytes()})
    backend = RecordingBackend()
    with pytest.raises(AdapterPathError, match="outside the adapter folder"):
        load_verified(backend, linked, root=store.root)
    with pytest.raises(AdapterPathError, match="symlink"):
        verify_adapter(linked, root=store.root)
    assert backend.loaded == []
    # a symlink to another file of the same folder stays inside it: allowed
    (folder / "adapter_model.safetensors").unlink()
    (folder / "weights.bin").write_bytes(b"w")
    (folder / "adapter_model.safetensors").symlink_to(folder / "weights.bin")
    ok = _announce(folder, {"adapter_config.json": (folder / "adapter_config.json").read_bytes(),
                            "adapter_model.safetensors": b"w", "weights.bin": b"w"})
    load_verified(backend, ok, root=store.root, unload_others=False)
    assert [v for v, _ in backend.loaded] == ["learner@9"]

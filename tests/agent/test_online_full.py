"""Online sessions with full fine-tuning (model.finetune=full): the learner publishes every version as full weights
and the actors' model takes each one in place between steps; a corrupt version is refused, counted, and the actors
keep acting with the version they have; a resumed run whose checkpoint is of another model is refused, naming both
models, before any model, actor or browser starts."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import torch

from agent.online import AdapterFollower, OnlineConfig, OnlineSession, VersionClock, config_overrides
from agent.online.settings import online_json
from envs.trajectory import iter_episodes
from policy.backends.swap import unique_state
from tests.agent.test_online import ForceFirstAnswer, chromium_children, config, until, versions
from train.errors import CheckpointError
from train.config import TrainModelConfig

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def full_config(run: Path, *more: str):
    return config(run, 'model.finetune="full"', "rl.lr=0.001", "rl.group_size=2", "rl.batch_prompts=1",
                  "rl.max_new_tokens=32", *more)  # the forced answer is 26 tokens with EOS


def version_tensors(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    out: dict[str, torch.Tensor] = {}
    for f in sorted(folder.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


def test_actors_act_with_each_published_full_weight_version(tmp_path):
    from transformers import AutoModelForImageTextToText

    run = tmp_path / "run"
    holder: list[OnlineSession] = []
    session = OnlineSession(full_config(run, "train.steps=3", "checkpoint.every=0"),
                            OnlineConfig(env="generated/click", actors=1, progress_every_s=1000.0),
                            logits_processor_factory=lambda req: ForceFirstAnswer(holder[0].backend.tokenizer))
    holder.append(session)
    seen: dict = {}

    async def scenario():
        task = asyncio.create_task(session.run())
        await until(lambda: session.follower is not None and session.follower.current is not None
                    and session.follower.current.step >= 2, timeout=120)
        with session.backend.lock():  # no swap meanwhile: the actors' weights against the version they say they use
            current = session.follower.current
            seen["ref"], seen["label"] = current, session.backend.adapter_version
            seen["model"] = {n: t.clone() for n, t in unique_state(session.backend.model).items()}
            seen["files"] = version_tensors(Path(current.path))
        return await task

    result = asyncio.run(scenario())
    assert result.updates == 3 and result.refused_adapters == 0
    ref, actors = seen["ref"], seen["model"]
    assert ref.kind.value == "full" and seen["label"] == ref.version == f"learner@{ref.step}"
    assert actors.keys() == seen["files"].keys()
    assert all(torch.equal(actors[n], t) for n, t in seen["files"].items())  # exactly the published version
    start = AutoModelForImageTextToText.from_pretrained(str(run / "tiny-model")).state_dict()
    assert any(not torch.equal(actors[n], start[n]) for n in actors)  # and not the weights it started from
    assert [p.name for p in sorted((run / "adapters").glob("v*"))] == ["v000002", "v000003"]  # the last two
    steps = [v for ep in iter_episodes(run) for v in versions(ep)]
    assert steps == sorted(steps) and steps[-1] >= 1  # every step records the version that decided it
    assert not chromium_children()


def test_a_corrupt_full_weight_version_is_refused_and_the_actors_keep_theirs(tmp_path):
    from policy.backends.base import GenerationRequest
    from policy.backends.hf import TransformersBackend
    from policy.presets import Decoding, preset_for
    from policy.tiny import build_tiny_qwen25vl
    from train.adapters import AdapterStore
    from train.transport import InProcessTransport

    model = build_tiny_qwen25vl(tmp_path / "model")
    preset = preset_for("tiny-qwen", "infigui-g1", min_pixels=4 * 28 * 28, max_pixels=16 * 28 * 28)
    learner_backend, actors = TransformersBackend(model, preset=preset), TransformersBackend(model, preset=preset)

    class Learner:  # what the store reads of a learner that fine-tunes every weight
        finetune, backend, steps, adapter_version = "full", learner_backend, 1, "learner@1"

    store, transport = AdapterStore(tmp_path / "run" / "adapters"), InProcessTransport()
    follower = AdapterFollower(actors, transport, VersionClock(tmp_path / "adapters.jsonl"), root=store.root)
    request = GenerationRequest([{"role": "user", "content": "hi"}], decoding=Decoding(max_new_tokens=2))

    async def main():
        with torch.no_grad():
            for p in learner_backend.model.parameters():
                p.add_(0.5)
        transport.announce(store.publish(Learner))
        await follower.sync()
        v1 = {n: t.clone() for n, t in unique_state(actors.model).items()}
        with torch.no_grad():
            for p in learner_backend.model.parameters():
                p.add_(0.5)
        Learner.steps, Learner.adapter_version = 2, "learner@2"
        bad = store.publish(Learner)
        weights = Path(bad.path) / "model.safetensors"
        data = bytearray(weights.read_bytes())
        data[len(data) // 2] ^= 0xFF  # one flipped byte in the middle of the weights
        weights.write_bytes(bytes(data))
        transport.announce(bad)
        await follower.sync()
        await follower.sync()  # between the next steps: not tried again
        (gen,) = await actors.generate([request])
        return v1, gen, bad

    v1, gen, bad = asyncio.run(main())
    assert follower.current.version == "learner@1" and list(follower.refused) == [f"2:{bad.sha256}"]
    assert "sha256" in next(iter(follower.refused.values()))
    assert gen.adapter_version == "learner@1"  # acting with the previous version
    assert all(torch.equal(t, v1[n]) for n, t in unique_state(actors.model).items())


def test_a_resumed_run_whose_checkpoint_is_of_another_model_is_refused_before_anything_starts(tmp_path, monkeypatch,
                                                                                               capsys):
    """The checkpoint was written for the 17M "small" model; the run now names the tiny one."""
    from agent.cli import main
    from policy.backends.hf import TransformersBackend
    from policy.presets import preset_for
    from policy.tiny import build_tiny_qwen25vl
    from train.checkpoint import save_checkpoint
    from train.learner import Learner

    run = tmp_path / "run"
    small = build_tiny_qwen25vl(tmp_path / "small", variant="small")
    learner = Learner(TransformersBackend(small, preset=preset_for("tiny-qwen", "infigui-g1")), model=TrainModelConfig(finetune="full"))
    save_checkpoint(run, 4, learner, {})
    cfg = full_config(run)
    (run / "online.json").write_text(json.dumps({"online": online_json(OnlineConfig(env="generated/click")),
                                                 "train": cfg.to_dict(), "train_overrides": config_overrides(cfg),
                                                 "sessions": []}))
    started: list[str] = []
    monkeypatch.setattr("devices.web.PlaywrightDevice.start", lambda self: started.append("browser"))
    monkeypatch.setattr(OnlineSession, "_setup", lambda self: started.append("models"))
    monkeypatch.setattr("agent.online.actors.OnlineActor.run", lambda self: started.append("actor"))
    with pytest.raises(CheckpointError) as info:
        OnlineSession(cfg, OnlineConfig(env="generated/click", actors=1), resume=True)
    message = str(info.value)
    assert f"'{small}'" in message and "'tiny'" in message  # both names
    assert "hidden size 512" in message and "hidden size 64" in message and "13.7M parameters" in message
    assert "Resume with the model it was trained with" in message
    assert main(["train", "--online", "--resume", str(run)]) == 2  # the command line: bad input, exit 2
    assert "written for another model" in capsys.readouterr().out
    assert started == [] and not chromium_children()

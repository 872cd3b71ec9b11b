"""Actors whose policy is an OpenAI-compatible server with runtime LoRA loading (vLLM's
``/v1/load_lora_adapter``), against the protocol-level test server over the tiny real model: each announced version
is checked, handed to the server and asked for by name; the answers carry the server's token ids and log-probs
and the version that produced them; old versions are unloaded; a server without runtime loading says how to start
one."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from agent.fleet.served import ServedAdapters, load_served
from agent.online.versions import AdapterFollower, VersionClock
from devices.base import Observation
from policy.errors import BackendError
from policy.model import ModelPolicy
from policy.presets import Decoding, preset_for
from tests.support.openai_server import OpenAICompatServer
from train.adapters import AdapterStore
from train.config import TrainModelConfig
from train.transport import InProcessTransport

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

PRESET = preset_for("tiny-qwen", "infigui-g1", min_pixels=4 * 28 * 28, max_pixels=16 * 28 * 28,
                    decoding=Decoding(temperature=1.0, top_p=1.0, max_new_tokens=8))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from policy.tiny import build_tiny_qwen25vl

    return build_tiny_qwen25vl(tmp_path_factory.mktemp("tiny") / "model", seed=0)


def test_versions_go_to_the_policy_server_and_answers_name_them(model_dir, tmp_path):
    from policy.backends.hf import TransformersBackend
    from train.learner import Learner

    learner = Learner(TransformersBackend(model_dir, preset=PRESET), model=TrainModelConfig(lora_targets=("q_proj", "v_proj")))
    store, transport = AdapterStore(tmp_path / "adapters"), InProcessTransport()
    with OpenAICompatServer.for_model_dir(model_dir, model_name="tiny", preset=PRESET) as server:
        backend = ServedAdapters(server.url, "tiny", folder_root=tmp_path / "served")
        follower = AdapterFollower(backend, transport, VersionClock(tmp_path / "adapters.jsonl"), root=store.root,
                                   load=load_served)
        policy = ModelPolicy(backend, PRESET, n=2)
        frame = np.full((280, 280, 3), 200, np.uint8)

        async def go() -> list:
            out = []
            for step in range(4):
                learner.steps = step
                transport.announce(store.publish(learner))
                await follower.sync()
                request, _ = policy.request("click OK", [], Observation(frame=frame))
                (generation,) = await backend.generate([request])
                out.append(generation)
            await backend.close()
            return out

        generations = asyncio.run(go())
        assert [g.adapter_version for g in generations] == [f"learner@{i}" for i in range(4)]
        assert list(dict.fromkeys(server.served_by)) == [f"learner@{i}" for i in range(4)]  # asked for by name
        for sample in generations[-1].samples:  # vLLM's token ids and log-probs, which importance weights need
            assert sample.token_ids and sample.logprobs is not None and len(sample.logprobs) == len(sample.token_ids)
        assert sorted(server.adapters) == ["learner@2", "learner@3"]  # the newest two stay on the server
        assert sorted(p.name for p in (tmp_path / "served").iterdir()) == ["learner@2", "learner@3"]


def test_a_server_without_runtime_loading_says_how_to_start_one(model_dir, tmp_path):
    src = tmp_path / "adapter"
    src.mkdir()
    (src / "adapter_config.json").write_text("{}")
    with OpenAICompatServer.for_model_dir(model_dir, model_name="tiny", preset=PRESET, runtime_lora=False) as server:
        backend = ServedAdapters(server.url, "tiny", folder_root=tmp_path / "served")
        with pytest.raises(BackendError, match="VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and --enable-lora"):
            backend.load_adapter(src, "learner@0")
    with pytest.raises(BackendError, match="cannot be reached"):
        backend.load_adapter(src, "learner@0")

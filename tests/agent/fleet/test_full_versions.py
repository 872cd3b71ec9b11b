"""Full-weight versions across machines: the learner's version server serves a full-weight folder, the signed
announcement (through the wire codec, as the bus carries it) says its kind, and a fleet actor's follower fetches
the files over HTTP into its own store, checks them and copies them into its model in place; an actor that acts
through a policy server is refused at start when the config fine-tunes every weight."""

from __future__ import annotations

import asyncio
import functools
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from agent.errors import OnlineError
from agent.fleet.keys import sign, verify
from agent.fleet.versions import VersionServer, fetch_version, sized
from agent.online.versions import AdapterFollower, VersionClock
from policy.backends.swap import unique_state
from policy.errors import BackendError
from train.adapters import AdapterStore, VersionKind
from train.step_rewards import StepRule
from train.wire import decode_message, encode_message

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


class Announcements:
    """The actor's side of the bus as the follower reads it: the newest verified announcement."""

    def __init__(self) -> None:
        self.ref = None

    def policy(self):
        return self.ref


def test_a_fleet_actor_fetches_a_full_weight_version_over_http_and_swaps_it_in(tmp_path):
    from policy.backends.hf import TransformersBackend
    from policy.presets import preset_for
    from policy.tiny import build_tiny_qwen25vl

    model = build_tiny_qwen25vl(tmp_path / "model")
    preset = preset_for("tiny-qwen", "infigui-g1", min_pixels=4 * 28 * 28, max_pixels=16 * 28 * 28)
    learner_backend, actor_backend = TransformersBackend(model, preset=preset), TransformersBackend(model, preset=preset)
    with torch.no_grad():
        for p in learner_backend.model.parameters():
            p.mul_(0.5)

    class Learner:
        finetune, backend, steps, adapter_version = "full", learner_backend, 3, "learner@3"

    key = b"k" * 32
    store = AdapterStore(tmp_path / "learner" / "adapters")
    bus = Announcements()
    actor_store = tmp_path / "actor" / "adapters"
    follower = AdapterFollower(actor_backend, bus, VersionClock(tmp_path / "actor" / "adapters.jsonl"),
                               root=actor_store, fetch=functools.partial(fetch_version, root=actor_store))
    with VersionServer(store.root, host="127.0.0.1", port=0, advertise="") as server:
        ref = store.publish(Learner)
        announced = replace(sized(ref), path=f"{server.url}/{Path(ref.path).name}")  # what MqttTransport.announce sends
        bus.ref = verify(decode_message(encode_message(sign(announced, key, "lab/run"))), key, "lab/run")
        assert bus.ref.kind is VersionKind.FULL and bus.ref.path.startswith("http://")
        asyncio.run(follower.sync())
        assert server.served == len(ref.files)
    assert follower.current is not None and follower.current.version == "learner@3" and not follower.refused
    assert sorted(p.name for p in (actor_store / "v000003").iterdir()) == sorted(ref.files)
    mine, theirs = unique_state(actor_backend.model), unique_state(learner_backend.model)
    assert all(torch.equal(mine[n], theirs[n]) for n in theirs) and actor_backend.adapter_version == "learner@3"


def test_a_served_actor_is_refused_full_weights(tmp_path):
    from agent.config import load_train_config
    from agent.fleet.actor import ActorOptions, FleetActor
    from agent.fleet.served import ServedAdapters, load_served
    from agent.fleet.settings import BrokerConfig
    from train.adapters import AdapterRef

    config = load_train_config(None, ['model.id="tiny"', 'model.finetune="full"', 'train.stage="rl"',
                                      f'train.run_dir="{tmp_path}"'])
    options = ActorOptions(name="a1", env="generated/click", policy_url="http://127.0.0.1:9/v1")
    with pytest.raises(OnlineError, match="LoRA adapters at run time only.*leave --policy out"):
        FleetActor(config, options, BrokerConfig("127.0.0.1"), b"k" * 32)
    full = AdapterRef("learner@1", 1, str(tmp_path / "v000001"), "ab" * 32, kind=VersionKind.FULL)
    with pytest.raises(BackendError, match="full weights learner@1: a policy server"):
        load_served(ServedAdapters("http://127.0.0.1:9", "tiny", folder_root=tmp_path / "served"), full,
                    root=tmp_path)


def test_an_actor_takes_its_step_reward_from_data_reward_and_refuses_one_without_an_online_form(tmp_path):
    from agent.config import load_train_config
    from agent.fleet.actor import ActorOptions, FleetActor
    from agent.fleet.settings import BrokerConfig

    def actor(reward: str) -> FleetActor:
        config = load_train_config(None, ['model.id="tiny"', 'train.stage="rl"', f'data.reward="{reward}"',
                                          f'train.run_dir="{tmp_path}"'])
        return FleetActor(config, ActorOptions(name="a1", env="generated/click"), BrokerConfig("127.0.0.1"),
                          b"k" * 32)

    assert actor("guir1_paper").step_rule is StepRule.GUIR1 and actor("aepo").step_rule is StepRule.AEPO
    with pytest.raises(OnlineError, match="data.reward='distance' cannot score online answers"):
        actor("distance")

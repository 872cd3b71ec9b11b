"""Training from demonstrations: a web demonstration recorded with the real recorder (Playwright playing the person)
becomes SFT examples for every model family (its prompt, its answer format, model coordinates), GUI-R1 step-reward
samples that the teaching answer scores fully, and ``agent train --stage sft`` on the folder lowers the tiny model's
loss on them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agent.cli import main as cli_main
from devices.actions import Action, ActionKind
from envs.trajectory import read_episode
from policy.formats import get_format
from policy.presets import preset_for
from train.data import TrajectorySource, answer_text, reward_fn
from train.metrics import read_metrics
from tests.support.web_demo import fill_the_form, form_page, record_web_demo

pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")


async def every_kind(page) -> None:
    """The form, then a hotkey, a scroll, a drag, a double and a right click."""
    await fill_the_form(page)
    await page.keyboard.press("Control+b")
    await page.mouse.move(400, 400)
    await page.mouse.wheel(0, 300)
    await asyncio.sleep(0.8)
    await page.mouse.move(500, 300)
    await page.mouse.down()
    await page.mouse.move(650, 450, steps=6)
    await page.mouse.up()
    await asyncio.sleep(0.6)
    box = await page.locator("#ok").bounding_box()
    centre = (box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    await page.mouse.dblclick(*centre)
    await asyncio.sleep(0.6)
    await page.mouse.click(*centre, button="right")
    await asyncio.sleep(0.3)


RECORDED = ["click", "click", "type", "click", "type", "key", "click", "hotkey", "scroll", "drag", "double_click",
            "right_click", "finish"]


@pytest.fixture(scope="module")
def demos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of runs holding one web demonstration (recorded once for the module)."""
    from envs.site import LocalSite

    root = tmp_path_factory.mktemp("demos")
    (root / "pages").mkdir()
    (root / "pages" / "form.html").write_text(form_page(), encoding="utf-8")
    with LocalSite(root / "pages") as site:
        episode = record_web_demo(root / "runs", site.url("form.html"), play=every_kind)
    assert [s.action["kind"] for s in read_episode(episode).steps] == RECORDED
    return root / "runs"


FAMILIES = {  # preset -> the recorded kinds its SFT examples teach (the password's masked text never)
    "gui-r1": {"click", "type", "key", "hotkey", "scroll", "double_click", "right_click", "finish"},
    "qwen2.5-vl": {"click", "type", "key", "hotkey", "scroll", "double_click", "right_click", "finish"},
    "ui-tars-1.5": {"click", "type", "key", "hotkey", "scroll", "drag", "double_click", "right_click", "finish"},
    "ui-tars-v1": {"click", "type", "key", "hotkey", "scroll", "drag", "double_click", "right_click", "finish"},
    "infigui-g1": {"click", "type", "drag", "double_click", "right_click"},
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_demonstration_becomes_sft_examples_in_the_family_format(demos, family):
    preset = preset_for(family)
    src = TrajectorySource(demos, preset=preset, sft=True)
    (episode,) = [read_episode(p) for p in demos.glob("*/ep*")]
    taught = set()
    fmt = get_format(preset.family)
    for p in (src.prompt(i) for i in range(len(src))):
        recorded = Action.from_dict(episode.steps[p.origin["step"]].action)
        taught.add(recorded.kind.value)
        assert p.target["family"] == preset.family and p.image.shape[:2][::-1] == src.preset.input_size(p.frame_size)
        answer = answer_text(p)
        space = preset.space(p.frame_size)
        got = fmt.parse(answer, space, preset).actions[0]
        if recorded.point is not None and got.point is not None:
            # model coordinates: the answer's point is the recorded one scaled to the model's image (or 0-1000 grid)
            sx, sy = space.extent
            assert abs(got.point.x - recorded.point.x) * sx <= 1 and abs(got.point.y - recorded.point.y) * sy <= 1
        if preset.family != "infigui-g1":
            assert got.kind is recorded.kind, (family, answer)
            assert got.text == recorded.text and got.keys == recorded.keys
    assert taught == FAMILIES[family], (family, taught)
    reasons = {s.kind for s in src.skipped}
    assert "sensitive" in reasons  # the password is never taught
    if family in ("gui-r1", "qwen2.5-vl"):
        assert "unwritable" in reasons  # their drag cannot be written faithfully: said, not silently wrong


def test_demonstration_steps_are_guir1_step_reward_samples(demos):
    src = TrajectorySource(demos, preset="gui-r1")  # the RL form: steps with a target box and a GUI-R1 action
    adapter = reward_fn("guir1")
    assert len(src) >= 5
    for i in range(len(src)):
        p = src.prompt(i)
        assert p.target["box"] is not None
        assert adapter(p, answer_text(p)).total == pytest.approx(1.0), (p.origin, answer_text(p))


def test_agent_train_sft_on_a_folder_of_demonstrations_lowers_the_loss(demos, tmp_path):
    n = len(TrajectorySource(demos, preset="infigui-g1", sft=True))
    run_dir = tmp_path / "sft"
    code = cli_main(["train", "--stage", "sft", *(x for kv in (
        'model.id="tiny"', f'train.run_dir="{run_dir}"', 'data.source="trajectories"', f'data.path="{demos}"',
        "data.think=false", "data.heldout_size=0", "train.steps=6", f"sft.batch_size={n}", "sft.lr=0.01",
        'model.finetune="full"', "eval.every=0", "log.progress=false", "log.tensorboard=false", "log.png=false")
        for x in ("--set", kv))])
    assert code == 0
    losses = [r["sft/loss"] for r in read_metrics(run_dir / "metrics.jsonl")]
    assert len(losses) == 6 and losses[-1] < 0.7 * losses[0], losses


def test_pauses_are_neither_samples_nor_history(tmp_path):
    import numpy as np

    from devices.base import Observation
    from envs.records import Actor, Outcome, StepRecord
    from envs.trajectory import RunWriter

    writer = RunWriter(tmp_path, config={}, run_id="d").episode(task="t", actor=Actor.HUMAN)
    steps = [(Action(ActionKind.WAIT, duration_s=3.0), {"env_info": {"demo": {"paused_s": 3.0}}}),
             (Action(ActionKind.KEY, keys=("Enter",)), {})]
    for i, (action, info) in enumerate(steps):
        path = writer.write_frame(i, Observation(np.zeros((60, 80, 3), np.uint8)))
        writer.write_step(StepRecord(step_id=writer.step_id(i), index=i, started_at=0.0, ended_at=0.0,
                                     frame_path=path, frame_size=(80, 60), model_input_size=(80, 60),
                                     action=action.to_dict(), executed=True, info=info))
    writer.finish(Outcome.CLAIMED)
    src = TrajectorySource(tmp_path, preset="gui-r1", sft=True)
    assert [s.kind for s in src.skipped] == ["pause"] and len(src) == 1
    assert "history being 'None'" in src.prompt(0).messages[0]["content"][1]["text"]

"""Fleet sessions of real processes: ``agent learner`` and ``agent actor`` (the tiny random model, a web actor with
its Chromium, a desktop actor on its own Xvfb) on a private mosquitto, and the faults of issue 18:

- an actor killed with kill -9 in the middle of an episode: its finished steps are on disk, it starts again and
  sends what its spool held, the learner carries on, and the group it left incomplete expires (``--group-timeout``);
- the learner killed in the middle of its updates: ``--resume`` continues from its checkpoint while the actors
  keep acting with the version they have and pick up the next announcement;
- the broker stopped mid-session (30 s in the slow suite): the learner ends with exactly the sample ids the actor
  produced, none lost, none counted twice;
- an actor cut off from the network (a minute in the slow suite): it reconnects, replays its spool, and its stale
  samples are dropped by the lag rule (``--max-policy-lag 0``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.support.fleet_run import Fleet, sets, wait_for
from tests.support.mosquitto import TcpProxy
from tests.support import procs

pytestmark = pytest.mark.timeout(900)


def episodes_done(fleet: Fleet, name: str) -> tuple[int, bool]:
    """(episodes with an outcome, whether the newest one is in flight with at least one step on disk)."""
    folders = sorted((fleet.folder / f"actor-{name}").glob("ep*"))
    done = sum(1 for f in folders if _outcome(f))
    last = folders[-1] if folders else None
    in_flight = bool(last and (last / "episode.json").is_file() and not _outcome(last)
                     and (last / "steps.jsonl").is_file() and (last / "steps.jsonl").read_text().strip())
    return done, in_flight


def _outcome(folder: Path) -> str | None:
    """The episode's outcome; None while it runs, or when the folder is so new that its episode.json is not yet
    written (the writer makes the folder first: a loaded clean-clone run read one in that instant)."""
    try:
        return json.loads((folder / "episode.json").read_text() or "{}").get("outcome")
    except FileNotFoundError:
        return None


def kill_9(proc: subprocess.Popen[bytes]) -> None:
    """kill -9 the actor, and the browser it leaves behind (its group and what is below it)."""
    procs.stop(proc, first=signal.SIGKILL)


def fleet_status(fleet: Fleet) -> dict:
    out = procs.run([sys.executable, "-m", "agent.cli", "fleet", "status", "--broker", fleet.broker.url,
                     "--wait", "1", "--json"], cwd=REPO, env=fleet.env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)


def test_web_and_desktop_actors_train_with_a_learner_and_survive_a_kill_9(tmp_path):
    """Both actors act through a policy server (runtime LoRA, as vLLM), episode-level groups."""
    fleet = Fleet(tmp_path)
    logs = lambda: "\n".join(fleet.log(n) for n in ("learner.log", "actor-web-1.log", "actor-desk-1.log"))  # noqa
    try:
        server = fleet.policy_server()
        level = ("--group-level", "episode", "--policy", f"openai:{server.url}")
        # 6 updates: the group web-1 leaves open must outlive its 5 s timeout before the learner is done
        learner = fleet.learner("--group-level", "episode", "--group-timeout", "5", *sets("train.steps=6"))
        web = fleet.actor("web-1", "generated/click", "web", *level)
        desk = fleet.actor("desk-1", "desktop/click", "desktop", *level, display=fleet.xvfb())
        wait_for(lambda: fleet.updates() >= 1, 400, "the first update", alive=[learner, web, desk], logs=logs)
        # kill -9 in the second episode of a group: its first episode's part is at the learner, the second never is
        wait_for(lambda: (lambda d, f: d % 2 == 1 and f)(*episodes_done(fleet, "web-1")), 300,
                 "web-1 in the middle of a group's second episode", every=0.05, alive=[web], logs=logs)
        kill_9(web)
        done_before, in_flight = episodes_done(fleet, "web-1")
        assert in_flight  # the steps it finished before the kill are on disk
        web = fleet.actor("web-1", "generated/click", "web", *level)  # starts again
        wait_for(lambda: learner.poll() is not None, 400, "the learner's 6 updates", alive=[web, desk], logs=logs)
        status = fleet_status(fleet)
        assert learner.returncode == 0, logs()
        metrics = fleet.metrics()
        assert fleet.updates() == 6 and metrics[-1]["online/groups_expired"] >= 1  # the group web-1 left incomplete
        assert len(set(fleet.versions("desk-1"))) >= 2  # the desktop actor switched versions between steps
        assert len(set(fleet.versions("web-1"))) >= 2
        received = fleet.received()
        assert len(received) == len(set(received))
        assert set(received) <= set(fleet.produced("web-1")) | set(fleet.produced("desk-1"))
        assert any(r.startswith("web-1-") for r in received) and any(r.startswith("desk-1-") for r in received)
        assert episodes_done(fleet, "web-1")[0] > done_before  # back at work after the kill
        assert {v for v in server.served_by if v} >= {"learner@1", "learner@2"}  # versions asked for by name
        devices = {a["actor"]: a["device"] for a in status["actors"]}
        assert devices.get("desk-1") == "desktop" and devices.get("web-1") == "web"
        counts = json.loads((tmp_path / "learner" / "fleet.json").read_text())["counts"]
        assert not {k: v for k, v in counts.items() if k in ("malformed", "oversize", "impersonation")}
    finally:
        fleet.close()


def test_a_learner_killed_mid_update_resumes_while_the_actors_keep_acting(tmp_path):
    fleet = Fleet(tmp_path)
    logs = lambda: fleet.log("learner.log") + fleet.log("actor-a1.log")  # noqa: E731
    try:
        learner = fleet.learner(*sets("train.steps=4", "checkpoint.every=1"))
        actor = fleet.actor("a1")
        ckpt = tmp_path / "learner" / "checkpoints" / "step-000002" / "COMPLETE"
        wait_for(ckpt.is_file, 400, "the learner's second checkpoint", alive=[learner, actor], logs=logs)
        os.kill(learner.pid, signal.SIGKILL)  # in or between its updates: it cannot know
        learner.wait()
        steps_then = len(fleet.versions("a1"))
        time.sleep(5)
        assert len(fleet.versions("a1")) > steps_then  # the actor keeps acting with the version it has
        learner = fleet.learner("--resume", "learner", *sets("train.steps=4", "checkpoint.every=1"),
                                log="learner-resumed.log")
        wait_for(lambda: learner.poll() is not None, 400, "the resumed learner's last update", alive=[actor],
                 logs=lambda: fleet.log("learner-resumed.log") + fleet.log("actor-a1.log"))
        assert learner.returncode == 0, fleet.log("learner-resumed.log")
        assert fleet.updates() == 4 and (tmp_path / "learner" / "checkpoints" / "step-000004").is_dir()
        wait_for(lambda: max(fleet.versions("a1"), default=0) == 4, 60, "the actor acting with v4",
                 alive=[actor], logs=logs)
        seen = fleet.versions("a1")
        assert seen == sorted(seen)  # from the versions before the kill to the resumed learner's, never back
    finally:
        fleet.close()


def broker_stopped(tmp_path, seconds: float) -> None:
    fleet = Fleet(tmp_path)
    logs = lambda: fleet.log("learner.log") + fleet.log("actor-a1.log")  # noqa: E731
    try:
        learner = fleet.learner(*sets("train.steps=1000"))
        actor = fleet.actor("a1")
        wait_for(lambda: len(fleet.received()) >= 3, 400, "samples at the learner", alive=[learner, actor], logs=logs)
        fleet.broker.stop()
        time.sleep(seconds)
        fleet.broker.start()
        produced_during = len(fleet.produced("a1"))
        wait_for(lambda: len(fleet.produced("a1")) >= produced_during + 3, 120, "more samples after the restart",
                 alive=[actor], logs=logs)
        actor.send_signal(signal.SIGTERM)  # stops cleanly: its spool goes to the broker first
        assert actor.wait(120) == 0, logs()
        produced = fleet.produced("a1")
        wait_for(lambda: len(fleet.received()) >= len(produced), 120, "every produced sample at the learner",
                 alive=[learner], logs=logs)
        received = fleet.received()
        assert sorted(received) == sorted(produced)  # none lost, none counted twice
    finally:
        fleet.close()


def test_the_learner_gets_exactly_what_the_actor_produced_when_the_broker_stops_mid_session(tmp_path):
    broker_stopped(tmp_path, seconds=3)


@pytest.mark.slow
def test_the_learner_gets_exactly_what_the_actor_produced_when_the_broker_stops_for_30_seconds(tmp_path):
    broker_stopped(tmp_path, seconds=30)


def actor_cut_off(tmp_path, seconds: float) -> None:
    fleet = Fleet(tmp_path)
    proxy = TcpProxy(fleet.broker.port).start()
    logs = lambda: fleet.log("learner.log") + fleet.log("actor-far.log")  # noqa: E731
    try:
        learner = fleet.learner("--max-policy-lag", "0", *sets("train.steps=1000"))
        near = fleet.actor("near")
        far = fleet.actor("far", broker_url=f"mqtt://127.0.0.1:{proxy.port}/{fleet.broker.prefix}")
        wait_for(lambda: any(r.startswith("far-") for r in fleet.received()) and fleet.updates() >= 1, 400,
                 "samples from both actors and an update", alive=[learner, near, far], logs=logs)
        proxy.cut(silent=True)  # no reset, no answer: a cable pulled
        cut_at, updates_then = len(fleet.produced("far")), fleet.updates()
        time.sleep(seconds)
        assert len(fleet.produced("far")) > cut_at  # it went on acting, into its spool
        proxy.heal()
        wait_for(lambda: fleet.updates() > updates_then, 300, "updates meanwhile", alive=[learner], logs=logs)
        far.send_signal(signal.SIGTERM)
        assert far.wait(120) == 0, logs()
        produced = fleet.produced("far")
        wait_for(lambda: set(produced) <= set(fleet.received()), 120, "the far actor's spool at the learner",
                 alive=[learner], logs=logs)
        learner.send_signal(signal.SIGTERM)
        learner.wait(120)
        summary = json.loads((tmp_path / "learner" / "online_summary.json").read_text())
        assert summary["stale_dropped"] > 0  # the replayed samples were versions behind: the lag rule dropped them
    finally:
        proxy.stop()
        fleet.close()


@pytest.mark.slow
def test_an_actor_cut_off_briefly_replays_its_spool_and_its_stale_samples_are_dropped(tmp_path):
    actor_cut_off(tmp_path, seconds=8)


@pytest.mark.slow
def test_an_actor_cut_off_for_a_minute_replays_its_spool_and_its_stale_samples_are_dropped(tmp_path):
    actor_cut_off(tmp_path, seconds=60)

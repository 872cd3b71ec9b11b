"""Test and benchmark infrastructure: a fleet session of real processes on one machine.

``Fleet(tmp_path)`` starts a private mosquitto and writes a fleet key; ``learner(...)`` and ``actor(...)`` start
``agent learner`` and ``agent actor`` (``python -m agent.cli``) with the tiny random model's settings (``TINY``: a
KL term, so groups whose answers all score the same still make an update: the random model never answers in
format), each with its log in the fleet's folder; ``policy_server()`` serves the tiny model over HTTP with runtime
LoRA (actors with ``--policy openai:URL``); ``xvfb()`` starts a private X display of the generated screens'
size for a desktop actor; ``close()`` stops every process it started, with whatever those started (each is in a
process group of its own: ``tests.support.procs``). Reading helpers: the learner's
metrics and received ids, an actor's produced sample ids and the versions its steps were decided with.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.fleet.keys import KEY_ENV
from tests.support import procs
from tests.support.mosquitto import Mosquitto
from tests.support.xvfb import start_xvfb, stop_xvfb

TINY = ['model.id="tiny"', "data.think=false", "rl.group_size=2", "rl.batch_prompts=2", "rl.max_new_tokens=32",
        "log.tensorboard=false", "eval.every=0", "data.seeds=20", 'model.lora_targets=["q_proj", "v_proj"]',
        "rl.kl_coef=0.05", "train.seed=0", "rl.lr=0.01"]
KEY = bytes(range(32, 64))


def sets(*overrides: str) -> list[str]:
    return [arg for o in overrides for arg in ("--set", o)]


class Fleet:
    """Processes of one fleet session (see the module docstring)."""

    def __init__(self, folder: Path, *, broker: Mosquitto | None = None) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.broker = broker or Mosquitto(self.folder / "broker").start()
        self.procs: list[subprocess.Popen[bytes]] = []
        self.xvfbs: list[subprocess.Popen[bytes]] = []
        self.servers: list[Any] = []
        self.env = {**os.environ, KEY_ENV: KEY.hex(), "PYTHONUNBUFFERED": "1"}

    def _spawn(self, args: list[str], log: str, env: dict[str, str] | None = None,
               broker_url: str = "") -> subprocess.Popen[bytes]:
        with open(self.folder / log, "ab") as out:
            proc = procs.start([sys.executable, "-m", "agent.cli", "-v", *args, "--broker",
                                broker_url or self.broker.url], cwd=self.folder, env=env or self.env, stdout=out,
                               stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def learner(self, *more: str, env: str = "generated/click", run: str = "learner",
                log: str = "learner.log") -> subprocess.Popen[bytes]:
        """``agent learner`` with the tiny settings; ``more``: further arguments (``--resume``, ``--set ...``)."""
        return self._spawn(["learner", "--env", env, "--run-dir", run, "--serve", "127.0.0.1:0", *sets(*TINY),
                            *more], log)

    def actor(self, name: str, env: str = "generated/click", device: str = "web", *more: str,
              display: str = "", broker_url: str = "") -> subprocess.Popen[bytes]:
        penv = dict(self.env)
        if display:
            penv.update(DISPLAY=display, XDG_SESSION_TYPE="x11")
        return self._spawn(["actor", "--name", name, "--env", env, "--device", device, "--run-dir", f"actor-{name}",
                            *sets(*TINY), *more], f"actor-{name}.log", penv, broker_url)

    def policy_server(self) -> Any:
        """The OpenAI-compatible test server over the session's tiny model (the learner's weights: the same seed),
        with runtime LoRA; the first answer of each request is forced to a click at the screen's centre, so that
        episodes go somewhere (the random model's own answers never parse)."""
        from agent.config import load_train_config
        from tests.support.openai_server import OpenAICompatServer
        from train.build import model_preset

        path, preset = model_preset(load_train_config(None, [*TINY, f'train.run_dir="{self.folder / "server"}"']))
        server = OpenAICompatServer.for_model_dir(path, model_name="tiny", preset=preset,
                                                  force_first='[{"point_2d": [140, 84]}]').start()
        self.servers.append(server)
        return server

    def xvfb(self, size: str = "1280x800") -> str:
        proc, display = start_xvfb(size)
        self.xvfbs.append(proc)
        return display

    def log(self, name: str) -> str:
        path = self.folder / name
        return path.read_text(errors="replace")[-4000:] if path.is_file() else ""

    def close(self) -> None:
        """SIGTERM to every learner and actor (their process groups, and what they started), SIGKILL to what is
        left after 30 s; then the displays, the servers and the broker."""
        try:
            procs.stop_all(self.procs, grace=30)
        finally:
            for proc in self.xvfbs:
                stop_xvfb(proc)
            for server in self.servers:
                server.stop()
            self.broker.stop()

    # -- reading what the processes wrote ----------------------------------------------------------------------

    def metrics(self, run: str = "learner") -> list[dict]:
        path = self.folder / run / "metrics.jsonl"
        if not path.is_file():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def updates(self, run: str = "learner") -> int:
        return max((int(m["step"]) for m in self.metrics(run)), default=0)

    def received(self, run: str = "learner") -> list[str]:
        path = self.folder / run / "received.log"
        return [line.split()[0] for line in path.read_text().splitlines()] if path.is_file() else []

    def produced(self, name: str) -> list[str]:
        path = self.folder / f"actor-{name}" / "spool" / "produced.log"
        if not path.is_file():
            return []
        return [line.split()[0] for line in path.read_text().splitlines() if "/samples/" in line]

    def versions(self, name: str) -> list[int]:
        """The adapter steps an actor's recorded steps were decided with, in episode order."""
        out = []
        for steps in sorted((self.folder / f"actor-{name}").glob("ep*/steps.jsonl")):
            for line in steps.read_text().splitlines():
                try:
                    version = json.loads(line).get("info", {}).get("policy", {}).get("adapter_version")
                except ValueError:  # the line the actor is writing now
                    continue
                if version:
                    out.append(int(version.rsplit("@", 1)[1]))
        return out


def wait_for(condition: Callable[[], bool], timeout: float, what: str, *, every: float = 0.2,
             alive: list[subprocess.Popen[bytes]] | None = None, logs: Callable[[], str] | None = None) -> None:
    """Until ``condition()``; an AssertionError naming ``what`` (and the logs) after ``timeout`` or when a process
    in ``alive`` exits first."""
    end = time.monotonic() + timeout
    while not condition():
        dead = [p for p in alive or [] if p.poll() is not None]
        if dead or time.monotonic() > end:
            why = f"exited with {dead[0].returncode}" if dead else f"not within {timeout:.0f} s"
            raise AssertionError(f"waiting for {what}: {why}\n{logs() if logs else ''}")
        time.sleep(every)

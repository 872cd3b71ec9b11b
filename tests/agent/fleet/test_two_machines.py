"""docs/fleet.md's "Two machines", run on this one: the walkthrough's own text, with machine A's LAN address
(192.168.1.10) replaced by 127.0.0.1, its ports (8883, 8765) by free ones, and ``/etc/mosquitto/handeye/`` by the
folder the files were made in (installing them there needs root; that block is the only one not run).

- Step 1's commands run as written: the CA, the broker's certificate for the address, the password files and
  mosquitto's password file (``mosquitto_passwd -c -b``), the fleet key.
- The broker runs the page's configuration and ACL as written, included (``include_dir``) from a main file like the
  Debian package's, which sets persistence: the layout the page describes, so a line the package already sets would
  stop it here too.
- The learner (step 3) and the actor (step 4) run their commands as written plus the tiny model's settings (on the
  CPU; one update, then the learner stops; the actor is stopped as a user would, with SIGTERM); they meet through TLS
  with passwords, the learner updates from the actor's samples, and ``agent fleet status`` lists the actor.
- A client without its password, without a user name, without the CA, or with another's password is refused, and
  says so.

Every connection is to 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.support import procs
from tests.support.fleet_run import TINY, sets, wait_for
from tests.support.installed import need_program
from tests.support.mosquitto import Mosquitto, free_port
from tests.test_docs_commands import logical_lines, run

pytestmark = pytest.mark.timeout(600)

PAGE = REPO / "docs" / "fleet.md"
LAN_ADDRESS, BROKER_PORT, SERVE_PORT, ETC = "192.168.1.10", "8883", "8765", "/etc/mosquitto/handeye/"
TINY_RUN = [*TINY, 'model.device="cpu"', 'model.dtype="auto"']
"""The tiny random model on the CPU: the page's config (configs/aepo-3b.toml) says cuda and bfloat16."""


@dataclass(frozen=True, slots=True)
class Fence:
    lang: str
    lines: tuple[str, ...]

    @property
    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def section(title: str = "## Two machines") -> list[Fence]:
    """The fenced blocks of the page's section ``title``, in order."""
    text = PAGE.read_text(encoding="utf-8")
    start = text.index(f"\n{title}\n")
    end = text.find("\n## ", start + 1)
    lines = text[start:end if end > 0 else None].split("\n")
    out, i = [], 0
    while i < len(lines):
        fence = re.match(r"^```(\w*)\s*$", lines[i])
        if fence:
            close = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            out.append(Fence(fence.group(1), tuple(lines[i + 1:close])))
            i = close
        i += 1
    return out


@dataclass(frozen=True, slots=True)
class Walkthrough:
    """The pieces of the section, found by what they are (a test that cannot find one fails)."""

    setup: tuple[str, ...]
    conf: str
    acl: str
    learner: str
    actor: str
    status: str

    @classmethod
    def read(cls) -> Walkthrough:
        blocks = section()
        commands = [logical_lines(list(b.lines)) for b in blocks if b.lang == "bash"]
        files = {b.lines[0].removeprefix("# "): b.text for b in blocks if b.lang == "" and b.lines}

        def one(start: str) -> str:
            found = [c for cmds in commands for c in cmds if c.startswith(start)]
            assert found, f"docs/fleet.md's Two machines has no `{start}` command"
            return found[0]

        setup = next(cmds for cmds in commands if any(c.startswith("openssl req -x509") for c in cmds))
        page = cls(tuple(setup), files["/etc/mosquitto/conf.d/handeye.conf"], files["fleet/acl"],
                   one("agent learner"), one("agent actor"), one("agent fleet status"))
        assert "--name web-1" in page.actor and "--actors web-1" in page.learner
        return page


class Loopback:
    """Machine A's address, ports and folder as this test has them."""

    def __init__(self, work: Path) -> None:
        self.work, self.broker_port, self.serve_port = work, free_port(), free_port()

    def __call__(self, text: str) -> str:
        assert LAN_ADDRESS in text or ETC in text, f"nothing of machine A in {text!r}"
        return (text.replace(LAN_ADDRESS, "127.0.0.1").replace(f":{BROKER_PORT}", f":{self.broker_port}")
                .replace(f"listener {BROKER_PORT} ", f"listener {self.broker_port} ")
                .replace(f":{SERVE_PORT}", f":{self.serve_port}").replace(ETC, f"{self.work / 'fleet'}/"))


def shell(command: str, cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k not in ("HANDEYE_MQTT_PASSWORD", "HANDEYE_FLEET_KEY")}
    env.update(PATH=f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", HF_HUB_OFFLINE="1",
               PYTHONUNBUFFERED="1", COLUMNS="120")
    with open(log, "ab") as out:
        return procs.start(["bash", "-c", command], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)


def broker(folder: Path, page: Walkthrough, loopback: Loopback) -> Mosquitto:
    """The page's configuration, included from a main file like the Debian package's (it sets persistence)."""
    need_program("mosquitto", "mosquitto")
    (folder / "conf.d").mkdir(parents=True)
    (folder / "data").mkdir()
    conf = loopback(page.conf)
    assert f"listener {loopback.broker_port} 127.0.0.1\n" in conf and "allow_anonymous false" in conf
    (folder / "conf.d" / "handeye.conf").write_text(conf)
    (loopback.work / "fleet" / "acl").write_text(page.acl)
    main = ["user root"] if os.geteuid() == 0 else []  # as root, mosquitto would switch to a user that cannot read
    # the test's private folder
    main += ["persistence true", f"persistence_location {folder / 'data'}/", f"log_dest file {folder}/mosquitto.log",
             f"include_dir {folder / 'conf.d'}"]
    return Mosquitto(folder, conf="\n".join(main) + "\n", port=loopback.broker_port).start()


def refused(command: str, cwd: Path, code: int = 1) -> str:
    """What ``command`` printed; it must exit with ``code`` (1: could not connect; the learner's 2: bad settings)."""
    result = run(command, cwd, 120)
    out = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == code and "Traceback" not in out, f"`{command}` exited {result.returncode}:\n{out}"
    return out


def test_the_two_machine_walkthrough_runs_on_loopback(tmp_path):
    need_program("openssl", "openssl")
    need_program("mosquitto_passwd", "mosquitto mosquitto-clients")
    page = Walkthrough.read()
    work = tmp_path / "checkout"
    work.mkdir()
    (work / "configs").symlink_to(REPO / "configs")  # the commands name configs/aepo-3b.toml, as from a checkout
    loopback = Loopback(work)
    for command in page.setup:  # step 1, as written but for the address
        result = run(loopback(command) if LAN_ADDRESS in command else command, work, 120)
        assert result.returncode == 0, f"`{command}`: {result.stdout}{result.stderr}"
    passwd = (work / "fleet" / "passwd").read_text().split()
    assert [line.split(":")[0] for line in passwd] == ["learner", "web-1"]
    assert all(re.fullmatch(r"[\w-]+:\$7\$\d+\$[\w+/=]+\$[\w+/=]+", line) for line in passwd)  # USER:HASH, as said

    mosquitto = broker(tmp_path / "broker", page, loopback)
    learner = actor = None
    try:
        learner = shell(f"{loopback(page.learner)} {shlex.join(sets(*TINY_RUN, 'train.steps=1'))}", work,
                        tmp_path / "learner.log")
        actor = shell(f"{loopback(page.actor)} {shlex.join(sets(*TINY_RUN))}", work, tmp_path / "actor.log")
        logs = lambda: "\n".join(p.read_text(errors="replace")[-3000:] for p in (tmp_path / "learner.log",  # noqa
                                                                                tmp_path / "actor.log"))

        status = loopback(page.status)
        no_password = status.replace(" --password-file fleet/learner.pw", "")
        assert "refused user 'learner' without a password" in refused(no_password, work)
        assert "refused a client without a user name" in refused(no_password.replace("learner@", ""), work)
        assert "does not verify" in refused(status.replace(" --ca fleet/ca.crt", ""), work)
        posing = loopback(page.actor).replace("--password-file fleet/web-1.pw", "--password-file fleet/learner.pw")
        out = refused(f"{posing} --run-dir runs/posing {shlex.join(sets(*TINY_RUN))}", work)
        assert "refused user 'web-1' with the password given" in out
        wrong = loopback(page.learner).replace("--password-file fleet/learner.pw", "--password-file fleet/web-1.pw") \
            .replace(f"--serve 127.0.0.1:{loopback.serve_port}", "--serve 127.0.0.1:0")  # the learner has that one
        out = refused(f"{wrong} --run-dir runs/wrong {shlex.join(sets(*TINY_RUN))}", work, code=2)
        assert "refused user 'learner' with the password given" in out and not (work / "runs" / "wrong").exists()

        run_dir = work / "runs" / "fleet-click"
        wait_for(lambda: learner.poll() is not None, 400, "the learner's update", alive=[actor], logs=logs)
        assert learner.returncode == 0, logs()
        progress = " ".join((tmp_path / "learner.log").read_text(errors="replace").split())
        assert "updates 1/1 actors 1/1" in progress  # --actors web-1: the one actor it expects, and it came
        metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line]
        assert max(int(m["step"]) for m in metrics) == 1
        received = [line.split()[0] for line in (run_dir / "received.log").read_text().splitlines()]
        produced = (work / "runs" / "actor-web-1" / "spool" / "produced.log").read_text()
        assert received and all(r.startswith("web-1-") and r in produced for r in received)
        counts = json.loads((run_dir / "fleet.json").read_text())["counts"]
        assert counts.get("connects") == 1 and set(counts) <= {"connects", "published"}, counts  # nothing refused
        shown = run(status, work, 120)
        assert shown.returncode == 0 and "web-1" in shown.stdout, shown.stdout + shown.stderr
    finally:
        procs.stop_all([p for p in (learner, actor) if p is not None], grace=30)
        mosquitto.stop()
    assert actor.returncode == 0, logs()  # SIGTERM stops it cleanly

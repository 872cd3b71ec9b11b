"""The worked examples in docs/coordinates.md are reproduced by the `agent parse` commands beside them."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

from tests.conftest import REPO

DOC = REPO / "docs" / "coordinates.md"


def examples() -> list[tuple[str, list[str]]]:
    """(command, expected output lines) for every ```console block that runs `agent parse`."""
    out = []
    for block in re.findall(r"```console\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S):
        lines = block.rstrip("\n").split("\n")
        assert lines[0].startswith("$ agent parse "), lines[0]
        out.append((lines[0][2:], lines[1:]))
    return out


def test_every_family_has_a_worked_example():
    commands = " ".join(c for c, _ in examples())
    for family in ("qwen2.5-vl", "infigui-g1", "gui-r1", "ui-tars-1.5", "ui-tars-v1"):
        assert f"--format {family} " in commands, f"no worked example for {family}"


def test_examples_reproduce():
    env = {**os.environ, "COLUMNS": "160", "NO_COLOR": "1", "TERM": "dumb"}
    for command, expected in examples():
        args = shlex.split(command)[1:]
        result = subprocess.run([sys.executable, "-m", "agent", *args], cwd=REPO, env=env, capture_output=True,
                                text=True, timeout=60)
        got = [line.rstrip() for line in result.stdout.rstrip("\n").split("\n")]
        assert result.returncode == 0, result.stdout + result.stderr
        assert got == [line.rstrip() for line in expected], f"{command}\n" + "\n".join(got)

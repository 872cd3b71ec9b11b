"""What the commands print, read in an 80-column terminal: tables fold or split instead of wrapping cell by cell,
names are never cut with "…", each warning is one line and printed once, and the failures a newcomer meets first
say what to do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO
from tests.support import procs


def agent(*args: str, cwd: Path = REPO, env: dict[str, str] | None = None,
          timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb", **(env or {})}
    return procs.run([sys.executable, "-m", "agent", *args], cwd=cwd, env=env, capture_output=True, text=True,
                     timeout=timeout)


def too_wide(text: str) -> list[str]:
    return [line for line in text.splitlines() if len(line.rstrip()) > 80]


def test_parse_fits_80_columns_with_a_drag_details_and_a_long_thought():
    thought = "The slider sits in the middle of the settings panel, under the heading that says Volume. " * 3
    r = agent("parse", "--format", "ui-tars-1.5", "--size", "3840x2160",
              f"Thought: {thought}Action: drag(start_box='(120,500)', end_box='(2500,1500)')")
    assert r.returncode == 0, r.stdout + r.stderr
    assert not too_wide(r.stdout), too_wide(r.stdout)
    assert "-> end" in r.stdout and "(2500, 1500)" in r.stdout  # the drag's end on a row of its own
    r = agent("parse", "--format", "gui-r1", "--size", "1080x2400",
              "<answer>[{'action': 'type', 'point': [380, 150], 'input_text': '北京 weather, tomorrow, by the hour'}]"
              "</answer>")
    assert r.returncode == 0 and not too_wide(r.stdout), r.stdout
    assert "details:" in r.stdout and "北京 weather" in r.stdout


def test_a_parse_error_prints_no_syntax_warning():
    """Python's parser warns about '1a' ("invalid decimal literal") while the GUI-R1 / UI-TARS parsers read the
    answer: the warning must not reach the terminal, only the parse error."""
    for fmt, text in (("gui-r1", "<answer>[{'action': 'click', 'point': [1a, 2]}]</answer>"),
                      ("ui-tars-1.5", "Action: click(start_box='(1,2)', x=1a)")):
        r = agent("parse", "--format", fmt, "--size", "1080x2400", text)
        assert r.returncode == 1 and "parse error:" in r.stdout, r.stdout + r.stderr
        assert "SyntaxWarning" not in r.stdout + r.stderr and not too_wide(r.stdout)


def test_eval_table_keeps_whole_environment_names_at_80_columns(tmp_path):
    r = agent("eval", "--suite", "generated", "--tasks", "click-easy", "form", "--policy", "oracle", "--episodes", "1",
              "--runs-dir", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    table = r.stdout[r.stdout.index("eval "):r.stdout.index("trajectories:")]  # the paths after it are paths
    assert not too_wide(table), too_wide(table)
    assert "…" not in table
    for name in ("generated/click-easy", "generated/form", "overall"):
        assert name in table
    assert "ms per step" in table and "decide" in table  # the phases moved to a table of their own


def test_each_warning_is_one_line_and_library_lines_come_once():
    code = """
import logging, warnings
from agent.cli.common import setup_logging
setup_logging(0)
warnings.warn("first line\\nsecond line", FutureWarning)
import huggingface_hub  # adds a stderr handler of its own when imported; setup_logging took it off
logging.getLogger("huggingface_hub.utils._http").warning("Retrying in 1s [Retry 1/5].")
"""
    r = procs.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    lines = r.stderr.splitlines()
    assert len([ln for ln in lines if "FutureWarning" in ln]) == 1, r.stderr
    assert any("FutureWarning: first line second line" in ln for ln in lines), r.stderr
    assert not any(ln.strip().startswith("warnings.warn") for ln in lines)  # no source line
    assert len([ln for ln in lines if "Retrying in 1s" in ln]) == 1, r.stderr


def test_headed_without_a_display_says_what_to_do(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    r = procs.run([sys.executable, "-m", "agent", "run", "--headed", "--runs-dir", str(tmp_path)], cwd=REPO,
                  env={**env, "COLUMNS": "80"}, capture_output=True, text=True, timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode == 1 and "--headed needs a display: set DISPLAY or run under xvfb-run" in out.replace(
        " (web.headless = false)", ""), out
    assert "has been closed" not in out

"""Untrusted text (a task, a page, a model's output, an error quoting any of those) is shown as text: never rich
markup, never terminal control, never HTML."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.terminal import plain
from envs.trajectory import iter_episodes
from tests.agent.test_cli import agent

HOSTILE_HTML = """<!doctype html><html><head><meta charset="utf-8"></head><body style="margin:0">
<button id="b" style="position:absolute;left:0;top:0;width:400px;height:200px">[bold red]pwned[/] [/b] \x1b]0;hi\x07
&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;</button></body></html>"""


@pytest.mark.parametrize("text", ["Click [/b]", "[red]x[/", "[link=file:///etc/passwd]here[/link]", "a\x1b[2Jb",
                                  "unknown config section [foo]: did you mean [bar]?", "\u202eevil", "[/]"])
def test_plain_text_prints_as_itself(text):
    from rich.console import Console

    console = Console(record=True, width=200, color_system=None)
    console.print(f"[bold]x[/] {plain(text)}")
    out = console.export_text()
    assert "\x1b" not in out and "\u202e" not in out
    shown = text.replace("\x1b", "\\x1b").replace("\u202e", "\\u202e")
    assert out.rstrip("\n") == f"x {shown}"


def test_hostile_task_page_and_model_output_go_through_a_run_as_text(tmp_path, site, pages_dir):
    (pages_dir / "hostile.html").write_text(HOSTILE_HTML, encoding="utf-8")
    script = tmp_path / "s.json"
    script.write_text(json.dumps([{"kind": "click", "point": [0.1, 0.1]}, "[bold]not json[/] \u001b[31m",
                                  {"kind": "finish", "text": "done [/i]"}]))
    result = agent("run", "Click [/b] the [red]button", "--url", site.url("hostile.html"), "--policy", "scripted",
                   "--script", str(script), "--runs-dir", str(tmp_path / "runs"), "--set", "settle.deadline_s=1")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "MarkupError" not in out and "Traceback" not in out
    assert "Click [/b] the [red]button" in out  # the task, as typed
    assert "[bold red]pwned[/]" in out  # the page's text under the click, as the page says it
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout  # no terminal control from the page or model
    assert "answer: done [/i]" in out
    (run_dir,) = (tmp_path / "runs").iterdir()
    shown = agent("show", str(run_dir))
    assert shown.returncode == 0 and "[bold red]pwned[/]" in shown.stdout and "\x1b" not in shown.stdout
    report = agent("report", str(run_dir))
    assert report.returncode == 0, report.stdout + report.stderr
    html = (run_dir / "report.html").read_text(encoding="utf-8")
    assert "<script>alert(1)" not in html and "&lt;/script&gt;" in html.replace("&amp;lt;", "&lt;")
    (episode,) = iter_episodes(run_dir)
    assert episode.record.task == "Click [/b] the [red]button"


def test_error_messages_keep_their_brackets(tmp_path):
    config = Path(tmp_path) / "c.toml"
    config.write_text("[agnet]\nmax_steps = 3\n")
    result = agent("run", "--config", str(config))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    # before, rich read "[agnet]" as a markup tag and printed "unknown config section : did you mean..."
    assert "unknown config section [agnet]: did you mean 'agent'?" in result.stdout

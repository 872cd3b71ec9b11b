"""The online run's learning curve (``agent.online.curve``): success rate per stretch of wall time, worked by hand,
and a figure for every run, also one with nothing to show."""

from __future__ import annotations

import json

import pytest

from agent.online.curve import curve_points, plot_online_curve


def rows(*episodes: tuple[float, str]) -> list[dict]:
    return [{"t": t, "outcome": outcome} for t, outcome in episodes]


def test_curve_points_by_hand():
    # end = 10 s, 2 bins: [0, 5) and [5, 10]; the aborted and interrupted episodes are left out
    points = curve_points(rows((1, "success"), (2, "failure"), (3, "aborted"), (6, "success"), (10, "success"),
                               (9, "interrupted")), bins=2)
    assert [(p["t_mid"], p["episodes"], p["successes"], p["episodes_total"]) for p in points] == [
        (2.5, 2, 1, 2), (7.5, 2, 2, 4)]
    assert points[0]["success_rate"] == 0.5 and points[1]["success_rate"] == 1.0
    assert points[0]["ci_low"] < 0.5 < points[0]["ci_high"]
    assert curve_points(rows((3, "aborted"), (4, "interrupted"))) == []


@pytest.mark.parametrize("episodes", [
    [(1, "success"), (2, "failure")],
    [(3, "aborted"), (4, "interrupted")],  # a run stopped before any episode finished normally
    [],
])
def test_every_run_gets_its_figure(tmp_path, episodes):
    jsonl = tmp_path / "online.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows(*episodes)) + "{not json\n")
    png = plot_online_curve(jsonl, tmp_path / "online_curve.png")
    assert png == tmp_path / "online_curve.png" and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_run_without_online_jsonl_gets_its_figure_too(tmp_path):
    png = plot_online_curve(tmp_path / "missing.jsonl", tmp_path / "online_curve.png")
    assert png.is_file()

"""``agent report`` shows a demonstration like an agent run (marked as the person's, target boxes on the frames), and
``agent data show RUN`` draws each recorded step's target box and point on its frame."""

from __future__ import annotations

import re
from pathlib import Path

import cv2
import numpy as np
import pytest

from agent.cli import main as cli_main
from agent.report import build_report
from envs.grounding_draw import BOX_RGB, FIRST_POINT_RGB
from envs.trajectory import read_episode
from tests.support.web_demo import form_page, record_web_demo


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from envs.site import LocalSite

    root = tmp_path_factory.mktemp("views")
    (root / "pages").mkdir()
    (root / "pages" / "form.html").write_text(form_page(), encoding="utf-8")
    with LocalSite(root / "pages") as site:
        return record_web_demo(root / "runs", site.url("form.html"))


def test_the_report_marks_the_demonstration_and_draws_its_target_boxes(demo):
    page = build_report(demo.parent).read_text(encoding="utf-8")
    assert 'data-actor="human"' in page and "demonstration (human)" in page
    episode = read_episode(demo)
    boxed = [s for s in episode.steps if s.target_box is not None]
    drawn = re.findall(r'<rect class="target-box" data-box="([^"]+)"', page)
    assert len(drawn) == len(boxed) >= 5
    assert [tuple(float(v) for v in d.split(",")) for d in drawn] == [tuple(s.target_box) for s in boxed]
    assert "element #ok" in page  # the recorded element of the first click
    assert "s3cret-pass" not in page


def test_data_show_draws_each_steps_box_and_point(demo, tmp_path, capsys):
    out = tmp_path / "drawn"
    assert cli_main(["data", "show", str(demo.parent), "--out", str(out)]) == 0
    assert "drew 8 steps" in capsys.readouterr().out
    episode = read_episode(demo)
    first = episode.steps[0]  # the click on OK
    picture = cv2.cvtColor(cv2.imread(str(out / f"{demo.name}_0000.png")), cv2.COLOR_BGR2RGB)
    h, w = episode.frame(first).shape[:2]
    assert picture.shape[0] > h and picture.shape[1] == w  # the frame and its caption strip below it
    left, top = int(first.target_box[0] * w), int(first.target_box[1] * h)
    assert tuple(picture[top + 10, left]) == BOX_RGB  # the box's left edge
    x, y = (int(v * s) for v, s in zip(first.action["point"], (w, h)))
    assert tuple(picture[y, x]) == FIRST_POINT_RGB  # the point's cross
    assert np.array_equal(picture[:h][5, 5], episode.frame(first)[5, 5])  # the frame itself is untouched elsewhere
    # one episode folder works too
    assert cli_main(["data", "show", str(demo), "--out", str(tmp_path / "one")]) == 0
    assert len(list((tmp_path / "one").glob("*.png"))) == 8

"""Files on disk never run code or read outside their folder (docs/security.md, "Files on disk"): each test is an
attack a file someone else wrote can make: a task file that runs a command or starts at a local file, a FIFO or a
device where a task file should be, a trajectory whose ``frame_path`` names another file, a dataset whose image is
any absolute path or a pixel bomb, a page served from a task folder that links out of it."""

from __future__ import annotations

import json
import os
import shutil
import struct
import sys
import threading
import urllib.error
import urllib.request
import zlib
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from devices.errors import DeviceError
from devices.files import MAX_IMAGE_PIXELS, check_image, confined, header_size, read_regular
from devices.frames import decode
from envs.derived import commands_of, load_task, register_tasks, trust_tasks
from envs.errors import EnvError, RecordFormatError, TaskFileError
from envs.registry import REGISTRY, make
from envs.site import LocalSite
from envs.trajectory import read_episode
from tests.conftest import REPO

RUN = REPO / "tests" / "fixtures" / "run-v1"


def task_file(folder: Path, name: str, **fields: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    task = {"format": "handeye-task/1", "name": name, "instruction": "Save the document", "device": "desktop",
            "conditions": [{"kind": "window_title", "value": "saved"}], **fields}
    path = folder / f"{name}.json"
    path.write_text(json.dumps(task), encoding="utf-8")
    return path


@pytest.fixture
def tasks(tmp_path: Path):
    folder = tmp_path / "downloaded" / "tasks"
    folder.mkdir(parents=True)
    yield folder
    register_tasks(tmp_path / "nowhere")  # no task of this test stays registered


def png_bomb(width: int, height: int) -> bytes:
    """A valid PNG of ``width`` x ``height`` black RGB pixels, compressed to about a MiB for 20000 x 20000."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    packer, row, parts = zlib.compressobj(9), bytes(1 + 3 * width), []
    for _ in range(height):
        parts.append(packer.compress(row))
    parts.append(packer.flush())
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", b"".join(parts)) + chunk(b"IEND", b""))


@pytest.fixture(scope="module")
def bomb() -> bytes:
    data = png_bomb(20000, 20000)
    assert len(data) < 2 * 1024 * 1024  # a small file ...
    assert header_size(data) == (20000, 20000)  # ... that decodes to 1.2 GB per copy
    return data


# -- task files ----------------------------------------------------------------------------------------------------
def test_a_task_file_in_a_downloaded_folder_does_not_run_its_command(tasks, tmp_path):
    marker = tmp_path / "ran"
    command = [sys.executable, "-c", f"open({str(marker)!r}, 'w').write('pwned')"]
    task_file(tasks, "evil", start={"command": command, "wait_s": 0})
    assert register_tasks(tasks) == ["tasks/evil"]
    assert "needs --trust-tasks" in REGISTRY["tasks/evil"].description  # agent envs says so
    with pytest.raises(TaskFileError) as refused:
        make("tasks/evil")
    message = str(refused.value)
    assert "start.command runs" in message and "on this machine" in message
    assert f"--trust-tasks {tasks.resolve()}" in message  # exactly the flag that would let it run
    assert not marker.exists()


def test_an_android_task_runs_only_force_stops_without_trust(tasks):
    base = {"device": "android", "conditions": [{"kind": "activity", "package": "com.example.notes"}]}
    task_file(tasks, "recorded", **base, start={"package": "com.example.notes",
                                               "commands": ["am force-stop com.example.list"]})
    for i, line in enumerate(["rm -rf /sdcard/DCIM", "am force-stop com.x; rm -rf /sdcard",
                              "am force-stop com.x && reboot", "am  force-stop com.x\nreboot"]):
        task_file(tasks, f"evil{i}", **base, start={"package": "com.example.notes", "commands": [line]})
    register_tasks(tasks)
    make("tasks/recorded")  # what agent record --make-task derives: usable as it is
    for i in range(4):
        with pytest.raises(TaskFileError, match=r"start.commands runs .* on the phone .*--trust-tasks"):
            make(f"tasks/evil{i}")


def test_a_trusted_folder_runs_its_commands_and_no_other(tasks, tmp_path):
    other = tmp_path / "other"
    task_file(tasks, "mine", start={"command": ["true"]})
    task_file(other, "theirs", start={"command": ["true"]})
    task_file(tasks / "sub", "nested", start={"command": ["true"]})
    assert commands_of(load_task(tasks / "mine.json")) == ("true",)
    trust_tasks(tasks)  # this process only (each test process is new for the CLI; here: a folder nobody reuses)
    from envs.derived.env import DerivedTaskEnv

    assert DerivedTaskEnv(tasks / "mine.json").spec.name == "mine"
    for path in (other / "theirs.json", tasks / "sub" / "nested.json"):  # trust is by folder, not inherited
        with pytest.raises(TaskFileError, match="--trust-tasks"):
            DerivedTaskEnv(path)
    with pytest.raises(TaskFileError, match="not a folder"):
        trust_tasks(tmp_path / "missing")


@pytest.mark.parametrize("url", ["file:///etc/passwd", "FILE:///etc/passwd", "file:/etc/passwd", "file:etc/passwd",
                                 "view-source:file:///etc/passwd", "http:///etc/passwd", "chrome://settings",
                                 "javascript:alert(1)", "data:text/html,<b>x</b>", "about:blank", "/etc/passwd",
                                 " file:///etc/passwd"])
def test_a_task_file_starts_only_at_a_web_address(tasks, url):
    path = task_file(tasks, "local", device="web", start={"url": url},
                     conditions=[{"kind": "text_visible", "text": "root"}])
    with pytest.raises(TaskFileError, match="start.url .* is not an http or https address"):
        load_task(path)
    register_tasks(tasks)
    assert REGISTRY["tasks/local"].description.startswith("cannot be loaded")
    with pytest.raises(TaskFileError):
        make("tasks/local")


def test_web_addresses_and_pages_next_to_the_task_still_load(tasks):
    assert load_task(task_file(tasks, "web", device="web", start={"url": "https://example.com/a?b=1"},
                               conditions=[{"kind": "text_visible", "text": "x"}])).start.url
    (tasks / "page.html").write_text("<p>x</p>", encoding="utf-8")
    assert load_task(task_file(tasks, "page", device="web", start={"page": "page.html"},
                               conditions=[{"kind": "text_visible", "text": "x"}])).start.page == "page.html"


def _register_in_thread(folder: Path) -> list[str]:
    """register_tasks in a thread given 60 s: a FIFO would block ``open`` forever, /dev/zero would read forever."""
    out: list[Any] = []
    worker = threading.Thread(target=lambda: out.append(register_tasks(folder)), daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "register_tasks is stuck on a file that is not a regular file"
    return out[0]


def test_a_fifo_or_a_device_named_like_a_task_is_refused_without_waiting(tasks):
    task_file(tasks, "good", start={})
    os.mkfifo(tasks / "fifo.json")
    (tasks / "zero.json").symlink_to("/dev/zero")
    (tasks / "null.json").symlink_to("/dev/null")
    assert _register_in_thread(tasks) == ["tasks/fifo", "tasks/good", "tasks/null", "tasks/zero"]
    assert REGISTRY["tasks/good"].description.startswith("desktop: ")
    for name, kind in (("fifo", "a FIFO"), ("zero", "a character device"), ("null", "a character device")):
        description = REGISTRY[f"tasks/{name}"].description
        assert description.startswith("cannot be loaded") and kind in description, description


def test_a_fifo_given_as_a_dataset_or_script_is_refused_without_waiting(tmp_path):
    from devices.bounded_json import read_bounded

    fifo = tmp_path / "data.json"
    os.mkfifo(fifo)
    out: list[Any] = []

    def read() -> None:
        try:
            read_bounded(fifo)
        except ValueError as e:
            out.append(str(e))

    worker = threading.Thread(target=read, daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "read_bounded is stuck on a FIFO"
    assert out and "is not a regular file (a FIFO)" in out[0]


def test_read_regular_bounds_what_it_reads(tmp_path):
    big = tmp_path / "big"
    big.write_bytes(b"x" * 1001)
    assert read_regular(big, 1001) == b"x" * 1001
    with pytest.raises(ValueError, match="1,001 bytes, more than 1,000"):
        read_regular(big, 1000)
    with pytest.raises(ValueError, match="a folder"):
        read_regular(tmp_path, 1000)


# -- trajectories --------------------------------------------------------------------------------------------------
@pytest.fixture
def hostile_run(tmp_path: Path) -> tuple[Path, bytes]:
    """The fixture run, its steps' frame_path rewritten to name a secret outside it (absolute, ``..``, a symlink
    in frames/ that points out)."""
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"root:x:0:0:the secret\n")
    run = tmp_path / "runs" / "run"
    shutil.copytree(RUN, run)
    episode = run / "ep0000"
    (episode / "frames" / "link.png").symlink_to(secret)
    steps = [json.loads(line) for line in (episode / "steps.jsonl").read_text(encoding="utf-8").splitlines()]
    for step, path in zip(steps, [str(secret), "../../../secret.txt", "frames/link.png"]):
        step["frame_path"] = path
    (episode / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps), encoding="utf-8")
    return run, secret.read_bytes()


def test_an_export_never_copies_a_file_a_record_names_outside_its_episode(hostile_run, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    from envs.export import export_run

    run, secret = hostile_run
    (run / "ep0000" / "steps.jsonl").write_text(
        (run / "ep0000" / "steps.jsonl").read_text(encoding="utf-8")
        + (RUN / "ep0000" / "steps.jsonl").read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    assert export_run(run, tmp_path / "out.parquet") == 1  # only the honest step's frame
    images = pq.read_table(tmp_path / "out.parquet", columns=["image"]).column(0).to_pylist()
    assert all(secret not in image["bytes"] for image in images)
    assert images[0]["bytes"] == (RUN / "ep0000" / "frames" / "0000.png").read_bytes()


def test_a_frame_path_out_of_its_episode_is_refused_by_every_reader(hostile_run):
    run, _ = hostile_run
    episode = read_episode(run / "ep0000")
    for step in episode.steps:
        with pytest.raises(RecordFormatError, match="frame_path"):
            episode.frame_bytes(step)
        with pytest.raises(RecordFormatError):
            episode.frame(step)


def test_the_trainer_and_the_report_do_not_follow_a_frame_path_out(hostile_run):
    from agent.report import build_report
    from train.data.trajectories import TrajectorySource
    from train.errors import PromptSourceError

    run, _ = hostile_run
    html = build_report(run).read_text(encoding="utf-8")
    assert "secret.txt" not in html and "link.png" not in html
    with pytest.raises(PromptSourceError, match="missing_frame: 2"):  # the third step has no action anyway
        TrajectorySource(run, only_successful=False, sft=True)


# -- datasets ------------------------------------------------------------------------------------------------------
def _png(value: int = 90) -> bytes:
    ok, data = cv2.imencode(".png", np.full((40, 60, 3), value, np.uint8))
    assert ok
    return data.tobytes()


def _parquet(path: Path, images: list[dict[str, Any]]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"image": image, "instruction": f"step {i}", "history": "None", "task_type": "low",
             "gt_action": "click", "gt_bbox": [0.5, 0.5], "gt_input_text": "no input text"}
            for i, image in enumerate(images)]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_a_dataset_image_path_is_confined_to_the_dataset_folder(tmp_path):
    pytest.importorskip("pyarrow")
    from envs.action_bench.records import iter_images, load_actions, read_image

    outside = tmp_path / "private.png"
    outside.write_bytes(_png(200))
    folder = tmp_path / "data"
    (folder / "img").mkdir(parents=True)
    (folder / "img" / "ok.png").write_bytes(_png(90))
    (folder / "img" / "link.png").symlink_to(outside)
    os.mkfifo(folder / "img" / "fifo.png")
    file = _parquet(folder / "guiodyssey_test.parquet", [
        {"bytes": None, "path": "img/ok.png"}, {"bytes": None, "path": str(outside)},
        {"bytes": None, "path": "../private.png"}, {"bytes": None, "path": "img/link.png"},
        {"bytes": None, "path": "img/fifo.png"}])
    (dataset,) = load_actions(file)
    images = [data for _, data in iter_images(dataset, dataset.records)]
    assert images == [_png(90), None, None, None, None]
    assert [read_image(r) for r in dataset.records] == images


def test_a_training_jsonl_image_path_is_confined_to_its_image_folder(tmp_path):
    from train.data.grounding import GroundingSource

    outside = tmp_path / "private.png"
    outside.write_bytes(_png(200))
    folder = tmp_path / "train"
    folder.mkdir()
    (folder / "ok.png").write_bytes(_png(90))
    (folder / "link.png").symlink_to(outside)
    rows = [{"image": name, "instruction": "click", "box": [1, 1, 10, 10]}
            for name in ("ok.png", str(outside), "../private.png", "link.png")]
    file = folder / "rows.jsonl"
    file.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    source = GroundingSource(file)
    assert [s.image_path.name for s in source.grounding_samples()] == ["ok.png"]
    assert [s.kind for s in source.skipped] == ["unsafe_path"] * 3


def test_a_pixel_bomb_is_refused_before_it_is_decoded(tmp_path, bomb):
    from envs.action_bench.records import decode_image
    from envs.grounding import read_rgb
    from train.samples import load_image

    path = tmp_path / "bomb.png"
    path.write_bytes(bomb)
    message = r"declares 20000x20000 pixels, more than 67,108,864"
    with pytest.raises(EnvError, match=message):
        decode_image(bomb)
    with pytest.raises(EnvError, match=message):
        read_rgb(path)
    with pytest.raises(DeviceError, match=message):
        decode(bomb)
    pytest.importorskip("PIL")
    with pytest.raises(ValueError, match="20000x20000|400000000 pixels"):  # PIL's own bound holds this one
        load_image(path)
    below_pil = tmp_path / "bomb9000.png"  # above handeye's bound, below the size where PIL warns or refuses
    below_pil.write_bytes(png_bomb(9000, 9000))
    with pytest.raises(ValueError, match="declares 9000x9000 pixels, more than 67,108,864"):
        load_image(below_pil)


def test_image_headers_are_read_for_every_format_opencv_writes_here():
    frame = np.zeros((123, 321, 3), np.uint8)
    for ext in (".png", ".jpg", ".bmp", ".webp"):
        ok, data = cv2.imencode(ext, frame)
        assert ok and header_size(data.tobytes()) == (321, 123), ext
        assert check_image(data.tobytes()) == (321, 123)
    jpeg = cv2.imencode(".jpg", frame)[1].tobytes()
    # a JPEG frame header after 40 KB of metadata (an APP1 segment) is still found
    app1 = b"\xff\xe1" + struct.pack(">H", 40002) + bytes(40000)
    assert header_size(jpeg[:2] + app1 + jpeg[2:]) == (321, 123)
    with pytest.raises(ValueError, match="not a PNG, JPEG, GIF, BMP or WebP image"):
        check_image(b"P6 99999 99999 255\n")  # a PPM OpenCV would decode: no size read, so refused
    assert MAX_IMAGE_PIXELS >= 7680 * 4320  # an 8K screen still decodes


@pytest.mark.parametrize("name", ["/etc/passwd", "../x", "a/../../x", "..\\x", "", "a\x00b"])
def test_confined_refuses_paths_out_of_their_folder(tmp_path, name):
    with pytest.raises(ValueError):
        confined(tmp_path, name)


# -- the served task folder ----------------------------------------------------------------------------------------
def test_a_task_folder_served_to_its_page_serves_nothing_outside_it(tmp_path):
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "page.html").write_text("<p>hello</p>", encoding="utf-8")
    (tmp_path / "secret.txt").write_text("the secret", encoding="utf-8")
    (folder / "leak.txt").symlink_to(tmp_path / "secret.txt")
    (folder / "up").symlink_to(tmp_path)
    os.mkfifo(folder / "fifo.html")
    with LocalSite(folder) as site:
        with urllib.request.urlopen(site.url("page.html"), timeout=30) as reply:
            assert reply.read() == b"<p>hello</p>"
        for path in ("leak.txt", "up/secret.txt", "fifo.html"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(site.url(path), timeout=30)
            assert refused.value.code == 404, path

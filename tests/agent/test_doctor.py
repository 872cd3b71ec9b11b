"""``agent doctor``: every part reported as ok or missing with what to install; only a required part that is
missing fails the check (exit 1); optional ones (adb, xdotool, torch, GPU) never do."""

from __future__ import annotations

import argparse
import os
import shutil
import sys

import pytest

from agent.cli import doctor
from tests.conftest import REPO
from tests.support import procs


def run_doctor(capsys) -> tuple[int, dict[str, str]]:
    code = doctor.main(argparse.Namespace())
    lines = [line.strip() for line in capsys.readouterr().out.splitlines() if line.strip()]
    return code, {line.split(":", 1)[0].split(" ", 1)[1]: line for line in lines}


def test_the_command_reports_the_optional_parts_too():
    r = procs.run([sys.executable, "-m", "agent", "doctor"], cwd=REPO, env={**os.environ, "COLUMNS": "200"},
                  capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    for what in ("adb: ", "xdotool: ", "torch: ", "GPU: "):
        assert f"ok {what}" in r.stdout, r.stdout
    import torch

    assert ("none: CPU only" in r.stdout) == (not torch.cuda.is_available())


def test_missing_optional_parts_are_reported_with_their_hint_and_do_not_fail(monkeypatch, capsys):
    import adbutils

    def no_adb() -> str:
        raise adbutils.AdbError("no adb binary")

    monkeypatch.setattr(adbutils, "adb_path", no_adb)
    which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name in ("adb", "xdotool")
                        else which(name, *a, **k))
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    code, lines = run_doctor(capsys)
    assert code == 0
    assert lines["adb"].startswith("missing") and "apt-get install adb" in lines["adb"]
    assert lines["adb"].endswith("(optional)")
    assert lines["xdotool"].startswith("missing") and "apt-get install xdotool" in lines["xdotool"]
    assert lines["torch"].startswith("missing") and "pip install 'handeye[model]'" in lines["torch"]
    assert lines["GPU"].startswith("?") and "install torch to check" in lines["GPU"]


def test_a_missing_required_part_fails(monkeypatch, capsys):
    missing = doctor.Finding("browser", False, "run make setup", required=True)
    monkeypatch.setattr(doctor, "checks", lambda: [lambda: [doctor.Finding("GPU", False, "x")], lambda: [missing]])
    code, lines = run_doctor(capsys)
    assert code == 1 and lines["browser"] == "missing browser: run make setup"
    assert lines["GPU"] == "missing GPU: x (optional)"


def test_each_device_kind_says_what_it_needs(monkeypatch, capsys):
    """The report asks every registered device kind for its parts: a kind added to the registry is checked without
    a line of the doctor changing, and its required parts fail the check."""
    from dataclasses import replace

    from devices import registry

    web = registry.device_kind("web")
    extra = replace(web, name="kiosk", requirements=lambda: [registry.Requirement("kiosk driver", False,
                                                                                  "apt-get install kiosk",
                                                                                  required=True)])
    monkeypatch.setitem(registry.REGISTRY, "kiosk", extra)
    code, lines = run_doctor(capsys)
    assert code == 1
    assert lines["kiosk driver"] == "missing kiosk driver: apt-get install kiosk"
    assert lines["browser"].startswith("ok browser")


@pytest.mark.parametrize("available", [False, True])
def test_gpu_none_is_a_valid_answer(monkeypatch, available):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: "NVIDIA H200")
    found = doctor._gpu()
    assert found.ok and not found.required
    assert found.detail == ("2 x NVIDIA H200" if available else "none: CPU only (models run, slowly; training wants a GPU)")

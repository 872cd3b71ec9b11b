"""The six offline action benchmarks GUI-R1 reports (arXiv 2504.10458, its Tables 2 and 3), as its released code
names and prompts them (ritzz-ai/GUI-R1: ``guir1/inference.sh`` names the test files, each
``guir1/inference/inference_vllm_*.py`` script enumerates its benchmark's actions in the prompt).

A benchmark is named by ``--benchmark`` or inferred from the file name (``androidcontrol_low_test.parquet`` ->
``androidcontrol-low``). The published rows are the paper's Type / GR / SR for GUI-R1-3B and -7B, what
``agent eval --suite actions`` prints beside its own figures for those models.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from envs.errors import EnvError

__all__ = ["BENCHMARKS", "GENERIC", "Benchmark", "benchmark", "infer_benchmark"]


@dataclass(frozen=True, slots=True)
class Benchmark:
    name: str
    """handeye's name: androidcontrol-low, guiodyssey, ..."""
    title: str
    file_stem: str
    """The released test file's name without ``.parquet``."""
    actions: tuple[str, ...]
    """The action names the released inference script enumerates, in its order."""
    variant: str
    """GUI-R1's prompt variant for it (``policy.formats.guir1.ACTION_LISTS``)."""
    group: str
    """The platform, used as the record's ``group`` when a file has no such column."""
    published: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    """Model -> (Type, GR, SR) in percent, as the GUI-R1 paper reports them."""


_ANDROID = ("wait", "long_press", "click", "press_back", "type", "open_app", "scroll")

BENCHMARKS: dict[str, Benchmark] = {b.name: b for b in (
    Benchmark("androidcontrol-low", "AndroidControl-Low", "androidcontrol_low_test", _ANDROID, "androidcontrol",
              "mobile", {"GUI-R1-3B": (83.68, 81.59, 64.41), "GUI-R1-7B": (85.17, 84.02, 66.52)}),
    Benchmark("androidcontrol-high", "AndroidControl-High", "androidcontrol_high_test", _ANDROID, "androidcontrol",
              "mobile", {"GUI-R1-3B": (58.04, 56.24, 46.55), "GUI-R1-7B": (71.63, 65.56, 51.67)}),
    Benchmark("guiodyssey", "GUI-Odyssey", "guiodyssey_test",
              ("press_back", "press_recent", "press_home", "complete", "long_press", "scroll", "click", "impossible",
               "type"), "guiodyssey", "mobile",
              {"GUI-R1-3B": (54.84, 41.52, 41.33), "GUI-R1-7B": (65.49, 43.64, 38.79)}),
    Benchmark("omniact-web", "OmniAct-Web", "omniact_web_test",
              ("press_tab", "moveto", "rightclick", "press_enter", "scroll", "click", "press_down", "hotkey",
               "press_space", "doubleclick"), "omniact-web", "web",
              {"GUI-R1-3B": (88.58, 75.10, 75.08), "GUI-R1-7B": (91.16, 77.29, 77.35)}),
    Benchmark("omniact-desktop", "OmniAct-Desktop", "omniact_desktop_test", ("click", "moveto", "press_pgdn"),
              "omniact-desktop", "desktop", {"GUI-R1-3B": (91.86, 78.37, 78.31), "GUI-R1-7B": (92.20, 83.36, 83.33)}),
    Benchmark("guiact-web", "GUI-Act-Web", "guiact_web_test", ("scroll", "click", "complete"), "guiact-web", "web",
              {"GUI-R1-3B": (89.86, 87.42, 76.31), "GUI-R1-7B": (90.85, 88.06, 80.31)}),
)}


GENERIC = Benchmark("actions", "GUI-R1-style action records", "", tuple(dict.fromkeys(
    a for b in BENCHMARKS.values() for a in b.actions)), "high", "")
"""Action records that are no benchmark (GUI-R1-3K's training file, an exported dataset): every name is known."""


def benchmark(name: str) -> Benchmark:
    """The benchmark called ``name`` (handeye's name, its title or its file stem, any case)."""
    key = _key(name)
    for b in BENCHMARKS.values():
        if key in (_key(b.name), _key(b.title), _key(b.file_stem), _key(b.file_stem.removesuffix("_test"))):
            return b
    raise EnvError(f"no action benchmark {name!r}; known: {', '.join(BENCHMARKS)}")


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def infer_benchmark(file_name: str) -> Benchmark | None:
    """The benchmark a released test file's name names (``guiodyssey_test.parquet``, ``omniact-web.jsonl``), or
    None when the name says nothing."""
    key = _key(file_name.rsplit(".", 1)[0])
    if "androidcontrol" in key:
        return BENCHMARKS["androidcontrol-high" if "high" in key else "androidcontrol-low"] \
            if ("high" in key or "low" in key) else None
    if "odyssey" in key:
        return BENCHMARKS["guiodyssey"]
    if "omniact" in key:
        return BENCHMARKS["omniact-desktop" if "desktop" in key else "omniact-web"] \
            if ("desktop" in key or "web" in key) else None
    if "guiact" in key:
        return BENCHMARKS["guiact-web"]
    return None

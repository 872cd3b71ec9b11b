"""The package layering of DESIGN.md, checked on the source: who may import whom."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MAY_IMPORT = {
    "devices": {"devices"},
    "policy": {"policy", "devices"},
    "envs": {"envs", "devices"},
    "train": {"train", "devices", "policy", "envs"},
    "agent": {"agent", "devices", "policy", "envs", "train"},
}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names & set(MAY_IMPORT)


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_packages_import_only_what_the_design_allows(package):
    offenders = {
        str(path.relative_to(REPO)): sorted(imported_packages(path) - MAY_IMPORT[package])
        for path in sorted((REPO / package).rglob("*.py"))
        if imported_packages(path) - MAY_IMPORT[package]
    }
    assert not offenders, f"{package}/ may import only {sorted(MAY_IMPORT[package])}: {offenders}"

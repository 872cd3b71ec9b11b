"""The shape of the code, checked on the source (docs/design.md, "How the code is laid out"):

- the package layering: who may import whom;
- no import circles between modules (imports inside functions and under TYPE_CHECKING count too);
- no module imports a private (underscore) name from another module;
- no source file over 600 lines and no function over 80 lines (docstring excluded), unless its docstring says why
  (the words "long because");
- one definition per public top-level name across the packages.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from functools import cache
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
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80
EXCUSE = "long because"
COMMAND_INTERFACE = {"NAME", "add_parser", "main"}
"""What every agent/cli command module defines (the dispatcher's table is built from them): one meaning, many
modules, by design."""


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


# -- the module graph ------------------------------------------------------------------------------------------------
@cache
def modules(root: Path = REPO) -> dict[str, Path]:
    out = {}
    for package in MAY_IMPORT:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


@cache
def tree(module: str, root: Path = REPO) -> ast.Module:
    return ast.parse(modules(root)[module].read_text(encoding="utf-8"))


def _target(node: ast.ImportFrom, module: str, root: Path) -> str | None:
    if not node.level:
        return node.module
    base = module.split(".")
    if modules(root)[module].name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(module: str, root: Path = REPO) -> list[tuple[str, str | None]]:
    """(imported module, name imported from it or None) for every import in ``module``, wherever it stands."""
    mods, out = modules(root), []
    for node in ast.walk(tree(module, root)):
        if isinstance(node, ast.Import):
            out += [(a.name, None) for a in node.names if a.name in mods]
        elif isinstance(node, ast.ImportFrom):
            target = _target(node, module, root)
            for a in node.names:
                if f"{target}.{a.name}" in mods:
                    out.append((f"{target}.{a.name}", None))
                elif target in mods:
                    out.append((target, a.name))
    return out


def cycles(root: Path = REPO) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    graph = {m: {t for t, _ in imports(m, root)} for m in modules(root)}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def private_imports(root: Path = REPO) -> list[str]:
    return [f"{m} imports {name} from {t}" for m in modules(root) for t, name in imports(m, root)
            if name is not None and name.startswith("_") and t != m]


def test_no_import_circles():
    assert cycles() == []


def test_no_module_imports_a_private_name_of_another():
    assert private_imports() == []


# -- sizes -----------------------------------------------------------------------------------------------------------
def _docstring(node: ast.AST) -> str:
    return ast.get_docstring(node) or ""


def long_files(root: Path = REPO) -> list[str]:
    offenders = []
    for m, path in modules(root).items():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_FILE_LINES and EXCUSE not in _docstring(tree(m, root)):
            offenders.append(f"{path.relative_to(root)}: {lines} lines")
    return offenders


def long_functions(root: Path = REPO) -> list[str]:
    offenders = []
    for m, path in modules(root).items():
        for node in ast.walk(tree(m, root)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            first = node.body[0]
            doc_lines = (first.end_lineno - first.lineno + 1
                         if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                         and isinstance(first.value.value, str) else 0)
            length = node.end_lineno - node.lineno + 1 - doc_lines
            if length > MAX_FUNCTION_LINES and EXCUSE not in _docstring(node):
                offenders.append(f"{path.relative_to(root)}::{node.name}: {length} lines")
    return offenders


def test_no_file_over_600_lines_unless_it_says_why():
    assert long_files() == []


def test_no_function_over_80_lines_unless_its_docstring_says_why():
    assert long_functions() == []


# -- names -----------------------------------------------------------------------------------------------------------
def public_definitions(root: Path = REPO) -> dict[str, list[str]]:
    """Public top-level classes and functions, and public assignments that are not CONSTANTS or ``log``, by name."""
    found: dict[str, list[str]] = defaultdict(list)
    for m in modules(root):
        for node in tree(m, root).body:
            names: list[str] = []
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [node.name]
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [t.id for t in targets if isinstance(t, ast.Name) and not t.id.isupper() and t.id != "log"]
            for name in names:
                if name.startswith("_"):
                    continue
                if name in COMMAND_INTERFACE and m.startswith("agent.cli"):
                    continue
                found[name].append(m)
    return found


def test_one_definition_per_public_name():
    twice = {name: where for name, where in public_definitions().items() if len(where) > 1}
    assert twice == {}


def test_the_checks_catch_what_they_are_for(tmp_path):
    # The same checks on a made-up tree with one of each fault.
    (tmp_path / "devices").mkdir()
    (tmp_path / "devices" / "__init__.py").write_text("")
    (tmp_path / "devices" / "a.py").write_text("from devices.b import _hidden\n\n\nclass Box:\n    pass\n")
    body = "    x = 1\n" * (MAX_FUNCTION_LINES + 1)
    (tmp_path / "devices" / "b.py").write_text(
        "def _hidden():\n    from devices import a\n\n\nclass Box:\n    pass\n\n\ndef long():\n" + body
        + "\n\ndef excused():\n    \"\"\"long because a table is spelled out.\"\"\"\n" + body
        + "#\n" * MAX_FILE_LINES)
    assert cycles(tmp_path) == [["devices.a", "devices.b"]]
    assert private_imports(tmp_path) == ["devices.a imports _hidden from devices.b"]
    assert long_functions(tmp_path) == [f"devices/b.py::long: {MAX_FUNCTION_LINES + 2} lines"]  # with its def line
    assert long_files(tmp_path) == [f"devices/b.py: {len((tmp_path / 'devices' / 'b.py').read_text().splitlines())} lines"]
    assert {k: v for k, v in public_definitions(tmp_path).items() if len(v) > 1} == {"Box": ["devices.a", "devices.b"]}

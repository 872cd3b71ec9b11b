"""The shape of the code, checked on the source (docs/design.md, "How the code is laid out"):

- the package layering: who may import whom;
- no import circles between modules (imports inside functions and under TYPE_CHECKING count too);
- no module imports a private (underscore) name from another module, and none reaches a private attribute that it
  does not define itself (``obj._name``; ``self._name`` and ``cls._name`` are the object's own), apart from the
  entries of ``FOREIGN_PRIVATE`` (outside libraries without a public way, each with its reason);
- no source file over 600 lines and no function over 80 lines (docstring excluded), unless its docstring says why
  (the words "long because");
- one definition per public top-level name across the packages;
- every exception class of a package is defined in its ``errors.py`` (private helper exceptions, ``_Name``, may stay
  where they are used), and that file's docstring draws each of them in its tree, and nothing else.
- docs/design.md's "How the code is laid out" names every module of the packages, and no module that is gone.

The rules on private names, sizes and errors hold for bench/ too; the layering, the circles and the one definition
per name are the packages' (every bench script has its own ``main``).
"""

from __future__ import annotations

import ast
import builtins
import re
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
CHECKED = (*MAY_IMPORT, "bench")
"""What the rules on private names, sizes and errors read: the packages and the benchmarks."""
FOREIGN_PRIVATE = {
    ("train.checkpoint", "np._core.multiarray._reconstruct"):
        "NumPy's own pickle allow-list for torch.load(weights_only=True) names this function: the one way to let "
        "format 1 checkpoints (which hold NumPy's RNG state) load without allowing arbitrary objects",
    ("devices.desktop.device", "loaded._display"):
        "pyautogui binds its X connection (_pyautogui_x11._display) once, when first imported, and has no public "
        "way to ask which display that is; the device reads it to refuse a second display in one process with a "
        "message instead of driving the wrong screen",
    ("agent.fleet.mqtt", "client._client"):
        "aiomqtt 2.5 has no option for manual acknowledgements; its paho client has (manual_ack_set, ack): the "
        "learner acknowledges a message only once it is in its inbox log, so a kill loses nothing the broker forgot",
}
"""Private attributes of outside libraries that a module may read, by (module, expression), with the reason."""
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
    """Every module of the packages and of bench/, by dotted name."""
    out = {}
    for package in CHECKED:
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


def package_modules(root: Path = REPO) -> list[str]:
    """The modules of the packages (bench/ left out)."""
    return [m for m in modules(root) if m.split(".")[0] in MAY_IMPORT]


def cycles(root: Path = REPO) -> list[list[str]]:
    """Strongly connected groups of more than one module of the packages (Tarjan)."""
    graph = {m: {t for t, _ in imports(m, root) if t.split(".")[0] in MAY_IMPORT} for m in package_modules(root)}
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


def _own_names(module: ast.Module) -> set[str]:
    """Every name a module defines: functions, classes, assigned names, arguments, imports, and attributes it sets
    on ``self`` or ``cls``."""
    names: set[str] = set()
    for node in ast.walk(module):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif (isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load) and _on_self(node)):
            names.add(node.attr)
    return names


def _on_self(node: ast.Attribute) -> bool:
    return isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")


def private_attributes(root: Path = REPO) -> list[str]:
    """``module:line: expression`` for every private attribute a module reads or sets on an object other than its
    own ``self``/``cls`` that the module does not define (``FOREIGN_PRIVATE`` aside)."""
    out = []
    for m in modules(root):
        module = tree(m, root)
        own, allowed = _own_names(module), [e for (where, e) in FOREIGN_PRIVATE if where == m]
        for node in ast.walk(module):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")) or node.attr.endswith("__"):
                continue
            if _on_self(node) or node.attr in own:
                continue
            text = ast.unparse(node)
            if any(e == text or e.startswith(text + ".") for e in allowed):
                continue
            out.append(f"{m}:{node.lineno}: {text}")
    return out


def test_no_import_circles():
    assert cycles() == []


def test_no_module_imports_a_private_name_of_another():
    assert private_imports() == []


def test_no_module_reaches_a_private_attribute_it_does_not_define():
    assert private_attributes() == []
    for (m, expression), why in FOREIGN_PRIVATE.items():  # each exception is still needed, and says why
        assert m in modules() and expression in modules()[m].read_text(encoding="utf-8") and why, (m, expression)


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
    for m in package_modules(root):
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


# -- errors ----------------------------------------------------------------------------------------------------------
BUILTIN_EXCEPTIONS = frozenset(n for n, v in vars(builtins).items()
                               if isinstance(v, type) and issubclass(v, BaseException))
BRANCH = re.compile(r"[├└]── ([A-Z]\w*)")
"""A class under another in an errors.py tree (continuation lines start with ``│`` or spaces: not matched)."""


def _base_name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def exception_classes(root: Path = REPO) -> dict[str, list[str]]:
    """Module names by exception class name: every class deriving (by name, through any module) from a builtin
    exception."""
    classes = [(m, node) for m in modules(root) for node in ast.walk(tree(m, root)) if isinstance(node, ast.ClassDef)]
    known, found = set(BUILTIN_EXCEPTIONS), defaultdict(list)
    grew = True
    while grew:
        grew = False
        for m, node in classes:
            if node.name not in found or m not in found[node.name]:
                if any(_base_name(b) in known for b in node.bases):
                    known.add(node.name)
                    found[node.name].append(m)
                    grew = True
    return found


def error_tree(module: ast.Module) -> list[str]:
    """The classes an errors.py docstring draws: the root (the first word of the line before the first branch)
    and every branch."""
    lines = _docstring(module).splitlines()
    first = next((i for i, line in enumerate(lines) if BRANCH.search(line)), None)
    if first is None:
        return []
    root = lines[first - 1].split()[:1] if first else []
    return root + [match.group(1) for line in lines[first:] if (match := BRANCH.search(line))]


def misplaced_errors(root: Path = REPO, excused: frozenset[str] = frozenset()) -> list[str]:
    """Public exception classes defined outside their package's errors.py, and errors.py trees that do not draw
    exactly the public exception classes of their package; ``excused``: class names left out of both checks."""
    out, by_package = [], defaultdict(set)
    for name, where in exception_classes(root).items():
        for m in where:
            package = m.split(".")[0]
            if name.startswith("_") or name in excused:
                continue
            by_package[package].add(name)
            if m != f"{package}.errors":
                out.append(f"{name} is defined in {m}, not {package}.errors")
    for package in sorted(by_package):
        module = f"{package}.errors"
        drawn = error_tree(tree(module, root)) if module in modules(root) else []
        if missing := sorted(by_package[package] - set(drawn)):
            out.append(f"{module}'s tree does not draw {', '.join(missing)}")
        if extra := sorted(set(drawn) - by_package[package] - excused):
            out.append(f"{module}'s tree draws {', '.join(extra)}, which {package}/ does not define")
    return out


def test_every_exception_is_in_its_packages_errors_py_and_drawn_in_its_tree():
    assert misplaced_errors() == []


def test_docs_errors_md_draws_every_exception_class():
    page = (REPO / "docs" / "errors.md").read_text(encoding="utf-8")
    public = {name for name in exception_classes() if not name.startswith("_")}
    assert sorted(name for name in public if not re.search(rf"[├└]── {name}\b|\.{name}\b", page)) == []


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
    (tmp_path / "devices" / "c.py").write_text(
        "from devices import b\n\n\nclass Probe(ValueError):\n    pass\n\n\nclass _Helper(Exception):\n    pass\n\n\n"
        "class Own:\n    def __init__(self):\n        self._mine = 1\n\n"
        "    def peek(self, other):\n        return other._mine, b._secret, self._anything, other.__class__\n")
    (tmp_path / "devices" / "errors.py").write_text(
        '"""Errors.\n\n    DeviceError     base class\n    ├── Gone        drawn, not defined\n'
        '    └── Probe2      drawn\n                    and a continuation line that names NotAClass\n"""\n\n\n'
        "class DeviceError(Exception):\n    pass\n\n\nclass Lost(DeviceError):\n    pass\n\n\n"
        "class Probe2(Lost):\n    pass\n")
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "checkpoint.py").write_text(
        "import numpy as np\n\n\ndef allowed():\n    return np._core.multiarray._reconstruct, np._other\n")
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "x.py").write_text(
        "from devices.b import _hidden\n\n\ndef slow(dev):\n    dev._fresh = None\n" + body
        + "\n\nclass Box:\n    pass\n")
    assert cycles(tmp_path) == [["devices.a", "devices.b"]]
    assert private_imports(tmp_path) == ["devices.a imports _hidden from devices.b",
                                         "bench.x imports _hidden from devices.b"]
    assert private_attributes(tmp_path) == ["devices.c:17: b._secret", "train.checkpoint:5: np._other",
                                            "bench.x:5: dev._fresh"]
    assert error_tree(tree("devices.errors", tmp_path)) == ["DeviceError", "Gone", "Probe2"]
    assert misplaced_errors(tmp_path) == ["Probe is defined in devices.c, not devices.errors",
                                          "devices.errors's tree does not draw Lost, Probe",
                                          "devices.errors's tree draws Gone, which devices/ does not define"]
    assert misplaced_errors(tmp_path, excused=frozenset({"Probe", "Lost", "Gone"})) == []
    assert long_functions(tmp_path) == [f"devices/b.py::long: {MAX_FUNCTION_LINES + 2} lines",  # with its def line
                                        f"bench/x.py::slow: {MAX_FUNCTION_LINES + 3} lines"]
    assert long_files(tmp_path) == [f"devices/b.py: {len((tmp_path / 'devices' / 'b.py').read_text().splitlines())} lines"]
    assert {k: v for k, v in public_definitions(tmp_path).items() if len(v) > 1} == {"Box": ["devices.a", "devices.b"]}


# -- docs/design.md's map of the code --------------------------------------------------------------------------------
LAYOUT_HEADING = "## How the code is laid out"
TICKED = re.compile(r"`([^`\s]+)`")


def layout_section(page: str) -> str:
    """The text of docs/design.md's "How the code is laid out", up to the next second-level heading."""
    assert LAYOUT_HEADING in page, f"docs/design.md has no section {LAYOUT_HEADING!r}"
    start = page.index(LAYOUT_HEADING) + len(LAYOUT_HEADING)
    end = page.find("\n## ", start)
    return page[start:] if end < 0 else page[start:end]


def unnamed_modules(section: str, root: Path = REPO) -> list[str]:
    """The modules of the packages that ``section`` does not name. A module is named by its path in backticks
    (```devices/registry.py```), or by a table row that names its folder and its file (```devices/android/``` and
    ```adb``` or ```adb.py```); a package's ``__init__.py`` also by its folder alone, anywhere in the section."""
    rows = [set(TICKED.findall(line)) for line in section.splitlines() if line.startswith("|")]
    named = set(TICKED.findall(section))
    missing = []
    for package in MAY_IMPORT:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            folder = rel.rpartition("/")[0] + "/"
            if rel in named or (path.name == "__init__.py" and folder in named):
                continue
            if not any(folder in row and ({path.stem, path.name} & row) for row in rows):
                missing.append(rel)
    return missing


def stale_paths(section: str, root: Path = REPO) -> list[str]:
    """Paths of Python modules that ``section`` names in backticks and that do not exist (a pattern such as
    ```agent/cli/<command>.py``` is not a path)."""
    return sorted({p for p in TICKED.findall(section)
                   if p.endswith(".py") and "/" in p and not set(p) & set("<>*{}") and not (root / p).is_file()})


def test_design_md_names_every_module_of_the_packages():
    section = layout_section((REPO / "docs" / "design.md").read_text(encoding="utf-8"))
    assert unnamed_modules(section) == [], "add a row for each to docs/design.md, \"How the code is laid out\""


def test_design_md_names_no_module_that_does_not_exist():
    section = layout_section((REPO / "docs" / "design.md").read_text(encoding="utf-8"))
    assert stale_paths(section) == [], "docs/design.md, \"How the code is laid out\", names modules that are gone"


def test_the_layout_check_catches_a_module_left_out(tmp_path):
    for path in ("devices/__init__.py", "devices/base.py", "devices/kiosk/__init__.py", "devices/kiosk/kind.py",
                 "devices/kiosk/device.py", "devices/kiosk/screen.py", "devices/pad/__init__.py",
                 "policy/__init__.py", "policy/model.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    page = ("# Design\n\n## How the code is laid out\n\n| to change … | open |\n|---|---|\n"
            "| the protocol | `devices/base.py` |\n| a kiosk, its entry | `devices/kiosk/` (`kind`, `device.py`) |\n"
            "| the policy | `policy/model.py`, `policy/gone.py` (once `policy/<name>.py`) |\n\n"
            "The kiosk's screen is `screen` in `devices/kiosk/`.\n\n"
            "## Choices\n\n| the pad | `devices/pad/` `devices/pad/__init__.py` |\n")
    section = layout_section(page)
    assert unnamed_modules(section, tmp_path) == [
        "devices/__init__.py",            # no row names its folder: devices/ itself is not named
        "devices/kiosk/screen.py",        # named outside a row: a sentence does not count
        "devices/pad/__init__.py",        # named only in the next section
        "policy/__init__.py",
    ]
    assert stale_paths(section, tmp_path) == ["policy/gone.py"]

"""The library's shape, held by a test so that it stays true: small modules, short
functions, classes that hold logic kept small, no import circle between modules, and
no SQL outside the storage repositories (docs/design.md, "The map").  The benchmarks
are held to the same module and function sizes and to no import circle."""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ("sidecar", "indexes", "cold_store")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60
MAX_CLASS_LOGIC_LINES = 300
SQL = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|CREATE|DROP|ALTER|WITH)\s")


def modules(packages: tuple[str, ...] = LIBRARY) -> Iterator[tuple[str, Path]]:
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            yield name.removesuffix(".__init__"), path


@functools.cache
def tree(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once per run (every check walks every module)."""
    return ast.parse(path.read_text(), str(path))


def docstring_lines(node: ast.AST) -> set[int]:
    """The lines of every docstring inside ``node`` (its own and its members')."""
    out: set[int] = set()
    for inner in ast.walk(node):
        body = getattr(inner, "body", None)
        if isinstance(body, list) and body:
            first = body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                assert first.end_lineno is not None
                out.update(range(first.lineno, first.end_lineno + 1))
    return out


def logic_lines(node: ast.ClassDef, source: list[str]) -> int:
    """A class's lines that are not blank, comments or docstrings."""
    assert node.end_lineno is not None
    skip = docstring_lines(node)
    return sum(
        1
        for n in range(node.lineno, node.end_lineno + 1)
        if n not in skip and source[n - 1].strip() and not source[n - 1].strip().startswith("#")
    )


def long_modules(packages: tuple[str, ...], limit: int) -> dict[str, int]:
    return {
        name: n
        for name, path in modules(packages)
        if (n := len(path.read_text().splitlines())) > limit
    }


def long_functions(packages: tuple[str, ...], limit: int) -> dict[str, int]:
    long = {}
    for name, path in modules(packages):
        for node in ast.walk(tree(path)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                size = node.end_lineno - node.lineno + 1
                if size > limit:
                    long[f"{name}.{node.name}"] = size
    return long


def test_no_library_module_is_over_600_lines() -> None:
    assert long_modules(LIBRARY, MAX_MODULE_LINES) == {}


def test_no_library_function_is_over_60_lines() -> None:
    assert long_functions(LIBRARY, MAX_FUNCTION_LINES) == {}


def test_no_class_holds_over_300_lines_of_logic() -> None:
    large = {}
    for name, path in modules():
        source = path.read_text().splitlines()
        for node in ast.walk(tree(path)):
            if isinstance(node, ast.ClassDef):
                size = logic_lines(node, source)
                if size > MAX_CLASS_LOGIC_LINES:
                    large[f"{name}.{node.name}"] = size
    assert large == {}


def test_no_two_library_classes_share_a_name() -> None:
    """A name means one thing: two classes of one name are two things a reader mixes up."""
    where: dict[str, set[str]] = {}
    for name, path in modules():
        for node in tree(path).body:
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, set()).add(name)
    shared = {cls: mods for cls, mods in where.items() if len(mods) > 1}
    assert shared == {}


ROOT_MODULES = {
    "core.py": "the façade, Sidecar",
    "interface.py": "what a caller may write against, here or over HTTP",
    "validate.py": "the façade's argument checks",
    "boundary.py": "where a store's errors become the library's",
    "errors.py": "every error and how a shell shows it",
    "faults.py": "what a store may fail with; the named points of a move",
    "model.py": "the domain types every room passes",
    "results.py": "the typed answers the shells show",
    "wire.py": "those answers as JSON",
    "settings.py": "the one settings object",
    "limits.py": "request limits and status words",
    "classify.py": "whether a failure is deterministic (intake and the memory ask)",
    "metrics.py": "the Prometheus text format",
}
"""The modules beside ``sidecar/``'s packages: the façade and what every room uses.
Everything else lives in the room of its concept (opening a home in ``app/``, lookup in
``lookup/``, trust in ``trust/``, the archive's side in ``archive/``...)."""


def test_the_librarys_root_holds_only_the_facade_and_what_every_room_uses() -> None:
    root = {p.name for p in (ROOT / "sidecar").glob("*.py") if p.name != "__init__.py"}
    assert root == set(ROOT_MODULES)


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The library modules ``name`` imports, wherever in it (type-only ones too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree(path)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            ]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_circles(packages: tuple[str, ...]) -> list[list[str]]:
    """Every group of ``packages``' modules that import each other round a circle."""
    paths = dict(modules(packages))
    known = set(paths)
    graph = {name: imports_of(name, path, known) for name, path in paths.items()}
    circles: list[list[str]] = []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return circles


def test_no_import_circle_between_library_modules() -> None:
    assert import_circles(LIBRARY) == []


def test_no_sql_outside_the_storage_repositories() -> None:
    found = []
    for name, path in modules():
        if name.startswith(("sidecar.storage", "cold_store", "indexes")):
            continue  # the state's repositories; the cold store's own key index
        for node in ast.walk(tree(path)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if SQL.match(node.value):
                    found.append(f"{name}:{node.lineno}")
            elif isinstance(node, ast.Attribute) and node.attr in ("execute", "executemany"):
                found.append(f"{name}:{node.lineno} .{node.attr}")
    assert found == []


def test_the_checks_can_fail(tmp_path: Path) -> None:
    """Each rule above finds what it is about (a test that cannot fail holds nothing)."""
    sample = tmp_path / "sample.py"
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES + 1))
    sample.write_text(f'def long():\n{body}\n\nQ = "SELECT 1 FROM t"\n')
    parsed = tree(sample)
    functions = [n for n in ast.walk(parsed) if isinstance(n, ast.FunctionDef)]
    assert functions[0].end_lineno is not None
    assert functions[0].end_lineno - functions[0].lineno + 1 > MAX_FUNCTION_LINES
    constants = [n.value for n in ast.walk(parsed) if isinstance(n, ast.Constant)]
    assert any(isinstance(c, str) and SQL.match(c) for c in constants)


# ---- the benchmarks --------------------------------------------------------------------
BENCHMARKS = ("benchmarks",)


def test_no_benchmark_module_is_over_600_lines() -> None:
    assert long_modules(BENCHMARKS, MAX_MODULE_LINES) == {}


def test_no_benchmark_function_is_over_60_lines() -> None:
    assert long_functions(BENCHMARKS, MAX_FUNCTION_LINES) == {}


def test_no_import_circle_between_benchmark_modules() -> None:
    assert import_circles(BENCHMARKS) == []

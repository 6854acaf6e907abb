"""The shape a newcomer can live in: small modules and classes, no import circle, short
module docstrings, imports at the top unless a heavy dependency must stay unloaded, and
nothing in production code that dates itself or points outside the repository."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import networkx as nx
import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("core", "crawl", "retrieval", "rerank", "online", "training", "api", "cli")
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 400
MAX_MODULE_DOCSTRING_LINES = 15
LAZY_REASON = "# lazy:"
"""The comment an import inside a function carries: why it must not load with the module."""


def production_files() -> Iterator[Path]:
    for package in PACKAGES:
        yield from sorted((REPO / package).rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _trees() -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(encoding="utf-8")) for path in production_files()}


TREES = _trees()
MODULES = {module_name(path) for path in TREES}


def _ours(name: str) -> str | None:
    """The in-house module an import names (``pkg.mod.Class`` → ``pkg.mod``), or None."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports(tree: ast.Module, *, top_level: bool) -> Iterator[tuple[ast.stmt, str]]:
    """In-house imports at module level (``top_level``) or inside functions, with the module named."""
    nodes = tree.body if top_level else ast.walk(tree)
    for node in nodes:
        if top_level and isinstance(node, ast.If):  # ``if TYPE_CHECKING:`` blocks
            continue
        if not top_level and not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        inner = [node] if top_level else list(ast.walk(node))
        for stmt in inner:
            if isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    if (mod := _ours(alias.name)) is not None:
                        yield stmt, mod
            elif isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.level == 0:
                for alias in stmt.names:
                    if (mod := _ours(f"{stmt.module}.{alias.name}") or _ours(stmt.module)) is not None:
                        yield stmt, mod


def test_no_module_is_over_600_lines() -> None:
    long = {
        str(path.relative_to(REPO)): n
        for path in TREES
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not long, long


def test_no_class_is_over_400_lines() -> None:
    long = {
        f"{path.relative_to(REPO)}:{node.name}": node.end_lineno - node.lineno + 1
        for path, tree in TREES.items()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES
    }
    assert not long, long


def test_module_docstrings_are_short() -> None:
    long = {
        str(path.relative_to(REPO)): len(doc.splitlines())
        for path, tree in TREES.items()
        if (doc := ast.get_docstring(tree)) and len(doc.splitlines()) > MAX_MODULE_DOCSTRING_LINES
    }
    assert not long, long


def test_no_import_circle() -> None:
    """Every in-house import, at the top or inside a function, is an edge: a circle broken by
    a function-level import is still a circle."""
    graph = nx.DiGraph()
    for path, tree in TREES.items():
        this = module_name(path)
        for top_level in (True, False):
            for _, mod in _imports(tree, top_level=top_level):
                if mod != this and not this.startswith(mod + "."):  # a package's own __init__
                    graph.add_edge(this, mod)
    cycles = [cycle for cycle in nx.simple_cycles(graph) if len(cycle) > 1]
    assert not cycles, sorted(cycles, key=len)[:5]


def test_imports_inside_functions_say_why() -> None:
    """An in-house import inside a function keeps a heavy dependency (torch, ray, …) unloaded
    until needed; the line (or the one above) says so with ``# lazy: <reason>``."""
    unexplained = []
    for path, tree in TREES.items():
        lines = path.read_text(encoding="utf-8").splitlines()
        for stmt, _ in _imports(tree, top_level=False):
            here = lines[stmt.lineno - 1]
            above = lines[stmt.lineno - 2] if stmt.lineno > 1 else ""
            if LAZY_REASON not in here and LAZY_REASON not in above:
                unexplained.append(f"{path.relative_to(REPO)}:{stmt.lineno}")
    assert not unexplained, sorted(set(unexplained))


DATED = re.compile(r"\b20[12]\d-[01]\d-[0-3]\d\b")


@pytest.mark.parametrize("pattern", [DATED, re.compile(r"\.\./shared|shared/data")])
def test_production_code_neither_dates_itself_nor_points_outside_the_repository(
    pattern: re.Pattern[str],
) -> None:
    hits = [
        f"{path.relative_to(REPO)}:{i}: {line.strip()}"
        for path in TREES
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line) and "date-format example" not in line
    ]
    assert not hits, hits

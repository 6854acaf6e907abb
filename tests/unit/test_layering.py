"""Dependencies point one way: core ← crawl; core ← retrieval ← rerank ← training; core ← online;
api (the serving process) on top of all but training; cli (the ``trawl`` command) on top of everything.

Serving must never import ``training``: what a live process needs for experiments is
``online``, and ``training`` reads the logs ``online`` writes.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ALLOWED: dict[str, set[str]] = {
    "core": {"core"},
    "crawl": {"core", "crawl"},
    "retrieval": {"core", "retrieval"},
    "rerank": {"core", "retrieval", "rerank"},
    "online": {"core", "online"},
    "training": {"core", "retrieval", "rerank", "online", "training"},
    "api": {"core", "crawl", "retrieval", "rerank", "online", "api"},
    "cli": {"core", "crawl", "retrieval", "rerank", "online", "training", "api", "cli"},
}
NEVER_TRAINING = ("api", "retrieval", "rerank", "online")
HEAVY = {"torch", "tantivy", "hnswlib", "sentence_transformers", "lightgbm"}


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_no_upward_imports(package: str) -> None:
    ours = set(ALLOWED)
    bad = {
        f"{path.relative_to(REPO)} imports {name}"
        for path in (REPO / package).rglob("*.py")
        for name in imports_of(path) & ours - ALLOWED[package]
    }
    assert not bad, sorted(bad)


@pytest.mark.parametrize("package", NEVER_TRAINING)
def test_serving_never_imports_training(package: str) -> None:
    assert "training" not in ALLOWED[package]
    bad = {
        str(path.relative_to(REPO))
        for path in (REPO / package).rglob("*.py")
        if "training" in imports_of(path)
    }
    assert not bad, sorted(bad)


def test_core_stays_light() -> None:
    bad = {
        f"{path.relative_to(REPO)} imports {name}"
        for path in (REPO / "core").rglob("*.py")
        for name in imports_of(path) & HEAVY
    }
    assert not bad, sorted(bad)

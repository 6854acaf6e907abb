"""Array loads take turns: numpy's header parsing is not thread-safe on CPython 3.11 (gh-106905)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from retrieval.index.arrays import load_array

REPO = Path(__file__).resolve().parents[3]
PRODUCTION = ("core", "crawl", "retrieval", "rerank", "online", "training", "api", "cli")


def test_load_array_reads_plain_and_mapped(tmp_path: Path) -> None:
    path = tmp_path / "a.npy"
    np.save(path, np.arange(5, dtype=np.uint64))
    assert load_array(path).tolist() == [0, 1, 2, 3, 4]
    mapped = load_array(path, mmap_mode="r")
    assert isinstance(mapped, np.memmap) and mapped[3] == 3


def test_no_production_module_calls_np_load_itself() -> None:
    """A search thread reopening a generation while another loads arrays met a SystemError
    (HTTP 500) in numpy's header parsing; every load goes through ``load_array``'s lock."""
    calls = [
        f"{path.relative_to(REPO)}:{n}"
        for package in PRODUCTION
        for path in sorted((REPO / package).rglob("*.py"))
        if path.name != "arrays.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if re.search(r"\b(np|numpy)\.load\(", line)
    ]
    assert calls == []

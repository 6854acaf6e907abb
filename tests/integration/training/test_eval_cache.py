"""``trawl eval``'s cached index is rebuilt when its lexical format is outdated.

Before, an index cached under an older format was reused and then refused when opened,
and feature frames cached beside it would have described candidates the new index no
longer produces.
"""

from __future__ import annotations

import json
from pathlib import Path

from core.settings import Settings
from retrieval.index import layout
from retrieval.index.lexical import LexicalShard
from retrieval.index.lexical_schema import FORMAT_VERSION
from retrieval.text.tokenizer import ANALYSIS_VERSION
from training.datasets import BeirDataset
from training.evaluate import cached_index


def write_collection(root: Path) -> Path:
    (root / "qrels").mkdir(parents=True)
    docs = [
        {"_id": "d1", "title": "The if statement", "text": "Conditional execution of a suite."},
        {"_id": "d2", "title": "Loops", "text": "A loop repeats a suite of statements."},
    ]
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (root / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "if statement"}) + "\n")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    return root


class Cached:
    """A tiny collection's cached evaluation index, with a feature frame scored on it."""

    def __init__(self, tmp_path: Path) -> None:
        self.settings = Settings(data_dir=tmp_path / "data")
        self.dataset = BeirDataset(write_collection(tmp_path / "tiny"))
        self.index_dir, self.cache_dir = self.open()
        self.frame = self.cache_dir / "ltr-features-0.parquet"
        self.frame.write_bytes(b"scored on the old index")

    def open(self) -> tuple[Path, Path]:
        return cached_index(self.dataset, self.settings)


def test_an_outdated_cached_index_is_rebuilt_and_its_frames_dropped(tmp_path: Path) -> None:
    cached = Cached(tmp_path)
    index_dir, cache_dir = cached.index_dir, cached.cache_dir

    # A current cache is reused as it is.
    assert cached.open() == (index_dir, cache_dir)
    assert cached.frame.exists()

    manifest = layout.lexical_manifest(layout.lexical_dir(index_dir, 0))
    raw = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**raw, "format_version": FORMAT_VERSION - 1}))

    assert cached.open() == (index_dir, cache_dir)
    assert not cached.frame.exists()
    assert json.loads(manifest.read_text())["format_version"] == FORMAT_VERSION
    assert LexicalShard(layout.lexical_dir(index_dir, 0)).num_docs == 2


def test_a_cached_index_of_another_text_analysis_is_rebuilt(tmp_path: Path) -> None:
    """The tokens changed (CJK bigrams) while every format stayed: the cache must notice."""
    cached = Cached(tmp_path)
    manifest = layout.manifest_file(cached.index_dir)
    raw = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({k: v for k, v in raw.items() if k != "analysis"}))

    assert cached.open() == (cached.index_dir, cached.cache_dir)
    assert not cached.frame.exists()
    assert json.loads(manifest.read_text())["analysis"] == ANALYSIS_VERSION

"""A BEIR collection's training frame built from scratch: vectors, candidates, PageRank, labels (slow)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from core.settings import Settings
from rerank.features import SCHEMA
from training.datasets import BeirDataset
from training.frames import collection_frame
from training.pagerank import beir_pagerank

DOCS = [
    ("d1", "Wing flutter", "Flutter of a swept wing at transonic speed.", ["d2", "d3"]),
    ("d2", "Wing lift", "Lift of a thin wing in a slipstream.", ["d1"]),
    ("d3", "Boundary layers", "Heat transfer in a laminar boundary layer.", ["d1"]),
    ("d4", "Bread", "Knead the dough and bake the bread.", []),
    ("d5", "Shock waves", "Shock wave boundary layer interaction on a wing.", ["d1", "d3"]),
]


def _collection(root: Path) -> Path:
    root.mkdir(parents=True)
    with (root / "corpus.jsonl").open("w") as f:
        for doc_id, title, text, links in DOCS:
            f.write(
                json.dumps({"_id": doc_id, "title": title, "text": text, "metadata": {"links": links}}) + "\n"
            )
    with (root / "queries.jsonl").open("w") as f:
        f.write(json.dumps({"_id": "1", "text": "wing flutter"}) + "\n")
        f.write(json.dumps({"_id": "2", "text": "boundary layer heat"}) + "\n")
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n1\td1\t2\n1\td2\t1\n2\td3\t1\n")
    return root


@pytest.mark.slow
def test_collection_frame_is_built_then_read_from_its_cache(tmp_path: Path) -> None:
    root = _collection(tmp_path / "tiny")
    settings = Settings(data_dir=tmp_path / "data")
    progress: list[tuple[int, int]] = []
    built = collection_frame(root, settings, depth=10, on_progress=lambda d, t: progress.append((d, t)))
    frame = built.frame
    assert progress == [(1, 2), (2, 2)]
    assert built.path.exists() and built.depth == 10 and built.dataset == "tiny"
    assert frame.columns == ["dataset", "qid", "doc_id", "label", *SCHEMA]
    assert frame["qid"].unique(maintain_order=True).to_list() == ["1", "2"]
    dataset = BeirDataset.open(root)
    labels = {(r["qid"], r["doc_id"]): r["label"] for r in frame.iter_rows(named=True)}
    assert labels[("1", dataset.doc_id("d1"))] == 2 and labels[("1", dataset.doc_id("d2"))] == 1
    assert labels[("2", dataset.doc_id("d3"))] == 1
    # vectors: every document is a vector candidate of a 5-document collection
    assert not frame["vector_rank"].is_nan().any() and not frame["cosine"].is_nan().any()
    # PageRank from metadata.links, scaled to mean 1
    pagerank = beir_pagerank(root)
    for row in frame.iter_rows(named=True):
        assert row["pagerank"] == pytest.approx(pagerank[row["doc_id"]])
    assert frame.filter(pl.col("doc_id") == dataset.doc_id("d1"))["pagerank"][0] > 1.0
    again = collection_frame(root, settings, depth=10, on_progress=lambda d, t: progress.append((d, t)))
    assert again.path == built.path and len(progress) == 2  # from the Parquet cache
    assert again.frame.equals(frame)

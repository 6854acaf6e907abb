"""Feature frames on Ray: per-query tasks give the local frame, cached where `trawl train ltr` reads it."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from types import ModuleType

import pytest
from polars.testing import assert_frame_equal

from core.settings import Settings
from training.datasets import BeirDataset
from training.evaluate import parse_queries
from training.frames import collection_frame
from training.ray_training import ray_collection_frame

pytestmark = [
    pytest.mark.slow,
    pytest.mark.ray,
]  # frame workers load the encoder and a small index with vectors


def cranfield_slice(eval_dir: Path, out: Path, queries: int = 8, docs: int = 120) -> Path:
    """The first ``queries`` judged Cranfield queries over their judged documents plus the first
    ``docs`` of the corpus, as a BEIR collection: small enough for a fresh clone to index and
    embed on a loaded machine, with every candidate a query can have judged or not."""
    source = BeirDataset.open(eval_dir / "cranfield")
    chosen = dict(itertools.islice(source.judged_queries().items(), queries))
    qrels = source.qrels()
    wanted = {doc for q in chosen for doc in qrels[q]}
    (out / "qrels").mkdir(parents=True)
    lines = (eval_dir / "cranfield" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    kept = [line for i, line in enumerate(lines) if i < docs or json.loads(line)["_id"] in wanted]
    (out / "corpus.jsonl").write_text("\n".join(kept) + "\n", encoding="utf-8")
    (out / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in chosen.items()), encoding="utf-8"
    )
    rows = [f"{q}\t{d}\t{g}" for q in chosen for d, g in qrels[q].items()]
    (out / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(rows) + "\n")
    return out


@pytest.mark.timeout(1200)  # Ray Data starts an encoder per actor: minutes on a loaded machine
def test_ray_frame_is_the_local_frame(eval_dir: Path, ray_local: ModuleType, tmp_path: Path) -> None:
    collection = cranfield_slice(eval_dir, tmp_path / "cranfield-slice")
    queries = parse_queries(BeirDataset.open(collection).judged_queries())
    settings = Settings(data_dir=tmp_path / "data")
    path, frame = ray_collection_frame(
        collection, settings, queries=queries, depth=20, actors=2, queries_per_task=2
    )
    try:
        assert frame.height > 0 and frame["qid"].unique(maintain_order=True).to_list() == list(queries)
        cached = collection_frame(collection, settings, queries=queries, depth=20)
        assert cached.path == path
        assert_frame_equal(cached.frame, frame)
        path.unlink()
        local = collection_frame(collection, settings, queries=queries, depth=20)
        assert_frame_equal(local.frame, frame)
    finally:
        path.unlink(missing_ok=True)

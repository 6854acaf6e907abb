"""A crawl directory of real (Cranfield) documents and its index built by the incremental indexer."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from pathlib import Path

from core.crawldir import CrawlDir
from core.docstore import DocStore
from core.types import Document
from retrieval.index.incremental import IncrementalIndexer
from training.datasets import BeirDataset


@dataclass
class Crawled:
    """What an update test needs: the documents, the docstore they are in, the indexer and its index."""

    data: Path
    index: Path
    docs: list[Document]
    store: DocStore
    indexer: IncrementalIndexer


def crawled_index(eval_dir: Path, tmp_path: Path, *, docs: int, shards: int) -> Crawled:
    """``docs`` Cranfield documents fetched at t=100 in a docstore, compacted into ``shards`` shards."""
    data, index = tmp_path / "crawl", tmp_path / "index"
    documents = [
        dataclasses.replace(d, fetched_at=100.0)
        for d in itertools.islice(BeirDataset.open(eval_dir / "cranfield").iter_documents(), docs)
    ]
    store = DocStore(CrawlDir(data).docs)
    store.append(documents)
    indexer = IncrementalIndexer(data, index, shards=shards)
    indexer.compact()
    return Crawled(data, index, documents, store, indexer)

"""A judged collection's cached evaluation index, and its queries parsed as served.

Shared by evaluation (``training.evaluate``) and training (frames, fold models, the
reranker), so neither has to import the other.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Mapping
from pathlib import Path

from core.errors import QueryError
from core.settings import Settings
from core.types import Query
from retrieval.index import layout
from retrieval.index.build import build_index
from retrieval.index.lexical_schema import read_lexical_manifest
from retrieval.index.manifest import IndexManifest
from retrieval.text.analyzer import parse_query
from retrieval.text.tokenizer import ANALYSIS_VERSION
from training.datasets import BeirDataset

logger = logging.getLogger(__name__)


def cached_index(dataset: BeirDataset, settings: Settings, *, shards: int = 1) -> tuple[Path, Path]:
    """Index and scratch directory for a dataset, rebuilt only when the corpus changed."""
    suffix = f"-s{shards}" if shards > 1 else ""
    cache_dir = settings.data_dir / "cache" / "eval" / f"{dataset.name}-{dataset.fingerprint()}{suffix}"
    index_dir = cache_dir / "index"
    try:
        manifest = IndexManifest.load(index_dir)
        if manifest.analysis != ANALYSIS_VERSION:
            raise ValueError("built with another text analysis")
        for shard in range(manifest.shards):
            read_lexical_manifest(layout.lexical_dir(index_dir, shard))
    except Exception:  # noqa: BLE001 - any unreadable or outdated cache is rebuilt
        logger.info("building the evaluation index of %s in %s", dataset.name, index_dir)
        # Frames and fold models cached beside an outdated index scored its candidates:
        # they go with it.
        shutil.rmtree(cache_dir, ignore_errors=True)
        cache_dir.mkdir(parents=True, exist_ok=True)
        build_index(dataset.iter_documents(), index_dir, shards=shards, source=f"beir:{dataset.root}")
    return index_dir, cache_dir


def parse_queries(texts: Mapping[str, str]) -> dict[str, Query]:
    """Query id → the query as the service parses it (a raw query where parsing fails)."""
    parsed: dict[str, Query] = {}
    for qid, text in texts.items():
        try:
            parsed[qid] = parse_query(text)
        except QueryError:
            parsed[qid] = Query(raw=text)
    return parsed

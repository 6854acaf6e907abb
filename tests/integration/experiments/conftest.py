"""Shared fixtures: a data dir whose evaluation indexes are built once, and a known-worse ranker."""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path

import pytest

from core.types import Query, ScoredDoc
from training.rankers import Bm25Ranker, EvalContext, EvalRanker, register_ranker

SHUFFLED = "test-bm25-shuffled"


class ShuffledBm25:
    """BM25's top 100, shuffled per query (seeded by the query id): clearly worse, same recall@100."""

    name = SHUFFLED

    def __init__(self, inner: Bm25Ranker) -> None:
        self.inner = inner

    def run(self, queries: Mapping[str, Query], k: int) -> dict[str, list[ScoredDoc]]:
        out: dict[str, list[ScoredDoc]] = {}
        for qid, hits in self.inner.run(queries, 100).items():
            order = list(hits)
            random.Random(qid).shuffle(order)
            out[qid] = [ScoredDoc(h.doc_id, float(len(order) - i)) for i, h in enumerate(order)]
        return out


@register_ranker(SHUFFLED)
def _shuffled(context: EvalContext) -> EvalRanker:
    return ShuffledBm25(Bm25Ranker(context.lexical()))


@pytest.fixture(scope="session")
def exp_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("exp-data")

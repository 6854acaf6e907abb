"""The served ``hybrid-rrf`` fuses with ``search.rrf_k``, the k the evaluation harness reads."""

from __future__ import annotations

from pathlib import Path

from core.settings import SearchSettings, Settings
from core.types import DocId
from retrieval.index.build import build_index
from retrieval.query.hybrid import Candidate
from retrieval.query.ranking import RankContext
from retrieval.query.service import SearchService
from retrieval.text.analyzer import parse_query
from tests.fixtures.docs import SMALL_WEB

CANDIDATES = [
    Candidate(DocId(1), 0, 3.0, None, 1, None),
    Candidate(DocId(2), 0, 2.0, 0.9, 3, 1),
]


def test_served_rrf_uses_the_configured_k(tmp_path: Path) -> None:
    build_index(SMALL_WEB, tmp_path / "index")
    service = SearchService.open(tmp_path / "index", SearchSettings(rrf_k=1))
    try:
        stage = service.stages["hybrid-rrf"]
        out = stage.rank(
            parse_query("wing"), CANDIDATES, explain=True, context=RankContext(fetch=lambda _: {})
        )
    finally:
        service.generations.close()
    # k = 1: doc 2 scores 1/4 + 1/2 = 0.75, doc 1 scores 1/2.
    assert [(h.doc_id, h.score) for h in out.ranked] == [(DocId(2), 0.75), (DocId(1), 0.5)]
    assert out.explain[DocId(2)]["rrf_k"] == 1


def test_offline_and_serving_read_one_setting() -> None:
    assert Settings(search={"rrf_k": 7}).search.rrf_k == 7
    assert not hasattr(Settings().embed, "rrf_k")
